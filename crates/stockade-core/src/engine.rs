//! The engine: owns every session of one instance and starts new ones.
//!
//! Doors (the CLI, the daemon, the MCP server) hold one [`Engine`] and translate their requests
//! into its calls; they never touch a process or a spool themselves.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use stockade_proto::{
    Capture, ContainmentMethod, DEFAULT_DISK_CAP, DEFAULT_GRACE_MS, DEFAULT_RETAINED_CAP,
    DiskPolicy, Stream,
};

use crate::output::{DrainCancel, OutputConfig, OutputError, OutputLog, drain};
use crate::process::{
    Containment, ContainmentConfig, ContainmentInfo, SessionMarker, SpawnError, SpawnSpec,
    StdioSpec, TerminateOptions, spawn,
};
use crate::session::{Session, SessionParts};
use crate::state_dir::{StateDir, StateDirError};

/// The shell used when a run names none.
pub const DEFAULT_SHELL: &str = "/bin/sh";
/// Largest retained cap (hot tail) a session may ask for.
pub const MAX_RETAINED_CAP: usize = 64 * 1024 * 1024;
/// Smallest retained cap: the tail of a view must fit in it.
pub const MIN_RETAINED_CAP: usize = 4 * 1024;

/// Errors the engine answers with.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The state directory is not usable.
    #[error(transparent)]
    StateDir(#[from] StateDirError),
    /// The output log could not be created or read.
    #[error(transparent)]
    Output(#[from] OutputError),
    /// The command could not be started.
    #[error(transparent)]
    Spawn(#[from] SpawnError),
    /// The request is not valid.
    #[error("{0}")]
    Invalid(String),
    /// No session with this id.
    #[error("no session {0}; `stockade ps` lists the sessions")]
    NoSuchSession(String),
}

/// How an engine is set up.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// The state directory.
    pub state_dir: StateDir,
    /// This instance's name (a folder under `spool/`).
    pub instance: String,
    /// Containment choice.
    pub containment: ContainmentConfig,
    /// Grace between the polite signal and `SIGKILL`.
    pub grace: Duration,
    /// Default hot-tail size per session.
    pub retained_cap: usize,
    /// Default disk cap per session.
    pub disk_cap: u64,
    /// Default disk-cap policy.
    pub disk_policy: DiskPolicy,
}

impl EngineConfig {
    /// A configuration with the defaults, for `state_dir` and an instance name.
    pub fn new(state_dir: StateDir, instance: impl Into<String>) -> EngineConfig {
        EngineConfig {
            state_dir,
            instance: instance.into(),
            containment: ContainmentConfig::default(),
            grace: Duration::from_millis(DEFAULT_GRACE_MS),
            retained_cap: DEFAULT_RETAINED_CAP,
            disk_cap: DEFAULT_DISK_CAP,
            disk_policy: DiskPolicy::default(),
        }
    }
}

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
}

/// The engine of one instance.
pub struct Engine {
    config: EngineConfig,
    containment: Containment,
    sessions: Mutex<BTreeMap<u64, Arc<Session>>>,
}

impl Engine {
    /// Set up an engine: choose the containment once (and become a child subreaper where that
    /// is the fallback) and make the instance directory.
    pub fn new(config: EngineConfig) -> Result<Engine, EngineError> {
        config.state_dir.instance_dir(&config.instance)?;
        let containment = Containment::detect(&config.containment);
        Ok(Engine { config, containment, sessions: Mutex::new(BTreeMap::new()) })
    }

    /// The configuration.
    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    /// Which containment is active and why (for `stockade doctor`).
    pub fn containment(&self) -> ContainmentInfo {
        self.containment.describe()
    }

    /// The containment method in use.
    pub fn method(&self) -> ContainmentMethod {
        self.containment.method()
    }

    /// Start a command. Returns once it is spawned; wait on the session for its end.
    pub fn run(&self, spec: RunSpec) -> Result<Arc<Session>, EngineError> {
        if spec.command.trim().is_empty() {
            return Err(EngineError::Invalid(
                "the command is empty: give a shell command to run".into(),
            ));
        }
        let retained_cap = spec.retained_cap.unwrap_or(self.config.retained_cap);
        if !(MIN_RETAINED_CAP..=MAX_RETAINED_CAP).contains(&retained_cap) {
            return Err(EngineError::Invalid(format!(
                "retained cap {retained_cap} bytes is out of range ({MIN_RETAINED_CAP}..={MAX_RETAINED_CAP})"
            )));
        }
        let id = self.config.state_dir.allocate_id()?;
        let dir = self.config.state_dir.instance_dir(&self.config.instance)?.join(&id);
        let output = OutputConfig {
            retained_cap,
            disk_cap: spec.disk_cap.unwrap_or(self.config.disk_cap),
            disk_policy: spec.disk_policy.unwrap_or(self.config.disk_policy),
            capture: spec.capture,
        };
        let log = Arc::new(OutputLog::create(&dir, output)?);

        let shell = spec.shell.clone().unwrap_or_else(|| PathBuf::from(DEFAULT_SHELL));
        let flag = if spec.login { "-lc" } else { "-c" };
        let (stdout, stderr) = match spec.capture {
            Capture::Pipe => (StdioSpec::Pipe, StdioSpec::Pipe),
            Capture::File => {
                let fd = log.child_fd()?;
                let fd2 = fd.try_clone().map_err(|e| {
                    EngineError::Invalid(format!("cannot duplicate the spool fd: {e}"))
                })?;
                (StdioSpec::Fd(fd), StdioSpec::Fd(fd2))
            }
        };
        let spawn_spec = SpawnSpec {
            program: shell.into_os_string(),
            args: vec![flag.into(), spec.command.clone().into()],
            cwd: spec.cwd.clone(),
            env: spec.env.iter().map(|(k, v)| (k.into(), v.into())).collect(),
            stdin: StdioSpec::Null,
            stdout,
            stderr,
            marker: SessionMarker { instance: self.config.instance.clone(), id: id.clone() },
        };
        let spawned = match spawn(spawn_spec, &self.containment) {
            Ok(s) => s,
            Err(e) => {
                let _ = log.finish();
                return Err(e.into());
            }
        };
        let mut sources = Vec::new();
        if let Some(fd) = spawned.stdout {
            sources.push((Stream::Stdout, fd));
        }
        if let Some(fd) = spawned.stderr {
            sources.push((Stream::Stderr, fd));
        }
        let (drain_handle, drain_cancel) = if sources.is_empty() {
            (None, None)
        } else {
            let cancel = Arc::new(DrainCancel::new()?);
            let log2 = Arc::clone(&log);
            let cancel2 = Arc::clone(&cancel);
            let handle = std::thread::Builder::new()
                .name(format!("drain-{id}"))
                .spawn(move || {
                    if let Err(e) = drain(&log2, sources, &cancel2) {
                        tracing::warn!(error = %e, "output drain stopped early");
                    }
                })
                .map_err(|e| {
                    EngineError::Invalid(format!("cannot start the output reader thread: {e}"))
                })?;
            (Some(handle), Some(cancel))
        };
        let session = Session::start(SessionParts {
            id: id.clone(),
            instance: self.config.instance.clone(),
            command: spec.command,
            cwd: spec.cwd,
            source: spec.source,
            capture: spec.capture,
            dir,
            log,
            tree: Arc::new(spawned.tree),
            drain: drain_handle,
            drain_cancel,
            timeout: spec.timeout,
            grace: self.config.grace,
        });
        let key = id_number(&id);
        self.sessions.lock().unwrap_or_else(|p| p.into_inner()).insert(key, Arc::clone(&session));
        Ok(session)
    }

    /// The session with this id.
    pub fn session(&self, id: &str) -> Result<Arc<Session>, EngineError> {
        self.sessions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&id_number(id))
            .cloned()
            .ok_or_else(|| EngineError::NoSuchSession(id.to_owned()))
    }

    /// Every session, oldest first.
    pub fn sessions(&self) -> Vec<Arc<Session>> {
        self.sessions.lock().unwrap_or_else(|p| p.into_inner()).values().cloned().collect()
    }

    /// Terminate options with this engine's grace.
    pub fn terminate_options(&self) -> TerminateOptions {
        TerminateOptions { grace: self.config.grace, ..TerminateOptions::default() }
    }

    /// Terminate every running session (shutdown) through the one routine, concurrently.
    pub async fn shutdown(&self) {
        let opts = self.terminate_options();
        let mut kills = tokio::task::JoinSet::new();
        for session in self.sessions().into_iter().filter(|s| !s.state().is_terminal()) {
            let opts = opts.clone();
            kills.spawn(async move { session.kill(opts, "engine shut down").await });
        }
        while kills.join_next().await.is_some() {}
    }
}

/// The numeric part of `sh-N` (0 for anything else, which matches no session).
fn id_number(id: &str) -> u64 {
    id.strip_prefix(crate::state_dir::SESSION_ID_PREFIX).and_then(|n| n.parse().ok()).unwrap_or(0)
}
