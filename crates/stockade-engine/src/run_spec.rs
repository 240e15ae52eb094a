//! What to run: [`RunSpec`], the engine's request to start a command, and the conversions every
//! door uses to build one (a `run` request, a schedule's template), so a run means the same
//! whichever door started it.

use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use stockade_proc::pty;
use stockade_proto::rpc::{MAX_GRACE_MS, PtySize, RunParams, ScheduleRunTemplate, StdinMode};
use stockade_proto::{Capture, DiskPolicy, Sandbox};

use crate::error::EngineError;

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
    /// The environment to start from instead of the engine's process's (the caller's, or empty);
    /// `env` goes on top.
    pub base_env: Option<Vec<(String, String)>>,
    /// Extra environment variables.
    pub env: Vec<(String, String)>,
    /// Terminate the tree after this long.
    pub timeout: Option<Duration>,
    /// Grace before `SIGKILL` when this session's tree is terminated (default: the engine's).
    pub grace: Option<Duration>,
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
    /// Idempotency key: a run with the key of a kept session is that session.
    pub idempotency_key: Option<String>,
    /// Run on a pseudo-terminal of this size (stdin, stdout and stderr are the terminal; output
    /// is one `pty` stream; capture is always `pipe`).
    pub pty: Option<PtySize>,
    /// stdin of a non-PTY session: `/dev/null` (default) or a pipe fed by
    /// [`Session::write_input`](crate::Session::write_input).
    pub stdin: StdinMode,
    /// stdin of a non-PTY session read from this descriptor instead (a foreground run hands on
    /// its own piped stdin, as a shell does); the child gets a duplicate. Not kept for restart.
    pub stdin_from: Option<Arc<OwnedFd>>,
    /// The sandbox asked for (default: the engine's); once started, the one it resolved to
    /// (its own writable roots, limits filled in), which a restart applies again.
    pub sandbox: Option<Sandbox>,
    /// Once started: the sandbox in force, every writable root listed (the working directory
    /// and the private temporary directory too). Not on the wire, not stored.
    pub sandbox_in_force: Option<Sandbox>,
    /// The most this run may ask for besides the engine's own ceiling: the policy of the door
    /// that sent it (`RunParams::ceiling`) and of the sandboxed session the request comes from.
    /// Not stored.
    pub sandbox_ceilings: Vec<Sandbox>,
    /// The sandboxed session whose command asked for this run (it may reach this one, and
    /// what this one starts). Not on the wire.
    pub parent: Option<String>,
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
            base_env: p.base_env.map(|b| b.into_iter().collect()),
            env: p.env.into_iter().collect(),
            timeout: p.timeout_ms.map(Duration::from_millis),
            grace: p.grace_ms.map(|ms| Duration::from_millis(ms.min(MAX_GRACE_MS))),
            capture: p.capture,
            retained_cap: p.retained_cap,
            disk_cap: p.disk_cap,
            disk_policy: p.disk_policy,
            source: p.source,
            idempotency_key: p.idempotency_key,
            pty: p.pty,
            stdin: p.stdin,
            stdin_from: None,
            // A door's ceiling is the default of a run that names no sandbox, and fills in the
            // limits one that does leaves unset.
            sandbox: match (p.sandbox, &p.ceiling) {
                (Some(asked), Some(ceiling)) => Some(asked.with_limits_from(ceiling)),
                (None, Some(ceiling)) => Some(ceiling.clone()),
                (asked, None) => asked,
            },
            sandbox_in_force: None,
            sandbox_ceilings: p.ceiling.into_iter().collect(),
            parent: None,
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
            base_env: t
                .base_env
                .as_ref()
                .map(|b| b.iter().map(|(k, v)| (k.clone(), v.clone())).collect()),
            env: t.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            timeout: t.timeout_ms.map(Duration::from_millis),
            capture: t.capture,
            retained_cap: t.retained_cap,
            disk_cap: t.disk_cap,
            disk_policy: t.disk_policy,
            source: Some(source.to_owned()),
            sandbox: t.sandbox.clone(),
            ..RunSpec::default()
        }
    }
}

/// A PTY run has a valid size, no stdin pipe and `pipe` capture (the terminal is one stream the
/// engine reads; there is no file to hand the child).
pub(crate) fn validate_input(spec: &RunSpec) -> Result<(), EngineError> {
    let Some(size) = spec.pty else { return Ok(()) };
    pty::validate_size(size).map_err(|e| EngineError::Invalid(e.to_string()))?;
    if spec.stdin == StdinMode::Pipe || spec.stdin_from.is_some() {
        return Err(EngineError::Invalid(
            "a PTY session's stdin is the terminal: drop stdin pipe (write goes to the terminal)"
                .into(),
        ));
    }
    if spec.capture == Capture::File {
        return Err(EngineError::Invalid(
            "PTY sessions always use pipe capture: drop capture file".into(),
        ));
    }
    Ok(())
}

/// What the OS cannot take is refused as invalid, before any fork: a NUL byte (C strings end
/// there, so the command would be cut short) and environment keys that are empty or contain `=`
/// (`A=B` as a key would set `A` to `B=…`).
pub(crate) fn validate_text(spec: &RunSpec) -> Result<(), EngineError> {
    let invalid = |what: String| Err(EngineError::Invalid(what));
    if spec.command.contains('\0') {
        return invalid(
            "the command contains a NUL byte, which no process can receive; remove it".into(),
        );
    }
    for (what, path) in [("cwd", &spec.cwd), ("shell", &spec.shell)] {
        if path.as_ref().is_some_and(|p| p.as_os_str().as_encoded_bytes().contains(&0)) {
            return invalid(format!("{what} contains a NUL byte; remove it"));
        }
    }
    for (key, value) in spec.base_env.iter().flatten().chain(&spec.env) {
        if key.is_empty() {
            return invalid("an environment variable has an empty name; give each a name".into());
        }
        if key.contains('=') || key.contains('\0') {
            return invalid(format!(
                "the environment variable name {key:?} contains `=` or a NUL byte; names cannot"
            ));
        }
        if value.contains('\0') {
            return invalid(format!("the value of {key} contains a NUL byte; remove it"));
        }
    }
    Ok(())
}

/// The longest idempotency key taken.
pub const MAX_IDEMPOTENCY_KEY: usize = 128;

/// An idempotency key is 1–128 printable ASCII characters (it is shown in messages and lists).
pub fn check_idempotency_key(key: &str) -> Result<(), EngineError> {
    if key.is_empty()
        || key.len() > MAX_IDEMPOTENCY_KEY
        || !key.bytes().all(|b| b.is_ascii_graphic())
    {
        return Err(EngineError::Invalid(format!(
            "an idempotency key is 1 to {MAX_IDEMPOTENCY_KEY} printable ASCII characters without spaces; this one has {} bytes",
            key.len()
        )));
    }
    Ok(())
}
