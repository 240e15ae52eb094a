//! The idempotency keys of `write` calls: a `write` retried with the key of one the daemon has
//! seen types nothing again and is answered from where that first write started, so a call that
//! timed out or lost its connection can be repeated without typing its input twice.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};

use stockade_proto::rpc::RpcError;
use tokio::sync::OnceCell;

/// How many keys are kept (the oldest are forgotten first): far more than the retries of every
/// client that could be waiting at once.
pub(crate) const KEPT_WRITE_KEYS: usize = 4096;

/// What became of the first `write` with a key: where the log stood just before it (its answer
/// starts there), or the error it was answered with.
pub(crate) type FirstWrite = Result<u64, RpcError>;

/// The keys seen, per session, bounded to [`KEPT_WRITE_KEYS`].
#[derive(Default)]
pub(crate) struct WriteKeys {
    inner: Mutex<Kept>,
}

#[derive(Default)]
struct Kept {
    by_key: HashMap<(String, String), Arc<OnceCell<FirstWrite>>>,
    order: VecDeque<(String, String)>,
}

impl WriteKeys {
    /// The place of the first write with `key` to session `id`: empty when this call is the
    /// first (it fills it), else filled — or being filled by a first call still writing, which
    /// the caller waits for.
    pub(crate) fn place(&self, id: &str, key: &str) -> Arc<OnceCell<FirstWrite>> {
        let mut kept = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let name = (id.to_owned(), key.to_owned());
        if let Some(cell) = kept.by_key.get(&name) {
            return Arc::clone(cell);
        }
        while kept.order.len() >= KEPT_WRITE_KEYS {
            if let Some(old) = kept.order.pop_front() {
                kept.by_key.remove(&old);
            }
        }
        let cell = Arc::new(OnceCell::new());
        kept.by_key.insert(name.clone(), Arc::clone(&cell));
        kept.order.push_back(name);
        cell
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_key_is_one_place_per_session_and_the_oldest_go_first() {
        let keys = WriteKeys::default();
        let first = keys.place("sh-1", "k");
        first.get_or_init(|| async { Ok(7) }).await;
        assert_eq!(keys.place("sh-1", "k").get(), Some(&Ok(7)));
        // The same key for another session is another write.
        assert!(keys.place("sh-2", "k").get().is_none());
        for i in 0..KEPT_WRITE_KEYS {
            keys.place("sh-3", &format!("filler-{i}"));
        }
        assert!(keys.place("sh-1", "k").get().is_none(), "the oldest key is forgotten");
        assert!(keys.inner.lock().unwrap().by_key.len() <= KEPT_WRITE_KEYS);
    }
}
