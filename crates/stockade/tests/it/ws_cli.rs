//! `stockade daemon run --ws ADDR --token-file FILE`, the real binary: the flags' mistakes are
//! one sentence each (no token file, a token file others can read, an empty one, an address in
//! use) and nothing is left behind; with a good token file the ready line names the WebSocket
//! address, an upgrade without the token gets 401, one with it gets answers, and SIGTERM ends it.

use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use stockade_testkit::DaemonProc;
use stockade_testkit::ws::{self, WsRpc};

const TOKEN: &str = "cli-test-token-4f1c9a";

fn token_file(dir: &Path, content: &str, mode: u32) -> PathBuf {
    let path = dir.join("token");
    std::fs::write(&path, content).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    path
}

/// Start a daemon that must refuse to start; its stderr.
fn refused(home: &Path, extra: &[&str]) -> String {
    let (stderr, status) = match DaemonProc::start_at(home, extra) {
        Ok(_) => panic!("the daemon started with {extra:?}"),
        Err(e) => e,
    };
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "one sentence: {stderr}");
    assert!(!home.join("stockade.sock").exists(), "no socket left behind");
    assert!(!home.join("daemon.lock").exists(), "no lock left behind");
    stderr
}

#[test]
fn ws_without_a_token_file_is_refused_with_a_sentence() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let stderr = refused(&home, &["--ws", "127.0.0.1:0"]);
    assert!(stderr.contains("--ws needs --token-file"), "{stderr}");

    // And a token file without --ws is a usage error.
    let out = Command::new(env!("CARGO_BIN_EXE_stockade"))
        .arg("--home")
        .arg(&home)
        .args(["daemon", "run", "--token-file", "/nonexistent"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--ws"));
}

#[test]
fn a_token_file_others_can_read_or_an_empty_one_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let open = token_file(tmp.path(), &format!("{TOKEN}\n"), 0o644);
    let stderr = refused(&home, &["--ws", "127.0.0.1:0", "--token-file", open.to_str().unwrap()]);
    assert!(stderr.contains("0644") && stderr.contains("chmod 600"), "{stderr}");

    let empty = token_file(tmp.path(), "\n", 0o600);
    let stderr = refused(&home, &["--ws", "127.0.0.1:0", "--token-file", empty.to_str().unwrap()]);
    assert!(stderr.contains("empty"), "{stderr}");

    let missing = tmp.path().join("no-such-token");
    let stderr =
        refused(&home, &["--ws", "127.0.0.1:0", "--token-file", missing.to_str().unwrap()]);
    assert!(stderr.contains("cannot open"), "{stderr}");
}

#[test]
fn an_address_in_use_is_a_clear_error() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let file = token_file(tmp.path(), TOKEN, 0o600);
    let stderr = refused(&home, &["--ws", &addr, "--token-file", file.to_str().unwrap()]);
    assert!(
        stderr.contains(&format!("cannot listen for WebSocket connections on {addr}")),
        "{stderr}"
    );
}

#[test]
fn the_door_answers_with_the_token_and_refuses_without_it() {
    let tmp = tempfile::tempdir().unwrap();
    let file = token_file(tmp.path(), &format!("{TOKEN}\n"), 0o600);
    let mut daemon =
        DaemonProc::start(&["--ws", "127.0.0.1:0", "--token-file", file.to_str().unwrap()]);
    let ready = daemon.stderr.lock().unwrap().clone();
    assert!(ready.contains("(token required)"), "{ready}");
    assert!(!ready.contains(TOKEN), "the token is never printed: {ready}");
    let addr = daemon.ws_addr();
    assert!(addr.ip().is_loopback());

    assert_eq!(ws::refused_status(addr, None), 401);
    assert_eq!(ws::refused_status(addr, Some("Bearer wrong")), 401);

    // Accepted: `connect` checks the 101 answer and the handshake.
    let mut ws = WsRpc(ws::connect(addr, Some(&format!("Bearer {TOKEN}"))).unwrap());
    let answer = ws.request(r#"{"jsonrpc":"2.0","id":5,"method":"status"}"#);
    assert_eq!(answer["id"], 5);
    assert_eq!(answer["result"]["pid"], daemon.pid, "{answer}");
    let run =
        ws.request(r#"{"jsonrpc":"2.0","id":6,"method":"run","params":{"command":"echo hi"}}"#);
    assert_eq!(run["result"]["output"], "hi\n", "{run}");

    // SAFETY: kill(2) on the daemon child this test started, by its pid.
    unsafe {
        libc::kill(daemon.pid as libc::pid_t, libc::SIGTERM);
    }
    let exit = daemon.wait_exit(Duration::from_secs(30)).expect("the daemon exits");
    assert!(exit.success(), "{exit:?}");
    assert!(TcpStream::connect(addr).is_err(), "the door is closed");
}
