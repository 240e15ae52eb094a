//! A real `stockade daemon run` process on a temporary home, cleaned up on `Drop` even when a
//! test fails: a `shutdown` request, then SIGKILL to the daemon by its pid, then SIGKILL to
//! whatever still carries its sessions' marker.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::procs::kill_marked;
use crate::rpc::Rpc;
use crate::stockade_bin;

/// A `stockade daemon run` child process.
pub struct DaemonProc {
    /// The child.
    pub child: Child,
    /// Its pid.
    pub pid: u32,
    /// Its home.
    pub home: PathBuf,
    /// Its Unix socket.
    pub socket: PathBuf,
    /// Everything it wrote to stderr so far (the readiness line first).
    pub stderr: Arc<Mutex<String>>,
    _tmp: Option<tempfile::TempDir>,
}

/// Writes `token` (and a newline) to `<dir>/token` with mode 0600, as the doors require of a
/// token file, and returns its path.
pub fn owner_token_file(dir: &Path, token: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt as _;
    let path = dir.join("token");
    std::fs::write(&path, format!("{token}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    path
}

impl DaemonProc {
    /// The WebSocket door's address, from the readiness line (`… on ws://ADDR …`).
    pub fn ws_addr(&self) -> std::net::SocketAddr {
        let ready = self.stderr.lock().unwrap().clone();
        ready
            .split("ws://")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .expect("the ready line names the WebSocket address")
            .parse()
            .unwrap()
    }

    /// The E2B door's address, from its line (`E2B door on http(s)://ADDR (…)`).
    pub fn e2b_addr(&self) -> std::net::SocketAddr {
        let said = self.stderr.lock().unwrap().clone();
        said.split("E2B door on ")
            .nth(1)
            .and_then(|rest| rest.split("://").nth(1))
            .and_then(|rest| rest.split_whitespace().next())
            .expect("the daemon names the E2B door's address")
            .parse()
            .unwrap()
    }

    /// Starts a daemon on a fresh temporary home.
    pub fn start(extra: &[&str]) -> DaemonProc {
        let tmp = tempfile::tempdir().unwrap();
        let home = tmp.path().join("home");
        let mut d = DaemonProc::start_at(&home, extra).expect("the daemon starts");
        d._tmp = Some(tmp);
        d
    }

    /// Starts a daemon on `home`; `Err((stderr, status))` if it exits instead of listening.
    pub fn start_at(home: &Path, extra: &[&str]) -> Result<DaemonProc, (String, ExitStatus)> {
        DaemonProc::start_env(home, extra, &[])
    }

    /// [`DaemonProc::start_at`] with extra environment for the daemon (and so its sessions).
    pub fn start_env(
        home: &Path,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Result<DaemonProc, (String, ExitStatus)> {
        DaemonProc::start_exe(&stockade_bin(), home, extra, env)
    }

    /// [`DaemonProc::start_env`] with another copy of the `stockade` binary (a daemon that must
    /// share no page of its executable with the other tests' daemons).
    pub fn start_exe(
        exe: &Path,
        home: &Path,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Result<DaemonProc, (String, ExitStatus)> {
        let mut child = Command::new(exe)
            .arg("--home")
            .arg(home)
            .args(["daemon", "run", "--grace-ms", "500"])
            .args(extra)
            .envs(env.iter().copied())
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

    /// A new connection to it.
    pub fn client(&self) -> Rpc {
        Rpc::connect(&self.socket)
    }

    /// Waits for the daemon to exit, up to `within`.
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

    /// SIGKILLs the daemon (our own child, by its pid) and waits until it is gone.
    pub fn sigkill(&mut self) {
        let _ = self.child.kill();
        assert!(self.wait_exit(Duration::from_secs(10)).is_some(), "the daemon died");
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
