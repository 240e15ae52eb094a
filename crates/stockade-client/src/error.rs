//! What can go wrong talking to the daemon. Every variant displays as one plain sentence that
//! says what to do.

use std::path::PathBuf;
use std::time::Duration;

/// An error from [`Client`](crate::Client).
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// Nothing answers on the socket and auto-start is off.
    #[error("no daemon is running for {home}; start one with `stockade daemon start`", home = .home.display())]
    NotRunning {
        /// The state directory.
        home: PathBuf,
        /// The socket that did not answer.
        socket: PathBuf,
    },
    /// Auto-start could not even begin: the state directory or the daemon's log is unusable
    /// (so there is no log to point at).
    #[error("could not start the daemon: {reason}; pass a writable --home (or STOCKADE_HOME)")]
    AutostartUnprepared {
        /// Why, naming the path.
        reason: String,
    },
    /// Auto-start spawned a daemon, but no socket came up.
    #[error("could not start the daemon: {reason} (see {log})", log = .log.display())]
    AutostartFailed {
        /// Why, in a few words.
        reason: String,
        /// The daemon's log (`$STOCKADE_HOME/daemon.log`).
        log: PathBuf,
    },
    /// The socket exists but could not be used (permissions, not a socket, …).
    #[error("cannot connect to the daemon at {socket}: {source}", socket = .socket.display())]
    Connect {
        /// The socket path.
        socket: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The daemon answered the call with a JSON-RPC error.
    #[error("{message}")]
    Rpc {
        /// The method called.
        method: String,
        /// The JSON-RPC error code (see `stockade_proto::rpc::code`).
        code: i64,
        /// The daemon's sentence.
        message: String,
    },
    /// The daemon did not answer within the call's deadline.
    #[error("the daemon did not answer `{method}` within {} s", .after.as_secs())]
    Timeout {
        /// The method called.
        method: String,
        /// How long the client waited.
        after: Duration,
    },
    /// The daemon closed the connection before answering.
    #[error(
        "the daemon closed the connection during `{method}` (did it stop or crash? see its daemon.log)"
    )]
    Disconnected {
        /// The method called.
        method: String,
    },
    /// One response line exceeded the client's bound.
    #[error(
        "the daemon's answer to `{method}` is larger than {limit} bytes; ask for less (e.g. a smaller max_bytes)"
    )]
    ResponseTooLarge {
        /// The method called.
        method: String,
        /// The bound, in bytes.
        limit: usize,
    },
    /// The daemon sent something that is not a valid answer.
    #[error("the daemon sent an invalid answer to `{method}`: {detail}")]
    Protocol {
        /// The method called.
        method: String,
        /// What was wrong.
        detail: String,
    },
    /// An earlier call on this connection failed mid-answer, so the connection is unusable.
    #[error("this connection to the daemon is unusable after an earlier failure; connect again")]
    Poisoned,
    /// Reading or writing the socket failed.
    #[error("talking to the daemon failed during `{method}`: {source}")]
    Io {
        /// The method called.
        method: String,
        /// The OS error.
        source: std::io::Error,
    },
}

impl ClientError {
    /// The JSON-RPC error code, when the daemon answered with an error.
    pub fn rpc_code(&self) -> Option<i64> {
        match self {
            ClientError::Rpc { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// Whether the daemon said it has no session with that id.
    pub fn is_no_such_session(&self) -> bool {
        self.rpc_code() == Some(stockade_proto::rpc::code::NO_SUCH_SESSION)
    }
}
