//! The errors the engine answers with.

use stockade_log::OutputError;
use stockade_proc::SpawnError;

use crate::state_dir::StateDirError;

/// Errors the engine answers with.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The state directory is not usable.
    #[error(transparent)]
    StateDir(#[from] StateDirError),
    /// The output log could not be created or read.
    #[error(transparent)]
    Output(#[from] OutputError),
    /// The command could not be started.
    #[error(transparent)]
    Spawn(#[from] SpawnError),
    /// The request is not valid.
    #[error("{0}")]
    Invalid(String),
    /// No session with this id. (Each door adds how to list the sessions in its own words.)
    #[error("no session {0}")]
    NoSuchSession(String),
    /// The session cannot serve this request (e.g. a screen of a session without a terminal).
    #[error("{0}")]
    NotSupported(String),
    /// A configured limit would be exceeded; the sentence says which and what to do.
    #[error("{0}")]
    LimitReached(String),
    /// The engine is shutting down and starts nothing new.
    #[error("the engine is shutting down and starts no new command")]
    ShuttingDown,
    /// The command was spawned but could not be supervised (no output reader, no cancel pipe):
    /// its tree was terminated through the one terminate routine. The request was valid; the
    /// machine is short of a resource (threads, file descriptors, memory).
    #[error("{0}")]
    Resource(String),
}
