//! The server: bind, accept, and one reader + one writer per connection, with every request
//! handled in its own task.

use std::net::SocketAddr;
use std::os::fd::{AsFd, AsRawFd as _};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value;
use stockade_engine::{Engine, EngineConfig, StateDir};
use stockade_proto::ContainmentMethod;
use stockade_proto::rpc::{MAX_REQUEST_BYTES, Response, code};
use tokio::io::{AsyncWriteExt, BufReader};
use tokio::net::unix::OwnedWriteHalf;
use tokio::net::{TcpStream, UnixListener, UnixStream};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::admission::{Admission, Pending};
use crate::config::{DaemonConfig, MAX_CONNECTIONS};
use crate::error::DaemonError;
use crate::framing::LineReader;
use crate::hall::Hall;
use crate::http::Doorway;
use crate::lockfile::DaemonLock;
use crate::requests::{Outgoing, WRITE_QUEUE, encode, read_requests};
use crate::state::Shared;
use crate::ws::{self, WsListener};

/// Session directories the daemon keeps made ahead of time: enough for an agent's run after
/// run, refilled in the background as runs take them (a burst makes its own beyond these).
const PREPARED_DIRS: usize = 2;

/// Read buffer per connection.
const READ_BUFFER: usize = 64 * 1024;
/// After a client stops sending (EOF), how often to check whether it hung up entirely (then its
/// in-flight requests are cancelled) or only closed its writing side (then they are answered).
const HANGUP_POLL: Duration = Duration::from_millis(100);
/// How long shutdown waits for connections to flush their last answers.
const CONNECTION_DRAIN: Duration = Duration::from_secs(2);
/// Pause after a failed `accept` (e.g. out of file descriptors) before trying again.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// A bound daemon, ready to [`serve`](Daemon::serve).
pub struct Daemon {
    shared: Arc<Shared>,
    listener: UnixListener,
    socket_ino: (u64, u64),
    lock: DaemonLock,
    ws: Option<WsListener>,
    /// The separate metrics address, when there is one.
    metrics: Option<crate::metrics_door::MetricsListener>,
    /// The read-only metrics token, when there is one (it reads `/metrics`, nothing else).
    scrape: Option<crate::reload::LiveToken>,
    /// The tokens and certificates read again on [`Daemon::reloader`]'s request or when their
    /// files change.
    credentials: crate::reload::Credentials,
    reloader: crate::reload::Reloader,
    /// Retention period and sweep interval of the janitor.
    janitor: (Duration, Duration),
    /// The E2B door's listener, until the binary takes it.
    e2b: Option<crate::outer_door::OuterDoor>,
    /// The budget and pending places every network door takes (`admission`, `gate`).
    admission: Arc<Admission>,
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
        let mut credentials = crate::reload::Credentials::default();
        let ws = config.ws.as_ref().map(|w| WsListener::bind(w, &mut credentials)).transpose()?;
        let scrape = config.metrics_token_file.as_deref();
        let scrape = scrape.map(|path| credentials.token("the metrics token", path)).transpose()?;
        let metrics = config.metrics.as_ref();
        let metrics = metrics
            .map(|m| {
                crate::metrics_door::MetricsListener::bind(m, scrape.as_ref(), &mut credentials)
            })
            .transpose()?;
        let e2b = config.e2b.as_ref();
        let e2b = e2b.map(|c| crate::outer_door::bind(c, &mut credentials)).transpose()?;
        let socket = config.socket_path();
        let mut engine_config =
            EngineConfig::new(state_dir, config.instance.clone().unwrap_or_else(instance_name));
        engine_config.containment = config.containment.clone();
        engine_config.grace = config.grace;
        engine_config.retained_cap = config.retained_cap;
        engine_config.disk_cap = config.disk_cap;
        engine_config.limits = config.limits;
        engine_config.sandbox = config.sandbox.clone();
        // The doors' tokens and keys and the audit log are kept from sandboxed commands
        // wherever they are.
        engine_config.sandbox.hidden.extend(config.secrets());
        // A run takes a session directory made ahead of time (see stockade-engine's `slots.rs`).
        engine_config.prepared_dirs = PREPARED_DIRS;
        let engine = Engine::new(engine_config)?;
        let audit = config.audit_log.as_deref().map(|path| {
            crate::audit::Audit::open(path, config.audit_log_max_bytes).map_err(|e| {
                DaemonError::io(format!("cannot open the audit log {}", path.display()), e)
            })
        });
        let audit = audit.transpose()?;
        // The home's foreground runs (in the CLI's own process) audit and hide as we do.
        let doors = crate::home_doors::HomeDoors {
            audit_log: config
                .audit_log
                .as_deref()
                .map(|p| std::path::absolute(p).unwrap_or_else(|_| p.to_owned())),
            hidden: engine.config().sandbox.hidden.clone(),
        };
        if let Err(e) = doors.write(engine.config().state_dir.root()) {
            tracing::warn!(error = %e, "cannot tell foreground runs of this home about the audit log and hidden paths ({})", crate::home_doors::HOME_DOORS_FILE);
        }
        let listener = crate::socket::bind(&socket)?;
        let socket_ino = std::fs::symlink_metadata(&socket)
            .map(|m| (m.dev(), m.ino()))
            .map_err(|e| DaemonError::io(format!("cannot inspect {}", socket.display()), e))?;
        let counters = crate::metrics::Metrics::default();
        let schedules =
            Arc::new(crate::schedule::Scheduler::load(&home, counters.clone(), audit.clone()));
        let shared = Arc::new(Shared {
            schedules,
            engine: Arc::new(engine),
            socket,
            home,
            pid: std::process::id(),
            recovered: CancellationToken::new(),
            stop: CancellationToken::new(),
            metrics: counters,
            door_tls: ws.as_ref().and_then(WsListener::tls),
            trim: std::sync::OnceLock::new(),
            write_keys: crate::write_keys::WriteKeys::default(),
            audit,
            door_token: ws.as_ref().map(WsListener::token),
        });
        // One budget and one set of pending places for every network door.
        let admission = Admission::new();
        let e2b = e2b.map(|bound| {
            crate::outer_door::OuterDoor::new(bound, Hall(Arc::clone(&shared)), &admission)
        });
        let janitor = (config.retention, config.sweep_interval);
        let reloader = crate::reload::Reloader::default();
        Ok(Daemon {
            shared,
            listener,
            socket_ino,
            lock,
            ws,
            metrics,
            scrape,
            credentials,
            reloader,
            janitor,
            e2b,
            admission,
        })
    }

    /// The E2B door's listener, once (the binary serves it with `stockade-e2b`); `None` when
    /// the daemon has no E2B door or it was taken already.
    pub fn take_e2b(&mut self) -> Option<crate::outer_door::OuterDoor> {
        self.e2b.take()
    }

    /// The socket path.
    pub fn socket(&self) -> &Path {
        &self.shared.socket
    }

    /// The WebSocket door's address, when there is one (the port actually bound).
    pub fn ws_addr(&self) -> Option<SocketAddr> {
        self.ws.as_ref().map(WsListener::addr)
    }

    /// The separate metrics address, when there is one (the port actually bound), and whether
    /// scrapes there must present the token.
    pub fn metrics_addr(&self) -> Option<(SocketAddr, bool)> {
        self.metrics.as_ref().map(|m| (m.addr(), m.needs_token()))
    }

    /// Asks the daemon, once it serves, to read its token files and TLS certificate and key
    /// again (the binary calls it on SIGHUP); they are also read again when their files change.
    /// Connections and sessions are never ended by it.
    pub fn reloader(&self) -> crate::reload::Reloader {
        self.reloader.clone()
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

    /// The engine, for a door served beside the daemon's own (the E2B door): its sessions are
    /// this daemon's.
    pub fn engine(&self) -> Arc<Engine> {
        Arc::clone(&self.shared.engine)
    }

    /// The containment in use.
    pub fn containment(&self) -> ContainmentMethod {
        self.shared.engine.method()
    }

    /// Serve until `token` is cancelled or a `shutdown` request arrives; then terminate every
    /// running session, close the connections, remove the socket and release the lock.
    pub async fn serve(self, token: CancellationToken) -> Result<(), DaemonError> {
        let Daemon {
            shared,
            listener,
            socket_ino,
            mut lock,
            ws,
            metrics,
            scrape,
            credentials,
            reloader,
            janitor,
            e2b: _,
            admission,
        } = self;
        // Work of this daemon may outlive `serve` in this process: so must the lock.
        lock.hold_until_exit();
        let beat_path =
            shared.engine.config().state_dir.root().join(stockade_proto::home::HEARTBEAT_FILE);
        let heartbeat = tokio::spawn(crate::janitor::heartbeat(beat_path.clone()));
        // From the start (a rotation during a long recovery is not missed) to the stop.
        let reloads = tokio::spawn(crate::reload::run(
            credentials,
            reloader,
            shared.metrics.clone(),
            shared.stop.clone(),
        ));
        // The network listeners answer probes from the first moment; the Unix socket's clients
        // wait in its backlog until recovery is done, the door's upgrades get a 503 until then.
        let probes = tokio::spawn(crate::metrics_door::serve(
            metrics,
            Arc::clone(&shared),
            Arc::clone(&admission),
        ));
        let acceptor = Acceptor {
            doorway: ws
                .as_ref()
                .map(|l| l.doorway(Arc::clone(&shared), Arc::clone(&admission), scrape.clone())),
            shared: Arc::clone(&shared),
            admission,
            connections: TaskTracker::new(),
            conn_root: CancellationToken::new(),
        };
        let (mut background, ()) = tokio::join!(
            Background::start(&shared, probes, janitor),
            acceptor.run(&listener, ws.as_ref(), &token)
        );
        // Stop: refuse new requests, stop listening, end every session through the engine.
        shared.stop.cancel();
        reloads.abort();
        // A tick in progress finishes (claim, then advance) before the engine shuts down.
        let _ = (&mut background.scheduler).await;
        drop(listener);
        drop(ws);
        background.stop(&shared).await;
        acceptor.conn_root.cancel();
        acceptor.connections.close();
        let _ = tokio::time::timeout(CONNECTION_DRAIN, acceptor.connections.wait()).await;
        remove_socket(&shared.socket, socket_ino);
        heartbeat.abort();
        let _ = std::fs::remove_file(&beat_path);
        drop(lock);
        Ok(())
    }
}

/// The daemon's tasks beside its connections.
struct Background {
    janitor: JoinHandle<()>,
    watcher: JoinHandle<()>,
    reaper: JoinHandle<()>,
    reap_stop: CancellationToken,
    scheduler: JoinHandle<()>,
    metrics: JoinHandle<()>,
    trim: JoinHandle<()>,
}

impl Background {
    /// Recover what dead daemons left, then start retention, the owner watcher, the orphan
    /// reaper, the scheduler and the start-up trim, and mark the daemon ready (`recovered`).
    /// The Unix socket's first request is accepted after that; `metrics` (the separate
    /// metrics address, already serving probes) is kept to be stopped with the rest.
    async fn start(
        shared: &Arc<Shared>,
        metrics: JoinHandle<()>,
        (retention, interval): (Duration, Duration),
    ) -> Background {
        // Before the first request: recover what dead daemons left, then keep retention.
        crate::janitor::start_up(shared).await;
        let stop = || shared.stop.clone();
        let janitor =
            tokio::spawn(crate::janitor::run(Arc::clone(shared), retention, interval, stop()));
        let watcher = tokio::spawn(crate::janitor::watch_owners(Arc::clone(shared), stop()));
        let reap_stop = CancellationToken::new();
        let reaper =
            tokio::spawn(crate::janitor::reap_orphans(Arc::clone(shared), reap_stop.clone()));
        // After recovery, so a run of a dead daemon is `failed` and blocks no tick; and before
        // the first request, so no `schedule.list` sees a claimed tick not yet counted.
        shared.schedules.reconcile(&shared.engine).await;
        let scheduler = tokio::spawn(crate::schedule::run(
            Arc::clone(&shared.schedules),
            Arc::clone(&shared.engine),
            stop(),
        ));
        // Ready: schedules are reconciled, requests may come.
        shared.recovered.cancel();
        // Start-up is done: its pages of the executable go back once the daemon is quiet.
        let trim = tokio::spawn(crate::trim::after_start_up(
            Arc::clone(shared),
            std::time::Instant::now(),
            stop(),
        ));
        Background { janitor, watcher, reaper, reap_stop, scheduler, metrics, trim }
    }

    /// Stop them and shut the engine down (every running session is terminated); records a full
    /// disk held back get one more try, and as PID 1 the sessions' orphans are reaped.
    async fn stop(self, shared: &Shared) {
        self.metrics.abort();
        self.trim.abort();
        self.janitor.abort();
        self.watcher.abort();
        shared.engine.shutdown().await;
        // Records a full disk held back get one more try before the daemon is gone.
        let unwritten = shared.engine.retry_records().await;
        if unwritten > 0 {
            tracing::warn!(
                sessions = unwritten,
                "session records still not written (disk full?); the next daemon recovers them"
            );
        }
        // As PID 1: the sessions' orphans are reaped before the namespace's init exits.
        self.reap_stop.cancel();
        let _ = self.reaper.await;
    }
}

/// Accepts connections on both doors and gives each its task.
struct Acceptor {
    shared: Arc<Shared>,
    admission: Arc<Admission>,
    /// The WebSocket door's router, when there is a door.
    doorway: Option<Doorway>,
    connections: TaskTracker,
    /// Cancelled at the end of shutdown: every connection stops.
    conn_root: CancellationToken,
}

impl Acceptor {
    /// Accept until `token` is cancelled or the daemon stops.
    /// Unix-socket connections only once recovery is done; the door's from the start (its
    /// probes answer while the daemon recovers).
    async fn run(&self, unix: &UnixListener, ws: Option<&WsListener>, token: &CancellationToken) {
        loop {
            let recovered = self.shared.recovered.is_cancelled();
            tokio::select! {
                () = token.cancelled() => break,
                () = self.shared.stop.cancelled() => break,
                () = self.shared.recovered.cancelled(), if !recovered => {}
                accepted = unix.accept(), if recovered => match accepted {
                    Ok((stream, _)) => self.local(stream),
                    Err(e) => {
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(ACCEPT_BACKOFF).await;
                    }
                },
                accepted = ws::accept(ws, &self.admission) => match accepted {
                    Ok((stream, peer, pending)) => {
                        self.network(stream, peer, pending);
                        // Its task looks at it before the next is accepted, so a burst cannot
                        // drop a token holder whose request is already waiting (see
                        // `crate::admission`).
                        tokio::task::yield_now().await;
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "WebSocket accept failed");
                        tokio::time::sleep(ACCEPT_BACKOFF).await;
                    }
                },
            }
        }
    }

    /// A Unix-socket connection: served when the budget has a slot, else refused.
    fn local(&self, stream: UnixStream) {
        match self.admission.local() {
            Some(slot) => {
                let shared = Arc::clone(&self.shared);
                let conn = self.conn_root.child_token();
                self.connections.spawn(async move {
                    connection(shared, stream, conn).await;
                    drop(slot);
                });
            }
            None => {
                self.connections.spawn(refuse(stream));
            }
        }
    }

    /// A WebSocket-door connection, not counted against the budget until it authenticates.
    fn network(&self, stream: TcpStream, peer: SocketAddr, pending: Pending) {
        let Some(doorway) = self.doorway.clone() else { return };
        let shared = Arc::clone(&self.shared);
        let conn = self.conn_root.child_token();
        self.connections.spawn(ws::connection(shared, stream, peer, doorway, conn, pending));
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

/// One client connection on the Unix socket.
async fn connection(shared: Arc<Shared>, stream: UnixStream, conn: CancellationToken) {
    let _open = shared.metrics.connection();
    let cred = stream.peer_cred().ok();
    let pid = cred.and_then(|c| c.pid()).and_then(|p| u32::try_from(p).ok());
    let caller = Arc::new(crate::hall::Caller::of_pid(&shared.engine, pid));
    let uid = cred.map_or_else(|| "unknown".to_owned(), |c| c.uid().to_string());
    let who =
        Arc::new(crate::audit::Peer { door: "unix", peer: format!("uid:{uid}"), token_id: None });
    if let Some(audit) = &shared.audit {
        audit.connected(&who);
    }
    let (read_half, write_half) = stream.into_split();
    let (tx, rx) = mpsc::channel::<Outgoing>(WRITE_QUEUE);
    let writer = tokio::spawn(write_loop(write_half, rx, conn.clone()));
    let mut lines =
        LineReader::new(BufReader::with_capacity(READ_BUFFER, read_half), MAX_REQUEST_BYTES);
    let mut tasks = read_requests(&shared, &mut lines, &tx, &conn, (caller, who)).await;
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

/// Write answers in order, a binary read's bytes right after its line (nothing comes between);
/// a failed write means the client is gone.
async fn write_loop(
    mut out: OwnedWriteHalf,
    mut rx: mpsc::Receiver<Outgoing>,
    conn: CancellationToken,
) {
    while let Some(answer) = rx.recv().await {
        let mut written = out.write_all(&answer.line).await;
        if let (Ok(()), Some(payload)) = (&written, &answer.payload) {
            written = out.write_all(&payload.bytes).await;
        }
        if written.is_err() {
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
