//! A session's record as it stands, and a session made from a record (crash recovery, another
//! process's run): the parts of [`Session`] that read or write what is on disk about it.

use super::*;

impl Session {
    /// The record as it stands now (with the terminal state as soon as it is decided, even
    /// before it is published).
    pub fn record(&self) -> SessionRecord {
        let end = self.end();
        let stats = self.log.stats();
        SessionRecord {
            version: RECORD_VERSION,
            id: self.id.clone(),
            instance: self.instance.clone(),
            command: self.command.clone(),
            cwd: self.cwd.clone(),
            state: end.as_ref().map_or_else(|| self.state(), |e| e.state.clone()),
            owner: self.owner,
            pid: self.tree.root_pid(),
            root_start_time: self.tree.root_start_time(),
            pgid: self.tree.pgid(),
            containment: self.tree.method(),
            cgroup: self.tree.cgroup().map(Path::to_path_buf),
            capture: self.capture,
            spool_path: self.log.spool_path().to_path_buf(),
            started_at_ms: unix_ms(self.started_at),
            finished_at_ms: end.as_ref().map(|e| unix_ms(self.started_at + e.wall_time)),
            source: self.source.clone(),
            idempotency_key: self.idempotency_key.clone(),
            cleanup: end.and_then(|e| e.cleanup),
            totals: Some(RecordTotals {
                total_bytes: stats.total_bytes,
                total_lines: stats.total_lines,
                spooled_bytes: stats.spooled_bytes,
                dropped_bytes: stats.dropped_bytes,
                gaps: stats.gaps,
            }),
        }
    }

    /// Whether the state directory's path no longer leads to the one this engine checked (see
    /// `StateDir::check`): its files are then held back (retried while the daemon watches), so
    /// nothing is written by path into a directory put in its place. Said in the log when
    /// `say` (the end; the retry every second asks without a word).
    /// A session loaded from its record: a finished one (crash recovery, a previous daemon's or
    /// a foreground run's), readable by id and never running again, or one another live
    /// process runs (a foreground `stockade run`), shown as running until its record says
    /// otherwise. It has no supervisor here; `kill` on it goes through the same terminate
    /// routine (and on a finished one only verifies that nothing of it is left).
    pub(crate) fn recovered(
        record: SessionRecord,
        dir: PathBuf,
        log: Arc<OutputLog>,
        tree: Arc<ProcessTree>,
    ) -> Arc<Session> {
        let (kill_tx, _) = mpsc::channel(1);
        // Written at start by the daemon that ran it (`spec_file`); `restart` needs it.
        let spec = crate::spec_file::load(&dir);
        let (state, _) = watch::channel(record.state.clone());
        let finished_ms = record.finished_at_ms.unwrap_or(record.started_at_ms);
        let wall_time = Duration::from_millis(finished_ms.saturating_sub(record.started_at_ms));
        let running_for =
            Duration::from_millis(unix_ms(SystemTime::now()).saturating_sub(record.started_at_ms));
        let started = Instant::now().checked_sub(running_for).unwrap_or_else(Instant::now);
        let terminal = record.state.is_terminal();
        let end = SessionEnd { state: record.state, wall_time, cleanup: record.cleanup };
        let end = terminal.then_some(end);
        Arc::new(Session {
            id: record.id,
            instance: record.instance,
            command: record.command,
            cwd: record.cwd,
            source: record.source,
            idempotency_key: record.idempotency_key,
            capture: record.capture,
            started_at: UNIX_EPOCH + Duration::from_millis(record.started_at_ms),
            started,
            log,
            tree,
            state,
            end: Mutex::new(end),
            kill_tx,
            dir,
            input: None,
            owner: record.owner,
            record_pending: AtomicBool::new(false),
            settled: watch::Sender::new(true),
            own: false,
            spec,
            home: None,
        })
    }
}
