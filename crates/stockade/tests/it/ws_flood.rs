//! A flood on the WebSocket door cannot starve the daemon: 600 TCP connections that never
//! upgrade and 20,000 short-lived ones (half send an unauthenticated upgrade, half nothing),
//! while local clients on the Unix socket and a token holder on the door are served throughout
//! and the daemon's open file descriptors stay bounded (connections waiting to authenticate have
//! their own small cap and deadline; see `crates/stockade-daemon/src/admission.rs`).

use std::io::Write as _;
use std::net::TcpStream;
use std::os::fd::AsRawFd as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use stockade_daemon::PENDING_CAP;
use stockade_testkit::ws::{self, WsRpc};
use stockade_testkit::{DaemonProc, owner_token_file};

const TOKEN: &str = "flood-test-token-0123456789";
const IDLE: usize = 600;
const SHORT_LIVED: usize = 20_000;
/// Sockets beyond the pending cap the daemon may hold for a moment (one being accepted, the
/// served clients of this test, the connections a refusal is still closing).
const SLACK: usize = 64;

fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map(|d| d.count()).unwrap_or(0)
}

/// Close with a reset rather than a TIME_WAIT, so 20,000 connections do not use up the ports.
fn reset(stream: TcpStream) {
    let linger = libc::linger { l_onoff: 1, l_linger: 0 };
    // SAFETY: setsockopt on a socket we own, with a valid `linger` and its size.
    unsafe {
        libc::setsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&raw const linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        );
    }
}

#[test]
fn idle_and_short_lived_connections_starve_no_one() {
    let tmp = tempfile::tempdir().unwrap();
    let file = owner_token_file(tmp.path(), TOKEN);
    let daemon =
        DaemonProc::start(&["--ws", "127.0.0.1:0", "--token-file", file.to_str().unwrap()]);
    let addr = daemon.ws_addr();
    let baseline = open_fds(daemon.pid);
    let done = Arc::new(AtomicBool::new(false));

    // 600 connections that never say a word, held open until the end.
    let idle = std::thread::spawn(move || {
        let mut held = Vec::with_capacity(IDLE);
        for _ in 0..IDLE {
            if let Ok(s) = TcpStream::connect(addr) {
                held.push(s);
            }
        }
        held
    });
    // 20,000 short-lived ones.
    let flooded = Arc::new(AtomicUsize::new(0));
    let flood = {
        let flooded = Arc::clone(&flooded);
        let done = Arc::clone(&done);
        std::thread::spawn(move || {
            for i in 0..SHORT_LIVED {
                let Ok(mut s) = TcpStream::connect(addr) else { continue };
                if i % 2 == 0 {
                    let _ = s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n");
                }
                reset(s);
                flooded.fetch_add(1, Ordering::Relaxed);
            }
            done.store(true, Ordering::Relaxed);
        })
    };

    // Meanwhile: a local client and a token holder, each a fresh connection every round.
    let started = Instant::now();
    let (mut rounds, mut max_fds) = (0, 0);
    while !done.load(Ordering::Relaxed) || rounds < 5 {
        let mut local = daemon.client();
        let status = local.ok("status", serde_json::json!({}));
        assert_eq!(status["pid"], daemon.pid);
        let mut remote = WsRpc(
            ws::connect(addr, Some(&format!("Bearer {TOKEN}")))
                .unwrap_or_else(|e| panic!("round {rounds}: the token holder was refused: {e}")),
        );
        let answer = remote.request(r#"{"jsonrpc":"2.0","id":1,"method":"status"}"#);
        assert_eq!(answer["result"]["pid"], daemon.pid, "{answer}");
        drop(remote);
        max_fds = max_fds.max(open_fds(daemon.pid));
        rounds += 1;
        assert!(started.elapsed() < Duration::from_secs(300), "the flood took too long");
        std::thread::sleep(Duration::from_millis(100));
    }
    flood.join().unwrap();
    let held = idle.join().unwrap();
    max_fds = max_fds.max(open_fds(daemon.pid));
    eprintln!(
        "ws flood: {} idle held, {} short-lived, {rounds} served rounds in {:.1}s, daemon fds {baseline} -> max {max_fds}",
        held.len(),
        flooded.load(Ordering::Relaxed),
        started.elapsed().as_secs_f64()
    );
    assert!(held.len() >= IDLE * 9 / 10, "the idle connections were made: {}", held.len());
    assert!(flooded.load(Ordering::Relaxed) >= SHORT_LIVED * 9 / 10);
    let bound = baseline + PENDING_CAP + SLACK;
    assert!(max_fds <= bound, "daemon fds reached {max_fds} (bound {bound})");
    // Still serving after the flood, the idle connections still held by the client.
    let mut local = daemon.client();
    assert_eq!(local.ok("status", serde_json::json!({}))["pid"], daemon.pid);
    drop(held);
}
