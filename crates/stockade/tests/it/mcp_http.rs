//! The streamable-HTTP door's guard: a token is required for any bind that is not loopback, and
//! when a token is set every request must carry it as a bearer token.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use stockade_testkit::Home;
use stockade_testkit::child::{STOP_TIMEOUT, run_bounded};
use stockade_testkit::mcp::HttpServer;

const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#;

/// POST an `initialize` to the server and return the status line.
fn post_initialize(server: &HttpServer, authorization: Option<&str>) -> String {
    let mut stream = TcpStream::connect(&server.addr).unwrap();
    stream.set_read_timeout(Some(STOP_TIMEOUT)).unwrap();
    let auth = authorization.map(|a| format!("Authorization: {a}\r\n")).unwrap_or_default();
    let request = format!(
        "POST /mcp HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n{auth}Content-Length: {}\r\nConnection: close\r\n\r\n{INITIALIZE}",
        server.addr,
        INITIALIZE.len()
    );
    stream.write_all(request.as_bytes()).unwrap();
    let mut response = Vec::new();
    // The answer may be an SSE stream held open: the status line is all we need.
    let mut buf = [0u8; 4096];
    while !response.windows(2).any(|w| w == b"\r\n") {
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => response.extend_from_slice(&buf[..n]),
            Err(e) => panic!("reading the answer: {e}"),
        }
    }
    let text = String::from_utf8_lossy(&response).into_owned();
    text.lines().next().unwrap_or_default().to_owned()
}

#[test]
fn a_non_loopback_bind_without_a_token_is_refused() {
    let home = Home::new();
    let out = run_bounded(&mut home.stockade(&["mcp", "--http", "0.0.0.0:0"]), STOP_TIMEOUT);
    assert_eq!(out.status.code(), Some(2), "{}", out.stderr);
    assert!(
        out.stderr.contains("without a token") && out.stderr.contains("--token"),
        "{}",
        out.stderr
    );
    assert_eq!(home.daemon_pid(), None, "nothing should have started");
}

#[test]
fn a_token_is_checked_as_a_bearer_token() {
    let home = Home::new();
    let token_file = home.path().join("token");
    std::fs::write(&token_file, "s3cret-token\n").unwrap();
    let server = HttpServer::start(&home, &["--token-file", token_file.to_str().unwrap()]);
    assert!(post_initialize(&server, None).contains(" 401 "));
    assert!(post_initialize(&server, Some("Bearer wrong")).contains(" 401 "));
    assert!(post_initialize(&server, Some("Bearer s3cret-token-and-more")).contains(" 401 "));
    assert!(post_initialize(&server, Some("s3cret-token")).contains(" 401 "));
    let ok = post_initialize(&server, Some("Bearer s3cret-token"));
    assert!(ok.contains(" 200 "), "{ok}");
}

#[test]
fn loopback_needs_no_token() {
    let home = Home::new();
    let server = HttpServer::start(&home, &[]);
    let ok = post_initialize(&server, None);
    assert!(ok.contains(" 200 "), "{ok}");
    std::thread::sleep(Duration::from_millis(10));
}
