//! Who gets a connection slot, so no flood of network connections can lock out local clients or
//! run the daemon out of file descriptors.
//!
//! - The connection budget ([`MAX_CONNECTIONS`]) is taken by a network connection only once it
//!   has authenticated; [`UNIX_RESERVE`] of it is kept for the Unix socket, which network
//!   clients can never take.
//! - A network connection that has not authenticated yet is *pending*: at most [`PENDING_CAP`]
//!   at once, each for at most the door's handshake deadline. When the cap is reached, the
//!   oldest pending connection is dropped to make room for the new one: it has had the longest
//!   to authenticate, and a client that holds the token sends it at once, so idle connections
//!   cannot keep a token holder out.
//!
//! So the daemon's sockets number at most `MAX_CONNECTIONS + PENDING_CAP` (plus one being
//! accepted), whatever arrives.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

use crate::config::MAX_CONNECTIONS;

/// Connection slots only the Unix socket may use.
pub const UNIX_RESERVE: usize = 64;
/// Most network connections waiting to authenticate at once.
pub const PENDING_CAP: usize = 128;

/// The daemon's connection budget.
#[derive(Debug)]
pub(crate) struct Admission {
    /// Slots any authenticated connection may take.
    open: Arc<Semaphore>,
    /// Slots kept for the Unix socket.
    reserve: Arc<Semaphore>,
    /// Pending network connections, oldest first: an id and what drops it.
    pending: Mutex<VecDeque<(u64, CancellationToken)>>,
    next: AtomicU64,
}

impl Admission {
    pub(crate) fn new() -> Arc<Admission> {
        Arc::new(Admission {
            open: Arc::new(Semaphore::new(MAX_CONNECTIONS - UNIX_RESERVE)),
            reserve: Arc::new(Semaphore::new(UNIX_RESERVE)),
            pending: Mutex::new(VecDeque::with_capacity(PENDING_CAP)),
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

    /// Register a network connection that has not authenticated yet, dropping the oldest
    /// pending one when [`PENDING_CAP`] are waiting. The connection must give up when the
    /// returned token is cancelled.
    pub(crate) fn pending(self: &Arc<Self>) -> Pending {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let cancel = CancellationToken::new();
        let mut queue = self.pending.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        while queue.len() >= PENDING_CAP {
            match queue.pop_front() {
                Some((_, oldest)) => oldest.cancel(),
                None => break,
            }
        }
        queue.push_back((id, cancel.clone()));
        Pending { admission: Arc::clone(self), id, cancel }
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
    /// Cancelled when a newer connection needs the place.
    pub(crate) cancel: CancellationToken,
}

impl Drop for Pending {
    fn drop(&mut self) {
        let mut queue =
            self.admission.pending.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(at) = queue.iter().position(|(id, _)| *id == self.id) {
            queue.remove(at);
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

    #[test]
    fn the_oldest_pending_connection_makes_room() {
        let a = Admission::new();
        let first: Vec<Pending> = (0..PENDING_CAP).map(|_| a.pending()).collect();
        assert!(first.iter().all(|p| !p.cancel.is_cancelled()));
        let newest = a.pending();
        assert!(first[0].cancel.is_cancelled(), "the oldest is dropped");
        assert!(first[1..].iter().all(|p| !p.cancel.is_cancelled()));
        assert!(!newest.cancel.is_cancelled());
        assert_eq!(a.pending_count(), PENDING_CAP);
        drop(first);
        assert_eq!(a.pending_count(), 1);
        drop(newest);
        assert_eq!(a.pending_count(), 0);
    }
}
