//! Streamable HTTP: rmcp's `StreamableHttpService` mounted at `/mcp`, behind a bearer token on
//! every bind (whoever reaches this endpoint can run commands as this user, and on loopback that
//! includes every other local user). The `Authorization` scheme is matched in any case; a request
//! carrying an `Origin` header is refused unless that origin was allowed (browsers send it, so a
//! web page cannot reach a local server through DNS rebinding); `Host` must be loopback on a
//! loopback bind. With a certificate and key it serves HTTPS, set up as the daemon's WebSocket
//! door is.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use stockade_daemon::{DoorStream, TlsDoor, TlsFiles};
use stockade_proto::token;
use tokio_util::sync::CancellationToken;

use crate::error::ServeError;
use crate::server::StockadeMcp;

/// The path the MCP endpoint is served on.
pub const MCP_PATH: &str = "/mcp";

/// How an HTTP server is guarded. Its `Debug` never shows the token.
#[derive(Clone)]
pub struct HttpGuard {
    /// The bearer token every request must carry (at least
    /// [`MIN_TOKEN_LEN`](stockade_proto::token::MIN_TOKEN_LEN) bytes).
    pub token: String,
    /// Browser origins allowed to call (e.g. `http://localhost:6274`); a request with any other
    /// `Origin` header is refused with 403. Requests without one (non-browser clients) pass.
    pub allowed_origins: Vec<String>,
}

impl std::fmt::Debug for HttpGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HttpGuard(token: <redacted>, origins: {:?})", self.allowed_origins)
    }
}

/// Check the guard before anything listens.
pub fn check_guard(guard: &HttpGuard) -> Result<(), ServeError> {
    token::check_token(guard.token.as_bytes()).map_err(|problem| ServeError::BadToken { problem })
}

/// Serve `server` on `addr` until `cancel` fires. `ready` receives the bound address (useful
/// with port 0).
pub async fn serve(
    server: StockadeMcp,
    addr: SocketAddr,
    guard: HttpGuard,
    tls: Option<TlsFiles>,
    cancel: CancellationToken,
    ready: impl FnOnce(SocketAddr),
) -> Result<(), ServeError> {
    check_guard(&guard)?;
    // Before anything listens: a bad certificate or key is the operator's to fix now.
    let door = tls.as_ref().map(TlsDoor::load).transpose()?;
    let mut config = StreamableHttpServerConfig::default()
        .with_cancellation_token(cancel.clone())
        .with_allowed_origins(guard.allowed_origins.clone())
        // With no origin allowed, every request that carries one is refused.
        .enforce_origin_validation()
        // No priming event: it carries empty data, which Gemini CLI's client parses as JSON
        // and fails on ("Unexpected end of JSON input"), getting no tools at all.
        .with_sse_retry(None);
    if !addr.ip().is_loopback() {
        // Host checks guard a loopback server against DNS rebinding; a remote bind is reached
        // under names we cannot know, and the bearer token guards it instead.
        config = config.disable_allowed_hosts();
    }
    let mut sessions = LocalSessionManager::default();
    // Nor at the start or end of a session's streams (the same empty event).
    sessions.session_config.sse_retry = None;
    let service: StreamableHttpService<StockadeMcp, LocalSessionManager> =
        StreamableHttpService::new(move || Ok(server.clone()), Arc::new(sessions), config);
    let expected: Arc<[u8]> = Arc::from(guard.token.into_bytes());
    let router = axum::Router::new()
        .nest_service(MCP_PATH, service)
        .layer(middleware::from_fn(closed_is_ok))
        .layer(middleware::from_fn_with_state(expected, require_bearer));
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| ServeError::Bind { addr, source })?;
    let bound = listener.local_addr().map_err(|source| ServeError::Io {
        context: "cannot read the bound address".into(),
        source,
    })?;
    ready(bound);
    let shutdown = async move { cancel.cancelled_owned().await };
    let served = match door {
        None => axum::serve(listener, router).with_graceful_shutdown(shutdown).await,
        Some(door) => {
            let listener = TlsListener { tcp: listener, door };
            axum::serve(listener, router).with_graceful_shutdown(shutdown).await
        }
    };
    served.map_err(|source| ServeError::Io { context: "the HTTP server failed".into(), source })
}

/// Longest a client may take over its TLS handshake. Handshakes are taken one at a time, so a
/// client that stalls holds the next ones back this long at most.
const TLS_HANDSHAKE: Duration = Duration::from_secs(5);

/// The TCP listener with the daemon's TLS setup on every connection.
struct TlsListener {
    tcp: tokio::net::TcpListener,
    door: TlsDoor,
}

impl axum::serve::Listener for TlsListener {
    type Io = DoorStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (DoorStream, SocketAddr) {
        loop {
            let (stream, peer) = match self.tcp.accept().await {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of descriptors and the like: wait rather than spin.
                    tracing::debug!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            if let Ok(Some(stream)) =
                tokio::time::timeout(TLS_HANDSHAKE, self.door.accept(stream, peer)).await
            {
                return (stream, peer);
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.tcp.local_addr()
    }
}

async fn require_bearer(
    State(expected): State<Arc<[u8]>>,
    headers: HeaderMap,
    request: Request,
    next: Next,
) -> Response {
    let values = headers.get_all(header::AUTHORIZATION);
    let presented = values.iter().next().is_some();
    if values
        .iter()
        .any(|v| token::bearer(v.as_bytes()).is_some_and(|t| constant_time_eq(t, &expected)))
    {
        return next.run(request).await;
    }
    let body = if presented {
        "the bearer token is wrong: send `Authorization: Bearer <token>` with the token stockade mcp printed or was given\n"
    } else {
        "a bearer token is required: send `Authorization: Bearer <token>` with the token stockade mcp printed or was given\n"
    };
    (StatusCode::UNAUTHORIZED, [(header::WWW_AUTHENTICATE, "Bearer")], body).into_response()
}

/// A closed session is answered 200, not 202: the Python SDK logs anything but 200 or 204 to
/// its `DELETE` as a failed termination.
async fn closed_is_ok(request: Request, next: Next) -> Response {
    let delete = request.method() == axum::http::Method::DELETE;
    let mut response = next.run(request).await;
    if delete && response.status() == StatusCode::ACCEPTED {
        *response.status_mut() = StatusCode::OK;
    }
    response
}

/// Compare without an early exit, so the time taken does not reveal how much of a guess was
/// right. (The length is not secret: it is the same for every correct token.)
#[inline(never)]
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let mut diff = u8::from(a.len() != b.len());
    for (i, y) in b.iter().enumerate() {
        let x = a.get(i).copied().unwrap_or(0);
        diff |= x ^ y;
    }
    std::hint::black_box(diff) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_compare_exactly() {
        assert!(constant_time_eq(b"Bearer abc", b"Bearer abc"));
        assert!(!constant_time_eq(b"Bearer abd", b"Bearer abc"));
        assert!(!constant_time_eq(b"Bearer ab", b"Bearer abc"));
        assert!(!constant_time_eq(b"Bearer abcd", b"Bearer abc"));
        assert!(!constant_time_eq(b"", b"Bearer abc"));
    }

    #[test]
    fn every_bind_needs_a_long_token() {
        let guard = |t: &str| HttpGuard { token: t.to_owned(), allowed_origins: vec![] };
        assert!(matches!(check_guard(&guard("")), Err(ServeError::BadToken { .. })));
        assert!(matches!(check_guard(&guard("x")), Err(ServeError::BadToken { .. })));
        assert!(check_guard(&guard("0123456789abcdef")).is_ok());
        assert!(!format!("{:?}", guard("0123456789abcdef")).contains("0123"));
    }
}
