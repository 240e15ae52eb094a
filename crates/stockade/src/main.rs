//! The `stockade` binary: a thin door onto the engine. `main → run → ExitCode`; errors are
//! printed as one plain sentence with what to do, and a closed stdout (`stockade read … | head`)
//! is success, not an error.

/// `eprintln!` that never panics: with stderr closed, a message is lost, not the exit code
/// (std's panics, which would exit 101). Defined before the modules so they all use it.
macro_rules! eprintln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

/// `eprint!` that never panics (see `eprintln!`).
macro_rules! eprint {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = write!(std::io::stderr(), $($arg)*);
    }};
}

mod args;
mod caller;
mod cli;
mod cmd;
mod examples;
mod global;
mod out;
mod sandbox_args;
mod usage;

use std::process::ExitCode;

use clap::Parser;

/// Undo what a parent may have left us: a blocked signal mask and ignored termination signals.
/// Some agents start MCP servers with almost every signal blocked; inherited as is, `stockade mcp`
/// and the daemon it starts would never see SIGTERM or SIGINT (and would be SIGKILLed instead of
/// shutting down gracefully), and every command the daemon runs would inherit the mask too.
/// An ignored SIGCHLD would make the kernel reap our children before we can wait for them.
/// SIGHUP keeps its disposition so `nohup stockade …` still means what it says; SIGPIPE is
/// ignored by the Rust runtime on purpose (a closed stdout is an EPIPE error we report as success).
fn reset_inherited_signals() {
    use nix::sys::signal::{SigHandler, SigSet, SigmaskHow, Signal, pthread_sigmask, signal};
    // Failures are ignored: these calls only fail for invalid arguments, and a start-up that
    // cannot reset them is no worse off than one that never tried.
    let _ = pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&SigSet::empty()), None);
    for sig in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGQUIT, Signal::SIGCHLD] {
        // SAFETY: `SigDfl` installs no handler code; it is called before any other thread exists.
        let _ = unsafe { signal(sig, SigHandler::SigDfl) };
    }
}

/// The executable every session's keeper runs (`stockade_proc::run_if_keeper`): this one.
pub(crate) const KEEPER_EXE: &str = "/proc/self/exe";

fn main() -> ExitCode {
    // First of all: a session keeper runs nothing else of this program.
    stockade_proc::run_if_keeper();
    reset_inherited_signals();
    let cli = match cli::Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => e.exit(), // --help, --version
        Err(e) => {
            eprintln!(
                "stockade: {}",
                usage::sentence(&e, &std::env::args_os().collect::<Vec<_>>())
            );
            return ExitCode::from(2);
        }
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("STOCKADE_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        // A message that cannot be written (a full disk under daemon.log, a closed stderr) is
        // dropped: reporting that failure on stderr again would panic in whichever thread
        // logged, the drain thread included.
        .log_internal_errors(false)
        // Colour only for a person at a terminal: not in daemon.log, pipes or agents' logs.
        .with_ansi(out::colour_ok())
        .init();
    match cmd::dispatch(cli) {
        Ok(code) => code,
        Err(e) if out::is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("stockade: {}", out::error_text(&e));
            ExitCode::from(2)
        }
    }
}
