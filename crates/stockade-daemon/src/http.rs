//! HTTP on the daemon's network listeners, through one axum [`Router`] each: the WebSocket door
//! and the separate `--metrics` address.
//!
//! - `GET /healthz` (the daemon is alive and serving) and `GET /readyz` (start-up recovery is
//!   done and runs are accepted; 503 before) need no token, and are answered from the moment
//!   the daemon listens, while it still recovers; `GET /metrics` (see `metrics`) needs the door's
//!   bearer token or the read-only metrics token (which opens no WebSocket),
//!   except on a loopback metrics address, which has none.
//! - On the door, a WebSocket upgrade (any path) is checked here: a well-formed handshake, then
//!   the token (401 otherwise, before any method can run), then a slot of the connection budget
//!   (503 when there is none). The 101 hands the connection back to `ws` through the
//!   [`Upgrade`] that [`Doorway::serve`] returns. The metrics address refuses upgrades (404).
//! - Upgrades are recognised before routing and any method but `GET` is refused (405) before
//!   routing too, so an upgrade or a `POST` to `/metrics` is answered as such whatever the path.
//!
//! Each connection is served by hyper for one request: every answer but a 101 carries
//! `Connection: close`, so the connection closes after it, as a probe or a scrape needs. The request head must arrive by the deadline the caller gives
//! (counted from when the connection was looked at); once it has, the answer is not hurried.
//!
//! Admission (see `admission`) stays a gate at the connection level around this, not a tower
//! layer: a pending place is taken *before* `accept`, and whether a connection is silent is seen
//! on the raw socket before TLS; a layer only runs once a whole request head has been read, which
//! is too late for both. Only the connection budget's slot is taken here, at the upgrade, since it
//! belongs to the request that authenticated.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::get;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tower::ServiceExt as _;

use crate::admission::{Admission, UNIX_RESERVE};
use crate::config::MAX_CONNECTIONS;
use crate::reload::LiveToken;
use crate::state::Shared;
use crate::tls::DoorStream;

/// Longest request head read (hyper answers a longer one with 431).
const MAX_HEAD: usize = 16 * 1024;
/// The media type of `/metrics`.
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The answer of the metrics address to anything but its three paths.
const NOT_A_DOOR: &str = "this is a Stockade metrics address: GET /metrics, /healthz or /readyz (sessions are served on the WebSocket door)\n";
/// How long an upgrade waits for start-up recovery before it is answered 503.
const RECOVERY_WAIT: std::time::Duration = std::time::Duration::from_secs(2);
/// The answer of `/readyz` and of an upgrade while start-up recovery runs.
const RECOVERING: &str =
    "not ready: the daemon is recovering the sessions of an earlier daemon; retry in a moment\n";
/// The answer of the door to a path it does not serve.
const A_DOOR: &str = "this is a Stockade WebSocket door: GET /healthz, /readyz, /metrics, or upgrade to a WebSocket\n";

/// What a listener lets a request do.
struct Rules {
    shared: Arc<Shared>,
    /// The tokens `/metrics` takes (any of them); none: no token (a loopback metrics address).
    metrics_tokens: Vec<LiveToken>,
    /// How upgrades are let in; `None`: refused (the metrics address).
    upgrades: Option<Upgrades>,
}

/// The door's rules for a WebSocket upgrade.
struct Upgrades {
    token: LiveToken,
    admission: Arc<Admission>,
    /// Cancelled once start-up recovery is done (upgrades are refused before).
    recovered: tokio_util::sync::CancellationToken,
}

/// An upgrade the door accepted: the connection, once hyper has sent the 101, and the slot of
/// the connection budget it holds while it is open.
pub(crate) struct Upgrade {
    pub(crate) on: OnUpgrade,
    pub(crate) slot: OwnedSemaphorePermit,
}

/// One connection's view of its requests, shared by the router's handlers and [`Doorway::serve`].
struct Visit {
    peer: SocketAddr,
    /// A request head has arrived (the deadline no longer applies).
    asked: AtomicBool,
    upgrade: Mutex<Option<Upgrade>>,
}

/// A listener's router, built once and shared by its connections.
#[derive(Clone)]
pub(crate) struct Doorway(Router);

impl Doorway {
    /// The WebSocket door: probes, `/metrics` with `token` or `scrape` (the read-only metrics
    /// token), and upgrades with `token` only.
    pub(crate) fn door(
        shared: Arc<Shared>,
        token: LiveToken,
        admission: Arc<Admission>,
        scrape: Option<LiveToken>,
    ) -> Doorway {
        let recovered = shared.recovered.clone();
        let upgrades = Some(Upgrades { token: Arc::clone(&token), admission, recovered });
        let metrics_tokens = std::iter::once(token).chain(scrape).collect();
        Doorway::new(Rules { shared, metrics_tokens, upgrades })
    }

    /// The metrics address: probes and `/metrics` (with one of `tokens` when there are any),
    /// no upgrade.
    pub(crate) fn metrics(shared: Arc<Shared>, tokens: Vec<LiveToken>) -> Doorway {
        Doorway::new(Rules { shared, metrics_tokens: tokens, upgrades: None })
    }

    fn new(rules: Rules) -> Doorway {
        let rules = Arc::new(rules);
        let router = Router::new()
            .route("/healthz", get(healthz))
            .route("/readyz", get(readyz))
            .route("/metrics", get(metrics))
            .fallback(not_found)
            .layer(middleware::from_fn_with_state(Arc::clone(&rules), front))
            .with_state(rules);
        Doorway(router)
    }

    /// Serve one connection (TLS already done). The request head must have arrived by
    /// `deadline`. Returns the upgrade when the door accepted one; `None` when the request was
    /// answered (or the connection failed or ran out of time).
    pub(crate) async fn serve(
        &self,
        stream: DoorStream,
        peer: SocketAddr,
        deadline: Instant,
    ) -> Option<Upgrade> {
        let visit =
            Arc::new(Visit { peer, asked: AtomicBool::new(false), upgrade: Mutex::new(None) });
        let service = hyper::service::service_fn({
            let (router, visit) = (self.0.clone(), Arc::clone(&visit));
            move |mut request: hyper::Request<Incoming>| {
                request.extensions_mut().insert(Arc::clone(&visit));
                router.clone().oneshot(request)
            }
        });
        // Keep-alive stays on only so that hyper adds no `Connection: close` to the 101 (a
        // WebSocket client wants `Connection: Upgrade` alone); every other answer says `close`
        // itself, which ends the connection after it.
        let connection = http1::Builder::new()
            .max_buf_size(MAX_HEAD)
            .serve_connection(TokioIo::new(stream), service)
            .with_upgrades();
        let head_deadline = async {
            tokio::time::sleep_until(deadline).await;
            if visit.asked.load(Ordering::Acquire) {
                std::future::pending::<()>().await;
            }
        };
        tokio::select! {
            served = connection => {
                if let Err(e) = served {
                    tracing::debug!(%peer, error = %e, "HTTP on a network listener failed");
                }
            }
            () = head_deadline => return None,
        }
        visit.upgrade.lock().unwrap_or_else(PoisonError::into_inner).take()
    }
}

/// Before routing: an upgrade is the door's business (or refused), any method but `GET` is
/// refused.
async fn front(State(rules): State<Arc<Rules>>, mut request: Request, next: Next) -> Response {
    let visit = request.extensions().get::<Arc<Visit>>().cloned();
    if let Some(visit) = &visit {
        visit.asked.store(true, Ordering::Release);
    }
    if asks_upgrade(request.headers()) {
        return match (&rules.upgrades, visit) {
            (Some(upgrades), Some(visit)) => {
                // A client that connects as the daemon starts is served once recovery is done,
                // as on the Unix socket; a recovery longer than this is answered 503 (below),
                // which frees the pending place the probes need.
                if !upgrades.recovered.is_cancelled()
                    && upgrades.token.authorizes(request.headers())
                {
                    let recovered = upgrades.recovered.cancelled();
                    let _ = tokio::time::timeout(RECOVERY_WAIT, recovered).await;
                }
                upgrade(upgrades, &visit, &mut request)
            }
            _ => text(StatusCode::NOT_FOUND, NOT_A_DOOR),
        };
    }
    if request.method() != Method::GET {
        return text(StatusCode::METHOD_NOT_ALLOWED, "only GET is served here\n");
    }
    next.run(request).await
}

/// Whether the request asks for a WebSocket (`Upgrade: websocket`, any case).
fn asks_upgrade(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::UPGRADE)
        .iter()
        .any(|v| v.as_bytes().trim_ascii().eq_ignore_ascii_case(b"websocket"))
}

async fn healthz() -> Response {
    text(StatusCode::OK, "ok\n")
}

/// Ready: recovery is done (the Unix socket is served after it), the daemon is not stopping, its
/// output drain moves and its state directory is still the one it checked at start.
async fn readyz(State(rules): State<Arc<Rules>>) -> Response {
    if !rules.shared.recovered.is_cancelled() {
        text(StatusCode::SERVICE_UNAVAILABLE, RECOVERING)
    } else if rules.shared.stop.is_cancelled() {
        text(StatusCode::SERVICE_UNAVAILABLE, "not ready: the daemon is stopping\n")
    } else if let Some(why) = crate::janitor::drain_stalled() {
        text(StatusCode::SERVICE_UNAVAILABLE, &format!("not ready: {why}\n"))
    } else if let Some(why) = crate::janitor::home_problem(&rules.shared) {
        text(StatusCode::SERVICE_UNAVAILABLE, &format!("not ready: {why}\n"))
    } else {
        text(StatusCode::OK, "ready\n")
    }
}

async fn metrics(State(rules): State<Arc<Rules>>, headers: HeaderMap) -> Response {
    let tokens = &rules.metrics_tokens;
    if !tokens.is_empty() && !tokens.iter().any(|token| token.authorizes(&headers)) {
        return text(
            StatusCode::UNAUTHORIZED,
            "a token is required: send the header `Authorization: Bearer <token>`\n",
        );
    }
    // Read now, from what the `stats` method reads.
    let shared = &rules.shared;
    match shared.metrics.encode(&shared.engine.stats()) {
        Ok(body) => answer(StatusCode::OK, OPENMETRICS, body),
        Err(_) => text(StatusCode::INTERNAL_SERVER_ERROR, "the metrics could not be written\n"),
    }
}

async fn not_found(State(rules): State<Arc<Rules>>) -> Response {
    let body = if rules.upgrades.is_some() { A_DOOR } else { NOT_A_DOOR };
    text(StatusCode::NOT_FOUND, body)
}

/// The door's answer to an upgrade: 101 only for a well-formed handshake with the token, while
/// the connection budget has a slot.
fn upgrade(upgrades: &Upgrades, visit: &Visit, request: &mut Request) -> Response {
    let peer = visit.peer;
    let key = match handshake_key(request) {
        Ok(key) => key,
        Err(why) => {
            tracing::debug!(%peer, why, "not a WebSocket handshake");
            return text(StatusCode::BAD_REQUEST, &format!("{why}\n"));
        }
    };
    if !upgrades.token.authorizes(request.headers()) {
        tracing::warn!(%peer, status = 401, "WebSocket upgrade refused");
        return unauthorized(request.headers());
    }
    // Refused rather than held longer: a held upgrade keeps one of the few pending places, and
    // `/readyz` already tells a balancer to wait.
    if !upgrades.recovered.is_cancelled() {
        let mut response = text(StatusCode::SERVICE_UNAVAILABLE, RECOVERING);
        response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        return response;
    }
    let Some(slot) = upgrades.admission.network() else {
        tracing::warn!(%peer, status = 503, "WebSocket upgrade refused");
        let sentence = format!(
            "the daemon already serves {} network connections; close some and retry\n",
            MAX_CONNECTIONS - UNIX_RESERVE
        );
        return text(StatusCode::SERVICE_UNAVAILABLE, &sentence);
    };
    let on = hyper::upgrade::on(&mut *request);
    *visit.upgrade.lock().unwrap_or_else(PoisonError::into_inner) = Some(Upgrade { on, slot });
    let mut response = Response::new(Body::empty());
    *response.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let headers = response.headers_mut();
    headers.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    headers.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    match HeaderValue::from_str(&derive_accept_key(key.as_bytes())) {
        Ok(accept) => {
            headers.insert(header::SEC_WEBSOCKET_ACCEPT, accept);
            response
        }
        // Base64 is always a valid header value; refuse rather than send a broken 101.
        Err(_) => text(StatusCode::INTERNAL_SERVER_ERROR, "the upgrade could not be answered\n"),
    }
}

/// The `Sec-WebSocket-Key` of a well-formed WebSocket handshake (RFC 6455, version 13), or what
/// is wrong with it.
fn handshake_key(request: &Request) -> Result<HeaderValue, &'static str> {
    let headers = request.headers();
    let has_token = |name: header::HeaderName, token: &str| {
        headers.get_all(name).iter().any(|v| {
            v.to_str().is_ok_and(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case(token)))
        })
    };
    if request.method() != Method::GET {
        return Err("a WebSocket upgrade must be a GET");
    }
    if !has_token(header::CONNECTION, "upgrade") {
        return Err("a WebSocket upgrade needs the header `Connection: Upgrade`");
    }
    if headers.get(header::SEC_WEBSOCKET_VERSION).is_none_or(|v| v.as_bytes() != b"13") {
        return Err("a WebSocket upgrade needs the header `Sec-WebSocket-Version: 13`");
    }
    headers
        .get(header::SEC_WEBSOCKET_KEY)
        .cloned()
        .ok_or("a WebSocket upgrade needs the header `Sec-WebSocket-Key`")
}

/// The 401 an unauthenticated upgrade gets: it says whether a token was missing or wrong.
fn unauthorized(headers: &HeaderMap) -> Response {
    let body = if headers.contains_key(header::AUTHORIZATION) {
        "the token is wrong: send the header `Authorization: Bearer <token>` with the token from the daemon's --token-file\n"
    } else {
        "a token is required: send the header `Authorization: Bearer <token>` with the token from the daemon's --token-file\n"
    };
    text(StatusCode::UNAUTHORIZED, body)
}

fn text(status: StatusCode, body: &str) -> Response {
    answer(status, "text/plain", body.to_owned())
}

/// One answer: never cached, the connection closed after it, and a 401 says which scheme.
fn answer(status: StatusCode, kind: &'static str, body: String) -> Response {
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(kind));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
    if status == StatusCode::UNAUTHORIZED {
        headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    }
    response
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn request(method: &str, headers: &[(&str, &str)]) -> Request {
        let mut b = axum::http::Request::builder().method(method).uri("/x");
        for (name, value) in headers {
            b = b.header(*name, *value);
        }
        b.body(Body::empty()).unwrap()
    }

    #[test]
    fn heads_are_told_apart() {
        let up = [
            ("Host", "a"),
            ("Upgrade", "websocket"),
            ("Connection", "keep-alive, Upgrade"),
            ("Sec-WebSocket-Version", "13"),
            ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
        ];
        let req = request("GET", &up);
        assert!(asks_upgrade(req.headers()));
        assert_eq!(handshake_key(&req).unwrap(), "dGhlIHNhbXBsZSBub25jZQ==");
        assert!(handshake_key(&request("POST", &up)).is_err());
        assert!(handshake_key(&request("GET", &up[..4])).unwrap_err().contains("Key"));
        assert!(handshake_key(&request("GET", &up[..2])).unwrap_err().contains("Connection"));
        assert!(!asks_upgrade(request("GET", &[("Host", "a")]).headers()));
    }
}
