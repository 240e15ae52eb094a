//! Interactive sessions from the CLI: `run --pty`, `send` (escapes, `--close-stdin`), `resize`,
//! and `attach` driven through a real pseudo-terminal (typing, live output, a forwarded
//! `SIGWINCH`, Ctrl-] to detach, the terminal mode restored afterwards).

use std::os::unix::process::CommandExt;
use std::time::{Duration, Instant};

use stockade_testkit::procs::{marked_processes, session_marker};
use stockade_testkit::pty::{Pty, PtyClient};
use stockade_testkit::{Home, PATIENCE, child, text};

fn start_pty(home: &Home, command: &str) -> (String, String) {
    let r = home.json_first(&["run", "--pty", "--bg", "--json", command]);
    assert_eq!(r["state"], "running", "{r}");
    let id = r["id"].as_str().unwrap().to_owned();
    home.session(&id); // remembered for the cleanup
    (id, r["spool_path"].as_str().unwrap().to_owned())
}

/// `send` until its answer (or a later one) shows `needle`.
fn send_until(home: &Home, id: &str, keys: &str, needle: &str) -> String {
    let mut seen = home.ok(&["send", "--yield-ms", "300", id, keys]);
    let deadline = Instant::now() + PATIENCE;
    while !seen.contains(needle) {
        assert!(Instant::now() < deadline, "no {needle:?} from {id}: {seen}");
        seen.push_str(&home.ok(&["send", "--yield-ms", "300", id]));
    }
    seen
}

#[test]
fn send_and_resize_drive_a_shell_on_a_pty() {
    let home = Home::new();
    let (id, spool) = start_pty(&home, "bash --norc -i");
    let out = send_until(&home, &id, r"echo hi-$((6*7))\n", "hi-42");
    assert!(out.starts_with(&format!("Process running with session ID {id}")), "{out}");
    assert!(!out.contains('\u{1b}'), "escape codes are stripped: {out}");
    let resized = home.ok(&["resize", &id, "33", "101"]);
    assert_eq!(resized, format!("{id}: 33 rows x 101 columns\n"));
    send_until(&home, &id, r"stty size\n", "33 101");
    // \u{…} and \xNN: Ctrl-C on an unfinished line, then the shell is still there.
    send_until(&home, &id, r"sleep 1000\n", "sleep 1000");
    send_until(&home, &id, r"\u{3}", "^C");
    send_until(&home, &id, r"echo back-\x41\n", "back-A");
    home.ok(&["kill", &id]);
    assert!(marked_processes(&session_marker(&spool)).is_empty(), "nothing of {id} is left");
    // A session that takes no input says so.
    let plain = home.run_bg("sleep 30");
    let plain_id = plain["id"].as_str().unwrap();
    let refused = home.run(&["send", plain_id, "x"]);
    assert_eq!(refused.status.code(), Some(2));
    assert!(text(&refused.stderr).contains("without input"), "{}", text(&refused.stderr));
    home.ok(&["kill", plain_id]);
}

#[test]
fn send_close_stdin_ends_cat_on_a_pipe() {
    let home = Home::new();
    let r = home.json_first(&["run", "--bg", "--stdin", "pipe", "--json", "cat"]);
    let id = r["id"].as_str().unwrap().to_owned();
    home.session(&id);
    let out = home.ok(&["send", "--close-stdin", "--yield-ms", "5000", &id, r"a\tb\x41\u{e9}\n"]);
    assert!(out.starts_with("Exit code: 0"), "{out}");
    assert!(out.contains("a\tbAé\n"), "{out}");
    let done = home.wait_finished(&id);
    assert_eq!(done["state"], "exited");
    let raw = home.run(&["logs", "--raw", &id]);
    assert_eq!(raw.stdout, "a\tbAé\n".as_bytes());
}

#[test]
fn a_foreground_pty_run_goes_through_the_daemon() {
    let home = Home::new();
    let out = home.run(&["run", "--pty", "--rows", "12", "--cols", "34", "stty size; test -t 1"]);
    assert_eq!(out.status.code(), Some(0), "{}{}", text(&out.stdout), text(&out.stderr));
    assert!(text(&out.stdout).contains("\n12 34\n"), "{}", text(&out.stdout));
    let bad = home.run(&["run", "--rows", "12", "true"]);
    assert!(!bad.status.success(), "--rows needs --pty");
}

#[test]
fn attach_refuses_without_a_terminal() {
    let home = Home::new();
    let (id, _) = start_pty(&home, "sleep 30");
    let out = home.run(&["attach", &id]); // stdin is /dev/null
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("attach needs a terminal"), "{}", text(&out.stderr));
    home.ok(&["kill", &id]);
}

#[test]
fn attach_through_a_real_terminal_types_resizes_and_detaches() {
    let home = Home::new();
    let (id, spool) = start_pty(&home, "bash --norc -i");
    let pty = Pty::with_size(30, 100);
    let before = pty.termios();
    assert_ne!(before.c_lflag & libc::ICANON, 0);

    let mut cmd = home.cmd(&["attach", &id]);
    cmd.stdin(pty.stdio()).stdout(pty.stdio()).stderr(pty.stdio());
    // SAFETY: setsid and TIOCSCTTY on fd 0 (the slave) between fork and exec, so the attach
    // client's terminal is its controlling terminal and a resize sends it SIGWINCH.
    unsafe {
        cmd.pre_exec(|| {
            if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut attached = PtyClient(cmd.spawn().unwrap());
    drop(cmd); // its copies of the slave would keep the master from reading EOF

    // Everything the attach client writes to its terminal.
    let screen = pty.screen();
    let wait_for = |needle: &str| screen.wait_for(needle);
    let type_keys = |keys: &[u8]| pty.type_keys(keys);

    wait_for("Detach with Ctrl-]");
    // The client's terminal is raw while attached.
    pty.wait_raw();
    type_keys(b"echo att-$((2*21))\r");
    wait_for("att-42");
    // The attach client told the session its terminal's size...
    type_keys(b"stty size\r");
    wait_for("30 100");
    // ...and forwards a change (SIGWINCH → resize).
    pty.set_size(35, 110);
    let deadline = Instant::now() + PATIENCE;
    loop {
        let session = home.session(&id);
        if session["pty_size"] == serde_json::json!({"rows": 35, "cols": 110}) {
            break;
        }
        assert!(Instant::now() < deadline, "the resize was not forwarded: {session}");
        std::thread::sleep(Duration::from_millis(50));
    }
    type_keys(b"stty size\r");
    wait_for("35 110");

    // Ctrl-] detaches: the client exits 0, the session keeps running.
    type_keys(&[0x1d]);
    let status = attached.wait_exit(&screen, "attach after Ctrl-]");
    assert!(status.success(), "{status:?}: {:?}", screen.text());
    wait_for("Detached from");
    let after = pty.termios();
    assert_eq!(after.c_lflag, before.c_lflag, "local modes restored");
    assert_eq!(after.c_iflag, before.c_iflag, "input modes restored");
    assert_eq!(after.c_oflag, before.c_oflag, "output modes restored");
    assert_eq!(home.session(&id)["state"], "running", "detaching leaves the session running");

    drop(pty);
    screen.finish();
    home.ok(&["kill", &id]);
    assert!(marked_processes(&session_marker(&spool)).is_empty(), "nothing of {id} is left");
}

#[test]
fn attach_ends_with_the_session_and_restores_the_terminal_on_sigterm() {
    let home = Home::new();
    let (id, _) = start_pty(&home, "bash --norc -i");
    for ending in ["sigterm", "exit"] {
        let pty = Pty::with_size(24, 80);
        let before = pty.termios();
        let mut cmd = home.cmd(&["attach", &id]);
        cmd.stdin(pty.stdio()).stdout(pty.stdio()).stderr(pty.stdio());
        let mut attached = PtyClient(cmd.spawn().unwrap());
        drop(cmd);
        pty.wait_raw();
        match ending {
            // SAFETY: kill(2) of the attach client, our own unreaped child.
            "sigterm" => unsafe {
                libc::kill(attached.0.id() as i32, libc::SIGTERM);
            },
            _ => pty.type_keys(b"exit 7\r"),
        }
        let status = child::wait_bounded(&mut attached.0, PATIENCE)
            .unwrap_or_else(|| panic!("attach did not end on {ending}"));
        if ending == "sigterm" {
            assert_eq!(status.code(), Some(128 + libc::SIGTERM), "{ending}");
        } else {
            assert_eq!(status.code(), Some(7), "the session's exit status: {status:?}");
        }
        assert_eq!(pty.termios().c_lflag, before.c_lflag, "restored after {ending}");
        // The session ends only when it is told to exit, not by a signal to the client.
        let expect = if ending == "sigterm" { "running" } else { "exited" };
        let deadline = Instant::now() + PATIENCE;
        while home.session(&id)["state"] != expect {
            assert!(Instant::now() < deadline, "{id} is not {expect}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// `stockade ARGS` with `input` piped into its stdin, to its end (bounded).
fn with_piped_stdin(home: &Home, args: &[&str], input: &[u8]) -> child::Finished {
    use std::io::Write as _;
    let mut c = home.cmd(args);
    c.stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut running = c.spawn().unwrap();
    let mut stdin = running.stdin.take().unwrap();
    // The command may refuse before reading: a closed pipe is no failure here.
    let _ = stdin.write_all(input);
    drop(stdin);
    // Small outputs: they fit the pipes, so waiting first cannot block the command.
    let status = child::wait_bounded(&mut running, PATIENCE).expect("stockade ended");
    let (mut stdout, mut stderr) = (String::new(), String::new());
    std::io::Read::read_to_string(&mut running.stdout.take().unwrap(), &mut stdout).unwrap();
    std::io::Read::read_to_string(&mut running.stderr.take().unwrap(), &mut stderr).unwrap();
    child::Finished { status, stdout, stderr }
}

#[test]
fn piped_stdin_is_refused_by_pty_and_named_by_bg() {
    let home = Home::new();
    // `echo hi | stockade run --pty cat` would wait for a terminal nobody types into.
    let pty = with_piped_stdin(&home, &["run", "--pty", "cat"], b"hi\n");
    assert_eq!(pty.status.code(), Some(2), "{}", pty.stderr);
    assert!(
        pty.stderr.contains(
            "--pty gives the command a terminal of its own and cannot take this piped stdin"
        ),
        "{}",
        pty.stderr
    );
    let bg = with_piped_stdin(&home, &["run", "--bg", "--json", "cat"], b"hi\n");
    assert!(bg.status.success(), "{}", bg.stderr);
    assert!(
        bg.stderr
            .contains("--bg does not hand this piped stdin on (the command's stdin is /dev/null)"),
        "{}",
        bg.stderr
    );
    // Handed on without --bg.
    let fg = with_piped_stdin(&home, &["run", "cat"], b"hi\n");
    assert!(fg.status.success() && fg.stdout.contains("hi"), "{}{}", fg.stdout, fg.stderr);
    assert!(!fg.stderr.contains("note:"), "{}", fg.stderr);
}
