//! A spool a full disk stopped takes output again once space returns.
//!
//! While the disk is full the hot tail keeps the newest bytes. At most every 100 ms (on an
//! append), and at the finish, the log tries to write them, then the new bytes, right after
//! the head, where `keep-head-tail` would put its final tail: log `[T, total)` at spool offset
//! `S..` (`S` where the spool stopped, `T` the hot tail's oldest byte). If every byte is
//! written, the spool goes on from there and the log keeps one exact gap `[S, T)`; if not, what
//! was written is cut off again and a later one tries again.
//!
//! A log has one gap. If the disk fills again after a resume, the spool is cut back to where it
//! first stopped (freeing what the resume wrote) and the gap runs to the hot tail again, exact
//! and named; the next resume starts from there.

use std::time::{Duration, Instant};

use super::state::{State, TailSegment};
use super::{CHUNK_BYTES, Files, OutputLog, REASON_DISK_FULL, lock, spool};

/// Least time between two tries to resume a stopped spool while output comes (a try on a disk
/// still full costs one failing write).
pub(crate) const RESUME_EVERY: Duration = Duration::from_millis(100);

impl State {
    /// Whether a full disk stopped the spool and it took output again since.
    pub(super) fn resumed(&self) -> bool {
        self.tail.is_some() && !self.finished && self.full_stop()
    }

    fn full_stop(&self) -> bool {
        self.stop.as_ref().is_some_and(|s| s.hit.reason == REASON_DISK_FULL)
    }

    /// Whether the spool waits for space to resume (stopped by a full disk, not resumed).
    pub(super) fn resume_wanted(&self) -> bool {
        self.full_stop() && self.tail.is_none()
    }

    /// Whether it is time to try to resume the spool while output comes.
    pub(super) fn resume_due(&self) -> bool {
        self.resume_wanted() && self.resume_tried.is_none_or(|t| t.elapsed() >= RESUME_EVERY)
    }
}

impl OutputLog {
    /// Writes the hot tail, then `data` (bytes not yet counted), after the head. `true` when
    /// every byte reached the spool: the tail segment is set and `spooled` counts the hot tail
    /// (the caller adds `data`). Caller holds `append_lock`.
    pub(super) fn resume_spool(&self, files: &Files, data: &[u8]) -> bool {
        let (stop, from, end) = {
            let mut st = lock(&self.state);
            st.resume_tried = Some(Instant::now());
            let Some(stop) = st.stop.as_ref() else { return false };
            (stop.hit.at, st.ring.start().max(stop.hit.at), st.total)
        };
        let mut buf = vec![0u8; CHUNK_BYTES.min((end - from) as usize)];
        let (mut pos, mut phys) = (from, stop);
        let mut ok = true;
        while ok && pos < end {
            let n = (end - pos).min(CHUNK_BYTES as u64) as usize;
            ok = lock(&self.state).ring.copy_to(pos, &mut buf[..n])
                && spool::write_at(&files.spool, &buf[..n], phys).1.is_none();
            pos += n as u64;
            phys += n as u64;
        }
        if !ok || spool::write_at(&files.spool, data, phys).1.is_some() {
            // Frees what this try wrote: the head alone stays on disk.
            let _ = files.spool.set_len(stop);
            return false;
        }
        let mut st = lock(&self.state);
        let newlines_before = st.newlines - st.ring.count_newlines_from(from);
        st.tail = Some(TailSegment { log_start: from, phys_start: stop, newlines_before });
        // The ring's bytes are on disk now; the next append's `advance` empties it.
        st.spooled = phys;
        tracing::info!(spool = %self.spool_path.display(), gap_start = stop, gap_end = from, "output spool resumed after a full disk");
        true
    }

    /// A resumed spool failed again: cut it back to the head, so the log keeps its one gap
    /// (now up to the hot tail, which takes the bytes that follow). Caller holds `append_lock`.
    pub(super) fn stop_again(&self, files: &Files, reason: &str) {
        let mut st = lock(&self.state);
        let Some(stop) = st.stop.as_ref().map(|s| s.hit.at) else { return };
        let _ = files.spool.set_len(stop);
        st.spooled = stop;
        st.tail = None;
        st.resume_tried = Some(Instant::now());
        tracing::warn!(spool = %self.spool_path.display(), %reason, "output spool stopped again after a resume");
    }
}
