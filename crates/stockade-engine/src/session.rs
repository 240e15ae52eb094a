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

// A session's record, and a session made from one (recovery).
mod records;

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
}

/// In file capture the disk cap is the tree's file-size limit: a root that died of `SIGXFSZ`
/// (or whose shell reported it, 153) once the spool reached the cap ends `killed: disk cap`, as
/// a piped session stopped at its cap does.
fn disk_cap_end(session: &Session, state: SessionState) -> SessionState {
    if session.capture != Capture::File {
        return state;
    }
    sync_file_capture(session);
    let at_cap = session.log.cap_reached().is_some_and(|hit| hit.reason == REASON_DISK_CAP);
    match state {
        SessionState::Signaled { signal: libc::SIGXFSZ }
        | SessionState::Exited { code: 153 /* 128 + SIGXFSZ */ }
            if at_cap =>
        {
            SessionState::Killed { reason: REASON_DISK_CAP.into() }
        }
        state => state,
    }
}

pub(crate) fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

/// A session whose root died of `SIGKILL` (or whose shell reported it, 137) after the kernel's
/// OOM killer acted on its memory limit ends `killed: memory limit 256 MiB`, not as if someone
/// had killed it.
fn memory_limit_end(session: &Session, state: SessionState) -> SessionState {
    let hit = session.tree.limits().and_then(stockade_proc::LimitGroup::memory_limit_hit);
    match (state, hit) {
        (
            SessionState::Signaled { signal: libc::SIGKILL } | SessionState::Exited { code: 137 },
            Some(limit),
        ) => SessionState::Killed {
            reason: format!("memory limit {}", stockade_proto::sandbox::human_bytes(limit)),
        },
        (state, _) => state,
    }
}

/// How long the end of a command waits for its keeper to exit by itself (it does at once when
/// the command left nothing running) before the cleanup starts.
const KEEPER_EXIT_WAIT: Duration = Duration::from_millis(100);

struct Supervisor {
    session: Arc<Session>,
    kill_rx: mpsc::Receiver<KillRequest>,
    drain: Option<stockade_log::DrainHandle>,
    timeout: Option<Duration>,
    grace: Duration,
}

impl Supervisor {
    async fn run(mut self) {
        let session = Arc::clone(&self.session);
        let ending = self.wait_for_ending().await;
        let default_opts = TerminateOptions { grace: self.grace, ..TerminateOptions::default() };
        // Whatever ended the session, the one terminate routine runs over the tree, so nothing
        // it started outlives it.
        let (state, report, reply) = match ending {
            Ending::Root { code, signal } => {
                // A keeper that has nothing left to wait for exits right after the command:
                // reaped first, the end of a command that left nothing behind needs no census
                // (with a cgroup). One that stays keeps the orphans the cleanup ends.
                if session.tree.has_keeper() {
                    let _ = tokio::time::timeout(KEEPER_EXIT_WAIT, session.tree.wait_root()).await;
                }
                let report = session.tree.finish_after_exit(&default_opts).await;
                let state = match (code, signal) {
                    (_, Some(signal)) => SessionState::Signaled { signal },
                    (Some(code), None) => SessionState::Exited { code },
                    (None, None) => SessionState::Failed { reason: "exit status unknown".into() },
                };
                (disk_cap_end(&session, memory_limit_end(&session, state)), report, None)
            }
            Ending::Timeout => {
                let report = session.tree.terminate(&default_opts).await;
                (SessionState::TimedOut, report, None)
            }
            Ending::DiskCap(reason) => {
                let report = session.tree.terminate(&default_opts).await;
                (SessionState::Killed { reason }, report, None)
            }
            Ending::Kill(req) => {
                let report = match &req.batch {
                    Some(batch) => batch.terminate(Arc::clone(&session.tree)).await,
                    None => stockade_proc::terminate_one(&session.tree, &req.opts).await,
                };
                (SessionState::Killed { reason: req.reason }, report, Some(req.reply))
            }
        };
        // The root (the keeper, with one) is gone now, or about to be: reap it.
        let _ = tokio::time::timeout(Duration::from_millis(500), session.tree.wait_root()).await;
        self.finish_drain().await;
        let cleanup =
            (!report.pids_signalled.is_empty() || !report.terminated).then(|| report.clone());
        session.finalize(SessionEnd { state, wall_time: session.started.elapsed(), cleanup }).await;
        if let Some(input) = &session.input {
            input.release(); // a finished session holds no descriptor
        }
        session.tree.release_root_fd();
        if let Some(reply) = reply {
            let _ = reply.send(report);
        }
        // Answer kill requests that raced with the end through the same routine.
        while let Ok(req) = self.kill_rx.try_recv() {
            let _ = req.reply.send(session.tree.terminate(&req.opts).await);
        }
    }

    async fn wait_for_ending(&mut self) -> Ending {
        let session = Arc::clone(&self.session);
        let deadline = self.timeout.map(|t| tokio::time::Instant::now() + t);
        let timeout = async {
            match deadline {
                Some(d) => tokio::time::sleep_until(d).await,
                None => std::future::pending().await,
            }
        };
        let cap_watch = async {
            // In `file` capture the command writes the spool itself: look at it every
            // `LOG_POLL_INTERVAL`. Otherwise the drain's writes publish the log's progress: wait
            // for the spool to stop, so a thousand quiet sessions cost no wake-ups.
            let mut tick = tokio::time::interval(LOG_POLL_INTERVAL);
            let mut progress = session.log.subscribe();
            loop {
                if session.capture == Capture::File {
                    tick.tick().await;
                    sync_file_capture(&session);
                } else if progress.wait_for(|p| p.cap_reached).await.is_err() {
                    // The log is gone (cannot be while the session holds it): stop watching.
                    std::future::pending::<()>().await;
                }
                // The kill policy is for the session's own disk cap. A full disk (or a failing
                // spool) is the machine's condition, not the command's: the command goes on,
                // its bytes are dropped in a gap and its newest kept in memory.
                if let Some(hit) = session.log.cap_reached()
                    && hit.policy == DiskPolicy::Kill
                    && hit.reason == REASON_DISK_CAP
                    // A root that already ended on its own ended the session: that is its true
                    // end, which the root's branch reports on its next poll.
                    && !session.tree.command_ended()
                {
                    return hit.reason;
                }
                // A stop not to act on (a full disk, another policy): look again at the log's
                // next change, not at once.
                if session.capture != Capture::File && progress.changed().await.is_err() {
                    std::future::pending::<()>().await;
                }
            }
        };
        tokio::select! {
            exit = session.tree.wait_command() => match exit {
                Ok(exit) => Ending::Root { code: exit.code, signal: exit.signal },
                Err(e) => {
                    tracing::warn!(id = %session.id, error = %e, "cannot wait for the root process");
                    Ending::Root { code: None, signal: None }
                }
            },
            () = timeout => Ending::Timeout,
            Some(req) = self.kill_rx.recv() => Ending::Kill(req),
            reason = cap_watch => Ending::DiskCap(reason),
        }
    }

    /// Let the drain reach EOF; cancel it if a writer nobody could kill still holds a pipe.
    async fn finish_drain(&mut self) {
        let Some(handle) = self.drain.take() else { return };
        let _ = tokio::time::timeout(DRAIN_GRACE, handle.finished()).await;
        if handle.is_finished() {
            // Ended: `join` only takes the outcome.
            let _ = handle.join();
            return;
        }
        tracing::warn!(id = %self.session.id, "output pipe still held open after terminate; stopped reading it");
        handle.cancel();
        let _ = tokio::task::spawn_blocking(move || handle.join()).await;
    }
}

/// In `file` capture the child writes the spool itself; take notice of what it wrote.
fn sync_file_capture(session: &Session) {
    if let Err(e) = session.log.sync_from_file() {
        tracing::warn!(id = %session.id, error = %e, "cannot follow the spool file");
    }
}
