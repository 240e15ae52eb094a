//! Blocking work started from async code, on the thread that asked when it can be.

use tokio::runtime::{Handle, RuntimeFlavor};

/// Blocking work that did not complete: it panicked, or the blocking pool is shutting down.
#[derive(Debug, thiserror::Error)]
#[error("blocking work did not complete: {0}")]
pub struct NotDone(String);

/// Runs `f`, which blocks (a spawn, a few file writes), without stalling the tasks of an async
/// worker: on a multi-threaded runtime in place (`block_in_place`: this worker's other tasks move
/// to another thread, and the caller goes on without the two hand-offs of the blocking pool,
/// which cost a short command more than the work); elsewhere (a current-thread runtime, as in
/// tests) on the blocking pool. A panic in `f` is caught either way and returned as
/// [`NotDone`], as the blocking pool would.
pub async fn run<T, F>(f: F) -> Result<T, NotDone>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    match Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(RuntimeFlavor::MultiThread) => tokio::task::block_in_place(|| {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))
                .map_err(|_| NotDone("it panicked".into()))
        }),
        _ => tokio::task::spawn_blocking(f).await.map_err(|e| NotDone(e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn in_place_on_a_multi_threaded_runtime_and_a_panic_is_an_error() {
        let here = std::thread::current().id();
        let ran = run(move || std::thread::current().id() == here).await;
        assert!(matches!(ran, Ok(true)), "{ran:?}");
        assert!(run(|| -> u8 { panic!("boom") }).await.is_err());
    }

    #[tokio::test(flavor = "current_thread")]
    async fn on_the_blocking_pool_on_a_current_thread_runtime() {
        let here = std::thread::current().id();
        let ran = run(move || std::thread::current().id() == here).await;
        assert!(matches!(ran, Ok(false)), "{ran:?}");
        assert!(run(|| -> u8 { panic!("boom") }).await.is_err());
    }
}
