//! The progress bar: on stderr, hidden when stderr is not a terminal (tests, CI, pipes).

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// A progress bar over `len` steps.
pub fn bar(len: u64, what: &str) -> ProgressBar {
    let pb = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr());
    if let Ok(style) =
        ProgressStyle::with_template("{prefix} [{elapsed_precise}] {bar:30} {pos}/{len} {msg}")
    {
        pb.set_style(style);
    }
    pb.set_prefix(what.to_owned());
    pb
}

/// Print a line above the bar (or plainly when the bar is hidden).
pub fn note(pb: &ProgressBar, line: &str) {
    if pb.is_hidden() {
        eprintln!("{line}");
    } else {
        pb.println(line);
    }
}
