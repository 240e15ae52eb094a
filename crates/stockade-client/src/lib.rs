//! A client for the Stockade daemon.
//!
//! The daemon owns every background session; a client only sends requests and reads answers.
//! The protocol is JSON-RPC 2.0, one message per line, over the Unix socket
//! `$STOCKADE_HOME/stockade.sock`; the messages are `stockade_proto::rpc`'s `*Params`/`*Result`
//! types, so this crate never reaches into daemon internals.
//!
//! - [`Client::connect`] finds the daemon for a state directory. When nothing answers and
//!   [`ConnectOptions::autostart`] is set, it starts one (see `autostart`): the current
//!   executable, `--home H daemon run`, detached, logging to `$STOCKADE_HOME/daemon.log`.
//! - [`Client::call`] sends one request of a [`Method`] (`client.call::<method::Kill>(params)`)
//!   and waits, with a deadline, for its typed answer. A JSON-RPC error comes back as
//!   [`ClientError::Rpc`] with its code and message. Each answer line is read into memory only up
//!   to [`MAX_RESPONSE_BYTES`].
//! - [`raw_bytes`] decodes the exact bytes of a `raw` read; [`Client::read_bytes`] reads them
//!   without base64 (`encoding: "binary"`: the bytes follow the answer on the wire), falling back
//!   to base64 with a daemon that predates it.
//!
//! - With [`ConnectOptions::remote`] set, the same calls go to a remote daemon's WebSocket door
//!   (`ws://` or `wss://`, bearer token from a private file; see `remote`). Both ways share one
//!   transport (`transport`): a line out, a line back.
//! - [`reconnect`] connects again after a lost connection, for callers that resume from a
//!   cursor (`logs -f`, `attach`).
//!
//! The client is blocking: one connection, one request at a time. Open several clients for
//! concurrent calls (a long-poll `read` holds its connection until it answers).

#![deny(missing_docs)]

mod autostart;
mod error;
mod peer;
mod remote;
mod transport;
mod watch;
mod wire;

use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;
use stockade_proto::rpc::{
    self, Method, ReadEncoding, ReadParams, ReadResult, Request, Response, method,
};

pub use error::ClientError;
pub use remote::RemoteOptions;

use crate::transport::Transport;

/// The names of the daemon's files in the state directory, as the daemon spells them.
pub use stockade_proto::home::{LOCK_FILE, LOG_FILE, SOCKET_FILE};
/// Largest answer line the client reads (bytes). Generous, never unbounded.
pub const MAX_RESPONSE_BYTES: usize = 64 * 1024 * 1024;
/// Deadline for an answer, on top of any wait the call itself asks for (`wait_ms`, `yield_ms`,
/// `grace_ms`).
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(60);
/// How long auto-start waits for the socket to accept.
pub const DEFAULT_START_TIMEOUT: Duration = Duration::from_secs(5);
/// Set (to anything but `0`) to make [`Client::read_bytes`] use base64 answers only, as with a
/// daemon that predates binary reads.
pub const NO_BINARY_READ_ENV: &str = "STOCKADE_NO_BINARY_READ";
/// Most bytes one base64 raw read answers with (the daemon clamps to it): what a fallback asks.
const MAX_BASE64_READ: usize = 4 * 1024 * 1024;

/// The socket of the daemon for state directory `home`.
pub fn socket_path(home: &Path) -> PathBuf {
    home.join(SOCKET_FILE)
}

/// The lock file of the daemon for state directory `home`.
pub fn lock_path(home: &Path) -> PathBuf {
    home.join(LOCK_FILE)
}

/// The log of an auto-started daemon for state directory `home`.
pub fn log_path(home: &Path) -> PathBuf {
    home.join(LOG_FILE)
}

/// The pid recorded in `daemon.lock`, if the file exists and holds one. The process may be
/// gone: check with [`pid_alive`].
pub fn daemon_pid(home: &Path) -> Option<u32> {
    let text = std::fs::read_to_string(lock_path(home)).ok()?;
    text.split_whitespace().next()?.parse().ok().filter(|&p| p > 0)
}

/// Whether a process with this pid exists (a zombie counts as gone): the workspace's one
/// liveness check, from `stockade-procfs`.
pub use stockade_procfs::pid_alive;

/// A fresh idempotency key for one mutating call (`run`, `write`, `restart`): `who` (e.g.
/// `cli`, `mcp`), this process, the time and a count, so no two calls on this machine share one.
/// A retry of the same call passes the same key.
pub fn new_idempotency_key(who: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let n = COUNT.fetch_add(1, Ordering::Relaxed);
    format!("{who}-{}-{nanos:x}-{n}", std::process::id())
}

/// Decode the exact bytes of a `raw` read (`bytes_b64`); `None` when the answer has none.
pub fn raw_bytes(result: &ReadResult) -> Result<Option<Vec<u8>>, ClientError> {
    let Some(b64) = &result.bytes_b64 else { return Ok(None) };
    rpc::decode_bytes(b64).map(Some).map_err(|e| ClientError::Protocol {
        method: <method::Read as Method>::NAME.into(),
        detail: format!("bytes_b64: {e}"),
    })
}

/// How to reach the daemon.
#[derive(Debug, Clone)]
pub struct ConnectOptions {
    /// The state directory the daemon serves.
    pub home: PathBuf,
    /// The socket (default `$home/stockade.sock`).
    pub socket: Option<PathBuf>,
    /// Start a daemon when none answers.
    pub autostart: bool,
    /// The executable to start as the daemon (default: the current executable, which must be
    /// the `stockade` binary).
    pub daemon_program: Option<PathBuf>,
    /// How long auto-start waits for the socket.
    pub start_timeout: Duration,
    /// Deadline for each answer, on top of the wait a call asks for.
    pub call_timeout: Duration,
    /// A remote daemon's WebSocket door instead of the local socket (no auto-start then).
    pub remote: Option<RemoteOptions>,
}

impl ConnectOptions {
    /// Options for the daemon of `home`, with auto-start on.
    pub fn new(home: impl Into<PathBuf>) -> ConnectOptions {
        ConnectOptions {
            home: home.into(),
            socket: None,
            autostart: true,
            daemon_program: None,
            start_timeout: DEFAULT_START_TIMEOUT,
            call_timeout: DEFAULT_CALL_TIMEOUT,
            remote: None,
        }
    }

    /// The socket these options connect to.
    pub fn socket_path(&self) -> PathBuf {
        self.socket.clone().unwrap_or_else(|| socket_path(&self.home))
    }
}

/// Whether a connect error means "nothing listens there" (no socket file, or a stale one).
fn is_not_listening(e: &std::io::Error) -> bool {
    matches!(e.kind(), std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused)
}

/// How long [`reconnect`] waits between attempts.
const RECONNECT_PAUSE: Duration = Duration::from_millis(200);

/// Connect again after a lost connection, trying until `patience` has passed (a restarting
/// daemon needs a moment). Auto-start stays as `opts` says. The last error is returned when
/// no attempt succeeds, or at once when it is not a connection problem (a refused token).
pub fn reconnect(opts: &ConnectOptions, patience: Duration) -> Result<Client, ClientError> {
    let deadline = std::time::Instant::now() + patience;
    loop {
        match Client::connect(opts) {
            Ok(c) => return Ok(c),
            Err(e) if e.is_connection_lost() && std::time::Instant::now() < deadline => {
                std::thread::sleep(RECONNECT_PAUSE);
            }
            Err(e) => return Err(e),
        }
    }
}

/// Ends a [`Client`]'s connection from elsewhere ([`Client::interrupter`]).
#[derive(Debug)]
pub struct Interrupter(transport::ShutdownHandle);

impl Interrupter {
    /// Shut the connection down in both directions.
    pub fn interrupt(&self) {
        self.0.shutdown();
    }
}

/// A connection to the daemon.
#[derive(Debug)]
pub struct Client {
    transport: Transport,
    socket: PathBuf,
    next_id: u64,
    started_daemon: bool,
    call_timeout: Duration,
    poisoned: bool,
    line: Vec<u8>,
    /// Whether raw reads ask for binary answers (until a daemon refuses them).
    binary_reads: bool,
    /// The daemon's process, looked at while an answer is late.
    watch: watch::DaemonWatch,
}

impl Client {
    /// Connect to the daemon of `opts.home`, starting one if none answers and
    /// `opts.autostart` is set.
    pub fn connect(opts: &ConnectOptions) -> Result<Client, ClientError> {
        if let Some(remote) = &opts.remote {
            let mut watch = watch::DaemonWatch::for_url(&remote.url);
            let transport =
                remote::connect(remote, opts.start_timeout, MAX_RESPONSE_BYTES, &mut watch)?;
            let mut client = Client::from_transport(
                transport,
                PathBuf::from(&remote.url),
                false,
                opts.call_timeout,
            );
            client.watch = watch;
            return Ok(client);
        }
        let socket = opts.socket_path();
        match UnixStream::connect(&socket) {
            Ok(stream) => Client::from_stream(stream, socket, false, opts.call_timeout),
            Err(e) if is_not_listening(&e) => {
                if !opts.autostart {
                    return Err(ClientError::NotRunning { home: opts.home.clone(), socket });
                }
                let stream = autostart::start_and_connect(opts, &socket)?;
                Client::from_stream(stream, socket, true, opts.call_timeout)
            }
            Err(e) => Err(ClientError::Connect { socket, source: e }),
        }
    }

    /// Connect to a running daemon without ever starting one: `Ok(None)` when none answers.
    pub fn connect_existing(opts: &ConnectOptions) -> Result<Option<Client>, ClientError> {
        let opts = ConnectOptions { autostart: false, ..opts.clone() };
        match Client::connect(&opts) {
            Ok(c) => Ok(Some(c)),
            Err(ClientError::NotRunning { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn from_stream(
        stream: UnixStream,
        socket: PathBuf,
        started_daemon: bool,
        call_timeout: Duration,
    ) -> Result<Client, ClientError> {
        // Before anything is sent: the daemon must be our own user's.
        peer::check(&stream, &socket)?;
        let transport = Transport::unix(stream)
            .map_err(|source| ClientError::Connect { socket: socket.clone(), source })?;
        Ok(Client::from_transport(transport, socket, started_daemon, call_timeout))
    }

    fn from_transport(
        transport: Transport,
        socket: PathBuf,
        started_daemon: bool,
        call_timeout: Duration,
    ) -> Client {
        let watch = match socket.parent() {
            Some(home) => watch::DaemonWatch::Local(home.to_path_buf()),
            None => watch::DaemonWatch::Remote,
        };
        Client {
            transport,
            socket,
            next_id: 1,
            started_daemon,
            call_timeout,
            poisoned: false,
            line: Vec::new(),
            binary_reads: std::env::var_os(NO_BINARY_READ_ENV).is_none_or(|v| v == "0"),
            watch,
        }
    }

    /// Wait up to `timeout` for the daemon to close this connection (what a daemon does as it
    /// exits after `shutdown`): `true` once it is closed, `false` if it is still open. Stray
    /// messages are skipped. For a remote daemon this is the only sign of its exit we can see:
    /// its pid is on another machine.
    pub fn wait_closed(&mut self, timeout: Duration) -> bool {
        // Whatever arrives now is no answer to a call: the stream is out of step for calls.
        self.poisoned = true;
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return false;
            }
            match self.transport.recv(&mut self.line, MAX_RESPONSE_BYTES, left) {
                Ok(wire::Line::Eof) => return true,
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                // A reset, a TLS close without notify, a dead peer: closed all the same.
                Err(_) => return true,
            }
        }
    }

    /// Whether connecting started the daemon.
    pub fn started_daemon(&self) -> bool {
        self.started_daemon
    }

    /// The socket this client is connected to (for a remote daemon: its URL).
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// A handle that ends this connection from another thread: the call in flight fails and
    /// the daemon stops whatever wait it was doing for it (the session itself goes on).
    pub fn interrupter(&self) -> Result<Interrupter, ClientError> {
        let handle = self
            .transport
            .shutdown_handle()
            .map_err(|source| ClientError::Connect { socket: self.socket.clone(), source })?;
        Ok(Interrupter(handle))
    }

    /// Call method `M` with `params` and decode its result. The deadline is the call timeout
    /// plus the wait the params ask for ([`Method::wait_ms`]).
    pub fn call<M: Method>(&mut self, params: M::Params) -> Result<M::Result, ClientError> {
        let wait = Duration::from_millis(M::wait_ms(&params));
        self.call_waiting::<M>(params, wait)
    }

    /// A raw `read` (`raw` is set for you) and its exact bytes. The bytes come without base64
    /// (`encoding: "binary"`, up to 16 MiB an answer; `max_bytes` absent asks for 8 MiB) unless
    /// the daemon predates that or [`NO_BINARY_READ_ENV`] is set: then the answer is base64
    /// (at most 4 MiB), decoded here. Continue from the answer's `view.next_cursor`.
    pub fn read_bytes(&mut self, params: ReadParams) -> Result<(ReadResult, Vec<u8>), ClientError> {
        let mut params = ReadParams { raw: true, ..params };
        if self.binary_reads {
            params.encoding = Some(ReadEncoding::Binary);
            match self.call::<method::Read>(params.clone()) {
                Ok(result) => {
                    let bytes = self.payload(&result)?;
                    return Ok((result, bytes));
                }
                Err(ClientError::Rpc { code, message, .. })
                    if code == rpc::code::INVALID_PARAMS
                        && message.contains("unknown field `encoding`") =>
                {
                    // A daemon that predates binary reads: base64 from now on.
                    self.binary_reads = false;
                }
                Err(e) => return Err(e),
            }
        }
        params.encoding = None;
        params.max_bytes = Some(params.max_bytes.unwrap_or(MAX_BASE64_READ).min(MAX_BASE64_READ));
        let result = self.call::<method::Read>(params)?;
        let bytes = raw_bytes(&result)?.unwrap_or_default();
        Ok((result, bytes))
    }

    /// Whether [`read_bytes`](Client::read_bytes) asks for binary answers (`false`: base64
    /// only, as with a daemon that predates them; for comparisons and tests).
    pub fn set_binary_reads(&mut self, on: bool) {
        self.binary_reads = on;
    }

    /// The raw bytes a binary read's answer announced (`binary_len`), read off the connection.
    fn payload(&mut self, result: &ReadResult) -> Result<Vec<u8>, ClientError> {
        let name = <method::Read as Method>::NAME;
        let Some(len) = result.binary_len else {
            // Bytes sent as base64 after all: they are in the answer.
            return Ok(raw_bytes(result)?.unwrap_or_default());
        };
        let len = usize::try_from(len).ok().filter(|&n| n <= MAX_RESPONSE_BYTES).ok_or(
            ClientError::ResponseTooLarge { method: name.into(), limit: MAX_RESPONSE_BYTES },
        );
        let got = len.and_then(|len| {
            let timeout = self.call_timeout.max(Duration::from_millis(1));
            self.transport.recv_payload(len, timeout).map_err(|e| match e.kind() {
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => {
                    ClientError::Timeout { method: name.into(), after: timeout }
                }
                std::io::ErrorKind::UnexpectedEof | std::io::ErrorKind::ConnectionReset => {
                    ClientError::Disconnected { method: name.into() }
                }
                std::io::ErrorKind::InvalidData => {
                    ClientError::Protocol { method: name.into(), detail: e.to_string() }
                }
                _ => ClientError::Io { method: name.into(), source: e },
            })
        });
        if got.is_err() {
            // Bytes may still be on their way or half read: the stream is out of step.
            self.poisoned = true;
        }
        got
    }

    /// Like [`call`](Client::call), for a call the caller knows may itself wait up to `wait`
    /// before answering (instead of what [`Method::wait_ms`] says).
    pub fn call_waiting<M: Method>(
        &mut self,
        params: M::Params,
        wait: Duration,
    ) -> Result<M::Result, ClientError> {
        let limit = self.call_timeout.saturating_add(wait);
        self.call_within::<M>(params, limit)
    }

    /// Like [`call`](Client::call), giving up (with [`ClientError::Timeout`]) when no answer
    /// came within `limit`, whatever the connection's call timeout: for a caller with a
    /// deadline of its own (`wait --timeout`) that a stopped daemon must not stretch.
    pub fn call_within<M: Method>(
        &mut self,
        params: M::Params,
        limit: Duration,
    ) -> Result<M::Result, ClientError> {
        if self.poisoned {
            return Err(ClientError::Poisoned);
        }
        let result = self.exchange(M::NAME, &params, limit);
        if matches!(
            result,
            Err(ClientError::Timeout { .. }
                | ClientError::Disconnected { .. }
                | ClientError::ResponseTooLarge { .. }
                | ClientError::Io { .. }
                | ClientError::Protocol { .. })
        ) {
            // The answer may still arrive or be half read: the stream is out of step.
            self.poisoned = true;
        }
        let value = result?;
        serde_json::from_value(value).map_err(|e| ClientError::Protocol {
            method: M::NAME.into(),
            detail: format!("unexpected result: {e}"),
        })
    }

    /// Waits for the answer to begin, looking at the daemon while it is late: a stopped or
    /// hung daemon is said at once (the connection is then out of step).
    fn await_answer(
        &mut self,
        method: &str,
        deadline: std::time::Instant,
    ) -> Result<(), ClientError> {
        let transport = &mut self.transport;
        let silent = self.watch.wait(deadline, |slice| transport.readable(slice));
        silent.map_err(|silent| {
            self.poisoned = true;
            match silent {
                watch::Silent::Stopped(pid) => {
                    ClientError::DaemonStopped { pid, method: method.into(), sent: true }
                }
                watch::Silent::Hung(pid, still) => {
                    ClientError::DaemonHung { pid, method: method.into(), still }
                }
            }
        })
    }

    fn exchange<P: serde::Serialize>(
        &mut self,
        method: &str,
        params: &P,
        timeout: Duration,
    ) -> Result<Value, ClientError> {
        let io = |source: std::io::Error| ClientError::Io { method: method.into(), source };
        let id = self.next_id;
        self.next_id += 1;
        let line = encode_request(id, method, params)?;
        // A stopped daemon gets nothing: the request would wait in its socket and be carried
        // out whenever it is continued.
        if let Some(pid) = self.watch.stopped() {
            return Err(ClientError::DaemonStopped { pid, method: method.into(), sent: false });
        }
        // A zero timeout means "block forever" to the socket options; never ask for that.
        let timeout = timeout.max(Duration::from_millis(1));
        let deadline = std::time::Instant::now() + timeout;
        self.transport.send(&line, timeout).map_err(|e| match e.kind() {
            std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset => {
                ClientError::Disconnected { method: method.into() }
            }
            _ => io(e),
        })?;
        self.await_answer(method, deadline)?;
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let outcome = self.transport.recv(
            &mut self.line,
            MAX_RESPONSE_BYTES,
            left.max(Duration::from_millis(1)),
        );
        match outcome {
            Ok(wire::Line::Complete) => {}
            Ok(wire::Line::Eof) => return Err(ClientError::Disconnected { method: method.into() }),
            Ok(wire::Line::TooLarge) => {
                return Err(ClientError::ResponseTooLarge {
                    method: method.into(),
                    limit: MAX_RESPONSE_BYTES,
                });
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return Err(ClientError::Timeout { method: method.into(), after: timeout });
            }
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                return Err(ClientError::Disconnected { method: method.into() });
            }
            Err(e) => return Err(io(e)),
        }
        let response: Response = serde_json::from_slice(&self.line).map_err(|e| {
            ClientError::Protocol { method: method.into(), detail: format!("not a response: {e}") }
        })?;
        // Answers are small or bounded; do not keep a huge buffer around between calls.
        if self.line.capacity() > 1024 * 1024 {
            self.line = Vec::new();
        }
        // An error the daemon could not tie to a request (e.g. it refused the connection) is
        // still its sentence.
        if response.id.is_null()
            && let Some(err) = response.error
        {
            return Err(ClientError::Rpc {
                method: method.into(),
                code: err.code,
                message: err.message,
            });
        }
        if response.id.as_u64() != Some(id) {
            return Err(ClientError::Protocol {
                method: method.into(),
                detail: format!("answer for id {} to request {id}", response.id),
            });
        }
        match (response.result, response.error) {
            (_, Some(err)) => Err(ClientError::Rpc {
                method: method.into(),
                code: err.code,
                message: err.message,
            }),
            (Some(result), None) => Ok(result),
            (None, None) => Ok(Value::Null),
        }
    }
}

/// Request `id` for `method` as one line (no newline), refused here when the daemon would skip
/// it unread.
fn encode_request<P: serde::Serialize>(
    id: u64,
    method: &str,
    params: &P,
) -> Result<Vec<u8>, ClientError> {
    let protocol = |detail: String| ClientError::Protocol { method: method.into(), detail };
    let params = serde_json::to_value(params)
        .map_err(|e| protocol(format!("cannot encode the parameters: {e}")))?;
    let request = Request {
        jsonrpc: rpc::JSONRPC_VERSION.into(),
        id: Some(id.into()),
        method: method.into(),
        params: Some(params),
    };
    let line = serde_json::to_vec(&request)
        .map_err(|e| protocol(format!("cannot encode the request: {e}")))?;
    if line.len() + 1 > rpc::MAX_REQUEST_BYTES {
        // The daemon would skip it unread; say so here, with nothing sent.
        return Err(ClientError::RequestTooLarge {
            method: method.into(),
            size: line.len() + 1,
            limit: rpc::MAX_REQUEST_BYTES,
        });
    }
    Ok(line)
}
