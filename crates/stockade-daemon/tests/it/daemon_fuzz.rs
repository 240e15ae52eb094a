//! Bad input never hurts the daemon: 1,000 malformed and edge-case requests are each answered
//! (an error, or a result where the request is valid; nothing for a valid notification), no
//! session is lost, and the daemon serves normally afterwards.

use std::time::Duration;

use serde_json::{Value, json};
use stockade_proto::rpc::code;
use stockade_testkit::{Fixture, outcome};

/// One case: the raw line (without `\n`) and whether an answer is expected.
fn cases(id_running: &str, id_done: &str) -> Vec<(Vec<u8>, bool)> {
    let mut out: Vec<(Vec<u8>, bool)> = Vec::new();
    let mut add = |v: Value| out.push((serde_json::to_vec(&v).unwrap(), true));
    let good =
        json!({"jsonrpc": "2.0", "id": 1, "method": "read", "params": {"id": id_done, "after": 0}});
    let text = serde_json::to_string(&good).unwrap();
    // Truncated JSON at every length.
    let mut raw: Vec<(Vec<u8>, bool)> = Vec::new();
    for cut in 1..text.len() {
        raw.push((text.as_bytes()[..cut].to_vec(), true));
    }
    // Wrong types for every field of read and run.
    let bad_values = [
        json!(-1),
        json!("x"),
        json!(1.5),
        json!([]),
        json!({}),
        json!(true),
        json!(null),
        json!(u64::MAX),
        json!(-9223372036854775807i64),
    ];
    for field in ["id", "after", "max_bytes", "max_lines", "mode", "stream", "wait_ms", "raw"] {
        for v in &bad_values {
            add(
                json!({"jsonrpc": "2.0", "id": 7, "method": "read", "params": {"id": id_done, field: v}}),
            );
        }
    }
    for field in [
        "command",
        "cwd",
        "env",
        "shell",
        "login",
        "background",
        "timeout_ms",
        "yield_ms",
        "capture",
        "max_bytes",
        "direction",
        "retained_cap",
        "disk_cap",
        "disk_policy",
        "source",
        "pty",
        "stdin",
    ] {
        for v in &bad_values {
            add(
                json!({"jsonrpc": "2.0", "id": "r", "method": "run", "params": {"command": "true", field: v, "background": true}}),
            );
        }
    }
    // Edge values that are valid: u64::MAX bounds (clamped), cursors past the end, long waits on
    // a finished session (answered at once).
    for _ in 0..5 {
        add(
            json!({"jsonrpc": "2.0", "id": 2, "method": "read", "params": {"id": id_done, "after": 0, "max_bytes": u64::MAX, "max_lines": u64::MAX}}),
        );
        add(
            json!({"jsonrpc": "2.0", "id": 3, "method": "read", "params": {"id": id_done, "after": u64::MAX}}),
        );
        add(
            json!({"jsonrpc": "2.0", "id": 4, "method": "read", "params": {"id": id_done, "after": 0, "raw": true, "max_bytes": u64::MAX}}),
        );
        add(
            json!({"jsonrpc": "2.0", "id": 5, "method": "read", "params": {"id": id_done, "wait_ms": u64::MAX}}),
        );
        add(
            json!({"jsonrpc": "2.0", "id": 6, "method": "grep", "params": {"id": id_done, "pattern": "(", "max_matches": u64::MAX}}),
        );
        add(
            json!({"jsonrpc": "2.0", "id": 6, "method": "grep", "params": {"id": id_done, "pattern": "x", "context": u64::MAX}}),
        );
        add(
            json!({"jsonrpc": "2.0", "id": 8, "method": "kill", "params": {"id": id_done, "signal": "SIGBOGUS"}}),
        );
        add(json!({"jsonrpc": "2.0", "id": 9, "method": "kill", "params": {"id": "sh-999999"}}));
        add(json!({"jsonrpc": "2.0", "id": 9, "method": "forget", "params": {"id": "../../etc"}}));
        add(
            json!({"jsonrpc": "2.0", "id": 9, "method": "read", "params": {"id": "sh-18446744073709551615"}}),
        );
        add(
            json!({"jsonrpc": "2.0", "id": 10, "method": "write", "params": {"id": id_running, "chars": "x"}}),
        );
        add(
            json!({"jsonrpc": "2.0", "id": 11, "method": "resize", "params": {"id": id_running, "rows": 1, "cols": 1}}),
        );
        add(
            json!({"jsonrpc": "2.0", "id": 12, "method": "run", "params": {"command": "true", "pty": {"rows": 5, "cols": 5}}}),
        );
        add(json!({"jsonrpc": "2.0", "id": 13, "method": "run", "params": {"command": "   "}}));
        add(
            json!({"jsonrpc": "2.0", "id": 14, "method": "run", "params": {"command": "true", "retained_cap": 1}}),
        );
        add(
            json!({"jsonrpc": "2.0", "id": 15, "method": "run", "params": {"command": "true", "cwd": "/nonexistent/dir"}}),
        );
        add(json!({"jsonrpc": "2.0", "id": 16, "method": "list", "params": {"bogus": 1}}));
        add(json!({"jsonrpc": "2.0", "id": 17, "method": "stats", "params": [1, 2]}));
    }
    // Envelope errors: unknown methods, wrong versions, bad ids, non-objects, batches.
    for i in 0..40 {
        add(json!({"jsonrpc": "2.0", "id": i, "method": format!("no_such_{i}")}));
        add(json!({"jsonrpc": "1.0", "id": i, "method": "status"}));
        add(json!({"id": i, "method": "status"}));
        add(json!({"jsonrpc": "2.0", "id": {"nested": i}, "method": "status"}));
        add(json!({"jsonrpc": "2.0", "id": i, "method": i}));
        add(json!({"jsonrpc": "2.0", "id": i}));
        add(json!([{"jsonrpc": "2.0", "id": i, "method": "status"}]));
        add(json!([]));
        add(json!(i));
        add(json!("status"));
    }
    out.extend(raw);
    // Garbage bytes and invalid UTF-8.
    for i in 0..20u8 {
        out.push((vec![0xff, 0xfe, i, b'{'], true));
        out.push((
            format!("{{\"jsonrpc\":\"2.0\",\"id\":{i},\"method\":\"st\u{0}atus\"}}").into_bytes(),
            true,
        ));
    }
    // Valid notifications: executed, never answered.
    for _ in 0..10 {
        out.push((br#"{"jsonrpc":"2.0","method":"status"}"#.to_vec(), false));
        out.push((br#"{"jsonrpc":"2.0","method":"no_such_method"}"#.to_vec(), false));
    }
    out
}

#[test]
fn a_thousand_bad_requests_are_each_answered_and_the_daemon_keeps_serving() {
    let fixture = Fixture::start();
    let mut rpc = fixture.client();
    let running = rpc.ok("run", json!({"command": "sleep 600", "background": true}));
    let running_id = running["id"].as_str().unwrap().to_owned();
    let done = rpc.ok("run", json!({"command": "seq 1 1000"}));
    let done_id = done["id"].as_str().unwrap().to_owned();
    assert_eq!(done["state"], "exited");

    let mut all = cases(&running_id, &done_id);
    // A 10 MiB string (over the request limit), twice, and one just under the limit.
    let huge = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"run","params":{{"command":"{}"}}}}"#,
        "x".repeat(10 * 1024 * 1024)
    );
    all.push((huge.clone().into_bytes(), true));
    all.push((huge.into_bytes(), true));
    let near = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"grep","params":{{"id":"{done_id}","pattern":"{}"}}}}"#,
        "a".repeat(stockade_proto::rpc::MAX_REQUEST_BYTES - 200)
    );
    all.push((near.into_bytes(), true));
    // Top up to exactly 1,000 with more unknown methods.
    let mut n = 0;
    while all.len() < 1000 {
        n += 1;
        all.push((
            format!(r#"{{"jsonrpc":"2.0","id":{n},"method":"fill{n}"}}"#).into_bytes(),
            true,
        ));
    }
    assert!(all.len() >= 1000, "{} cases", all.len());

    let mut errors = 0;
    let mut results = 0;
    let mut codes = std::collections::BTreeMap::<i64, usize>::new();
    for (line, answered) in &all {
        rpc.send_raw(line);
        rpc.send_raw(b"\n");
        if !answered {
            continue;
        }
        let resp = rpc.recv();
        assert_eq!(resp["jsonrpc"], "2.0", "{resp}");
        match outcome(resp) {
            Ok(_) => results += 1,
            Err((code, _)) => {
                errors += 1;
                *codes.entry(code).or_default() += 1;
            }
        }
    }
    eprintln!("{} requests: {results} results, {errors} errors, by code {codes:?}", all.len());
    for c in [
        code::PARSE_ERROR,
        code::INVALID_REQUEST,
        code::METHOD_NOT_FOUND,
        code::INVALID_PARAMS,
        code::NO_SUCH_SESSION,
        code::NOT_SUPPORTED,
    ] {
        assert!(codes.contains_key(&c), "some request got code {c}: {codes:?}");
    }
    assert!(!codes.contains_key(&code::INTERNAL_ERROR), "no internal errors: {codes:?}");

    // Nothing was lost: both sessions are still there, the running one still runs, and the
    // daemon serves new work on the same connection and on a new one.
    let list = rpc.ok("list", json!({}));
    let ids: Vec<&str> =
        list["sessions"].as_array().unwrap().iter().map(|s| s["id"].as_str().unwrap()).collect();
    assert!(ids.contains(&running_id.as_str()) && ids.contains(&done_id.as_str()), "{ids:?}");
    let state = list["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == running_id.as_str())
        .unwrap()["state"]
        .clone();
    assert_eq!(state, "running");
    let again = rpc.ok("read", json!({"id": done_id, "after": 0, "max_bytes": 100000}));
    assert!(again["output"].as_str().unwrap().starts_with("1\n2\n3\n"));
    let mut fresh = fixture.client();
    let r = fresh.ok("run", json!({"command": "echo still here"}));
    assert_eq!(r["output"], "still here\n");
    fresh.ok("kill", json!({"id": running_id, "grace_ms": 100}));
    let _ = Duration::ZERO;
}
