//! Streamable HTTP: rmcp's `StreamableHttpService` mounted at `/mcp`, behind a bearer-token
//! check when a token is set. A token is required for any bind that is not loopback: whoever
//! reaches this endpoint can run commands.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::sync::CancellationToken;

use crate::error::ServeError;
use crate::server::StockadeMcp;

/// The path the MCP endpoint is served on.
pub const MCP_PATH: &str = "/mcp";

/// Check the bind/token combination before anything listens.
pub fn check_bind(addr: SocketAddr, token: Option<&str>) -> Result<(), ServeError> {
    match token {
        Some("") => Err(ServeError::EmptyToken),
        None if !addr.ip().is_loopback() => Err(ServeError::TokenRequired { addr }),
        _ => Ok(()),
    }
}

/// Serve `server` on `addr` until `cancel` fires. `ready` receives the bound address (useful
/// with port 0).
pub async fn serve(
    server: StockadeMcp,
    addr: SocketAddr,
    token: Option<String>,
    cancel: CancellationToken,
    ready: impl FnOnce(SocketAddr),
) -> Result<(), ServeError> {
    check_bind(addr, token.as_deref())?;
    let mut config = StreamableHttpServerConfig::default().with_cancellation_token(cancel.clone());
    if !addr.ip().is_loopback() {
        // Host checks guard a loopback server against DNS rebinding; a remote bind is reached
        // under names we cannot know, and the bearer token guards it instead.
        config = config.disable_allowed_hosts();
    }
    let service: StreamableHttpService<StockadeMcp, LocalSessionManager> =
        StreamableHttpService::new(move || Ok(server.clone()), Default::default(), config);
    let mut router = axum::Router::new().nest_service(MCP_PATH, service);
    if let Some(token) = token {
        let expected: Arc<[u8]> = Arc::from(format!("Bearer {token}").into_bytes());
        router = router.layer(middleware::from_fn_with_state(expected, require_bearer));
    }
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| ServeError::Bind { addr, source })?;
    let bound = listener.local_addr().map_err(|source| ServeError::Io {
        context: "cannot read the bound address".into(),
        source,
    })?;
    ready(bound);
    axum::serve(listener, router)
        .with_graceful_shutdown(async move { cancel.cancelled_owned().await })
        .await
        .map_err(|source| ServeError::Io { context: "the HTTP server failed".into(), source })
}

async fn require_bearer(
    State(expected): State<Arc<[u8]>>,
    headers: HeaderMap,
    request: Request,
    next: Next,
) -> Response {
    let given = headers.get(header::AUTHORIZATION).map(|v| v.as_bytes()).unwrap_or_default();
    if constant_time_eq(given, &expected) {
        next.run(request).await
    } else {
        (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Bearer")],
            "missing or wrong bearer token\n",
        )
            .into_response()
    }
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
    fn remote_binds_need_a_token() {
        let remote: SocketAddr = "0.0.0.0:8080".parse().unwrap_or_else(|_| unreachable!());
        let local: SocketAddr = "127.0.0.1:8080".parse().unwrap_or_else(|_| unreachable!());
        assert!(matches!(check_bind(remote, None), Err(ServeError::TokenRequired { .. })));
        assert!(check_bind(remote, Some("t")).is_ok());
        assert!(check_bind(local, None).is_ok());
        assert!(matches!(check_bind(local, Some("")), Err(ServeError::EmptyToken)));
    }
}
