//! The real `stockade daemon` process: SIGTERM ends every session it runs (nothing with their
//! marker remains) and removes its socket and lock; a second daemon on the same home is refused
//! while the first lives; a stale socket is replaced; the ready line names socket and pid.

use std::time::Duration;

use serde_json::json;
use stockade_testkit::procs::{instance_of, marked_processes};
use stockade_testkit::{DaemonProc, eventually};

#[test]
fn sigterm_terminates_every_session_removes_the_socket_and_clears_the_lock() {
    let mut daemon = DaemonProc::start(&[]);
    let mut rpc = daemon.client();
    let mut markers = vec![];
    for command in [
        "sleep 600",
        "sleep 600 & sleep 600 & wait",
        "setsid sleep 600 & wait",
        "trap '' TERM; sleep 600",
    ] {
        let r = rpc.ok("run", json!({"command": command, "background": true, "yield_ms": 100}));
        markers.push(format!("STOCKADE_SESSION={}:{}", instance_of(&r), r["id"].as_str().unwrap()));
    }
    for m in &markers {
        eventually(Duration::from_secs(5), "session processes", || {
            (!marked_processes(m).is_empty()).then_some(())
        });
    }
    assert_eq!(
        std::fs::read_to_string(daemon.home.join("daemon.lock")).unwrap().trim(),
        daemon.pid.to_string()
    );
    // SAFETY: kill(2) on the daemon child this test started, by its pid.
    unsafe {
        libc::kill(daemon.pid as libc::pid_t, libc::SIGTERM);
    }
    let status = daemon.wait_exit(Duration::from_secs(30)).expect("the daemon exits");
    assert!(status.success(), "exit 0 after SIGTERM: {status:?}");
    for m in &markers {
        assert!(marked_processes(m).is_empty(), "nothing with {m} remains");
    }
    assert!(!daemon.socket.exists(), "socket removed");
    assert_eq!(
        std::fs::read_to_string(daemon.home.join("daemon.lock")).unwrap_or_default(),
        "",
        "the lock names no daemon"
    );
}

#[test]
fn a_second_daemon_is_refused_while_the_first_lives_then_starts_after_it() {
    let daemon = DaemonProc::start(&[]);
    let (stderr, status) = match DaemonProc::start_at(&daemon.home, &[]) {
        Ok(_) => panic!("a second daemon started on the same home"),
        Err(e) => e,
    };
    assert!(!status.success());
    assert!(stderr.contains(&format!("pid {}", daemon.pid)), "names the live daemon: {stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "one plain sentence: {stderr}");
    daemon.client().ok("status", json!({}));
    // Once the first is gone (SIGKILL: no clean-up at all), the next one starts and replaces the
    // stale socket it left behind.
    let home = daemon.home.clone();
    let mut first = daemon;
    first.child.kill().unwrap();
    first.child.wait().unwrap();
    assert!(home.join("stockade.sock").exists(), "a killed daemon leaves its socket");
    let second = DaemonProc::start_at(&home, &[]).expect("starts after the first died");
    let status = second.client().ok("status", json!({}));
    assert_eq!(status["pid"], second.pid);
    drop(second);
    drop(first);
}

#[test]
fn a_file_at_the_socket_path_is_never_replaced() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    std::fs::create_dir(&home).unwrap();
    std::fs::write(home.join("stockade.sock"), b"not a socket").unwrap();
    let (stderr, status) = match DaemonProc::start_at(&home, &[]) {
        Ok(_) => panic!("the daemon replaced a regular file"),
        Err(e) => e,
    };
    assert!(!status.success());
    assert!(stderr.contains("not a socket"), "{stderr}");
    assert_eq!(std::fs::read(home.join("stockade.sock")).unwrap(), b"not a socket");
}
