//! Stockade's E2B door: envd's API — the Connect services `process.Process` and
//! `filesystem.Filesystem`, and the HTTP endpoints `/files` and `/health` — served over one
//! engine, so the unmodified `e2b` SDKs drive Stockade as they drive envd.
//!
//! A command started here is the engine's session like any other (in `ps`, read by cursor,
//! killed as a verified tree, recovered after a crash). Where envd and Stockade differ,
//! Stockade's promise wins: a signal ends the command's whole tree, and `Connect` replays the
//! output from its first byte (kept on disk), so a client that reconnects misses nothing.
//!
//! The daemon binds the door and hands it over (`stockade_daemon::OuterDoor`): its token (always
//! one: `daemon run --e2b` makes one when none is given), reloaded with the daemon's other
//! credentials, must be in `X-Access-Token` (envd's header) on every request but `/health` (a
//! `/files` request may carry envd's URL signature made with it instead); its
//! TLS is the daemon's; every command it starts passes the daemon's hall (`stockade_daemon::Hall`):
//! the spawn metric and the audit log count it like any other.

mod accounts;
mod connect;
mod files;
mod filesystem;
mod init;
mod messages;
mod multipart;
mod output;
mod process;
mod signed;
mod user;
mod watch;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use stockade_daemon::{CancellationToken, DoorKey, Hall, OuterDoor, Visitor};
use stockade_engine::Engine;

/// envd's port, which the SDKs' debug mode connects to on localhost.
pub const DEFAULT_PORT: u16 = 49983;

/// The state every request shares.
pub(crate) struct Door {
    pub(crate) engine: Arc<Engine>,
    /// The daemon's hall: every command started here passes it.
    pub(crate) hall: Hall,
    pub(crate) table: process::Table,
    pub(crate) stop: CancellationToken,
    pub(crate) watchers: watch::Watchers,
    /// What `/init` set: the environment commands start from.
    pub(crate) init: init::InitEnv,
    key: DoorKey,
}

/// Serves the E2B door the daemon bound (`stockade_daemon::Daemon::take_e2b`) until `stop` is
/// cancelled: every request but `/health` must carry the door's token in `X-Access-Token`.
pub async fn serve(door: OuterDoor, stop: CancellationToken) {
    let hall = door.hall();
    let state = Arc::new(Door {
        engine: Arc::clone(hall.engine()),
        hall,
        table: process::Table::default(),
        stop: stop.clone(),
        watchers: watch::Watchers::default(),
        init: init::InitEnv::default(),
        key: door.key(),
    });
    // A connection is in once a request head carries the token (`/health` alone answers
    // without it and closes the connection); until then it is pending at the daemon's one
    // admission gate, with every other network door's connections.
    let key = door.key();
    let authenticates: stockade_daemon::Authenticates = Arc::new(move |headers| {
        headers.get("x-access-token").is_some_and(|t| key.check(t.as_bytes()).is_some())
    });
    let app = Router::new().fallback(route).with_state(state);
    door.serve(app, authenticates, stop).await;
}

/// One request: auth, then by path.
async fn route(
    State(door): State<Arc<Door>>,
    ConnectInfo(addr): ConnectInfo<SocketAddr>,
    req: Request,
) -> Response {
    let path = req.uri().path().to_owned();
    if path == "/health" {
        return StatusCode::NO_CONTENT.into_response();
    }
    let presented = req.headers().get("x-access-token").map(|v| v.as_bytes());
    let token_id = match presented.and_then(|t| door.key.check(t)) {
        Some(id) => id,
        // envd lets a `/files` request in on a signed URL instead of the token.
        None => match (path.as_str(), signed::check(&req, &door.key)) {
            ("/files", signed::Signed::Valid(id)) => id,
            ("/files", signed::Signed::Refused(status, why)) => return http_error(status, why),
            _ => {
                let e =
                    connect::RpcError::new("unauthenticated", "a missing or wrong X-Access-Token");
                return e.unary_response();
            }
        },
    };
    let visitor = Visitor::network("e2b", addr, Some(token_id));
    let method = req.method().clone();
    match (method, path.as_str()) {
        (Method::GET | Method::POST, "/files") => match files::requester(&req) {
            Err((status, message)) => http_error(status, message),
            Ok(user) if req.method() == Method::GET => {
                files::download(&door.hall, req.headers(), files::query(&req, "path"), user).await
            }
            Ok(user) => files::upload(&door.hall, req, user).await,
        },
        (Method::POST, "/init") => door.init.init(req.into_body()).await,
        (Method::POST, p) => {
            let (parts, body) = req.into_parts();
            match p.strip_prefix('/').and_then(|p| p.split_once('/')) {
                Some(("process.Process", m)) => {
                    process::call(Arc::clone(&door), &visitor, m, &parts.headers, body).await
                }
                Some(("filesystem.Filesystem", m)) => {
                    match watch::call(&door, m, &parts.headers, body).await {
                        Ok(served) => served,
                        Err(body) => filesystem::call(&door.hall, m, &parts.headers, body).await,
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
