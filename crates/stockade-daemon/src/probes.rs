//! Plain HTTP on the WebSocket door's port, for orchestrators: `GET /healthz` (the daemon is
//! alive and serving), `GET /readyz` (start-up recovery is done and runs are accepted) without
//! a token, and `GET /metrics` (see `metrics`) with the door's bearer token. The same answers
//! are served on the separate `--metrics` address (`metrics_door`), where a loopback address
//! needs no token.
//!
//! [`front`] runs first on every door (and metrics) connection: TLS handshake when the listener
//! has TLS, then it reads the HTTP request head. A WebSocket upgrade is handed on (with the bytes
//! read put back) where [`Access::upgrade`] allows it; anything else is answered here and the
//! connection closed.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio_rustls::TlsAcceptor;
use tokio_tungstenite::tungstenite::http::Request;

use crate::state::Shared;
use crate::tls::DoorStream;
use crate::token::WsToken;

/// Longest request head read before deciding what a connection is.
const MAX_HEAD: usize = 16 * 1024;
/// How long a client has for TLS and its request head.
const HEAD_TIMEOUT: Duration = Duration::from_secs(3);

/// The answer of the metrics address to anything but its three paths.
const NOT_A_DOOR: &str = "this is a Stockade metrics address: GET /metrics, /healthz or /readyz (sessions are served on the WebSocket door)\n";

/// What the request head asks for.
#[derive(Debug, PartialEq, Eq)]
enum Ask {
    Upgrade,
    Get(String),
    Other,
}

/// What a listener lets a request do.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Access<'a> {
    /// A WebSocket upgrade is handed on (the door); refused with 404 otherwise.
    pub(crate) upgrade: bool,
    /// The token `/metrics` asks for; `None`: no token (a loopback metrics address).
    pub(crate) metrics_token: Option<&'a WsToken>,
}

/// TLS (when configured) and the request head: `Some(stream)` for a WebSocket upgrade, `None`
/// when the request was answered here or the connection failed.
pub(crate) async fn front(
    shared: &Shared,
    access: Access<'_>,
    stream: TcpStream,
    tls: Option<&TlsAcceptor>,
    peer: SocketAddr,
) -> Option<DoorStream> {
    let work = async {
        let mut stream = match tls {
            None => DoorStream::plain(stream),
            Some(acceptor) => match acceptor.accept(stream).await {
                Ok(s) => DoorStream::tls(s),
                Err(e) => {
                    tracing::debug!(%peer, error = %e, "TLS handshake failed");
                    return None;
                }
            },
        };
        let head = read_head(&mut stream).await?;
        Some((stream, head))
    };
    let (mut stream, head) = tokio::time::timeout(HEAD_TIMEOUT, work).await.ok()??;
    let (ask, request) = parse(&head);
    let path = match ask {
        Ask::Upgrade if access.upgrade => {
            stream.unread(head);
            return Some(stream);
        }
        Ask::Upgrade => {
            let _ = respond(&mut stream, 404, "text/plain", NOT_A_DOOR).await;
            return None;
        }
        Ask::Get(path) => path,
        Ask::Other => {
            let _ = respond(&mut stream, 405, "text/plain", "only GET is served here\n").await;
            return None;
        }
    };
    let (status, kind, body) = match path.as_str() {
        "/healthz" => (200, "text/plain", "ok\n".to_owned()),
        "/readyz" if ready(shared) => (200, "text/plain", "ready\n".to_owned()),
        "/readyz" => (503, "text/plain", "not ready: the daemon is stopping\n".to_owned()),
        "/metrics"
            if access
                .metrics_token
                .is_none_or(|token| request.as_ref().is_some_and(|r| token.authorizes(r.headers()))) =>
        {
            // Read now, from what the `stats` method reads.
            match shared.metrics.encode(&shared.engine.stats()) {
                Ok(text) => (200, "application/openmetrics-text; version=1.0.0; charset=utf-8", text),
                Err(_) => (500, "text/plain", "the metrics could not be written\n".to_owned()),
            }
        }
        "/metrics" => (
            401,
            "text/plain",
            "a token is required: send the header `Authorization: Bearer <token>`\n".to_owned(),
        ),
        _ if access.upgrade => (
            404,
            "text/plain",
            "this is a Stockade WebSocket door: GET /healthz, /readyz, /metrics, or upgrade to a WebSocket\n"
                .to_owned(),
        ),
        _ => (404, "text/plain", NOT_A_DOOR.to_owned()),
    };
    let _ = respond(&mut stream, status, kind, &body).await;
    None
}

/// The door accepts runs: recovery is done (the accept loop starts after it) and the daemon is
/// not stopping.
fn ready(shared: &Shared) -> bool {
    !shared.stop.is_cancelled()
}

/// Read up to the end of the request head (`\r\n\r\n`), at most [`MAX_HEAD`] bytes.
async fn read_head(stream: &mut DoorStream) -> Option<Vec<u8>> {
    let mut head = Vec::with_capacity(1024);
    let mut chunk = [0u8; 2048];
    loop {
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        head.extend_from_slice(&chunk[..n]);
        if head.windows(4).any(|w| w == b"\r\n\r\n") {
            return Some(head);
        }
        if head.len() > MAX_HEAD {
            let _ = respond(stream, 431, "text/plain", "the request head is too large\n").await;
            return None;
        }
    }
}

/// What the head asks for, and its headers as a request (for the token check).
fn parse(head: &[u8]) -> (Ask, Option<Request<()>>) {
    let text = String::from_utf8_lossy(head);
    let mut lines = text.split("\r\n");
    let first = lines.next().unwrap_or_default();
    let mut parts = first.split(' ');
    let (method, target) = (parts.next().unwrap_or_default(), parts.next().unwrap_or_default());
    let mut builder = Request::builder().method(method).uri(target);
    let mut upgrade = false;
    for line in lines.take_while(|l| !l.is_empty()) {
        let Some((name, value)) = line.split_once(':') else { continue };
        let value = value.trim();
        if name.trim().eq_ignore_ascii_case("upgrade") && value.eq_ignore_ascii_case("websocket") {
            upgrade = true;
        }
        builder = builder.header(name.trim(), value);
    }
    let request = builder.body(()).ok();
    let ask = if upgrade {
        Ask::Upgrade
    } else if method == "GET" {
        Ask::Get(target.split('?').next().unwrap_or_default().to_owned())
    } else {
        Ask::Other
    };
    (ask, request)
}

/// Write one HTTP/1.1 response and close.
async fn respond(
    stream: &mut DoorStream,
    status: u16,
    kind: &str,
    body: &str,
) -> std::io::Result<()> {
    let reason = match status {
        200 => "OK",
        401 => "Unauthorized",
        404 => "Not Found",
        405 => "Method Not Allowed",
        431 => "Request Header Fields Too Large",
        503 => "Service Unavailable",
        _ => "Internal Server Error",
    };
    let auth = if status == 401 { "WWW-Authenticate: Bearer\r\n" } else { "" };
    let head = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nCache-Control: no-store\r\n{auth}Connection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body.as_bytes()).await?;
    stream.flush().await?;
    stream.shutdown().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heads_are_told_apart() {
        let up = b"GET /x HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n";
        assert_eq!(parse(up).0, Ask::Upgrade);
        assert_eq!(parse(b"GET /healthz?x=1 HTTP/1.1\r\n\r\n").0, Ask::Get("/healthz".into()));
        assert_eq!(parse(b"POST /metrics HTTP/1.1\r\n\r\n").0, Ask::Other);
    }
}
