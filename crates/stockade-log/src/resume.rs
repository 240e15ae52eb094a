//! A stopped spool takes output again, and a spool cut short outside the daemon is named.
//!
//! While the spool is stopped (a full disk; at the finish, `keep-head-tail`'s cap) the hot
//! tail keeps the newest `retained_cap` bytes: a bounded buffer of what waits to be written.
//! At most every 100 ms (on an append), every second (the daemon's retry of what a full disk
//! held back) and at the finish, the log writes them at the spool's end, oldest first, a chunk at
//! a time, keeping every chunk that was written: the spool continues from where it stopped. If
//! the buffer had to drop its oldest bytes meanwhile, those are one gap, `[where the spool
//! stopped, the oldest byte kept)`, recorded as a [`Resume`] the moment the first byte after it
//! reaches the disk. Once the buffer is written, the new bytes follow and the spool takes output
//! as before. A disk that fills again stops it again at its true end: every lost range is its
//! own named gap, and nothing written before is ever cut back.
//!
//! A spool shorter than the log put there (an operator's `truncate`, a repair) is found before
//! each write and each read (`fstat`): the bytes it lost become one gap ("spool truncated"),
//! and the spool goes on from its new end, so no hole of zeros is ever written or served.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

use super::state::{Resume, State, Stop};
use super::{
    CHUNK_BYTES, CapHit, Files, OutputError, OutputLog, REASON_DISK_CAP, REASON_DISK_FULL,
    count_newlines, lock, spool,
};
use stockade_proto::DiskPolicy;

/// Least time between two tries to resume a stopped spool while output comes (a try on a disk
/// still full costs one failing write).
pub(crate) const RESUME_EVERY: Duration = Duration::from_millis(100);

/// Reason of a gap left by a spool cut short outside the daemon.
pub(crate) const REASON_TRUNCATED: &str = "spool truncated outside stockade";

impl State {
    fn full_stop(&self) -> bool {
        self.stop.as_ref().is_some_and(|s| s.hit.reason == REASON_DISK_FULL)
    }

    /// Whether the spool waits for space to resume (stopped by a full disk).
    pub(super) fn resume_wanted(&self) -> bool {
        self.full_stop()
    }

    /// Whether it is time to try to resume the spool while output comes.
    pub(super) fn resume_due(&self) -> bool {
        self.resume_wanted() && self.resume_tried.is_none_or(|t| t.elapsed() >= RESUME_EVERY)
    }

    /// Whether bytes wait in memory to be written: a full disk stopped the spool, or a
    /// finished `keep-head-tail` log's tail is not written yet.
    pub(super) fn pending(&self, policy: DiskPolicy) -> bool {
        self.stop.is_some()
            && self.ring.len() > 0
            && (self.full_stop() || (self.finished && policy == DiskPolicy::KeepHeadTail))
    }

    /// Newlines in the log before `x`, for `x` in the ring (or at its end).
    fn newlines_before(&self, x: u64) -> u64 {
        self.newlines - self.ring.count_newlines_from(x)
    }

    /// `w` bytes of the ring from `from` reached the spool at its end: the gap before them (if
    /// the ring dropped any) is recorded, and the stop moves past them.
    /// Returns whether a gap was closed (a resume recorded).
    fn spooled_from_ring(&mut self, from: u64, w: u64) -> bool {
        let Some((at, nl_at, reason)) =
            self.stop.as_ref().map(|s| (s.hit.at, s.newlines_before, s.hit.reason.clone()))
        else {
            return false;
        };
        let closed = from > at;
        if closed {
            let resume = Resume {
                log: from,
                phys: self.spooled,
                nl_log: self.newlines_before(from),
                nl_spool: nl_at - self.dropped_newlines(),
                gap_start: at,
                reason,
            };
            self.resumes.push(resume);
        }
        let nl = self.newlines_before(from + w);
        if let Some(stop) = self.stop.as_mut() {
            stop.hit.at = from + w;
            stop.newlines_before = nl;
        }
        self.spooled += w;
        self.ring.drop_before(from + w);
        closed
    }
}

impl OutputLog {
    /// Writes what waits in the ring, then `data` (bytes not yet counted), at the spool's end,
    /// keeping every chunk written; stops at the first that fails. Returns how many bytes of
    /// `data` were written; when all of them were, the spool takes output again (the stop is
    /// cleared), else the stop is where the spool ends. `past_cap`: `keep-head-tail`'s final
    /// tail, which goes after the gap whatever the cap. Caller holds `append_lock`.
    pub(super) fn resume_spool(&self, files: &Files, data: &[u8], past_cap: bool) -> usize {
        lock(&self.state).resume_tried = Some(Instant::now());
        self.check_spool(files);
        let mut buf = Vec::new();
        loop {
            let (from, n, spooled) = {
                let st = lock(&self.state);
                let Some(stop) = st.stop.as_ref() else { return 0 };
                let from = st.ring.start().max(stop.hit.at);
                if from >= st.total {
                    break;
                }
                let n = (st.total - from).min(CHUNK_BYTES as u64).min(self.room(&st, past_cap));
                if n == 0 {
                    drop(st);
                    self.stopped_at_cap();
                    return 0;
                }
                buf.resize(n as usize, 0);
                if !st.ring.copy_to(from, &mut buf) {
                    return 0;
                }
                (from, n, st.spooled)
            };
            let (w, err) = spool::write_at(&files.spool, &buf, spooled);
            if w > 0 {
                // Only a byte on disk closes the gap before it: a try that wrote nothing
                // leaves the gap open, to grow as the ring drops more (one gap, one range).
                if lock(&self.state).spooled_from_ring(from, w as u64) {
                    self.save_layout();
                }
            }
            if err.is_some() || (w as u64) < n {
                return 0;
            }
        }
        // Everything that waited is on disk: the new bytes follow.
        let mut st = lock(&self.state);
        let n = (data.len() as u64).min(self.room(&st, past_cap)) as usize;
        let (w, err) = spool::write_at(&files.spool, &data[..n], st.spooled);
        st.spooled += w as u64;
        if err.is_none() && w == data.len() {
            if let Some(stop) = st.stop.take() {
                tracing::info!(spool = %self.spool_path.display(), at = stop.hit.at, gaps = st.resumes.len(), "output spool resumed");
            }
        } else {
            let at = st.total + w as u64;
            let newlines_before = st.newlines + count_newlines(&data[..w]);
            let reason = match err {
                Some(e) if !spool::is_disk_full(&e) => format!("spool write error: {e}"),
                Some(_) => REASON_DISK_FULL.to_string(),
                None => REASON_DISK_CAP.to_string(),
            };
            let hit = CapHit { policy: self.config.disk_policy, reason, at };
            st.hit = Some(hit.clone());
            st.stop = Some(Stop { hit, newlines_before });
        }
        w
    }

    /// Bytes the spool may still take.
    fn room(&self, st: &State, past_cap: bool) -> u64 {
        if past_cap { u64::MAX } else { self.config.disk_cap.saturating_sub(st.spooled) }
    }

    /// A resume reached the disk cap: the stop is the cap's from now on.
    fn stopped_at_cap(&self) {
        let mut st = lock(&self.state);
        if let Some(stop) = st.stop.as_mut() {
            stop.hit.reason = REASON_DISK_CAP.to_string();
            let hit = stop.hit.clone();
            st.hit = Some(hit);
        }
    }

    /// Tries to write what waits in memory (see [`OutputLog::has_pending`]); once a finished
    /// log has nothing left waiting, its ring is released, its files closed and `log.json`
    /// written again. Returns whether bytes still wait.
    pub fn flush_pending(&self) -> bool {
        if !self.writable {
            return false;
        }
        let _writer = lock(&self.append_lock);
        let (finished, full) = {
            let st = lock(&self.state);
            if !st.pending(self.config.disk_policy) {
                return false;
            }
            (st.finished, st.resume_wanted())
        };
        let Ok(files) = self.writer_files() else { return false };
        self.resume_spool(&files, &[], !full);
        let still = lock(&self.state).pending(self.config.disk_policy);
        if finished && !still {
            lock(&self.state).release_ring();
            lock(&self.files).take();
            if let Err(e) = self.rewrite_meta() {
                tracing::debug!(error = %e, "log.json still cannot be written");
            }
        }
        still
    }

    /// Whether output waits in memory for the spool to take it: a full disk stopped it (while
    /// the command runs, or after it ended), or a finished `keep-head-tail` log's tail could
    /// not be written yet. [`OutputLog::flush_pending`] tries again.
    pub fn has_pending(&self) -> bool {
        lock(&self.state).pending(self.config.disk_policy)
    }

    /// Looks at the spool's length (an `fstat`): if it is shorter than what the log put there,
    /// names what it lost (see [`OutputLog::note_truncation`]). Caller holds `append_lock`
    /// (or the log is not written).
    pub(super) fn check_spool(&self, files: &Files) {
        if let Ok(len) = spool::file_len(&files.spool)
            && len < lock(&self.state).spooled
        {
            self.note_truncation(&files.spool, len);
        }
    }

    /// The spool was cut to `len` bytes outside the daemon: what it lost becomes one gap (with
    /// any gap inside it) and the spool goes on from `len`. Caller holds `append_lock` (or the
    /// log is not written).
    fn note_truncation(&self, spool: &File, len: u64) {
        let (keep, phys0, nl_spool0, log0) = {
            let st = lock(&self.state);
            let keep = st.resumes.partition_point(|r| r.phys < len);
            match keep.checked_sub(1).map(|k| &st.resumes[k]) {
                Some(r) => (keep, r.phys, r.nl_spool, r.log),
                None => (0, 0, 0, 0),
            }
        };
        let nl_spool = nl_spool0 + newlines_in(spool, phys0, len).unwrap_or(0);
        let mut st = lock(&self.state);
        if len >= st.spooled {
            return;
        }
        let cut = log0 + (len - phys0);
        let end = st.disk_end();
        let nl_end = st.stop.as_ref().map_or(st.newlines, |s| s.newlines_before);
        st.resumes.truncate(keep);
        if end > cut {
            st.resumes.push(Resume {
                log: end,
                phys: len,
                nl_log: nl_end,
                nl_spool,
                gap_start: cut,
                reason: REASON_TRUNCATED.to_string(),
            });
        }
        tracing::warn!(spool = %self.spool_path.display(), from = cut, to = end, "the spool was cut short outside stockade; its lost bytes are a gap");
        st.spooled = len;
        drop(st);
        self.save_layout();
    }

    /// Writes `log.json` of a log still being written, after a gap was recorded, so a reader
    /// after its writer died knows where each stretch of the spool starts (best effort: the
    /// end writes it again).
    fn save_layout(&self) {
        if !self.writable {
            return;
        }
        let meta = {
            let st = lock(&self.state);
            if st.finished {
                return;
            }
            self.meta(&st)
        };
        if let Err(e) = self.write_meta(&meta) {
            tracing::debug!(error = %e, "log.json not written at a gap");
        }
    }
}

/// Newlines in the spool's bytes `[from, to)` (bounded chunks).
fn newlines_in(spool: &File, from: u64, to: u64) -> Result<u64, OutputError> {
    let mut buf = vec![0u8; CHUNK_BYTES.min(to.saturating_sub(from) as usize)];
    let (mut pos, mut n) = (from, 0);
    while pos < to {
        let k = (to - pos).min(CHUNK_BYTES as u64) as usize;
        spool.read_exact_at(&mut buf[..k], pos).map_err(|e| OutputError::io("scan spool", e))?;
        n += count_newlines(&buf[..k]);
        pos += k as u64;
    }
    Ok(n)
}
