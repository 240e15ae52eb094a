//! The steps of starting a session that need no engine state: the child's stdio, the sources
//! the drain reads, the drain itself, and clean-up of a run that never started. The engine
//! (`Engine::spawn_session`) strings them together.

use std::os::fd::OwnedFd;
use std::path::Path;
use std::sync::Arc;

use stockade_log::{DrainHandle, Drainer, OutputConfig, OutputLog, Prepared};
use stockade_proc::{SpawnedTree, StdioSpec, try_clone_master};
use stockade_proto::{Capture, Stream};

use crate::error::EngineError;
use crate::input::SessionInput;
use crate::run_spec::RunSpec;

/// The child's stdout and stderr: the terminal for a PTY session, one pipe for both (`pipe`
/// capture, whose read end is returned for the drain), a pipe each (`split`), or the spool
/// itself for `file` capture (the child writes to it directly).
///
/// One pipe is what keeps the write order: the kernel queues both streams' writes in the order
/// they happen, so however late the drain reads, nothing can reorder them, and a write of up to
/// `PIPE_BUF` bytes (a line, usually) is never split by the other stream's.
pub(crate) fn child_stdio(
    spec: &RunSpec,
    log: &OutputLog,
) -> Result<(StdioSpec, StdioSpec, Option<OwnedFd>), EngineError> {
    match spec.capture {
        // A PTY session's stdio is the terminal.
        _ if spec.pty.is_some() => Ok((StdioSpec::Null, StdioSpec::Null, None)),
        Capture::Pipe => {
            let (read, write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
                .map_err(|e| EngineError::Resource(format!("cannot make the output pipe: {e}")))?;
            let write2 = write.try_clone().map_err(|e| {
                EngineError::Resource(format!("cannot duplicate the output pipe: {e}"))
            })?;
            Ok((StdioSpec::Fd(write), StdioSpec::Fd(write2), Some(read)))
        }
        Capture::Split => Ok((StdioSpec::Pipe, StdioSpec::Pipe, None)),
        Capture::File => {
            let fd = log.child_fd()?;
            let fd2 = fd.try_clone().map_err(|e| {
                EngineError::Resource(format!("cannot duplicate the spool fd: {e}"))
            })?;
            Ok((StdioSpec::Fd(fd), StdioSpec::Fd(fd2), None))
        }
    }
}

/// What the drain reads of a spawned tree (terminal master, stdout, stderr) and the session's
/// input (its stdin pipe, or a duplicate of the terminal master to write and resize through).
pub(crate) fn take_streams(
    spawned: &mut SpawnedTree,
    spec: &RunSpec,
    id: &str,
    merged: Option<OwnedFd>,
) -> (Vec<(Stream, OwnedFd)>, Option<SessionInput>) {
    let mut sources = Vec::new();
    if let Some(fd) = merged {
        sources.push((Stream::Combined, fd));
    }
    let mut input = spawned.stdin.take().map(SessionInput::pipe);
    if let (Some(master), Some(size)) = (spawned.pty_master.take(), spec.pty) {
        // The drain reads the master; the session writes and resizes through a duplicate.
        match try_clone_master(&master) {
            Ok(writer) => input = Some(SessionInput::pty(writer, size)),
            Err(e) => {
                tracing::warn!(%id, error = %e, "cannot duplicate the terminal; the session takes no input")
            }
        }
        sources.push((Stream::Pty, master));
    }
    if let Some(fd) = spawned.stdout.take() {
        sources.push((Stream::Stdout, fd));
    }
    if let Some(fd) = spawned.stderr.take() {
        sources.push((Stream::Stderr, fd));
    }
    (sources, input)
}

/// The drain of `sources`, when there are any (file capture has none).
pub(crate) fn start_drain_if_any(
    log: &Arc<OutputLog>,
    sources: Vec<(Stream, OwnedFd)>,
) -> Result<Option<DrainHandle>, String> {
    if sources.is_empty() { Ok(None) } else { start_drain(log, sources).map(Some) }
}

/// Starts the thread that reads the session's pipes into its log (and the pipe that cancels it).
/// A test build can be told to fail here (`STOCKADE_TEST_FAIL_AFTER_SPAWN=1`, feature
/// `test-hooks`), to show that a tree whose supervision failed is terminated.
pub(crate) fn start_drain(
    log: &Arc<OutputLog>,
    sources: Vec<(Stream, OwnedFd)>,
) -> Result<DrainHandle, String> {
    #[cfg(feature = "test-hooks")]
    if std::env::var(FAIL_AFTER_SPAWN_ENV).is_ok_and(|v| v == "1") {
        return Err(format!("{FAIL_AFTER_SPAWN_ENV}=1: failing after the spawn"));
    }
    #[cfg(feature = "test-hooks")]
    if std::env::var(CRASH_AFTER_SPAWN_ENV).is_ok_and(|v| v == "1") {
        // The crash window between the spawn and the first record, on demand.
        let _ =
            rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::KILL);
    }
    let drainer = Drainer::global().map_err(|e| format!("cannot start the output reader: {e}"))?;
    drainer.add(Arc::clone(log), sources).map_err(|e| format!("cannot read the output: {e}"))
}

/// The test hook that makes every run fail right after its spawn (feature `test-hooks` only).
#[cfg(feature = "test-hooks")]
pub(crate) const FAIL_AFTER_SPAWN_ENV: &str = "STOCKADE_TEST_FAIL_AFTER_SPAWN";

/// The test hook that SIGKILLs this process right after a spawn, before the session's first
/// record (feature `test-hooks` only).
#[cfg(feature = "test-hooks")]
pub(crate) const CRASH_AFTER_SPAWN_ENV: &str = "STOCKADE_TEST_CRASH_AFTER_SPAWN";

/// Makes the session's output log in `dir` (from a `prepared` slot when there is one) and marks
/// the directory with the run's idempotency key, before anything is spawned. A log that cannot
/// be made leaves no directory.
pub(crate) fn create_log(
    dir: &Path,
    output: OutputConfig,
    prepared: Option<Prepared>,
    key: Option<&str>,
) -> Result<Arc<OutputLog>, EngineError> {
    let log = OutputLog::create_in(dir, output, prepared).map_err(|e| {
        remove_unstarted(dir);
        EngineError::from(e)
    })?;
    if let Some(key) = key {
        crate::key_mark::mark_key(dir, key);
    }
    Ok(Arc::new(log))
}

/// Deletes the directory of a run that never started (its spool is empty, it has no record).
pub(crate) fn remove_unstarted(dir: &Path) {
    if let Err(e) = std::fs::remove_dir_all(dir)
        && e.kind() != std::io::ErrorKind::NotFound
    {
        tracing::warn!(dir = %dir.display(), error = %e, "cannot delete the directory of a run that did not start");
    }
}
