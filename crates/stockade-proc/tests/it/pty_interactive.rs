//! Interactive programs on a PTY, driven through the engine's spawn, drain and bounded input:
//! a REPL, a shell's `read`, Ctrl-C to the foreground job, resize seen by the program — and
//! "killed means gone" after terminate, with cgroup containment and without.

use crate::process_common::Mode;
use crate::pty_common::{MODES, Run, default_size};
use stockade_proc::pty;
use stockade_proto::rpc::PtySize;

/// `bash` with no rc files, interactive (job control on: it is the terminal's session leader).
fn bash(mode: Mode, test: &str, size: PtySize) -> Run {
    Run::pty(mode, test, "bash", &["--norc", "--noprofile", "-i"], &[("PS1", "$ ")], size)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_repl_answers_on_a_pty() {
    for mode in MODES {
        let run = Run::pty(mode, "python", "python3", &["-i", "-q"], &[], default_size());
        run.wait_for(0, ">>> ").await;
        let from = run.offset();
        run.write(b"print(6*7)\n");
        let text = run.wait_for(from, "42").await;
        // The terminal echoed the input (a PTY, not a pipe) and the answer is on its own line.
        assert!(text.contains("print(6*7)\n42\n"), "{text:?}");
        assert!(run.log.stats().stream_bytes.pty > 0);
        run.terminate_and_verify().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bash_read_takes_a_typed_line() {
    for mode in MODES {
        let run = bash(mode, "bash-read", default_size());
        run.wait_for(0, "$ ").await;
        let from = run.offset();
        // The prompt (on the terminal) says `read` is waiting; the quotes keep the echoed
        // command line from matching it.
        run.write(b"read -p 'na''me? ' x; echo got:$x\n");
        run.wait_for(from, "name? ").await;
        run.write(b"hello\n");
        let text = run.wait_for(from, "got:hello").await;
        assert!(text.contains("name? hello\ngot:hello\n"), "{text:?}");
        run.terminate_and_verify().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_interrupts_the_foreground_job_not_the_shell() {
    for mode in MODES {
        let run = bash(mode, "ctrl-c", default_size());
        run.wait_for(0, "$ ").await;
        run.write(b"sleep 1000\n");
        // Wait until sleep is the terminal's foreground job, so ^C goes to it and not to the
        // shell still reading the line.
        let master = run.master.as_ref().unwrap();
        let sleep_pid = run
            .wait_process("sleep in the foreground", |pid, cmd| {
                cmd == "sleep 1000"
                    && pty::foreground_pgrp(master).unwrap()
                        == crate::process_common::stat(pid).map(|s| s.pgrp)
            })
            .await;
        let from = run.offset();
        run.write(b"\x03");
        // The prompt returns and sleep is gone (dead or a zombie being reaped).
        run.wait_for(from, "$ ").await;
        let deadline = std::time::Instant::now() + crate::pty_common::BOUND;
        while crate::process_common::stat(sleep_pid).is_some_and(|s| !s.is_zombie()) {
            assert!(std::time::Instant::now() < deadline, "sleep survived ^C");
            tokio::time::sleep(crate::pty_common::POLL).await;
        }
        // The shell itself is alive and takes commands.
        let from = run.offset();
        run.write(b"echo al\"\"ive\n");
        run.wait_for(from, "\nalive\n").await;
        run.terminate_and_verify().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resize_is_seen_by_the_program() {
    for mode in MODES {
        let run = bash(mode, "resize", PtySize { rows: 30, cols: 100 });
        run.wait_for(0, "$ ").await;
        // The size given at spawn is there from the start.
        let from = run.offset();
        run.write(b"stty size\n");
        run.wait_for(from, "\n30 100\n").await;

        let master = run.master.as_ref().unwrap();
        pty::resize(master, PtySize { rows: 40, cols: 132 }).unwrap();
        assert_eq!(pty::size(master).unwrap(), PtySize { rows: 40, cols: 132 });
        let from = run.offset();
        run.write(b"stty size\n");
        run.wait_for(from, "\n40 132\n").await;

        // Out-of-range sizes are refused, the terminal keeps its size.
        assert!(pty::resize(master, PtySize { rows: 0, cols: 80 }).is_err());
        assert_eq!(pty::size(master).unwrap(), PtySize { rows: 40, cols: 132 });
        run.terminate_and_verify().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resize_sends_sigwinch_to_the_foreground_job() {
    for mode in MODES {
        // No job control: the shell and its sleeps are the terminal's foreground group.
        let script =
            "trap 'echo WINCH:$(stty size)' WINCH; echo READY; while :; do sleep 0.05; done";
        let run = Run::pty(mode, "winch", "sh", &["-c", script], &[], default_size());
        run.wait_for(0, "READY").await;
        let from = run.offset();
        pty::resize(run.master.as_ref().unwrap(), PtySize { rows: 50, cols: 120 }).unwrap();
        run.wait_for(from, "WINCH:50 120").await;
        run.terminate_and_verify().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn term_defaults_to_xterm_and_the_caller_can_override_it() {
    let run =
        Run::pty(Mode::Fallback, "term", "sh", &["-c", "echo T=$TERM; tty"], &[], default_size());
    let text = run.wait_for(0, "/dev/pts/").await;
    assert!(text.contains("T=xterm-256color\n"), "{text:?}");
    let exit = tokio::time::timeout(crate::pty_common::BOUND, run.tree.wait_root())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(exit.code, Some(0));
    run.wait_drained();

    let run = Run::pty(
        Mode::Fallback,
        "term",
        "sh",
        &["-c", "echo T=$TERM"],
        &[("TERM", "dumb")],
        default_size(),
    );
    let text = run.wait_for(0, "T=").await;
    run.wait_drained();
    assert!(run.text().contains("T=dumb\n"), "{text:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eof_char_ends_cat_on_a_pty() {
    let run = Run::pty(Mode::Fallback, "eof", "cat", &[], &[], default_size());
    run.write(b"one\n");
    run.wait_for(0, "one\none\n").await;
    pty::send_eof(run.master.as_ref().unwrap(), stockade_proc::DEFAULT_INPUT_TIMEOUT).unwrap();
    let exit = tokio::time::timeout(crate::pty_common::BOUND, run.tree.wait_root())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(exit.code, Some(0));
    // The last holder of the terminal is gone: the master reads EIO, which the drain takes as EOF.
    run.wait_drained();
    assert_eq!(run.text(), "one\none\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminate_takes_the_whole_terminal_session() {
    // Background jobs with job control live in their own process groups, one escapes with
    // setsid: all of them are the session's, and all go.
    for mode in MODES {
        let run = bash(mode, "tree", default_size());
        run.wait_for(0, "$ ").await;
        run.write(b"sleep 1000 & setsid sleep 1001 & (sleep 1002 &); sleep 1003\n");
        for n in ["1000", "1001", "1002", "1003"] {
            run.wait_process("sleeping", |_, cmd| cmd == format!("sleep {n}")).await;
        }
        run.terminate_and_verify().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_child_has_the_slave_as_stdio_and_controlling_terminal_and_no_master() {
    for mode in MODES {
        let run = Run::pty(mode, "fds", "sleep", &["1000"], &[], default_size());
        let pid = run.wait_process("sleeping", |_, cmd| cmd == "sleep 1000").await;
        let mut fds: Vec<(String, String)> = std::fs::read_dir(format!("/proc/{pid}/fd"))
            .unwrap()
            // An fd can close between listing and reading its link (a stray inherited fd of a
            // concurrent spawn): skip it rather than fail; fds 0-2 are asserted below.
            .filter_map(|e| {
                let e = e.ok()?;
                let target = std::fs::read_link(e.path()).ok()?;
                Some((e.file_name().to_string_lossy().into_owned(), target.display().to_string()))
            })
            .collect();
        fds.sort();
        // fds 0-2 are the slave; no master (`/dev/ptmx`, `/dev/pts/ptmx`) and no other
        // terminal. (Other fds the test process itself inherited without close-on-exec may
        // pass through, as for every spawn.)
        let std: Vec<&(String, String)> =
            fds.iter().filter(|(n, _)| ["0", "1", "2"].contains(&n.as_str())).collect();
        assert_eq!(std.len(), 3, "{fds:?}");
        let slave = &std[0].1;
        assert!(slave.starts_with("/dev/pts/") && !slave.ends_with("ptmx"), "{fds:?}");
        assert!(std.iter().all(|(_, t)| t == slave), "{fds:?}");
        for (n, t) in &fds {
            assert!(!t.contains("ptmx"), "master leaked as fd {n}: {fds:?}");
            assert!(!t.starts_with("/dev/pts/") || t == slave, "fd {n}: {fds:?}");
        }
        // Own session, and the terminal is its controlling terminal (tty_nr, field 7 of stat).
        let st = crate::process_common::stat(pid).unwrap();
        assert_eq!(st.session, pid);
        assert_ne!(st.tty_nr, 0, "no controlling terminal");
        assert_eq!(pty::foreground_pgrp(run.master.as_ref().unwrap()).unwrap(), Some(pid));
        run.terminate_and_verify().await;
    }
}
