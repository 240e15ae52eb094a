//! The streamable-HTTP door's guard: a bearer token on every bind (generated into a private file
//! when none is given), the WebSocket door's token-file rules and minimum length, the
//! `Authorization` scheme in any case, a 401 that says whether the token was missing or wrong,
//! and browser origins refused unless allowed.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt as _;

use stockade_testkit::Home;
use stockade_testkit::child::{STOP_TIMEOUT, run_bounded};
use stockade_testkit::mcp::HttpServer;

const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#;
const TOKEN: &str = "s3cret-token-0123456789";

/// POST an `initialize` with `headers` (`Name: value` lines) and return the status line and,
/// for an error status, the body read so far.
pub(crate) fn post_initialize(addr: &str, headers: &[String]) -> (String, String) {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(STOP_TIMEOUT)).unwrap();
    let extra: String = headers.iter().map(|h| format!("{h}\r\n")).collect();
    let request = format!(
        "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n{extra}Content-Length: {}\r\nConnection: close\r\n\r\n{INITIALIZE}",
        INITIALIZE.len()
    );
    stream.write_all(request.as_bytes()).unwrap();
    let mut response = Vec::new();
    // The answer may be an SSE stream held open: the head (and a short error body) is enough.
    let mut buf = [0u8; 4096];
    loop {
        let text = String::from_utf8_lossy(&response).into_owned();
        let status = text.lines().next().unwrap_or_default().to_owned();
        if let Some((_, body)) = text.split_once("\r\n\r\n")
            && (status.contains(" 200 ") || body.ends_with('\n'))
        {
            return (status, body.to_owned());
        }
        match stream.read(&mut buf) {
            Ok(0) => {
                return (
                    status,
                    text.split_once("\r\n\r\n").map(|b| b.1.to_owned()).unwrap_or_default(),
                );
            }
            Ok(n) => response.extend_from_slice(&buf[..n]),
            Err(e) => panic!("reading the answer: {e}"),
        }
    }
}

fn status(server: &HttpServer, headers: &[String]) -> String {
    post_initialize(&server.addr, headers).0
}

fn bearer(token: &str) -> String {
    format!("Authorization: Bearer {token}")
}

/// `stockade mcp ARGS` that must refuse to start: its stderr.
fn refused(home: &Home, args: &[&str]) -> String {
    let out = run_bounded(&mut home.stockade(args), STOP_TIMEOUT);
    assert_eq!(out.status.code(), Some(2), "{}", out.stderr);
    assert_eq!(home.daemon_pid(), None, "nothing should have started");
    out.stderr
}

#[test]
fn every_bind_needs_a_token_and_one_is_generated_into_a_private_file() {
    let home = Home::new();
    let server = HttpServer::start(&home, &[]);
    let file = home.path().join("mcp-token");
    let meta = std::fs::metadata(&file).expect("a token file was generated");
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    let token = std::fs::read_to_string(&file).unwrap().trim().to_owned();
    assert!(token.len() >= 32, "{token}");
    let (s, body) = post_initialize(&server.addr, &[]);
    assert!(s.contains(" 401 "), "{s}");
    assert!(body.contains("required"), "{body}");
    let (s, body) = post_initialize(&server.addr, &[bearer("wrong-but-long-enough-token")]);
    assert!(s.contains(" 401 "), "{s}");
    assert!(body.contains("wrong"), "{body}");
    assert!(status(&server, &[bearer(&token)]).contains(" 200 "));
    // The scheme in any case, as on the WebSocket door.
    assert!(status(&server, &[format!("Authorization: bearer {token}")]).contains(" 200 "));
    assert!(status(&server, &[format!("Authorization: BEARER {token}")]).contains(" 200 "));
    drop(server);
    // A second server on the same home reuses the file.
    let again = HttpServer::start(&home, &[]);
    assert!(status(&again, &[bearer(&token)]).contains(" 200 "));
}

#[test]
fn a_token_is_checked_as_a_bearer_token() {
    let home = Home::new();
    let token_file = home.path().join("token");
    std::fs::write(&token_file, format!("{TOKEN}\n")).unwrap();
    std::fs::set_permissions(&token_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let server = HttpServer::start(&home, &["--token-file", token_file.to_str().unwrap()]);
    assert!(status(&server, &[]).contains(" 401 "));
    assert!(status(&server, &[bearer("wrong")]).contains(" 401 "));
    assert!(status(&server, &[bearer(&format!("{TOKEN}-and-more"))]).contains(" 401 "));
    assert!(status(&server, &[format!("Authorization: {TOKEN}")]).contains(" 401 "));
    assert!(status(&server, &[format!("Authorization: Basic {TOKEN}")]).contains(" 401 "));
    let ok = status(&server, &[bearer(TOKEN)]);
    assert!(ok.contains(" 200 "), "{ok}");
}

#[test]
fn weak_tokens_and_token_files_others_can_read_are_refused() {
    let home = Home::new();
    let stderr = refused(&home, &["mcp", "--http", "0.0.0.0:0", "--token", "x"]);
    assert!(stderr.contains("minimum of 16"), "{stderr}");
    let stderr = refused(&home, &["mcp", "--http", "127.0.0.1:0", "--token", ""]);
    assert!(stderr.contains("empty"), "{stderr}");
    let open = home.path().join("open-token");
    std::fs::write(&open, format!("{TOKEN}\n")).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o644)).unwrap();
    let stderr =
        refused(&home, &["mcp", "--http", "127.0.0.1:0", "--token-file", open.to_str().unwrap()]);
    assert!(stderr.contains("0644") && stderr.contains("chmod 600"), "{stderr}");
    let short = home.path().join("short-token");
    std::fs::write(&short, "abc\n").unwrap();
    std::fs::set_permissions(&short, std::fs::Permissions::from_mode(0o600)).unwrap();
    let stderr =
        refused(&home, &["mcp", "--http", "127.0.0.1:0", "--token-file", short.to_str().unwrap()]);
    assert!(stderr.contains("minimum of 16"), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "one sentence: {stderr}");
}

#[test]
fn browser_origins_are_refused_unless_allowed() {
    let home = Home::new();
    let server =
        HttpServer::start(&home, &["--token", TOKEN, "--allow-origin", "http://localhost:6274"]);
    let auth = bearer(TOKEN);
    // A page elsewhere (DNS rebinding, a hostile site) is refused, even with the token.
    let s = status(&server, &[auth.clone(), "Origin: http://evil.example".into()]);
    assert!(s.contains(" 403 "), "{s}");
    let s = status(&server, &[auth.clone(), "Origin: http://localhost:9999".into()]);
    assert!(s.contains(" 403 "), "{s}");
    let s = status(&server, &[auth.clone(), "Origin: http://localhost:6274".into()]);
    assert!(s.contains(" 200 "), "{s}");
    // Non-browser clients send no Origin.
    assert!(status(&server, &[auth]).contains(" 200 "));

    // With no --allow-origin, every origin is refused.
    let home = Home::new();
    let server = HttpServer::start(&home, &["--token", TOKEN]);
    let s = status(&server, &[bearer(TOKEN), "Origin: http://127.0.0.1:1234".into()]);
    assert!(s.contains(" 403 "), "{s}");
}

#[test]
fn an_address_off_loopback_needs_insecure_plaintext_and_gets_a_warning() {
    let home = Home::new();
    let stderr = refused(&home, &["mcp", "--http", "0.0.0.0:0", "--token", TOKEN]);
    assert!(stderr.contains("not loopback") && stderr.contains("--insecure-plaintext"), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "one sentence: {stderr}");

    let args = ["mcp", "--http", "0.0.0.0:0", "--token", TOKEN, "--insecure-plaintext"];
    let mut child = home
        .stockade(&args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead as _;
        for line in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut seen = Vec::new();
    while !seen.iter().any(|l: &String| l.contains("listening on")) {
        match rx.recv_timeout(STOP_TIMEOUT) {
            Ok(line) => seen.push(line),
            Err(_) => break,
        }
    }
    // SAFETY: kill(2) on the server this test started.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let stopped = stockade_testkit::child::wait_bounded(&mut child, STOP_TIMEOUT);
    if stopped.is_none() {
        let _ = child.kill();
        let _ = child.wait();
    }
    assert!(seen.iter().any(|l| l.contains("listening on")), "it serves: {seen:?}");
    assert!(seen.iter().any(|l| l.contains("warning") && l.contains("in clear")), "{seen:?}");
}

/// One raw HTTP exchange on `addr`: the head and what of the body came until `done` held (or
/// the connection closed).
fn exchange(addr: &str, head: &str, body: &str, done: impl Fn(&str) -> bool) -> (String, String) {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(STOP_TIMEOUT)).unwrap();
    let request = format!(
        "{head}\r\nHost: {addr}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).unwrap();
    let mut response = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let text = String::from_utf8_lossy(&response).into_owned();
        if let Some((head, body)) = text.split_once("\r\n\r\n")
            && done(body)
        {
            return (head.to_owned(), body.to_owned());
        }
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => {
                let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
                return (head.to_owned(), body.to_owned());
            }
            Ok(n) => response.extend_from_slice(&buf[..n]),
        }
    }
}

#[test]
fn answers_carry_no_empty_event_and_closing_a_session_is_200() {
    let home = Home::new();
    let server = HttpServer::start(&home, &["--token", TOKEN]);
    let auth = bearer(TOKEN);
    let (head, body) =
        exchange(&server.addr, &format!("POST /mcp HTTP/1.1\r\n{auth}"), INITIALIZE, |body| {
            body.contains("\"result\"")
        });
    assert!(head.contains(" 200 "), "{head}");
    // Gemini CLI's client parses every event's data as JSON: an empty one fails it.
    for line in body.lines().filter(|l| l.starts_with("data:")) {
        assert!(!line.trim_start_matches("data:").trim().is_empty(), "an empty event: {body:?}");
    }
    let session = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase().starts_with("mcp-session-id:").then(|| l[15..].trim().to_owned())
        })
        .unwrap_or_else(|| panic!("no session id in {head}"));
    let (head, _) = exchange(
        &server.addr,
        &format!("DELETE /mcp HTTP/1.1\r\n{auth}\r\nMcp-Session-Id: {session}"),
        "",
        |_| false,
    );
    // The Python SDK logs anything but 200 or 204 as a failed termination.
    assert!(head.contains(" 200 "), "{head}");
}
