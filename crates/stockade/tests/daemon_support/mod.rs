//! Support for tests of the real `stockade daemon` binary: start it on a temporary home, talk
//! raw JSON-RPC to it, and clean up on `Drop` even when a test fails (a `shutdown` request, then
//! SIGKILL to the daemon by its pid, then SIGKILL to whatever still carries its sessions' marker).

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// A `stockade daemon run` child process.
pub struct DaemonProc {
    pub child: Child,
    pub pid: u32,
    pub home: PathBuf,
    pub socket: PathBuf,
    pub stderr: Arc<Mutex<String>>,
    _tmp: Option<tempfile::TempDir>,
}

impl DaemonProc {
    /// Start a daemon on a fresh temporary home.
    pub fn start(extra: &[&str]) -> DaemonProc {
        let tmp = tempfile::tempdir().unwrap();
        let home = tmp.path().join("home");
        let mut d = DaemonProc::start_at(&home, extra).expect("the daemon starts");
        d._tmp = Some(tmp);
        d
    }

    /// Start a daemon on `home`; `Err(stderr, status)` if it exits instead of listening.
    pub fn start_at(home: &Path, extra: &[&str]) -> Result<DaemonProc, (String, ExitStatus)> {
        let mut child = Command::new(env!("CARGO_BIN_EXE_stockade"))
            .arg("--home")
            .arg(home)
            .args(["daemon", "run", "--grace-ms", "500"])
            .args(extra)
            .env("STOCKADE_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let pid = child.id();
        let mut err = BufReader::new(child.stderr.take().unwrap());
        // Log lines may come before the readiness line (e.g. about a crashed daemon's leftovers).
        let mut first = String::new();
        loop {
            let mut line = String::new();
            let n = err.read_line(&mut line).unwrap();
            first.push_str(&line);
            if n == 0 || line.contains("listening on") {
                break;
            }
        }
        if !first.contains("listening on") {
            let mut rest = String::new();
            let _ = err.read_to_string(&mut rest);
            let status = child.wait().unwrap();
            return Err((first + &rest, status));
        }
        assert!(first.contains(&format!("pid {pid}")), "{first}");
        let stderr = Arc::new(Mutex::new(first.clone()));
        let sink = Arc::clone(&stderr);
        // Keep draining stderr so the daemon never blocks on a full pipe.
        std::thread::spawn(move || {
            let mut line = String::new();
            while err.read_line(&mut line).map(|n| n > 0).unwrap_or(false) {
                sink.lock().unwrap().push_str(&line);
                line.clear();
            }
        });
        Ok(DaemonProc {
            child,
            pid,
            home: home.to_path_buf(),
            socket: home.join("stockade.sock"),
            stderr,
            _tmp: None,
        })
    }

    pub fn client(&self) -> Rpc {
        Rpc::connect(&self.socket)
    }

    /// Wait for the daemon to exit, up to `within`.
    pub fn wait_exit(&mut self, within: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The marker prefix of every session of this daemon (`STOCKADE_SESSION=daemon-<pid>-`).
    pub fn marker_prefix(&self) -> String {
        format!("STOCKADE_SESSION=daemon-{}-", self.pid)
    }
}

impl Drop for DaemonProc {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            if let Ok(stream) = UnixStream::connect(&self.socket) {
                let _ = stream.set_write_timeout(Some(Duration::from_secs(1)));
                let _ = (&stream)
                    .write_all(b"{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"shutdown\"}\n");
            }
            if self.wait_exit(Duration::from_secs(10)).is_none() {
                let _ = self.child.kill(); // SIGKILL to this child, by its pid
                let _ = self.child.wait();
            }
        }
        kill_marked(&self.marker_prefix());
    }
}

/// A raw JSON-RPC client.
pub struct Rpc {
    writer: UnixStream,
    reader: BufReader<UnixStream>,
    next_id: u64,
}

impl Rpc {
    pub fn connect(path: &Path) -> Rpc {
        let stream = UnixStream::connect(path).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
        let reader = BufReader::with_capacity(1 << 20, stream.try_clone().unwrap());
        Rpc { writer: stream, reader, next_id: 1 }
    }

    pub fn call(&mut self, method: &str, params: Value) -> Result<Value, (i64, String)> {
        let id = self.next_id;
        self.next_id += 1;
        let mut line = serde_json::to_vec(
            &json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}),
        )
        .unwrap();
        line.push(b'\n');
        self.writer.write_all(&line).unwrap();
        let mut answer = Vec::new();
        self.reader.read_until(b'\n', &mut answer).unwrap();
        let resp: Value = serde_json::from_slice(&answer).expect("an answer line");
        assert_eq!(resp["id"], json!(id));
        match resp.get("error") {
            Some(e) => {
                Err((e["code"].as_i64().unwrap(), e["message"].as_str().unwrap().to_owned()))
            }
            None => Ok(resp["result"].clone()),
        }
    }

    pub fn ok(&mut self, method: &str, params: Value) -> Value {
        self.call(method, params.clone()).unwrap_or_else(|e| panic!("{method} {params}: {e:?}"))
    }
}

/// Live (non-zombie) processes whose environment has an entry equal to `needle`, or starting with
/// it when it ends in `-` or `:` (a prefix).
pub fn marked_processes(needle: &str) -> Vec<u32> {
    let prefix = needle.ends_with('-') || needle.ends_with(':');
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
            if prefix { kv.starts_with(needle.as_bytes()) } else { kv == needle.as_bytes() }
        });
        if hit {
            found.push(pid);
        }
    }
    found
}

/// SIGKILL every process carrying the marker (cleanup after a failed test), by pid.
pub fn kill_marked(needle: &str) {
    for pid in marked_processes(needle) {
        // SAFETY: kill(2) on a pid just seen carrying this test's own marker.
        unsafe {
            libc::kill(pid as libc::pid_t, libc::SIGKILL);
        }
    }
}

/// The engine instance of a session, from its spool path (`…/spool/<instance>/<id>/output.log`).
pub fn instance_of(session: &Value) -> String {
    let spool = PathBuf::from(session["spool_path"].as_str().unwrap());
    spool
        .parent()
        .and_then(Path::parent)
        .and_then(Path::file_name)
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned()
}

/// Poll `f` until it returns `Some`, or panic after `within`.
pub fn eventually<T>(within: Duration, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + within;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Standard base64 (with padding) to bytes; panics on bad input. Small, so the test needs no
/// extra dependency.
pub fn base64_decode(text: &str) -> Vec<u8> {
    fn val(c: u8) -> u32 {
        match c {
            b'A'..=b'Z' => u32::from(c - b'A'),
            b'a'..=b'z' => u32::from(c - b'a') + 26,
            b'0'..=b'9' => u32::from(c - b'0') + 52,
            b'+' => 62,
            b'/' => 63,
            _ => panic!("not base64: {c}"),
        }
    }
    let bytes = text.as_bytes();
    assert_eq!(bytes.len() % 4, 0, "base64 length");
    let mut out = Vec::with_capacity(bytes.len() / 4 * 3);
    for chunk in bytes.chunks(4) {
        let pad = chunk.iter().rev().take_while(|&&c| c == b'=').count();
        let mut n = 0u32;
        for &c in &chunk[..4 - pad] {
            n = (n << 6) | val(c);
        }
        n <<= 6 * pad as u32;
        let three = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
        out.extend_from_slice(&three[..3 - pad]);
    }
    out
}
