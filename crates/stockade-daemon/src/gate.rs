//! The one admission gate every HTTP door passes: the WebSocket door, the metrics address, the
//! E2B door and `stockade mcp --http`.
//!
//! A connection takes a pending place of an [`Admission`] before it is accepted, is looked at
//! ([`Stage::Silent`]), and once its first byte arrives ([`Stage::Speaking`]) has until
//! [`HEAD_DEADLINE`] to finish TLS and send a request head that authenticates (the door says
//! which heads do). Until then a newer connection may push it out (see [`crate::admission`]); a
//! request that does not authenticate (a probe, a 401) is answered and the connection closed
//! after it. Once a head authenticates, the connection leaves its pending place for a slot of
//! the connection budget (none left: 503) and is served for as long as it stays open, as
//! long-lived streams need.
//!
//! So a flood of silent or trickling connections at any door holds at most
//! [`PENDING_CAP`](crate::PENDING_CAP) sockets, and a token holder gets a place within a few
//! hundred milliseconds of asking.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::Response;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceExt as _;

use crate::admission::{Admission, Pending, Stage, UNIX_RESERVE};
use crate::config::MAX_CONNECTIONS;
use crate::reload::{DoorCert, LiveTls};
use crate::tls::DoorStream;

/// How long a connection has, from when it is looked at, to send its first byte, finish TLS and
/// send a request head that authenticates. It holds one of the few pending places until then.
pub const HEAD_DEADLINE: Duration = Duration::from_secs(3);
/// Longest request head read (hyper answers a longer one with 431).
const MAX_HEAD: usize = 16 * 1024;
/// Pause after a failed `accept` (e.g. out of file descriptors).
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);
/// How long connections may take to finish once the door stops.
const DRAIN: Duration = Duration::from_secs(5);

/// Connections the kernel completes and queues before a door accepts them (the length
/// `std::net::TcpListener` uses, 128, drops a burst's SYNs and costs those clients a second).
const LISTEN_BACKLOG: u32 = 1024;

/// Bind a door's TCP listener (address reuse on, a long accept queue). Must be called inside a
/// tokio runtime.
pub fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = match addr {
        SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4(),
        SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6(),
    }?;
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

/// Where a door's certificate comes from: none, one loaded once, or one every reload replaces.
#[derive(Clone)]
pub(crate) enum DoorTls {
    Plain,
    Live(LiveTls),
}

impl DoorTls {
    /// The certificate in force now (a reload later does not touch a connection that took it).
    pub(crate) fn now(&self) -> Option<Arc<TlsAcceptor>> {
        match self {
            DoorTls::Plain => None,
            DoorTls::Live(live) => Some(live.get()),
        }
    }
}

/// The next connection of `listener` with its pending place, taken first: while every place is
/// taken, new connections wait in the kernel's accept queue (see [`crate::admission`]).
pub(crate) async fn accept(
    listener: &TcpListener,
    admission: &Arc<Admission>,
) -> std::io::Result<(TcpStream, SocketAddr, Pending)> {
    let place = admission.place().await;
    let (stream, peer) = listener.accept().await?;
    Ok((stream, peer, place))
}

/// A connection's way in, inside its pending place: looked at, its first byte, then TLS, all by
/// `deadline`; `None` when it ran out of time, failed, or was told to make room.
pub(crate) async fn look_in(
    stream: TcpStream,
    peer: SocketAddr,
    pending: &Pending,
    tls: &DoorTls,
    deadline: Instant,
) -> Option<DoorStream> {
    // While nothing has arrived, a newer connection may take the place back.
    pending.reached(Stage::Silent);
    let look = async {
        let mut first = [0u8; 1];
        let _ = stream.peek(&mut first).await;
        pending.reached(Stage::Speaking);
        let tls = tls.now();
        crate::tls::accept(stream, tls.as_deref(), peer).await
    };
    tokio::select! {
        looked = tokio::time::timeout_at(deadline, look) => looked.ok()?,
        () = pending.cancel.cancelled() => None,
    }
}

/// Which request heads let a connection in (the door's token, checked in constant time).
pub type Authenticates = Arc<dyn Fn(&HeaderMap) -> bool + Send + Sync>;

/// An HTTP door behind the admission gate: its listener, its TLS, the admission whose places
/// and budget it takes, and which heads authenticate.
pub struct GatedDoor {
    listener: TcpListener,
    tls: DoorTls,
    admission: Arc<Admission>,
}

impl GatedDoor {
    /// A door outside the daemon (`stockade mcp --http`): its certificate and key as a
    /// [`Keyring`](crate::Keyring) reloads them; `admission` is that process's own.
    pub fn new(listener: TcpListener, tls: Option<DoorCert>, admission: Arc<Admission>) -> Self {
        let tls = tls.map_or(DoorTls::Plain, |t| DoorTls::Live(t.0));
        GatedDoor { listener, tls, admission }
    }

    /// Bind `addr` (see `bind`) for a door outside the daemon. Must be called inside a tokio
    /// runtime.
    pub fn bind(
        addr: SocketAddr,
        tls: Option<DoorCert>,
        admission: Arc<Admission>,
    ) -> std::io::Result<Self> {
        Ok(GatedDoor::new(bind(addr)?, tls, admission))
    }

    pub(crate) fn with(listener: TcpListener, tls: DoorTls, admission: Arc<Admission>) -> Self {
        GatedDoor { listener, tls, admission }
    }

    /// The address bound.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serve `router` until `stop` is cancelled, then let open connections finish (a few
    /// seconds at most). Each request carries its client's address as
    /// `ConnectInfo<SocketAddr>`.
    pub async fn serve(
        self,
        router: Router,
        authenticates: Authenticates,
        stop: CancellationToken,
    ) {
        let connections = TaskTracker::new();
        loop {
            let accepted = tokio::select! {
                () = stop.cancelled() => break,
                accepted = accept(&self.listener, &self.admission) => accepted,
            };
            match accepted {
                Ok((stream, peer, pending)) => {
                    let visit = Visit::new(peer, pending, &self.admission, &authenticates);
                    let (router, tls, stop) = (router.clone(), self.tls.clone(), stop.clone());
                    connections.spawn(visit.run(stream, router, tls, stop));
                    // Its task looks at it before the next is accepted (see `crate::admission`).
                    tokio::task::yield_now().await;
                }
                Err(e) => {
                    tracing::debug!(error = %e, "accept failed");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                }
            }
        }
        drop(self.listener);
        connections.close();
        let _ = tokio::time::timeout(DRAIN, connections.wait()).await;
    }
}

/// One connection of a [`GatedDoor`]: pending until a head authenticates, then holding a slot.
struct Visit {
    peer: SocketAddr,
    pending: Mutex<Option<Pending>>,
    /// Cancelled when a newer connection needs the pending place.
    evicted: CancellationToken,
    slot: Mutex<Option<OwnedSemaphorePermit>>,
    authenticated: AtomicBool,
    admission: Arc<Admission>,
    authenticates: Authenticates,
}

/// What the gate makes of one request head.
enum Verdict {
    /// The connection is in (now or before): served as the router says.
    In,
    /// Not authenticated: answered, then the connection is closed.
    Once,
    /// Authenticated, but the budget is spent.
    Full,
}

impl Visit {
    fn new(
        peer: SocketAddr,
        pending: Pending,
        admission: &Arc<Admission>,
        authenticates: &Authenticates,
    ) -> Arc<Visit> {
        Arc::new(Visit {
            peer,
            evicted: pending.cancel.clone(),
            pending: Mutex::new(Some(pending)),
            slot: Mutex::new(None),
            authenticated: AtomicBool::new(false),
            admission: Arc::clone(admission),
            authenticates: Arc::clone(authenticates),
        })
    }

    fn verdict(&self, headers: &HeaderMap) -> Verdict {
        if self.authenticated.load(Ordering::Acquire) {
            return Verdict::In;
        }
        if !(self.authenticates)(headers) {
            return Verdict::Once;
        }
        let Some(slot) = self.admission.network() else { return Verdict::Full };
        *self.slot.lock().unwrap_or_else(PoisonError::into_inner) = Some(slot);
        self.authenticated.store(true, Ordering::Release);
        // Out of the pending places: only the client or the door's stop ends it now.
        drop(self.pending.lock().unwrap_or_else(PoisonError::into_inner).take());
        Verdict::In
    }

    async fn run(
        self: Arc<Self>,
        stream: TcpStream,
        router: Router,
        tls: DoorTls,
        stop: CancellationToken,
    ) {
        let peer = self.peer;
        let deadline = Instant::now() + HEAD_DEADLINE;
        let stream = {
            let guard = self.pending.lock().unwrap_or_else(PoisonError::into_inner).take();
            let Some(pending) = guard else { return };
            let looked = look_in(stream, peer, &pending, &tls, deadline).await;
            *self.pending.lock().unwrap_or_else(PoisonError::into_inner) = Some(pending);
            match looked {
                Some(stream) => stream,
                None => return,
            }
        };
        let visit = Arc::clone(&self);
        let service = hyper::service::service_fn(move |mut request: hyper::Request<Incoming>| {
            request.extensions_mut().insert(ConnectInfo(peer));
            let verdict = visit.verdict(request.headers());
            let router = router.clone();
            async move {
                match verdict {
                    Verdict::In => router.oneshot(request).await,
                    Verdict::Once => router.oneshot(request).await.map(closing),
                    Verdict::Full => Ok(full()),
                }
            }
        });
        let connection = http1::Builder::new()
            .max_buf_size(MAX_HEAD)
            .serve_connection(TokioIo::new(stream), service);
        tokio::pin!(connection);
        let head_deadline = async {
            tokio::time::sleep_until(deadline).await;
            if self.authenticated.load(Ordering::Acquire) {
                std::future::pending::<()>().await;
            }
        };
        tokio::select! {
            served = &mut connection => {
                if let Err(e) = served {
                    tracing::debug!(%peer, error = %e, "HTTP on a gated door failed");
                }
            }
            () = head_deadline => {}
            () = self.evicted.cancelled() => {}
            () = stop.cancelled() => {
                connection.as_mut().graceful_shutdown();
                let _ = tokio::time::timeout(DRAIN, connection).await;
            }
        }
    }
}

/// The answer to a request that did not authenticate, with the connection closed after it.
fn closing(mut response: Response) -> Response {
    response.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// 503: every network slot of the budget is taken.
fn full() -> Response {
    let sentence = format!(
        "the server already serves {} network connections; close some and retry\n",
        MAX_CONNECTIONS - UNIX_RESERVE
    );
    let mut response = Response::new(Body::from(sentence));
    *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    closing(response)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    /// A gated door answering `ok` to everything, whose token is the header `x-key: k`.
    fn door() -> (SocketAddr, CancellationToken) {
        let loopback = SocketAddr::from(([127, 0, 0, 1], 0));
        let door = GatedDoor::bind(loopback, None, Admission::new()).unwrap();
        let addr = door.local_addr().unwrap();
        let router = Router::new().fallback(|| async { "ok" });
        let key: Authenticates = Arc::new(|h: &HeaderMap| h.get("x-key").is_some_and(|v| v == "k"));
        let stop = CancellationToken::new();
        tokio::spawn(door.serve(router, key, stop.clone()));
        (addr, stop)
    }

    /// Reads until the answer's body `ok` has come, or the connection ends.
    async fn answer(s: &mut TcpStream) -> String {
        let mut got = Vec::new();
        let mut buf = [0u8; 1024];
        while !got.ends_with(b"ok") {
            match tokio::time::timeout(Duration::from_secs(10), s.read(&mut buf)).await {
                Ok(Ok(n)) if n > 0 => got.extend_from_slice(&buf[..n]),
                _ => break,
            }
        }
        String::from_utf8_lossy(&got).into_owned()
    }

    #[tokio::test]
    async fn a_request_without_the_token_is_answered_and_its_connection_closed() {
        let (addr, stop) = door();
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
        let said = answer(&mut s).await;
        assert!(said.starts_with("HTTP/1.1 200") && said.contains("connection: close"), "{said}");
        let mut rest = Vec::new();
        let end = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut rest)).await;
        assert!(matches!(end, Ok(Ok(0))), "the connection is closed after the answer");
        stop.cancel();
    }

    #[tokio::test]
    async fn a_token_holder_keeps_its_connection_past_the_deadline_a_silent_one_does_not() {
        let (addr, stop) = door();
        let mut silent = TcpStream::connect(addr).await.unwrap();
        let mut holder = TcpStream::connect(addr).await.unwrap();
        let ask = b"GET / HTTP/1.1\r\nHost: x\r\nx-key: k\r\n\r\n";
        holder.write_all(ask).await.unwrap();
        let said = answer(&mut holder).await;
        assert!(said.starts_with("HTTP/1.1 200") && !said.contains("close"), "{said}");
        tokio::time::sleep(HEAD_DEADLINE + Duration::from_millis(500)).await;
        // The silent one was closed at the deadline; the token holder's is still served.
        let mut rest = Vec::new();
        let end = tokio::time::timeout(Duration::from_secs(1), silent.read_to_end(&mut rest)).await;
        assert!(matches!(end, Ok(Ok(0))), "a silent connection is closed at the deadline");
        holder.write_all(ask).await.unwrap();
        let said = answer(&mut holder).await;
        assert!(said.starts_with("HTTP/1.1 200"), "{said}");
        stop.cancel();
    }
}
