//! pidfds: signal and reap one process by a handle that cannot be confused with a recycled pid.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::{PoisonError, RwLock, RwLockReadGuard};

use rustix::event::{PollFd, PollFlags, Timespec, poll};
use rustix::process::{
    Pid, PidfdFlags, WaitId, WaitIdOptions, pidfd_open, pidfd_send_signal, waitid,
};

/// Why a pidfd could not be opened for a given identity.
#[derive(Debug, thiserror::Error)]
pub enum PidFdError {
    /// No process with that pid exists any more.
    #[error("process {pid} is gone")]
    Gone {
        /// The pid asked for.
        pid: u32,
    },
    /// The pid now names a different process (recycled pid): it must not be touched.
    #[error("pid {pid} was reused: expected start time {expected}, found {found:?}")]
    StaleIdentity {
        /// The pid asked for.
        pid: u32,
        /// The start time the caller recorded for it.
        expected: u64,
        /// The start time of the process that holds the pid now (`None` if it vanished mid-check).
        found: Option<u64>,
    },
    /// The pid is not a valid process id (0 or too large).
    #[error("invalid pid {0}")]
    InvalidPid(u32),
    /// `pidfd_open` failed for another reason.
    #[error("pidfd_open({pid}): {source}")]
    Open {
        /// The pid asked for.
        pid: u32,
        /// The OS error.
        source: io::Error,
    },
}

/// A pidfd: a handle on one process (not on a pid number).
///
/// [`PidFd::release`] closes the descriptor once the process is reaped (a finished session holds
/// no fd); from then on the handle answers as for a process that is gone.
#[derive(Debug)]
pub struct PidFd {
    pid: u32,
    fd: RwLock<Option<OwnedFd>>,
}

/// How the root of a tree ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RootExit {
    /// Exit code, when it exited by itself.
    pub code: Option<i32>,
    /// Terminating signal number, when a signal ended it.
    pub signal: Option<i32>,
}

/// The outcome of a non-blocking reap attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reap {
    /// Reaped now, with this status.
    Reaped(RootExit),
    /// Still running (or a zombie that is not ready yet).
    Running,
    /// Not a child of this process (or already reaped): someone else's to reap.
    NotOurs,
}

fn to_pid(pid: u32) -> Option<Pid> {
    i32::try_from(pid).ok().and_then(Pid::from_raw)
}

impl PidFd {
    /// Opens a pidfd for `pid` with no identity check. Sound only when the caller knows the pid
    /// cannot have been recycled, e.g. its own unreaped child.
    pub(crate) fn open_unchecked(pid: u32) -> Result<PidFd, PidFdError> {
        let raw = to_pid(pid).ok_or(PidFdError::InvalidPid(pid))?;
        match pidfd_open(raw, PidfdFlags::empty()) {
            Ok(fd) => Ok(PidFd { pid, fd: RwLock::new(Some(fd)) }),
            Err(rustix::io::Errno::SRCH) => Err(PidFdError::Gone { pid }),
            Err(e) => Err(PidFdError::Open { pid, source: e.into() }),
        }
    }

    /// Wraps a pidfd the kernel handed back with the child (`CLONE_PIDFD`): our unreaped child.
    pub(crate) fn from_child(pid: u32, fd: OwnedFd) -> PidFd {
        PidFd { pid, fd: RwLock::new(Some(fd)) }
    }

    /// Opens a pidfd for the process identified by `pid` *and* `start_time`: open first, then
    /// re-check the start time, then confirm the pidfd's process has not exited. If it has not
    /// exited, the pid could not have been recycled in between, so the start time read was its own.
    /// A live process with a different start time is a recycled pid: refused.
    pub fn open_verified(pid: u32, start_time: u64) -> Result<PidFd, PidFdError> {
        let pidfd = PidFd::open_unchecked(pid)?;
        let found = stockade_procfs::start_time(pid);
        if found != Some(start_time) {
            return Err(if found.is_none() || pidfd.has_exited() {
                PidFdError::Gone { pid }
            } else {
                PidFdError::StaleIdentity { pid, expected: start_time, found }
            });
        }
        Ok(pidfd)
    }

    fn fd(&self) -> RwLockReadGuard<'_, Option<OwnedFd>> {
        self.fd.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// Closes the descriptor (call once the process is reaped and the handle only answers
    /// questions about a process that is gone).
    pub fn release(&self) {
        self.fd.write().unwrap_or_else(PoisonError::into_inner).take();
    }

    /// A duplicate of the descriptor, for registering with a reactor.
    pub(crate) fn try_clone_fd(&self) -> io::Result<OwnedFd> {
        match self.fd().as_ref() {
            Some(fd) => fd.try_clone(),
            None => Err(io::Error::new(io::ErrorKind::NotFound, "the pidfd was released")),
        }
    }

    /// The pid this handle was opened for.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Sends `sig` to the process. `Ok(false)` when it has already exited (zombie or reaped):
    /// there was nothing to signal.
    pub fn signal(&self, sig: super::Signal) -> io::Result<bool> {
        let Some(sig) = rustix::process::Signal::from_named_raw(sig.number()) else {
            return Err(io::Error::from(io::ErrorKind::InvalidInput));
        };
        // A zombie accepts signals without effect: report it as not signalled.
        if self.has_exited() {
            return Ok(false);
        }
        let fd = self.fd();
        let Some(fd) = fd.as_ref() else { return Ok(false) };
        match pidfd_send_signal(fd, sig) {
            Ok(()) => Ok(true),
            Err(rustix::io::Errno::SRCH) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// Whether the process has exited (is a zombie or gone). Never blocks.
    pub fn has_exited(&self) -> bool {
        let fd = self.fd();
        let Some(fd) = fd.as_ref() else { return true };
        let mut fds = [PollFd::new(fd, PollFlags::IN)];
        let now = Timespec { tv_sec: 0, tv_nsec: 0 };
        match poll(&mut fds, Some(&now)) {
            Ok(n) => n > 0,
            // A poll error on a pidfd leaves nothing better to say than "not known to have exited".
            Err(_) => false,
        }
    }

    /// Reaps the process if it is this process's child and has exited. Never blocks.
    pub(crate) fn try_reap(&self) -> io::Result<Reap> {
        let fd = self.fd();
        let Some(fd) = fd.as_ref() else { return Ok(Reap::NotOurs) };
        match waitid(WaitId::PidFd(fd.as_fd()), WaitIdOptions::EXITED | WaitIdOptions::NOHANG) {
            Ok(Some(status)) => Ok(Reap::Reaped(RootExit {
                code: status.exit_status(),
                signal: status.terminating_signal(),
            })),
            Ok(None) => Ok(Reap::Running),
            Err(rustix::io::Errno::CHILD) => Ok(Reap::NotOurs),
            Err(e) => Err(e.into()),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::process::Command;

    struct Reaped(std::process::Child);
    impl Drop for Reaped {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    #[test]
    fn stale_identity_is_refused_and_never_signalled() {
        let child = Reaped(Command::new("sleep").arg("1000").spawn().unwrap());
        let pid = child.0.id();
        let start = stockade_procfs::start_time(pid).unwrap();

        // A recorded identity whose start time does not match is a recycled pid: refused.
        let err = PidFd::open_verified(pid, start + 1).unwrap_err();
        assert!(
            matches!(err, PidFdError::StaleIdentity { pid: p, expected, found: Some(f) }
                if p == pid && expected == start + 1 && f == start),
            "{err:?}"
        );
        // The process was not touched.
        assert_eq!(stockade_procfs::read_stat(pid).map(|s| s.is_zombie()), Some(false));

        // The true identity opens, signals and reaps.
        let fd = PidFd::open_verified(pid, start).unwrap();
        assert!(!fd.has_exited());
        assert!(fd.signal(super::super::Signal::SIGKILL).unwrap());
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !fd.has_exited() {
            assert!(std::time::Instant::now() < deadline, "SIGKILLed child never exited");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(!fd.signal(super::super::Signal::SIGTERM).unwrap());
        assert!(matches!(fd.try_reap().unwrap(), Reap::Reaped(RootExit { signal: Some(9), .. })));
        std::mem::forget(child); // already reaped through the pidfd
    }

    #[test]
    fn gone_pid_is_reported_gone() {
        let mut child = Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        // After reaping, the pid is free: either gone, or (rarely) recycled — never opened as ours.
        match PidFd::open_verified(pid, 0) {
            Err(PidFdError::Gone { .. } | PidFdError::StaleIdentity { .. }) => {}
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn not_our_child_is_not_reaped() {
        // pid 1 is never our child: try_reap must say so rather than steal anything.
        let fd = PidFd::open_unchecked(1).unwrap();
        assert_eq!(fd.try_reap().unwrap(), Reap::NotOurs);
    }
}
