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
    /// The socket is served by another user's process: nothing was sent to it.
    #[error(
        "refusing the daemon at {socket}: it runs as uid {uid}, not as this user (uid {euid}), so it could read what you send and forge its answers; use a state directory of your own (set STOCKADE_HOME)",
        socket = .socket.display()
    )]
    ForeignDaemon {
        /// The socket path.
        socket: PathBuf,
        /// The uid of the process serving it.
        uid: u32,
        /// Our effective uid.
        euid: u32,
    },
    /// The state directory belongs to another user: no daemon is started there.
    #[error(
        "{home} belongs to uid {owner}, not to this user (uid {euid}), so its owner could read the sessions' output or put their own daemon in its place; use a state directory of your own (set STOCKADE_HOME) or remove it",
        home = .home.display()
    )]
    ForeignHome {
        /// The state directory.
        home: PathBuf,
        /// Its owner.
        owner: u32,
        /// Our effective uid.
        euid: u32,
    },
    /// The state directory lets other users write to it.
    #[error(
        "{home} has mode {mode:04o}, so other users could put files in it or swap the daemon's socket; Stockade does not change a directory it did not create: make it private with `chmod 700 {home}` or choose another STOCKADE_HOME",
        home = .home.display()
    )]
    LooseHome {
        /// The state directory.
        home: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// The `--remote` address is not a WebSocket URL this client can use.
    #[error("the remote daemon address {url} is unusable: {problem}")]
    BadRemote {
        /// The address given.
        url: String,
        /// What is wrong with it.
        problem: String,
    },
    /// The token file for a remote daemon cannot be used.
    #[error("cannot use the token file {path}: {problem}", path = .path.display())]
    TokenFile {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        problem: String,
    },
    /// Nothing answered at the remote address (or the network failed before the upgrade).
    #[error(
        "cannot reach the daemon at {url}: {detail}; check the address and that the daemon runs with --ws"
    )]
    RemoteConnect {
        /// The address.
        url: String,
        /// The network's answer.
        detail: String,
    },
    /// The remote door answered the upgrade with an HTTP error (401: wrong token; 503: full).
    #[error("the daemon at {url} refused the connection (HTTP {status}): {}", refused_hint(*.status, .body))]
    RemoteRefused {
        /// The address.
        url: String,
        /// The HTTP status.
        status: u16,
        /// The daemon's explanation.
        body: String,
    },
    /// TLS with the remote door failed (untrusted certificate, wrong name, no TLS there, …).
    #[error(
        "TLS with the daemon at {url} failed: {detail}; pass --ca-file with the CA that signed its certificate, or use ws:// for a door without TLS"
    )]
    Tls {
        /// The address.
        url: String,
        /// What rustls said.
        detail: String,
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
    /// The request is larger than the daemon reads; nothing was sent.
    #[error(
        "the `{method}` request has {size} bytes, more than the daemon's limit of {limit}; send less (e.g. a shorter command or environment, or a file the command reads)"
    )]
    RequestTooLarge {
        /// The method called.
        method: String,
        /// The request's size, in bytes.
        size: usize,
        /// The limit, in bytes.
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
    /// The daemon's process is stopped (`kill -STOP`, state `T`, or held by a debugger): it
    /// answers nothing until it is continued.
    #[error("the daemon (pid {pid}) is stopped: `kill -CONT {pid}` lets it answer again; {}", stopped_hint(.method, *.sent))]
    DaemonStopped {
        /// The daemon's pid.
        pid: u32,
        /// The method called.
        method: String,
        /// Whether the request was sent before the stop was seen (it runs once the daemon is
        /// continued) or not (nothing reached it).
        sent: bool,
    },
    /// The daemon's process runs but does nothing: its heartbeat stopped while a call waited.
    #[error("the daemon (pid {pid}) is hung: it has done nothing for {} s (its heartbeat stopped) and `{method}` has no answer; see its daemon.log, or end it (`kill {pid}`) and run any command to start a new one", .still.as_secs_f32().round())]
    DaemonHung {
        /// The daemon's pid.
        pid: u32,
        /// The method called (it was sent, and may be carried out if the daemon moves again).
        method: String,
        /// How long its heartbeat has been still.
        still: Duration,
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

/// What became of a call to a stopped daemon.
fn stopped_hint(method: &str, sent: bool) -> String {
    if sent {
        format!("`{method}` was sent before it stopped and is carried out when it continues")
    } else {
        format!("`{method}` was not sent")
    }
}

/// What to do about a refused upgrade.
fn refused_hint(status: u16, body: &str) -> String {
    match status {
        401 | 403 => "the token was not accepted; check --token-file (STOCKADE_TOKEN_FILE)".into(),
        _ if !body.is_empty() => body.to_owned(),
        _ => "is that a Stockade WebSocket door?".into(),
    }
}

impl ClientError {
    /// Whether the connection to the daemon is lost or could not be made (a retry on a new
    /// connection may succeed): what `logs -f` and `attach` reconnect after.
    pub fn is_connection_lost(&self) -> bool {
        matches!(
            self,
            ClientError::Disconnected { .. }
                | ClientError::Poisoned
                | ClientError::Io { .. }
                | ClientError::Timeout { .. }
                | ClientError::RemoteConnect { .. }
                | ClientError::NotRunning { .. }
                | ClientError::Connect { .. }
        ) || matches!(self, ClientError::RemoteRefused { status: 503, .. })
    }

    /// Whether a call that failed this way may still have taken effect: the request went out
    /// and no answer came back (no answer in time, the connection closed or broke mid-call).
    /// A keyed call that fails this way names its idempotency key, which finds out.
    pub fn may_have_taken_effect(&self) -> bool {
        matches!(
            self,
            ClientError::Timeout { .. } | ClientError::Disconnected { .. } | ClientError::Io { .. }
        ) || matches!(
            self,
            ClientError::DaemonStopped { sent: true, .. } | ClientError::DaemonHung { .. }
        )
    }

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
