//! Making a log: a fresh session directory ([`OutputLog::create`]), a finished one
//! ([`OutputLog::open`], from `log.json`), or one whose writer died (rebuilt from its files).

use std::fs::File;
use std::os::fd::OwnedFd;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::{Arc, Mutex};

use rustix::fs::OFlags;
use stockade_proto::{Capture, DiskPolicy, Stream};
use tokio::sync::watch;

use super::hot_tail::HotTail;
use super::index::{self, IndexView, PendingIndex, stream_slot};
use super::state::{META_VERSION, Meta, Resume, State};
use super::{CHUNK_BYTES, Files, OutputConfig, OutputError, OutputLog, count_newlines, spool};
use crate::SessionDir;

/// A session directory made ahead of time, opened: the empty spool and stream index in it
/// (see `slots.rs`). Its descriptors stay valid when the directory is renamed.
pub struct Prepared {
    dir_fd: OwnedFd,
    spool: File,
    index: File,
}

impl Prepared {
    /// Makes `dir` (parent must exist, `dir` must not; mode 0700) with an empty spool and
    /// stream index, exactly as [`OutputLog::create`] does.
    pub fn create(dir: &Path) -> Result<Prepared, OutputError> {
        let dir_fd = spool::create_session_dir(dir)?;
        let spool = spool::create_file(&dir_fd, dir, SessionDir::SPOOL)?;
        let index = spool::create_file(&dir_fd, dir, SessionDir::INDEX)?;
        Ok(Prepared { dir_fd, spool, index })
    }

    /// Opens a directory made ahead of time and moved to `dir`: its empty spool and stream
    /// index, never through a symlink.
    pub fn open(dir: &Path) -> Result<Prepared, OutputError> {
        let dir_fd = spool::open_session_dir(dir)?;
        let open = |name| spool::open_file(&dir_fd, dir, name, OFlags::RDWR).map(File::from);
        let spool = open(SessionDir::SPOOL)?;
        let index = open(SessionDir::INDEX)?;
        Ok(Prepared { dir_fd, spool, index })
    }
}

impl OutputLog {
    /// Creates the session directory `dir` (parent must exist, `dir` must not; mode 0700), the
    /// spool and the stream index in it.
    pub fn create(dir: impl AsRef<Path>, config: OutputConfig) -> Result<OutputLog, OutputError> {
        Self::create_in(dir.as_ref(), config, None)
    }

    /// [`OutputLog::create`] over a directory already made and moved to `dir`, when there is
    /// one.
    pub fn create_in(
        dir: &Path,
        config: OutputConfig,
        prepared: Option<Prepared>,
    ) -> Result<OutputLog, OutputError> {
        if config.capture == Capture::File && config.disk_policy == DiskPolicy::KeepHeadTail {
            return Err(OutputError::Unsupported(
                "file capture supports only the kill disk policy: the child writes the spool itself, so the middle cannot be dropped".into(),
            ));
        }
        let Prepared { dir_fd, spool, index: index_file } = match prepared {
            Some(p) => p,
            None => Prepared::create(dir)?,
        };
        // `file` capture keeps no ring: the child writes the spool, reads go to it by offset.
        let ring_cap = match config.capture {
            Capture::Pipe | Capture::Split => config.retained_cap,
            Capture::File => 0,
        };
        Ok(Self::assemble(dir, config, dir_fd, spool, index_file, State::new(ring_cap), true))
    }

    /// A log over its opened files and state.
    fn assemble(
        dir: &Path,
        config: OutputConfig,
        dir_fd: OwnedFd,
        spool: File,
        index_file: File,
        state: State,
        writable: bool,
    ) -> OutputLog {
        let (progress, _) = watch::channel(state.progress());
        // Only a log being written keeps its files open; reads of any other open them per call.
        let files =
            writable.then(|| Arc::new(Files { dir_fd, spool, index: Arc::new(index_file) }));
        OutputLog {
            spool_path: dir.join(SessionDir::SPOOL),
            dir: dir.to_path_buf(),
            config,
            files: Mutex::new(files),
            append_lock: Mutex::new(()),
            state: Mutex::new(state),
            progress,
            writable,
        }
    }

    /// Opens the log in `dir` read-only (for `stockade read`/`grep` from another process).
    /// Without a readable `log.json` (the writer died, or it is empty or damaged) the counters
    /// are rebuilt by scanning the spool and the stream index; gap information is then unknown.
    pub fn open(dir: impl AsRef<Path>) -> Result<OutputLog, OutputError> {
        let dir = dir.as_ref();
        let dir_fd = spool::open_session_dir(dir)?;
        let spool = File::from(spool::open_file(&dir_fd, dir, SessionDir::SPOOL, OFlags::RDONLY)?);
        let index_file =
            File::from(spool::open_file(&dir_fd, dir, SessionDir::INDEX, OFlags::RDONLY)?);
        let meta = match spool::open_file(&dir_fd, dir, SessionDir::META, OFlags::RDONLY) {
            // An empty or damaged `log.json` (a full disk, an OS crash before it reached the
            // disk) is rebuilt from the spool like a missing one.
            Ok(fd) => match Self::read_meta(fd, &dir.join(SessionDir::META)) {
                Ok(meta) => Some(meta),
                Err(e) => {
                    tracing::warn!(error = %e, "rebuilding the log's counters from its spool");
                    None
                }
            },
            Err(OutputError::NotFound { .. }) => None,
            Err(e) => return Err(e),
        };
        let (config, state) = match meta {
            // Written mid-run at a gap, and its writer died: the layout up to there, the rest
            // from the spool.
            Some(m) if !m.finished => {
                (m.config.clone(), Self::recover(&spool, &index_file, Some(m))?)
            }
            Some(m) => {
                let mut st = State::new(0);
                st.total = m.total_bytes;
                st.stream_bytes = m.stream_bytes.slots();
                st.newlines = m.newlines;
                st.last_byte = m.last_byte;
                st.ring = HotTail::empty_at(0, m.total_bytes);
                st.spooled = m.spooled_bytes;
                st.hit = m.hit.or_else(|| m.stop.as_ref().map(|s| s.hit.clone()));
                st.stop = m.stop;
                st.resumes = m.resumes;
                if let Some(t) = m.tail {
                    // Version 1: one gap, the tail written after it; the spool went on there.
                    if let Some(stop) = st.stop.take() {
                        st.resumes = vec![Resume {
                            log: t.log_start,
                            phys: t.phys_start,
                            nl_log: t.newlines_before,
                            nl_spool: stop.newlines_before,
                            gap_start: stop.hit.at,
                            reason: stop.hit.reason,
                        }];
                    }
                }
                st.index = PendingIndex::new(m.index_records);
                st.index_error = m.index_error;
                st.finished = true;
                (m.config, st)
            }
            None => (OutputConfig::default(), Self::recover(&spool, &index_file, None)?),
        };
        Ok(Self::assemble(dir, config, dir_fd, spool, index_file, state, false))
    }

    fn read_meta(fd: OwnedFd, path: &Path) -> Result<Meta, OutputError> {
        let meta: Meta = serde_json::from_reader(std::io::BufReader::new(File::from(fd)))
            .map_err(|e| OutputError::Meta { path: path.to_path_buf(), message: e.to_string() })?;
        if meta.version != META_VERSION && meta.version != 1 {
            return Err(OutputError::Meta {
                path: path.to_path_buf(),
                message: format!("unknown version {}", meta.version),
            });
        }
        Ok(meta)
    }

    /// Counters of an unfinished log, from its files (bounded chunks): the whole spool, or, when
    /// `base` (a `log.json` written mid-run, at a gap) says where the log stood, what the spool
    /// took after it, following the last stretch (bytes that waited in memory when the writer
    /// died are gone, unnamed).
    fn recover(spool: &File, index_file: &File, base: Option<Meta>) -> Result<State, OutputError> {
        let mut st = State::new(0);
        let len = spool::file_len(spool)?;
        let from = base.as_ref().map_or(0, |m| m.spooled_bytes.min(len));
        let mut buf = vec![0u8; CHUNK_BYTES];
        let mut pos = from;
        while pos < len {
            let n = (len - pos).min(CHUNK_BYTES as u64) as usize;
            spool
                .read_exact_at(&mut buf[..n], pos)
                .map_err(|e| OutputError::io("scan spool", e))?;
            st.newlines += count_newlines(&buf[..n]);
            st.last_byte = buf[..n].last().copied();
            pos += n as u64;
        }
        let mut total = len;
        if let Some(m) = base {
            let (end, nl) = m
                .stop
                .as_ref()
                .map_or((m.total_bytes, m.newlines), |s| (s.hit.at, s.newlines_before));
            total = end + (len - from);
            st.newlines += nl;
            if len == from && m.stop.is_none() {
                st.last_byte = m.last_byte;
            }
            st.resumes = m.resumes;
            st.hit = m.hit;
        }
        let records =
            index_file.metadata().map_err(|e| OutputError::io("stat stream index", e))?.len()
                / index::RECORD_BYTES as u64;
        st.total = total;
        st.spooled = len;
        st.ring = HotTail::empty_at(0, total);
        st.index = PendingIndex::new(records);
        st.finished = true;
        if records > 0 {
            let view = IndexView::new(
                Arc::new(index_file.try_clone().map_err(|e| OutputError::io("dup index", e))?),
                records,
                &[],
                total,
            );
            let last = view.get(records - 1)?;
            for s in [Stream::Stdout, Stream::Stderr, Stream::Pty, Stream::Combined] {
                st.stream_bytes[stream_slot(s)] =
                    last.stream_bytes_before(s, total.max(last.offset));
            }
        }
        Ok(st)
    }
}
