//! The harness's one error type: what failed, in a sentence a person can act on.

use std::path::Path;

/// What went wrong in a bench run.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// An I/O error, with what was being done.
    #[error("{what}: {source}")]
    Io {
        /// What the harness was doing.
        what: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The daemon answered with an error, broke the protocol or could not be reached.
    #[error("daemon: {0}")]
    Client(#[from] stockade_client::ClientError),
    /// Anything else (a peer that misbehaved, a timeout, bad arguments).
    #[error("{0}")]
    Other(String),
}

/// The harness's result type.
pub type Result<T> = std::result::Result<T, BenchError>;

impl BenchError {
    /// An I/O error with context.
    pub fn io(what: impl Into<String>, source: std::io::Error) -> BenchError {
        BenchError::Io { what: what.into(), source }
    }

    /// An I/O error about a path.
    pub fn path(what: &str, path: &Path, source: std::io::Error) -> BenchError {
        BenchError::Io { what: format!("{what} {}", path.display()), source }
    }

    /// A plain message.
    pub fn msg(m: impl Into<String>) -> BenchError {
        BenchError::Other(m.into())
    }
}

impl From<serde_json::Error> for BenchError {
    fn from(e: serde_json::Error) -> BenchError {
        BenchError::Other(format!("JSON: {e}"))
    }
}
