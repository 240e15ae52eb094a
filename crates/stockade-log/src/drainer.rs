//! The shared drain: one thread and one small buffer read the pipes (and PTY masters) of every
//! running session straight into their spools.
//!
//! A thousand live sessions then cost a thousand epoll registrations, not a thousand threads with
//! a buffer each: a session's memory is its bookkeeping here (a few hundred bytes), whatever it
//! prints. The thread waits in `epoll_wait` (level-triggered) over every source and does one read
//! per ready source per round, so a chatty session cannot starve a quiet one and the arrival
//! order of one session's stdout and stderr is what the kernel shows (as with `poll`).
//!
//! [`Drainer::add`] hands a session's sources over and answers a [`DrainHandle`]: whether the
//! drain reached end of file on every source, its [`DrainSummary`], and a cancel that takes what
//! is immediately readable and stops (for a writer nobody could kill). Commands reach the thread
//! through a queue and one eventfd, so adding or cancelling never blocks on the drain itself.

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use rustix::event::EventfdFlags;
use rustix::event::epoll::{self, CreateFlags, Event, EventData, EventFlags};
use rustix::io::Errno;
use stockade_proto::Stream;
use tokio::sync::watch;

use super::drain::{DRAIN_BUF_BYTES, Read, prepare_source, read_once};
use super::{DrainSummary, OutputError, OutputLog, lock};

/// Events taken per `epoll_wait`.
const EVENTS_PER_WAIT: usize = 256;
/// Token of the wake-up eventfd (source tokens start at 1).
const WAKE_TOKEN: u64 = 0;

/// How one drain ended.
type Outcome = Result<DrainSummary, OutputError>;

/// The end of one session's drain, published by the drain thread.
#[derive(Debug)]
struct Done {
    outcome: Mutex<Option<Outcome>>,
    cv: Condvar,
    /// The same fact for async waiters.
    ended: watch::Sender<bool>,
}

impl Done {
    fn new() -> Done {
        Done { outcome: Mutex::new(None), cv: Condvar::new(), ended: watch::Sender::new(false) }
    }

    fn set(&self, outcome: Outcome) {
        *lock(&self.outcome) = Some(outcome);
        self.cv.notify_all();
        self.ended.send_replace(true);
    }
}

/// One session's drain on the shared thread.
#[derive(Debug)]
pub struct DrainHandle {
    key: u64,
    done: Arc<Done>,
    drainer: Drainer,
}

impl DrainHandle {
    /// Every source reached end of file (or the drain was cancelled or failed).
    pub fn is_finished(&self) -> bool {
        lock(&self.done.outcome).is_some()
    }

    /// Resolves once [`DrainHandle::is_finished`] is true (no polling).
    pub async fn finished(&self) {
        let mut rx = self.done.ended.subscribe();
        let _ = rx.wait_for(|ended| *ended).await;
    }

    /// Takes what is immediately readable from the session's sources and stops reading them.
    pub fn cancel(&self) {
        self.drainer.send(Command::Cancel(self.key));
    }

    /// Blocks until the drain ended; its summary, or the error that stopped it.
    pub fn join(self) -> Outcome {
        let mut g = lock(&self.done.outcome);
        loop {
            if let Some(outcome) = g.take() {
                return outcome;
            }
            g = self.done.cv.wait(g).unwrap_or_else(std::sync::PoisonError::into_inner);
        }
    }
}

enum Command {
    Add { key: u64, log: Arc<OutputLog>, sources: Vec<(Stream, OwnedFd)>, done: Arc<Done> },
    Cancel(u64),
}

#[derive(Debug)]
struct Shared {
    epoll: OwnedFd,
    wake: OwnedFd,
    queue: Mutex<Vec<Command>>,
    next_key: Mutex<u64>,
    /// Rounds of the loop begun: the drain's progress, as the watchdog sees it.
    rounds: AtomicU64,
    watch: Mutex<Watch>,
}

/// What the watchdog ([`Drainer::check`]) knows of the drain thread.
#[derive(Debug, Default)]
struct Watch {
    /// Since when data has been pending with no new round, and that round.
    pending_since: Option<(Instant, u64)>,
    stalls: u64,
    stalled: bool,
}

/// The drain thread as the watchdog last saw it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DrainHealth {
    /// Times the drain was found stopped (no new round while data was pending for longer than
    /// the limit) since the process started.
    pub stalls: u64,
    /// How long it has been stopped, while it is.
    pub stalled_for: Option<Duration>,
}

impl std::fmt::Debug for Command {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Command::Add { key, .. } => write!(f, "Add({key})"),
            Command::Cancel(key) => write!(f, "Cancel({key})"),
        }
    }
}

/// The shared drain thread. Cheap to clone; [`Drainer::global`] is the one the engine uses.
#[derive(Debug, Clone)]
pub struct Drainer {
    shared: Arc<Shared>,
}

impl Drainer {
    /// The process's drain thread, started on first use.
    pub fn global() -> Result<Drainer, OutputError> {
        static GLOBAL: OnceLock<Drainer> = OnceLock::new();
        if let Some(d) = GLOBAL.get() {
            return Ok(d.clone());
        }
        let d = Drainer::start()?;
        // A racing first caller may have won; use whichever is stored (the loser's thread
        // idles on an epoll nobody feeds, which happens at most once).
        Ok(GLOBAL.get_or_init(|| d).clone())
    }

    /// A new drain thread of its own.
    pub fn start() -> Result<Drainer, OutputError> {
        let epoll = epoll::create(CreateFlags::CLOEXEC)
            .map_err(|e| OutputError::io("create the drain epoll", e.into()))?;
        let wake = rustix::event::eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK)
            .map_err(|e| OutputError::io("create the drain eventfd", e.into()))?;
        epoll::add(&epoll, &wake, EventData::new_u64(WAKE_TOKEN), EventFlags::IN)
            .map_err(|e| OutputError::io("watch the drain eventfd", e.into()))?;
        let shared = Arc::new(Shared {
            epoll,
            wake,
            queue: Mutex::new(Vec::new()),
            next_key: Mutex::new(0),
            rounds: AtomicU64::new(0),
            watch: Mutex::new(Watch::default()),
        });
        let worker = Arc::clone(&shared);
        std::thread::Builder::new()
            .name("stockade-drain".into())
            // The loop keeps its buffer on the heap; a small stack is plenty.
            .stack_size(256 * 1024)
            .spawn(move || run(&worker))
            .map_err(|e| OutputError::io("start the output drain thread", e))?;
        Ok(Drainer { shared })
    }

    /// Starts draining `sources` into `log`. Does not call [`OutputLog::finish`].
    pub fn add(
        &self,
        log: Arc<OutputLog>,
        sources: Vec<(Stream, OwnedFd)>,
    ) -> Result<DrainHandle, OutputError> {
        for (_, fd) in &sources {
            prepare_source(fd)?;
        }
        let key = {
            let mut k = lock(&self.shared.next_key);
            *k += 1;
            *k
        };
        let done = Arc::new(Done::new());
        self.send(Command::Add { key, log, sources, done: Arc::clone(&done) });
        Ok(DrainHandle { key, done, drainer: self.clone() })
    }

    /// The watchdog's look (call it every second or so): whether the drain thread has begun no
    /// round while data (or a command) was pending for longer than `limit` — a step that hangs
    /// or a thread that is gone. A level-triggered `epoll_wait` with no timeout on the drain's
    /// own epoll tells what is pending without taking it. A stall is counted and logged once
    /// when it begins, and once when the drain moves again.
    pub fn check(&self, limit: Duration) -> DrainHealth {
        let mut events: Vec<Event> = Vec::with_capacity(1);
        let zero = rustix::event::Timespec { tv_sec: 0, tv_nsec: 0 };
        let pending = matches!(
            epoll::wait(&self.shared.epoll, rustix::buffer::spare_capacity(&mut events), Some(&zero)),
            Ok(n) if n > 0
        );
        let round = self.shared.rounds.load(Ordering::Relaxed);
        let mut w = lock(&self.shared.watch);
        let since = match w.pending_since {
            Some((t, r)) if pending && r == round => t,
            _ if pending => Instant::now(),
            _ => {
                w.pending_since = None;
                if std::mem::take(&mut w.stalled) {
                    tracing::warn!("the output drain is moving again");
                }
                return DrainHealth { stalls: w.stalls, stalled_for: None };
            }
        };
        w.pending_since = Some((since, round));
        let stalled = since.elapsed() > limit;
        if stalled && !w.stalled {
            w.stalls += 1;
            tracing::error!(
                seconds = since.elapsed().as_secs(),
                "the output drain has stopped: output is waiting and no session is being read"
            );
        } else if !stalled && std::mem::take(&mut w.stalled) {
            tracing::warn!("the output drain is moving again");
        }
        w.stalled = stalled;
        DrainHealth { stalls: w.stalls, stalled_for: stalled.then(|| since.elapsed()) }
    }

    /// What the last [`Drainer::check`] found (no look of its own).
    pub fn health(&self) -> DrainHealth {
        let w = lock(&self.shared.watch);
        let stalled_for = w.pending_since.filter(|_| w.stalled).map(|(t, _)| t.elapsed());
        DrainHealth { stalls: w.stalls, stalled_for }
    }

    fn send(&self, cmd: Command) {
        lock(&self.shared.queue).push(cmd);
        // EAGAIN means the counter is saturated: the thread is woken either way.
        let _ = rustix::io::write(&self.shared.wake, &1u64.to_ne_bytes());
    }
}

/// One source being drained.
struct Source {
    session: u64,
    stream: Stream,
    fd: OwnedFd,
}

/// One session being drained.
struct Entry {
    log: Arc<OutputLog>,
    tokens: Vec<u64>,
    summary: DrainSummary,
    done: Arc<Done>,
}

/// The drain thread's state: what is registered, and the one read buffer.
struct Loop<'a> {
    shared: &'a Shared,
    sources: HashMap<u64, Source>,
    sessions: HashMap<u64, Entry>,
    next_token: u64,
    buf: Vec<u8>,
}

fn run(shared: &Shared) {
    let mut l = Loop {
        shared,
        sources: HashMap::new(),
        sessions: HashMap::new(),
        next_token: WAKE_TOKEN + 1,
        buf: vec![0u8; DRAIN_BUF_BYTES],
    };
    let mut events: Vec<Event> = Vec::with_capacity(EVENTS_PER_WAIT);
    loop {
        shared.rounds.fetch_add(1, Ordering::Relaxed);
        events.clear();
        match epoll::wait(&shared.epoll, rustix::buffer::spare_capacity(&mut events), None) {
            Ok(_) | Err(Errno::INTR) => {}
            Err(e) => {
                // Nothing can be drained without epoll: fail every drain rather than spin.
                tracing::error!(error = %e, "the output drain cannot wait for pipes; stopping it");
                l.fail_all(&e.to_string());
                return;
            }
        }
        for ev in &events {
            let token = ev.data.u64();
            if token == WAKE_TOKEN {
                let mut counter = [0u8; 8];
                let _ = rustix::io::read(&shared.wake, &mut counter);
                let cmds = std::mem::take(&mut *lock(&shared.queue));
                for cmd in cmds {
                    let (key, done) = match &cmd {
                        Command::Add { key, done, .. } => (*key, Some(Arc::clone(done))),
                        Command::Cancel(key) => (*key, None),
                    };
                    let panicked = l.contained(Some(key), |l| l.command(cmd));
                    // An `Add` that panicked before its session was registered still answers.
                    if panicked
                        && let Some(done) = done
                        && !l.sessions.contains_key(&key)
                    {
                        let e =
                            std::io::Error::other("the output drain could not take this session");
                        done.set(Err(OutputError::io("drain output", e)));
                    }
                }
            } else {
                let key = l.sources.get(&token).map(|s| s.session);
                l.contained(key, |l| l.ready(token));
            }
        }
    }
}

impl Loop<'_> {
    /// Runs one step for session `key`. This one thread drains every session, so a panic in a
    /// step (a bug, or a path that logs when logging itself fails) must not stop it: the step's
    /// session ends with an error and every other session goes on being drained.
    /// Returns whether the step panicked.
    fn contained(&mut self, key: Option<u64>, step: impl FnOnce(&mut Self)) -> bool {
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| step(self)));
        if caught.is_err()
            && let Some(key) = key
        {
            let e = std::io::Error::other("the output drain failed while reading this session");
            self.end_session(key, Some(OutputError::io("drain output", e)));
        }
        caught.is_err()
    }

    fn command(&mut self, cmd: Command) {
        match cmd {
            Command::Add { key, log, sources, done } => {
                let mut entry =
                    Entry { log, tokens: Vec::new(), summary: DrainSummary::default(), done };
                for (stream, fd) in sources {
                    let token = self.next_token;
                    self.next_token += 1;
                    if let Err(e) = epoll::add(
                        &self.shared.epoll,
                        &fd,
                        EventData::new_u64(token),
                        EventFlags::IN,
                    ) {
                        entry.done.set(Err(OutputError::io("watch an output pipe", e.into())));
                        for t in entry.tokens {
                            self.remove_source(t);
                        }
                        return;
                    }
                    self.sources.insert(token, Source { session: key, stream, fd });
                    entry.tokens.push(token);
                }
                if entry.tokens.is_empty() {
                    entry.done.set(Ok(entry.summary));
                    return;
                }
                self.sessions.insert(key, entry);
            }
            Command::Cancel(key) => {
                let Some(entry) = self.sessions.get_mut(&key) else { return };
                let mut failed = None;
                for t in entry.tokens.clone() {
                    let Some(src) = self.sources.get(&t) else { continue };
                    loop {
                        match read_once(
                            &entry.log,
                            src.stream,
                            &src.fd,
                            &mut self.buf,
                            &mut entry.summary,
                        ) {
                            Ok(Read::Data) => {}
                            Ok(_) => break,
                            Err(e) => {
                                failed = Some(e);
                                break;
                            }
                        }
                    }
                }
                entry.summary.cancelled = true;
                self.end_session(key, failed);
            }
        }
    }

    /// One read of a ready source.
    fn ready(&mut self, token: u64) {
        let Some(src) = self.sources.get(&token) else { return };
        let key = src.session;
        let Some(entry) = self.sessions.get_mut(&key) else {
            self.remove_source(token);
            return;
        };
        match read_once(&entry.log, src.stream, &src.fd, &mut self.buf, &mut entry.summary) {
            Ok(Read::Data | Read::Empty) => {}
            Ok(Read::End) => {
                entry.tokens.retain(|&t| t != token);
                let last = entry.tokens.is_empty();
                self.remove_source(token);
                if last {
                    self.end_session(key, None);
                }
            }
            Err(e) => self.end_session(key, Some(e)),
        }
    }

    fn remove_source(&mut self, token: u64) {
        if let Some(src) = self.sources.remove(&token) {
            let _ = epoll::delete(&self.shared.epoll, &src.fd);
        }
    }

    /// Stops watching the session's sources (closing them) and publishes how it ended.
    fn end_session(&mut self, key: u64, error: Option<OutputError>) {
        let Some(entry) = self.sessions.remove(&key) else { return };
        for t in &entry.tokens {
            self.remove_source(*t);
        }
        let why = error.as_ref().map(ToString::to_string);
        // The waiter is answered first: logging is a side path that must not keep it waiting.
        entry.done.set(match error {
            Some(e) => Err(e),
            None => Ok(entry.summary),
        });
        if let Some(why) = why {
            tracing::warn!(error = %why, "output drain stopped early");
        }
    }

    fn fail_all(&mut self, why: &str) {
        let keys: Vec<u64> = self.sessions.keys().copied().collect();
        for key in keys {
            let e = std::io::Error::other(why.to_owned());
            self.end_session(key, Some(OutputError::io("drain output", e)));
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::OutputConfig;

    fn pipe() -> (OwnedFd, OwnedFd) {
        rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).unwrap()
    }

    #[test]
    fn a_step_that_panics_ends_its_own_session_and_the_thread_drains_the_others() {
        let t = tempfile::tempdir().unwrap();
        let d = Drainer::start().unwrap();
        let mut l = Loop {
            shared: &d.shared,
            sources: HashMap::new(),
            sessions: HashMap::new(),
            next_token: WAKE_TOKEN + 1,
            buf: vec![0u8; 4096],
        };
        let mut dones = Vec::new();
        for key in [1, 2] {
            let log = Arc::new(
                OutputLog::create(t.path().join(format!("s{key}")), OutputConfig::default())
                    .unwrap(),
            );
            let (r, w) = pipe();
            let done = Arc::new(Done::new());
            l.command(Command::Add {
                key,
                log,
                sources: vec![(Stream::Stdout, r)],
                done: Arc::clone(&done),
            });
            dones.push((done, w));
        }
        // The panic's message is printed by the default hook: it is this test's, on purpose.
        let panicked = l.contained(Some(1), |_| panic!("a step of session 1 failed (on purpose)"));
        assert!(panicked);
        assert!(
            lock(&dones[0].0.outcome).as_ref().is_some_and(Result::is_err),
            "session 1 ended with an error"
        );
        assert!(lock(&dones[1].0.outcome).is_none(), "session 2 is still drained");
        assert!(l.sessions.contains_key(&2) && !l.sessions.contains_key(&1));
        // Session 2 still reads to its end through the same loop.
        let token = l.sessions[&2].tokens[0];
        rustix::io::write(&dones[1].1, b"after\n").unwrap();
        l.ready(token);
        let (_, w) = dones.remove(1);
        drop(w);
        l.ready(token);
        assert!(!l.sessions.contains_key(&2), "session 2 reached its end");
    }

    #[test]
    fn many_sessions_share_one_thread_and_keep_every_byte() {
        let t = tempfile::tempdir().unwrap();
        let d = Drainer::start().unwrap();
        let mut runs = Vec::new();
        for i in 0..20 {
            let log = Arc::new(
                OutputLog::create(t.path().join(format!("s{i}")), OutputConfig::default()).unwrap(),
            );
            let (out_r, out_w) = pipe();
            let (err_r, err_w) = pipe();
            let h = d
                .add(Arc::clone(&log), vec![(Stream::Stdout, out_r), (Stream::Stderr, err_r)])
                .unwrap();
            runs.push((log, h, out_w, err_w));
        }
        for (i, (_, _, out_w, err_w)) in runs.iter().enumerate() {
            for k in 0..50 {
                rustix::io::write(out_w, format!("out {i} {k}\n").as_bytes()).unwrap();
                rustix::io::write(err_w, format!("err {i} {k}\n").as_bytes()).unwrap();
            }
        }
        for (i, (log, h, out_w, err_w)) in runs.into_iter().enumerate() {
            drop((out_w, err_w));
            let s = h.join().unwrap();
            assert!(!s.cancelled);
            let st = log.stats();
            let want: u64 = (0..50).map(|k| format!("out {i} {k}\n").len() as u64).sum();
            assert_eq!(st.stream_bytes.stdout, want);
            assert_eq!(st.stream_bytes.stdout, st.stream_bytes.stderr);
            assert_eq!(s.bytes, 2 * want);
        }
    }

    #[test]
    fn cancel_takes_what_is_buffered_and_ends_a_drain_whose_writer_stays() {
        let t = tempfile::tempdir().unwrap();
        let d = Drainer::start().unwrap();
        let log = Arc::new(OutputLog::create(t.path().join("s"), OutputConfig::default()).unwrap());
        let (r, w) = pipe();
        let h = d.add(Arc::clone(&log), vec![(Stream::Stdout, r)]).unwrap();
        rustix::io::write(&w, b"still here\n").unwrap();
        assert!(!h.is_finished());
        h.cancel();
        let s = h.join().unwrap();
        assert!(s.cancelled);
        assert_eq!(log.stats().total_bytes, 11);
        drop(w);
    }
}
