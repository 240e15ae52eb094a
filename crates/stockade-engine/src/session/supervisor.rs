//! The supervisor of a session (see the parent module): the one task that ends it, and what a
//! root's end means under its disk cap and memory limit.

use super::*;

/// In file capture the disk cap is the tree's file-size limit: a root that died of `SIGXFSZ`
/// (or whose shell reported it, 153) once the spool reached the cap ends `killed: disk cap`, as
/// a piped session stopped at its cap does.
fn disk_cap_end(session: &Session, state: SessionState) -> SessionState {
    if session.capture != Capture::File {
        return state;
    }
    sync_file_capture(session);
    let at_cap = session.log.cap_reached().is_some_and(|hit| hit.reason == REASON_DISK_CAP);
    match state {
        SessionState::Signaled { signal: libc::SIGXFSZ }
        | SessionState::Exited { code: 153 /* 128 + SIGXFSZ */ }
            if at_cap =>
        {
            SessionState::Killed { reason: REASON_DISK_CAP.into() }
        }
        state => state,
    }
}

/// A session whose root died of `SIGKILL` (or whose shell reported it, 137) after the kernel's
/// OOM killer acted on its memory limit ends `killed: memory limit 256 MiB`, not as if someone
/// had killed it.
fn memory_limit_end(session: &Session, state: SessionState) -> SessionState {
    let hit = session.tree.limits().and_then(stockade_proc::LimitGroup::memory_limit_hit);
    match (state, hit) {
        (
            SessionState::Signaled { signal: libc::SIGKILL } | SessionState::Exited { code: 137 },
            Some(limit),
        ) => SessionState::Killed {
            reason: format!("memory limit {}", stockade_proto::sandbox::human_bytes(limit)),
        },
        (state, _) => state,
    }
}

/// How long the end of a command waits for its keeper to exit by itself (it does at once when
/// the command left nothing running) before the cleanup starts.
const KEEPER_EXIT_WAIT: Duration = Duration::from_millis(100);

pub(super) struct Supervisor {
    pub(super) session: Arc<Session>,
    pub(super) kill_rx: mpsc::Receiver<KillRequest>,
    pub(super) drain: Option<stockade_log::DrainHandle>,
    pub(super) timeout: Option<Duration>,
    pub(super) grace: Duration,
}

impl Supervisor {
    pub(super) async fn run(mut self) {
        let session = Arc::clone(&self.session);
        let ending = self.wait_for_ending().await;
        let default_opts = TerminateOptions { grace: self.grace, ..TerminateOptions::default() };
        // Whatever ended the session, the one terminate routine runs over the tree, so nothing
        // it started outlives it.
        let (state, report, reply) = match ending {
            Ending::Root { code, signal } => {
                // A keeper that has nothing left to wait for exits right after the command:
                // reaped first, the end of a command that left nothing behind needs no census
                // (with a cgroup). One that stays keeps the orphans the cleanup ends.
                if session.tree.has_keeper() {
                    let _ = tokio::time::timeout(KEEPER_EXIT_WAIT, session.tree.wait_root()).await;
                }
                let report = session.tree.finish_after_exit(&default_opts).await;
                let state = match (code, signal) {
                    (_, Some(signal)) => SessionState::Signaled { signal },
                    (Some(code), None) => SessionState::Exited { code },
                    (None, None) => SessionState::Failed { reason: "exit status unknown".into() },
                };
                (disk_cap_end(&session, memory_limit_end(&session, state)), report, None)
            }
            Ending::Timeout => {
                let report = session.tree.terminate(&default_opts).await;
                (SessionState::TimedOut, report, None)
            }
            Ending::DiskCap(reason) => {
                let report = session.tree.terminate(&default_opts).await;
                (SessionState::Killed { reason }, report, None)
            }
            Ending::Kill(req) => {
                let report = match &req.batch {
                    Some(batch) => batch.terminate(Arc::clone(&session.tree)).await,
                    None => stockade_proc::terminate_one(&session.tree, &req.opts).await,
                };
                (SessionState::Killed { reason: req.reason }, report, Some(req.reply))
            }
        };
        // The root (the keeper, with one) is gone now, or about to be: reap it.
        let _ = tokio::time::timeout(Duration::from_millis(500), session.tree.wait_root()).await;
        self.finish_drain().await;
        let cleanup =
            (!report.pids_signalled.is_empty() || !report.terminated).then(|| report.clone());
        session.finalize(SessionEnd { state, wall_time: session.started.elapsed(), cleanup }).await;
        if let Some(input) = &session.input {
            input.release(); // a finished session holds no descriptor
        }
        session.tree.release_root_fd();
        if let Some(reply) = reply {
            let _ = reply.send(report);
        }
        // Answer kill requests that raced with the end through the same routine.
        while let Ok(req) = self.kill_rx.try_recv() {
            let _ = req.reply.send(session.tree.terminate(&req.opts).await);
        }
    }

    async fn wait_for_ending(&mut self) -> Ending {
        let session = Arc::clone(&self.session);
        let deadline = self.timeout.map(|t| tokio::time::Instant::now() + t);
        let timeout = async {
            match deadline {
                Some(d) => tokio::time::sleep_until(d).await,
                None => std::future::pending().await,
            }
        };
        let cap_watch = async {
            // In `file` capture the command writes the spool itself: look at it every
            // `LOG_POLL_INTERVAL`. Otherwise the drain's writes publish the log's progress: wait
            // for the spool to stop, so a thousand quiet sessions cost no wake-ups.
            let mut tick = tokio::time::interval(LOG_POLL_INTERVAL);
            let mut progress = session.log.subscribe();
            loop {
                if session.capture == Capture::File {
                    tick.tick().await;
                    sync_file_capture(&session);
                } else if progress.wait_for(|p| p.cap_reached).await.is_err() {
                    // The log is gone (cannot be while the session holds it): stop watching.
                    std::future::pending::<()>().await;
                }
                // The kill policy is for the session's own disk cap. A full disk (or a failing
                // spool) is the machine's condition, not the command's: the command goes on,
                // its bytes are dropped in a gap and its newest kept in memory.
                if let Some(hit) = session.log.cap_reached()
                    && hit.policy == DiskPolicy::Kill
                    && hit.reason == REASON_DISK_CAP
                    // A root that already ended on its own ended the session: that is its true
                    // end, which the root's branch reports on its next poll.
                    && !session.tree.command_ended()
                {
                    return hit.reason;
                }
                // A stop not to act on (a full disk, another policy): look again at the log's
                // next change, not at once.
                if session.capture != Capture::File && progress.changed().await.is_err() {
                    std::future::pending::<()>().await;
                }
            }
        };
        tokio::select! {
            exit = session.tree.wait_command() => match exit {
                Ok(exit) => Ending::Root { code: exit.code, signal: exit.signal },
                Err(e) => {
                    tracing::warn!(id = %session.id, error = %e, "cannot wait for the root process");
                    Ending::Root { code: None, signal: None }
                }
            },
            () = timeout => Ending::Timeout,
            Some(req) = self.kill_rx.recv() => Ending::Kill(req),
            reason = cap_watch => Ending::DiskCap(reason),
        }
    }

    /// Let the drain reach EOF; cancel it if a writer nobody could kill still holds a pipe.
    async fn finish_drain(&mut self) {
        let Some(handle) = self.drain.take() else { return };
        let _ = tokio::time::timeout(DRAIN_GRACE, handle.finished()).await;
        if handle.is_finished() {
            // Ended: `join` only takes the outcome.
            let _ = handle.join();
            return;
        }
        tracing::warn!(id = %self.session.id, "output pipe still held open after terminate; stopped reading it");
        handle.cancel();
        let _ = tokio::task::spawn_blocking(move || handle.join()).await;
    }
}

/// In `file` capture the child writes the spool itself; take notice of what it wrote.
pub(super) fn sync_file_capture(session: &Session) {
    if let Err(e) = session.log.sync_from_file() {
        tracing::warn!(id = %session.id, error = %e, "cannot follow the spool file");
    }
}
