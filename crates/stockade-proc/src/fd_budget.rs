//! File descriptors as a budget: what the daemon may open, what each running session costs, and
//! the limit its commands inherit.
//!
//! A daemon that keeps a thousand sessions must not run into `EMFILE` halfway through a spawn
//! (which surfaces as "cannot execute /bin/sh: Too many open files"). So:
//!
//! * at start the daemon raises its soft `RLIMIT_NOFILE` to the hard limit
//!   ([`raise_nofile_limit`]); the commands it runs get the original soft limit back before
//!   `exec` (`child_nofile_limit`), so a program that walks every possible fd or uses
//!   `select(2)` sees what it would have seen in the user's shell;
//! * a running session is counted at [`FDS_PER_RUNNING_SESSION`] descriptors and
//!   `FD_RESERVE` stay free for connections, reads and recovery; the engine refuses a new run
//!   with a sentence naming the limit before the budget is spent ([`running_allowed`]);
//! * a finished session holds none (its log opens its files per read).
//!
//! Linux-only (`RLIMIT_NOFILE` exists elsewhere, but the counts are Linux's).

use std::sync::atomic::{AtomicU64, Ordering};

use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};

/// Descriptors one running session may hold at once: stdout, stderr and stdin pipes (or a PTY
/// master and its duplicate), the pidfd, the spool, the stream index and the session directory,
/// plus one spare for a spawn in progress.
pub const FDS_PER_RUNNING_SESSION: u64 = 8;
/// Descriptors kept free for everything else (the sockets and their clients, reads of finished
/// logs, recovery, the janitor) under a generous limit; a small limit keeps a quarter of itself
/// (never below [`MIN_FD_RESERVE`]), so `ulimit -n 256` still runs commands.
pub(crate) const FD_RESERVE: u64 = 256;
/// The least kept free: a connection, a read and recovery's few files at a time.
pub(crate) const MIN_FD_RESERVE: u64 = 32;
/// The default most running sessions never goes below this (where the limits allow less, the
/// fd budget refuses first, with a sentence naming the limit).
pub(crate) const MIN_DEFAULT_MAX_RUNNING: usize = 1_024;
/// Nor above this: past it, the machine's process table and memory are the real limits.
pub(crate) const MAX_DEFAULT_MAX_RUNNING: usize = 32_768;

/// The soft limit before [`raise_nofile_limit`] raised it (`u64::MAX`: never raised).
static ORIGINAL_SOFT: AtomicU64 = AtomicU64::new(u64::MAX);

/// The soft open-file limit now (`u64::MAX` if unlimited or unknown).
pub fn nofile_soft() -> u64 {
    getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX)
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit; returns `(before, after)`. Idempotent.
pub fn raise_nofile_limit() -> std::io::Result<(u64, u64)> {
    let lim = getrlimit(Resource::Nofile);
    let before = lim.current.unwrap_or(u64::MAX);
    if lim.current == lim.maximum {
        return Ok((before, before));
    }
    setrlimit(Resource::Nofile, Rlimit { current: lim.maximum, maximum: lim.maximum })?;
    let _ = ORIGINAL_SOFT.compare_exchange(u64::MAX, before, Ordering::SeqCst, Ordering::SeqCst);
    Ok((before, nofile_soft()))
}

/// The soft limit a command should get back, if the daemon raised its own.
pub(crate) fn child_nofile_limit() -> Option<u64> {
    let v = ORIGINAL_SOFT.load(Ordering::SeqCst);
    (v != u64::MAX).then_some(v)
}

/// Running sessions a soft limit of `soft` descriptors allows.
pub fn running_allowed(soft: u64) -> u64 {
    soft.saturating_sub(fd_reserve(soft)) / FDS_PER_RUNNING_SESSION
}

/// Descriptors kept free under a soft limit of `soft`.
fn fd_reserve(soft: u64) -> u64 {
    (soft / 4).clamp(MIN_FD_RESERVE, FD_RESERVE)
}

/// The default most running sessions: what the fd and process limits allow, within
/// `MIN_DEFAULT_MAX_RUNNING`..=`MAX_DEFAULT_MAX_RUNNING`.
pub fn default_max_running() -> usize {
    let fds = running_allowed(nofile_soft());
    // Each session is at least one process; leave half of the user's process limit to others.
    let procs = getrlimit(Resource::Nproc).current.map_or(u64::MAX, |n| n / 2);
    let allowed = usize::try_from(fds.min(procs)).unwrap_or(usize::MAX);
    allowed.clamp(MIN_DEFAULT_MAX_RUNNING, MAX_DEFAULT_MAX_RUNNING)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_counts_a_reserve_and_a_cost_per_session() {
        assert_eq!(running_allowed(32), 0);
        assert_eq!(running_allowed(100), (100 - MIN_FD_RESERVE) / FDS_PER_RUNNING_SESSION);
        // `ulimit -n 256`: a quarter kept, 24 running sessions allowed (was none).
        assert_eq!(running_allowed(256), (256 - 64) / FDS_PER_RUNNING_SESSION);
        assert_eq!(running_allowed(1024), (1024 - FD_RESERVE) / FDS_PER_RUNNING_SESSION);
        assert_eq!(running_allowed(u64::MAX), (u64::MAX - FD_RESERVE) / FDS_PER_RUNNING_SESSION);
        let d = default_max_running();
        assert!((MIN_DEFAULT_MAX_RUNNING..=MAX_DEFAULT_MAX_RUNNING).contains(&d));
    }
}
