//! The probes while the daemon recovers, the real binary (`stockade daemon run --ws … --metrics
//! …`) with a start-up recovery made 6 s long (test hook): `/healthz` answers 200 at once on
//! both listeners and `/readyz` 503, the door refuses an upgrade with 503 after 2 s of waiting
//! and a Unix-socket request waits; once recovery is done `/readyz` is 200 and both serve. And the read-only
//! metrics token (`--metrics-token-file`): it reads `/metrics` on the door and on `--metrics`,
//! beside the door's token, and opens no WebSocket. And the audit log (`--audit-log`): one line
//! per connection and per run, naming the door, and rotated to at most two bounded files.

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use serde_json::json;
use stockade_testkit::ws::{self, WsRpc};
use stockade_testkit::{DaemonProc, owner_token_file};

const TOKEN: &str = "probes-test-token-51c0";
/// How long the test hook makes start-up recovery take (an upgrade waits 2 s of it, then is
/// refused).
const RECOVERY: Duration = Duration::from_secs(6);

/// The status code of `GET path`, or 0 when the connection is refused or fails.
fn status(addr: SocketAddr, path: &str) -> u16 {
    status_with(addr, path, None)
}

/// [`status`] with `Authorization: Bearer <token>` when a token is given.
fn status_with(addr: SocketAddr, path: &str, token: Option<&str>) -> u16 {
    let Ok(mut s) = TcpStream::connect(addr) else { return 0 };
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let auth = token.map(|t| format!("Authorization: Bearer {t}\r\n")).unwrap_or_default();
    let head = format!("GET {path} HTTP/1.1\r\nHost: x\r\n{auth}Connection: close\r\n\r\n");
    if s.write_all(head.as_bytes()).is_err() {
        return 0;
    }
    let mut answer = String::new();
    let _ = s.read_to_string(&mut answer);
    answer.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0)
}

/// The metrics address from the readiness line.
fn metrics_addr(daemon: &DaemonProc) -> SocketAddr {
    let ready = daemon.stderr.lock().unwrap().clone();
    let rest = ready.split("metrics on http://").nth(1).expect("the ready line names it");
    let addr: SocketAddr = rest.split('/').next().unwrap().parse().unwrap();
    // An unspecified address is reached on loopback.
    SocketAddr::from(([127, 0, 0, 1], addr.port()))
}

#[test]
fn probes_answer_while_the_daemon_recovers_and_readyz_turns_200_after() {
    let tmp = tempfile::tempdir().unwrap();
    let token = owner_token_file(tmp.path(), TOKEN);
    let home = tmp.path().join("home");
    let args = ["--ws", "127.0.0.1:0", "--token-file", token.to_str().unwrap()];
    let args = [&args[..], &["--metrics", "127.0.0.1:0"]].concat();
    let delay = RECOVERY.as_millis().to_string();
    let started = Instant::now();
    let daemon =
        DaemonProc::start_env(&home, &args, &[("STOCKADE_TEST_RECOVERY_DELAY_MS", &delay)])
            .unwrap();
    let (door, metrics) = (daemon.ws_addr(), metrics_addr(&daemon));

    // A Unix-socket request sent now waits for recovery, then is answered.
    let socket_client = {
        let mut rpc = daemon.client();
        std::thread::spawn(move || {
            let status = rpc.ok("status", json!({}));
            (status, Instant::now())
        })
    };

    for addr in [door, metrics] {
        assert_eq!(status(addr, "/healthz"), 200, "healthz on {addr} while recovering");
        assert_eq!(status(addr, "/readyz"), 503, "readyz on {addr} while recovering");
    }
    let probed = started.elapsed();
    eprintln!("healthz 200 and readyz 503 on both listeners {probed:?} after the start");
    assert!(probed < RECOVERY, "the probes answered before recovery ended: {probed:?}");
    let asked = Instant::now();
    assert_eq!(ws::refused_status(door, Some(&format!("Bearer {TOKEN}"))), 503);
    eprintln!("an upgrade during recovery: 503 after {:?}", asked.elapsed());

    let mut ready_after = None;
    while started.elapsed() < Duration::from_secs(60) {
        if status(door, "/readyz") == 200 {
            ready_after = Some(started.elapsed());
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let ready_after = ready_after.expect("/readyz turns 200 within 60 s");
    eprintln!("readyz 200 {ready_after:?} after the start");
    assert!(ready_after >= RECOVERY, "not ready before recovery ended: {ready_after:?}");
    assert_eq!(status(metrics, "/readyz"), 200);
    assert_eq!(status(door, "/healthz"), 200);

    let (answer, answered) = socket_client.join().unwrap();
    assert_eq!(answer["pid"], daemon.pid, "{answer}");
    assert!(answered.duration_since(started) >= RECOVERY, "the socket waited for recovery");
    let mut ws = WsRpc(ws::connect(door, Some(&format!("Bearer {TOKEN}"))).unwrap());
    let run =
        ws.request(r#"{"jsonrpc":"2.0","id":1,"method":"run","params":{"command":"echo hi"}}"#);
    assert_eq!(run["result"]["output"], "hi\n", "{run}");
}

#[test]
fn the_metrics_token_reads_metrics_and_opens_no_websocket() {
    const SCRAPE: &str = "probes-scrape-only-7d21";
    let tmp = tempfile::tempdir().unwrap();
    let door_token = owner_token_file(tmp.path(), TOKEN);
    let scrape_dir = tmp.path().join("scrape");
    std::fs::create_dir(&scrape_dir).unwrap();
    let scrape_token = owner_token_file(&scrape_dir, SCRAPE);
    // The metrics address off loopback, so it asks for a token too.
    let daemon = DaemonProc::start(&[
        "--ws",
        "127.0.0.1:0",
        "--token-file",
        door_token.to_str().unwrap(),
        "--metrics-token-file",
        scrape_token.to_str().unwrap(),
        "--metrics",
        "0.0.0.0:0",
        "--insecure-plaintext",
    ]);
    let (door, metrics) = (daemon.ws_addr(), metrics_addr(&daemon));
    for addr in [door, metrics] {
        assert_eq!(status_with(addr, "/metrics", Some(SCRAPE)), 200, "metrics token on {addr}");
        assert_eq!(status_with(addr, "/metrics", Some(TOKEN)), 200, "door token on {addr}");
        assert_eq!(status_with(addr, "/metrics", None), 401, "no token on {addr}");
        assert_eq!(status_with(addr, "/metrics", Some("wrong")), 401, "wrong token on {addr}");
    }
    // The metrics token runs nothing: the door refuses its upgrade before any method.
    assert_eq!(ws::refused_status(door, Some(&format!("Bearer {SCRAPE}"))), 401);
    let mut ws = WsRpc(ws::connect(door, Some(&format!("Bearer {TOKEN}"))).unwrap());
    let answer = ws.request(r#"{"jsonrpc":"2.0","id":1,"method":"status"}"#);
    assert_eq!(answer["result"]["pid"], daemon.pid, "{answer}");
}

/// The audit log's lines.
fn audit_lines(path: &std::path::Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

#[test]
fn the_audit_log_has_a_line_per_run_with_its_door_and_rotates_bounded() {
    let tmp = tempfile::tempdir().unwrap();
    let token = owner_token_file(tmp.path(), TOKEN);
    let log = tmp.path().join("audit.jsonl");
    let home = tmp.path().join("home");
    let args = ["--ws", "127.0.0.1:0", "--token-file", token.to_str().unwrap()];
    let args = [&args[..], &["--audit-log", log.to_str().unwrap()]].concat();
    let daemon = DaemonProc::start_at(&home, &args).unwrap();
    let mut rpc = daemon.client();
    for n in 0..3 {
        let run = rpc.ok("run", json!({"command": format!("echo socket-{n}")}));
        assert_eq!(run["code"], 0, "{run}");
    }
    let mut ws = WsRpc(ws::connect(daemon.ws_addr(), Some(&format!("Bearer {TOKEN}"))).unwrap());
    for n in 0..2 {
        let req = json!({"jsonrpc": "2.0", "id": n, "method": "run",
            "params": {"command": format!("echo door-{n}")}});
        let run = ws.request(&req.to_string());
        assert_eq!(run["result"]["code"], 0, "{run}");
    }
    // Written by a thread of its own: wait (at most 10 s) for the fifth run line.
    let runs = |lines: &[serde_json::Value]| {
        lines.iter().filter(|l| l["method"] == "run").cloned().collect::<Vec<_>>()
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while runs(&audit_lines(&log)).len() < 5 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let lines = audit_lines(&log);
    let runs = runs(&lines);
    assert_eq!(runs.len(), 5, "{lines:#?}");
    // SAFETY: getuid(2) cannot fail.
    let uid = unsafe { libc::getuid() };
    for (n, line) in runs.iter().enumerate() {
        let (door, command) = if n < 3 {
            ("unix", format!("echo socket-{n}"))
        } else {
            ("ws", format!("echo door-{}", n - 3))
        };
        assert_eq!(line["door"], door, "{line}");
        assert_eq!(line["command"], command, "{line}");
        assert!(line["session"].as_str().is_some_and(|s| !s.is_empty()), "{line}");
        assert!(chrono::DateTime::parse_from_rfc3339(line["time"].as_str().unwrap()).is_ok());
        if door == "unix" {
            assert_eq!(line["peer"], format!("uid:{uid}"), "{line}");
            assert!(line["token_id"].is_null(), "{line}");
        } else {
            assert!(line["peer"].as_str().unwrap().starts_with("127.0.0.1:"), "{line}");
            let id = line["token_id"].as_str().unwrap();
            assert_eq!(id.len(), 8, "{line}");
            assert!(!id.contains(TOKEN), "{line}");
        }
    }
    assert!(lines.iter().any(|l| l["method"] == "connect" && l["door"] == "ws"), "{lines:#?}");
    assert!(!std::fs::read_to_string(&log).unwrap().contains(TOKEN), "the token is never logged");
    drop((ws, rpc, daemon));

    // Rotation: 60 runs against a 2 KiB bound leave at most the file and FILE.1, each at most
    // the bound plus one line.
    const MAX: u64 = 2048;
    let log = tmp.path().join("small.jsonl");
    let args = ["--audit-log", log.to_str().unwrap(), "--audit-log-max-bytes", "2048"];
    let daemon = DaemonProc::start_at(&tmp.path().join("home2"), &args).unwrap();
    let mut rpc = daemon.client();
    for n in 0..60 {
        rpc.ok("run", json!({"command": format!("true {n}")}));
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    let last = |p: &std::path::Path| audit_lines(p).iter().any(|l| l["command"] == "true 59");
    while !last(&log) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(last(&log), "the last run is in the current file");
    let rotated = tmp.path().join("small.jsonl.1");
    let files: Vec<String> = stockade_testkit::dir_names(tmp.path())
        .into_iter()
        .filter(|n| n.starts_with("small.jsonl"))
        .collect();
    assert_eq!(files.len(), 2, "{files:?}");
    let longest = audit_lines(&log)
        .iter()
        .chain(audit_lines(&rotated).iter())
        .map(|l| l.to_string().len() as u64 + 1)
        .max()
        .unwrap();
    for path in [&log, &rotated] {
        let size = std::fs::metadata(path).unwrap().len();
        eprintln!("{}: {size} bytes (bound {MAX}, longest line {longest})", path.display());
        assert!(size <= MAX + longest, "{}: {size} bytes", path.display());
    }
}
