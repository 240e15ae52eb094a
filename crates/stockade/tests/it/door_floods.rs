//! Floods at the HTTP doors beside the WebSocket door: the E2B door, `--metrics` and `stockade
//! mcp --http`. A client tries to hold 4,500 connections at the door, half of them sending a
//! request head one byte a second, half silent, and opens a new one (an ordinary TCP connect,
//! from four threads) for each the server drops;
//! meanwhile a token holder's request and a local `stockade run true` on the Unix socket are each
//! served within 4 s, and the server's open descriptors stay within the pending cap of the one
//! admission gate every door passes (`crates/stockade-daemon/src/gate.rs`, `admission.rs`).
//! Before, the E2B door accepted 4,500 such connections, used all 4,096 descriptors and a local
//! `run` waited 25.5 s; `--metrics` stopped answering behind a 16-connection cap.

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use stockade_daemon::PENDING_CAP;
use stockade_testkit::child::run_bounded;
use stockade_testkit::mcp::HttpServer;
use stockade_testkit::{DaemonProc, Home, owner_token_file, stockade_bin};

const TOKEN: &str = "flood-door-token-0123456789abcdef";
/// Connections the flood tries to hold at once.
const FLOOD: usize = 4_500;
/// The bound on each served request, from asking to the answer.
const SERVED_WITHIN: Duration = Duration::from_secs(4);
/// Threads opening the flood's connections.
const CONNECTORS: usize = 4;
/// Rounds of (token holder, local run) while the flood holds the door.
const ROUNDS: usize = 3;
/// Descriptors beyond the pending cap the server may hold for a moment (one being accepted,
/// the test's own clients, connections being closed, a session's files).
const SLACK: usize = 64;
const HEAD: &[u8] = b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nUser-Agent: a-very-slow-client-that-never-ends\r\nX-Pad: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";

fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map(|d| d.count()).unwrap_or(0)
}

/// Raises this process's open-file limit to at least `n` (the flood holds 4,500 sockets).
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

/// The flooding client: stopped and its sockets closed when dropped, even on a failed assert.
struct Flood {
    done: Arc<AtomicBool>,
    /// Connections held now, and the most held at once.
    open: Arc<AtomicUsize>,
    peak: Arc<AtomicUsize>,
    /// Connections made in all, and those the server closed.
    made: Arc<AtomicUsize>,
    dropped: Arc<AtomicUsize>,
    threads: Vec<JoinHandle<()>>,
}

impl Flood {
    fn start(addr: SocketAddr) -> Flood {
        let counters: [Arc<AtomicUsize>; 4] = Default::default();
        let [open, peak, made, dropped] = counters.clone();
        let done = Arc::new(AtomicBool::new(false));
        type Conns = Arc<Mutex<Vec<(TcpStream, usize, bool)>>>;
        let conns: Conns = Arc::new(Mutex::new(Vec::with_capacity(FLOOD)));
        let mut threads = Vec::new();
        // Connecting threads: ordinary TCP clients (the kernel's SYN retries, no faster), each
        // opening a new connection as soon as the last one is made, while fewer than FLOOD are held.
        for t in 0..CONNECTORS {
            let (conns, made, done) = (Arc::clone(&conns), Arc::clone(&made), Arc::clone(&done));
            threads.push(std::thread::spawn(move || {
                let mut n = t;
                while !done.load(Ordering::Relaxed) {
                    if conns.lock().unwrap().len() >= FLOOD {
                        std::thread::sleep(Duration::from_millis(5));
                        continue;
                    }
                    let Ok(s) = TcpStream::connect_timeout(&addr, Duration::from_secs(5)) else {
                        continue;
                    };
                    if s.set_nonblocking(true).is_ok() {
                        n += 1;
                        conns.lock().unwrap().push((s, 0, n % 2 == 0));
                        made.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }));
        }
        // The trickle: one byte a second from half of them; a read of 0 (closed) from the rest.
        let (stop, t_open, t_peak, t_dropped) =
            (Arc::clone(&done), open.clone(), peak.clone(), dropped.clone());
        threads.push(std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let mut held = conns.lock().unwrap();
                let before = held.len();
                t_peak.fetch_max(before, Ordering::Relaxed);
                held.retain_mut(|(s, at, trickles)| {
                    if *trickles {
                        let ok = s.write(&HEAD[*at % HEAD.len()..][..1]).is_ok_and(|n| n == 1);
                        *at += 1;
                        ok
                    } else {
                        let mut b = [0u8; 64];
                        !matches!(s.read(&mut b), Ok(0))
                    }
                });
                t_dropped.fetch_add(before - held.len(), Ordering::Relaxed);
                t_open.store(held.len(), Ordering::Relaxed);
                drop(held);
                std::thread::sleep(Duration::from_secs(1));
            }
            conns.lock().unwrap().clear();
        }));
        Flood { done, open, peak, made, dropped, threads }
    }

    /// Waits (at most 60 s) until the flood holds `FLOOD` connections or has made twice that,
    /// then 2 s more, so every pending place is held by one of it.
    fn settle(&self) {
        let started = Instant::now();
        while self.open.load(Ordering::Relaxed) < FLOOD
            && self.made.load(Ordering::Relaxed) < 2 * FLOOD
            && started.elapsed() < Duration::from_secs(60)
        {
            std::thread::sleep(Duration::from_millis(50));
        }
        std::thread::sleep(Duration::from_secs(2));
    }

    fn report(&self) -> String {
        format!(
            "flood held {} connections at most ({} now), made {}, {} dropped by the server",
            self.peak.load(Ordering::Relaxed),
            self.open.load(Ordering::Relaxed),
            self.made.load(Ordering::Relaxed),
            self.dropped.load(Ordering::Relaxed)
        )
    }
}

impl Drop for Flood {
    fn drop(&mut self) {
        self.done.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// One HTTP/1.1 request (`Connection: close`): the status, and how long it took from connect to
/// the whole answer.
fn timed_request(addr: SocketAddr, head: &str, body: &str) -> (u16, Duration) {
    let asked = Instant::now();
    let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_secs(30)) else {
        return (0, asked.elapsed());
    };
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let request = format!(
        "{head}Host: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    if s.write_all(request.as_bytes()).is_err() {
        return (0, asked.elapsed());
    }
    let mut answer = Vec::new();
    let mut buf = [0u8; 8192];
    // Up to the end of the head and a first piece of the body (an MCP answer may stay open).
    loop {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => answer.extend_from_slice(&buf[..n]),
        }
        if let Some(at) = answer.windows(4).position(|w| w == b"\r\n\r\n")
            && answer.len() > at + 4
        {
            break;
        }
    }
    let took = asked.elapsed();
    let text = String::from_utf8_lossy(&answer);
    let status = text.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    (status, took)
}

/// `stockade run true` on the Unix socket of the daemon at `home` (no auto-start): whether it
/// succeeded, and how long it took.
fn local_run(home: &std::path::Path) -> (bool, Duration) {
    let mut c = Command::new(stockade_bin());
    c.args(["run", "true"]).env("STOCKADE_HOME", home).env("STOCKADE_NO_AUTOSTART", "1");
    let asked = Instant::now();
    let out = run_bounded(&mut c, Duration::from_secs(60));
    (out.status.success(), asked.elapsed())
}

/// While `flood` holds the door: `ROUNDS` rounds of the token holder's request (`ask`, which
/// must answer `want`) and a local run; the server's descriptors sampled throughout. Returns the
/// slowest answer, the slowest run and the most descriptors seen.
fn served_through(
    flood: &Flood,
    pid: u32,
    home: &std::path::Path,
    ask: impl Fn() -> (u16, Duration),
    want: u16,
) -> (Duration, Duration, usize) {
    flood.settle();
    let (mut slowest_ask, mut slowest_run, mut fds) = (Duration::ZERO, Duration::ZERO, 0);
    for round in 0..ROUNDS {
        fds = fds.max(open_fds(pid));
        let (status, took) = ask();
        assert_eq!(status, want, "round {round}: the token holder's request ({})", flood.report());
        slowest_ask = slowest_ask.max(took);
        fds = fds.max(open_fds(pid));
        eprintln!("round {round}: token holder {status} in {:.2} s", took.as_secs_f64());
        let (ok, ran) = local_run(home);
        eprintln!("round {round}: local run in {:.2} s", ran.as_secs_f64());
        assert!(ok, "round {round}: the local run failed ({})", flood.report());
        slowest_run = slowest_run.max(ran);
        for _ in 0..10 {
            fds = fds.max(open_fds(pid));
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    (slowest_ask, slowest_run, fds)
}

fn assert_bounded(door: &str, flood: &Flood, figures: (Duration, Duration, usize), base: usize) {
    let (ask, run, fds) = figures;
    eprintln!(
        "{door}: {}; token holder served in {:.2} s at worst, local run in {:.2} s, server fds {base} -> max {fds}",
        flood.report(),
        ask.as_secs_f64(),
        run.as_secs_f64()
    );
    assert!(
        flood.made.load(Ordering::Relaxed) >= FLOOD,
        "the flood made too few: {}",
        flood.report()
    );
    assert!(ask < SERVED_WITHIN, "{door}: the token holder waited {ask:?}");
    assert!(run < SERVED_WITHIN, "{door}: the local run waited {run:?}");
    let bound = base + PENDING_CAP + SLACK;
    assert!(fds <= bound, "{door}: server fds reached {fds} (bound {bound})");
}

#[test]
fn a_flood_at_the_e2b_door_keeps_no_one_out() {
    raise_nofile(16_384);
    let tmp = tempfile::tempdir().unwrap();
    let file = owner_token_file(tmp.path(), TOKEN);
    let d = DaemonProc::start(&["--e2b", "127.0.0.1:0", "--token-file", file.to_str().unwrap()]);
    let addr = d.e2b_addr();
    let base = open_fds(d.pid);
    let flood = Flood::start(addr);
    let stat = || {
        let body = r#"{"path":"/"}"#;
        let head = format!(
            "POST /filesystem.Filesystem/Stat HTTP/1.1\r\nContent-Type: application/json\r\nX-Access-Token: {TOKEN}\r\n"
        );
        timed_request(addr, &head, body)
    };
    let figures = served_through(&flood, d.pid, &d.home, stat, 200);
    assert_bounded("E2B door", &flood, figures, base);
}

#[test]
fn a_flood_at_the_metrics_address_keeps_no_one_out() {
    raise_nofile(16_384);
    let tmp = tempfile::tempdir().unwrap();
    let file = owner_token_file(tmp.path(), TOKEN);
    // Off loopback, so a scrape needs the token (clear text asked for: the test is local).
    let d = DaemonProc::start(&[
        "--metrics",
        "0.0.0.0:0",
        "--token-file",
        file.to_str().unwrap(),
        "--insecure-plaintext",
    ]);
    let (bound, _) = crate::metrics_addr::metrics_addr(&d, "http");
    let addr = SocketAddr::from(([127, 0, 0, 1], bound.port()));
    let base = open_fds(d.pid);
    let flood = Flood::start(addr);
    let scrape = || {
        let head = format!("GET /metrics HTTP/1.1\r\nAuthorization: Bearer {TOKEN}\r\n");
        timed_request(addr, &head, "")
    };
    let figures = served_through(&flood, d.pid, &d.home, scrape, 200);
    assert_bounded("metrics address", &flood, figures, base);
}

#[test]
fn a_flood_at_mcp_http_keeps_no_one_out() {
    raise_nofile(16_384);
    let home = Home::new();
    let server = HttpServer::start(&home, &["--token", TOKEN]);
    let addr: SocketAddr = server.addr.parse().unwrap();
    // The daemon the local run and the MCP tools use.
    assert!(home.run(&["run", "true"]).status.success(), "the daemon started");
    let pid = server.pid();
    let base = open_fds(pid);
    let flood = Flood::start(addr);
    let initialize = || {
        let body = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#;
        let head = format!(
            "POST /mcp HTTP/1.1\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nAuthorization: Bearer {TOKEN}\r\n"
        );
        timed_request(addr, &head, body)
    };
    let figures = served_through(&flood, pid, home.path(), initialize, 200);
    assert_bounded("mcp --http", &flood, figures, base);
}
