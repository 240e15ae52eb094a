//! Ending many sessions at once: one `stockade kill` naming a hundred running sessions (or
//! `--all`) ends them together (every tree signalled first, one grace, one `/proc` census per
//! round), answers one report per id in the order given, and leaves no process of any of them;
//! `daemon stop` with a hundred running leaves none either — with a cgroup and without one.

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use stockade_testkit::procs::{instance_of, marked_processes};
use stockade_testkit::{DaemonProc, Home, eventually, stockade_bin, text};

/// Running sessions killed by the one call.
const SESSIONS: usize = 100;
/// Bound on the call: it takes well under a second on a quiet machine, one after the other took
/// about 40 ms of daemon CPU per id at this scale.
const KILL_BOUND: Duration = Duration::from_secs(10);

#[test]
fn one_kill_ends_a_hundred_sessions() {
    let home = Home::new();
    let mut ids = Vec::new();
    let mut instance = String::new();
    for _ in 0..SESSIONS {
        let run = home.json_bg(&["sleep 1000"]);
        instance = instance_of(&run);
        ids.push(run["id"].as_str().unwrap().to_owned());
    }
    let marker = format!("STOCKADE_SESSION={instance}:");
    assert!(!marked_processes(&marker).is_empty(), "the sessions run");

    let mut args = vec!["kill", "--json"];
    args.extend(ids.iter().map(String::as_str));
    let started = Instant::now();
    let out = home.run(&args);
    let took = started.elapsed();
    eprintln!("one kill of {SESSIONS} running sessions: {took:?}");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(took <= KILL_BOUND, "one kill of {SESSIONS} sessions took {took:?}");

    // One report per id, in the order given, each verified gone.
    let reports: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let reports = reports.as_array().unwrap();
    let answered: Vec<&str> = reports.iter().map(|r| r["id"].as_str().unwrap()).collect();
    assert_eq!(answered, ids);
    for r in reports {
        assert_eq!(r["report"]["terminated"], true, "{r}");
    }
    let left = marked_processes(&marker);
    assert!(left.is_empty(), "{} processes left: {left:?}", left.len());
    home.ok(&["daemon", "stop"]);
}

/// `stockade --home HOME ARGS` to the end (a daemon the test started itself).
fn at(home: &Path, args: &[&str]) -> Output {
    Command::new(stockade_bin()).arg("--home").arg(home).args(args).output().unwrap()
}

/// Starts `SESSIONS` background `sleep 1000`s through the CLI; their marker prefix.
fn start_hundred(run: &dyn Fn(&[&str]) -> Output) -> String {
    let mut instance = String::new();
    for _ in 0..SESSIONS {
        let out = run(&["run", "--bg", "--json", "sleep 1000"]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        let started: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        instance = instance_of(&started);
    }
    let marker = format!("STOCKADE_SESSION={instance}:");
    assert!(marked_processes(&marker).len() >= SESSIONS, "the sessions run");
    marker
}

/// `kill --all` ends every running session in one call: one report each (not the finished
/// one), all verified gone, 0 processes left.
fn kill_all_leaves_nothing(run: &dyn Fn(&[&str]) -> Output) {
    let done = run(&["run", "--json", "true"]);
    let done: serde_json::Value = serde_json::from_slice(&done.stdout).unwrap();
    let marker = start_hundred(run);
    let started = Instant::now();
    let out = run(&["kill", "--all", "--json"]);
    let took = started.elapsed();
    eprintln!("kill --all of {SESSIONS} running sessions: {took:?}");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(took <= KILL_BOUND, "kill --all of {SESSIONS} sessions took {took:?}");
    let reports: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let reports = reports.as_array().unwrap();
    assert_eq!(reports.len(), SESSIONS);
    assert!(reports.iter().all(|r| r["id"] != done["id"]), "a finished session is not killed");
    for r in reports {
        assert_eq!(r["report"]["terminated"], true, "{r}");
        assert_eq!(r["state"], "killed", "{r}");
    }
    let left = marked_processes(&marker);
    assert!(left.is_empty(), "{} processes left: {left:?}", left.len());
    // Nothing left running: a second `--all` ends nothing.
    let again = run(&["kill", "--all"]);
    assert_eq!(again.status.code(), Some(0), "{}", text(&again.stderr));
    assert_eq!(text(&again.stdout), "Nothing was running\n");
}

/// `daemon stop` with a hundred running: 0 processes left within the bound.
fn stop_leaves_nothing(run: &dyn Fn(&[&str]) -> Output) {
    let marker = start_hundred(run);
    let started = Instant::now();
    let out = run(&["daemon", "stop"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    eventually(KILL_BOUND, "0 processes left after daemon stop", || {
        marked_processes(&marker).is_empty().then_some(())
    });
    eprintln!("daemon stop with {SESSIONS} running: 0 left after {:?}", started.elapsed());
}

#[test]
fn kill_all_ends_every_running_session() {
    let home = Home::new();
    let refused = home.run(&["kill", "--all", "sh-1"]);
    assert_eq!(refused.status.code(), Some(2), "{}", text(&refused.stderr));
    assert_eq!(text(&refused.stderr).lines().count(), 1, "{}", text(&refused.stderr));
    assert!(text(&refused.stderr).contains("either session ids or --all"));
    kill_all_leaves_nothing(&|args| home.run(args));
    home.ok(&["daemon", "stop"]);
}

#[test]
fn kill_all_ends_every_running_session_without_cgroup() {
    let daemon = DaemonProc::start(&["--no-cgroup"]);
    let status = daemon.client().ok("status", serde_json::json!({}));
    assert_eq!(status["containment"], "process-group", "{status}");
    kill_all_leaves_nothing(&|args| at(&daemon.home, args));
}

#[test]
fn daemon_stop_ends_a_hundred_sessions() {
    let home = Home::new();
    stop_leaves_nothing(&|args| home.run(args));
}

#[test]
fn daemon_stop_ends_a_hundred_sessions_without_cgroup() {
    let mut daemon = DaemonProc::start(&["--no-cgroup"]);
    let home = daemon.home.clone();
    stop_leaves_nothing(&|args| at(&home, args));
    assert!(daemon.wait_exit(KILL_BOUND).is_some(), "the daemon exits after daemon stop");
}
