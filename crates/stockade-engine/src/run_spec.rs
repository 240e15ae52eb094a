//! What to run: [`RunSpec`], the engine's request to start a command, and the conversions every
//! door uses to build one (a `run` request, a schedule's template), so a run means the same
//! whichever door started it.

use std::path::PathBuf;
use std::time::Duration;

use stockade_proto::rpc::{PtySize, RunParams, ScheduleRunTemplate, StdinMode};
use stockade_proto::{Capture, DiskPolicy};

/// What to run.
#[derive(Debug, Clone, Default)]
pub struct RunSpec {
    /// The shell command string.
    pub command: String,
    /// The shell (default `/bin/sh`).
    pub shell: Option<PathBuf>,
    /// Run the shell as a login shell (`-lc`).
    pub login: bool,
    /// Working directory (default: the engine's).
    pub cwd: Option<PathBuf>,
    /// Extra environment variables.
    pub env: Vec<(String, String)>,
    /// Terminate the tree after this long.
    pub timeout: Option<Duration>,
    /// Capture mode.
    pub capture: Capture,
    /// Hot-tail size (default: the engine's).
    pub retained_cap: Option<usize>,
    /// Disk cap (default: the engine's).
    pub disk_cap: Option<u64>,
    /// Disk-cap policy (default: the engine's).
    pub disk_policy: Option<DiskPolicy>,
    /// Dedup key.
    pub source: Option<String>,
    /// Run on a pseudo-terminal of this size (stdin, stdout and stderr are the terminal; output
    /// is one `pty` stream; capture is always `pipe`).
    pub pty: Option<PtySize>,
    /// stdin of a non-PTY session: `/dev/null` (default) or a pipe fed by
    /// [`Session::write_input`](crate::Session::write_input).
    pub stdin: StdinMode,
}

impl From<RunParams> for RunSpec {
    /// A `run` request as the engine takes it; the answer's shape (`background`, `yield_ms`,
    /// limits, `direction`) is the door's and [`stockade_log::ReadRequest::for_run`]'s.
    fn from(p: RunParams) -> RunSpec {
        RunSpec {
            command: p.command,
            shell: p.shell,
            login: p.login,
            cwd: p.cwd,
            env: p.env.into_iter().collect(),
            timeout: p.timeout_ms.map(Duration::from_millis),
            capture: p.capture,
            retained_cap: p.retained_cap,
            disk_cap: p.disk_cap,
            disk_policy: p.disk_policy,
            source: p.source,
            pty: p.pty,
            stdin: p.stdin,
        }
    }
}

impl RunSpec {
    /// One tick's run of a schedule: its template, deduplicated by the schedule's `source`.
    pub fn scheduled(t: &ScheduleRunTemplate, source: &str) -> RunSpec {
        RunSpec {
            command: t.command.clone(),
            shell: t.shell.clone(),
            login: t.login,
            cwd: t.cwd.clone(),
            env: t.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            timeout: t.timeout_ms.map(Duration::from_millis),
            capture: t.capture,
            retained_cap: t.retained_cap,
            disk_cap: t.disk_cap,
            disk_policy: t.disk_policy,
            source: Some(source.to_owned()),
            ..RunSpec::default()
        }
    }
}
