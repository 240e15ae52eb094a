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

/// POSTs an `initialize` as `auth`: the status line and the new session's id (if any), and the
/// body when refused.
fn new_session(addr: &str, auth: &str) -> (String, Option<String>, String) {
    let (head, body) = exchange(addr, &format!("POST /mcp HTTP/1.1\r\n{auth}"), INITIALIZE, |b| {
        b.contains("\"result\"") || b.ends_with('\n')
    });
    let status = head.lines().next().unwrap_or_default().to_owned();
    let id = head.lines().find_map(|l| {
        l.to_ascii_lowercase().starts_with("mcp-session-id:").then(|| l[15..].trim().to_owned())
    });
    (status, id, body)
}

/// Opens the event stream (`GET /mcp`) of `session` and keeps it open: the connection (drop it to
/// close the stream), the status line and, when refused, the body.
fn open_stream(addr: &str, auth: &str, session: &str) -> (TcpStream, String, String) {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(STOP_TIMEOUT)).unwrap();
    let request = format!(
        "GET /mcp HTTP/1.1\r\nHost: {addr}\r\n{auth}\r\nMcp-Session-Id: {session}\r\nAccept: text/event-stream\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).unwrap();
    let mut response = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let text = String::from_utf8_lossy(&response).into_owned();
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let status = head.lines().next().unwrap_or_default().to_owned();
            if status.contains(" 200 ") || body.contains('\n') {
                return (stream, status, body.to_owned());
            }
        }
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => return (stream, text.clone(), String::new()),
            Ok(n) => response.extend_from_slice(&buf[..n]),
        }
    }
}

fn close_session(addr: &str, auth: &str, session: &str) -> String {
    let (head, _) = exchange(
        addr,
        &format!("DELETE /mcp HTTP/1.1\r\n{auth}\r\nMcp-Session-Id: {session}"),
        "",
        |_| false,
    );
    head.lines().next().unwrap_or_default().to_owned()
}

/// `VmHWM` (peak resident) of `pid` in KiB.
fn peak_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

#[test]
fn sessions_are_capped_at_256_and_a_closed_one_frees_its_place() {
    let home = Home::new();
    let server = HttpServer::start(&home, &["--token", TOKEN]);
    let auth = bearer(TOKEN);
    let mut ids = Vec::new();
    for i in 0..256 {
        let (status, id, body) = new_session(&server.addr, &auth);
        assert!(status.contains(" 200 "), "session {i}: {status} {body}");
        ids.push(id.unwrap_or_else(|| panic!("session {i} has no id")));
    }
    // Past the cap: 503, a sentence saying what to do, and nothing created.
    for _ in 0..20 {
        let (status, id, body) = new_session(&server.addr, &auth);
        assert!(status.contains(" 503 "), "{status} {body}");
        assert!(id.is_none(), "a refused initialize made a session");
        assert!(body.contains("--max-sessions 256") && body.contains("DELETE"), "{body}");
    }
    // Only for the token holder: without it, still 401 (how full we are is nobody else's).
    let (status, ..) = new_session(&server.addr, "X-None: 1");
    assert!(status.contains(" 401 "), "{status}");
    // Requests in existing sessions are served as before.
    assert_eq!(close_session(&server.addr, &auth, &ids[0]), "HTTP/1.1 200 OK");
    let (status, id, body) = new_session(&server.addr, &auth);
    assert!(
        status.contains(" 200 ") && id.is_some(),
        "a closed session frees its place: {status} {body}"
    );
    let peak = peak_kib(server.pid());
    eprintln!("stockade mcp --http with 256 sessions: peak resident {peak} KiB");
    assert!(peak > 0 && peak < 160 * 1024, "256 sessions cost {peak} KiB peak resident");
}

#[test]
fn event_streams_are_capped_in_all_and_per_session_and_a_closed_one_frees_its_place() {
    let home = Home::new();
    let server = HttpServer::start(&home, &["--token", TOKEN, "--max-streams", "6"]);
    let auth = bearer(TOKEN);
    let session = |_| new_session(&server.addr, &auth).1.expect("a session");
    let (a, b) = (session(0), session(1));
    // Four streams in one session, the fifth refused for the session.
    let mut open = Vec::new();
    for i in 0..4 {
        let (conn, status, body) = open_stream(&server.addr, &auth, &a);
        assert!(status.contains(" 200 "), "stream {i}: {status} {body}");
        open.push(conn);
    }
    let (_conn, status, body) = open_stream(&server.addr, &auth, &a);
    assert!(status.contains(" 503 ") && body.contains("this session"), "{status} {body}");
    // Two more in another session reach the server's cap of six: the seventh is refused.
    for i in 0..2 {
        let (conn, status, body) = open_stream(&server.addr, &auth, &b);
        assert!(status.contains(" 200 "), "stream {i} of b: {status} {body}");
        open.push(conn);
    }
    let (_conn, status, body) = open_stream(&server.addr, &auth, &b);
    assert!(status.contains(" 503 ") && body.contains("--max-streams 6"), "{status} {body}");
    // A client that goes away gives its place back (bounded: within 5 s).
    drop(open.pop());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let (conn, status, body) = open_stream(&server.addr, &auth, &b);
        if status.contains(" 200 ") {
            open.push(conn);
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the place was not freed: {status} {body}");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    // Out of --http these flags are refused in a sentence.
    let out = run_bounded(&mut home.stockade(&["mcp", "--max-sessions", "3"]), STOP_TIMEOUT);
    assert_eq!(out.status.code(), Some(2), "{}", out.stderr);
    assert!(out.stderr.contains("only apply with --http"), "{}", out.stderr);
}
