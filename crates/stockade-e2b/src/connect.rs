//! The Connect protocol as the SDKs speak it, with the JSON codec: a unary call is a `POST` of
//! one JSON message answered by one (an error is an HTTP status and `{"code", "message"}`); a
//! streaming call sends and answers *envelopes* — a flags byte, a big-endian `u32` length and
//! the message — ending with an end-of-stream envelope (flags `0x02`) that carries the error,
//! if any.

use axum::body::Body;
use axum::http::{StatusCode, header};
use axum::response::Response;
use bytes::{BufMut, Bytes, BytesMut};
use http_body_util::BodyExt as _;
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::mpsc;

/// Largest request message taken (a message is a command, a path or a piece of input).
pub const MAX_MESSAGE: usize = 4 * 1024 * 1024;
/// The envelope flag of the end-of-stream message.
const END_STREAM: u8 = 0x02;
/// The envelope flag of a compressed message (never sent by us; refused when received).
const COMPRESSED: u8 = 0x01;

/// A Connect error: its code (by name) and a message for the caller.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{code}: {message}")]
pub struct RpcError {
    pub code: &'static str,
    pub message: String,
}

impl RpcError {
    pub fn new(code: &'static str, message: impl Into<String>) -> RpcError {
        RpcError { code, message: message.into() }
    }
    pub fn invalid(message: impl Into<String>) -> RpcError {
        RpcError::new("invalid_argument", message)
    }
    pub fn not_found(message: impl Into<String>) -> RpcError {
        RpcError::new("not_found", message)
    }
    pub fn internal(message: impl Into<String>) -> RpcError {
        RpcError::new("internal", message)
    }

    /// The HTTP status a unary answer carries for this code.
    fn status(&self) -> StatusCode {
        match self.code {
            "invalid_argument" | "out_of_range" | "failed_precondition" => StatusCode::BAD_REQUEST,
            "unauthenticated" => StatusCode::UNAUTHORIZED,
            "permission_denied" => StatusCode::FORBIDDEN,
            "not_found" => StatusCode::NOT_FOUND,
            "already_exists" | "aborted" => StatusCode::CONFLICT,
            "resource_exhausted" => StatusCode::TOO_MANY_REQUESTS,
            "unimplemented" => StatusCode::NOT_IMPLEMENTED,
            "unavailable" => StatusCode::SERVICE_UNAVAILABLE,
            "deadline_exceeded" => StatusCode::GATEWAY_TIMEOUT,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    fn json(&self) -> serde_json::Value {
        serde_json::json!({ "code": self.code, "message": self.message })
    }

    /// The answer to a unary call that failed.
    pub fn unary_response(&self) -> Response {
        json_response(self.status(), "application/json", self.json().to_string().into())
    }
}

fn json_response(status: StatusCode, content_type: &'static str, body: Body) -> Response {
    let mut r = Response::new(body);
    *r.status_mut() = status;
    r.headers_mut().insert(header::CONTENT_TYPE, header::HeaderValue::from_static(content_type));
    r
}

/// Whether a request is a streaming call's (enveloped) rather than a unary one.
pub fn is_streaming(content_type: &str) -> bool {
    content_type.starts_with("application/connect+")
}

/// The answer to a unary call.
pub fn unary<T: Serialize>(result: Result<T, RpcError>) -> Response {
    match result.and_then(|m| {
        serde_json::to_vec(&m).map_err(|e| RpcError::internal(format!("cannot encode: {e}")))
    }) {
        Ok(body) => json_response(StatusCode::OK, "application/json", body.into()),
        Err(e) => e.unary_response(),
    }
}

/// Reads a whole (bounded) request body.
pub async fn read_body(body: Body, limit: usize) -> Result<Bytes, RpcError> {
    let limited = http_body_util::Limited::new(body, limit);
    match limited.collect().await {
        Ok(c) => Ok(c.to_bytes()),
        Err(e) => Err(RpcError::new("resource_exhausted", format!("the request body: {e}"))),
    }
}

/// Decodes a message.
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, RpcError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return serde_json::from_slice(b"{}").map_err(|e| RpcError::invalid(e.to_string()));
    }
    serde_json::from_slice(bytes)
        .map_err(|e| RpcError::invalid(format!("a malformed message: {e}")))
}

/// The one message of a unary call, or the first envelope of a server-streaming call's body.
pub async fn request_message<T: DeserializeOwned>(
    body: Body,
    streaming: bool,
) -> Result<T, RpcError> {
    let bytes = read_body(body, MAX_MESSAGE + 5).await?;
    if !streaming {
        return decode(&bytes);
    }
    let mut frames = Envelopes::default();
    frames.push(&bytes);
    match frames.next_frame()? {
        Some((_, m)) => decode(&m),
        None => Err(RpcError::invalid("the request carries no message")),
    }
}

/// Splits a byte stream into envelopes.
#[derive(Default)]
pub struct Envelopes {
    buf: BytesMut,
}

impl Envelopes {
    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// The next whole envelope (flags, message), if the buffer holds one.
    pub fn next_frame(&mut self) -> Result<Option<(u8, Bytes)>, RpcError> {
        let Some(head) = self.buf.get(..5) else { return Ok(None) };
        let flags = head[0];
        let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
        if len > MAX_MESSAGE {
            return Err(RpcError::new("resource_exhausted", "a message over 4 MiB"));
        }
        if flags & COMPRESSED != 0 {
            return Err(RpcError::new("unimplemented", "compressed messages are not taken"));
        }
        if self.buf.len() < 5 + len {
            return Ok(None);
        }
        let mut frame = self.buf.split_to(5 + len);
        Ok(Some((flags, frame.split_off(5).freeze())))
    }
}

/// One envelope.
fn envelope(flags: u8, message: &[u8]) -> Bytes {
    let mut b = BytesMut::with_capacity(5 + message.len());
    b.put_u8(flags);
    b.put_u32(message.len() as u32);
    b.put_slice(message);
    b.freeze()
}

/// The sending side of a streaming answer: messages as they come, then [`StreamTx::end`].
/// Sending waits while the client is slow (the channel holds a couple of messages), so a slow
/// reader holds back the producer, not the daemon's memory.
pub struct StreamTx {
    tx: mpsc::Sender<Result<Bytes, std::io::Error>>,
}

/// Messages in flight per streaming answer.
const STREAM_QUEUE: usize = 2;

impl StreamTx {
    /// Sends one message; `false` when the client has gone.
    pub async fn send<T: Serialize>(&self, message: &T) -> bool {
        match serde_json::to_vec(message) {
            Ok(m) => self.tx.send(Ok(envelope(0, &m))).await.is_ok(),
            Err(_) => false,
        }
    }

    /// Ends the stream, with an error or without.
    pub async fn end(self, error: Option<RpcError>) {
        let end = match error {
            None => serde_json::json!({}),
            Some(e) => serde_json::json!({ "error": e.json() }),
        };
        let _ = self.tx.send(Ok(envelope(END_STREAM, end.to_string().as_bytes()))).await;
    }

    /// Resolves when the client has gone.
    pub async fn closed(&self) {
        self.tx.closed().await;
    }
}

/// A streaming answer and the sender that feeds it.
pub fn stream_response() -> (StreamTx, Response) {
    let (tx, rx) = mpsc::channel(STREAM_QUEUE);
    let stream =
        futures_util::stream::unfold(
            rx,
            |mut rx| async move { rx.recv().await.map(|item| (item, rx)) },
        );
    let r = json_response(StatusCode::OK, "application/connect+json", Body::from_stream(stream));
    (StreamTx { tx }, r)
}

/// A streaming answer that is only an error.
pub fn stream_error(e: RpcError) -> Response {
    let end = serde_json::json!({ "error": e.json() }).to_string();
    json_response(
        StatusCode::OK,
        "application/connect+json",
        Body::from(envelope(END_STREAM, end.as_bytes())),
    )
}
