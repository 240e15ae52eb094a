//! The drain's reads: a command's pipes go into its log whether or not anyone reads, so the
//! command never blocks on a full pipe. The shared drain thread ([`super::Drainer`]) makes
//! every read through [`read_once`], into one fixed [`DRAIN_BUF_BYTES`] buffer, the only memory
//! it uses. When the log says the disk cap was hit, the drain keeps reading (the log counts the
//! bytes and keeps the newest in its hot tail) so the command is not stuck on a full pipe while
//! the caller terminates it.
//!
//! A PTY master is drained the same way, as [`Stream::Pty`]; on Linux it reads `EIO` (not 0)
//! once every process holding the terminal has closed it, which is its end of file.

use std::os::fd::AsFd;

use rustix::fs::OFlags;
use rustix::io::Errno;
use stockade_proto::Stream;

use super::{AppendOutcome, CapHit, OutputError, OutputLog};

/// The drain's read buffer (allocated once per drain).
pub(crate) const DRAIN_BUF_BYTES: usize = 64 * 1024;
/// Pipe capacity the drain asks for (best effort), so a burst fits without the writer blocking.
const PIPE_CAPACITY_BYTES: usize = 1024 * 1024;

/// What a drain did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DrainSummary {
    /// Bytes read from all sources.
    pub bytes: u64,
    /// The disk cap (or a full disk) was hit; with the `kill` policy the caller terminates.
    pub cap_reached: Option<CapHit>,
    /// The drain stopped because of [`super::DrainHandle::cancel`], not end of file on every
    /// source.
    pub cancelled: bool,
}

/// Makes a source ready to drain: non-blocking, and a large pipe buffer where allowed.
pub(super) fn prepare_source(fd: impl AsFd) -> Result<(), OutputError> {
    rustix::fs::fcntl_setfl(&fd, OFlags::NONBLOCK)
        .map_err(|e| OutputError::io("set pipe non-blocking", e.into()))?;
    // Best effort: not every fd is a pipe, and the limit may be lower.
    let _ = rustix::pipe::fcntl_setpipe_size(&fd, PIPE_CAPACITY_BYTES);
    Ok(())
}

/// What one read got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Read {
    /// Bytes, now in the log.
    Data,
    /// Nothing to read right now (a spurious wakeup, or the cancel sweep reached the end of
    /// what was buffered): the source stays open.
    Empty,
    /// End of file (or an error treated as one): the source is done.
    End,
}

/// One read of `fd` into the log.
pub(super) fn read_once(
    log: &OutputLog,
    stream: Stream,
    fd: impl AsFd,
    buf: &mut [u8],
    summary: &mut DrainSummary,
) -> Result<Read, OutputError> {
    let n = loop {
        match rustix::io::read(&fd, &mut *buf) {
            Ok(n) => break n,
            Err(Errno::INTR) => continue,
            // Poll said ready but another wakeup took it (or nothing is buffered in the cancel
            // sweep): not the end of the stream.
            Err(Errno::AGAIN) => return Ok(Read::Empty),
            // A PTY master reads EIO once the last holder of the slave closed it: end of file.
            Err(Errno::IO) if stream == Stream::Pty => return Ok(Read::End),
            Err(e) => {
                tracing::warn!(error = %e, stream = stream.as_str(), "reading command output failed; treating as end of file");
                return Ok(Read::End);
            }
        }
    };
    if n == 0 {
        return Ok(Read::End);
    }
    summary.bytes += n as u64;
    if let AppendOutcome::CapReached { policy, reason } = log.append(stream, &buf[..n])? {
        let at = log.cap_reached().map_or(0, |c| c.at);
        summary.cap_reached = Some(CapHit { policy, reason, at });
    }
    Ok(Read::Data)
}
