//! Ending many sessions at once: one `stockade kill` naming a hundred running sessions ends them
//! all in parallel (the daemon's terminates share their `/proc` census and their grace), answers
//! one report per id in the order given, and leaves no process of any of them.

use std::time::{Duration, Instant};

use stockade_testkit::procs::{instance_of, marked_processes};
use stockade_testkit::{Home, text};

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
