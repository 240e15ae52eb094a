//! The daemon's errors: why it could not start (its WebSocket door included), and how engine
//! errors become JSON-RPC errors.

use std::net::SocketAddr;
use std::path::PathBuf;

use stockade_engine::{EngineError, StateDirError};
use stockade_log::OutputError;
use stockade_proto::rpc::{RpcError, code};

/// Why the daemon could not start or serve.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// Another daemon holds the lock of this state directory.
    #[error(
        "another stockade daemon (pid {pid}) is already running for {home}; stop it with `stockade daemon stop` or use another --home"
    )]
    AlreadyRunning {
        /// The live daemon's pid (0 when its lock file holds none yet).
        pid: u32,
        /// The state directory.
        home: PathBuf,
    },
    /// Something answers on the socket path although this home's lock is free.
    #[error("{path} is served by another process; stop it or choose another --socket")]
    SocketInUse {
        /// The socket path.
        path: PathBuf,
    },
    /// Something other than a socket (a symlink, a file) sits at the socket path.
    #[error("{path} exists and is not a socket; refusing to replace it (remove it yourself)")]
    NotASocket {
        /// The socket path.
        path: PathBuf,
    },
    /// The state directory is not usable.
    #[error(transparent)]
    StateDir(#[from] StateDirError),
    /// The engine could not be set up.
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// The WebSocket door could not be set up (token file, bind).
    #[error(transparent)]
    Ws(#[from] WsSetupError),
    /// An OS error while setting up or serving.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

/// Why the WebSocket door could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum WsSetupError {
    /// The token file cannot be used.
    #[error("token file {path}: {problem}")]
    TokenFile {
        /// The token file.
        path: PathBuf,
        /// What is wrong and what to do.
        #[source]
        problem: stockade_proto::token::TokenFileError,
    },
    /// A clear-text door on an address other machines can reach.
    #[error(
        "refusing to serve WebSocket connections on {addr} without TLS: the token and all output would cross the network in clear; pass --tls-cert and --tls-key, bind a loopback address, or accept the risk with --insecure-plaintext"
    )]
    Plaintext {
        /// The address asked for.
        addr: SocketAddr,
    },
    /// The TLS certificate or key cannot be used.
    #[error("TLS file {path}: {problem}; pass a PEM certificate chain with --tls-cert and its key with --tls-key", path = .path.display())]
    Tls {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        problem: String,
    },
    /// A metrics address other machines can reach, without a token to ask scrapes for.
    #[error(
        "the metrics address {addr} is not loopback, so scrapes must present the door's token: pass --token-file FILE (or a read-only --metrics-token-file FILE), or bind --metrics to a loopback address"
    )]
    MetricsToken {
        /// The address asked for.
        addr: SocketAddr,
    },
    /// A clear-text metrics address other machines can reach.
    #[error(
        "refusing to serve metrics on {addr} without TLS: the token would cross the network in clear; pass --tls-cert and --tls-key, bind --metrics to a loopback address, or accept the risk with --insecure-plaintext"
    )]
    MetricsPlaintext {
        /// The address asked for.
        addr: SocketAddr,
    },
    /// The E2B door's listener could not be bound.
    #[error(
        "cannot listen for the E2B door on {addr}: {source}; choose another address or port with --e2b"
    )]
    E2bBind {
        /// The address asked for.
        addr: SocketAddr,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A clear-text E2B door other machines can reach.
    #[error(
        "refusing to serve the E2B door on {addr} without TLS: the token and all output would cross the network in clear; pass --tls-cert and --tls-key, listen on 127.0.0.1, or accept the risk with --insecure-plaintext"
    )]
    E2bPlaintext {
        /// The address asked for.
        addr: SocketAddr,
    },
    /// The metrics listener could not be bound.
    #[error(
        "cannot listen for metrics on {addr}: {source}; choose another address or port with --metrics"
    )]
    MetricsBind {
        /// The address asked for.
        addr: SocketAddr,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The listener could not be bound.
    #[error(
        "cannot listen for WebSocket connections on {addr}: {source}; choose another address or port with --ws"
    )]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

impl DaemonError {
    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> DaemonError {
        DaemonError::Io { context: context.into(), source }
    }
}

/// A JSON-RPC error with this code and sentence.
pub(crate) fn rpc_error(code: i64, message: impl Into<String>) -> RpcError {
    RpcError { code, message: message.into(), data: None }
}

/// An engine error as a JSON-RPC error.
pub(crate) fn from_engine(e: EngineError) -> RpcError {
    let code = match &e {
        EngineError::NoSuchSession(_) => code::NO_SUCH_SESSION,
        EngineError::LimitReached(_) => code::LIMIT_REACHED,
        EngineError::Spawn(_) => code::SPAWN_FAILED,
        EngineError::Invalid(_) => code::INVALID_PARAMS,
        EngineError::NotSupported(_) => code::NOT_SUPPORTED,
        EngineError::ShuttingDown => code::SHUTTING_DOWN,
        EngineError::Resource(_) => code::RESOURCE,
        EngineError::StateDir(_) => code::STORAGE,
        EngineError::Output(o) => return from_output(o),
    };
    rpc_error(code, e.to_string())
}

/// An output-log error as a JSON-RPC error.
pub(crate) fn from_output(e: &OutputError) -> RpcError {
    let code = match e {
        OutputError::BadRegex { .. } | OutputError::Unsupported(_) => code::INVALID_PARAMS,
        OutputError::IndexUnavailable(_) => code::NOT_SUPPORTED,
        OutputError::ReadRaced => code::INTERNAL_ERROR,
        OutputError::GrepTimedOut { .. } => code::LIMIT_REACHED,
        OutputError::GrepCancelled => code::SHUTTING_DOWN,
        _ => code::STORAGE,
    };
    rpc_error(code, e.to_string())
}

/// A blocking task that panicked or was cancelled.
pub(crate) fn join_error(e: tokio::task::JoinError) -> RpcError {
    rpc_error(code::INTERNAL_ERROR, format!("an internal task failed: {e}"))
}
