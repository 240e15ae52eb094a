//! The daemon's methods seen through the socket: long polls, concurrency on one connection,
//! disconnects, dedup by source, limits, forget/cleanup, kill, grep, shutdown, the lock and the
//! socket file.

use std::time::{Duration, Instant};

use serde_json::json;
use stockade_proto::rpc::code;
use stockade_testkit::procs::marked_processes;
use stockade_testkit::{Fixture, Rpc, eventually};

fn id_of(v: &serde_json::Value) -> String {
    v["id"].as_str().unwrap().to_owned()
}

fn state_of(rpc: &mut Rpc, id: &str) -> String {
    let r = rpc.ok("read", json!({"id": id, "max_bytes": 1}));
    r["state"].as_str().unwrap().to_owned()
}

#[test]
fn long_poll_returns_on_new_output_and_at_exit() {
    let f = Fixture::start();
    let mut rpc = f.client();
    // Quiet for a while, then one line, then quiet, then exit.
    let r = rpc.ok(
        "run",
        json!({"command": "sleep 0.5; echo ping; sleep 0.5; exit 4", "background": true}),
    );
    let id = id_of(&r);
    assert_eq!(r["state"], "running");
    let started = Instant::now();
    let got = rpc.ok("read", json!({"id": id, "after": 0, "wait_ms": 5000}));
    let waited = started.elapsed();
    assert_eq!(got["output"], "ping\n", "{got}");
    assert!(
        waited < Duration::from_millis(4500),
        "returned with the new bytes, not at the deadline ({waited:?})"
    );
    let cursor = got["next_cursor"].as_u64().unwrap();
    assert_eq!(cursor, 5);
    // Nothing new after the cursor: the poll returns at exit, with the exit status.
    let started = Instant::now();
    let end = rpc.ok("read", json!({"id": id, "after": cursor, "wait_ms": 5000}));
    assert!(started.elapsed() < Duration::from_millis(4500), "returned at exit");
    assert_eq!(end["state"], "exited", "{end}");
    assert_eq!(end["code"], 4);
    assert_eq!(end["output"], "");
    assert_eq!(end["next_cursor"], 5);
    // A poll on a finished session answers at once.
    let started = Instant::now();
    rpc.ok("read", json!({"id": id, "after": cursor, "wait_ms": 300000}));
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[test]
fn a_long_poll_does_not_block_other_requests_on_its_connection() {
    let f = Fixture::start();
    let mut rpc = f.client();
    let id = id_of(&rpc.ok("run", json!({"command": "sleep 30", "background": true})));
    let poll = rpc.send("read", json!({"id": id, "after": 0, "wait_ms": 20000}));
    let status = rpc.send("status", json!({}));
    let first = rpc.recv();
    assert_eq!(first["id"], json!(status), "status answered while the poll waits: {first}");
    assert_eq!(first["result"]["pid"], json!(std::process::id()));
    // Killing the session ends the poll.
    let kill = rpc.send("kill", json!({"id": id, "signal": "TERM"}));
    let mut seen = vec![];
    for _ in 0..2 {
        seen.push(rpc.recv());
    }
    let by_id = |want: u64| seen.iter().find(|r| r["id"] == json!(want)).unwrap().clone();
    assert_eq!(by_id(kill)["result"]["state"], "killed");
    assert_eq!(by_id(kill)["result"]["report"]["terminated"], true);
    assert_eq!(by_id(poll)["result"]["state"], "killed");
}

#[test]
fn a_client_that_disconnects_mid_poll_is_dropped_and_its_foreground_run_ends() {
    let f = Fixture::start();
    let mut keeper = f.client();
    let bg = id_of(&keeper.ok("run", json!({"command": "sleep 30", "background": true})));
    {
        let mut gone = f.client();
        gone.send("read", json!({"id": bg, "after": 0, "wait_ms": 60000}));
        gone.send("run", json!({"command": "sleep 1000"}));
        // Let the foreground run start before hanging up.
        eventually(Duration::from_secs(10), "the foreground run", || {
            let list = keeper.ok("list", json!({}));
            (list["sessions"].as_array().unwrap().len() == 2).then_some(())
        });
    }
    let fg = format!("sh-{}", bg.trim_start_matches("sh-").parse::<u64>().unwrap() + 1);
    eventually(Duration::from_secs(10), "the abandoned foreground run to end", || {
        (state_of(&mut keeper, &fg) == "killed").then_some(())
    });
    assert!(marked_processes(&f.marker(&fg)).is_empty(), "nothing of the foreground run remains");
    // The background session is untouched and the daemon serves on.
    assert_eq!(state_of(&mut keeper, &bg), "running");
    keeper.ok("kill", json!({"id": bg}));
}

#[test]
fn a_half_closed_connection_still_gets_its_answers() {
    let f = Fixture::start();
    let mut rpc = f.client();
    rpc.send("run", json!({"command": "sleep 0.3; echo late"}));
    rpc.shutdown_writes();
    let resp = rpc.recv();
    assert_eq!(resp["result"]["output"], "late\n", "{resp}");
}

#[test]
fn run_with_an_active_source_answers_with_that_session() {
    let f = Fixture::start();
    let mut rpc = f.client();
    let first =
        rpc.ok("run", json!({"command": "sleep 30", "background": true, "source": "job-a"}));
    assert_eq!(first["deduplicated"], false);
    let second =
        rpc.ok("run", json!({"command": "sleep 30", "background": true, "source": "job-a"}));
    assert_eq!(second["deduplicated"], true);
    assert_eq!(second["id"], first["id"]);
    let other = rpc.ok("run", json!({"command": "true", "source": "job-b"}));
    assert_ne!(other["id"], first["id"]);
    // Once the first has ended, the source starts a new session.
    rpc.ok("kill", json!({"id": first["id"]}));
    let third = rpc.ok("run", json!({"command": "echo again", "source": "job-a"}));
    assert_eq!(third["deduplicated"], false);
    assert_ne!(third["id"], first["id"]);
    let list = rpc.ok("list", json!({}));
    assert_eq!(list["sessions"].as_array().unwrap().len(), 3);
}

#[test]
fn limits_are_clear_errors_and_finished_sessions_are_pruned_oldest_first() {
    let f = Fixture::with(|c| {
        c.limits.max_running = 2;
        c.limits.max_finished = 2;
        c.limits.hot_tail_budget = 3 * 1024 * 1024;
        c.limits.max_disk_cap = 1024 * 1024;
        c.disk_cap = 512 * 1024;
    });
    let mut rpc = f.client();
    let a = id_of(&rpc.ok("run", json!({"command": "sleep 30", "background": true})));
    let err = rpc.call(
        "run",
        json!({"command": "sleep 30", "background": true, "retained_cap": 4 * 1024 * 1024}),
    );
    assert_eq!(err.unwrap_err().0, code::LIMIT_REACHED, "hot-tail budget");
    let b = id_of(&rpc.ok("run", json!({"command": "sleep 30", "background": true})));
    let (c, message) = rpc.call("run", json!({"command": "true"})).unwrap_err();
    assert_eq!(c, code::LIMIT_REACHED);
    assert!(message.contains("limit is 2"), "{message}");
    rpc.ok("kill", json!({"id": a}));
    rpc.ok("kill", json!({"id": b}));
    let err = rpc.call("run", json!({"command": "true", "disk_cap": 2 * 1024 * 1024}));
    assert_eq!(err.unwrap_err().0, code::LIMIT_REACHED, "per-session disk cap");
    // Four more finished runs: only the two newest finished sessions are kept.
    let mut ids = vec![];
    for i in 0..4 {
        ids.push(id_of(&rpc.ok("run", json!({"command": format!("echo {i}")}))));
    }
    let running = id_of(&rpc.ok("run", json!({"command": "sleep 30", "background": true})));
    let list = rpc.ok("list", json!({}));
    let kept: Vec<String> = list["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        kept,
        vec![ids[2].clone(), ids[3].clone(), running.clone()],
        "oldest finished pruned, running kept"
    );
    let gone = rpc.call("read", json!({"id": a})).unwrap_err();
    assert_eq!(gone.0, code::NO_SUCH_SESSION);
    assert!(
        !f.home.join("spool").join(&f.instance).join(&a).exists(),
        "pruned session's directory deleted"
    );
    rpc.ok("kill", json!({"id": running}));
}

#[test]
fn the_disk_budget_refuses_new_runs_once_spools_hold_it() {
    let f = Fixture::with(|c| c.limits.disk_budget = 64 * 1024);
    let mut rpc = f.client();
    rpc.ok("run", json!({"command": "head -c 100000 /dev/zero"}));
    let (c, message) = rpc.call("run", json!({"command": "true"})).unwrap_err();
    assert_eq!(c, code::LIMIT_REACHED);
    assert!(message.contains("disk budget"), "{message}");
    let cleaned = rpc.ok("cleanup", json!({}));
    assert_eq!(cleaned["removed_bytes"], 100000);
    rpc.ok("run", json!({"command": "true"}));
}

#[test]
fn forget_and_cleanup_terminate_delete_and_drop() {
    let f = Fixture::start();
    let mut rpc = f.client();
    let running =
        id_of(&rpc.ok(
            "run",
            json!({"command": "echo hi; sleep 600", "background": true, "yield_ms": 200}),
        ));
    let done = id_of(&rpc.ok("run", json!({"command": "echo done"})));
    let dir = f.home.join("spool").join(&f.instance).join(&running);
    assert!(dir.join("output.log").exists());
    eventually(Duration::from_secs(5), "the marker", || {
        (!marked_processes(&f.marker(&running)).is_empty()).then_some(())
    });
    let forgotten = rpc.ok("forget", json!({"id": running}));
    assert_eq!(forgotten["report"]["terminated"], true, "{forgotten}");
    assert_eq!(forgotten["removed_bytes"], 3);
    assert!(!dir.exists(), "session directory deleted");
    assert!(marked_processes(&f.marker(&running)).is_empty());
    assert_eq!(rpc.call("forget", json!({"id": running})).unwrap_err().0, code::NO_SUCH_SESSION);
    // cleanup: finished only by default; all with `all`.
    let live = id_of(&rpc.ok("run", json!({"command": "sleep 600", "background": true})));
    let c = rpc.ok("cleanup", json!({}));
    assert_eq!(c["forgotten"], json!([done]));
    let c = rpc.ok("cleanup", json!({"all": true}));
    assert_eq!(c["forgotten"], json!([live]));
    assert!(marked_processes(&f.marker(&live)).is_empty());
    assert_eq!(rpc.ok("list", json!({}))["sessions"], json!([]));
    // Ids are never reused.
    let next = id_of(&rpc.ok("run", json!({"command": "true"})));
    assert_eq!(next, "sh-4", "sh-1..sh-3 were forgotten, not reused");
}

#[test]
fn kill_grep_list_stats_status_and_unsupported_methods() {
    let f = Fixture::start();
    let mut rpc = f.client();
    let id = id_of(&rpc.ok("run", json!({"command": "trap '' TERM; seq 1 50; sleep 600", "background": true, "yield_ms": 300})));
    let list = rpc.ok("list", json!({}));
    let info = &list["sessions"][0];
    assert_eq!(info["state"], "running");
    assert!(info["processes"].as_u64().unwrap() >= 1, "{info}");
    assert_eq!(info["total_bytes"], 141);
    let g = rpc.ok("grep", json!({"id": id, "pattern": "^4[0-9]$", "max_matches": 3}));
    assert_eq!(g["matches"], 3);
    assert_eq!(g["truncated"], true);
    assert_eq!(g["lines"][0]["text"], "40");
    let bad = rpc.call("grep", json!({"id": id, "pattern": "("})).unwrap_err();
    assert_eq!(bad.0, code::INVALID_PARAMS);
    // No stdin and no terminal: input and resizing are refused, each with its reason.
    for (method, params, reason) in [
        ("write", json!({"id": id, "chars": "x"}), "without input"),
        ("resize", json!({"id": id, "rows": 5, "cols": 5}), "does not run on a terminal"),
    ] {
        let (c, message) = rpc.call(method, params).unwrap_err();
        assert_eq!(c, code::NOT_SUPPORTED);
        assert!(message.contains(reason), "{message}");
    }
    assert_eq!(
        rpc.call("kill", json!({"id": id, "signal": "NOPE"})).unwrap_err().0,
        code::INVALID_PARAMS
    );
    // The shell ignores SIGTERM: the kill escalates to SIGKILL and says so.
    let k = rpc.ok("kill", json!({"id": id, "signal": "15", "grace_ms": 200}));
    assert_eq!(k["state"], "killed");
    assert_eq!(k["report"]["terminated"], true);
    assert_eq!(k["report"]["escalated"], true);
    assert!(marked_processes(&f.marker(&id)).is_empty());
    let stats = rpc.ok("stats", json!({}));
    assert!(stats["peak_rss_bytes"].as_u64().unwrap() >= stats["rss_bytes"].as_u64().unwrap() / 2);
    assert_eq!(stats["output_bytes"], 141);
    assert_eq!(stats["sessions"]["killed"], 1);
    let status = rpc.ok("status", json!({}));
    assert_eq!(status["socket"], json!(f.socket));
    assert_eq!(status["sessions"], 1);
}

#[test]
fn shutdown_terminates_sessions_removes_the_socket_and_clears_the_lock() {
    let mut f = Fixture::start();
    let mut rpc = f.client();
    let ids: Vec<String> = (0..3)
        .map(|_| id_of(&rpc.ok("run", json!({"command": "sleep 600 & setsid sleep 600 & wait", "background": true, "yield_ms": 100}))))
        .collect();
    for id in &ids {
        eventually(Duration::from_secs(5), "the session's processes", || {
            (marked_processes(&f.marker(id)).len() >= 2).then_some(())
        });
    }
    let answer = rpc.ok("shutdown", json!({}));
    assert_eq!(answer["stopping"], true);
    assert!(f.wait_stopped(Duration::from_secs(20)), "the daemon stopped");
    for id in &ids {
        assert!(marked_processes(&f.marker(id)).is_empty(), "nothing of {id} remains");
        let record: serde_json::Value = serde_json::from_slice(
            &std::fs::read(f.home.join("spool").join(&f.instance).join(id).join("session.json"))
                .unwrap(),
        )
        .unwrap();
        assert_eq!(record["state"], "killed", "record finalised: {record}");
    }
    assert!(!f.socket.exists(), "socket removed");
    // The lock is held until this process exits (see the daemon's lockfile docs); it names nobody.
    assert_eq!(
        std::fs::read_to_string(f.home.join("daemon.lock")).unwrap_or_default(),
        "",
        "the lock names no daemon"
    );
}

#[test]
fn a_second_daemon_on_the_same_home_is_refused_and_a_stale_socket_is_replaced() {
    let f = Fixture::start();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let second = rt.block_on(async {
        stockade_daemon::Daemon::bind(stockade_daemon::DaemonConfig::new(&f.home))
    });
    let err = second.unwrap_err().to_string();
    assert!(err.contains(&format!("pid {}", std::process::id())), "{err}");
    // The first still serves.
    f.client().ok("status", json!({}));

    // A socket file nobody listens on is replaced; a symlink or a file is refused.
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("h");
    std::fs::create_dir(&home).unwrap();
    drop(std::os::unix::net::UnixListener::bind(home.join("stockade.sock")).unwrap());
    assert!(home.join("stockade.sock").exists());
    let stale = Fixture::with(|c| c.home = home.clone());
    stale.client().ok("status", json!({}));
    drop(stale);

    let home2 = tmp.path().join("h2");
    std::fs::create_dir(&home2).unwrap();
    std::os::unix::fs::symlink(tmp.path().join("elsewhere"), home2.join("stockade.sock")).unwrap();
    let refused = rt.block_on(async {
        stockade_daemon::Daemon::bind(stockade_daemon::DaemonConfig::new(&home2))
    });
    let err = refused.unwrap_err().to_string();
    assert!(err.contains("not a socket"), "{err}");
    assert!(
        std::fs::symlink_metadata(home2.join("stockade.sock")).unwrap().file_type().is_symlink()
    );
    assert!(!home2.join("daemon.lock").exists(), "the lock is released when binding fails");
}
