//! Peers: other engines measured the same way as Stockade.
//!
//! # The peer contract
//!
//! A peer is a command (`--peer NAME=COMMAND`), run as `/bin/sh -c 'exec COMMAND'` in a process
//! group of its own, with this environment:
//!
//! | variable | meaning |
//! | --- | --- |
//! | `BENCH_N` | how many commands to start |
//! | `BENCH_COMMAND` | the shell command each one runs; it waits for the barrier itself |
//! | `BENCH_BYTES` | bytes each command prints (informational) |
//! | `BENCH_BARRIER` | the barrier file the commands wait for (informational) |
//! | `BENCH_SLEEP` | seconds each command sleeps after printing (informational) |
//! | `BENCH_PROGRESS` | a file the peer may overwrite with the total output bytes it received |
//!
//! The peer starts the N commands *its own way* (that is what is measured), prints `ready` on a
//! line of its stdout once all are started, and exits 0 when all have ended. The sampler samples
//! the peer's root process (so COMMAND should `exec` into the engine, not wrap it); a peer has no
//! `stats`. When the run ends, the whole process group is killed, so nothing it started survives.

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use crate::proc::kill_group;
use crate::{BenchError, Result};

/// The shipped Node.js replica of the baseline shell manager (strings in arrays).
pub const NODE_BASELINE_JS: &str = include_str!("../../../bench/peers/node-baseline.js");
/// The old-space limit the baseline ran Node under.
pub const NODE_OLD_SPACE_MIB: u64 = 512;

/// A peer as given on the command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerSpec {
    /// Variant name in tables and plots.
    pub name: String,
    /// The command.
    pub command: String,
}

impl std::str::FromStr for PeerSpec {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<PeerSpec, String> {
        match s.split_once('=') {
            Some((n, c)) if !n.trim().is_empty() && !c.trim().is_empty() => {
                Ok(PeerSpec { name: n.trim().into(), command: c.trim().into() })
            }
            _ => Err(format!("{s:?} is not NAME=COMMAND")),
        }
    }
}

/// Find an executable on `PATH`.
pub fn which(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(program))
        .find(|p| std::fs::metadata(p).map(|m| m.is_file() && is_executable(&m)).unwrap_or(false))
}

fn is_executable(m: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::PermissionsExt;
    m.permissions().mode() & 0o111 != 0
}

/// The Node baseline as a peer, with its script written to `dir`; `Err` says why it cannot run.
pub fn node_baseline(dir: &Path) -> std::result::Result<PeerSpec, String> {
    let node = which("node").ok_or("`node` is not on PATH")?;
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let script = dir.join("node-baseline.js");
    std::fs::write(&script, NODE_BASELINE_JS)
        .map_err(|e| format!("cannot write {}: {e}", script.display()))?;
    Ok(PeerSpec {
        name: "node-baseline".into(),
        command: format!(
            "'{}' --max-old-space-size={NODE_OLD_SPACE_MIB} '{}'",
            node.display(),
            script.display()
        ),
    })
}

/// What a peer is asked to do.
pub struct PeerLoad<'a> {
    /// Commands to start.
    pub n: usize,
    /// The command each runs.
    pub command: &'a str,
    /// Bytes each prints.
    pub bytes: u64,
    /// The barrier file.
    pub barrier: &'a Path,
    /// Seconds each sleeps after printing.
    pub sleep_s: u64,
    /// The progress file.
    pub progress: &'a Path,
}

/// A running peer, killed with its whole process group on drop.
pub struct PeerProcess {
    child: Option<Child>,
    pid: u32,
    ready: mpsc::Receiver<()>,
    stderr_path: PathBuf,
    exit: Option<ExitStatus>,
}

impl PeerProcess {
    /// Start a peer with `load`; its stderr goes to `dir/peer.stderr`.
    pub fn start(spec: &PeerSpec, load: &PeerLoad<'_>, dir: &Path) -> Result<PeerProcess> {
        let stderr_path = dir.join("peer.stderr");
        let stderr = std::fs::File::create(&stderr_path)
            .map_err(|e| BenchError::path("create", &stderr_path, e))?;
        let mut child = Command::new("/bin/sh")
            .arg("-c")
            .arg(format!("exec {}", spec.command))
            .env("BENCH_N", load.n.to_string())
            .env("BENCH_COMMAND", load.command)
            .env("BENCH_BYTES", load.bytes.to_string())
            .env("BENCH_BARRIER", load.barrier)
            .env("BENCH_SLEEP", load.sleep_s.to_string())
            .env("BENCH_PROGRESS", load.progress)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .process_group(0)
            .spawn()
            .map_err(|e| BenchError::io(format!("start peer {}", spec.name), e))?;
        let pid = child.id();
        let (tx, rx) = mpsc::channel();
        if let Some(out) = child.stdout.take() {
            // Watch for `ready`, then keep draining so the peer never blocks on its stdout.
            let spawned =
                std::thread::Builder::new().name("bench-peer-stdout".into()).spawn(move || {
                    for line in BufReader::new(out).lines() {
                        let Ok(line) = line else { break };
                        if line.trim() == "ready" {
                            let _ = tx.send(());
                        }
                    }
                });
            if let Err(e) = spawned {
                kill_group(pid);
                let _ = child.wait();
                return Err(BenchError::io("start a reader thread", e));
            }
        }
        Ok(PeerProcess { child: Some(child), pid, ready: rx, stderr_path, exit: None })
    }

    /// The peer's root pid (what the sampler samples).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Wait for the peer's `ready` line.
    pub fn wait_ready(&mut self, limit: Duration) -> Result<()> {
        match self.ready.recv_timeout(limit) {
            Ok(()) => Ok(()),
            Err(_) => Err(BenchError::msg(format!(
                "the peer did not print `ready` within {}s: {}",
                limit.as_secs(),
                self.stderr_tail()
            ))),
        }
    }

    /// Whether the peer's root process is still running (reaps it once it exited).
    pub fn is_alive(&mut self) -> bool {
        match self.child.as_mut().map(|c| c.try_wait()) {
            Some(Ok(None)) | Some(Err(_)) => true,
            Some(Ok(Some(status))) => {
                self.exit = Some(status);
                self.child = None;
                false
            }
            None => false,
        }
    }

    /// How the peer ended, once it has.
    pub fn exit_status(&self) -> Option<ExitStatus> {
        self.exit
    }

    /// The peer's stderr, last lines.
    pub fn stderr_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.stderr_path).unwrap_or_default();
        let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
        let tail = &lines[lines.len().saturating_sub(3)..];
        if tail.is_empty() { "no message on stderr".into() } else { tail.join(" | ") }
    }

    /// Whether the peer said it ran out of memory (V8: "heap out of memory").
    pub fn said_oom(&self) -> bool {
        let text = std::fs::read_to_string(&self.stderr_path).unwrap_or_default().to_lowercase();
        text.contains("out of memory") || text.contains("allocation failed")
    }

    /// Kill the peer's whole process group and reap it.
    pub fn kill(&mut self) {
        kill_group(self.pid);
        if let Some(mut c) = self.child.take()
            && let Ok(status) = c.wait()
        {
            self.exit.get_or_insert(status);
        }
    }
}

impl Drop for PeerProcess {
    fn drop(&mut self) {
        // The group outlives its leader (the peer's commands): always kill it.
        kill_group(self.pid);
        if let Some(mut c) = self.child.take() {
            let _ = c.wait();
        }
    }
}
