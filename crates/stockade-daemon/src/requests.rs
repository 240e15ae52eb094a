//! One connection's requests, whichever door they came through (the Unix socket's lines or a
//! WebSocket's text messages): read frames, handle each request in its own task, and turn each
//! answer into one response line for the connection's writer.

use std::sync::Arc;

use serde_json::Value;
use stockade_proto::rpc::{MAX_REQUEST_BYTES, Response, code};
use tokio::io::AsyncBufRead;
use tokio::sync::{Semaphore, mpsc};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::config::MAX_IN_FLIGHT_PER_CONNECTION;
use crate::framing::{Frame, LineReader};
use crate::handlers::{self, Ctx};
use crate::payload::{Binary, Payload};
use crate::state::Shared;

/// Answers queued for one connection's writer before request tasks wait for it.
pub(crate) const WRITE_QUEUE: usize = 32;
/// One answer for a connection's writer: its JSON line and, after a binary read, the raw bytes
/// that go right after it (see [`Payload`]).
pub(crate) struct Outgoing {
    pub(crate) line: Vec<u8>,
    pub(crate) payload: Option<Payload>,
    /// The bytes of the connection's answer budget this answer holds until it is written (see
    /// `answer_budget`).
    pub(crate) budget: Option<tokio::sync::OwnedSemaphorePermit>,
}

impl From<Vec<u8>> for Outgoing {
    fn from(line: Vec<u8>) -> Outgoing {
        Outgoing { line, payload: None, budget: None }
    }
}

/// Where one connection's request frames come from: the Unix socket's lines, or a WebSocket's
/// text messages. Both doors share everything after this (see [`read_requests`]).
pub(crate) trait FrameSource {
    /// The next frame, or `None` when the client sends no more. Must be cancel-safe.
    async fn next_frame(&mut self) -> std::io::Result<Option<Frame>>;
}

impl<R: AsyncBufRead + Unpin> FrameSource for LineReader<R> {
    async fn next_frame(&mut self) -> std::io::Result<Option<Frame>> {
        self.next().await
    }
}

/// Read requests from `source` and handle each in its own task (a long poll never blocks the
/// requests behind it), at most [`MAX_IN_FLIGHT_PER_CONNECTION`] at once; answers go to `tx`,
/// the connection's one writer. Returns the tasks still in flight when the client sends no more
/// or `conn` is cancelled (a read error cancels it): the door decides how to finish them.
pub(crate) async fn read_requests(
    shared: &Arc<Shared>,
    source: &mut impl FrameSource,
    tx: &mpsc::Sender<Outgoing>,
    conn: &CancellationToken,
    (caller, peer): (Arc<crate::hall::Caller>, Arc<crate::audit::Peer>),
) -> JoinSet<()> {
    let in_flight = Arc::new(Semaphore::new(MAX_IN_FLIGHT_PER_CONNECTION));
    let binary = Arc::new(Binary::new());
    let answers = crate::answer_budget::new();
    let mut tasks = JoinSet::new();
    loop {
        let permit = tokio::select! {
            p = Arc::clone(&in_flight).acquire_owned() => p,
            () = conn.cancelled() => break,
        };
        let Ok(permit) = permit else { break };
        let frame = tokio::select! {
            f = source.next_frame() => f,
            () = conn.cancelled() => break,
        };
        match frame {
            Ok(Some(frame)) => {
                let ctx = Ctx {
                    shared: Arc::clone(shared),
                    conn: conn.clone(),
                    caller: Arc::clone(&caller),
                    peer: Arc::clone(&peer),
                    binary: Arc::clone(&binary),
                    answers: Arc::clone(&answers),
                };
                let tx = tx.clone();
                tasks.spawn(async move {
                    if let Some(line) = handle_frame(&ctx, frame).await {
                        let _ = tx.send(line).await;
                    }
                    drop(permit);
                });
            }
            Ok(None) => break,
            Err(_) => {
                conn.cancel();
                break;
            }
        }
        while tasks.try_join_next().is_some() {}
    }
    tasks
}

/// One response line.
pub(crate) fn encode(resp: &Response) -> Vec<u8> {
    let mut line = serde_json::to_vec(resp).unwrap_or_else(|e| {
        let fallback = Response::err(
            resp.id.clone(),
            code::INTERNAL_ERROR,
            format!("the answer could not be encoded: {e}"),
        );
        serde_json::to_vec(&fallback).unwrap_or_default()
    });
    line.push(b'\n');
    line
}

/// Turn one frame into an answer line (`None` for a notification, or a blank line).
async fn handle_frame(ctx: &Ctx, frame: Frame) -> Option<Outgoing> {
    let (answer, budget) = respond(ctx, frame).await?;
    match answer {
        Answer::Error(resp) => Some(Outgoing { budget, ..encode(&resp).into() }),
        Answer::Result { id, line: (mut line, payload) } => {
            line.extend_from_slice(b",\"id\":");
            if serde_json::to_writer(&mut line, &id).is_err() {
                let bad = Response::err(id, code::INTERNAL_ERROR, "bad request id");
                return Some(encode(&bad).into());
            }
            line.extend_from_slice(b"}\n");
            Some(Outgoing { line, payload, budget })
        }
    }
}

/// What a request comes to.
enum Answer {
    /// An error response.
    Error(Response),
    /// A success: the line so far (prefix and result), with a binary read's bytes, and the id
    /// to close it with.
    Result { id: Value, line: handlers::Reply },
}

/// A request's `id` as it will be echoed, or why it cannot be (an invalid request).
fn request_id(id: Option<Value>) -> Result<Value, &'static str> {
    match id {
        None => Ok(Value::Null),
        // A number beyond 64-bit integers was read as a float: echoed, it would not be the
        // client's id.
        Some(Value::Number(n)) if n.is_f64() => Err(
            "the request id must be a string or an integer of at most 64 bits; use a string for other ids",
        ),
        Some(v @ (Value::Null | Value::String(_) | Value::Number(_))) => Ok(v),
        Some(_) => Err("the request id must be a string, a number or null"),
    }
}

/// The answer to `frame`, with the bytes of the connection's answer budget it holds.
async fn respond(
    ctx: &Ctx,
    frame: Frame,
) -> Option<(Answer, Option<tokio::sync::OwnedSemaphorePermit>)> {
    let mut budget = None;
    let answer = answer(ctx, frame, &mut budget).await?;
    Some((answer, budget))
}

async fn answer(
    ctx: &Ctx,
    frame: Frame,
    budget: &mut Option<tokio::sync::OwnedSemaphorePermit>,
) -> Option<Answer> {
    let line = match frame {
        Frame::TooLong { len } => {
            return Some(Answer::Error(Response::err(
                Value::Null,
                code::INVALID_REQUEST,
                format!(
                    "the request line has {len} bytes, more than the limit of {MAX_REQUEST_BYTES}; it was skipped"
                ),
            )));
        }
        Frame::Line(line) => line,
    };
    if line.iter().all(u8::is_ascii_whitespace) {
        return None;
    }
    let value: Value = match serde_json::from_slice(&line) {
        Ok(v) => v,
        Err(e) => {
            return Some(Answer::Error(Response::err(
                Value::Null,
                code::PARSE_ERROR,
                format!("the request is not valid JSON: {e}"),
            )));
        }
    };
    drop(line);
    let mut object = match value {
        Value::Object(o) => o,
        Value::Array(_) => {
            return Some(Answer::Error(Response::err(
                Value::Null,
                code::INVALID_REQUEST,
                "batch requests are not supported: send one request object per line",
            )));
        }
        _ => {
            return Some(Answer::Error(Response::err(
                Value::Null,
                code::INVALID_REQUEST,
                "a request must be a JSON object with jsonrpc, id, method and params",
            )));
        }
    };
    let notification = !object.contains_key("id");
    let id = match request_id(object.remove("id")) {
        Ok(id) => id,
        Err(why) => {
            return Some(Answer::Error(Response::err(Value::Null, code::INVALID_REQUEST, why)));
        }
    };
    if object.get("jsonrpc").and_then(Value::as_str) != Some(stockade_proto::rpc::JSONRPC_VERSION) {
        return Some(Answer::Error(Response::err(
            id,
            code::INVALID_REQUEST,
            "\"jsonrpc\" must be \"2.0\"",
        )));
    }
    let method = match object.remove("method") {
        Some(Value::String(m)) => m,
        _ => {
            return Some(Answer::Error(Response::err(
                id,
                code::INVALID_REQUEST,
                "the request needs a \"method\" string",
            )));
        }
    };
    let params = object.remove("params").unwrap_or(Value::Null);
    // Before the answer is made: the connection's answers in the daemon stay within its budget.
    *budget = crate::answer_budget::take(&ctx.answers, &method, &params).await;
    let audit = ctx.shared.audit.as_ref().filter(|_| crate::audit::audited(&method));
    let audited = audit.map(|a| (a, params.clone()));
    let result = handlers::dispatch(ctx, &method, params).await;
    if let Some((audit, params)) = audited {
        let answer = result.as_ref().ok().and_then(|(l, _)| l.get(handlers::RESULT_PREFIX.len()..));
        audit.request(&ctx.peer, &method, &params, answer);
    }
    if notification {
        return None;
    }
    Some(match result {
        Ok(line) => Answer::Result { id, line },
        Err(error) => Answer::Error(Response { error: Some(error), ..Response::err(id, 0, "") }),
    })
}
