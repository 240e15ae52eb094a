//! Input to a non-PTY session through its stdin pipe: bounded writes, close = EOF, and a clear
//! error (never a hang, never SIGPIPE) when the command is not reading or is gone.

use std::time::Duration;

use crate::pty_common::{BOUND, MODES, Run};
use stockade_proc::{InputError, write_input};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cat_echoes_input_and_exits_on_close() {
    for mode in MODES {
        let mut run = Run::piped(mode, "cat", "cat");
        run.write(b"first line\n");
        run.wait_for(0, "first line\n").await;
        run.write(b"second\x00bytes\xff\nno newline at end");
        // Closing stdin is dropping the write end: cat reads EOF and exits 0.
        drop(run.stdin.take());
        let exit = tokio::time::timeout(BOUND, run.tree.wait_root()).await.unwrap().unwrap();
        assert_eq!(exit.code, Some(0));
        run.wait_drained();
        // Exact bytes, on stdout, nothing on stderr (no terminal: no echo, no CRLF).
        let expected = b"first line\nsecond\x00bytes\xff\nno newline at end";
        assert_eq!(run.raw(), expected);
        let s = run.log.stats();
        let n = expected.len() as u64;
        assert_eq!((s.stream_bytes.stdout, s.stream_bytes.stderr, s.stream_bytes.pty), (n, 0, 0));
        run.terminate_and_verify().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_not_reading_makes_the_write_time_out() {
    let run = Run::piped(crate::process_common::Mode::Fallback, "noread", "sleep 1000");
    let big = vec![b'x'; 8 * 1024 * 1024];
    let err =
        write_input(run.stdin.as_ref().unwrap(), &big, Duration::from_millis(200)).unwrap_err();
    match &err {
        InputError::Timeout { written, total, .. } => {
            // The pipe took what fit, then the deadline passed.
            assert!(*written > 0 && *written < *total, "{err}");
        }
        other => panic!("expected a timeout, got {other}"),
    }
    assert!(err.to_string().contains("not reading"), "{err}");
    run.terminate_and_verify().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writing_to_a_finished_command_is_closed_not_sigpipe() {
    let run = Run::piped(crate::process_common::Mode::Fallback, "gone", "exit 3");
    let exit = tokio::time::timeout(BOUND, run.tree.wait_root()).await.unwrap().unwrap();
    assert_eq!(exit.code, Some(3));
    // Another test's child, forked before our spawn closed the pipe's read end and not yet at
    // `exec` (cgroup placement can take milliseconds), may hold that end for a moment: a write
    // may still land in the pipe until it lets go. Closed is what it settles on.
    let deadline = std::time::Instant::now() + BOUND;
    let err = loop {
        match write_input(run.stdin.as_ref().unwrap(), b"late\n", Duration::from_secs(1)) {
            Err(e) => break e,
            Ok(()) => {
                assert!(std::time::Instant::now() < deadline, "writes never failed");
                tokio::time::sleep(crate::pty_common::POLL).await;
            }
        }
    };
    assert!(matches!(err, InputError::Closed { written: 0, total: 5 }), "{err}");
    run.terminate_and_verify().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminal_nobody_reads_times_out_too() {
    // A PTY whose program never reads: the terminal's input queue fills, the write is bounded.
    // Lines, not one endless line: a canonical terminal whose queue is full *without* a newline
    // takes further characters and drops them (so erase still works), and a write of those
    // could finish, only lines fill it for good.
    let run = Run::pty(
        crate::process_common::Mode::Fallback,
        "pty-noread",
        "sleep",
        &["1000"],
        &[],
        crate::pty_common::default_size(),
    );
    let err = write_input(
        run.master.as_ref().unwrap(),
        &b"y\n".repeat(512 * 1024),
        Duration::from_millis(200),
    )
    .unwrap_err();
    assert!(matches!(err, InputError::Timeout { .. }), "{err}");
    run.terminate_and_verify().await;
}
