//! `stockade mcp --http` with TLS (`--tls-cert`/`--tls-key`, the daemon's WebSocket-door setup):
//! an address off loopback is served as https://, a client that trusts the CA initializes, lists
//! the tools and runs a command; a clear-text request to it gets no answer; and without TLS or
//! `--insecure-plaintext` such an address is refused in one sentence.

use std::io::BufRead as _;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;

use serde_json::Value;
use stockade_testkit::Home;
use stockade_testkit::child::{STOP_TIMEOUT, run_bounded};

use crate::remote_support::Ca;

const TOKEN: &str = "tls-test-token-0123456789";

/// The server, killed on drop.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `stockade mcp ARGS` and waits (bounded) for the URL it prints.
fn start(home: &Home, args: &[&str]) -> (Server, String) {
    let mut child = home
        .stockade(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let server = Server(child);
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    loop {
        let line = rx.recv_timeout(STOP_TIMEOUT).expect("stockade mcp said where it listens");
        if let Some(url) = line.split_whitespace().find(|w| w.contains("://")) {
            return (server, url.to_owned());
        }
    }
}

/// POST `body` to `url` with curl trusting `ca`: (headers, body).
fn post(url: &str, ca: &Path, session: Option<&str>, body: &str) -> (String, String) {
    let mut curl = Command::new("curl");
    curl.args(["-sS", "-D", "-", "--max-time", "20", "--cacert"]).arg(ca);
    curl.args(["-H", &format!("Authorization: Bearer {TOKEN}")]);
    curl.args(["-H", "Content-Type: application/json"]);
    curl.args(["-H", "Accept: application/json, text/event-stream"]);
    if let Some(id) = session {
        curl.args(["-H", &format!("Mcp-Session-Id: {id}")]);
    }
    let out = run_bounded(curl.args(["--data", body, url]), STOP_TIMEOUT * 2);
    out.assert_success("curl over https");
    let (head, body) = out.stdout.split_once("\r\n\r\n").unwrap_or((&out.stdout, ""));
    (head.to_owned(), body.to_owned())
}

/// The JSON-RPC answer in a body (plain JSON or an SSE `data:` line).
fn answer(body: &str) -> Value {
    let json = body.lines().filter_map(|l| l.strip_prefix("data:")).find(|d| !d.trim().is_empty());
    serde_json::from_str(json.unwrap_or(body).trim()).unwrap_or_else(|e| panic!("{e}: {body}"))
}

#[test]
fn mcp_http_off_loopback_serves_tls_to_a_client_with_the_ca_and_refuses_clear_text() {
    if Command::new("curl").arg("--version").output().is_err() {
        stockade_testkit::cannot_run("curl is not installed");
        return;
    }
    let home = Home::new();
    // Off loopback, neither TLS nor --insecure-plaintext: refused, in one sentence.
    let out = run_bounded(
        &mut home.stockade(&["mcp", "--http", "0.0.0.0:0", "--token", TOKEN]),
        STOP_TIMEOUT,
    );
    assert_eq!(out.status.code(), Some(2), "{}", out.stderr);
    assert!(out.stderr.contains("--tls-cert") && out.stderr.contains("--insecure-plaintext"));
    assert_eq!(out.stderr.trim().lines().count(), 1, "one sentence: {}", out.stderr);

    let ca = Ca::new();
    let certs = home.root().join("certs");
    std::fs::create_dir_all(&certs).unwrap();
    ca.issue("127.0.0.1", &certs);
    let (cert, key) = (certs.join("cert.pem"), certs.join("key.pem"));
    let (cert, key) = (cert.to_str().unwrap(), key.to_str().unwrap());
    let args =
        ["mcp", "--http", "0.0.0.0:0", "--token", TOKEN, "--tls-cert", cert, "--tls-key", key];
    let (_server, url) = start(&home, &args);
    assert!(url.starts_with("https://0.0.0.0:"), "{url}");
    let url = url.replace("0.0.0.0", "127.0.0.1");
    let pem = ca.pem();

    let init = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"curl","version":"1"}}}"#;
    let (head, body) = post(&url, &pem, None, init);
    assert!(head.starts_with("HTTP/1.1 200") || head.starts_with("HTTP/2 200"), "{head}");
    assert!(answer(&body)["result"]["serverInfo"]["name"].is_string(), "{body}");
    let session = head
        .lines()
        .find_map(|l| l.to_ascii_lowercase().starts_with("mcp-session-id:").then(|| l[15..].trim()))
        .map(str::to_owned);
    let s = session.as_deref();
    post(&url, &pem, s, r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    let (_, body) = post(&url, &pem, s, r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#);
    let tools = answer(&body)["result"]["tools"].as_array().unwrap().len();
    assert_eq!(tools, 6, "{body}");
    let call = r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"exec_command","arguments":{"cmd":"echo over-tls"}}}"#;
    let (_, body) = post(&url, &pem, s, call);
    let text = answer(&body)["result"]["content"][0]["text"].as_str().unwrap().to_owned();
    assert!(text.contains("Exit code: 0") && text.contains("over-tls"), "{text}");

    // Clear text to the TLS port: no HTTP answer at all.
    let plain = url.replace("https://", "http://");
    let out = run_bounded(
        Command::new("curl").args(["-sS", "--max-time", "10", "--data", "{}", &plain]),
        STOP_TIMEOUT * 2,
    );
    assert!(!out.status.success(), "clear text was answered: {}", out.stdout);
    assert!(!out.stdout.contains("jsonrpc"), "{}", out.stdout);
}
