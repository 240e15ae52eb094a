//! `stockade daemon run --metrics ADDR`, the real binary: `/metrics`, `/healthz` and `/readyz`
//! on a listener of their own, read with `prometheus-client`'s OpenMetrics parser
//! (`tests/deploy/scrape.py`). On a loopback address `/metrics` needs no token and its figures
//! match `stats`; on any other address it needs the token and TLS (or `--insecure-plaintext`),
//! as the door does; the address never upgrades to a WebSocket; misuse is one sentence.

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};
use stockade_testkit::{DaemonProc, owner_token_file};

use crate::remote_support::{Ca, deploy_python, repo_root};

const TOKEN: &str = "metrics-test-token-9e2b";

fn token_file(dir: &Path) -> PathBuf {
    owner_token_file(dir, TOKEN)
}

/// The metrics address from the readiness line, and what it says about the token.
pub(crate) fn metrics_addr(daemon: &DaemonProc, scheme: &str) -> (SocketAddr, String) {
    let ready = daemon.stderr.lock().unwrap().clone();
    let rest = ready
        .split(&format!("metrics on {scheme}://"))
        .nth(1)
        .unwrap_or_else(|| panic!("the ready line names the metrics address: {ready}"));
    let addr = rest.split('/').next().unwrap().parse().unwrap();
    let note = rest.split(['(', ')']).nth(1).unwrap_or_default().to_owned();
    (addr, note)
}

/// GET `url` with scrape.py: status, body and the parsed samples.
pub(crate) fn scrape(url: &str, token: Option<&Path>, ca: Option<&Path>) -> Value {
    let mut c = std::process::Command::new(deploy_python());
    c.arg(repo_root().join("tests/deploy/scrape.py")).arg(url);
    if let Some(t) = token {
        c.arg("--token-file").arg(t);
    }
    if let Some(ca) = ca {
        c.arg("--ca-file").arg(ca);
    }
    let out = c.output().unwrap();
    assert!(out.status.success(), "scrape {url}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The status line of a raw request.
fn raw_status(addr: SocketAddr, request: &str) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(request.as_bytes()).unwrap();
    let mut answer = String::new();
    let _ = s.read_to_string(&mut answer);
    answer.lines().next().unwrap_or_default().to_owned()
}

#[test]
fn a_loopback_metrics_address_needs_no_token_and_matches_stats() {
    let daemon = DaemonProc::start(&["--metrics", "127.0.0.1:0"]);
    let (addr, note) = metrics_addr(&daemon, "http");
    assert!(addr.ip().is_loopback());
    assert_eq!(note, "no token: loopback");
    let mut rpc = daemon.client();
    for n in [10, 2000] {
        let run = rpc.ok("run", json!({"command": format!("seq 1 {n}")}));
        assert_eq!((&run["state"], &run["code"]), (&json!("exited"), &json!(0)), "{run}");
    }
    let stats = rpc.ok("stats", json!({}));

    let base = format!("http://{addr}");
    assert_eq!(scrape(&format!("{base}/healthz"), None, None)["status"], 200);
    assert_eq!(scrape(&format!("{base}/readyz"), None, None)["status"], 200);
    let m = scrape(&format!("{base}/metrics"), None, None);
    assert_eq!(m["status"], 200, "{m}");
    let samples = &m["samples"];
    let num = |name: &str| samples[name].as_f64().unwrap_or_else(|| panic!("{name} in {samples}"));
    for field in ["spooled_bytes", "output_bytes", "dropped_bytes"] {
        assert_eq!(num(&format!("stockade_{field}")), stats[field].as_f64().unwrap(), "{field}");
    }
    for (state, n) in stats["sessions"].as_object().unwrap() {
        assert_eq!(num(&format!("stockade_sessions{{state={state}}}")), n.as_f64().unwrap());
    }
    assert_eq!(num("stockade_spawn_seconds_count"), 2.0);

    // Only the three paths; never a WebSocket.
    assert_eq!(scrape(&format!("{base}/nope"), None, None)["status"], 404);
    let upgrade = format!(
        "GET / HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    );
    assert!(raw_status(addr, &upgrade).starts_with("HTTP/1.1 404"), "no upgrade here");
    assert!(raw_status(addr, "POST /metrics HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 405"));
}

#[test]
fn off_loopback_the_metrics_need_the_token_and_tls_or_an_explicit_plaintext() {
    let tmp = tempfile::tempdir().unwrap();
    let token = token_file(tmp.path());
    let token_s = token.to_str().unwrap();
    let home = tmp.path().join("home");

    // Refused at start, one sentence each, nothing left behind.
    for (extra, says) in [
        (
            vec!["--metrics", "0.0.0.0:0"],
            "scrapes must present the door's token: pass --token-file",
        ),
        (vec!["--metrics", "0.0.0.0:0", "--token-file", token_s], "refusing to serve metrics on"),
        (vec!["--token-file", token_s], "--token-file is for the network listeners"),
    ] {
        let (stderr, status) = match DaemonProc::start_at(&home, &extra) {
            Ok(_) => panic!("the daemon started with {extra:?}"),
            Err(e) => e,
        };
        assert_eq!(status.code(), Some(2), "{stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "one sentence: {stderr}");
        assert!(stderr.contains(says), "{extra:?}: {stderr}");
        assert!(!home.join("stockade.sock").exists(), "no socket left behind");
    }

    // Clear text when asked for: the token is required although the scrape comes from loopback
    // (the listener is reachable from elsewhere).
    let daemon = DaemonProc::start(&[
        "--metrics",
        "0.0.0.0:0",
        "--token-file",
        token_s,
        "--insecure-plaintext",
    ]);
    let (addr, note) = metrics_addr(&daemon, "http");
    assert_eq!(note, "token required");
    let url = format!("http://127.0.0.1:{}", addr.port());
    assert_eq!(scrape(&format!("{url}/metrics"), None, None)["status"], 401);
    let wrong = tmp.path().join("wrong");
    std::fs::write(&wrong, "not-the-token").unwrap();
    assert_eq!(scrape(&format!("{url}/metrics"), Some(&wrong), None)["status"], 401);
    let m = scrape(&format!("{url}/metrics"), Some(&token), None);
    assert_eq!(m["status"], 200, "{m}");
    assert!(m["samples"]["stockade_resident_memory_bytes"].as_f64().unwrap() > 0.0, "{m}");
    assert_eq!(scrape(&format!("{url}/readyz"), None, None)["status"], 200, "probes need none");
    drop(daemon);

    // TLS with the door's certificate: https:// and the token.
    let ca = Ca::new();
    let certs = tmp.path().join("certs");
    std::fs::create_dir_all(&certs).unwrap();
    ca.issue("127.0.0.1", &certs);
    let (cert, key) = (certs.join("cert.pem"), certs.join("key.pem"));
    let daemon = DaemonProc::start(&[
        "--metrics",
        "0.0.0.0:0",
        "--token-file",
        token_s,
        "--tls-cert",
        cert.to_str().unwrap(),
        "--tls-key",
        key.to_str().unwrap(),
    ]);
    let (addr, _) = metrics_addr(&daemon, "https");
    let url = format!("https://127.0.0.1:{}/metrics", addr.port());
    let pem = ca.pem();
    assert_eq!(scrape(&url, None, Some(&pem))["status"], 401);
    assert_eq!(scrape(&url, Some(&token), Some(&pem))["status"], 200);
}
