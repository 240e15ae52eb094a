//! The engine: owns every session of one instance and starts new ones.
//!
//! Doors (the CLI, the daemon, the MCP server) hold one [`Engine`] and translate their requests
//! into its calls; they never touch a process or a spool themselves.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use stockade_proto::rpc::StdinMode;
use stockade_proto::{Capture, ContainmentMethod, TerminateReport};

use crate::engine_config::{
    DEFAULT_SHELL, EngineConfig, EngineStats, Forgotten, MAX_RETAINED_CAP, MIN_RETAINED_CAP,
    Started,
};
use crate::error::EngineError;
use crate::launch::{remove_unstarted, start_drain_if_any};
use crate::run_spec::RunSpec;
use crate::session::{Session, SessionParts};
use crate::slots::Slots;
use stockade_log::OutputConfig;
use stockade_proc::{
    Containment, ContainmentInfo, SessionMarker, SpawnSpec, StdioSpec, TerminateBatch,
    TerminateOptions, spawn, spawn_pty,
};

/// How often `shutdown` looks again for sessions whose spawn was in progress when it began.
const SHUTDOWN_RESCAN: Duration = Duration::from_millis(10);

/// The sessions of one engine, and the admissions in flight (spawns not yet registered).
#[derive(Default)]
struct Registry {
    sessions: BTreeMap<u64, Arc<Session>>,
    /// Runs admitted whose session is not registered yet.
    pending: usize,
    /// Retained caps those pending runs reserved.
    pending_tail: u64,
    /// Set by `shutdown`: nothing new is admitted.
    closed: bool,
}

/// An admitted run: holds its place in the limits until the session is registered (or the
/// spawn fails).
struct Admission<'a> {
    engine: &'a Engine,
    retained_cap: u64,
}

impl Drop for Admission<'_> {
    fn drop(&mut self) {
        let mut reg = self.engine.registry();
        reg.pending = reg.pending.saturating_sub(1);
        reg.pending_tail = reg.pending_tail.saturating_sub(self.retained_cap);
    }
}

/// The engine of one instance.
pub struct Engine {
    config: EngineConfig,
    containment: Containment,
    registry: Mutex<Registry>,
    /// Serialises runs that carry a `source`, so two of them cannot both start a copy.
    pub(crate) source_lock: Mutex<()>,
    /// The idempotency keys of the runs starting now.
    pub(crate) starting: crate::starting::Starting,
    /// Serialises looks at other owners' sessions (start-up recovery, the owner watch).
    pub(crate) others: tokio::sync::Mutex<crate::others_memo::OthersState>,
    /// Session directories made ahead of time (`prepared_dirs > 0`).
    slots: Option<Arc<Slots>>,
    /// Paths hidden from sandboxed commands since the start ([`Engine::hide`]), beside the
    /// configuration's.
    hidden_added: std::sync::RwLock<Arc<Vec<PathBuf>>>,
}

impl Engine {
    /// Set up an engine: choose the containment once (and become a child subreaper where that
    /// is the fallback) and make the instance directory.
    pub fn new(config: EngineConfig) -> Result<Engine, EngineError> {
        let instance_dir = config.state_dir.instance_dir(&config.instance)?;
        let containment = Containment::detect(&config.containment);
        let slots = (config.prepared_dirs > 0).then(|| {
            let slots = Slots::new(instance_dir, config.prepared_dirs);
            slots.refill();
            slots
        });
        Ok(Engine {
            config,
            containment,
            registry: Mutex::new(Registry::default()),
            source_lock: Mutex::new(()),
            starting: crate::starting::Starting::default(),
            others: tokio::sync::Mutex::new(crate::others_memo::OthersState::default()),
            slots,
            hidden_added: std::sync::RwLock::default(),
        })
    }

    /// Keep `paths` (absolute; canonical where they exist) from every sandboxed command started
    /// from now on, beside the configuration's hidden paths: a door's secret the daemon was not
    /// started with. Answers every path hidden now besides the home.
    pub fn hide(&self, paths: &[PathBuf]) -> Result<Vec<PathBuf>, EngineError> {
        let mut resolved = Vec::with_capacity(paths.len());
        for path in paths {
            if !path.is_absolute() {
                return Err(EngineError::Invalid(format!(
                    "the path to hide {} is not absolute; give a full path",
                    path.display()
                )));
            }
            resolved.push(std::fs::canonicalize(path).unwrap_or_else(|_| path.clone()));
        }
        let mut added = self.hidden_added.write().unwrap_or_else(PoisonError::into_inner);
        let mut now = Vec::clone(&added);
        for path in resolved {
            if !now.contains(&path) && !self.config.sandbox.hidden.contains(&path) {
                now.push(path);
            }
        }
        *added = Arc::new(now);
        Ok(self.config.sandbox.hidden.iter().chain(added.iter()).cloned().collect())
    }

    fn hidden_added(&self) -> Arc<Vec<PathBuf>> {
        Arc::clone(&self.hidden_added.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// This instance's directory. Made (and probed for writing) in [`Engine::new`]; per run only
    /// looked at, and made again should something have removed it.
    fn instance_dir(&self) -> Result<PathBuf, EngineError> {
        let dir = self.config.state_dir.spool_root().join(&self.config.instance);
        match std::fs::symlink_metadata(&dir) {
            Ok(meta) if meta.is_dir() => Ok(dir),
            _ => Ok(self.config.state_dir.instance_dir(&self.config.instance)?),
        }
    }

    fn registry(&self) -> MutexGuard<'_, Registry> {
        self.registry.lock().unwrap_or_else(PoisonError::into_inner)
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

    /// Whether sessions run under a keeper (see `stockade_proc`'s session keeper).
    pub fn has_keeper(&self) -> bool {
        self.containment.has_keeper()
    }

    /// The containment handle, to adopt a tree an earlier daemon recorded (crash recovery).
    pub(crate) fn containment_handle(&self) -> &Containment {
        &self.containment
    }

    /// Registers finished sessions loaded from records at start-up, then prunes the oldest
    /// finished beyond the limit (blocking: deletes directories). Returns the pruned ids.
    pub(crate) fn insert_finished(&self, sessions: Vec<Arc<Session>>) -> Vec<String> {
        {
            let mut reg = self.registry();
            for s in sessions {
                reg.sessions.insert(crate::registry::id_number(s.id()), s);
            }
        }
        self.prune_finished()
    }

    /// Registers (or replaces) a session by its id: one another owner runs, or its final state.
    pub(crate) fn put_session(&self, session: Arc<Session>) {
        self.registry().sessions.insert(crate::registry::id_number(session.id()), session);
    }

    /// Reaps this process's zombie children that are no session's root (orphans that landed on
    /// a subreaper or PID 1); returns how many. Each session's root is reaped through its pidfd,
    /// so it is left alone, and nothing is reaped while a spawn is in progress (its root is not
    /// registered yet).
    pub fn reap_orphans(&self) -> usize {
        stockade_proc::reap_zombie_children(|| {
            let reg = self.registry();
            (reg.pending == 0).then(|| reg.sessions.values().map(|s| s.pid()).collect())
        })
    }

    /// Start a command. Returns once it is spawned; wait on the session for its end. A run whose
    /// `source` an active session already has answers with that session.
    pub fn run(&self, spec: RunSpec) -> Result<Arc<Session>, EngineError> {
        self.start(spec).map(|s| s.session)
    }

    /// Start a command, or — when `spec.source` names an active session — answer with that one
    /// (`deduplicated`). Refuses with [`EngineError::LimitReached`] when a limit would be exceeded.
    pub fn start(&self, spec: RunSpec) -> Result<Started, EngineError> {
        let _guards = match self.begin_start(&spec)? {
            crate::starting::Begun::Replay(session) => {
                return Ok(Started { session, deduplicated: false, replayed: true });
            }
            crate::starting::Begun::Go(guards) => guards,
        };
        if let Some(source) = spec.source.as_deref()
            && let Some(session) = self.active_with_source(source)
        {
            return Ok(Started { session, deduplicated: true, replayed: false });
        }
        // Prune before the new session's directory exists, so the finished sessions kept and the
        // directories on disk stay within `max_finished` plus the runs in flight.
        self.prune_finished();
        let session = self.spawn_session(spec)?;
        Ok(Started { session, deduplicated: false, replayed: false })
    }

    /// The session (running or finished, still kept) started with this idempotency key.
    pub fn with_idempotency_key(&self, key: &str) -> Option<Arc<Session>> {
        self.registry().sessions.values().find(|s| s.idempotency_key() == Some(key)).cloned()
    }

    /// The running session started with this `source`, if any.
    pub fn active_with_source(&self, source: &str) -> Option<Arc<Session>> {
        self.registry()
            .sessions
            .values()
            .find(|s| s.source() == Some(source) && !s.state().is_terminal())
            .cloned()
    }

    /// Check the limits and reserve a place for one more running session.
    fn admit(&self, retained_cap: usize, disk_cap: u64) -> Result<Admission<'_>, EngineError> {
        let limits = self.config.limits;
        if disk_cap > limits.max_disk_cap {
            return Err(EngineError::LimitReached(format!(
                "a disk cap of {disk_cap} bytes is above this engine's per-session limit of {} bytes; ask for a smaller disk_cap",
                limits.max_disk_cap
            )));
        }
        let mut reg = self.registry();
        if reg.closed {
            return Err(EngineError::ShuttingDown);
        }
        let mut running = reg.pending;
        let mut tail = reg.pending_tail;
        let mut spooled = 0u64;
        for s in reg.sessions.values() {
            let stats = s.log().stats();
            spooled = spooled.saturating_add(stats.spooled_bytes);
            // Another live process's run counts against its own limits, not this engine's.
            if !s.state().is_terminal() && !s.is_foreign() {
                running += 1;
                tail = tail.saturating_add(stats.hot_tail_bytes);
            } else if !s.is_foreign() {
                // A finished session whose output waits in memory for a full disk.
                tail = tail.saturating_add(stats.hot_tail_bytes);
            }
        }
        if running >= limits.max_running {
            return Err(EngineError::LimitReached(format!(
                "{running} sessions are running, the limit is {}; wait for one to finish or kill one",
                limits.max_running
            )));
        }
        let soft = stockade_proc::fd_budget::nofile_soft();
        if running as u64 >= stockade_proc::fd_budget::running_allowed(soft) {
            return Err(EngineError::LimitReached(format!(
                "{running} sessions are running and each may hold {} file descriptors; the open-file limit (RLIMIT_NOFILE) of {soft} leaves room for no more; raise it (ulimit -n) or wait for a session to finish",
                stockade_proc::fd_budget::FDS_PER_RUNNING_SESSION
            )));
        }
        let wanted = tail.saturating_add(retained_cap as u64);
        if wanted > limits.hot_tail_budget {
            return Err(EngineError::LimitReached(format!(
                "the hot tails of running sessions (kept once a spool stops) and the output of ended sessions still waiting for a full disk could hold {wanted} bytes, the budget is {} bytes; ask for a smaller retained_cap, free disk space or wait for sessions to finish",
                limits.hot_tail_budget
            )));
        }
        if spooled >= limits.disk_budget {
            return Err(EngineError::LimitReached(format!(
                "the spools already hold {spooled} bytes, the disk budget is {} bytes; forget or clean up finished sessions",
                limits.disk_budget
            )));
        }
        reg.pending += 1;
        reg.pending_tail = reg.pending_tail.saturating_add(retained_cap as u64);
        Ok(Admission { engine: self, retained_cap: retained_cap as u64 })
    }

    /// The output settings of a run, with every part of the request checked before anything is
    /// admitted or made.
    fn checked_output(&self, spec: &RunSpec) -> Result<OutputConfig, EngineError> {
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
        crate::run_spec::validate_input(spec)?;
        crate::run_spec::validate_text(spec)?;
        Ok(OutputConfig {
            retained_cap,
            disk_cap: spec.disk_cap.unwrap_or(self.config.disk_cap),
            disk_policy: spec.disk_policy.unwrap_or(self.config.disk_policy),
            capture: spec.capture,
        })
    }

    /// What to spawn for `spec`: its shell with `-c` (or `-lc`), its directory and environment,
    /// and the marker every process of session `id` carries.
    fn spawn_spec(
        &self,
        spec: &RunSpec,
        id: &str,
        (stdout, stderr): (StdioSpec, StdioSpec),
        file_size_limit: Option<u64>,
    ) -> Result<SpawnSpec, EngineError> {
        let stdin = match (&spec.stdin_from, spec.stdin) {
            _ if spec.pty.is_some() => StdioSpec::Null,
            (Some(fd), _) => StdioSpec::Fd(fd.try_clone().map_err(|e| {
                EngineError::Resource(format!("cannot duplicate the caller's stdin: {e}"))
            })?),
            (None, StdinMode::Pipe) => StdioSpec::Pipe,
            (None, StdinMode::Null) => StdioSpec::Null,
        };
        let shell = spec.shell.clone().unwrap_or_else(|| PathBuf::from(DEFAULT_SHELL));
        let flag = if spec.login { "-lc" } else { "-c" };
        Ok(SpawnSpec {
            program: shell.into_os_string(),
            args: vec![flag.into(), spec.command.clone().into()],
            cwd: spec.cwd.clone(),
            base_env: spec
                .base_env
                .as_ref()
                .map(|b| b.iter().map(|(k, v)| (k.into(), v.into())).collect()),
            env: spec.env.iter().map(|(k, v)| (k.into(), v.into())).collect(),
            stdin,
            stdout,
            stderr,
            marker: SessionMarker { instance: self.config.instance.clone(), id: id.to_owned() },
            sandbox: None,
            file_size_limit,
        })
    }

    fn spawn_session(&self, mut spec: RunSpec) -> Result<Arc<Session>, EngineError> {
        // A run that names no directory runs in this process's: name it, so answers, `ps` and
        // `restart` say and reuse where it ran (a remote caller cannot know it otherwise).
        if spec.cwd.is_none() {
            spec.cwd = std::env::current_dir().ok();
        }
        let mut kept = spec.clone();
        let output = self.checked_output(&spec)?;
        let admission = self.admit(output.retained_cap, output.disk_cap)?;
        let id = self.config.state_dir.allocate_id()?;
        let dir = self.instance_dir()?.join(&id);
        // A directory made ahead of time, when one is ready: no inode to wait for.
        let prepared = self.slots.as_ref().and_then(|slots| slots.claim(&dir));
        let file_size_limit = file_size_limit(&output, &spec);
        let log =
            crate::launch::create_log(&dir, output, prepared, spec.idempotency_key.as_deref())?;
        let started = (|| {
            let sandbox = crate::sandbox::resolve(
                &self.config.sandbox,
                &self.hidden_added(),
                self.config.state_dir.root(),
                &spec,
                &dir,
                self.slots.as_ref(),
            )?;
            let (stdout, stderr, merged) = crate::launch::child_stdio(&spec, &log)?;
            let mut spawn_spec = self.spawn_spec(&spec, &id, (stdout, stderr), file_size_limit)?;
            kept.sandbox = sandbox.as_ref().map(|s| s.request.clone());
            kept.sandbox_in_force = sandbox.as_ref().map(|s| s.policy.clone());
            if let Some(s) = sandbox {
                if let Some(tmp) = s.tmpdir {
                    spawn_spec.env.push(("TMPDIR".into(), tmp.into()));
                }
                spawn_spec.sandbox = Some(s.spec);
            }
            let spawned = match spec.pty {
                Some(size) => spawn_pty(spawn_spec, size, &self.containment)?,
                None => spawn(spawn_spec, &self.containment)?,
            };
            Ok::<_, EngineError>((spawned, merged))
        })();
        let (mut spawned, merged) = match started {
            Ok(s) => s,
            Err(e) => {
                // Nothing was started: leave no directory that no record describes.
                drop(log);
                remove_unstarted(&dir);
                return Err(e);
            }
        };
        let (sources, input) = crate::launch::take_streams(&mut spawned, &spec, &id, merged);
        // Every session's pipes are read by the one shared drain thread, straight into the spool.
        // From here on the tree runs: an error ends it through the supervisor and the one
        // terminate routine, never leaves it unsupervised.
        let (drain_handle, failure) = match start_drain_if_any(&log, sources) {
            Ok(handle) => (handle, None),
            Err(why) => (None, Some(why)),
        };
        let session = Session::start(SessionParts {
            id: id.clone(),
            instance: self.config.instance.clone(),
            command: spec.command,
            cwd: spec.cwd,
            source: spec.source,
            idempotency_key: spec.idempotency_key,
            capture: spec.capture,
            dir,
            log,
            tree: Arc::new(spawned.tree),
            drain: drain_handle,
            timeout: spec.timeout,
            grace: spec.grace.unwrap_or(self.config.grace),
            input,
            spec: kept,
            home: self.config.state_dir.clone(),
        });
        let key = crate::registry::id_number(&id);
        self.registry().sessions.insert(key, Arc::clone(&session));
        drop(admission);
        // For `restart` after this daemon is gone (without it only this daemon can restart the
        // session). Written once the command runs, so the file costs the command no time.
        if let Some(spec) = session.spec()
            && let Err(e) = crate::spec_file::store(session.dir(), spec)
        {
            tracing::warn!(%id, error = %e, "could not write the session's start options; a later daemon cannot restart it");
        }
        if let Some(why) = failure {
            let opts = self.terminate_options();
            let reason = format!("not supervised: {why}");
            let s = Arc::clone(&session);
            tokio::spawn(async move { s.kill(opts, &reason).await });
            return Err(EngineError::Resource(format!(
                "{id} was started but could not be supervised ({why}); its processes were terminated. The machine is short of threads or file descriptors: retry later"
            )));
        }
        Ok(session)
    }

    /// The session with this id.
    pub fn session(&self, id: &str) -> Result<Arc<Session>, EngineError> {
        self.registry()
            .sessions
            .get(&crate::registry::id_number(id))
            .cloned()
            .ok_or_else(|| EngineError::NoSuchSession(id.to_owned()))
    }

    /// Every session, oldest first.
    pub fn sessions(&self) -> Vec<Arc<Session>> {
        self.registry().sessions.values().cloned().collect()
    }

    /// Terminate options with this engine's grace.
    pub fn terminate_options(&self) -> TerminateOptions {
        TerminateOptions { grace: self.config.grace, ..TerminateOptions::default() }
    }

    /// Terminate the session (if running), delete its directory (spool, record) and drop it.
    pub async fn forget(&self, id: &str) -> Result<Forgotten, EngineError> {
        let session = self.session(id)?;
        let report = if session.state().is_terminal() {
            None
        } else {
            Some(session.kill(self.terminate_options(), "forgotten").await)
        };
        // A session that was running is final now: `kill` waits for the supervisor to finish.
        drop(session); // the registry's is the one left (its directory may be used again)
        let removed = self.registry().sessions.remove(&crate::registry::id_number(id));
        let removed_bytes = match removed {
            Some(s) => remove_session_dir(s, self.slots.clone()).await,
            None => 0, // a concurrent forget got there first
        };
        Ok(Forgotten { id: id.to_owned(), report, removed_bytes })
    }

    /// Forget every finished session, or every session (terminating the running ones) with
    /// `all`. Returns what was forgotten, oldest first.
    pub async fn cleanup(&self, all: bool) -> Vec<Forgotten> {
        // Another live process's running session is its owner's to end, not ours to delete.
        let targets: Vec<Arc<Session>> = self
            .sessions()
            .into_iter()
            .filter(|s| s.state().is_terminal() || (all && !s.is_foreign()))
            .collect();
        let running: Vec<Arc<Session>> =
            targets.iter().filter(|s| !s.state().is_terminal()).cloned().collect();
        let mut reports = self.kill_all(running, "cleaned up").await;
        let mut forgotten = Vec::with_capacity(targets.len());
        for s in targets {
            let id = s.id().to_owned();
            let report = reports.remove(&id);
            drop(s); // the registry's is the one left (its directory may be used again)
            let removed = self.registry().sessions.remove(&crate::registry::id_number(&id));
            let removed_bytes = match removed {
                Some(s) => remove_session_dir(s, self.slots.clone()).await,
                None => continue,
            };
            forgotten.push(Forgotten { id, report, removed_bytes });
        }
        forgotten
    }

    /// Forget the oldest finished sessions beyond `max_finished`. Never touches a running one.
    pub(crate) fn prune_finished(&self) -> Vec<String> {
        let doomed: Vec<Arc<Session>> = {
            let mut reg = self.registry();
            let finished: Vec<u64> = reg
                .sessions
                .iter()
                .filter(|(_, s)| s.state().is_terminal())
                .map(|(k, _)| *k)
                .collect();
            let excess = finished.len().saturating_sub(self.config.limits.max_finished);
            // A session whose end is still being written (just after its answer; only the
            // newest can be) is pruned by a later start, not now: its directory is in use.
            let settled = |k: &&u64| reg.sessions.get(*k).is_some_and(|s| s.is_settled());
            let doomed: Vec<u64> = finished[..excess].iter().filter(settled).copied().collect();
            doomed.iter().filter_map(|k| reg.sessions.remove(k)).collect()
        };
        let ids = doomed.iter().map(|s| s.id().to_owned()).collect();
        for s in doomed {
            if let Err(e) = discard_dir(s, self.slots.as_deref()) {
                tracing::warn!(error = %e, "could not delete a pruned session's directory");
            }
        }
        ids
    }

    /// Output and memory accounting over every session kept.
    pub fn stats(&self) -> EngineStats {
        let mut stats = EngineStats {
            process_scans: stockade_proc::censuses_taken(),
            ..EngineStats::default()
        };
        for s in self.sessions() {
            let log = s.log().stats();
            stats.hot_tail_bytes += s.log().held_bytes() as u64;
            stats.spooled_bytes += log.spooled_bytes;
            stats.dropped_bytes += log.dropped_bytes;
            stats.output_bytes += log.total_bytes;
            *stats.sessions.entry(s.state().name().to_owned()).or_default() += 1;
        }
        stats
    }

    /// The running sessions this engine started (not another live process's runs it shows).
    pub fn running_own(&self) -> Vec<Arc<Session>> {
        self.sessions()
            .into_iter()
            .filter(|s| !s.state().is_terminal() && !s.is_foreign())
            .collect()
    }

    /// Writes what a full disk kept from being written: output that waits in memory (a spool
    /// a full disk stopped continues from where it stopped), then the records (and
    /// `log.json`); returns how many records are still not written.
    pub async fn retry_records(&self) -> usize {
        let held: Vec<Arc<Session>> =
            self.sessions().into_iter().filter(|s| s.held_back()).collect();
        if held.is_empty() {
            return 0;
        }
        tokio::task::spawn_blocking(move || held.iter().filter(|s| !s.retry_held_back()).count())
            .await
            .unwrap_or(0)
    }

    /// Terminate every running session (shutdown) through the one routine, concurrently, and
    /// start nothing new from now on. Runs whose spawn was in progress are waited for and
    /// terminated too.
    pub async fn shutdown(&self) {
        self.registry().closed = true;
        if let Some(slots) = &self.slots {
            slots.close();
        }
        loop {
            let running = self.running_own();
            let pending = self.registry().pending;
            if running.is_empty() && pending == 0 {
                return;
            }
            self.kill_all(running, "engine shut down").await;
            if pending > 0 {
                tokio::time::sleep(SHUTDOWN_RESCAN).await;
            }
        }
    }

    /// Terminate these sessions concurrently; their reports by id.
    async fn kill_all(
        &self,
        sessions: Vec<Arc<Session>>,
        reason: &str,
    ) -> BTreeMap<String, TerminateReport> {
        let ids: Vec<String> = sessions.iter().map(|s| s.id().to_owned()).collect();
        let reports = self.kill_many(sessions, self.terminate_options(), reason).await;
        ids.into_iter().zip(reports).filter_map(|(id, r)| Some((id, r?))).collect()
    }

    /// Terminate these sessions together — every tree signalled first, one grace, one `/proc`
    /// census per round for all of them — each finalised by its own supervisor as by
    /// [`Session::kill`]; their reports in the order given (`None` where the task ending one
    /// failed).
    pub async fn kill_many(
        &self,
        sessions: Vec<Arc<Session>>,
        opts: TerminateOptions,
        reason: &str,
    ) -> Vec<Option<TerminateReport>> {
        let mut reports: Vec<Option<TerminateReport>> = vec![None; sessions.len()];
        let batch = TerminateBatch::new(sessions.len(), opts.clone());
        let mut kills = tokio::task::JoinSet::new();
        for (i, session) in sessions.into_iter().enumerate() {
            let opts = opts.clone();
            let batch = batch.clone();
            let reason = reason.to_owned();
            kills.spawn(async move { (i, session.kill_in(opts, Some(batch), &reason).await) });
        }
        drop(batch);
        while let Some(done) = kills.join_next().await {
            if let Ok((i, report)) = done {
                reports[i] = Some(report);
            }
        }
        reports
    }
}

impl Drop for Engine {
    /// The directories made ahead of time go with the engine.
    fn drop(&mut self) {
        if let Some(slots) = &self.slots {
            slots.close();
        }
    }
}

/// How long a forgotten session's end may still take before its directory is deleted anyway.
const SETTLE_LIMIT: Duration = Duration::from_secs(2);

/// Delete a forgotten session's directory; the spool bytes it held.
async fn remove_session_dir(session: Arc<Session>, slots: Option<Arc<Slots>>) -> u64 {
    // A session forgotten right after its answer may still be writing `log.json`.
    session.wait_settled(SETTLE_LIMIT).await;
    let bytes = session.log().stats().spooled_bytes;
    let id = session.id().to_owned();
    let removed = tokio::task::spawn_blocking(move || discard_dir(session, slots.as_deref())).await;
    match removed {
        Ok(Ok(())) => bytes,
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::NotFound => bytes,
        Ok(Err(e)) => {
            tracing::warn!(%id, error = %e, "could not delete a forgotten session's directory");
            0
        }
        Err(_) => 0,
    }
}

/// Deletes the directory of a session the engine forgot, or hands it to `slots` to be used
/// again when nothing else holds the session (no reader has its files open through it) and it
/// is this engine's own. Blocking.
fn discard_dir(session: Arc<Session>, slots: Option<&Slots>) -> std::io::Result<()> {
    let dir = session.dir().to_path_buf();
    let alone = Arc::strong_count(&session) == 1 && Arc::strong_count(session.log()) == 1;
    let reuse = alone && !session.is_foreign() && session.state().is_terminal();
    // Its private temporary directory can be used again only when nothing of it can still
    // write there: a cgroup (which a sandboxed command cannot leave) verified empty.
    // (An end with no cleanup report signalled nothing and verified everything gone.)
    let tmp_unreachable = session.tree().method() == stockade_proto::ContainmentMethod::Cgroup
        && session.end().is_some_and(|end| end.cleanup.is_none_or(|report| report.terminated));
    drop(session);
    if reuse && slots.is_some_and(|slots| slots.recycle(&dir, tmp_unreachable)) {
        return Ok(());
    }
    std::fs::remove_dir_all(&dir)
        .map_err(|e| std::io::Error::new(e.kind(), format!("cannot delete {}: {e}", dir.display())))
}

/// File capture: the command writes its spool itself, so the disk cap is held by the kernel's
/// file-size limit on the tree, not at the next poll (which a fast writer outruns by hundreds
/// of megabytes). A PTY session is read through its terminal, never into a file.
fn file_size_limit(output: &OutputConfig, spec: &RunSpec) -> Option<u64> {
    (output.capture == Capture::File && spec.pty.is_none()).then_some(output.disk_cap)
}
