//! A `tail` read with a cursor (what the MCP door's continued `read_output` sends): the newest
//! output after the cursor, the notice counting exactly the bytes and lines skipped between the
//! cursor and the tail (and reading on from the cursor), everything after the cursor when it
//! fits, and a wait that a loud log does not end early (a tail never fills).

use std::time::{Duration, Instant};

use serde_json::json;
use stockade_testkit::Fixture;

fn id_of(v: &serde_json::Value) -> String {
    v["id"].as_str().unwrap().to_owned()
}

/// `seq 1 n` as the log holds it.
fn seq(n: usize) -> String {
    (1..=n).map(|i| format!("{i}\n")).collect()
}

#[test]
fn a_tail_after_a_cursor_shows_the_newest_and_counts_what_it_skipped() {
    let f = Fixture::start();
    let mut rpc = f.client();
    let r = rpc.ok("run", json!({"command": "seq 1 100000", "yield_ms": 30000}));
    let id = id_of(&r);
    assert_eq!(r["state"], "exited", "{r}");
    let log = seq(100_000);
    // The cursor after line 1000, as an earlier answer would have left it.
    let cursor = seq(1000).len() as u64;
    let got = rpc.ok("read", json!({"id": id, "after": cursor, "mode": "tail", "max_bytes": 2000}));
    let output = got["output"].as_str().unwrap();
    assert!(output.ends_with("99999\n100000\n"), "{got}");
    assert!(output.len() <= 2000, "{}", output.len());
    let start = got["start_cursor"].as_u64().unwrap();
    assert_eq!(&log[start as usize..], output, "the tail is the log's end, whole lines");
    let notice = &got["notice"];
    assert_eq!(notice["after"], cursor, "read on from the cursor: {got}");
    assert_eq!(notice["omitted_bytes"], start - cursor, "{got}");
    let skipped_lines = log[cursor as usize..start as usize].matches('\n').count() as u64;
    assert_eq!(notice["omitted_lines"], skipped_lines, "{got}");
    assert_eq!(got["next_cursor"], log.len() as u64);

    // What follows the cursor fits: all of it, from the cursor, no notice.
    let near = (log.len() - 60) as u64;
    let got = rpc.ok("read", json!({"id": id, "after": near, "mode": "tail", "max_bytes": 2000}));
    assert_eq!(got["output"].as_str().unwrap(), &log[near as usize..], "{got}");
    assert!(got["notice"].is_null(), "{got}");
    // Without a cursor a tail is the log's end, as before.
    let got = rpc.ok("read", json!({"id": id, "mode": "tail", "max_bytes": 2000}));
    assert_eq!(got["notice"]["after"], 0, "{got}");
    assert_eq!(got["notice"]["omitted_bytes"], got["start_cursor"], "{got}");
}

#[test]
fn a_loud_log_does_not_end_a_tail_wait_early() {
    let f = Fixture::start();
    let mut rpc = f.client();
    let loud = "while true; do seq 1 2000; sleep 0.02; done";
    let id = id_of(&rpc.ok("run", json!({"command": loud, "background": true, "yield_ms": 300})));
    let started = Instant::now();
    let got = rpc.ok(
        "read",
        json!({"id": id, "after": 1, "mode": "tail", "max_bytes": 1000, "wait_ms": 1500, "collect": true}),
    );
    assert!(started.elapsed() >= Duration::from_millis(1500), "{got}");
    assert_eq!(got["wait"]["ended_by"], "window", "{got}");
    assert!(got["output"].as_str().unwrap().len() <= 1000, "{got}");
    assert_eq!(got["notice"]["after"], 1, "{got}");
    // Paging with a cursor still ends the wait when a page is full.
    let got = rpc.ok(
        "read",
        json!({"id": id, "after": 1, "max_bytes": 1000, "wait_ms": 60000, "collect": true}),
    );
    assert_eq!(got["wait"]["ended_by"], "full", "{got}");
    rpc.ok("kill", json!({"id": id}));
}
