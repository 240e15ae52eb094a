//! Bounded waits: poll a condition until it holds or a bound passes (a hang detector, never a
//! speed assertion).

use std::time::{Duration, Instant};

/// Generous bound for anything the tests wait for.
pub const PATIENCE: Duration = Duration::from_secs(60);

/// How often [`eventually`] polls.
const POLL: Duration = Duration::from_millis(20);

/// Polls `f` until it returns `Some`, or panics after `within` naming `what` was awaited.
pub fn eventually<T>(within: Duration, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + within;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(POLL);
    }
}
