//! Writing a log: pipe bytes ([`OutputLog::append`]), a `file`-capture child's bytes
//! ([`OutputLog::sync_from_file`]), the disk cap, and [`OutputLog::finish`].

use std::os::fd::OwnedFd;
use std::os::unix::fs::FileExt;

use rustix::fs::OFlags;
use stockade_proto::{Capture, DiskPolicy, Stream};

use super::index::{self, Transition, stream_slot};
use super::state::Stop;
use super::{
    AppendOutcome, CapHit, OutputError, OutputLog, REASON_DISK_CAP, REASON_DISK_FULL,
    count_newlines, lock, spool,
};
use crate::SessionDir;

/// Chunk size for `file`-capture sync: it only counts newlines in the new bytes, so a small,
/// transient buffer is enough.
const SYNC_CHUNK_BYTES: usize = 16 * 1024;

impl OutputLog {
    /// Appends bytes read from `stream` (pipe capture). Writes the spool, then publishes the
    /// bytes to readers (counters, ring, index), in that order, so a reader never sees a byte
    /// that is not yet readable.
    pub fn append(&self, stream: Stream, data: &[u8]) -> Result<AppendOutcome, OutputError> {
        if !self.writable {
            return Err(OutputError::ReadOnly);
        }
        if !self.config.capture.is_piped() {
            return Err(OutputError::WrongCapture { op: "append", needed: Capture::Pipe });
        }
        let _writer = lock(&self.append_lock);
        let files = self.writer_files()?;
        let (total, stopped, resume_due, index_full, switch) = {
            let st = lock(&self.state);
            if st.finished {
                return Err(OutputError::Finished);
            }
            (
                st.total,
                st.stop.is_some(),
                st.resume_due(),
                st.index.is_full(),
                st.current != Some(stream),
            )
        };
        if data.is_empty() {
            return Ok(AppendOutcome::Written);
        }
        let mut outcome = AppendOutcome::Written;
        let mut written = 0usize;
        let mut new_stop = None;
        if resume_due {
            written = self.resume_spool(&files, data, false);
            if let Some(stop) = lock(&self.state).stop.as_ref() {
                outcome = if stop.hit.at > total {
                    AppendOutcome::CapReached {
                        policy: self.config.disk_policy,
                        reason: stop.hit.reason.clone(),
                    }
                } else {
                    AppendOutcome::NotSpooled { policy: self.config.disk_policy }
                };
            }
        } else if stopped {
            outcome = AppendOutcome::NotSpooled { policy: self.config.disk_policy };
        } else {
            (written, new_stop) = self.write_new(&files, data, total);
            if let Some(hit) = &new_stop {
                let (policy, reason) = (self.config.disk_policy, hit.reason.clone());
                outcome = AppendOutcome::CapReached { policy, reason };
            }
        }
        if switch && index_full {
            self.flush_index();
        }
        let newlines = count_newlines(data);
        let newlines_before_stop =
            new_stop.as_ref().map(|h| count_newlines(&data[..(h.at - total) as usize]));
        {
            let mut st = lock(&self.state);
            if switch {
                let before = st.stream_bytes;
                st.index.push(Transition { offset: total, stream, before });
                st.current = Some(stream);
            }
            if let (Some(hit), Some(nl)) = (new_stop, newlines_before_stop) {
                let newlines_before = st.newlines + nl;
                st.hit = Some(hit.clone());
                st.stop = Some(Stop { hit, newlines_before });
            }
            let keep = st.stop.as_ref().is_none_or(|s| {
                // Past a `kill` cap nothing is kept: the command is ended, the rest is the gap.
                !(s.hit.reason == REASON_DISK_CAP && self.config.disk_policy == DiskPolicy::Kill)
            });
            st.total += data.len() as u64;
            st.stream_bytes[stream_slot(stream)] += data.len() as u64;
            st.newlines += newlines;
            st.last_byte = data.last().copied();
            // What reached the spool is read from there; only bytes it did not take stay in
            // memory (the ring is empty until the spool stops).
            if keep {
                st.ring.advance(written as u64);
                st.ring.push(&data[written..]);
            } else {
                st.ring.advance(data.len() as u64);
            }
            self.progress.send_replace(st.progress());
        }
        Ok(outcome)
    }

    /// Writes new bytes (log offset `total` on) at the spool's end while it takes output: how
    /// many it took, and where it stopped if it stopped (a cap, a full disk, a write error).
    fn write_new(&self, files: &super::Files, data: &[u8], total: u64) -> (usize, Option<CapHit>) {
        self.check_spool(files);
        let spooled = lock(&self.state).spooled;
        let room = self.config.disk_cap.saturating_sub(spooled);
        let n = data.len().min(usize::try_from(room).unwrap_or(usize::MAX));
        let (w, err) = spool::write_at(&files.spool, &data[..n], spooled);
        lock(&self.state).spooled += w as u64;
        let reason = match err {
            Some(e) if spool::is_disk_full(&e) => REASON_DISK_FULL.to_string(),
            Some(e) => format!("spool write error: {e}"),
            None if n < data.len() => REASON_DISK_CAP.to_string(),
            None => return (w, None),
        };
        tracing::warn!(spool = %self.spool_path.display(), %reason, "output spool stopped");
        (w, Some(CapHit { policy: self.config.disk_policy, reason, at: total + w as u64 }))
    }

    /// Writes the pending index records. Failure is recorded (stream filters then report it),
    /// not fatal: the log itself is intact. Caller holds `append_lock`.
    fn flush_index(&self) {
        let Ok(files) = self.writer_files() else { return };
        let (bytes, n, durable) = {
            let st = lock(&self.state);
            let (bytes, n) = st.index.encoded();
            (bytes, n, st.index.durable)
        };
        if n == 0 {
            return;
        }
        let result = index::write_records(&files.index, durable, &bytes[..n]);
        let mut st = lock(&self.state);
        match result {
            Ok(()) => st.index.mark_durable(n / index::RECORD_BYTES),
            Err(e) => {
                tracing::warn!(error = %e, "stream index write failed");
                st.index_error.get_or_insert_with(|| format!("writing {}: {e}", SessionDir::INDEX));
            }
        }
    }

    /// A new `O_WRONLY|O_APPEND` fd on the spool for the child's stdout and stderr (`file`
    /// capture). Give the same fd to both.
    pub fn child_fd(&self) -> Result<OwnedFd, OutputError> {
        if !self.writable {
            return Err(OutputError::ReadOnly);
        }
        if self.config.capture != Capture::File {
            return Err(OutputError::WrongCapture { op: "child_fd", needed: Capture::File });
        }
        spool::open_file(
            &self.writer_files()?.dir_fd,
            &self.dir,
            SessionDir::SPOOL,
            OFlags::WRONLY | OFlags::APPEND,
        )
    }

    /// Picks up what the child wrote to the spool since the last call (`file` capture): counters
    /// and newlines, reading only the new bytes in bounded chunks (nothing is kept). Returns
    /// [`AppendOutcome::CapReached`] (policy `kill`) once the spool reaches the disk cap.
    pub fn sync_from_file(&self) -> Result<AppendOutcome, OutputError> {
        if !self.writable {
            return Err(OutputError::ReadOnly);
        }
        if self.config.capture != Capture::File {
            return Err(OutputError::WrongCapture { op: "sync_from_file", needed: Capture::File });
        }
        let _writer = lock(&self.append_lock);
        self.sync_locked()
    }

    fn sync_locked(&self) -> Result<AppendOutcome, OutputError> {
        let (known, stopped) = {
            let st = lock(&self.state);
            if st.finished {
                return Err(OutputError::Finished);
            }
            (st.total, st.hit.is_some())
        };
        let files = self.writer_files()?;
        let size = spool::file_len(&files.spool)?;
        if size > known {
            let mut buf = vec![0u8; SYNC_CHUNK_BYTES];
            let mut pos = known;
            while pos < size {
                let n = (size - pos).min(SYNC_CHUNK_BYTES as u64) as usize;
                files
                    .spool
                    .read_exact_at(&mut buf[..n], pos)
                    .map_err(|e| OutputError::io("read spool", e))?;
                let chunk = &buf[..n];
                let newlines = count_newlines(chunk);
                let mut st = lock(&self.state);
                if st.current.is_none() {
                    st.index.push(Transition {
                        offset: 0,
                        stream: Stream::Combined,
                        before: [0; 4],
                    });
                    st.current = Some(Stream::Combined);
                }
                st.total += n as u64;
                st.spooled += n as u64;
                st.stream_bytes[stream_slot(Stream::Combined)] += n as u64;
                st.newlines += newlines;
                st.last_byte = chunk.last().copied();
                // Moves the (empty) ring's end along; it keeps no bytes.
                st.ring.advance(n as u64);
                pos += n as u64;
            }
        }
        let mut st = lock(&self.state);
        let outcome = if stopped {
            AppendOutcome::NotSpooled { policy: DiskPolicy::Kill }
        } else if st.total >= self.config.disk_cap {
            // The child writes the file itself: nothing is dropped, the caller must stop it.
            let at = st.total;
            // Everything up to `total` is on disk, and the child's overrun too: no stop, no gap.
            st.hit = Some(CapHit { policy: DiskPolicy::Kill, reason: REASON_DISK_CAP.into(), at });
            AppendOutcome::CapReached { policy: DiskPolicy::Kill, reason: REASON_DISK_CAP.into() }
        } else {
            AppendOutcome::Written
        };
        self.progress.send_replace(st.progress());
        Ok(outcome)
    }

    /// No more output: writes the hot tail after a gap (`keep-head-tail`), flushes the stream
    /// index, releases the ring and writes `log.json`. Idempotent.
    ///
    /// From here on every read is served from the spool (in practice the page cache), exactly
    /// as for a log re-opened with [`OutputLog::open`], so a finished log holds no output bytes
    /// in memory. Everything the ring held is on disk by then, except, after a `kill`-policy
    /// stop, bytes past the cap: those are already reported as the gap `[cap, total)` and are
    /// not shown after the finish (as in a re-opened log).
    pub fn finish(&self) -> Result<(), OutputError> {
        match self.finish_but_meta()? {
            Some(later) => later.write(self),
            None => Ok(()),
        }
    }

    /// [`Self::finish`], except that `log.json` is left to the caller when the spool and the
    /// stream index alone rebuild it exactly (no gap, no stop, no index error, the default
    /// configuration: [`OutputLog::open`] without `log.json` reads the same log), so a session
    /// can publish its end first; `None` when it was written here (or the log was finished
    /// already).
    pub fn finish_but_meta(&self) -> Result<Option<LaterMeta>, OutputError> {
        if !self.writable {
            return Err(OutputError::ReadOnly);
        }
        let _writer = lock(&self.append_lock);
        if lock(&self.state).finished {
            return Ok(None);
        }
        if self.config.capture == Capture::File {
            self.sync_locked()?;
        } else if let Ok(files) = self.writer_files() {
            // Space may have come back since the last output; `keep-head-tail` writes its tail
            // after the gap now, whatever the cap.
            let (full, stopped) = {
                let st = lock(&self.state);
                (st.resume_wanted(), st.stop.is_some())
            };
            if full || (stopped && self.config.disk_policy == DiskPolicy::KeepHeadTail) {
                self.resume_spool(&files, &[], !full);
            }
        }
        self.flush_index();
        let (meta, pending) = {
            let mut st = lock(&self.state);
            st.finished = true;
            // Frees the buffer (reads now go to the spool), except bytes that still wait for
            // the disk: they stay, and `flush_pending` writes them once it has room.
            let pending = st.pending(self.config.disk_policy);
            if !pending {
                st.release_ring();
            }
            (self.meta(&st), pending)
        };
        // A finished log holds no descriptor (later reads open the files themselves), unless
        // bytes still wait to be written.
        if !pending {
            lock(&self.files).take();
        }
        let later = LaterMeta(meta);
        let result =
            if later.rebuilt_alike() { Ok(Some(later)) } else { later.write(self).map(|()| None) };
        self.progress.send_replace(lock(&self.state).progress());
        result
    }
}

/// The `log.json` of a finished log, still to write ([`OutputLog::finish_but_meta`]).
pub struct LaterMeta(super::state::Meta);

impl LaterMeta {
    /// Whether [`OutputLog::open`] without `log.json` would read the same log.
    fn rebuilt_alike(&self) -> bool {
        let m = &self.0;
        m.stop.is_none()
            && m.hit.is_none()
            && m.resumes.is_empty()
            && m.gaps.is_empty()
            && m.index_error.is_none()
            && m.spooled_bytes == m.total_bytes
            && m.config == super::OutputConfig::default()
    }

    /// Writes it for `log` (the log it was taken from), through the directory's spare when it
    /// has one.
    pub fn write(self, log: &OutputLog) -> Result<(), OutputError> {
        log.write_meta_via(&self.0, Some(crate::Spare::Log))
    }
}
