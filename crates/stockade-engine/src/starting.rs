//! Idempotency keys of the runs being started. A run whose key another run is starting waits
//! until that start is over, then finds its session (or starts, when that one failed); runs
//! with different keys start side by side. (Every daemon call of the CLI carries a key, so one
//! lock for all of them would start the sessions of many clients one at a time.)

use std::collections::HashSet;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

use crate::error::EngineError;
use crate::run_spec::RunSpec;
use crate::session::Session;

/// The keys whose runs are starting now.
#[derive(Default)]
pub(crate) struct Starting {
    keys: Mutex<HashSet<String>>,
    over: Condvar,
}

/// A key held while its run starts: released, and the runs waiting for it woken, when dropped.
pub(crate) struct Held<'a> {
    starting: &'a Starting,
    key: String,
}

impl Starting {
    fn keys(&self) -> MutexGuard<'_, HashSet<String>> {
        self.keys.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Holds `key`, once no other run is starting with it. Blocking.
    pub(crate) fn hold(&self, key: &str) -> Held<'_> {
        let mut keys = self.keys();
        while keys.contains(key) {
            keys = self.over.wait(keys).unwrap_or_else(PoisonError::into_inner);
        }
        keys.insert(key.to_owned());
        Held { starting: self, key: key.to_owned() }
    }
}

/// How a start goes on.
pub(crate) enum Begun<'a> {
    /// A session was started with the run's idempotency key: answer with it, start nothing.
    Replay(Arc<Session>),
    /// Start, holding these until the session is registered.
    Go(Guards<'a>),
}

/// What a start holds: the `source` lock (runs with a `source` start one at a time, so two
/// cannot both start a copy) and its idempotency key.
pub(crate) struct Guards<'a> {
    _source: Option<MutexGuard<'a, ()>>,
    _key: Option<Held<'a>>,
}

impl crate::Engine {
    /// Checks the run's idempotency key and takes what its start holds (blocking): a run with
    /// the key of a session this engine keeps is a replay of it.
    pub(crate) fn begin_start(&self, spec: &RunSpec) -> Result<Begun<'_>, EngineError> {
        let source = spec
            .source
            .is_some()
            .then(|| self.source_lock.lock().unwrap_or_else(PoisonError::into_inner));
        let key = match spec.idempotency_key.as_deref() {
            Some(key) => {
                crate::run_spec::check_idempotency_key(key)?;
                let held = self.starting.hold(key);
                if let Some(session) = self.with_idempotency_key(key) {
                    return Ok(Begun::Replay(session));
                }
                Some(held)
            }
            None => None,
        };
        Ok(Begun::Go(Guards { _source: source, _key: key }))
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.starting.keys().remove(&self.key);
        self.starting.over.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    #[test]
    fn different_keys_are_held_at_once_and_the_same_key_waits_for_its_release() {
        let starting = Arc::new(Starting::default());
        let a = starting.hold("key-a");
        // Another key is held while the first one is: no wait.
        let other = {
            let starting = Arc::clone(&starting);
            std::thread::spawn(move || drop(starting.hold("key-b")))
        };
        other.join().unwrap();
        // The same key waits until the first holder is done.
        let got = Arc::new(AtomicBool::new(false));
        let same = {
            let (starting, got) = (Arc::clone(&starting), Arc::clone(&got));
            std::thread::spawn(move || {
                let held = starting.hold("key-a");
                got.store(true, Ordering::SeqCst);
                drop(held);
            })
        };
        std::thread::sleep(Duration::from_millis(100));
        assert!(!got.load(Ordering::SeqCst), "held twice at once");
        drop(a);
        same.join().unwrap();
        assert!(got.load(Ordering::SeqCst));
        assert!(starting.keys().is_empty(), "every key released");
    }
}
