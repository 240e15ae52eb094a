//! A foreground `stockade run` on a terminal prints the output as it comes, as a shell would:
//! driven through a real pseudo-terminal, `a` is on the screen before `b` is printed; then the
//! summary. Piped, the bounded answer comes at the end (tested in `cli`).

use std::time::{Duration, Instant};

use stockade_testkit::pty::{Pty, PtyClient};
use stockade_testkit::{Home, PATIENCE};

#[test]
fn a_foreground_run_on_a_terminal_streams_a_before_b() {
    let home = Home::new();
    let pty = Pty::open();
    let mut cmd = home.cmd(&["run", "echo a; sleep 1; echo b; exit 3"]);
    cmd.stdout(pty.stdio()).stderr(pty.stdio());
    let mut client = PtyClient(cmd.spawn().unwrap());
    drop(cmd);
    let screen = pty.screen();
    drop(pty); // only the client holds the terminal: the master reads EIO when it exits
    let shown = || screen.text();

    // The first line is on the screen while the command is still sleeping: `b` is not.
    let deadline = Instant::now() + PATIENCE;
    loop {
        let now = shown();
        if now.contains("a\r\n") {
            assert!(!now.contains("b\r\n"), "a and b came together: {now:?}");
            assert!(!now.contains("Exit code"), "the summary came before the output: {now:?}");
            break;
        }
        assert!(Instant::now() < deadline, "no `a` on the terminal: {now:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(client.0.try_wait().unwrap(), None, "the run is still going when `a` shows");

    let status = client.wait_exit(&screen, "the run");
    assert_eq!(status.code(), Some(3));
    let all = screen.finish();
    // The output once (not again in the summary), then the status and where all of it is kept.
    assert_eq!(all.matches("b\r\n").count(), 1, "{all:?}");
    let b = all.find("b\r\n").unwrap();
    let summary = &all[b..];
    assert!(summary.contains("Exit code: 3\r\nWall time: "), "{all:?}");
    assert!(
        summary.contains("[Full output: ") && summary.contains("Read it again: stockade read sh-"),
        "{all:?}"
    );
}
