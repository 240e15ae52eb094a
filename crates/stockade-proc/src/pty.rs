//! Pseudo-terminals: the pair a PTY session runs on, and the operations on its master side.
//!
//! [`spawn_pty`](super::spawn_pty) opens a pair here, makes the slave the child's stdin, stdout,
//! stderr *and* controlling terminal (`setsid` then `TIOCSCTTY` in the child, through the same
//! spawn path as every other session: cgroup placement, pidfd, marker), and hands the master back.
//! The master is `O_CLOEXEC` and never reaches the child; the parent's copy of the slave is closed
//! as soon as the child has it, so reading the master ends (`EIO` on Linux, which the drain takes
//! as end of file) once the last process holding the terminal is gone.
//!
//! Why not `portable-pty`: its `CommandBuilder` spawns the child itself, which would bypass our
//! `pre_exec` (cgroup placement before `exec`), the pidfd the tree is reaped and verified through,
//! and the stage pipe that tells a containment failure from an exec failure. `rustix::pty` gives
//! the pair and nothing else, which is all we need.
//!
//! The master is shared by two users: the drain reads it (it sets `O_NONBLOCK`, a property of the
//! open file description, so every duplicate shares it) and the session writes input and resizes
//! through a duplicate ([`try_clone_master`]). Writes go through
//! [`write_input`], which is non-blocking and bounded.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, OwnedFd};

use rustix::fs::{Mode, OFlags};
use rustix::pty::OpenptFlags;
use rustix::termios::{SpecialCodeIndex, Winsize};
use stockade_proto::rpc::PtySize;

use super::input::{InputError, write_input};

/// Largest number of rows a PTY may have (a screen render allocates rows × cols cells).
pub(crate) const MAX_PTY_ROWS: u16 = 500;
/// Largest number of columns a PTY may have.
pub(crate) const MAX_PTY_COLS: u16 = 1000;
/// `TERM` a PTY session gets unless the caller's environment sets one.
pub(crate) const DEFAULT_TERM: &str = "xterm-256color";

/// Why a PTY operation failed.
#[derive(Debug, thiserror::Error)]
pub enum PtyError {
    /// The size is zero or larger than `MAX_PTY_ROWS` × `MAX_PTY_COLS`.
    #[error(
        "terminal size {rows}x{cols} is out of range (1..={MAX_PTY_ROWS} rows, 1..={MAX_PTY_COLS} columns)"
    )]
    InvalidSize {
        /// Rows asked for.
        rows: u16,
        /// Columns asked for.
        cols: u16,
    },
    /// A system call on the terminal failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: &'static str,
        /// The OS error.
        source: io::Error,
    },
}

impl PtyError {
    fn io(context: &'static str, e: rustix::io::Errno) -> PtyError {
        PtyError::Io { context, source: e.into() }
    }
}

/// Checks a size against the limits.
pub fn validate_size(size: PtySize) -> Result<(), PtyError> {
    if (1..=MAX_PTY_ROWS).contains(&size.rows) && (1..=MAX_PTY_COLS).contains(&size.cols) {
        Ok(())
    } else {
        Err(PtyError::InvalidSize { rows: size.rows, cols: size.cols })
    }
}

fn winsize(size: PtySize) -> Winsize {
    Winsize { ws_row: size.rows, ws_col: size.cols, ws_xpixel: 0, ws_ypixel: 0 }
}

/// A freshly opened pair: both ends close-on-exec; the spawn dups the slave onto the child's
/// fds 0, 1 and 2 (`dup2` clears close-on-exec on the copies only).
#[derive(Debug)]
pub(crate) struct PtyPair {
    pub(crate) master: OwnedFd,
    pub(crate) slave: OwnedFd,
}

/// Opens a master/slave pair of `size`.
pub(crate) fn open_pair(size: PtySize) -> Result<PtyPair, PtyError> {
    validate_size(size)?;
    let master =
        rustix::pty::openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC)
            .map_err(|e| PtyError::io("open a pseudo-terminal master", e))?;
    rustix::pty::grantpt(&master).map_err(|e| PtyError::io("grantpt", e))?;
    rustix::pty::unlockpt(&master).map_err(|e| PtyError::io("unlockpt", e))?;
    let peer_flags = OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC;
    // TIOCGPTPEER opens the slave without a path lookup (robust to a foreign /dev/pts mount);
    // older kernels fall back to the name.
    let slave = match rustix::pty::ioctl_tiocgptpeer(&master, peer_flags) {
        Ok(fd) => fd,
        Err(_) => {
            let name: CString = rustix::pty::ptsname(&master, Vec::new())
                .map_err(|e| PtyError::io("ptsname", e))?;
            rustix::fs::open(
                name.as_c_str(),
                OFlags::RDWR | OFlags::NOCTTY | OFlags::CLOEXEC,
                Mode::empty(),
            )
            .map_err(|e| PtyError::io("open the pseudo-terminal slave", e))?
        }
    };
    rustix::termios::tcsetwinsize(&master, winsize(size))
        .map_err(|e| PtyError::io("set the terminal size", e))?;
    Ok(PtyPair { master, slave })
}

/// Sets the terminal size (`TIOCSWINSZ` on the master). The kernel sends `SIGWINCH` to the
/// terminal's foreground process group when the size changes.
pub fn resize(master: impl AsFd, size: PtySize) -> Result<(), PtyError> {
    validate_size(size)?;
    rustix::termios::tcsetwinsize(master, winsize(size))
        .map_err(|e| PtyError::io("set the terminal size", e))
}

/// The terminal's current size.
pub fn size(master: impl AsFd) -> Result<PtySize, PtyError> {
    let ws = rustix::termios::tcgetwinsize(master)
        .map_err(|e| PtyError::io("get the terminal size", e))?;
    Ok(PtySize { rows: ws.ws_row, cols: ws.ws_col })
}

/// The terminal's foreground process group (the job a Ctrl-C would interrupt), if it has one.
pub fn foreground_pgrp(master: impl AsFd) -> Result<Option<u32>, PtyError> {
    match rustix::termios::tcgetpgrp(master) {
        Ok(pid) => Ok(u32::try_from(pid.as_raw_nonzero().get()).ok()),
        // No foreground group (e.g. the session leader is gone).
        Err(rustix::io::Errno::NOTTY) => Ok(None),
        Err(e) => Err(PtyError::io("get the terminal's foreground process group", e)),
    }
}

/// A duplicate of the master (same open file description) for writing and resizing while the
/// drain owns the original.
pub fn try_clone_master(master: impl AsFd) -> Result<OwnedFd, PtyError> {
    rustix::io::fcntl_dupfd_cloexec(master, 0).map_err(|e| PtyError::io("duplicate the master", e))
}

/// The "close stdin" of a terminal: types the terminal's end-of-file character (`VEOF`, usually
/// Ctrl-D). In canonical mode it ends `read` with what is on the current line — a program sees
/// end of file when the line is empty, so send it after a newline. Programs in raw mode (editors,
/// REPLs with line editing) decide for themselves what Ctrl-D means.
pub fn send_eof(master: impl AsFd, timeout: std::time::Duration) -> Result<(), InputError> {
    let eof = rustix::termios::tcgetattr(&master)
        .map(|t| t.special_codes[SpecialCodeIndex::VEOF])
        .unwrap_or(0x04);
    write_input(master, &[eof], timeout)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn size_limits() {
        assert!(validate_size(PtySize { rows: 24, cols: 80 }).is_ok());
        assert!(validate_size(PtySize { rows: 0, cols: 80 }).is_err());
        assert!(validate_size(PtySize { rows: 24, cols: 0 }).is_err());
        assert!(validate_size(PtySize { rows: MAX_PTY_ROWS + 1, cols: 80 }).is_err());
        assert!(validate_size(PtySize { rows: 24, cols: MAX_PTY_COLS + 1 }).is_err());
    }

    #[test]
    fn pair_has_the_size_and_resizes() {
        let pair = open_pair(PtySize { rows: 30, cols: 100 }).unwrap();
        assert_eq!(size(&pair.master).unwrap(), PtySize { rows: 30, cols: 100 });
        assert_eq!(size(&pair.slave).unwrap(), PtySize { rows: 30, cols: 100 });
        resize(&pair.master, PtySize { rows: 40, cols: 132 }).unwrap();
        assert_eq!(size(&pair.slave).unwrap(), PtySize { rows: 40, cols: 132 });
        // Both ends are close-on-exec.
        for fd in [&pair.master, &pair.slave] {
            let flags = rustix::io::fcntl_getfd(fd).unwrap();
            assert!(flags.contains(rustix::io::FdFlags::CLOEXEC));
        }
        assert!(resize(&pair.master, PtySize { rows: 0, cols: 1 }).is_err());
    }
}
