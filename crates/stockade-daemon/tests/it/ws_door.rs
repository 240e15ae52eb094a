//! The WebSocket door, seen from a client on loopback: no token, a wrong token or a token of
//! another length is refused with 401 before any method runs (a request sent after the refusal
//! never executes); the right token gets the same answers as the Unix socket;
//! a binary or oversized message is an error and the daemon keeps serving; shutdown closes the
//! connections with "going away" and nothing of the sessions remains.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use stockade_daemon::WsConfig;
use stockade_proto::rpc::MAX_REQUEST_BYTES;
use stockade_testkit::procs::marked_processes;
use stockade_testkit::ws::{WsRpc, connect};
use stockade_testkit::{Fixture, Rpc, eventually};
use tungstenite::Message;
use tungstenite::protocol::frame::coding::CloseCode;

const TOKEN: &str = "0123456789abcdef-the-right-token";

/// An in-process daemon with the WebSocket door on `127.0.0.1:<any port>`, stopped on `Drop`.
struct WsDaemon {
    home: PathBuf,
    ws: SocketAddr,
    instance: String,
    fixture: Fixture,
    _token_dir: tempfile::TempDir,
}

impl WsDaemon {
    fn start() -> WsDaemon {
        use std::os::unix::fs::PermissionsExt as _;
        let token_dir = tempfile::tempdir().unwrap();
        let token_file = token_dir.path().join("token");
        std::fs::write(&token_file, format!("{TOKEN}\n")).unwrap();
        std::fs::set_permissions(&token_file, std::fs::Permissions::from_mode(0o600)).unwrap();
        let fixture = Fixture::with(|config| {
            config.ws = Some(WsConfig::new("127.0.0.1:0".parse().unwrap(), token_file));
        });
        let ws = fixture.ws.expect("the WebSocket door is bound");
        assert!(ws.ip().is_loopback() && ws.port() != 0, "{ws}");
        WsDaemon {
            home: fixture.home.clone(),
            ws,
            instance: fixture.instance.clone(),
            fixture,
            _token_dir: token_dir,
        }
    }

    fn unix(&self) -> Rpc {
        self.fixture.client()
    }

    fn ws(&self) -> WsRpc {
        WsRpc(
            connect(self.ws, Some(&format!("Bearer {TOKEN}"))).expect("the right token is let in"),
        )
    }

    /// Cancel the daemon and wait (bounded) for `serve` to return.
    fn stop(&mut self) {
        self.fixture.stop();
    }
}

/// The upgrade is refused with 401 and the body says how to authenticate.
fn assert_refused(addr: SocketAddr, authorization: Option<&str>) {
    match connect(addr, authorization) {
        Ok(_) => panic!("upgrade accepted with {authorization:?}"),
        Err(tungstenite::Error::Http(resp)) => {
            assert_eq!(resp.status(), 401, "{authorization:?}");
            assert_eq!(resp.headers()["www-authenticate"], "Bearer");
            let body =
                String::from_utf8_lossy(resp.body().as_deref().unwrap_or_default()).into_owned();
            assert!(body.contains("Authorization: Bearer"), "{body}");
        }
        Err(e) => panic!("expected a 401 for {authorization:?}, got {e}"),
    }
}

/// A client frame (masked, as RFC 6455 requires), FIN set.
fn client_frame(opcode: u8, payload: &[u8]) -> Vec<u8> {
    let mask = [0x5a, 0x13, 0xc7, 0x2e];
    let mut frame = vec![0x80 | opcode];
    match payload.len() {
        n @ 0..=125 => frame.push(0x80 | n as u8),
        n @ 126..=0xffff => {
            frame.push(0x80 | 126);
            frame.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            frame.push(0x80 | 127);
            frame.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    frame.extend_from_slice(&mask);
    frame.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
    frame
}

/// The raw upgrade request; once answered, a `run` request is written on the same TCP
/// connection whatever the answer was. Returns the answer's status line.
fn upgrade_then_run(addr: SocketAddr, authorization: Option<&str>, command: &str) -> String {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut request = format!(
        "GET / HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
    );
    if let Some(value) = authorization {
        request.push_str(&format!("Authorization: {value}\r\n"));
    }
    request.push_str("\r\n");
    stream.write_all(request.as_bytes()).unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match stream.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            _ => break,
        }
    }
    let head = String::from_utf8_lossy(&head).into_owned();
    let run = json!({"jsonrpc": "2.0", "id": 1, "method": "run", "params": {"command": command}});
    let _ = stream.write_all(&client_frame(0x1, run.to_string().as_bytes()));
    if head.starts_with("HTTP/1.1 101") {
        // Let the accepted request finish before the connection closes (closing cancels it).
        let mut answer = [0u8; 4096];
        let _ = stream.read(&mut answer);
    }
    head.lines().next().unwrap_or_default().to_owned()
}

#[test]
fn without_the_token_the_upgrade_is_refused_and_no_method_runs() {
    let d = WsDaemon::start();
    let refused = d.home.join("refused-ran");
    let command = format!("touch {}", refused.display());
    let status = upgrade_then_run(d.ws, None, &command);
    assert!(status.starts_with("HTTP/1.1 401"), "{status}");
    assert_refused(d.ws, None);
    std::thread::sleep(Duration::from_millis(300));
    assert!(!refused.exists(), "a request after a refused upgrade ran");
    assert_eq!(d.unix().ok("list", json!({}))["sessions"], json!([]), "no session was started");

    // The same bytes with the token do run: the refusal above is what stopped them.
    let allowed = d.home.join("allowed-ran");
    let command = format!("touch {}", allowed.display());
    let status = upgrade_then_run(d.ws, Some(&format!("Bearer {TOKEN}")), &command);
    assert!(status.starts_with("HTTP/1.1 101"), "{status}");
    eventually(Duration::from_secs(10), "the accepted request to run", || {
        allowed.exists().then_some(())
    });
}

#[test]
fn a_wrong_token_or_one_of_another_length_is_refused() {
    let d = WsDaemon::start();
    let mut same_length = TOKEN.as_bytes().to_vec();
    let last = same_length.len() - 1;
    same_length[last] ^= 1;
    let same_length = String::from_utf8(same_length).unwrap();
    assert_eq!(same_length.len(), TOKEN.len());
    let prefix = &TOKEN[..TOKEN.len() - 1];
    let longer = format!("{TOKEN}x");
    for value in [
        format!("Bearer {same_length}"),
        format!("Bearer {prefix}"),
        format!("Bearer {longer}"),
        "Bearer ".to_owned(),
        "Bearer x".to_owned(),
        TOKEN.to_owned(),
        format!("Basic {TOKEN}"),
    ] {
        assert_refused(d.ws, Some(&value));
    }
    // The door still lets the right token in, and the socket still serves.
    d.ws().ok("status", json!({}));
    d.unix().ok("status", json!({}));
}

#[test]
fn with_the_token_methods_answer_as_on_the_unix_socket() {
    let d = WsDaemon::start();
    let mut ws = d.ws();
    let mut unix = d.unix();

    assert_eq!(ws.ok("status", json!({})), unix.ok("status", json!({})));

    let run = ws.ok("run", json!({"command": "echo hi"}));
    assert_eq!(run["state"], "exited", "{run}");
    assert_eq!(run["code"], 0);
    assert_eq!(run["output"], "hi\n");
    let id = run["id"].as_str().unwrap().to_owned();

    let read = json!({"id": id, "after": 0});
    let over_ws = ws.ok("read", read.clone());
    assert_eq!(over_ws["output"], "hi\n");
    assert_eq!(over_ws, unix.ok("read", read));
    let raw = json!({"id": id, "after": 0, "raw": true});
    assert_eq!(ws.ok("read", raw.clone()), unix.ok("read", raw));

    let listed = ws.ok("list", json!({}));
    assert_eq!(listed["sessions"].as_array().unwrap().len(), 1, "{listed}");
    assert_eq!(listed, unix.ok("list", json!({})));

    // Errors are the same sentences too.
    assert_eq!(
        ws.call("read", json!({"id": "sh-999"})),
        unix.call("read", json!({"id": "sh-999"}))
    );
    assert_eq!(ws.call("bogus", json!({})), unix.call("bogus", json!({})));

    // Requests on one connection are concurrent: a long poll does not hold up a status.
    let bg = ws.ok("run", json!({"command": "sleep 600", "background": true}));
    let bg_id = bg["id"].as_str().unwrap().to_owned();
    ws.send(1, "read", json!({"id": bg_id, "after": bg["next_cursor"], "wait_ms": 30_000}));
    ws.send(2, "status", json!({}));
    assert_eq!(ws.recv()["id"], 2, "status answered while the long poll waits");
    ws.send(3, "kill", json!({"id": bg_id}));
    let mut answers = [ws.recv(), ws.recv()];
    answers.sort_by_key(|a| a["id"].as_u64());
    assert_eq!(answers[0]["id"], 1, "{answers:?}");
    assert_eq!(answers[0]["result"]["state"], "killed", "the long poll ends with the session");
    assert_eq!(answers[1]["id"], 3, "{answers:?}");
    assert_eq!(answers[1]["result"]["state"], "killed");
}

#[test]
fn binary_and_oversized_messages_are_errors_and_the_daemon_keeps_serving() {
    let d = WsDaemon::start();

    // A binary message: an error answer, and the same connection goes on.
    let mut ws = d.ws();
    ws.0.send(Message::binary(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"status\"}".to_vec()))
        .unwrap();
    let answer = ws.recv();
    assert_eq!(answer["id"], Value::Null);
    assert_eq!(answer["error"]["code"], -32600, "{answer}");
    assert!(answer["error"]["message"].as_str().unwrap().contains("text message"), "{answer}");
    ws.ok("status", json!({}));

    // Not JSON, and two requests in one message: errors, and the connection goes on.
    ws.0.send(Message::text("not json")).unwrap();
    assert_eq!(ws.recv()["error"]["code"], -32700);
    ws.0.send(Message::text("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"status\"}\n{}")).unwrap();
    assert_eq!(ws.recv()["error"]["code"], -32700);
    ws.ok("status", json!({}));

    // A message over the limit: an error answer, then "message too big", and the connection ends.
    // The frame is written raw from another thread: the daemon stops reading after its header.
    let mut big = d.ws();
    let mut raw = big.0.get_ref().try_clone().unwrap();
    let frame = client_frame(0x1, &vec![b' '; MAX_REQUEST_BYTES + 1]);
    let writer = std::thread::spawn(move || {
        let _ = raw.write_all(&frame);
    });
    let answer = big.recv();
    assert_eq!(answer["error"]["code"], -32600, "{answer}");
    assert!(answer["error"]["message"].as_str().unwrap().contains("limit"), "{answer}");
    assert_eq!(big.close_code(), CloseCode::Size);
    drop(big);
    writer.join().unwrap();

    // A message of exactly the limit is still a request (here: not JSON, but read whole).
    let mut edge = d.ws();
    let mut padded = b"{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"status\"}".to_vec();
    padded.resize(MAX_REQUEST_BYTES, b' ');
    edge.0.send(Message::text(String::from_utf8(padded).unwrap())).unwrap();
    assert!(edge.recv()["result"]["pid"].is_number());

    // The daemon serves on, on both doors, including the first connection.
    ws.ok("status", json!({}));
    d.ws().ok("status", json!({}));
    d.unix().ok("status", json!({}));
}

#[test]
fn daemon_shutdown_closes_websocket_connections_and_ends_their_sessions() {
    let mut d = WsDaemon::start();
    let mut ws = d.ws();
    let mut idle = d.ws();
    let bg = ws.ok(
        "run",
        json!({"command": "sleep 600 & sleep 600; wait", "background": true, "yield_ms": 100}),
    );
    let marker = format!("STOCKADE_SESSION={}:{}", d.instance, bg["id"].as_str().unwrap());
    eventually(Duration::from_secs(5), "the session's processes", || {
        (!marked_processes(&marker).is_empty()).then_some(())
    });
    ws.send(1, "read", json!({"id": bg["id"], "after": bg["next_cursor"], "wait_ms": 120_000}));

    let started = Instant::now();
    d.stop();
    assert!(started.elapsed() < Duration::from_secs(15), "shutdown took {:?}", started.elapsed());
    // The long poll is answered (its session was killed), then the door says it is going away.
    let poll = ws.recv();
    assert_eq!(poll["id"], 1, "{poll}");
    assert_eq!(ws.close_code(), CloseCode::Away);
    assert_eq!(idle.close_code(), CloseCode::Away);
    assert!(marked_processes(&marker).is_empty(), "nothing of the session remains");
    assert!(TcpStream::connect(d.ws).is_err(), "the door no longer listens");
}
