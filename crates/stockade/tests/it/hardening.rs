//! The small holes of an adversarial pass, each closed: an oversized request is named as such,
//! ids beyond 64-bit integers are refused rather than echoed as floats, only canonical session
//! ids name a session, bad environment names and NUL bytes are invalid params, a closed stderr
//! is no panic, logs carry no colour off a terminal, the CLI's text views show control
//! characters instead of obeying them, and the WebSocket 401 says whether the token was missing
//! or wrong.

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::json;
use stockade_proto::rpc::code;
use stockade_testkit::{DaemonProc, Home, owner_token_file, text};

#[test]
fn a_request_over_the_limit_is_named_not_an_invalid_answer() {
    let home = Home::new();
    home.ok(&["daemon", "start"]);
    // 10 variables of 120 KiB: over 1 MiB, each argument under the kernel's 128 KiB.
    let value = "x".repeat(120 * 1024);
    let envs: Vec<String> = (0..10).map(|i| format!("BIG{i}={value}")).collect();
    let mut args = vec!["run", "--bg"];
    for e in &envs {
        args.extend(["--env", e.as_str()]);
    }
    args.push("true");
    let out = home.run(&args);
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("more than the daemon's limit of 1048576"), "{stderr}");
    assert!(!stderr.contains("invalid answer"), "{stderr}");
}

#[test]
fn request_ids_are_echoed_exactly_or_refused() {
    let d = DaemonProc::start(&[]);
    let mut c = d.client();
    c.send_raw(b"{\"jsonrpc\":\"2.0\",\"id\":18446744073709551615,\"method\":\"status\"}\n");
    let max = c.recv();
    assert_eq!(max["id"], json!(u64::MAX), "{max}");
    assert!(max.get("result").is_some(), "{max}");
    c.send_raw(b"{\"jsonrpc\":\"2.0\",\"id\":18446744073709551616,\"method\":\"status\"}\n");
    let over = c.recv();
    assert_eq!(over["id"], json!(null), "never a float: {over}");
    assert_eq!(over["error"]["code"], code::INVALID_REQUEST, "{over}");
    c.send_raw(b"{\"jsonrpc\":\"2.0\",\"id\":1.5,\"method\":\"status\"}\n");
    assert_eq!(c.recv()["error"]["code"], code::INVALID_REQUEST);
    c.send_raw(b"{\"jsonrpc\":\"2.0\",\"id\":-7,\"method\":\"status\"}\n");
    assert_eq!(c.recv()["id"], json!(-7));
}

#[test]
fn only_canonical_session_ids_name_a_session() {
    let d = DaemonProc::start(&[]);
    let mut c = d.client();
    let run = c.ok("run", json!({"command": "echo kept"}));
    let id = run["id"].as_str().unwrap().to_owned();
    let n = id.trim_start_matches("sh-");
    for alias in [format!("sh-+{n}"), format!("sh-0{n}"), format!("sh- {n}")] {
        let (code, message) = c.call("read", json!({"id": alias})).unwrap_err();
        assert_eq!(code, code::NO_SUCH_SESSION, "{alias}: {message}");
        assert!(c.call("forget", json!({"id": alias})).is_err(), "{alias} forgot {id}");
    }
    let read = c.ok("read", json!({"id": id}));
    assert_eq!(read["output"], "kept\n", "{read}");
}

#[test]
fn bad_environment_names_and_nul_bytes_are_invalid_params() {
    let d = DaemonProc::start(&[]);
    let mut c = d.client();
    let cases = [
        json!({"command": "true", "env": {"A=B": "x"}}),
        json!({"command": "true", "env": {"": "x"}}),
        json!({"command": "true", "env": {"A": "x\u{0}y"}}),
        json!({"command": "echo a\u{0}b"}),
        json!({"command": "true", "cwd": "/tmp\u{0}x"}),
    ];
    for params in cases {
        let (code, message) = c.call("run", params.clone()).unwrap_err();
        assert_eq!(code, code::INVALID_PARAMS, "{params}: {message}");
        assert!(message.contains("NUL") || message.contains("name"), "{message}");
    }
    assert!(c.call("list", json!({})).is_ok_and(|r| r["sessions"].as_array().unwrap().is_empty()));
}

#[test]
fn an_error_with_stderr_closed_is_no_panic() {
    let home = Home::new();
    let stockade = stockade_testkit::stockade_bin();
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!("exec 2>&-; exec '{}' --no-autostart ps", stockade.display()))
        .env("STOCKADE_HOME", home.path())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "an error, not a panic (101)");
}

#[test]
fn logs_carry_no_colour_off_a_terminal() {
    let home = Home::new();
    // Auto-started, the daemon logs to daemon.log (its stderr, not a terminal); info makes sure
    // there are lines. NO_COLOR is not set: the daemon must see for itself.
    let out = home
        .cmd(&["run", "--bg", "true"])
        .env("STOCKADE_LOG", "info")
        .env_remove("NO_COLOR")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(!out.stderr.contains(&0x1b), "colour on a pipe: {}", text(&out.stderr));
    stockade_testkit::eventually(stockade_testkit::PATIENCE, "the daemon logs", || {
        let log = std::fs::read_to_string(home.path().join("daemon.log")).ok()?;
        log.contains("INFO").then_some(())
    });
    home.ok(&["daemon", "stop"]);
    let log = std::fs::read_to_string(home.path().join("daemon.log")).unwrap();
    assert!(!log.contains('\u{1b}'), "colour in daemon.log: {log:?}");
}

#[test]
fn text_views_show_control_characters_instead_of_obeying_them() {
    let home = Home::new();
    let command = r"printf 'a\033[2Jb\000c\007d\n'";
    for args in [vec!["run", command], vec!["run", "--bg", "--yield-ms", "5000", command]] {
        let out = home.run(&args);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let shown = text(&out.stdout);
        assert!(shown.contains(r"a\x1b[2Jb\x00c\x07d"), "{args:?}: {shown:?}");
        assert!(!out.stdout.iter().any(|b| matches!(b, 0x1b | 0 | 7)), "{shown:?}");
    }
    let id = home.json_first(&["run", "--bg", "--json", "--yield-ms", "5000", command])["id"]
        .as_str()
        .unwrap()
        .to_owned();
    for args in [vec!["read", id.as_str()], vec!["logs", id.as_str()]] {
        let out = home.run(&args);
        assert!(text(&out.stdout).contains(r"a\x1b[2Jb"), "{args:?}: {}", text(&out.stdout));
        assert!(!out.stdout.contains(&0x1b), "{args:?}");
    }
    // The exact bytes stay one flag away.
    let raw = home.run(&["logs", "--raw", &id]);
    assert_eq!(raw.stdout, b"a\x1b[2Jb\x00c\x07d\n");
}

#[test]
fn malformed_mcp_lines_on_stdio_get_their_json_rpc_codes() {
    let home = Home::new();
    let lines = [
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"0"}}}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        "this is not json",
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"list_sessions","arguments":"x"}}"#,
        r#"{"jsonrpc":"2.0","id":3,"method":"tools/list"}"#,
    ];
    let mut child = home
        .stockade(&["mcp", "--embedded"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    for line in lines {
        stdin.write_all(format!("{line}\n").as_bytes()).unwrap();
    }
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut answers = Vec::new();
    let mut line = String::new();
    while answers.len() < 4 {
        line.clear();
        if std::io::BufRead::read_line(&mut stdout, &mut line).unwrap_or(0) == 0 {
            break;
        }
        answers.push(serde_json::from_str::<serde_json::Value>(&line).unwrap());
    }
    drop(stdin);
    let status =
        stockade_testkit::child::wait_bounded(&mut child, stockade_testkit::child::STOP_TIMEOUT);
    if status.is_none() {
        let _ = child.kill();
        let _ = child.wait();
    }
    let by_id = |id: serde_json::Value| answers.iter().find(|a| a["id"] == id).cloned();
    let parse = by_id(json!(null)).expect("an answer to the non-JSON line");
    assert_eq!(parse["error"]["code"], -32700, "{parse}");
    let bad = by_id(json!(2)).expect("an answer to the bad arguments");
    assert_eq!(bad["error"]["code"], -32602, "{bad}");
    assert!(by_id(json!(3)).is_some_and(|a| a["result"]["tools"].is_array()), "{answers:?}");
}

/// The WebSocket door's 401 body for an upgrade with this `Authorization` line (or none).
fn ws_401_body(addr: SocketAddr, authorization: Option<&str>) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let auth = authorization.map(|a| format!("Authorization: {a}\r\n")).unwrap_or_default();
    let request = format!(
        "GET / HTTP/1.1\r\nHost: {addr}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n{auth}\r\n"
    );
    s.write_all(request.as_bytes()).unwrap();
    let mut answer = Vec::new();
    let _ = s.read_to_end(&mut answer);
    let answer = text(&answer);
    assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
    answer
}

#[test]
fn the_websocket_401_says_whether_the_token_was_missing_or_wrong() {
    let tmp = tempfile::tempdir().unwrap();
    let file = owner_token_file(tmp.path(), "hardening-test-token-0123");
    let d = DaemonProc::start(&["--ws", "127.0.0.1:0", "--token-file", file.to_str().unwrap()]);
    let addr = d.ws_addr();
    assert!(ws_401_body(addr, None).contains("a token is required"));
    let wrong = ws_401_body(addr, Some("Bearer not-the-token-at-all"));
    assert!(wrong.contains("the token is wrong"), "{wrong}");
}
