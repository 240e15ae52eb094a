//! A deadline per WebSocket frame after authentication: the bytes a peer sends are followed
//! through the frame layout as they are read (header, extended length, mask, payload), so the
//! daemon knows when a frame is under way and since when. A frame must be complete within
//! [`FRAME_BASE`] plus a second per MiB it declares; a peer that starts one and stalls (448 of
//! them used to hold every connection slot) has its connection closed with 1008. A connection
//! idle between frames is never timed out here: clients wait on long polls for minutes.

use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;

/// The time every frame gets, whatever its size.
pub(crate) const FRAME_BASE: Duration = Duration::from_secs(30);
/// What a frame's declared length adds: one second per this many bytes (1 MiB/s, so the
/// largest request, 16 MiB, has 46 s).
const BYTES_PER_SECOND: u64 = 1 << 20;

/// Test hook (feature `test-hooks` only): milliseconds instead of [`FRAME_BASE`].
#[cfg(feature = "test-hooks")]
pub(crate) const FRAME_BASE_ENV: &str = "STOCKADE_TEST_WS_FRAME_BASE_MS";

/// The base deadline in use ([`FRAME_BASE`] unless a test shortened it).
pub(crate) fn frame_base() -> Duration {
    #[cfg(feature = "test-hooks")]
    if let Some(ms) = std::env::var(FRAME_BASE_ENV).ok().and_then(|v| v.parse().ok()) {
        return Duration::from_millis(ms);
    }
    FRAME_BASE
}

/// Where the peer is in its current frame.
#[derive(Debug, Default)]
struct Position {
    /// Header bytes seen of the current frame (0 between frames).
    header: [u8; 14],
    have: usize,
    /// Payload bytes still to come once the header is complete.
    payload_left: u64,
    /// When the current frame's first byte arrived, and the length it declared (0 until known).
    started: Option<Instant>,
    declared: u64,
}

impl Position {
    /// Header length once the first two bytes are known: 2, the extended length (0, 2 or 8)
    /// and the mask key (4 when the mask bit is set).
    fn header_len(&self) -> Option<usize> {
        if self.have < 2 {
            return None;
        }
        let ext = match self.header[1] & 0x7f {
            126 => 2,
            127 => 8,
            _ => 0,
        };
        let mask = if self.header[1] & 0x80 != 0 { 4 } else { 0 };
        Some(2 + ext + mask)
    }

    fn payload_len(&self) -> u64 {
        match self.header[1] & 0x7f {
            126 => u64::from(u16::from_be_bytes([self.header[2], self.header[3]])),
            127 => {
                let mut b = [0u8; 8];
                b.copy_from_slice(&self.header[2..10]);
                u64::from_be_bytes(b)
            }
            n => u64::from(n),
        }
    }

    /// Follows `bytes` through the frame layout.
    fn feed(&mut self, mut bytes: &[u8], now: Instant) {
        while !bytes.is_empty() {
            if self.started.is_none() {
                self.started = Some(now);
                self.declared = 0;
            }
            let complete_header = self.header_len().is_some_and(|len| self.have >= len);
            if !complete_header {
                self.header[self.have] = bytes[0];
                self.have += 1;
                bytes = &bytes[1..];
                if let Some(len) = self.header_len()
                    && self.have == len
                {
                    self.payload_left = self.payload_len();
                    self.declared = self.payload_left;
                    if self.payload_left == 0 {
                        self.end_frame();
                    }
                }
                continue;
            }
            let take = self.payload_left.min(bytes.len() as u64);
            self.payload_left -= take;
            // `take` is at most `bytes.len()`.
            bytes = &bytes[usize::try_from(take).unwrap_or(bytes.len())..];
            if self.payload_left == 0 {
                self.end_frame();
            }
        }
    }

    fn end_frame(&mut self) {
        self.have = 0;
        self.payload_left = 0;
        self.started = None;
        self.declared = 0;
    }

    /// When the frame under way must be complete, if one is.
    fn deadline(&self, base: Duration) -> Option<Instant> {
        let started = self.started?;
        Some(started + base + Duration::from_secs(self.declared / BYTES_PER_SECOND))
    }
}

/// The position of one connection's reading side, shared with the code that enforces it.
#[derive(Debug, Clone, Default)]
pub(crate) struct FrameClock(Arc<Mutex<Position>>);

impl FrameClock {
    fn with<R>(&self, f: impl FnOnce(&mut Position) -> R) -> R {
        f(&mut self.0.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// When the frame under way must be complete (`None` between frames).
    pub(crate) fn deadline(&self, base: Duration) -> Option<Instant> {
        self.with(|p| p.deadline(base))
    }

    /// Resolves once a frame has been under way past its deadline (checked at least every
    /// `base / 4`, and at the deadline itself); never between frames.
    pub(crate) async fn overdue(&self, base: Duration) {
        let step = (base / 4).max(Duration::from_millis(10));
        loop {
            let now = Instant::now();
            match self.deadline(base) {
                Some(at) if at <= now => return,
                Some(at) => tokio::time::sleep_until(at.min(now + step)).await,
                None => tokio::time::sleep(step).await,
            }
        }
    }
}

/// A connection's reading side with its bytes followed by a [`FrameClock`]; writes pass through.
pub(crate) struct Watched<S> {
    inner: S,
    clock: FrameClock,
}

impl<S> Watched<S> {
    pub(crate) fn new(inner: S, clock: FrameClock) -> Self {
        Watched { inner, clock }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = polled {
            let new = &buf.filled()[before..];
            if !new.is_empty() {
                let now = Instant::now();
                self.clock.with(|p| p.feed(new, now));
            }
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A masked client frame with `len` payload bytes.
    fn frame(len: usize) -> Vec<u8> {
        let mut f = vec![0x81];
        match len {
            0..=125 => f.push(0x80 | len as u8),
            126..=0xffff => {
                f.push(0x80 | 126);
                f.extend_from_slice(&(len as u16).to_be_bytes());
            }
            _ => {
                f.push(0x80 | 127);
                f.extend_from_slice(&(len as u64).to_be_bytes());
            }
        }
        f.extend_from_slice(&[1, 2, 3, 4]);
        f.extend(std::iter::repeat_n(b'x', len));
        f
    }

    #[test]
    fn whole_frames_leave_no_frame_under_way_however_they_are_split() {
        let base = Duration::from_secs(1);
        let mut bytes = Vec::new();
        for len in [0, 1, 125, 126, 300, 65_535, 65_536, 200_000] {
            bytes.extend(frame(len));
        }
        for chunk in [1, 2, 3, 7, 13, 4096, bytes.len()] {
            let mut p = Position::default();
            for piece in bytes.chunks(chunk) {
                p.feed(piece, Instant::now());
            }
            assert!(p.deadline(base).is_none(), "split in {chunk}: {p:?}");
        }
    }

    #[test]
    fn a_frame_cut_anywhere_is_under_way_with_a_deadline_by_its_size() {
        let base = Duration::from_secs(1);
        let f = frame(3 << 20);
        for cut in [1, 2, 5, 9, 14, 100, f.len() - 1] {
            let mut p = Position::default();
            let now = Instant::now();
            // A whole frame first, then the cut one: the clock starts at the cut one's first byte.
            let mut bytes = frame(10);
            bytes.extend_from_slice(&f[..cut]);
            p.feed(&bytes, now);
            let deadline = p.deadline(base).unwrap_or_else(|| panic!("cut at {cut}: no deadline"));
            let extra = if cut >= 14 { Duration::from_secs(3) } else { Duration::ZERO };
            assert_eq!(deadline, now + base + extra, "cut at {cut}");
        }
    }
}
