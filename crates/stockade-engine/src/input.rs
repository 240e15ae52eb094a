//! A session's input side: the write end of its stdin pipe, or a duplicate of its terminal's
//! master, and the operations on it (`write`, `close_stdin`, `resize`).
//!
//! Who may write what, and when, is decided here so every door refuses the same way: a session
//! started with stdin `/dev/null` takes no input; a pipe whose stdin was closed takes no more; a
//! finished session takes none (its writer is released when it ends, so a kept session holds no
//! descriptor). Writes to one session are serialised (concurrent `write`s would interleave
//! bytes) and bounded in time ([`write_input`](stockade_proc::write_input)): a command that
//! stops reading never holds a daemon thread.

use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use stockade_proto::rpc::PtySize;

use stockade_proc::{InputError, PtyError, pty, write_input_async};

/// What a session's input is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputKind {
    /// A pipe to the command's stdin; closing it is end of file.
    Pipe,
    /// The pseudo-terminal the command runs on (stdin, stdout, stderr and controlling terminal).
    Pty,
}

/// Why a session refused input (or a resize).
#[derive(Debug, thiserror::Error)]
pub enum InputRefused {
    /// Started with stdin `/dev/null`.
    #[error(
        "session {id} was started without input (its stdin is /dev/null); start the command with a terminal (pty) or a stdin pipe to type into it"
    )]
    NoInput {
        /// The session id.
        id: String,
    },
    /// The session has ended.
    #[error("session {id} has ended ({state}); it takes no more input")]
    Ended {
        /// The session id.
        id: String,
        /// Its terminal state, e.g. `exited`.
        state: String,
    },
    /// The stdin pipe was closed with `close_stdin`.
    #[error("the stdin of session {id} was closed (close_stdin); it takes no more input")]
    StdinClosed {
        /// The session id.
        id: String,
    },
    /// `resize` on a session without a terminal.
    #[error(
        "session {id} does not run on a terminal; only sessions started with a pty can be resized"
    )]
    NotPty {
        /// The session id.
        id: String,
    },
    /// The command did not take (all of) the bytes.
    #[error("session {id}: {source}")]
    Input {
        /// The session id.
        id: String,
        /// What happened, with how many bytes got through.
        source: InputError,
    },
    /// A terminal operation failed (or the size is out of range).
    #[error("session {id}: {source}")]
    Pty {
        /// The session id.
        id: String,
        /// The terminal error.
        source: PtyError,
    },
}

/// A session's input handle. The engine creates it at spawn; the session releases it when it
/// ends.
#[derive(Debug)]
pub(crate) struct SessionInput {
    kind: InputKind,
    /// `None` once closed (pipe) or released (the session ended).
    writer: Mutex<Option<Arc<OwnedFd>>>,
    /// One write (or close) at a time.
    serial: tokio::sync::Mutex<()>,
    /// The terminal size, kept so a finished session can still be rendered.
    size: Mutex<Option<PtySize>>,
}

impl SessionInput {
    /// A stdin pipe's write end.
    pub(crate) fn pipe(fd: OwnedFd) -> SessionInput {
        SessionInput::new(InputKind::Pipe, fd, None)
    }

    /// A duplicate of a terminal's master, opened at `size`.
    pub(crate) fn pty(master: OwnedFd, size: PtySize) -> SessionInput {
        SessionInput::new(InputKind::Pty, master, Some(size))
    }

    fn new(kind: InputKind, fd: OwnedFd, size: Option<PtySize>) -> SessionInput {
        SessionInput {
            kind,
            writer: Mutex::new(Some(Arc::new(fd))),
            serial: tokio::sync::Mutex::new(()),
            size: Mutex::new(size),
        }
    }

    fn writer_slot(&self) -> MutexGuard<'_, Option<Arc<OwnedFd>>> {
        self.writer.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn writer(&self) -> Option<Arc<OwnedFd>> {
        self.writer_slot().clone()
    }

    pub(crate) fn size(&self) -> Option<PtySize> {
        *self.size.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether the writer is still there (not closed, not released).
    pub(crate) fn is_open(&self) -> bool {
        self.writer_slot().is_some()
    }

    /// Drop the writer (the session ended): the descriptor closes once no write holds it.
    pub(crate) fn release(&self) {
        self.writer_slot().take();
    }

    /// Write `bytes` within `timeout`. `ended` says whether the session has ended (checked under
    /// the write lock).
    pub(crate) async fn write(
        &self,
        id: &str,
        bytes: Vec<u8>,
        timeout: Duration,
        ended: impl Fn() -> Option<String>,
    ) -> Result<(), InputRefused> {
        let _serial = self.serial.lock().await;
        let writer = self.usable_writer(id, &ended)?;
        write_input_async(writer, bytes, timeout)
            .await
            .map_err(|source| InputRefused::Input { id: id.to_owned(), source })
    }

    /// End of input: a pipe is closed (the command reads end of file); a terminal gets its
    /// end-of-file character ([`pty::send_eof`]).
    pub(crate) async fn close(
        &self,
        id: &str,
        timeout: Duration,
        ended: impl Fn() -> Option<String>,
    ) -> Result<(), InputRefused> {
        let _serial = self.serial.lock().await;
        let writer = self.usable_writer(id, &ended)?;
        match self.kind {
            InputKind::Pipe => {
                // Ours and the slot's are the last references: the pipe closes here.
                self.writer_slot().take();
                drop(writer);
                Ok(())
            }
            InputKind::Pty => tokio::task::spawn_blocking(move || pty::send_eof(&*writer, timeout))
                .await
                .map_err(|e| InputError::Io(std::io::Error::other(e)))
                .and_then(|r| r)
                .map_err(|source| InputRefused::Input { id: id.to_owned(), source }),
        }
    }

    /// Set the terminal size (the kernel sends `SIGWINCH` to the foreground job).
    pub(crate) fn resize(
        &self,
        id: &str,
        size: PtySize,
        ended: impl Fn() -> Option<String>,
    ) -> Result<(), InputRefused> {
        if self.kind != InputKind::Pty {
            return Err(InputRefused::NotPty { id: id.to_owned() });
        }
        let writer = self.usable_writer(id, &ended)?;
        pty::resize(&*writer, size)
            .map_err(|source| InputRefused::Pty { id: id.to_owned(), source })?;
        *self.size.lock().unwrap_or_else(PoisonError::into_inner) = Some(size);
        Ok(())
    }

    fn usable_writer(
        &self,
        id: &str,
        ended: &impl Fn() -> Option<String>,
    ) -> Result<Arc<OwnedFd>, InputRefused> {
        if let Some(state) = ended() {
            return Err(InputRefused::Ended { id: id.to_owned(), state });
        }
        match self.writer() {
            Some(w) => Ok(w),
            None => match ended() {
                Some(state) => Err(InputRefused::Ended { id: id.to_owned(), state }),
                None => Err(InputRefused::StdinClosed { id: id.to_owned() }),
            },
        }
    }
}
