//! The model's views of a full-screen program on a PTY: `render_screen` shows what the user
//! would see, `strip_ansi` the text without escape codes.

use std::io::Write;

use crate::pty_common::{BOUND, MODES, Run};
use stockade_log::{render_screen, strip_ansi};
use stockade_proto::rpc::PtySize;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn less_renders_the_first_screen_of_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f.txt");
    let mut f = std::fs::File::create(&path).unwrap();
    for i in 1..=200 {
        writeln!(f, "line {i:03} of the file").unwrap();
    }
    drop(f);
    let size = PtySize { rows: 10, cols: 40 };
    for mode in MODES {
        let run = Run::pty(mode, "less", "less", &[path.to_str().unwrap()], &[("LESS", "")], size);
        // less draws its first page and waits on the terminal.
        run.wait_for(0, "line 009 of the file").await;
        let deadline = std::time::Instant::now() + BOUND;
        let screen = loop {
            let screen = run.log.render_screen(size).unwrap();
            // The status line (the file name) is drawn last.
            if screen.lines().count() == 10 || std::time::Instant::now() > deadline {
                break screen;
            }
            tokio::time::sleep(crate::pty_common::POLL).await;
        };
        let lines: Vec<&str> = screen.lines().collect();
        assert_eq!(lines.len(), 10, "{screen}");
        assert_eq!(lines[0], "line 001 of the file", "{screen}");
        assert_eq!(lines[8], "line 009 of the file", "{screen}");
        assert!(lines[9].contains("f.txt"), "{screen}");
        // The raw log is full of escape codes; the pure function over it agrees with the log's.
        let raw = run.raw();
        assert!(raw.contains(&0x1b));
        assert_eq!(render_screen(&raw, size.rows, size.cols), screen);
        assert!(!strip_ansi(&raw).contains('\x1b'));

        // Page down: the screen moves on.
        let from = run.offset();
        run.write(b" ");
        run.wait_for(from, "line 018").await;
        let deadline = std::time::Instant::now() + BOUND;
        loop {
            let screen = run.log.render_screen(size).unwrap();
            if screen.starts_with("line 010 of the file") && screen.contains("line 018") {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "{screen}");
            tokio::time::sleep(crate::pty_common::POLL).await;
        }

        // q quits; less leaves the alternate screen.
        run.write(b"q");
        let exit = tokio::time::timeout(BOUND, run.tree.wait_root()).await.unwrap().unwrap();
        assert_eq!(exit.code, Some(0));
        run.wait_drained();
        assert!(!run.log.render_screen(size).unwrap().contains("line 010"));
        run.terminate_and_verify().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn top_batch_renders_its_header() {
    let size = PtySize { rows: 24, cols: 120 };
    let run = Run::pty(
        crate::process_common::Mode::Fallback,
        "top",
        "top",
        &["-b", "-n", "1"],
        &[],
        size,
    );
    let exit = tokio::time::timeout(BOUND, run.tree.wait_root()).await.unwrap().unwrap();
    assert_eq!(exit.code, Some(0));
    run.wait_drained();
    let screen = run.log.render_screen(size).unwrap();
    let text = run.text();
    assert!(text.contains("PID") && text.contains("COMMAND"), "{text}");
    // The screen is the last 24 rows of it, each within the width.
    assert!(screen.lines().count() <= 24, "{screen}");
    assert!(screen.lines().all(|l| l.chars().count() <= 120), "{screen}");
    run.terminate_and_verify().await;
}
