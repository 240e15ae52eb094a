//! A session: one command's process tree, its output log, and a state machine whose terminal
//! states never change.
//!
//! Each session has one *supervisor* task, the only code that ends it. The supervisor waits for
//! the first of: the root process exiting, the timeout, a kill request, or the disk cap's `kill`
//! policy. Whatever ended it, the supervisor then runs the one terminate routine over the tree
//! (so a `&` child or a grandchild holding the pipe never outlives the session), lets the drain
//! reach EOF (cancelling it after [`DRAIN_GRACE`] if an unkillable writer still holds a pipe),
//! finishes the log, writes the record and publishes the terminal state — exactly once, on every
//! path.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use stockade_proto::rpc::PtySize;
use stockade_proto::{Capture, DiskPolicy, SessionState, TerminateReport};
use tokio::sync::{mpsc, oneshot, watch};

use crate::input::{InputRefused, SessionInput};
use crate::registry::{self, Owner, RECORD_VERSION, RecordTotals, SessionRecord};
use stockade_log::Spare;
use stockade_log::{LaterMeta, OutputLog, REASON_DISK_CAP};
use stockade_proc::{ProcessTree, TerminateBatch, TerminateOptions};

mod supervisor;
use supervisor::{Supervisor, sync_file_capture};

/// How long the drain may keep reading after the tree is verified gone before it is cancelled.
/// Only a writer the terminate routine could not find (it reports survivors) can hold the pipe
/// that long; the reader must never hang on it (cf. codex's `IO_DRAIN_TIMEOUT_MS`).
pub(crate) const DRAIN_GRACE: Duration = Duration::from_millis(2_000);
/// How often the supervisor looks at the log for the disk cap (and, in `file` capture, at the
/// spool's size).
pub(crate) const LOG_POLL_INTERVAL: Duration = Duration::from_millis(100);
/// How a session ended, beyond its state.
#[derive(Debug, Clone)]
pub struct SessionEnd {
    /// The terminal state.
    pub state: SessionState,
    /// Wall time from spawn to the end.
    pub wall_time: Duration,
    /// The terminate report for whatever was left (or killed) when it ended.
    pub cleanup: Option<TerminateReport>,
}

/// A request to the supervisor to end the session.
struct KillRequest {
    opts: TerminateOptions,
    reason: String,
    reply: oneshot::Sender<TerminateReport>,
    /// Ends the tree together with the other sessions of a bulk kill (shared grace and census).
    batch: Option<TerminateBatch>,
}

/// Why the supervisor stopped waiting.
enum Ending {
    Root { code: Option<i32>, signal: Option<i32> },
    Timeout,
    Kill(KillRequest),
    DiskCap(String),
}

/// One running or finished command.
pub struct Session {
    id: String,
    instance: String,
    command: String,
    cwd: Option<PathBuf>,
    source: Option<String>,
    idempotency_key: Option<String>,
    capture: Capture,
    started_at: SystemTime,
    started: Instant,
    log: Arc<OutputLog>,
    tree: Arc<ProcessTree>,
    state: watch::Sender<SessionState>,
    end: Mutex<Option<SessionEnd>>,
    kill_tx: mpsc::Sender<KillRequest>,
    dir: PathBuf,
    /// The stdin pipe or terminal, when the session takes input.
    input: Option<SessionInput>,
    /// The process whose engine started it (this one, unless recovered from a record).
    owner: Option<Owner>,
    /// Its record (or `log.json`) could not be written (a full disk): the engine retries.
    record_pending: AtomicBool,
    /// Everything of its end is done (`log.json` and the cgroup removal come after the terminal
    /// state is published): from here on nothing but a reader touches its directory.
    settled: watch::Sender<bool>,
    /// Started by this engine (not loaded from another process's record).
    own: bool,
    /// What it was started with (`None` when recovered from a record, which keeps no
    /// environment or options): what `restart` starts again.
    spec: Option<crate::RunSpec>,
    /// The state directory this engine checked and holds (`None` when recovered from a record):
    /// its end is written only while the path still leads there.
    home: Option<crate::StateDir>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session").field("id", &self.id).field("command", &self.command).finish()
    }
}

/// What the engine hands [`Session::start`].
pub(crate) struct SessionParts {
    pub id: String,
    pub instance: String,
    pub command: String,
    pub cwd: Option<PathBuf>,
    pub source: Option<String>,
    pub idempotency_key: Option<String>,
    pub capture: Capture,
    pub dir: PathBuf,
    pub log: Arc<OutputLog>,
    pub tree: Arc<ProcessTree>,
    pub drain: Option<stockade_log::DrainHandle>,
    pub timeout: Option<Duration>,
    pub grace: Duration,
    pub input: Option<SessionInput>,
    pub spec: crate::RunSpec,
    pub home: crate::StateDir,
}

impl Session {
    /// Start supervising a freshly spawned tree. Must be called inside a tokio runtime.
    pub(crate) fn start(parts: SessionParts) -> Arc<Session> {
        let (kill_tx, kill_rx) = mpsc::channel(4);
        let (state, _) = watch::channel(SessionState::Running);
        let session = Arc::new(Session {
            id: parts.id,
            instance: parts.instance,
            command: parts.command,
            cwd: parts.cwd,
            source: parts.source,
            idempotency_key: parts.idempotency_key,
            capture: parts.capture,
            started_at: SystemTime::now(),
            started: Instant::now(),
            log: parts.log,
            tree: parts.tree,
            state,
            end: Mutex::new(None),
            kill_tx,
            dir: parts.dir,
            input: parts.input,
            owner: Owner::current(),
            record_pending: AtomicBool::new(false),
            settled: watch::Sender::new(false),
            own: true,
            spec: Some(parts.spec),
            home: Some(parts.home),
        });
        session.write_record(None);
        let supervisor = Supervisor {
            session: Arc::clone(&session),
            kill_rx,
            drain: parts.drain,
            timeout: parts.timeout,
            grace: parts.grace,
        };
        tokio::spawn(supervisor.run());
        session
    }

    /// What the session was started with; `None` for a session recovered from a record (its
    /// environment and options were not kept).
    pub fn spec(&self) -> Option<&crate::RunSpec> {
        self.spec.as_ref()
    }

    /// The session id (`sh-N`).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The shell command it runs.
    pub fn command(&self) -> &str {
        &self.command
    }

    /// The directory it runs in (`None` only for a session of an older Stockade started
    /// without one).
    pub fn cwd(&self) -> Option<&std::path::Path> {
        self.cwd.as_deref()
    }

    /// The dedup key, if any.
    pub fn source(&self) -> Option<&str> {
        self.source.as_deref()
    }

    /// The idempotency key it was started with.
    pub fn idempotency_key(&self) -> Option<&str> {
        self.idempotency_key.as_deref()
    }

    /// Root pid.
    pub fn pid(&self) -> u32 {
        self.tree.root_pid()
    }

    /// The output log.
    pub fn log(&self) -> &Arc<OutputLog> {
        &self.log
    }

    /// The process tree.
    pub fn tree(&self) -> &Arc<ProcessTree> {
        &self.tree
    }

    /// The session directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// When it started.
    pub fn started_at(&self) -> SystemTime {
        self.started_at
    }

    /// The current state.
    pub fn state(&self) -> SessionState {
        self.state.borrow().clone()
    }

    /// How it ended, once it has.
    pub fn end(&self) -> Option<SessionEnd> {
        self.end.lock().map(|e| e.clone()).unwrap_or_else(|p| p.into_inner().clone())
    }

    /// Wall time so far (or until the end).
    pub fn wall_time(&self) -> Duration {
        self.end().map(|e| e.wall_time).unwrap_or_else(|| self.started.elapsed())
    }

    /// Wait until the session reaches a terminal state or `timeout` passes; returns the state.
    pub async fn wait(&self, timeout: Option<Duration>) -> SessionState {
        let mut rx = self.state.subscribe();
        let done = rx.wait_for(SessionState::is_terminal);
        match timeout {
            None => {
                let _ = done.await;
            }
            Some(t) => {
                let _ = tokio::time::timeout(t, done).await;
            }
        }
        self.state()
    }

    /// Terminate the session's tree (if it is still running) through the one terminate routine,
    /// and wait for the session to be finalised. On a finished session this verifies that nothing
    /// of it remains and reports what it found.
    pub async fn kill(&self, opts: TerminateOptions, reason: &str) -> TerminateReport {
        self.kill_in(opts, None, reason).await
    }

    /// [`Self::kill`], the tree ended in `batch` with other sessions' when one is given.
    pub async fn kill_in(
        &self,
        opts: TerminateOptions,
        batch: Option<TerminateBatch>,
        reason: &str,
    ) -> TerminateReport {
        let (reply, rx) = oneshot::channel();
        let request = KillRequest { opts: opts.clone(), reason: reason.to_owned(), reply, batch };
        if self.kill_tx.send(request).await.is_ok()
            && let Ok(report) = rx.await
        {
            self.wait(None).await;
            return report;
        }
        // The supervisor has already finished: verify, through the same routine, that the
        // tree is gone (it answers at once when it is).
        self.tree.terminate(&opts).await
    }

    /// The terminal's size, for a PTY session (kept after it ends, for rendering).
    pub fn pty_size(&self) -> Option<PtySize> {
        self.input.as_ref().and_then(SessionInput::size)
    }

    /// Whether `write` can reach the command now: it has a terminal or an open stdin pipe, and
    /// it is still running.
    pub fn stdin_open(&self) -> bool {
        self.input.as_ref().is_some_and(SessionInput::is_open) && !self.state().is_terminal()
    }

    /// Send `bytes` to the command's stdin pipe or terminal, waiting at most `timeout` for it to
    /// take them. Writes to one session are serialised.
    pub async fn write_input(&self, bytes: Vec<u8>, timeout: Duration) -> Result<(), InputRefused> {
        let input = self.input_or_refuse()?;
        input.write(&self.id, bytes, timeout, || self.ended_state()).await
    }

    /// End of input: closes a stdin pipe, types the end-of-file character on a terminal.
    pub async fn close_stdin(&self, timeout: Duration) -> Result<(), InputRefused> {
        let input = self.input_or_refuse()?;
        input.close(&self.id, timeout, || self.ended_state()).await
    }

    /// Resize the terminal of a PTY session (the foreground job gets `SIGWINCH`).
    pub fn resize(&self, size: PtySize) -> Result<(), InputRefused> {
        match &self.input {
            Some(input) => input.resize(&self.id, size, || self.ended_state()),
            None => Err(InputRefused::NotPty { id: self.id.clone() }),
        }
    }

    fn input_or_refuse(&self) -> Result<&SessionInput, InputRefused> {
        self.input.as_ref().ok_or_else(|| InputRefused::NoInput { id: self.id.clone() })
    }

    /// The state's name once terminal.
    fn ended_state(&self) -> Option<String> {
        let state = self.state();
        state.is_terminal().then(|| state.name().to_owned())
    }

    /// The record as it stands now (with the terminal state as soon as it is decided, even
    /// before it is published).
    pub fn record(&self) -> SessionRecord {
        let end = self.end();
        let stats = self.log.stats();
        SessionRecord {
            version: RECORD_VERSION,
            id: self.id.clone(),
            instance: self.instance.clone(),
            command: self.command.clone(),
            cwd: self.cwd.clone(),
            state: end.as_ref().map_or_else(|| self.state(), |e| e.state.clone()),
            owner: self.owner,
            pid: self.tree.root_pid(),
            root_start_time: self.tree.root_start_time(),
            pgid: self.tree.pgid(),
            containment: self.tree.method(),
            cgroup: self.tree.cgroup().map(Path::to_path_buf),
            capture: self.capture,
            spool_path: self.log.spool_path().to_path_buf(),
            started_at_ms: unix_ms(self.started_at),
            finished_at_ms: end.as_ref().map(|e| unix_ms(self.started_at + e.wall_time)),
            source: self.source.clone(),
            idempotency_key: self.idempotency_key.clone(),
            cleanup: end.and_then(|e| e.cleanup),
            totals: Some(RecordTotals {
                total_bytes: stats.total_bytes,
                total_lines: stats.total_lines,
                spooled_bytes: stats.spooled_bytes,
                dropped_bytes: stats.dropped_bytes,
                gaps: stats.gaps,
            }),
        }
    }

    /// Whether the state directory's path no longer leads to the one this engine checked (see
    /// `StateDir::check`): its files are then held back (retried while the daemon watches), so
    /// nothing is written by path into a directory put in its place. Said in the log when
    /// `say` (the end; the retry every second asks without a word).
    fn home_replaced(&self, say: bool) -> bool {
        let Some(Err(e)) = self.home.as_ref().map(crate::StateDir::check) else { return false };
        if say {
            tracing::error!(id = %self.id, "{e}; its end record is held back");
        }
        true
    }

    /// Persist the start record atomically and durably (see [`crate::registry`]).
    fn write_record(&self, _end: Option<&SessionEnd>) {
        let record = self.record();
        if let Err(e) = registry::store_via(&self.dir, &record, Some(Spare::Start)) {
            self.record_pending.store(true, Ordering::Relaxed);
            tracing::warn!(id = %self.id, error = %e, "could not write the session record; will retry");
        }
    }

    /// The end up to its record, in the order a crash may interrupt it: the output log
    /// finished, the end record written. What nobody waits for is returned for
    /// [`Self::after_end`]: `log.json` when the spool alone rebuilds it exactly
    /// (`OutputLog::finish_but_meta`; written here, before the record, otherwise). Blocking.
    fn write_end(&self, end: SessionEnd) -> Option<LaterMeta> {
        if self.capture == Capture::File {
            sync_file_capture(self);
        }
        let later = self.log.finish_but_meta().unwrap_or_else(|e| {
            self.record_pending.store(true, Ordering::Relaxed);
            tracing::warn!(id = %self.id, error = %e, "could not finish the output log");
            None
        });
        *self.end.lock().unwrap_or_else(|p| p.into_inner()) = Some(end);
        if self.home_replaced(true) {
            self.record_pending.store(true, Ordering::Relaxed);
        } else if let Err(e) = registry::store_via(&self.dir, &self.record(), Some(Spare::End)) {
            self.record_pending.store(true, Ordering::Relaxed);
            tracing::warn!(id = %self.id, error = %e, "could not write the final session record; will retry");
        }
        later
    }

    /// The end after its state is published: `log.json` (when [`Self::write_end`] left it) and
    /// the removal of the session's empty cgroup. Blocking.
    fn after_end(&self, later: Option<LaterMeta>) {
        if later.is_some() && self.home_replaced(true) {
            self.record_pending.store(true, Ordering::Relaxed);
        } else if let Some(later) = later
            && let Err(e) = later.write(&self.log)
        {
            self.record_pending.store(true, Ordering::Relaxed);
            tracing::warn!(id = %self.id, error = %e, "could not write log.json; will retry");
        }
        self.tree.remove_cgroup();
    }

    /// Shows the terminal `state` to every waiter. Terminal states are terminal:
    /// `send_if_modified` refuses to leave one.
    fn publish(&self, state: SessionState) {
        self.state.send_if_modified(|s| {
            if s.is_terminal() {
                false
            } else {
                *s = state;
                true
            }
        });
    }

    /// Whether another process owns it (a foreground `stockade run`, or a dead owner's
    /// session loaded from its record): this engine shows it but does not run it.
    pub(crate) fn is_foreign(&self) -> bool {
        !self.own
    }

    /// Whether its record or `log.json` still waits to be written (a full disk).
    pub(crate) fn record_pending(&self) -> bool {
        self.record_pending.load(Ordering::Relaxed)
    }

    /// Whether a full disk holds back its output (waiting in memory), its record or `log.json`.
    pub(crate) fn held_back(&self) -> bool {
        self.record_pending() || self.log.has_pending()
    }

    /// Writes what a full disk held back: the output waiting in memory (the spool continues
    /// where it stopped), then the record and `log.json`; `true` once the record is on disk.
    /// Blocking.
    pub(crate) fn retry_held_back(&self) -> bool {
        self.log.flush_pending();
        !self.record_pending() || self.retry_record()
    }

    /// Writes the record (and, once finished, `log.json`) again; `true` once both are on disk.
    /// Blocking.
    pub(crate) fn retry_record(&self) -> bool {
        if self.home_replaced(false) {
            return false;
        }
        if self.state().is_terminal()
            && let Err(e) = self.log.rewrite_meta()
        {
            tracing::debug!(id = %self.id, error = %e, "log.json still cannot be written");
            return false;
        }
        match registry::store(&self.dir, &self.record()) {
            Ok(()) => {
                self.record_pending.store(false, Ordering::Relaxed);
                tracing::info!(id = %self.id, "wrote the session record a full disk had held back");
                true
            }
            Err(_) => false,
        }
    }

    /// Finish the output log and publish the terminal state, exactly once: the end record
    /// first ([`Self::write_end`]; a crash after a client saw the end never shows the session as
    /// running), then the state, then what nobody waits for ([`Self::after_end`]) — after a
    /// yield, so the waiter this wakes (the client's `run`) answers on this worker first rather
    /// than wait for another thread to pick it up. Blocking work goes through
    /// [`crate::blocking::run`].
    async fn finalize(self: &Arc<Self>, end: SessionEnd) {
        if self.end.lock().unwrap_or_else(|p| p.into_inner()).is_some() {
            return;
        }
        let (me, ended) = (Arc::clone(self), end.clone());
        let later = match crate::blocking::run(move || me.write_end(ended)).await {
            Ok(later) => later,
            // The blocking pool is shutting down (the task never ran) or the task failed
            // half-way: finish here.
            Err(_) if self.end.lock().unwrap_or_else(|p| p.into_inner()).is_none() => {
                self.write_end(end.clone())
            }
            Err(_) => None,
        };
        self.publish(end.state);
        tokio::task::yield_now().await;
        let me = Arc::clone(self);
        if crate::blocking::run(move || me.after_end(later)).await.is_err() {
            self.tree.remove_cgroup();
        }
        self.settled.send_replace(true);
    }

    /// Whether everything of its end is done (see [`Self::wait_settled`]); a session that has not
    /// ended is not.
    pub(crate) fn is_settled(&self) -> bool {
        *self.settled.borrow()
    }

    /// Waits (at most `limit`) until everything of its end is done: after the terminal state is
    /// published the end still writes `log.json` and removes the cgroup, so whoever deletes or
    /// reuses the directory waits for that.
    pub(crate) async fn wait_settled(&self, limit: Duration) {
        let mut rx = self.settled.subscribe();
        let _ = tokio::time::timeout(limit, rx.wait_for(|settled| *settled)).await;
    }

    /// A session loaded from its record: a finished one (crash recovery, a previous daemon's or
    /// a foreground run's), readable by id and never running again, or one another live
    /// process runs (a foreground `stockade run`), shown as running until its record says
    /// otherwise. It has no supervisor here; `kill` on it goes through the same terminate
    /// routine (and on a finished one only verifies that nothing of it is left).
    pub(crate) fn recovered(
        record: SessionRecord,
        dir: PathBuf,
        log: Arc<OutputLog>,
        tree: Arc<ProcessTree>,
    ) -> Arc<Session> {
        let (kill_tx, _) = mpsc::channel(1);
        // Written at start by the daemon that ran it (`spec_file`); `restart` needs it.
        let spec = crate::spec_file::load(&dir);
        let (state, _) = watch::channel(record.state.clone());
        let finished_ms = record.finished_at_ms.unwrap_or(record.started_at_ms);
        let wall_time = Duration::from_millis(finished_ms.saturating_sub(record.started_at_ms));
        let running_for =
            Duration::from_millis(unix_ms(SystemTime::now()).saturating_sub(record.started_at_ms));
        let started = Instant::now().checked_sub(running_for).unwrap_or_else(Instant::now);
        let terminal = record.state.is_terminal();
        let end = SessionEnd { state: record.state, wall_time, cleanup: record.cleanup };
        let end = terminal.then_some(end);
        Arc::new(Session {
            id: record.id,
            instance: record.instance,
            command: record.command,
            cwd: record.cwd,
            source: record.source,
            idempotency_key: record.idempotency_key,
            capture: record.capture,
            started_at: UNIX_EPOCH + Duration::from_millis(record.started_at_ms),
            started,
            log,
            tree,
            state,
            end: Mutex::new(end),
            kill_tx,
            dir,
            input: None,
            owner: record.owner,
            record_pending: AtomicBool::new(false),
            settled: watch::Sender::new(true),
            own: false,
            spec,
            home: None,
        })
    }
}

pub(crate) fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}
