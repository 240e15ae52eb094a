//! The drain watchdog, through the real daemon: the one thread that reads every session's
//! output is stopped from outside (ptrace interrupts that thread alone) while output waits. Within
//! the stall limit (10 s) plus a few looks, `stats` names it and counts it, `/readyz` answers 503
//! with the reason and the log says so once; once the thread runs again, the output is captured
//! whole and the daemon is ready again.

use std::time::Duration;

use serde_json::{Value, json};
use stockade_testkit::{DaemonProc, eventually};

use crate::metrics_addr::metrics_addr;

/// The tid of the daemon's drain thread.
fn drain_tid(pid: u32) -> Option<i32> {
    std::fs::read_dir(format!("/proc/{pid}/task")).ok()?.flatten().find_map(|t| {
        let comm = std::fs::read_to_string(t.path().join("comm")).ok()?;
        (comm.trim() == "stockade-drain").then(|| t.file_name().to_str()?.parse().ok())?
    })
}

/// A thread stopped by ptrace; let go (detached) on drop, even when the test fails.
pub(crate) struct Stopped(i32);

impl Stopped {
    pub(crate) fn interrupt(tid: i32) -> Result<Stopped, String> {
        // SAFETY: ptrace requests on a thread id, no pointers passed.
        unsafe {
            if libc::ptrace(libc::PTRACE_SEIZE, tid, 0, 0) != 0 {
                return Err(format!("ptrace SEIZE: {}", std::io::Error::last_os_error()));
            }
            if libc::ptrace(libc::PTRACE_INTERRUPT, tid, 0, 0) != 0 {
                return Err(format!("ptrace INTERRUPT: {}", std::io::Error::last_os_error()));
            }
            // Collect the stop so the thread is surely held before the test goes on.
            let mut status = 0;
            libc::waitpid(tid, &mut status, libc::__WALL);
        }
        Ok(Stopped(tid))
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        // SAFETY: detaching a thread this guard seized.
        unsafe {
            libc::ptrace(libc::PTRACE_DETACH, self.0, 0, 0);
        }
    }
}

/// The whole answer of `GET /readyz`.
fn readyz(addr: std::net::SocketAddr) -> String {
    use std::io::{Read as _, Write as _};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(b"GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
    let mut answer = String::new();
    let _ = s.read_to_string(&mut answer);
    answer
}

#[test]
fn a_stopped_drain_is_named_in_stats_readyz_and_the_log() {
    let daemon = DaemonProc::start(&["--metrics", "127.0.0.1:0"]);
    let (addr, _) = metrics_addr(&daemon, "http");
    let mut rpc = daemon.client();
    // The drain thread starts with the first run.
    let first = rpc.ok("run", json!({"command": "echo first"}));
    assert_eq!(first["state"], "exited", "{first}");
    let tid = drain_tid(daemon.pid).expect("the daemon has a stockade-drain thread");
    let stopped = match Stopped::interrupt(tid) {
        Ok(s) => s,
        Err(why) => panic!("cannot stop the drain thread ({why}): this test needs ptrace"),
    };
    let run = rpc.ok("run", json!({"command": "seq 1 100000", "background": true}));
    let id = run["id"].as_str().unwrap().to_owned();
    let started = std::time::Instant::now();
    let stats = eventually(Duration::from_secs(30), "stats to name the stopped drain", || {
        let s = rpc.ok("stats", json!({}));
        s["drain_stalled"].is_string().then_some(s)
    });
    let noticed = started.elapsed();
    assert_eq!(stats["drain_stalls"], 1, "{stats}");
    assert!(stats["drain_stalled"].as_str().unwrap().contains("output drain"), "{stats}");
    let answer = readyz(addr);
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(answer.contains("not ready: the output drain has stopped"), "{answer}");
    let log = || {
        let home_log = std::fs::read_to_string(daemon.home.join("daemon.log")).unwrap_or_default();
        format!("{}{home_log}", daemon.stderr.lock().unwrap())
    };
    eventually(Duration::from_secs(10), "one log line", || {
        (log().matches("the output drain has stopped").count() == 1).then_some(())
    });

    // Let it go: the output is captured whole, the daemon is ready again.
    drop(stopped);
    let expected: usize = (1..=100000).map(|n: u32| n.to_string().len() + 1).sum();
    let s: Value = eventually(Duration::from_secs(30), "the session to end", || {
        let list = rpc.ok("list", json!({}));
        let s = list["sessions"].as_array().unwrap().iter().find(|s| s["id"] == id)?.clone();
        (s["state"] != "running").then_some(s)
    });
    assert_eq!(s["total_bytes"], expected, "{s}");
    assert_eq!(s["dropped_bytes"], 0, "{s}");
    eventually(Duration::from_secs(10), "ready again", || {
        let s = rpc.ok("stats", json!({}));
        (s["drain_stalled"].is_null() && readyz(addr).starts_with("HTTP/1.1 200")).then_some(s)
    });
    assert_eq!(rpc.ok("stats", json!({}))["drain_stalls"], 1);
    assert_eq!(log().matches("the output drain has stopped").count(), 1);
    eprintln!("drain stopped: named after {:.1} s (limit 10 s)", noticed.as_secs_f64());
}
