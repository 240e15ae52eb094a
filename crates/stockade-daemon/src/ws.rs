//! The WebSocket door: the daemon's JSON-RPC for a remote device gateway, one message per text
//! frame, behind a bearer token.
//!
//! This module owns the TCP listener, each connection's way in and the mapping between WebSocket
//! messages and the server's frames. A connection takes a pending place before it is accepted
//! (`admission`), gets TLS when the door has it (`tls`), then its HTTP request is served by the
//! door's router (`http`): probes and metrics are answered there, and an upgrade is refused with
//! 401 before any method can run unless the `Authorization: Bearer <token>` header matches the
//! door's token (`token::WsToken`). Everything after the upgrade — a task per request, at most
//! [`MAX_IN_FLIGHT_PER_CONNECTION`](crate::MAX_IN_FLIGHT_PER_CONNECTION) in flight, answers
//! through one writer — is [`read_requests`](crate::requests::read_requests), shared with the
//! Unix socket.
//!
//! The token is taken from the header only, never from the URL: query strings end up in proxy
//! and access logs. A non-loopback door without TLS is refused unless the operator asks for
//! `--insecure-plaintext` (`tls`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use futures_util::{SinkExt as _, StreamExt as _};
use hyper::upgrade::Upgraded;
use hyper_util::rt::TokioIo;
use serde_json::Value;
use stockade_proto::rpc::{MAX_REQUEST_BYTES, Response, code};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, Role, WebSocketConfig};
use tokio_tungstenite::tungstenite::{Bytes, Error as WsError, Message, error::CapacityError};
use tokio_util::sync::CancellationToken;

use crate::admission::{Admission, Pending};
use crate::config::WsConfig;
use crate::error::WsSetupError;
use crate::frame_clock::{FrameClock, Watched};
use crate::framing::Frame;
use crate::gate::DoorTls;
use crate::http::{Doorway, Upgrade};
use crate::reload::{Credentials, LiveTls, LiveToken};
use crate::requests::{FrameSource, Outgoing, WRITE_QUEUE, encode, read_requests};
use crate::state::Shared;

/// How long a client has, from when its connection is looked at, to send its first byte, finish
/// TLS and send its request head; then as long again for the upgrade to complete. It holds one
/// of the few pending places until then.
const HANDSHAKE_TIMEOUT: Duration = crate::gate::HEAD_DEADLINE;
/// How long closing a connection may take: sending the close frame, then waiting for the client
/// to close its side (see [`finish`]).
const CLOSE_TIMEOUT: Duration = Duration::from_secs(2);
/// Buffer for discarding what a client still sends after the daemon's close frame.
const LINGER_BUFFER: usize = 8 * 1024;
/// Read buffer per WebSocket connection (as for the Unix socket).
const READ_BUFFER: usize = 64 * 1024;
/// Pings a peer may send per [`PING_WINDOW`]: each is answered with a pong the library queues
/// even while the peer reads nothing, so a flood would grow the daemon without bound. Clients
/// ping every few seconds at most; past this the connection is closed (policy).
const PINGS_PER_WINDOW: u32 = 100;
const PING_WINDOW: Duration = Duration::from_secs(10);

/// A bound WebSocket listener and the token its connections must present.
pub(crate) struct WsListener {
    listener: TcpListener,
    token: LiveToken,
    addr: SocketAddr,
    tls: Option<LiveTls>,
}

impl WsListener {
    /// Read the token (and the certificate), to be reloaded with `credentials`, and bind
    /// `config.addr`. Must be called inside a tokio runtime.
    pub(crate) fn bind(
        config: &WsConfig,
        credentials: &mut Credentials,
    ) -> Result<WsListener, WsSetupError> {
        let token = credentials.token("the door's token", &config.token_file)?;
        crate::tls::check_plaintext(config.addr, config.tls.is_some(), config.insecure_plaintext)?;
        let tls = config.tls.as_ref().map(|files| credentials.tls(files)).transpose()?;
        let bind_err = |source| WsSetupError::Bind { addr: config.addr, source };
        let listener = crate::gate::bind(config.addr).map_err(bind_err)?;
        let addr = listener.local_addr().map_err(bind_err)?;
        Ok(WsListener { listener, token, addr, tls })
    }

    /// The address actually bound (the port is known even when 0 was asked for).
    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The door's token (for the audit log: the fingerprint of the one in use).
    pub(crate) fn token(&self) -> LiveToken {
        Arc::clone(&self.token)
    }

    /// The certificate and key, when the door has TLS.
    pub(crate) fn tls(&self) -> Option<LiveTls> {
        self.tls.clone()
    }

    /// The door's router, for its connections; `scrape` (the read-only metrics token) reads
    /// `/metrics` there too.
    pub(crate) fn doorway(
        &self,
        shared: Arc<Shared>,
        admission: Arc<Admission>,
        scrape: Option<LiveToken>,
    ) -> Doorway {
        Doorway::door(shared, Arc::clone(&self.token), admission, scrape)
    }
}

/// The next TCP connection with its pending place (taken first, so a full set of pending
/// connections holds new ones in the kernel's queue; see [`crate::admission`]), or never when
/// there is no WebSocket door.
pub(crate) async fn accept(
    listener: Option<&WsListener>,
    admission: &Arc<Admission>,
) -> std::io::Result<(TcpStream, SocketAddr, Pending)> {
    let Some(l) = listener else { return std::future::pending().await };
    crate::gate::accept(&l.listener, admission).await
}

/// The limits of an upgraded connection: a message (and a frame) as large as a request line on
/// the Unix socket, so memory per connection stays bounded.
fn ws_config() -> WebSocketConfig {
    WebSocketConfig::default()
        .read_buffer_size(READ_BUFFER)
        .max_message_size(Some(MAX_REQUEST_BYTES))
        .max_frame_size(Some(MAX_REQUEST_BYTES))
}

/// One door connection: its way in (inside its pending place), then requests as on the Unix
/// socket.
pub(crate) async fn connection(
    shared: Arc<Shared>,
    stream: TcpStream,
    peer: SocketAddr,
    doorway: Doorway,
    conn: CancellationToken,
    pending: Pending,
) {
    let Some(ws) = way_in(&shared, stream, peer, &doorway, pending).await else { return };
    let (ws, _slot, clock) = ws;
    let _open = shared.metrics.connection();
    let (sink, stream) = ws.split();
    let (tx, rx) = mpsc::channel::<Outgoing>(WRITE_QUEUE);
    let writer = tokio::spawn(write_loop(sink, rx, conn.clone()));
    let mut source = Messages {
        stream,
        tx: tx.clone(),
        close: None,
        pings: 0,
        window: tokio::time::Instant::now(),
        clock,
        frame_base: crate::frame_clock::frame_base(),
    };
    // A network client holds the door's token, which no sandboxed command can read.
    let caller = Arc::new(crate::hall::Caller::Free);
    // The token in use as the connection starts: the one its upgrade was checked against,
    // unless a reload came in between.
    let token_id = shared.door_token.as_ref().map(|token| token.get().id());
    let who = Arc::new(crate::audit::Peer { door: "ws", peer: peer.to_string(), token_id });
    if let Some(audit) = &shared.audit {
        audit.connected(&who);
    }
    let mut tasks = read_requests(&shared, &mut source, &tx, &conn, (caller, who)).await;
    // No more requests: the client closed (or vanished), the daemon stops, or a message was too
    // large. A WebSocket cannot half-close, so the client is gone or about to be: in-flight
    // requests are cancelled (long polls stop, a foreground run it waited on is terminated) and
    // whatever they answer is still sent.
    let close = match source.close.take() {
        Some(close) => Some(close),
        None if shared.stop.is_cancelled() => {
            Some(close_frame(CloseCode::Away, "the daemon is shutting down"))
        }
        None => None,
    };
    conn.cancel();
    while tasks.join_next().await.is_some() {}
    let Messages { stream, tx: source_tx, .. } = source;
    drop(source_tx);
    drop(tx);
    let Ok(Some(sink)) = writer.await else { return };
    let _ = tokio::time::timeout(CLOSE_TIMEOUT, finish(sink, stream, close)).await;
}

/// The way in: the first byte, TLS and the request head within [`HANDSHAKE_TIMEOUT`], the
/// request served by the door's router, and when it was an accepted upgrade, the WebSocket with
/// its slot of the connection budget. The pending place is held until then (see
/// [`crate::admission`]); `None` when the connection ends here.
async fn way_in(
    shared: &Shared,
    stream: TcpStream,
    peer: SocketAddr,
    doorway: &Doorway,
    pending: Pending,
) -> Option<(WebSocketStream<Io>, tokio::sync::OwnedSemaphorePermit, FrameClock)> {
    // Inside the pending place: while nothing has arrived, a newer connection may take it back;
    // once bytes arrive, only the deadline ends it.
    let deadline = tokio::time::Instant::now() + HANDSHAKE_TIMEOUT;
    let tls = shared.door_tls.clone().map_or(DoorTls::Plain, DoorTls::Live);
    let stream = crate::gate::look_in(stream, peer, &pending, &tls, deadline).await?;
    // Probes and metrics are answered there; only an accepted upgrade comes back. A connection
    // still sending its head may be told to go to make room (see `crate::admission`).
    let served = tokio::select! {
        served = doorway.serve(stream, peer, deadline) => served,
        () = pending.cancel.cancelled() => return None,
    };
    let Upgrade { on, slot } = served?;
    let upgraded = match tokio::time::timeout(HANDSHAKE_TIMEOUT, on).await {
        Ok(Ok(upgraded)) => upgraded,
        Ok(Err(e)) => {
            tracing::debug!(%peer, error = %e, "WebSocket upgrade failed");
            return None;
        }
        Err(_) => {
            tracing::debug!(%peer, "the WebSocket upgrade took too long");
            return None;
        }
    };
    drop(pending);
    let clock = FrameClock::default();
    let io = Watched::new(TokioIo::new(upgraded), clock.clone());
    let ws = WebSocketStream::from_raw_socket(io, Role::Server, Some(ws_config())).await;
    Some((ws, slot, clock))
}

/// Send the close frame (with a reason when the daemon ends the connection), then read and
/// discard whatever the client still sends until it closes too: closing a TCP connection with
/// unread bytes resets it, and a reset can lose the last answers and the close frame.
async fn finish(mut sink: Sink, stream: Stream, close: Option<CloseFrame>) {
    if let Some(close) = close {
        let _ = sink.send(Message::Close(Some(close))).await;
    }
    let _ = sink.close().await;
    let Ok(ws) = sink.reunite(stream) else { return };
    let mut tcp = ws.into_inner();
    let _ = tcp.shutdown().await;
    let mut discard = vec![0u8; LINGER_BUFFER];
    while matches!(tcp.read(&mut discard).await, Ok(n) if n > 0) {}
}

/// An upgraded connection, as hyper hands it over, its frames timed.
type Io = Watched<TokioIo<Upgraded>>;
type Sink = futures_util::stream::SplitSink<WebSocketStream<Io>, Message>;
type Stream = futures_util::stream::SplitStream<WebSocketStream<Io>>;

fn close_frame(code: CloseCode, reason: &str) -> CloseFrame {
    CloseFrame { code, reason: reason.into() }
}

/// Write answers in order, one text message each, a binary read's bytes as the binary message
/// right after its answer (nothing comes between); gives the sink back for the close frame, or
/// `None` when the client is gone.
async fn write_loop(
    mut sink: Sink,
    mut rx: mpsc::Receiver<Outgoing>,
    conn: CancellationToken,
) -> Option<Sink> {
    while let Some(Outgoing { mut line, payload, budget: _held_until_sent }) = rx.recv().await {
        if line.last() == Some(&b'\n') {
            line.pop();
        }
        let text = String::from_utf8(line)
            .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned());
        let mut sent = sink.send(Message::text(text)).await;
        if let (Ok(()), Some(payload)) = (&sent, payload) {
            // Owned by the message: once framed, the buffer is the connection's spare again.
            sent = sink.send(Message::binary(Bytes::from_owner(payload))).await;
        }
        if sent.is_err() {
            conn.cancel();
            return None;
        }
    }
    Some(sink)
}

/// A WebSocket's messages as the server's frames: a text message is one request; a binary
/// message is answered with an error here and skipped; a message over the size limit is answered
/// with an error and ends the connection (the rest of it cannot be skipped).
struct Messages {
    stream: Stream,
    /// For answers given here rather than by a handler.
    tx: mpsc::Sender<Outgoing>,
    /// Why the daemon ends the connection, when it does.
    close: Option<CloseFrame>,
    /// Pings in the current window, and when it began.
    pings: u32,
    window: tokio::time::Instant,
    /// Where the peer is in its current frame, and the deadline every frame gets.
    clock: FrameClock,
    frame_base: Duration,
}

impl Messages {
    /// Counts a ping; `false` once the peer sent more than its share in this window.
    fn ping_allowed(&mut self) -> bool {
        let now = tokio::time::Instant::now();
        if now.duration_since(self.window) >= PING_WINDOW {
            self.window = now;
            self.pings = 0;
        }
        self.pings += 1;
        self.pings <= PINGS_PER_WINDOW
    }
}

impl FrameSource for Messages {
    async fn next_frame(&mut self) -> std::io::Result<Option<Frame>> {
        loop {
            let next = tokio::select! {
                next = self.stream.next() => next,
                () = self.clock.overdue(self.frame_base) => {
                    tracing::info!(
                        "a WebSocket peer left a frame unfinished past its deadline ({:?} + 1 s per MiB); closing it",
                        self.frame_base
                    );
                    self.close = Some(close_frame(CloseCode::Policy, "a frame took too long"));
                    return Ok(None);
                }
            };
            let message = match next {
                None | Some(Ok(Message::Close(_))) => return Ok(None),
                Some(Ok(m)) => m,
                Some(Err(WsError::Capacity(CapacityError::MessageTooLong { size, max_size }))) => {
                    let sentence = format!(
                        "the message has at least {size} bytes, more than the limit of {max_size}; the connection is closed"
                    );
                    let answer = Response::err(Value::Null, code::INVALID_REQUEST, &sentence);
                    let _ = self.tx.send(encode(&answer).into()).await;
                    self.close = Some(close_frame(CloseCode::Size, "message too large"));
                    return Ok(None);
                }
                Some(Err(WsError::Io(e))) => return Err(e),
                Some(Err(e)) => {
                    tracing::debug!(error = %e, "WebSocket read failed");
                    self.close = Some(close_frame(CloseCode::Protocol, "protocol error"));
                    return Ok(None);
                }
            };
            match message {
                Message::Text(text) => return Ok(Some(Frame::Line(Bytes::from(text).into()))),
                Message::Binary(bytes) => {
                    let answer = Response::err(
                        Value::Null,
                        code::INVALID_REQUEST,
                        format!(
                            "a binary message ({} bytes) was skipped: send each JSON-RPC request as one text message",
                            bytes.len()
                        ),
                    );
                    let _ = self.tx.send(encode(&answer).into()).await;
                }
                // Pings are answered by the library, within their share.
                Message::Ping(_) => {
                    if !self.ping_allowed() {
                        tracing::info!(
                            "a WebSocket peer sent more than {PINGS_PER_WINDOW} pings in {PING_WINDOW:?}; closing it"
                        );
                        self.close = Some(close_frame(CloseCode::Policy, "too many pings"));
                        return Ok(None);
                    }
                }
                // Pongs and raw frames need nothing.
                Message::Pong(_) | Message::Frame(_) | Message::Close(_) => {}
            }
        }
    }
}
