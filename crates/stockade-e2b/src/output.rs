//! A command's events as a stream: `start`, then every byte of its output from the spool (from
//! the first byte, so a client that connects late or again misses nothing), each piece tagged
//! with the stream that wrote it, then `end`. Keepalives fill the silences.

use std::sync::Arc;
use std::time::Duration;

use stockade_engine::Session;
use stockade_proto::{SessionState, Stream};
use tokio_util::sync::CancellationToken;

use crate::connect::{RpcError, StreamTx};
use crate::messages::{Bytes, DataEvent, EndEvent, EventResponse, ProcessEvent};

/// Most output bytes per event (envd's own events are of this order).
const CHUNK: usize = 64 * 1024;
/// Silence after which a keepalive event is sent when the client did not ask for an interval.
const DEFAULT_KEEPALIVE: Duration = Duration::from_secs(50);

/// Streams `session`'s events into `tx` until its end, the client's going or `stop`.
pub async fn stream(
    session: Arc<Session>,
    tx: StreamTx,
    keepalive: Option<Duration>,
    stop: CancellationToken,
) {
    let keepalive = keepalive.unwrap_or(DEFAULT_KEEPALIVE).max(Duration::from_secs(1));
    if !tx.send(&EventResponse { event: ProcessEvent::Start { pid: session.pid() } }).await {
        return;
    }
    let mut cursor = 0u64;
    loop {
        let stats = session.log().stats();
        if stats.total_bytes > cursor {
            match send_chunk(&session, &tx, cursor).await {
                Ok(Some(next)) => cursor = next,
                Ok(None) => return,
                Err(e) => return tx.end(Some(e)).await,
            }
            continue;
        }
        if stats.finished {
            break;
        }
        tokio::select! {
            new = session.log().wait_for_output(cursor, keepalive) => {
                if !new && !tx.send(&EventResponse { event: ProcessEvent::Keepalive {} }).await {
                    return;
                }
            }
            () = tx.closed() => return,
            () = stop.cancelled() => return tx.end(Some(RpcError::new("unavailable", "the daemon is stopping"))).await,
        }
    }
    let state = tokio::select! {
        s = session.wait(None) => s,
        () = tx.closed() => return,
    };
    if tx.send(&EventResponse { event: ProcessEvent::End(end_event(&state)) }).await {
        tx.end(None).await;
    }
}

/// Reads the bytes from `cursor` (off the async workers: the spool is a file) and sends them,
/// one event per stream run. The next cursor, or `None` when the client has gone.
async fn send_chunk(
    session: &Arc<Session>,
    tx: &StreamTx,
    cursor: u64,
) -> Result<Option<u64>, RpcError> {
    let s = Arc::clone(session);
    let read = tokio::task::spawn_blocking(move || {
        let log = s.log();
        let (bytes, next) = log.read_raw(cursor, CHUNK)?;
        let runs = log.stream_runs(cursor, cursor + bytes.len() as u64)?;
        Ok::<_, stockade_log::OutputError>((bytes, next, runs))
    })
    .await
    .map_err(|e| RpcError::internal(format!("the read stopped: {e}")))?
    .map_err(|e| RpcError::internal(format!("cannot read the output: {e}")))?;
    let (bytes, next, runs) = read;
    for (stream, start, end) in runs {
        let from = (start - cursor) as usize;
        let to = ((end - cursor) as usize).min(bytes.len());
        let piece = Bytes(bytes[from.min(to)..to].to_vec());
        let data = match stream {
            Some(Stream::Stderr) => DataEvent::Stderr(piece),
            Some(Stream::Pty) => DataEvent::Pty(piece),
            _ => DataEvent::Stdout(piece),
        };
        if !tx.send(&EventResponse { event: ProcessEvent::Data(data) }).await {
            return Ok(None);
        }
    }
    Ok(Some(next))
}

/// envd's end event for a terminal state: `exited` only when the command exited by itself.
pub fn end_event(state: &SessionState) -> EndEvent {
    match state {
        SessionState::Exited { code } => EndEvent {
            exit_code: *code,
            exited: true,
            status: format!("exit status {code}"),
            error: None,
        },
        SessionState::Signaled { signal } => EndEvent {
            exit_code: -1,
            exited: false,
            status: format!("signal: {}", signal_name(*signal)),
            error: None,
        },
        SessionState::Killed { .. } => {
            EndEvent { exit_code: -1, exited: false, status: "signal: killed".into(), error: None }
        }
        SessionState::TimedOut => ended("timed_out", "the command ran past its timeout".into()),
        SessionState::Failed { reason } => ended("failed", reason.clone()),
        SessionState::Running => ended("running", "the command is still running".into()),
    }
}

fn ended(status: &str, error: String) -> EndEvent {
    EndEvent { exit_code: -1, exited: false, status: status.into(), error: Some(error) }
}

fn signal_name(signal: i32) -> String {
    match nix::sys::signal::Signal::try_from(signal) {
        Ok(s) => s.as_str().trim_start_matches("SIG").to_lowercase(),
        Err(_) => signal.to_string(),
    }
}
