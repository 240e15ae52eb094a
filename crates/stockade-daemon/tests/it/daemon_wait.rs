//! Waits that collect (`Session::collect` behind `read`'s `wait_ms` with `collect`/`until`,
//! `write`'s and `run`'s `yield_ms`) and `list`'s bounds, through the socket: what ends each
//! wait, the `until` match's line and cursor, and running-first `list` with `limit`.

use std::time::{Duration, Instant};

use serde_json::json;
use stockade_proto::rpc::code;
use stockade_testkit::Fixture;

fn id_of(v: &serde_json::Value) -> String {
    v["id"].as_str().unwrap().to_owned()
}

#[test]
fn a_collecting_read_goes_past_the_first_line_to_the_end() {
    let f = Fixture::start();
    let mut rpc = f.client();
    let cmd = "for i in 1 2 3 4 5; do echo line $i; sleep 0.2; done";
    let r = rpc.ok("run", json!({"command": cmd, "background": true}));
    let id = id_of(&r);
    let got = rpc.ok("read", json!({"id": id, "after": 0, "wait_ms": 30000, "collect": true}));
    assert_eq!(got["output"], "line 1\nline 2\nline 3\nline 4\nline 5\n", "{got}");
    assert_eq!(got["state"], "exited", "{got}");
    assert_eq!(got["wait"]["ended_by"], "exit", "{got}");
    assert!(got["wall_time_ms"].as_u64().unwrap() >= 800, "{got}");
    // A plain long poll still answers at the first new byte.
    let r = rpc.ok("run", json!({"command": cmd, "background": true}));
    let got = rpc.ok("read", json!({"id": id_of(&r), "after": 0, "wait_ms": 30000}));
    assert_eq!(got["state"], "running", "{got}");
    assert_eq!(got["wait"]["ended_by"], "output", "{got}");
}

#[test]
fn a_collecting_read_ends_with_its_window_or_a_full_answer() {
    let f = Fixture::start();
    let mut rpc = f.client();
    let quiet = id_of(&rpc.ok("run", json!({"command": "sleep 30", "background": true})));
    let started = Instant::now();
    let got = rpc.ok("read", json!({"id": quiet, "wait_ms": 500, "collect": true}));
    assert!(started.elapsed() >= Duration::from_millis(500));
    assert_eq!(got["wait"]["ended_by"], "window", "{got}");
    assert!(got["wait"]["waited_ms"].as_u64().unwrap() >= 500, "{got}");
    // Loud: 100 bytes are a full answer long before the window ends.
    let loud = id_of(&rpc.ok(
        "run",
        json!({"command": "sleep 0.3; yes | head -c 100000; sleep 30", "background": true}),
    ));
    let started = Instant::now();
    let got = rpc.ok(
        "read",
        json!({"id": loud, "after": 0, "max_bytes": 100, "wait_ms": 60000, "collect": true}),
    );
    assert!(started.elapsed() < Duration::from_secs(30), "ended before the window");
    assert_eq!(got["wait"]["ended_by"], "full", "{got}");
    assert_eq!(got["state"], "running");
    for id in [quiet, loud] {
        rpc.ok("kill", json!({"id": id}));
    }
}

#[test]
fn until_ends_a_run_a_read_and_a_write_at_the_matching_line() {
    let f = Fixture::start();
    let mut rpc = f.client();
    let cmd = "echo starting; sleep 0.3; printf 'Listening on :8080\\n'; sleep 30";
    let r = rpc.ok(
        "run",
        json!({"command": cmd, "background": true, "yield_ms": 30000, "until": "^Listening"}),
    );
    assert_eq!(r["state"], "running", "{r}");
    assert_eq!(r["wait"]["ended_by"], "match", "{r}");
    let m = &r["wait"]["matched"];
    assert_eq!(m["line"], "Listening on :8080", "{r}");
    assert_eq!(m["offset"], 9, "after `starting\\n`");
    assert_eq!(m["cursor"], 9 + 19);
    rpc.ok("kill", json!({"id": id_of(&r)}));
    // `read` with `until` (no `collect` needed): the earlier line does not match.
    let r = rpc.ok("run", json!({"command": cmd, "background": true}));
    let got =
        rpc.ok("read", json!({"id": id_of(&r), "after": 0, "wait_ms": 30000, "until": "8080$"}));
    assert_eq!(got["wait"]["ended_by"], "match", "{got}");
    assert_eq!(got["wait"]["matched"]["cursor"], 28);
    rpc.ok("kill", json!({"id": id_of(&r)}));
    // `write` on a stdin pipe: the answer comes at the echoed line, not after the window.
    let r = rpc.ok("run", json!({"command": "cat", "background": true, "stdin": "pipe"}));
    let started = Instant::now();
    let got = rpc.ok(
        "write",
        json!({"id": id_of(&r), "chars": "ready\n", "yield_ms": 30000, "until": "ready"}),
    );
    assert!(started.elapsed() < Duration::from_secs(20));
    assert_eq!(got["wait"]["ended_by"], "match", "{got}");
    assert_eq!(got["output"], "ready\n");
    rpc.ok("kill", json!({"id": id_of(&r)}));
    // A bad pattern is the caller's to fix.
    let bad = rpc.call("read", json!({"id": id_of(&r), "wait_ms": 10, "until": "("}));
    assert_eq!(bad.unwrap_err().0, code::INVALID_PARAMS);
}

#[test]
fn list_with_a_limit_shows_running_first_then_the_newest_finished() {
    let f = Fixture::start();
    let mut rpc = f.client();
    let mut finished = Vec::new();
    for i in 0..6 {
        finished.push(id_of(&rpc.ok("run", json!({"command": format!("echo {i}")}))));
    }
    let running = id_of(
        &rpc.ok("run", json!({"command": "sleep 30", "background": true, "source": "watcher"})),
    );
    let all = rpc.ok("list", json!({}));
    assert_eq!(all["sessions"].as_array().unwrap().len(), 7);
    assert_eq!(all["more"], 0);
    let ids = |v: &serde_json::Value| -> Vec<String> {
        v["sessions"].as_array().unwrap().iter().map(id_of).collect()
    };
    let r = rpc.ok("list", json!({"limit": 3}));
    assert_eq!(ids(&r), [running.clone(), finished[5].clone(), finished[4].clone()]);
    assert_eq!(r["more"], 4);
    assert_eq!(ids(&rpc.ok("list", json!({"state": "running"}))), vec![running.clone()]);
    assert_eq!(ids(&rpc.ok("list", json!({"state": "finished"}))).len(), 6);
    assert_eq!(ids(&rpc.ok("list", json!({"source": "watcher"}))), vec![running.clone()]);
    rpc.ok("kill", json!({"id": running}));
}
