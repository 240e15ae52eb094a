//! Chaos: rounds of {start 4–8 sessions of mixed shapes (printing fast and slow, a `setsid`
//! escape, a PTY, `file` capture, one that ends at once), SIGKILL the daemon at a random moment
//! (while runs are being started, while sessions finish), restart it at once}, with daemons
//! started as users start them. After every round: no process of the dead daemon's sessions
//! alive, every session listed exactly once in a terminal or running state, every directory in
//! the state directory listed, every spool a byte-exact prefix of what its command printed.
//! `STOCKADE_CHAOS_ROUNDS` sets the number of rounds (default 50); the figures are printed and
//! kept in `docs/reliability.md`.

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use stockade_testkit::Home;
use stockade_testkit::procs::marked_processes;

use crate::restart::{Markers, session_dirs, sigkill};

/// Lines the printing shapes print (`seq 1 LINES`).
const LINES: u32 = 30_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Shape {
    /// `seq`, done in milliseconds: often killed while it finishes.
    Fast,
    /// `seq` through a shell loop: printing when the daemon dies.
    Slow,
    /// A `setsid` child that leaves the process group.
    Escape,
    /// On a terminal (`\r\n` line ends).
    Pty,
    /// `file` capture: the child writes the spool itself.
    File,
    /// Ends at once.
    Quick,
}

const SHAPES: [Shape; 6] =
    [Shape::Fast, Shape::Slow, Shape::Escape, Shape::Pty, Shape::File, Shape::Quick];

impl Shape {
    fn params(self) -> Value {
        let seq = format!("seq 1 {LINES}");
        match self {
            Shape::Fast => json!({"command": seq, "background": true}),
            Shape::Slow => json!({
                "command": format!("{seq} | while read l; do echo \"$l\"; done"),
                "background": true
            }),
            Shape::Escape => json!({
                "command": "setsid sleep 300 & echo started; sleep 300",
                "background": true
            }),
            Shape::Pty => json!({
                "command": format!("{seq}; sleep 300"),
                "background": true,
                "pty": {"rows": 24, "cols": 80}
            }),
            Shape::File => json!({
                "command": format!("{seq}; sleep 300"),
                "background": true,
                "capture": "file"
            }),
            Shape::Quick => json!({"command": "echo quick", "background": true}),
        }
    }

    /// Everything the command prints: its spool must be a prefix of it.
    fn output(self) -> Vec<u8> {
        let lines = |eol: &str| -> Vec<u8> {
            (1..=LINES).flat_map(|n| format!("{n}{eol}").into_bytes()).collect()
        };
        match self {
            Shape::Fast | Shape::Slow | Shape::File => lines("\n"),
            Shape::Pty => lines("\r\n"),
            Shape::Escape => b"started\n".to_vec(),
            Shape::Quick => b"quick\n".to_vec(),
        }
    }
}

/// xorshift64: enough randomness for kill moments and shapes, reproducible from the seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[derive(Default, Debug)]
struct Figures {
    rounds: u32,
    sessions: u32,
    by_shape: HashMap<String, u32>,
    /// Sessions that ended by themselves (`exit 0`) before the kill.
    completed: u32,
    /// `ps` connected while a child of the dead daemon, forked but not yet `exec`ed, still held
    /// its socket, and got "the daemon closed the connection".
    refused_once: u32,
    leaked: u32,
    lost_sessions: u32,
    /// Bytes a session that ended by itself printed but its spool lacks.
    lost_bytes: u64,
    not_prefix: u32,
}

/// One `run` on a fresh connection: `None` when the daemon is gone (before or while it
/// answers), else its answer.
fn try_run(socket: &Path, params: Value) -> Option<Result<Value, Value>> {
    let stream = UnixStream::connect(socket).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(30))).ok()?;
    let line = json!({"jsonrpc": "2.0", "id": 1, "method": "run", "params": params});
    (&stream).write_all(format!("{line}\n").as_bytes()).ok()?;
    let mut answer = String::new();
    BufReader::new(&stream).read_line(&mut answer).ok()?;
    let v: Value = serde_json::from_str(&answer).ok()?;
    Some(match v.get("result") {
        Some(r) => Ok(r.clone()),
        None => Err(v),
    })
}

#[test]
fn fifty_rounds_of_sigkill_lose_no_session_no_process_no_byte() {
    let rounds: u32 =
        std::env::var("STOCKADE_CHAOS_ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(50);
    let seed =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos()
            as u64
            | 1;
    eprintln!("chaos seed {seed}");
    let mut rng = Rng(seed);
    let home = Home::new();
    let mut markers = Markers::default();
    let mut shapes: HashMap<String, Shape> = HashMap::new();
    let mut figures = Figures::default();
    let started = Instant::now();
    for round in 0..rounds {
        home.ok(&["daemon", "start"]);
        let pid = home.daemon_pid().unwrap();
        markers.daemon(pid);
        let n = 4 + rng.below(5);
        // The kill lands at a random moment: during the starts, or while sessions finish.
        let delay = Duration::from_millis(rng.below(400));
        let killer = std::thread::spawn(move || {
            std::thread::sleep(delay);
            sigkill(pid);
        });
        let socket = home.path().join("stockade.sock");
        let mut this_round = Vec::new();
        for _ in 0..n {
            let shape = SHAPES[rng.below(SHAPES.len() as u64) as usize];
            match try_run(&socket, shape.params()) {
                Some(Ok(r)) => {
                    let id = r["id"].as_str().unwrap().to_owned();
                    shapes.insert(id.clone(), shape);
                    this_round.push(id);
                    figures.sessions += 1;
                    *figures.by_shape.entry(format!("{shape:?}")).or_default() += 1;
                }
                Some(Err(e)) => panic!("round {round}: a run was refused: {e}"),
                None => break, // the daemon died before or while it started this run
            }
        }
        killer.join().unwrap();

        // Restart at once: the next `ps` auto-starts a daemon that recovers before answering.
        let mut out = home.run(&["ps", "--json"]);
        if !out.status.success()
            && String::from_utf8_lossy(&out.stderr).contains("closed the connection")
        {
            // A child the dead daemon forked for a spawn still held its listening socket until
            // its `exec`: the kernel took this connection and nobody could answer it. Counted,
            // reported, and asked again (see docs/reliability.md, crash windows).
            figures.refused_once += 1;
            out = home.run(&["ps", "--json"]);
        }
        if !out.status.success() {
            let log = std::fs::read_to_string(home.path().join("daemon.log")).unwrap_or_default();
            let daemon = home.daemon_pid();
            let stat = daemon.and_then(|p| std::fs::read_to_string(format!("/proc/{p}/stat")).ok());
            panic!(
                "round {round}: ps failed: {}\nkilled {pid}, daemon now {daemon:?}: {stat:?}\ndaemon.log:\n{log}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let list: Value = serde_json::from_slice(&out.stdout).unwrap();
        markers.daemon(home.daemon_pid().unwrap());
        let prefix = format!("STOCKADE_SESSION=daemon-{pid}-");
        let deadline = Instant::now() + Duration::from_secs(10);
        while !marked_processes(&prefix).is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let leaked = marked_processes(&prefix).len() as u32;
        figures.leaked += leaked;
        let sessions = list["sessions"].as_array().unwrap();
        let mut ids = HashSet::new();
        for s in sessions {
            let id = s["id"].as_str().unwrap().to_owned();
            assert!(ids.insert(id.clone()), "round {round}: {id} listed twice");
            let state = s["state"].as_str().unwrap();
            assert!(
                ["running", "exited", "signaled", "failed", "killed", "timed_out"].contains(&state),
                "round {round}: {s}"
            );
            if !this_round.contains(&id) {
                continue;
            }
            let spool = std::fs::read(s["spool_path"].as_str().unwrap()).unwrap();
            assert_eq!(s["total_bytes"], spool.len() as u64, "round {round}: {s}");
            let shape = shapes[&id];
            let expected = shape.output();
            if !expected.starts_with(&spool) {
                figures.not_prefix += 1;
                eprintln!("round {round}: {id} ({shape:?}) is not a prefix of its output");
            }
            if state == "exited" && s["code"] == 0 {
                figures.completed += 1;
                figures.lost_bytes += (expected.len() - spool.len().min(expected.len())) as u64;
            }
        }
        for id in shapes.keys() {
            if !ids.contains(id) {
                figures.lost_sessions += 1;
                eprintln!("round {round}: {id} answered but not listed");
            }
        }
        for (_, id) in session_dirs(home.path()) {
            if !ids.contains(&id) {
                figures.lost_sessions += 1;
                eprintln!("round {round}: directory {id} not listed");
            }
        }
        figures.rounds += 1;
    }
    eprintln!(
        "chaos: {} rounds, {} sessions {:?}, {} completed before the kill, {} first ps refused; leaked processes {}, lost sessions {}, spools not a prefix {}, bytes lost by completed sessions {} ({:?})",
        figures.rounds,
        figures.sessions,
        figures.by_shape,
        figures.completed,
        figures.refused_once,
        figures.leaked,
        figures.lost_sessions,
        figures.not_prefix,
        figures.lost_bytes,
        started.elapsed()
    );
    assert_eq!(figures.leaked, 0, "{figures:?}");
    assert_eq!(figures.lost_sessions, 0, "{figures:?}");
    assert_eq!(figures.not_prefix, 0, "{figures:?}");
    assert_eq!(figures.lost_bytes, 0, "{figures:?}");
}
