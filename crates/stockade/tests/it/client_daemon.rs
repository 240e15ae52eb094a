//! The daemon seen from clients: started on demand (once, however many clients race), never
//! started with `--no-autostart`, unharmed by a client killed mid-follow, stopped on request.

use std::io::{BufRead, BufReader};
use std::process::Stdio;

use stockade_testkit::procs::daemons_for;
use stockade_testkit::{Home, text};

#[test]
fn the_first_client_command_starts_the_daemon_and_stop_ends_it() {
    let home = Home::new();
    let status = home.run(&["daemon", "status"]);
    assert_eq!(status.status.code(), Some(1));
    assert!(text(&status.stdout).starts_with("not running"), "{}", text(&status.stdout));

    assert_eq!(home.ok(&["ps"]), "no sessions\n");
    let status = home.json(&["daemon", "status"]);
    assert_eq!(status["running"], true);
    let pid = status["pid"].as_u64().unwrap() as u32;
    assert_eq!(status["socket"], home.path().join("stockade.sock").to_str().unwrap());
    assert!(stockade_client::pid_alive(pid));
    assert_eq!(home.daemon_pid(), Some(pid));
    assert_eq!(daemons_for(home.path()), vec![pid]);
    // It writes to its log, not to the client's stdout/stderr.
    assert!(home.path().join("daemon.log").exists());
    let again = home.ok(&["daemon", "start"]);
    assert_eq!(
        again,
        format!(
            "Daemon already running (pid {pid}, socket {})\n",
            status["socket"].as_str().unwrap()
        )
    );

    assert_eq!(
        home.ok(&["daemon", "stop"]),
        format!("Daemon stopped (pid {pid}); no session was running\n")
    );
    assert!(!stockade_client::pid_alive(pid));
    assert_eq!(home.run(&["daemon", "status"]).status.code(), Some(1));
    assert_eq!(
        home.ok(&["daemon", "stop"]),
        format!("No daemon is running for {}\n", home.path().display())
    );
}

#[test]
fn no_autostart_means_a_clear_error_and_no_daemon() {
    let home = Home::new();
    let sentence = format!(
        "stockade: no daemon is running for {}; start one with `stockade daemon start`\n",
        home.path().display()
    );
    let out = home.run(&["--no-autostart", "ps"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(text(&out.stderr), sentence);
    let out =
        home.cmd(&["run", "--bg", "true"]).env("STOCKADE_NO_AUTOSTART", "1").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(text(&out.stderr), sentence);
    assert!(!home.path().join("stockade.sock").exists());
    assert_eq!(home.run(&["daemon", "status"]).status.code(), Some(1));
}

#[test]
fn racing_first_commands_end_with_one_daemon() {
    let home = Home::new();
    let clients: Vec<_> = (0..6)
        .map(|i| {
            let args: &[&str] = if i % 2 == 0 { &["ps"] } else { &["stats"] };
            home.cmd(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap()
        })
        .collect();
    for child in clients {
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{}", text(&out.stderr));
    }
    let pid = home.json(&["daemon", "status"])["pid"].as_u64().unwrap() as u32;
    // A loser of the race may still be starting when every client has its answer (on a loaded
    // machine): it finds the lock taken and exits, leaving the one that serves.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    let mut left = daemons_for(home.path());
    while left != vec![pid] && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(100));
        left = daemons_for(home.path());
    }
    assert_eq!(left, vec![pid], "daemons left for the home (the second is no loser that exited)");
}

#[test]
fn a_client_killed_mid_follow_harms_neither_session_nor_daemon() {
    let home = Home::new();
    let started =
        home.run_bg(r"i=0; while [ $i -lt 60 ]; do echo line $i; i=$((i+1)); sleep 0.05; done");
    let id = started["id"].as_str().unwrap().to_owned();

    let mut follower = home.cmd(&["logs", "-f", &id]).stdout(Stdio::piped()).spawn().unwrap();
    let mut lines = BufReader::new(follower.stdout.take().unwrap());
    let mut first = String::new();
    lines.read_line(&mut first).unwrap();
    assert_eq!(first, "line 0\n");
    // SIGKILL the follower (our own child, by its pid) while it waits in a long poll.
    // SAFETY: kill(2) of a child process this test spawned and has not reaped.
    assert_eq!(unsafe { libc::kill(follower.id() as i32, libc::SIGKILL) }, 0);
    follower.wait().unwrap();

    // The daemon still answers; the session carries on to its natural end with all its output.
    assert_eq!(home.json(&["daemon", "status"])["running"], true);
    let s = home.wait_finished(&id);
    assert_eq!(s["state"], "exited", "{s}");
    assert_eq!(s["code"], 0, "{s}");
    let expected: String = (0..60).map(|i| format!("line {i}\n")).collect();
    assert_eq!(text(&home.run(&["logs", "--raw", &id]).stdout), expected);
}
