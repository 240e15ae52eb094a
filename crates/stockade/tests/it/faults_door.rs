//! A trickle on the WebSocket door: 1,200 connections each sending a request head one byte every
//! 150 ms (and connecting again when dropped) cannot keep a token holder out. A pending place
//! is held by a connection still reading its head only while no one else waits past 200 ms
//! (`crates/stockade-daemon/src/admission.rs`), so the token holder's connect and first answer
//! come within a few seconds (they took 19.5 s before, and its upgrade waited for the flood).

use std::io::Write as _;
use std::net::TcpStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;
use stockade_testkit::ws::{self, WsRpc};
use stockade_testkit::{DaemonProc, owner_token_file};

const TOKEN: &str = "trickle-test-token-0123456789";
const TRICKLERS: usize = 1200;
const HEAD: &[u8] = b"GET / HTTP/1.1\r\nHost: localhost\r\nUser-Agent: a-very-slow-client-that-never-ends\r\nX-Pad: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";

/// Raises this process's open-file limit to at least `n` (the test holds 1,200 sockets).
fn raise_nofile(n: u64) {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: get/setrlimit with a valid rlimit struct.
    unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim);
        if lim.rlim_cur < n {
            lim.rlim_cur = n.min(lim.rlim_max.max(n));
            lim.rlim_max = lim.rlim_max.max(lim.rlim_cur);
            assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &lim), 0, "raise RLIMIT_NOFILE");
        }
    }
}

#[test]
fn a_trickle_of_header_bytes_cannot_hold_the_door() {
    raise_nofile(4096);
    let tmp = tempfile::tempdir().unwrap();
    let file = owner_token_file(tmp.path(), TOKEN);
    let daemon =
        DaemonProc::start(&["--ws", "127.0.0.1:0", "--token-file", file.to_str().unwrap()]);
    let addr = daemon.ws_addr();
    let done = Arc::new(AtomicBool::new(false));
    let open = Arc::new(AtomicUsize::new(0));
    let dropped = Arc::new(AtomicUsize::new(0));
    let trickle = {
        let (done, open, dropped) = (done.clone(), open.clone(), dropped.clone());
        std::thread::spawn(move || {
            let connect = || {
                let s = TcpStream::connect(addr).ok()?;
                s.set_nonblocking(true).ok()?;
                Some((s, 0usize))
            };
            let mut conns: Vec<(TcpStream, usize)> = Vec::with_capacity(TRICKLERS);
            let mut next_round = Instant::now();
            while !done.load(Ordering::Relaxed) {
                // Connect a few per turn, so the first ones trickle while the rest arrive.
                for _ in 0..100 {
                    if conns.len() < TRICKLERS
                        && let Some(c) = connect()
                    {
                        conns.push(c);
                    }
                }
                open.store(conns.len(), Ordering::Relaxed);
                if Instant::now() >= next_round {
                    next_round += Duration::from_millis(150);
                    let before = conns.len();
                    conns.retain_mut(|(s, at)| {
                        let ok = s.write(&HEAD[*at % HEAD.len()..][..1]).is_ok_and(|n| n == 1);
                        *at += 1;
                        ok
                    });
                    dropped.fetch_add(before - conns.len(), Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        })
    };
    let started = Instant::now();
    while open.load(Ordering::Relaxed) < TRICKLERS && started.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(50));
    }
    // Let them trickle a while, so every pending place is held by one.
    std::thread::sleep(Duration::from_secs(2));
    let at_start = open.load(Ordering::Relaxed);

    let asked = Instant::now();
    let mut rpc = WsRpc(ws::connect(addr, Some(&format!("Bearer {TOKEN}"))).unwrap());
    let connected = asked.elapsed();
    let ran = rpc.ok("run", json!({"command": "echo through-the-trickle"}));
    let answered = asked.elapsed();
    assert!(ran["output"].as_str().unwrap().contains("through-the-trickle"), "{ran}");
    done.store(true, Ordering::Relaxed);
    trickle.join().unwrap();
    eprintln!(
        "{at_start} trickling connections; token holder connected in {:.2} s, answered in {:.2} s; {} trickles dropped by the daemon",
        connected.as_secs_f64(),
        answered.as_secs_f64(),
        dropped.load(Ordering::Relaxed)
    );
    assert!(at_start >= TRICKLERS / 2, "only {at_start} connections were opened");
    assert!(answered < Duration::from_secs(10), "answered after {answered:?}");
}

/// Every WebSocket slot (448: 512 connections less the Unix socket's 64) taken by a token holder
/// that starts a frame and stalls: with the frame deadline shortened to 1 s (test hook), each is
/// closed with 1008 and a new token holder is connected and answered within seconds (before,
/// nothing ended them: the door was held for good). A connection idle between frames is not
/// timed out.
#[test]
fn a_frame_started_and_stalled_is_closed_and_frees_its_slot() {
    const SLOTS: usize = 448;
    raise_nofile(4096);
    let tmp = tempfile::tempdir().unwrap();
    let file = owner_token_file(tmp.path(), TOKEN);
    let home = tempfile::tempdir().unwrap();
    let daemon = stockade_testkit::DaemonProc::start_env(
        home.path(),
        &["--ws", "127.0.0.1:0", "--token-file", file.to_str().unwrap()],
        &[("STOCKADE_TEST_WS_FRAME_BASE_MS", "1000")],
    )
    .unwrap_or_else(|(stderr, status)| panic!("the daemon did not start ({status}): {stderr}"));
    let addr = daemon.ws_addr();
    let auth = format!("Bearer {TOKEN}");
    // One idle between frames, from the start.
    let mut idle = WsRpc(ws::connect(addr, Some(&auth)).unwrap());
    // The rest of the slots: each sends the first 6 bytes of a masked 100-byte text frame.
    let started = Instant::now();
    let mut stalled = Vec::new();
    for i in 0..SLOTS - 1 {
        let mut w = ws::connect(addr, Some(&auth)).unwrap_or_else(|e| panic!("stalled {i}: {e}"));
        w.get_mut().write_all(&[0x81, 0x80 | 100, 1, 2, 3, 4]).unwrap();
        stalled.push(w);
    }
    let all_in = started.elapsed();
    // A newcomer is told the door is full (503) and retries, as a client does, until the
    // stalled ones are closed after their deadline.
    let asked = Instant::now();
    let mut refusals = 0;
    let ws = loop {
        match ws::connect(addr, Some(&auth)) {
            Ok(ws) => break ws,
            Err(ws::tungstenite::Error::Http(r)) if r.status() == 503 => refusals += 1,
            Err(e) => panic!("the newcomer: {e}"),
        }
        assert!(asked.elapsed() < Duration::from_secs(15), "still refused after {refusals} tries");
        std::thread::sleep(Duration::from_millis(100));
    };
    let mut rpc = WsRpc(ws);
    let ran = rpc.ok("run", json!({"command": "echo past-the-stall"}));
    let answered = asked.elapsed();
    assert!(ran["output"].as_str().unwrap().contains("past-the-stall"), "{ran}");
    // Each stalled one got the policy close.
    let mut policy = 0;
    for mut w in stalled.drain(..).take(20) {
        w.get_mut().set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        loop {
            match w.read() {
                Ok(ws::tungstenite::Message::Close(Some(f))) => {
                    policy += usize::from(
                        f.code == ws::tungstenite::protocol::frame::coding::CloseCode::Policy,
                    );
                    break;
                }
                Ok(_) => {}
                Err(_) => break,
            }
        }
    }
    // The idle one is served still, well past three deadlines.
    std::thread::sleep(Duration::from_millis(500));
    let echoed = idle.ok("run", json!({"command": "echo still-here"}));
    assert!(echoed["output"].as_str().unwrap().contains("still-here"), "{echoed}");
    eprintln!(
        "{SLOTS} slots: {} stalled mid-frame in {:.2} s; a newcomer refused {refusals} times, answered in {:.2} s; {policy} of 20 closed with 1008",
        SLOTS - 1,
        all_in.as_secs_f64(),
        answered.as_secs_f64()
    );
    assert_eq!(policy, 20, "the stalled connections were closed with 1008 (policy)");
    assert!(answered < Duration::from_secs(15), "answered after {answered:?}");
    assert!(refusals > 0, "the door was never full: the test did not hold every slot");
}
