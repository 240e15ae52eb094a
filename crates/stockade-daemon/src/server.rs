//! The server: bind, accept, and one reader + one writer per connection, with every request
//! handled in its own task.

use std::net::SocketAddr;
use std::os::fd::{AsFd, AsRawFd as _};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value;
use stockade_core::{Engine, EngineConfig, StateDir};
use stockade_proto::ContainmentMethod;
use stockade_proto::rpc::{MAX_REQUEST_BYTES, Response, code};
use tokio::io::{AsyncBufRead, AsyncWriteExt, BufReader};
use tokio::net::unix::OwnedWriteHalf;
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{Semaphore, mpsc};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::{DaemonConfig, MAX_CONNECTIONS, MAX_IN_FLIGHT_PER_CONNECTION};
use crate::error::DaemonError;
use crate::framing::{Frame, LineReader};
use crate::handlers::{self, Ctx};
use crate::lockfile::DaemonLock;
use crate::ws::{self, WsListener};

/// Answers queued for one connection's writer before request tasks wait for it.
pub(crate) const WRITE_QUEUE: usize = 32;
/// Read buffer per connection.
const READ_BUFFER: usize = 64 * 1024;
/// After a client stops sending (EOF), how often to check whether it hung up entirely (then its
/// in-flight requests are cancelled) or only closed its writing side (then they are answered).
const HANGUP_POLL: Duration = Duration::from_millis(100);
/// How long shutdown waits for connections to flush their last answers.
const CONNECTION_DRAIN: Duration = Duration::from_secs(2);
/// Pause after a failed `accept` (e.g. out of file descriptors) before trying again.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// What every connection and handler shares: the engine and the daemon's identity.
pub(crate) struct Shared {
    pub(crate) engine: Engine,
    pub(crate) socket: PathBuf,
    pub(crate) home: PathBuf,
    pub(crate) pid: u32,
    /// Cancelled by the `shutdown` method, or when `serve`'s token is.
    pub(crate) stop: CancellationToken,
    /// The schedules, fired by the scheduler task.
    pub(crate) schedules: crate::schedule::Scheduler,
}

/// A bound daemon, ready to [`serve`](Daemon::serve).
pub struct Daemon {
    shared: Arc<Shared>,
    listener: UnixListener,
    socket_ino: (u64, u64),
    lock: DaemonLock,
    ws: Option<WsListener>,
    /// Retention period and sweep interval of the janitor.
    janitor: (Duration, Duration),
}

impl std::fmt::Debug for Daemon {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Daemon").field("socket", &self.shared.socket).finish()
    }
}

impl Daemon {
    /// Take the lock, bind the socket and set up the engine. When this returns, the socket
    /// accepts connections (they are served once [`serve`](Daemon::serve) runs). Must be called
    /// inside a tokio runtime.
    pub fn bind(config: DaemonConfig) -> Result<Daemon, DaemonError> {
        let state_dir = StateDir::open(&config.home)?;
        let home = state_dir.root().to_path_buf();
        let lock = DaemonLock::acquire(&config.lock_path(), &home)?;
        let ws = config.ws.as_ref().map(WsListener::bind).transpose()?;
        let socket = config.socket_path();
        let mut engine_config =
            EngineConfig::new(state_dir, config.instance.clone().unwrap_or_else(instance_name));
        engine_config.containment = config.containment.clone();
        engine_config.grace = config.grace;
        engine_config.retained_cap = config.retained_cap;
        engine_config.disk_cap = config.disk_cap;
        engine_config.limits = config.limits;
        let engine = Engine::new(engine_config)?;
        let listener = crate::socket::bind(&socket)?;
        let socket_ino = std::fs::symlink_metadata(&socket)
            .map(|m| (m.dev(), m.ino()))
            .map_err(|e| DaemonError::io(format!("cannot inspect {}", socket.display()), e))?;
        let schedules = crate::schedule::Scheduler::load(&home);
        let shared = Arc::new(Shared {
            schedules,
            engine,
            socket,
            home,
            pid: std::process::id(),
            stop: CancellationToken::new(),
        });
        let janitor = (config.retention, config.sweep_interval);
        Ok(Daemon { shared, listener, socket_ino, lock, ws, janitor })
    }

    /// The socket path.
    pub fn socket(&self) -> &Path {
        &self.shared.socket
    }

    /// The WebSocket door's address, when there is one (the port actually bound).
    pub fn ws_addr(&self) -> Option<SocketAddr> {
        self.ws.as_ref().map(WsListener::addr)
    }

    /// The state directory.
    pub fn home(&self) -> &Path {
        &self.shared.home
    }

    /// This daemon's pid.
    pub fn pid(&self) -> u32 {
        self.shared.pid
    }

    /// The engine instance name (the `<instance>` of each session's `STOCKADE_SESSION` marker).
    pub fn instance(&self) -> &str {
        &self.shared.engine.config().instance
    }

    /// The containment in use.
    pub fn containment(&self) -> ContainmentMethod {
        self.shared.engine.method()
    }

    /// Serve until `token` is cancelled or a `shutdown` request arrives; then terminate every
    /// running session, close the connections, remove the socket and release the lock.
    pub async fn serve(self, token: CancellationToken) -> Result<(), DaemonError> {
        let Daemon { shared, listener, socket_ino, lock, ws, janitor } = self;
        // Before the first request: recover what dead daemons left, then keep retention.
        crate::janitor::start_up(&shared).await;
        let (retention, interval) = janitor;
        let janitor = tokio::spawn(crate::janitor::run(
            Arc::clone(&shared),
            retention,
            interval,
            shared.stop.clone(),
        ));
        // After recovery, so a run of a dead daemon is `failed` and blocks no tick.
        let scheduler =
            tokio::spawn(crate::schedule::run(Arc::clone(&shared), shared.stop.clone()));
        let connections = TaskTracker::new();
        let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
        let conn_root = CancellationToken::new();
        loop {
            tokio::select! {
                () = token.cancelled() => break,
                () = shared.stop.cancelled() => break,
                accepted = listener.accept() => match accepted {
                    Ok((stream, _)) => match Arc::clone(&slots).try_acquire_owned() {
                        Ok(slot) => {
                            let shared = Arc::clone(&shared);
                            let conn = conn_root.child_token();
                            connections.spawn(async move {
                                connection(shared, stream, conn).await;
                                drop(slot);
                            });
                        }
                        Err(_) => {
                            connections.spawn(refuse(stream));
                        }
                    },
                    Err(e) => {
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(ACCEPT_BACKOFF).await;
                    }
                },
                accepted = ws::accept(ws.as_ref()) => match accepted {
                    Ok((stream, peer)) => {
                        let token = ws.as_ref().map(WsListener::token);
                        let Some(token) = token else { continue };
                        match Arc::clone(&slots).try_acquire_owned() {
                            Ok(slot) => {
                                let shared = Arc::clone(&shared);
                                let conn = conn_root.child_token();
                                connections.spawn(async move {
                                    ws::connection(shared, stream, peer, token, conn).await;
                                    drop(slot);
                                });
                            }
                            Err(_) => {
                                connections.spawn(ws::refuse(stream, token));
                            }
                        }
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "WebSocket accept failed");
                        tokio::time::sleep(ACCEPT_BACKOFF).await;
                    }
                },
            }
        }
        // Stop: refuse new requests, stop listening, end every session through the engine.
        shared.stop.cancel();
        // A tick in progress finishes (claim, then advance) before the engine shuts down.
        let _ = scheduler.await;
        drop(listener);
        drop(ws);
        janitor.abort();
        shared.engine.shutdown().await;
        conn_root.cancel();
        connections.close();
        let _ = tokio::time::timeout(CONNECTION_DRAIN, connections.wait()).await;
        remove_socket(&shared.socket, socket_ino);
        drop(lock);
        Ok(())
    }
}

/// A unique engine instance name for this daemon (markers are `<instance>:<id>`).
fn instance_name() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let ms = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis());
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let pid = std::process::id();
    if n == 0 { format!("daemon-{pid}-{ms}") } else { format!("daemon-{pid}-{ms}-{n}") }
}

/// Remove the socket file if it is still the one this daemon bound.
fn remove_socket(path: &Path, ino: (u64, u64)) {
    if let Ok(m) = std::fs::symlink_metadata(path)
        && (m.dev(), m.ino()) == ino
    {
        let _ = std::fs::remove_file(path);
    }
}

/// Too many connections: say so and close.
async fn refuse(mut stream: UnixStream) {
    let resp = Response::err(
        Value::Null,
        code::LIMIT_REACHED,
        format!("the daemon already serves {MAX_CONNECTIONS} connections; close some and retry"),
    );
    let _ = stream.write_all(&encode(&resp)).await;
}

/// Where one connection's request frames come from: the Unix socket's lines, or a WebSocket's
/// text messages. Both doors share everything after this (see [`read_requests`]).
pub(crate) trait FrameSource {
    /// The next frame, or `None` when the client sends no more. Must be cancel-safe.
    async fn next_frame(&mut self) -> std::io::Result<Option<Frame>>;
}

impl<R: AsyncBufRead + Unpin> FrameSource for LineReader<R> {
    async fn next_frame(&mut self) -> std::io::Result<Option<Frame>> {
        self.next().await
    }
}

/// Read requests from `source` and handle each in its own task (a long poll never blocks the
/// requests behind it), at most [`MAX_IN_FLIGHT_PER_CONNECTION`] at once; answers go to `tx`,
/// the connection's one writer. Returns the tasks still in flight when the client sends no more
/// or `conn` is cancelled (a read error cancels it): the door decides how to finish them.
pub(crate) async fn read_requests(
    shared: &Arc<Shared>,
    source: &mut impl FrameSource,
    tx: &mpsc::Sender<Vec<u8>>,
    conn: &CancellationToken,
) -> JoinSet<()> {
    let in_flight = Arc::new(Semaphore::new(MAX_IN_FLIGHT_PER_CONNECTION));
    let mut tasks = JoinSet::new();
    loop {
        let permit = tokio::select! {
            p = Arc::clone(&in_flight).acquire_owned() => p,
            () = conn.cancelled() => break,
        };
        let Ok(permit) = permit else { break };
        let frame = tokio::select! {
            f = source.next_frame() => f,
            () = conn.cancelled() => break,
        };
        match frame {
            Ok(Some(frame)) => {
                let ctx = Ctx { shared: Arc::clone(shared), conn: conn.clone() };
                let tx = tx.clone();
                tasks.spawn(async move {
                    if let Some(line) = handle_frame(&ctx, frame).await {
                        let _ = tx.send(line).await;
                    }
                    drop(permit);
                });
            }
            Ok(None) => break,
            Err(_) => {
                conn.cancel();
                break;
            }
        }
        while tasks.try_join_next().is_some() {}
    }
    tasks
}

/// One client connection on the Unix socket.
async fn connection(shared: Arc<Shared>, stream: UnixStream, conn: CancellationToken) {
    let (read_half, write_half) = stream.into_split();
    let (tx, rx) = mpsc::channel::<Vec<u8>>(WRITE_QUEUE);
    let writer = tokio::spawn(write_loop(write_half, rx, conn.clone()));
    let mut lines =
        LineReader::new(BufReader::with_capacity(READ_BUFFER, read_half), MAX_REQUEST_BYTES);
    let mut tasks = read_requests(&shared, &mut lines, &tx, &conn).await;
    // The client sends no more. Answer what is in flight, unless it hung up entirely: then its
    // long polls stop and a foreground run it waited on is terminated.
    let read_half = lines.into_inner().into_inner();
    loop {
        tokio::select! {
            done = tasks.join_next() => if done.is_none() { break },
            () = tokio::time::sleep(HANGUP_POLL), if !conn.is_cancelled() => {
                if peer_hung_up(read_half.as_ref().as_fd()) {
                    conn.cancel();
                }
            }
        }
    }
    drop(tx);
    let _ = writer.await;
}

/// Write answers in order; a failed write means the client is gone.
async fn write_loop(
    mut out: OwnedWriteHalf,
    mut rx: mpsc::Receiver<Vec<u8>>,
    conn: CancellationToken,
) {
    while let Some(line) = rx.recv().await {
        if out.write_all(&line).await.is_err() {
            conn.cancel();
            return;
        }
    }
}

/// Whether the peer closed its end entirely (not just its writing side).
fn peer_hung_up(fd: std::os::fd::BorrowedFd<'_>) -> bool {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    let mut fds = [PollFd::new(fd, PollFlags::POLLIN)];
    match poll(&mut fds, PollTimeout::ZERO) {
        Ok(_) => {
            fds[0].revents().is_some_and(|r| r.intersects(PollFlags::POLLHUP | PollFlags::POLLERR))
        }
        Err(_) => {
            tracing::debug!(fd = fd.as_raw_fd(), "poll on a client socket failed");
            false
        }
    }
}

/// One response line.
pub(crate) fn encode(resp: &Response) -> Vec<u8> {
    let mut line = serde_json::to_vec(resp).unwrap_or_else(|e| {
        let fallback = Response::err(
            resp.id.clone(),
            code::INTERNAL_ERROR,
            format!("the answer could not be encoded: {e}"),
        );
        serde_json::to_vec(&fallback).unwrap_or_default()
    });
    line.push(b'\n');
    line
}

/// Turn one frame into an answer line (`None` for a notification, or a blank line).
async fn handle_frame(ctx: &Ctx, frame: Frame) -> Option<Vec<u8>> {
    match respond(ctx, frame).await? {
        Answer::Error(resp) => Some(encode(&resp)),
        Answer::Result { id, mut line } => {
            line.extend_from_slice(b",\"id\":");
            if serde_json::to_writer(&mut line, &id).is_err() {
                return Some(encode(&Response::err(id, code::INTERNAL_ERROR, "bad request id")));
            }
            line.extend_from_slice(b"}\n");
            Some(line)
        }
    }
}

/// What a request comes to.
enum Answer {
    /// An error response.
    Error(Response),
    /// A success: the line so far (prefix and result) and the id to close it with.
    Result { id: Value, line: Vec<u8> },
}

async fn respond(ctx: &Ctx, frame: Frame) -> Option<Answer> {
    let line = match frame {
        Frame::TooLong { len } => {
            return Some(Answer::Error(Response::err(
                Value::Null,
                code::INVALID_REQUEST,
                format!(
                    "the request line has {len} bytes, more than the limit of {MAX_REQUEST_BYTES}; it was skipped"
                ),
            )));
        }
        Frame::Line(line) => line,
    };
    if line.iter().all(u8::is_ascii_whitespace) {
        return None;
    }
    let value: Value = match serde_json::from_slice(&line) {
        Ok(v) => v,
        Err(e) => {
            return Some(Answer::Error(Response::err(
                Value::Null,
                code::PARSE_ERROR,
                format!("the request is not valid JSON: {e}"),
            )));
        }
    };
    drop(line);
    let mut object = match value {
        Value::Object(o) => o,
        Value::Array(_) => {
            return Some(Answer::Error(Response::err(
                Value::Null,
                code::INVALID_REQUEST,
                "batch requests are not supported: send one request object per line",
            )));
        }
        _ => {
            return Some(Answer::Error(Response::err(
                Value::Null,
                code::INVALID_REQUEST,
                "a request must be a JSON object with jsonrpc, id, method and params",
            )));
        }
    };
    let notification = !object.contains_key("id");
    let id = match object.remove("id") {
        None => Value::Null,
        Some(v @ (Value::Null | Value::String(_) | Value::Number(_))) => v,
        Some(_) => {
            return Some(Answer::Error(Response::err(
                Value::Null,
                code::INVALID_REQUEST,
                "the request id must be a string, a number or null",
            )));
        }
    };
    if object.get("jsonrpc").and_then(Value::as_str) != Some(stockade_proto::rpc::JSONRPC_VERSION) {
        return Some(Answer::Error(Response::err(
            id,
            code::INVALID_REQUEST,
            "\"jsonrpc\" must be \"2.0\"",
        )));
    }
    let method = match object.remove("method") {
        Some(Value::String(m)) => m,
        _ => {
            return Some(Answer::Error(Response::err(
                id,
                code::INVALID_REQUEST,
                "the request needs a \"method\" string",
            )));
        }
    };
    let params = object.remove("params").unwrap_or(Value::Null);
    let result = handlers::dispatch(ctx, &method, params).await;
    if notification {
        return None;
    }
    Some(match result {
        Ok(line) => Answer::Result { id, line },
        Err(error) => Answer::Error(Response { error: Some(error), ..Response::err(id, 0, "") }),
    })
}
