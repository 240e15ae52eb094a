//! Signals and session keepers (the default where sessions get no cgroup), through the CLI
//! against a daemon started as `stockade daemon run --no-cgroup`: a user's `kill -TERM <pid>` of
//! the session's pid reaches the command (the pid is its keeper's) once, and a Ctrl-C typed into
//! a PTY session (which the terminal sends the keeper too) arrives once.

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use stockade_testkit::{DaemonProc, PATIENCE, text};

/// `stockade ARGS` against the daemon's home, as a user's shell runs it.
fn cli(daemon: &DaemonProc, args: &[&str]) -> String {
    let out = Command::new(stockade_testkit::stockade_bin())
        .args(args)
        .env("STOCKADE_HOME", &daemon.home)
        .env("NO_COLOR", "1")
        .output()
        .unwrap_or_else(|e| panic!("stockade {args:?}: {e}"));
    assert!(out.status.success(), "stockade {args:?}: {}{}", text(&out.stdout), text(&out.stderr));
    text(&out.stdout)
}

fn start(daemon: &DaemonProc, args: &[&str]) -> Value {
    let answer = cli(daemon, &[&["run", "--bg", "--json"][..], args].concat());
    let v: Value = serde_json::from_str(&answer).unwrap_or_else(|e| panic!("{e}: {answer}"));
    assert_eq!(v["state"], "running", "{v}");
    v
}

/// The session's whole output (`logs`), polled until `needle` shows or 30 s pass.
fn output_until(daemon: &DaemonProc, id: &str, needle: &str) -> String {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let out = cli(daemon, &["logs", id]);
        if out.contains(needle) {
            return out;
        }
        assert!(Instant::now() < deadline, "no {needle:?} from {id}: {out}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn keeper_daemon() -> DaemonProc {
    let daemon = DaemonProc::start(&["--no-cgroup"]);
    let status = daemon.client().ok("status", json!({}));
    assert_eq!(status["containment"], "process-group", "{status}");
    assert_eq!(status["session_keeper"], true, "keepers are the default without a cgroup");
    daemon
}

/// A command that counts the `signal`s it gets (`<name>-1`, `<name>-2`, …) and goes on.
fn counting(signal: &str, name: &str) -> String {
    format!(
        "n=0; trap 'n=$((n+1)); echo {name}-$n' {signal}; echo ready; while :; do sleep 0.05; done"
    )
}

#[test]
fn a_users_sigterm_to_the_session_pid_reaches_the_command_once() {
    let daemon = keeper_daemon();
    let run = start(&daemon, &[&counting("TERM", "term")]);
    let id = run["id"].as_str().unwrap_or_default().to_owned();
    let pid = run["pid"].as_u64().unwrap_or_else(|| panic!("no pid: {run}"));
    output_until(&daemon, &id, "ready");
    // The user's shell, not the daemon, sends it: to the pid `run` and `ps` show.
    let sent = Command::new("/bin/sh").args(["-c", &format!("kill -TERM {pid}")]).status();
    assert!(sent.is_ok_and(|s| s.success()), "kill -TERM {pid}");
    output_until(&daemon, &id, "term-1");
    std::thread::sleep(Duration::from_millis(300));
    let out = cli(&daemon, &["logs", &id]);
    assert!(!out.contains("term-2"), "delivered twice: {out}");
    assert_eq!(cli(&daemon, &["ps", "--json"]).matches("\"running\"").count(), 1);
    cli(&daemon, &["kill", "--grace-ms", "100", &id]);
}

#[test]
fn a_users_sigterm_ends_a_command_that_does_not_trap_it() {
    let daemon = keeper_daemon();
    let run = start(&daemon, &["echo ready; exec sleep 1000"]);
    let id = run["id"].as_str().unwrap_or_default().to_owned();
    let pid = run["pid"].as_u64().unwrap_or_else(|| panic!("no pid: {run}"));
    output_until(&daemon, &id, "ready");
    let sent = Command::new("/bin/sh").args(["-c", &format!("kill -TERM {pid}")]).status();
    assert!(sent.is_ok_and(|s| s.success()), "kill -TERM {pid}");
    let deadline = Instant::now() + PATIENCE;
    let session = loop {
        let list: Value =
            serde_json::from_str(&cli(&daemon, &["ps", "-a", "--json"])).unwrap_or(Value::Null);
        let s = list["sessions"]
            .as_array()
            .and_then(|a| a.iter().find(|s| s["id"] == id.as_str()).cloned())
            .unwrap_or(Value::Null);
        if s["state"] != "running" && !s.is_null() {
            break s;
        }
        assert!(Instant::now() < deadline, "{id} still running: {s}");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(session["signal"], 15, "ended by the user's SIGTERM: {session}");
}

#[test]
fn a_ctrl_c_typed_into_a_pty_session_arrives_once() {
    let daemon = keeper_daemon();
    let run = start(&daemon, &["--pty", &counting("INT", "int")]);
    let id = run["id"].as_str().unwrap_or_default().to_owned();
    output_until(&daemon, &id, "ready");
    cli(&daemon, &["send", &id, r"\u{3}"]);
    output_until(&daemon, &id, "int-1");
    std::thread::sleep(Duration::from_millis(300));
    let out = cli(&daemon, &["logs", &id]);
    assert!(!out.contains("int-2"), "Ctrl-C delivered twice: {out}");
    cli(&daemon, &["kill", "--grace-ms", "100", &id]);
}
