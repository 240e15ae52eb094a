//! Test support: an in-process daemon that stops on `Drop`, a raw JSON-RPC client over
//! `std::os::unix::net::UnixStream`, and a `/proc` scan for a session's marker.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use stockade_daemon::{CancellationToken, Daemon, DaemonConfig};

/// A daemon served in-process on its own runtime, in a temporary home. Dropping it shuts the
/// daemon down (terminating its sessions through the engine) and waits for it.
pub struct Fixture {
    pub home: PathBuf,
    pub socket: PathBuf,
    pub instance: String,
    token: CancellationToken,
    serving: Option<tokio::task::JoinHandle<Result<(), stockade_daemon::DaemonError>>>,
    rt: Option<tokio::runtime::Runtime>,
    _tmp: tempfile::TempDir,
}

impl Fixture {
    pub fn start() -> Fixture {
        Fixture::with(|_| {})
    }

    pub fn with(adjust: impl FnOnce(&mut DaemonConfig)) -> Fixture {
        let tmp = tempfile::tempdir().unwrap();
        let home = tmp.path().join("home");
        let mut config = DaemonConfig::new(&home);
        config.grace = Duration::from_millis(300);
        adjust(&mut config);
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let daemon = rt.block_on(async { Daemon::bind(config) }).unwrap();
        let socket = daemon.socket().to_path_buf();
        let instance = daemon.instance().to_owned();
        let token = CancellationToken::new();
        let serving = rt.spawn(daemon.serve(token.clone()));
        Fixture { home, socket, instance, token, serving: Some(serving), rt: Some(rt), _tmp: tmp }
    }

    pub fn client(&self) -> Rpc {
        Rpc::connect(&self.socket)
    }

    /// Whether the daemon task has finished (after a `shutdown` request).
    pub fn wait_stopped(&mut self, within: Duration) -> bool {
        let (Some(rt), Some(serving)) = (self.rt.as_ref(), self.serving.as_mut()) else {
            return true;
        };
        let done = rt.block_on(async { tokio::time::timeout(within, serving).await.is_ok() });
        if done {
            self.serving = None;
        }
        done
    }

    pub fn marker(&self, id: &str) -> String {
        format!("STOCKADE_SESSION={}:{id}", self.instance)
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        self.token.cancel();
        if let (Some(rt), Some(serving)) = (self.rt.as_ref(), self.serving.take()) {
            let _ =
                rt.block_on(async { tokio::time::timeout(Duration::from_secs(20), serving).await });
        }
        if let Some(rt) = self.rt.take() {
            rt.shutdown_timeout(Duration::from_secs(2));
        }
        // Whatever still carries this daemon's marker is killed by pid (never by name).
        kill_marked(&format!("STOCKADE_SESSION={}:", self.instance));
    }
}

/// A raw JSON-RPC client: one line out, one line in.
pub struct Rpc {
    writer: UnixStream,
    reader: BufReader<UnixStream>,
    next_id: u64,
}

impl Rpc {
    pub fn connect(path: &Path) -> Rpc {
        let deadline = Instant::now() + Duration::from_secs(10);
        let stream = loop {
            match UnixStream::connect(path) {
                Ok(s) => break s,
                Err(e) if Instant::now() < deadline => {
                    let _ = e;
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(e) => panic!("cannot connect to {}: {e}", path.display()),
            }
        };
        stream.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        let reader = BufReader::new(stream.try_clone().unwrap());
        Rpc { writer: stream, reader, next_id: 1 }
    }

    pub fn send_raw(&mut self, bytes: &[u8]) {
        self.writer.write_all(bytes).unwrap();
    }

    pub fn send(&mut self, method: &str, params: Value) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        let line = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let mut bytes = serde_json::to_vec(&line).unwrap();
        bytes.push(b'\n');
        self.send_raw(&bytes);
        id
    }

    pub fn recv(&mut self) -> Value {
        let mut line = String::new();
        let n = self.reader.read_line(&mut line).expect("an answer line");
        assert!(n > 0, "the daemon closed the connection");
        serde_json::from_str(&line).expect("the answer is JSON")
    }

    /// Call and return `Ok(result)` or `Err((code, message))`.
    pub fn call(&mut self, method: &str, params: Value) -> Result<Value, (i64, String)> {
        let id = self.send(method, params);
        let resp = self.recv();
        assert_eq!(resp["jsonrpc"], "2.0");
        assert_eq!(resp["id"], json!(id), "answer to the right request: {resp}");
        outcome(resp)
    }

    pub fn ok(&mut self, method: &str, params: Value) -> Value {
        match self.call(method, params.clone()) {
            Ok(v) => v,
            Err(e) => panic!("{method} {params} failed: {e:?}"),
        }
    }

    pub fn shutdown_writes(&self) {
        let _ = self.writer.shutdown(std::net::Shutdown::Write);
    }
}

pub fn outcome(resp: Value) -> Result<Value, (i64, String)> {
    if let Some(err) = resp.get("error") {
        assert!(resp.get("result").is_none(), "exactly one of result and error: {resp}");
        let message = err["message"].as_str().unwrap_or_default().to_owned();
        assert!(!message.is_empty(), "errors carry a sentence: {resp}");
        return Err((err["code"].as_i64().unwrap(), message));
    }
    Ok(resp["result"].clone())
}

/// Live (non-zombie) processes whose environment holds `needle` (e.g. `STOCKADE_SESSION=i:sh-1`,
/// or a prefix ending in `:` to match every session of an instance).
pub fn marked_processes(needle: &str) -> Vec<u32> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else { return found };
    for entry in entries.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let zombie = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| s.rsplit_once(')').map(|(_, rest)| rest.trim_start().starts_with('Z')))
            .unwrap_or(true);
        if zombie {
            continue;
        }
        let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
        let hit = environ.split(|b| *b == 0).any(|kv| {
            if needle.ends_with(':') {
                kv.starts_with(needle.as_bytes())
            } else {
                kv == needle.as_bytes()
            }
        });
        if hit {
            found.push(pid);
        }
    }
    found
}

/// SIGKILL every process carrying the marker (cleanup after a failed test).
pub fn kill_marked(needle: &str) {
    for pid in marked_processes(needle) {
        // SAFETY: kill(2) with a pid we just found carrying our own marker.
        unsafe {
            libc::kill(pid as libc::pid_t, libc::SIGKILL);
        }
    }
}

/// Poll `f` until it returns `Some`, or panic after `within`.
pub fn eventually<T>(within: Duration, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + within;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}
