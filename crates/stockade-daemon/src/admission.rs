//! Who gets a connection slot, so no flood of network connections can lock out local clients or
//! run the daemon out of file descriptors.
//!
//! - The connection budget ([`MAX_CONNECTIONS`]) is taken by a network connection only once it
//!   has authenticated; [`UNIX_RESERVE`] of it is kept for the Unix socket, which network
//!   clients can never take.
//! - A network connection that has not authenticated yet is *pending*: at most [`PENDING_CAP`]
//!   at once, each for at most the door's handshake deadline. The daemon takes a pending place
//!   *before* it accepts a connection, so when all are taken, new connections wait in the
//!   kernel's accept queue, first come first served, instead of pushing out one that is
//!   already being read. Only a connection that has been looked at and has sent nothing for
//!   [`SILENT_GRACE`] is told to go to make room (the one silent longest first; its place is
//!   taken once its socket is closed, never before), else the oldest one still reading its
//!   request head after [`SPEAKING_GRACE`] (a trickle cannot hold a place): a client that
//!   holds the token sends it at once, so idle connections cannot keep a token holder out, and
//!   a burst of connections cannot push out a token holder whose request is already waiting
//!   in its socket or being read. The accept loop also yields after each network connection,
//!   so its task looks at it before the next is accepted.
//!
//! So the daemon's sockets number at most `MAX_CONNECTIONS + PENDING_CAP`, whatever arrives,
//! and a flood slows down at the kernel's queue rather than at the token holder.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

use crate::config::MAX_CONNECTIONS;

/// Connection slots only the Unix socket may use.
pub const UNIX_RESERVE: usize = 64;
/// Most network connections waiting to authenticate at once.
pub const PENDING_CAP: usize = 128;
/// How long a connection must have sent nothing before it may be dropped to make room (a
/// client whose request is a moment late, on a busy machine, is not mistaken for an idle one).
pub(crate) const SILENT_GRACE: Duration = Duration::from_millis(200);
/// How long a connection that has spoken may take to finish its request head before, when every
/// pending place is taken, it may be dropped to make room (the oldest first). A client that holds
/// the token sends its head at once; one that trickles it a byte at a time cannot hold a place
/// longer than this while others wait.
pub(crate) const SPEAKING_GRACE: Duration = Duration::from_millis(200);

/// A connection budget and its pending places: the daemon has one for all its doors, `stockade
/// mcp --http` one of its own.
#[derive(Debug)]
pub struct Admission {
    /// Slots any authenticated connection may take.
    open: Arc<Semaphore>,
    /// Slots kept for the Unix socket.
    reserve: Arc<Semaphore>,
    /// Pending network connections, oldest first.
    pending: Mutex<VecDeque<Waiting>>,
    /// Told when a pending place is left or a connection turns out silent.
    freed: Notify,
    /// The clock a connection's silence is measured on.
    origin: Instant,
    next: AtomicU64,
}

/// How far a pending connection has got, which decides whether it may be dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Stage {
    /// Taken before `accept`, or accepted and not looked at yet.
    Unseen = 0,
    /// Looked at; nothing has arrived.
    Silent = 1,
    /// Bytes have arrived; the request is being read.
    Speaking = 2,
}

/// A pending connection's stage, and since when it has been silent (ms on the admission's
/// clock), shared by the queue and the connection.
#[derive(Debug, Default)]
struct Progress {
    stage: AtomicU8,
    silent_since: AtomicU64,
}

/// One pending connection in the queue.
#[derive(Debug)]
struct Waiting {
    id: u64,
    /// When the place was taken (ms on the admission's clock).
    since: u64,
    progress: Arc<Progress>,
    cancel: CancellationToken,
}

impl Admission {
    /// A budget of [`MAX_CONNECTIONS`] and [`PENDING_CAP`] pending places.
    pub fn new() -> Arc<Admission> {
        Arc::new(Admission {
            open: Arc::new(Semaphore::new(MAX_CONNECTIONS - UNIX_RESERVE)),
            reserve: Arc::new(Semaphore::new(UNIX_RESERVE)),
            pending: Mutex::new(VecDeque::with_capacity(PENDING_CAP)),
            freed: Notify::new(),
            origin: Instant::now(),
            next: AtomicU64::new(0),
        })
    }

    /// A slot for a Unix-socket connection (peers there are checked by the socket's mode).
    pub(crate) fn local(&self) -> Option<OwnedSemaphorePermit> {
        Arc::clone(&self.open)
            .try_acquire_owned()
            .or_else(|_| Arc::clone(&self.reserve).try_acquire_owned())
            .ok()
    }

    /// A slot for a network connection that has just authenticated.
    pub(crate) fn network(&self) -> Option<OwnedSemaphorePermit> {
        Arc::clone(&self.open).try_acquire_owned().ok()
    }

    /// A pending place for the next network connection, taken before it is accepted: waits
    /// while [`PENDING_CAP`] are taken, and when one has been silent for [`SILENT_GRACE`], tells
    /// the one silent longest to go and takes its place once it has. The connection must give up
    /// (and drop its place) when the place's token is cancelled.
    pub(crate) async fn place(self: &Arc<Self>) -> Pending {
        loop {
            let freed = self.freed.notified();
            if let Some(place) = self.try_place(self.now_ms()) {
                return place;
            }
            // A connection may pass its grace without anyone telling: look again then.
            let _ = tokio::time::timeout(SILENT_GRACE, freed).await;
        }
    }

    /// [`Admission::place`] at `now` (ms on the admission's clock) without waiting: `None` when
    /// every place is taken. When one of them has been silent past its grace, the one silent
    /// longest is told to go; its place is left only when its task lets go of it (its socket
    /// closed), so the daemon's sockets never number more than the cap, even for a moment.
    fn try_place(self: &Arc<Self>, now: u64) -> Option<Pending> {
        let mut queue = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        if queue.len() >= PENDING_CAP {
            // One told to go is still leaving: its place comes free in a moment.
            if queue.iter().any(|w| w.cancel.is_cancelled()) {
                return None;
            }
            let grace = u64::try_from(SILENT_GRACE.as_millis()).unwrap_or(u64::MAX);
            let silent_for = |w: &Waiting| {
                (w.progress.stage.load(Ordering::Acquire) == Stage::Silent as u8)
                    .then(|| now.saturating_sub(w.progress.silent_since.load(Ordering::Acquire)))
            };
            let speaking_grace = u64::try_from(SPEAKING_GRACE.as_millis()).unwrap_or(u64::MAX);
            let silent = queue
                .iter()
                .filter_map(|w| silent_for(w).map(|t| (w, t)))
                .filter(|&(_, t)| t >= grace)
                .max_by_key(|&(_, t)| t)
                .map(|(w, _)| w);
            // Else the oldest that is still reading its head past its grace: a trickle.
            let slow = || {
                queue.iter().find(|w| {
                    w.progress.stage.load(Ordering::Acquire) == Stage::Speaking as u8
                        && now.saturating_sub(w.since) >= speaking_grace
                })
            };
            if let Some(victim) = silent.or_else(slow) {
                victim.cancel.cancel();
            }
            return None;
        }
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let cancel = CancellationToken::new();
        let progress = Arc::new(Progress::default());
        let waiting =
            Waiting { id, since: now, progress: Arc::clone(&progress), cancel: cancel.clone() };
        queue.push_back(waiting);
        Some(Pending { admission: Arc::clone(self), id, progress, cancel })
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// How many network connections are waiting to authenticate.
    #[cfg(test)]
    fn pending_count(&self) -> usize {
        self.pending.lock().map(|q| q.len()).unwrap_or(0)
    }
}

/// A pending network connection's place; leaving it (drop) frees the place.
#[derive(Debug)]
pub(crate) struct Pending {
    admission: Arc<Admission>,
    id: u64,
    progress: Arc<Progress>,
    /// Cancelled when a newer connection needs the place.
    pub(crate) cancel: CancellationToken,
}

impl Pending {
    /// The connection's task has looked at it and nothing has arrived ([`Stage::Silent`]), or
    /// bytes arrived ([`Stage::Speaking`]). A stage never goes back.
    pub(crate) fn reached(&self, stage: Stage) {
        self.reached_at(stage, self.admission.now_ms());
    }

    fn reached_at(&self, stage: Stage, now: u64) {
        let progress = &self.progress;
        if stage == Stage::Silent {
            progress.silent_since.store(now, Ordering::Release);
        }
        let before = progress.stage.fetch_max(stage as u8, Ordering::AcqRel);
        if stage == Stage::Silent && before == Stage::Unseen as u8 {
            // Someone waiting for a place may drop it once its grace has passed.
            self.admission.freed.notify_one();
        }
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        let mut queue = self.admission.pending.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(at) = queue.iter().position(|w| w.id == self.id) {
            queue.remove(at);
            self.admission.freed.notify_one();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn network_connections_never_take_the_unix_reserve() {
        let a = Admission::new();
        let network: Vec<_> = std::iter::from_fn(|| a.network()).take(MAX_CONNECTIONS).collect();
        assert_eq!(network.len(), MAX_CONNECTIONS - UNIX_RESERVE);
        let local: Vec<_> = std::iter::from_fn(|| a.local()).take(MAX_CONNECTIONS).collect();
        assert_eq!(local.len(), UNIX_RESERVE);
        drop(network);
        assert!(a.network().is_some());
    }

    /// Far enough ahead that every silent connection is past its grace.
    const LATER: u64 = 1_000_000;

    #[test]
    fn when_every_place_is_taken_only_a_connection_silent_past_its_grace_makes_room() {
        let a = Admission::new();
        let all: Vec<Pending> = (0..PENDING_CAP).filter_map(|_| a.try_place(0)).collect();
        assert_eq!(all.len(), PENDING_CAP);
        // Nobody has been looked at, or everyone is speaking: the next waits.
        assert!(a.try_place(LATER).is_none(), "unseen connections are never dropped");
        for p in &all[..64] {
            p.reached_at(Stage::Speaking, 0);
        }
        assert!(a.try_place(100).is_none(), "nor are speaking ones within their grace");
        // Silent ones, at 10 ms and 50 ms: within their grace, still nobody is dropped.
        all[100].reached_at(Stage::Silent, 50);
        all[70].reached_at(Stage::Silent, 10);
        assert!(a.try_place(60).is_none());
        assert!(all.iter().all(|p| !p.cancel.is_cancelled()));
        // Past it: the one silent longest is told to go first, whatever its age; its place is
        // taken only once it has let go, and nobody else is told meanwhile.
        let mut all: Vec<Option<Pending>> = all.into_iter().map(Some).collect();
        assert!(a.try_place(LATER).is_none(), "the place is not free until it is left");
        assert!(all[70].as_ref().is_some_and(|p| p.cancel.is_cancelled()));
        assert!(a.try_place(LATER).is_none());
        assert!(!all[100].as_ref().is_some_and(|p| p.cancel.is_cancelled()));
        assert_eq!(a.pending_count(), PENDING_CAP);
        drop(all[70].take());
        let newer = a.try_place(LATER).expect("a place once the silent one left");
        assert!(a.try_place(LATER).is_none());
        assert!(all[100].as_ref().is_some_and(|p| p.cancel.is_cancelled()));
        drop(all[100].take());
        let newest = a.try_place(LATER).expect("a place");
        assert_eq!(all.iter().flatten().filter(|p| p.cancel.is_cancelled()).count(), 0);
        // A stage never goes back: speaking, then told silent, is still speaking.
        if let Some(p) = &all[0] {
            p.reached_at(Stage::Silent, 0);
        }
        assert!(a.try_place(100).is_none());
        assert!(all.iter().flatten().all(|p| !p.cancel.is_cancelled()));
        assert_eq!(a.pending_count(), PENDING_CAP);
        // Past their grace, the oldest still reading its head is told to go (a trickle).
        assert!(a.try_place(LATER).is_none());
        assert!(all[0].as_ref().is_some_and(|p| p.cancel.is_cancelled()));
        assert_eq!(all.iter().flatten().filter(|p| p.cancel.is_cancelled()).count(), 1);
        drop(all);
        assert_eq!(a.pending_count(), 2);
        drop((newer, newest));
        assert_eq!(a.pending_count(), 0);
    }

    #[tokio::test]
    async fn a_place_waits_until_one_is_left() {
        let a = Admission::new();
        let mut all: Vec<Pending> = (0..PENDING_CAP).filter_map(|_| a.try_place(0)).collect();
        let waiter = tokio::spawn({
            let a = Arc::clone(&a);
            async move { a.place().await }
        });
        tokio::time::sleep(SILENT_GRACE * 2).await;
        assert!(!waiter.is_finished(), "no place while all are taken and none is silent");
        drop(all.pop());
        let place = tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("a place once one was left")
            .expect("the waiter");
        assert!(all.iter().all(|p| !p.cancel.is_cancelled()));
        drop(place);
    }

    #[tokio::test]
    async fn a_place_taken_from_a_silent_connection_comes_only_after_it_left() {
        let a = Admission::new();
        let mut all: Vec<Pending> = (0..PENDING_CAP).filter_map(|_| a.try_place(0)).collect();
        let silent = all.pop().expect("a place");
        silent.reached(Stage::Silent);
        let waiter = tokio::spawn({
            let a = Arc::clone(&a);
            async move { a.place().await }
        });
        tokio::time::timeout(Duration::from_secs(5), silent.cancel.cancelled())
            .await
            .expect("the silent connection is told to go after its grace");
        tokio::time::sleep(SILENT_GRACE).await;
        assert!(!waiter.is_finished(), "its place is not taken while it is still open");
        assert_eq!(a.pending_count(), PENDING_CAP);
        drop(silent);
        let place = tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("a place once it left")
            .expect("the waiter");
        assert!(all.iter().all(|p| !p.cancel.is_cancelled()));
        assert_eq!(a.pending_count(), PENDING_CAP);
        drop((place, all));
    }
}
