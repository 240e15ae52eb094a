//! Stockade's E2B door: envd's API — the Connect services `process.Process` and
//! `filesystem.Filesystem`, and the HTTP endpoints `/files` and `/health` — served over one
//! engine, so the unmodified `e2b` SDKs drive Stockade as they drive envd.
//!
//! A command started here is the engine's session like any other (in `ps`, read by cursor,
//! killed as a verified tree, recovered after a crash). Where envd and Stockade differ,
//! Stockade's promise wins: a signal ends the command's whole tree, and `Connect` replays the
//! output from its first byte (kept on disk), so a client that reconnects misses nothing.
//!
//! Auth: with a token, every request but `/health` must carry it in `X-Access-Token` (envd's
//! header), compared in constant time.

mod connect;
mod files;
mod filesystem;
mod messages;
mod output;
mod process;
mod tls;
mod user;
mod watch;

pub use tls::TlsPaths;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use stockade_engine::Engine;
use subtle::ConstantTimeEq as _;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// envd's port, which the SDKs' debug mode connects to on localhost.
pub const DEFAULT_PORT: u16 = 49983;

/// Why the door could not start.
#[derive(Debug, thiserror::Error)]
pub enum E2bError {
    /// The address could not be bound.
    #[error("cannot listen on {addr} for the E2B door: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The cause.
        source: std::io::Error,
    },
    /// The certificate or key could not be used.
    #[error("cannot use {path} for the E2B door's TLS: {problem}")]
    Tls {
        /// The file.
        path: std::path::PathBuf,
        /// What is wrong with it.
        problem: String,
    },
}

/// The state every request shares.
pub(crate) struct Door {
    pub(crate) engine: Arc<Engine>,
    pub(crate) table: process::Table,
    pub(crate) stop: CancellationToken,
    pub(crate) watchers: watch::Watchers,
    token: Option<Vec<u8>>,
}

/// A bound E2B door, ready to [`serve`](E2bDoor::serve).
pub struct E2bDoor {
    listener: TcpListener,
    addr: SocketAddr,
    tls: Option<tokio_rustls::TlsAcceptor>,
}

impl E2bDoor {
    /// Binds `addr`, with TLS when `tls` names a certificate and key. Must be called inside a
    /// tokio runtime.
    pub async fn bind(addr: SocketAddr, tls: Option<&TlsPaths>) -> Result<E2bDoor, E2bError> {
        let tls = tls.map(|t| tls::acceptor(&t.cert, &t.key)).transpose()?;
        let listener =
            TcpListener::bind(addr).await.map_err(|source| E2bError::Bind { addr, source })?;
        let addr = listener.local_addr().map_err(|source| E2bError::Bind { addr, source })?;
        Ok(E2bDoor { listener, addr, tls })
    }

    /// The address bound (the port actually taken).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Serves `engine` until `stop` is cancelled; `token`, when given, is required in
    /// `X-Access-Token` on every request but `/health`.
    pub async fn serve(self, engine: Arc<Engine>, token: Option<Vec<u8>>, stop: CancellationToken) {
        let door = Arc::new(Door {
            engine,
            table: process::Table::default(),
            stop: stop.clone(),
            watchers: watch::Watchers::default(),
            token,
        });
        let app = Router::new().fallback(route).with_state(door);
        let served = match self.tls {
            None => tokio::select! {
                r = axum::serve(self.listener, app) => r,
                () = stop.cancelled() => Ok(()),
            },
            Some(acceptor) => {
                let listener = tls::TlsListener::new(self.listener, self.addr, acceptor);
                tokio::select! {
                    r = axum::serve(listener, app) => r,
                    () = stop.cancelled() => Ok(()),
                }
            }
        };
        if let Err(e) = served {
            tracing::warn!("the E2B door stopped: {e}");
        }
    }
}

/// One request: auth, then by path.
async fn route(State(door): State<Arc<Door>>, req: Request) -> Response {
    let path = req.uri().path().to_owned();
    if path == "/health" {
        return StatusCode::NO_CONTENT.into_response();
    }
    if !door.authorized(req.headers()) {
        let e = connect::RpcError::new("unauthenticated", "a missing or wrong X-Access-Token");
        return e.unary_response();
    }
    let method = req.method().clone();
    match (method, path.as_str()) {
        (Method::GET | Method::POST, "/files") => match files::requester(&req) {
            Err((status, message)) => http_error(status, message),
            Ok(user) if req.method() == Method::GET => {
                files::download(files::query(&req, "path"), user).await
            }
            Ok(user) => files::upload(req, user).await,
        },
        (Method::POST, "/init") => StatusCode::NO_CONTENT.into_response(),
        (Method::POST, p) => {
            let (parts, body) = req.into_parts();
            match p.strip_prefix('/').and_then(|p| p.split_once('/')) {
                Some(("process.Process", m)) => {
                    process::call(Arc::clone(&door), m, &parts.headers, body).await
                }
                Some(("filesystem.Filesystem", m)) => {
                    match watch::call(&door, m, &parts.headers, body).await {
                        Ok(served) => served,
                        Err(body) => filesystem::call(m, &parts.headers, body).await,
                    }
                }
                _ => not_served(&path),
            }
        }
        _ => not_served(&path),
    }
}

fn not_served(path: &str) -> Response {
    let e = connect::RpcError::new("unimplemented", format!("{path} is not served by this door"));
    let mut r = e.unary_response();
    *r.status_mut() = StatusCode::NOT_FOUND;
    r
}

impl Door {
    fn authorized(&self, headers: &axum::http::HeaderMap) -> bool {
        let Some(token) = &self.token else { return true };
        headers
            .get("x-access-token")
            .is_some_and(|v| bool::from(v.as_bytes().ct_eq(token.as_slice())))
    }
}

/// A body for an error of the plain HTTP endpoints, as envd words them.
pub(crate) fn http_error(status: StatusCode, message: impl Into<String>) -> Response {
    let body = serde_json::json!({ "code": status.as_u16(), "message": message.into() });
    let mut r = Response::new(Body::from(body.to_string()));
    *r.status_mut() = status;
    r.headers_mut().insert(
        axum::http::header::CONTENT_TYPE,
        axum::http::HeaderValue::from_static("application/json"),
    );
    r
}
