//! The raw bytes of binary `read` answers on their way to a connection's writer, and the
//! connection's budget for them (kept apart from `requests` so handlers and the writers share
//! them without importing each other).

use std::sync::Arc;

use tokio::sync::Semaphore;

/// Binary read answers of one connection being prepared or queued at once (each holds up to
/// `limits::MAX_BINARY_BYTES` until written): two let a pipelining client overlap the daemon's
/// read of the next chunk with the writing of this one; more wait.
pub(crate) const BINARY_IN_FLIGHT: usize = 2;

/// The raw bytes of a binary `read`: written after the answer's line on the Unix socket, sent as
/// the binary message after its text message on the WebSocket door. Holds one of its
/// connection's [`BINARY_IN_FLIGHT`] places until written; then its buffer is the connection's
/// spare for the next binary read (see [`Binary`]).
pub(crate) struct Payload {
    pub(crate) bytes: Vec<u8>,
    pub(crate) _place: tokio::sync::OwnedSemaphorePermit,
    pub(crate) binary: Arc<Binary>,
}

impl AsRef<[u8]> for Payload {
    fn as_ref(&self) -> &[u8] {
        &self.bytes
    }
}

impl Drop for Payload {
    fn drop(&mut self) {
        self.binary.put_back(std::mem::take(&mut self.bytes));
    }
}

/// A connection's binary reads: their places, and one spare buffer kept from answer to answer
/// (a fresh buffer of several MiB for every answer costs a page fault per page, about a third of
/// the daemon's work per byte). The spare is as large as the connection's largest binary answer
/// (at most `limits::MAX_BINARY_BYTES`) and goes with the connection.
pub(crate) struct Binary {
    pub(crate) places: Arc<Semaphore>,
    spare: std::sync::Mutex<Vec<u8>>,
}

impl Binary {
    pub(crate) fn new() -> Binary {
        Binary {
            places: Arc::new(Semaphore::new(BINARY_IN_FLIGHT)),
            spare: std::sync::Mutex::new(Vec::new()),
        }
    }

    /// The spare buffer (empty when another answer has it).
    pub(crate) fn take(&self) -> Vec<u8> {
        self.spare.lock().map(|mut s| std::mem::take(&mut *s)).unwrap_or_default()
    }

    fn put_back(&self, bytes: Vec<u8>) {
        if let Ok(mut spare) = self.spare.lock()
            && spare.capacity() < bytes.capacity()
        {
            *spare = bytes;
        }
    }
}
