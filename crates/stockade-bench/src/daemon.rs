//! A fresh Stockade daemon for one run, owned by a guard: started as `<exe> --home <dir> daemon
//! run --socket <dir>/stockade.sock`, ended by `shutdown`, and on any failure by `SIGKILL` to its
//! pid and to the process group of every session it was asked to start (start-time checked).

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

use stockade_client::{Client, ConnectOptions};
use stockade_procfs::start_time;
use stockade_proto::rpc::{NoParams, method};

use crate::proc::{group_alive, kill_group, kill_pid, wait_until};
use crate::{BenchError, Result};

/// How long one call may take, on top of the waits it asks for, before the harness gives up on
/// the daemon.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(120);

/// How long a daemon may take to open its socket.
const START_LIMIT: Duration = Duration::from_secs(20);
/// How long `shutdown` may take (it terminates every session, 2 s grace each, in parallel).
const SHUTDOWN_LIMIT: Duration = Duration::from_secs(30);

/// A running daemon and what it was asked to start.
pub struct Daemon {
    child: Option<Child>,
    pid: u32,
    started: Option<u64>,
    socket: PathBuf,
    /// How to reach it: its socket, never auto-starting another daemon.
    connect: ConnectOptions,
    stderr_path: PathBuf,
    sessions: Vec<(u32, Option<u64>)>,
    exit: Option<ExitStatus>,
}

impl Daemon {
    /// Start a daemon with state directory `home` and wait until its socket answers.
    pub fn start(exe: &Path, home: &Path) -> Result<Daemon> {
        Daemon::start_with(exe, home, &[])
    }

    /// [`Daemon::start`] with more `daemon run` arguments (e.g. `--no-cgroup`).
    pub fn start_with(exe: &Path, home: &Path, extra: &[&str]) -> Result<Daemon> {
        std::fs::create_dir_all(home).map_err(|e| BenchError::path("create", home, e))?;
        let socket = home.join("stockade.sock");
        let stderr_path = home.join("daemon.stderr");
        let stderr =
            File::create(&stderr_path).map_err(|e| BenchError::path("create", &stderr_path, e))?;
        let child = Command::new(exe)
            .arg("--home")
            .arg(home)
            .args(["daemon", "run", "--socket"])
            .arg(&socket)
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .env_remove("STOCKADE_HOME")
            .spawn()
            .map_err(|e| BenchError::path("start the daemon", exe, e))?;
        let pid = child.id();
        let mut d = Daemon {
            child: Some(child),
            pid,
            started: start_time(pid),
            connect: ConnectOptions {
                socket: Some(socket.clone()),
                autostart: false,
                call_timeout: CALL_TIMEOUT,
                ..ConnectOptions::new(home)
            },
            socket,
            stderr_path,
            sessions: Vec::new(),
            exit: None,
        };
        let ready = wait_until(START_LIMIT, Duration::from_millis(20), || {
            !d.is_alive() || d.client().is_ok()
        });
        if !d.is_alive() || !ready {
            let why = d.stderr_tail();
            d.shutdown();
            return Err(BenchError::msg(format!(
                "the daemon did not open {} within {}s: {why}",
                d.socket.display(),
                START_LIMIT.as_secs()
            )));
        }
        Ok(d)
    }

    /// The daemon's pid (what the sampler samples).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// A new connection to the daemon.
    pub fn client(&self) -> Result<Client> {
        Ok(Client::connect(&self.connect)?)
    }

    /// Remember a session's root pid (its process group) for the last-resort cleanup.
    pub fn track_session(&mut self, pid: u32) {
        self.sessions.push((pid, start_time(pid)));
    }

    /// Whether the daemon process is still running (reaps it if it exited).
    pub fn is_alive(&mut self) -> bool {
        match self.child.as_mut().map(|c| c.try_wait()) {
            Some(Ok(None)) => true,
            Some(Ok(Some(status))) => {
                self.exit = Some(status);
                self.child = None;
                false
            }
            Some(Err(_)) => true,
            None => false,
        }
    }

    /// How the daemon ended, once it has.
    pub fn exit_status(&self) -> Option<ExitStatus> {
        self.exit
    }

    /// The last lines the daemon wrote to stderr (for error messages and OOM detection).
    pub fn stderr_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.stderr_path).unwrap_or_default();
        let lines: Vec<&str> = text.lines().rev().take(5).collect();
        let tail: Vec<&str> = lines.into_iter().rev().collect();
        if tail.is_empty() { "no message on stderr".into() } else { tail.join(" | ") }
    }

    /// Ask the daemon to shut down (terminating every session), wait for it, and kill whatever
    /// is left: the daemon by pid, each session's process group. Idempotent.
    pub fn shutdown(&mut self) -> Option<ExitStatus> {
        if self.is_alive() {
            if let Ok(mut c) = self.client() {
                let _ = c.call::<method::Shutdown>(NoParams {});
            }
            let gone = wait_until(SHUTDOWN_LIMIT, Duration::from_millis(20), || !self.is_alive());
            if !gone {
                kill_pid(self.pid, self.started);
                if let Some(child) = self.child.as_mut()
                    && let Ok(status) = child.wait()
                {
                    self.exit = Some(status);
                }
                self.child = None;
            }
        }
        // Last resort: nothing a session started may outlive the run.
        for &(pid, started) in &self.sessions {
            if started.is_some() && crate::proc::same_process(pid, started) {
                kill_pid(pid, started);
            }
            if group_alive(pid) && pid != std::process::id() {
                kill_group(pid);
            }
        }
        self.exit
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.shutdown();
    }
}
