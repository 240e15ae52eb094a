//! Streamable HTTP: rmcp's `StreamableHttpService` mounted at `/mcp`, behind a bearer token on
//! every bind (whoever reaches this endpoint can run commands as this user, and on loopback that
//! includes every other local user). The `Authorization` scheme is matched in any case; a request
//! carrying an `Origin` header is refused unless that origin was allowed (browsers send it, so a
//! web page cannot reach a local server through DNS rebinding); `Host` must be loopback on a
//! loopback bind. With a certificate and key it serves HTTPS, set up as the daemon's WebSocket
//! door is.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use stockade_daemon::{Admission, Authenticates, DoorKey, GatedDoor, Keyring, Reloader, TlsFiles};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

use crate::error::ServeError;
use crate::server::StockadeMcp;

/// The path the MCP endpoint is served on.
pub const MCP_PATH: &str = "/mcp";

/// Where the bearer token comes from.
#[derive(Clone)]
pub enum HttpToken {
    /// Given whole (`--token`): never changes.
    Given(String),
    /// A token file (`--token-file`, or the home's `mcp-token`), read under the token-file rules
    /// and read again when it changes (a kubelet's `..data` swap, a rename) or on
    /// [`HttpGuard::reloader`] (SIGHUP), as the daemon's doors read theirs.
    File(std::path::PathBuf),
}

/// How an HTTP server is guarded. Its `Debug` never shows the token.
#[derive(Clone)]
pub struct HttpGuard {
    /// The bearer token every request must carry (at least
    /// [`MIN_TOKEN_LEN`](stockade_proto::token::MIN_TOKEN_LEN) bytes).
    pub token: HttpToken,
    /// Reads the token file and the certificate and key again when asked (the binary asks on
    /// SIGHUP); they are also read again when their files change.
    pub reloader: Reloader,
    /// Browser origins allowed to call (e.g. `http://localhost:6274`); a request with any other
    /// `Origin` header is refused with 403. Requests without one (non-browser clients) pass.
    pub allowed_origins: Vec<String>,
    /// MCP sessions kept at once: an `initialize` past this is answered 503 (a session costs
    /// memory until it is closed or idle for [`SESSION_IDLE`]). [`DEFAULT_MAX_SESSIONS`] unless
    /// told.
    pub max_sessions: usize,
    /// Event streams (`GET /mcp`) open at once over all sessions; one past this is answered 503.
    /// [`DEFAULT_MAX_STREAMS`] unless told.
    pub max_streams: usize,
}

/// Sessions one HTTP server keeps at once by default (`stockade mcp --max-sessions`).
pub const DEFAULT_MAX_SESSIONS: usize = 256;
/// Event streams open at once by default (`stockade mcp --max-streams`).
pub const DEFAULT_MAX_STREAMS: usize = 256;
/// Event streams one session may hold open at once (a client needs one; a reconnect may
/// briefly overlap the stream it replaces).
pub const STREAMS_PER_SESSION: usize = 4;
/// How long a session may go without a request before it is closed.
pub const SESSION_IDLE: Duration = Duration::from_secs(300);

impl std::fmt::Debug for HttpGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "HttpGuard(token: {}, origins: {:?}, max_sessions: {}, max_streams: {})",
            match &self.token {
                HttpToken::Given(_) => "<redacted>".to_owned(),
                HttpToken::File(path) => format!("file {}", path.display()),
            },
            self.allowed_origins,
            self.max_sessions,
            self.max_streams
        )
    }
}

/// Check the guard before anything listens.
pub fn check_guard(guard: &HttpGuard) -> Result<(), ServeError> {
    match &guard.token {
        HttpToken::Given(token) => DoorKey::fixed(token).map(drop),
        HttpToken::File(path) => stockade_proto::token::read_token_file(path).map(drop),
    }
    .map_err(|problem| ServeError::BadToken { problem })
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
    // Before anything listens: a bad token, certificate or key is the operator's to fix now.
    // Then they are reloaded by the mechanism the daemon's doors use (see `Keyring`).
    let mut keyring = Keyring::new();
    let key = match &guard.token {
        HttpToken::Given(token) => {
            DoorKey::fixed(token).map_err(|problem| ServeError::BadToken { problem })?
        }
        HttpToken::File(path) => keyring.token("the MCP server's token", path)?,
    };
    let door = tls.as_ref().map(|files| keyring.tls(files)).transpose()?;
    tokio::spawn(keyring.watch(guard.reloader.clone(), cancel.clone()));
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
    sessions.session_config.keep_alive = Some(SESSION_IDLE);
    let sessions = Arc::new(sessions);
    let caps = Arc::new(Caps {
        sessions: Arc::clone(&sessions),
        max_sessions: guard.max_sessions.max(1),
        streams: Arc::new(Semaphore::new(guard.max_streams.max(1))),
        max_streams: guard.max_streams.max(1),
        per_session: Arc::new(Mutex::new(HashMap::new())),
    });
    let service: StreamableHttpService<StockadeMcp, LocalSessionManager> =
        StreamableHttpService::new(move || Ok(server.clone()), sessions, config);
    let checked = key.clone();
    // Outermost first: the token, then the caps (so nobody without it learns how full we are).
    let router = axum::Router::new()
        .nest_service(MCP_PATH, service)
        .layer(middleware::from_fn(closed_is_ok))
        .layer(middleware::from_fn_with_state(caps, cap_sessions_and_streams))
        .layer(middleware::from_fn_with_state(checked, require_bearer));
    let door = GatedDoor::bind(addr, door, Admission::new())
        .map_err(|source| ServeError::Bind { addr, source })?;
    let bound = door.local_addr().map_err(|source| ServeError::Io {
        context: "cannot read the bound address".into(),
        source,
    })?;
    ready(bound);
    // A connection is in once a request head carries the token; until then it is pending at
    // the admission gate the daemon's doors pass (a few places, a head deadline, silent and
    // trickling connections dropped to make room), so a flood cannot keep a token holder out.
    let authenticates: Authenticates = Arc::new(move |headers| key.authorizes(headers));
    door.serve(router, authenticates, cancel).await;
    Ok(())
}

async fn require_bearer(
    State(key): State<DoorKey>,
    headers: HeaderMap,
    request: Request,
    next: Next,
) -> Response {
    if key.authorizes(&headers) {
        return next.run(request).await;
    }
    let presented = headers.contains_key(header::AUTHORIZATION);
    let body = if presented {
        "the bearer token is wrong: send `Authorization: Bearer <token>` with the token stockade mcp printed or was given\n"
    } else {
        "a bearer token is required: send `Authorization: Bearer <token>` with the token stockade mcp printed or was given\n"
    };
    (StatusCode::UNAUTHORIZED, [(header::WWW_AUTHENTICATE, "Bearer")], body).into_response()
}

/// What bounds the server's memory against a token holder: sessions and event streams.
struct Caps {
    sessions: Arc<LocalSessionManager>,
    max_sessions: usize,
    streams: Arc<Semaphore>,
    max_streams: usize,
    /// Open event streams per session id.
    per_session: Arc<Mutex<HashMap<String, usize>>>,
}

/// The header naming a request's MCP session.
const SESSION_HEADER: &str = "mcp-session-id";

/// 503 with a sentence saying what is full and what to do, and when to retry.
fn full(what: String) -> Response {
    (StatusCode::SERVICE_UNAVAILABLE, [(header::RETRY_AFTER, "5")], what).into_response()
}

/// Refuses an `initialize` (a POST without a session id) while `max_sessions` are open, and an
/// event stream (a GET) past `max_streams` in all or [`STREAMS_PER_SESSION`] in its session.
/// A stream's places are held until its body is dropped (the client went away or the session
/// closed).
async fn cap_sessions_and_streams(
    State(caps): State<Arc<Caps>>,
    request: Request,
    next: Next,
) -> Response {
    let session =
        request.headers().get(SESSION_HEADER).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let method = request.method().clone();
    if method == axum::http::Method::POST && session.is_none() {
        let open = caps.sessions.sessions.read().await.len();
        if open >= caps.max_sessions {
            return full(format!(
                "this server already keeps {open} MCP sessions (its limit, --max-sessions {}): close ones you no longer use (HTTP DELETE with their Mcp-Session-Id) or wait for idle ones to expire after {} s, then retry\n",
                caps.max_sessions,
                SESSION_IDLE.as_secs()
            ));
        }
        return next.run(request).await;
    }
    if method != axum::http::Method::GET {
        return next.run(request).await;
    }
    let Ok(permit) = Arc::clone(&caps.streams).try_acquire_owned() else {
        return full(format!(
            "this server already has {} event streams open (its limit, --max-streams {}): close one, then retry\n",
            caps.max_streams, caps.max_streams
        ));
    };
    let key = session.unwrap_or_default();
    {
        let mut per = lock(&caps.per_session);
        let n = per.entry(key.clone()).or_insert(0);
        if *n >= STREAMS_PER_SESSION {
            return full(format!(
                "this session already has {STREAMS_PER_SESSION} event streams open: close one, then retry\n"
            ));
        }
        *n += 1;
    }
    let place = StreamPlace { _permit: permit, key, per_session: Arc::clone(&caps.per_session) };
    let response = next.run(request).await;
    let (parts, body) = response.into_parts();
    Response::from_parts(parts, axum::body::Body::new(Placed { inner: body, _place: place }))
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// An event stream's places: the global permit and its count in its session, given back when
/// dropped.
struct StreamPlace {
    _permit: OwnedSemaphorePermit,
    key: String,
    per_session: Arc<Mutex<HashMap<String, usize>>>,
}

impl Drop for StreamPlace {
    fn drop(&mut self) {
        let mut per = lock(&self.per_session);
        if let Some(n) = per.get_mut(&self.key) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                per.remove(&self.key);
            }
        }
    }
}

/// A response body that holds its stream's places for as long as it lives.
struct Placed {
    inner: axum::body::Body,
    _place: StreamPlace,
}

impl axum::body::HttpBody for Placed {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        std::pin::Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_bind_needs_a_long_token() {
        let guard = |t: &str| HttpGuard {
            token: HttpToken::Given(t.to_owned()),
            reloader: Reloader::default(),
            allowed_origins: vec![],
            max_sessions: DEFAULT_MAX_SESSIONS,
            max_streams: DEFAULT_MAX_STREAMS,
        };
        assert!(matches!(check_guard(&guard("")), Err(ServeError::BadToken { .. })));
        assert!(matches!(check_guard(&guard("x")), Err(ServeError::BadToken { .. })));
        assert!(check_guard(&guard("0123456789abcdef")).is_ok());
        assert!(!format!("{:?}", guard("0123456789abcdef")).contains("0123"));
    }
}
