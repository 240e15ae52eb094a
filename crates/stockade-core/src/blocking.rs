//! Blocking work started from async code, on the thread that asked when it can be.

use tokio::runtime::{Handle, RuntimeFlavor};
use tokio::task::JoinError;

/// Runs `f`, which blocks (a spawn, a few file writes), without stalling the tasks of an async
/// worker: on a multi-threaded runtime in place (`block_in_place`: this worker's other tasks move
/// to another thread, and the caller goes on without the two hand-offs of the blocking pool,
/// which cost a short command more than the work); elsewhere (a current-thread runtime, as in
/// tests) on the blocking pool.
pub async fn run<T, F>(f: F) -> Result<T, JoinError>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    match Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(RuntimeFlavor::MultiThread) => Ok(tokio::task::block_in_place(f)),
        _ => tokio::task::spawn_blocking(f).await,
    }
}
