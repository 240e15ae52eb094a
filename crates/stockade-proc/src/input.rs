//! Input to a running command: bounded writes to its stdin pipe or its terminal.
//!
//! A command that stops reading fills the pipe (64 KiB) or the terminal's input queue (4 KiB in
//! canonical mode), and a plain blocking `write` would then wait forever — with the daemon's
//! thread in it. [`write_input`] makes the descriptor non-blocking and waits for room with
//! `poll(2)` until a deadline, then says how far it got. A command that closed its input (or
//! exited) is reported as [`InputError::Closed`], never as a `SIGPIPE` that kills the daemon:
//! the signal is blocked in the writing thread for the duration of the write and a pending one
//! it caused is consumed.
//!
//! Closing a stdin pipe is dropping its `OwnedFd`: the command reads end of file. A terminal has
//! no such thing; see [`send_eof`](super::pty::send_eof).

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::fs::OFlags;
use rustix::io::Errno;

/// How long a `write` op waits for the command to take its input, unless told otherwise.
pub const DEFAULT_INPUT_TIMEOUT: Duration = Duration::from_secs(5);

/// Why input did not (all) reach the command.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    /// The command no longer reads this input: it closed its stdin or exited (`EPIPE`, or `EIO`
    /// on a terminal nobody holds).
    #[error(
        "the command no longer reads its input (closed or exited); {written} of {total} bytes were written"
    )]
    Closed {
        /// Bytes that were written before.
        written: usize,
        /// Bytes asked to write.
        total: usize,
    },
    /// The command did not take the input within the timeout (it is not reading, and the pipe or
    /// terminal buffer is full).
    #[error(
        "the command did not accept input within {timeout:?} (it is not reading); {written} of {total} bytes were written"
    )]
    Timeout {
        /// Bytes that were written before the deadline.
        written: usize,
        /// Bytes asked to write.
        total: usize,
        /// The timeout.
        timeout: Duration,
    },
    /// Another OS error.
    #[error("write input: {0}")]
    Io(#[from] io::Error),
}

impl InputError {
    /// Bytes that did reach the command before the error.
    pub fn written(&self) -> usize {
        match self {
            InputError::Closed { written, .. } | InputError::Timeout { written, .. } => *written,
            InputError::Io(_) => 0,
        }
    }
}

/// Writes all of `bytes` to `fd` (a stdin pipe's write end or a PTY master) within `timeout`.
/// Blocks the calling thread for at most `timeout` (plus scheduling): call it from a blocking
/// thread (the engine wraps it in `spawn_blocking`). Sets `O_NONBLOCK` on the open file description (shared
/// with its duplicates, which is what the drain wants too). Concurrent writers to one fd may
/// interleave: serialise writes per session.
pub fn write_input(fd: impl AsFd, bytes: &[u8], timeout: Duration) -> Result<(), InputError> {
    let fd = fd.as_fd();
    let flags = rustix::fs::fcntl_getfl(fd).map_err(io::Error::from)?;
    if !flags.contains(OFlags::NONBLOCK) {
        rustix::fs::fcntl_setfl(fd, flags | OFlags::NONBLOCK).map_err(io::Error::from)?;
    }
    let _sigpipe = SigpipeBlock::new();
    let deadline = Instant::now() + timeout;
    let total = bytes.len();
    let mut written = 0;
    while written < total {
        match rustix::io::write(fd, &bytes[written..]) {
            Ok(n) => written += n,
            Err(Errno::INTR) => {}
            Err(Errno::AGAIN) => {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(InputError::Timeout { written, total, timeout });
                }
                let ts = Timespec::try_from(left).map_err(|_| io::Error::from(Errno::INVAL))?;
                let mut pfd = [PollFd::new(&fd, PollFlags::OUT)];
                match rustix::event::poll(&mut pfd, Some(&ts)) {
                    Ok(_) | Err(Errno::INTR) => {}
                    Err(e) => return Err(io::Error::from(e).into()),
                }
                // Room, an error or a hang-up: the next write says which.
            }
            Err(Errno::PIPE | Errno::IO) => return Err(InputError::Closed { written, total }),
            Err(e) => return Err(io::Error::from(e).into()),
        }
    }
    Ok(())
}

/// [`write_input`] on tokio's blocking pool, so the async runtime never waits on a command.
pub async fn write_input_async(
    fd: Arc<OwnedFd>,
    bytes: Vec<u8>,
    timeout: Duration,
) -> Result<(), InputError> {
    tokio::task::spawn_blocking(move || write_input(&*fd, &bytes, timeout))
        .await
        .map_err(|e| InputError::Io(io::Error::other(e)))?
}

/// Blocks `SIGPIPE` in this thread while alive; on drop consumes a `SIGPIPE` that became pending
/// meanwhile (one our write caused) and restores the mask.
struct SigpipeBlock {
    old: Option<libc::sigset_t>,
    was_pending: bool,
}

impl SigpipeBlock {
    fn new() -> SigpipeBlock {
        // SAFETY: plain signal-mask syscalls on stack-allocated, initialised sets.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            let mut old: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGPIPE);
            if libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old) != 0 {
                return SigpipeBlock { old: None, was_pending: false };
            }
            SigpipeBlock { old: Some(old), was_pending: sigpipe_pending() }
        }
    }
}

fn sigpipe_pending() -> bool {
    // SAFETY: as above.
    unsafe {
        let mut pending: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut pending);
        libc::sigpending(&mut pending) == 0 && libc::sigismember(&pending, libc::SIGPIPE) == 1
    }
}

impl Drop for SigpipeBlock {
    fn drop(&mut self) {
        let Some(old) = self.old else { return };
        // SAFETY: as above; a zero timeout makes sigtimedwait a non-blocking poll.
        unsafe {
            let already_blocked = libc::sigismember(&old, libc::SIGPIPE) == 1;
            if !self.was_pending && !already_blocked && sigpipe_pending() {
                let mut set: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&mut set);
                libc::sigaddset(&mut set, libc::SIGPIPE);
                let zero = libc::timespec { tv_sec: 0, tv_nsec: 0 };
                libc::sigtimedwait(&set, std::ptr::null_mut(), &zero);
            }
            libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn writes_all_when_there_is_room() {
        let (r, w) = rustix::pipe::pipe().unwrap();
        write_input(&w, b"hello", Duration::from_secs(1)).unwrap();
        let mut buf = [0u8; 8];
        let n = rustix::io::read(&r, &mut buf).unwrap();
        assert_eq!(&buf[..n], b"hello");
    }

    #[test]
    fn full_pipe_times_out_with_progress() {
        let (_r, w) = rustix::pipe::pipe().unwrap();
        let big = vec![b'x'; 4 * 1024 * 1024];
        let err = write_input(&w, &big, Duration::from_millis(50)).unwrap_err();
        match err {
            InputError::Timeout { written, total, .. } => {
                assert!(written > 0 && written < total, "{written}/{total}");
            }
            other => panic!("{other}"),
        }
    }

    #[test]
    fn closed_reader_is_an_error_not_a_signal() {
        let (r, w) = rustix::pipe::pipe().unwrap();
        drop(r);
        let err = write_input(&w, b"x", Duration::from_secs(1)).unwrap_err();
        assert!(matches!(err, InputError::Closed { written: 0, total: 1 }), "{err}");
        assert!(!sigpipe_pending());
    }
}
