//! `process.Process`: commands started here are the engine's sessions (in `ps`, read by
//! cursor, killed as a tree); the door keeps only what envd answers with and the engine does
//! not know — each command's config as the client gave it, and its tag.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::body::Body;
use axum::http::HeaderMap;
use axum::response::Response;
use stockade_daemon::{StartError, Visitor};
use stockade_engine::{RunSpec, Session};
use stockade_proto::rpc::{PtySize as EnginePty, StdinMode};

use crate::connect::{self, Envelopes, RpcError};
use crate::messages::{
    Empty, ListResponse, ProcessConfig, ProcessInfo, ProcessSelector, SelectRequest,
    SendInputRequest, SendSignalRequest, StartRequest, StreamInputRequest, UpdateRequest,
};
use crate::user::quote;
use crate::{Door, output};

/// How long a piece of input may wait for the command to take it.
const INPUT_TIMEOUT: Duration = Duration::from_secs(30);

/// What the door remembers of a command it started: envd's view of it.
#[derive(Debug, Clone)]
pub struct Started {
    pub config: ProcessConfig,
    pub tag: Option<String>,
}

/// The door's commands by session id.
#[derive(Debug, Default)]
pub struct Table {
    started: Mutex<HashMap<String, Started>>,
}

impl Table {
    fn insert(&self, id: &str, s: Started) {
        self.started.lock().unwrap_or_else(PoisonError::into_inner).insert(id.to_owned(), s);
    }
    fn get(&self, id: &str) -> Option<Started> {
        self.started.lock().unwrap_or_else(PoisonError::into_inner).get(id).cloned()
    }
    /// Forgets the commands the engine no longer has.
    fn retain(&self, live: &[Arc<Session>]) {
        let mut t = self.started.lock().unwrap_or_else(PoisonError::into_inner);
        t.retain(|id, _| live.iter().any(|s| s.id() == id));
    }
}

/// Serves one call of `process.Process`.
pub async fn call(
    door: Arc<Door>,
    visitor: &Visitor,
    method: &str,
    headers: &HeaderMap,
    body: Body,
) -> Response {
    let streaming = connect::is_streaming(content_type(headers));
    match method {
        "Start" => start(door, visitor, headers, body, streaming).await,
        "Connect" => reconnect(door, headers, body, streaming).await,
        "StreamInput" => stream_input(door, visitor, body).await,
        _ => connect::unary(unary(&door, visitor, method, body, streaming).await),
    }
}

fn content_type(headers: &HeaderMap) -> &str {
    headers.get("content-type").and_then(|v| v.to_str().ok()).unwrap_or("")
}

async fn unary(
    door: &Door,
    visitor: &Visitor,
    method: &str,
    body: Body,
    streaming: bool,
) -> Result<serde_json::Value, RpcError> {
    let json = |v: Result<_, RpcError>| {
        v.and_then(|m: Empty| {
            serde_json::to_value(m).map_err(|e| RpcError::internal(e.to_string()))
        })
    };
    match method {
        "List" => serde_json::to_value(list(door)).map_err(|e| RpcError::internal(e.to_string())),
        "SendInput" => {
            let r: SendInputRequest = connect::request_message(body, streaming).await?;
            let session = door.select(r.process.as_ref())?;
            door.hall.audit(visitor, "write", Some(session.id()));
            let bytes = r.input.map(|i| i.into_bytes()).unwrap_or_default();
            json(write(&session, bytes).await)
        }
        "SendSignal" => {
            let r: SendSignalRequest = connect::request_message(body, streaming).await?;
            json(signal(door, visitor, r).await)
        }
        "CloseStdin" => {
            let r: SelectRequest = connect::request_message(body, streaming).await?;
            let session = door.select(r.process.as_ref())?;
            session
                .close_stdin(INPUT_TIMEOUT)
                .await
                .map_err(|e| RpcError::invalid(e.to_string()))?;
            json(Ok(Empty {}))
        }
        "Update" => {
            let r: UpdateRequest = connect::request_message(body, streaming).await?;
            let session = door.select(r.process.as_ref())?;
            if let Some(size) = r.pty.and_then(|p| p.size) {
                session.resize(pty_size(size)).map_err(|e| RpcError::invalid(e.to_string()))?;
            }
            json(Ok(Empty {}))
        }
        other => {
            Err(RpcError::new("unimplemented", format!("process.Process/{other} is not served")))
        }
    }
}

fn pty_size(s: crate::messages::PtySize) -> EnginePty {
    let clamp = |v: u32, default: u16| if v == 0 { default } else { v.min(u16::MAX.into()) as u16 };
    EnginePty { rows: clamp(s.rows, 24), cols: clamp(s.cols, 80) }
}

async fn write(session: &Session, bytes: Vec<u8>) -> Result<Empty, RpcError> {
    session
        .write_input(bytes, INPUT_TIMEOUT)
        .await
        .map(|()| Empty {})
        .map_err(|e| RpcError::new("failed_precondition", e.to_string()))
}

/// Any signal ends the command's whole tree through the engine's one terminate routine (`TERM`,
/// then `KILL` after the grace), verified gone: Stockade's promise, stronger than envd's signal
/// to one process.
async fn signal(door: &Door, visitor: &Visitor, r: SendSignalRequest) -> Result<Empty, RpcError> {
    let session = door.select(r.process.as_ref())?;
    door.hall.audit(visitor, "kill", Some(session.id()));
    if session.state().is_terminal() {
        return Err(RpcError::not_found(format!("process {} has already ended", session.pid())));
    }
    let opts = door.engine.terminate_options();
    session.kill(opts, "killed through the E2B door").await;
    Ok(Empty {})
}

fn list(door: &Door) -> ListResponse {
    let sessions = door.engine.sessions();
    door.table.retain(&sessions);
    let processes = sessions
        .iter()
        .filter(|s| !s.state().is_terminal())
        .map(|s| {
            let started = door.table.get(s.id()).unwrap_or_else(|| Started {
                config: ProcessConfig {
                    cmd: "/bin/sh".into(),
                    args: vec!["-c".into(), s.command().into()],
                    envs: Default::default(),
                    cwd: s.cwd().map(|c| c.display().to_string()),
                },
                tag: None,
            });
            ProcessInfo { config: started.config, pid: s.pid(), tag: started.tag }
        })
        .collect();
    ListResponse { processes }
}

/// The engine's run of envd's `ProcessConfig`: a shell's `-c COMMAND` (what the SDKs send,
/// `/bin/bash -l -c …`) runs as that shell's command; anything else is `exec`'d word for word.
fn run_spec(r: &StartRequest) -> Result<RunSpec, RpcError> {
    let Some(p) = r.process.as_ref().filter(|p| !p.cmd.is_empty()) else {
        return Err(RpcError::invalid("StartRequest.process.cmd is empty"));
    };
    let mut spec = RunSpec::default();
    let args: Vec<&str> = p.args.iter().map(String::as_str).collect();
    let shell = ["sh", "bash", "dash", "zsh"]
        .iter()
        .any(|s| p.cmd == *s || p.cmd.ends_with(&format!("/{s}")));
    match args.as_slice() {
        [flag, command] | [flag, "-c", command] if shell && (*flag == "-c" || *flag == "-l") => {
            spec.login = *flag == "-l";
            spec.command = (*command).to_owned();
        }
        ["-l" | "--login", "-c", command] if shell => {
            spec.login = true;
            spec.command = (*command).to_owned();
        }
        _ => {
            let words: Vec<String> =
                std::iter::once(p.cmd.as_str()).chain(args.iter().copied()).map(quote).collect();
            spec.command = format!("exec {}", words.join(" "));
        }
    }
    if shell && !spec.command.starts_with("exec ") {
        spec.shell = Some(PathBuf::from(&p.cmd));
    }
    spec.cwd = p.cwd.as_ref().filter(|c| !c.is_empty()).map(PathBuf::from);
    spec.env = p.envs.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    spec.pty = r.pty.and_then(|p| p.size).map(pty_size);
    // envd's events keep stdout and stderr apart (the SDKs' `on_stdout`/`on_stderr`): a pipe
    // each, so the order across the two is best-effort here, as it is with envd.
    spec.capture = stockade_proto::Capture::Split;
    if spec.pty.is_none() && r.stdin.unwrap_or(true) {
        spec.stdin = StdinMode::Pipe;
    }
    Ok(spec)
}

/// The keepalive interval the client asked for (`Keepalive-Ping-Interval`, seconds).
fn keepalive(headers: &HeaderMap) -> Option<Duration> {
    let v = headers.get("keepalive-ping-interval")?.to_str().ok()?;
    v.trim().parse::<u64>().ok().map(Duration::from_secs)
}

async fn start(
    door: Arc<Door>,
    visitor: &Visitor,
    headers: &HeaderMap,
    body: Body,
    streaming: bool,
) -> Response {
    let request: StartRequest = match connect::request_message(body, streaming).await {
        Ok(r) => r,
        Err(e) => return connect::stream_error(e),
    };
    let spec = match run_spec(&request).and_then(|mut spec| {
        spec.base_env = Some(door.init.base());
        if let Some(user) = crate::user::from_headers(headers)? {
            user.apply(&mut spec)?;
        }
        Ok(spec)
    }) {
        Ok(s) => s,
        Err(e) => return connect::stream_error(e),
    };
    // Through the daemon's hall: the caller's rights, the spawn metric, the audit line.
    let session = match door.hall.start(visitor, spec).await {
        Ok(s) => s,
        Err(e @ StartError::Internal(_)) => {
            return connect::stream_error(RpcError::internal(e.to_string()));
        }
        Err(e) => return connect::stream_error(RpcError::invalid(e.to_string())),
    };
    let config = request.process.unwrap_or_default();
    door.table.insert(session.id(), Started { config, tag: request.tag });
    if let Some(limit) = deadline(headers) {
        tokio::spawn(end_at_deadline(Arc::clone(&door), Arc::clone(&session), limit));
    }
    serve_events(door, session, keepalive(headers))
}

/// The command's deadline: `Connect-Timeout-Ms`, which the SDKs send for a command's `timeout`
/// (`timeoutMs`, a PTY's too; 0 or none is no deadline).
fn deadline(headers: &HeaderMap) -> Option<Duration> {
    let ms: u64 = headers.get("connect-timeout-ms")?.to_str().ok()?.trim().parse().ok()?;
    (ms > 0).then(|| Duration::from_millis(ms))
}

/// Ends the command's whole tree at its deadline, as envd ends the process when its start
/// request's deadline passes (the SDK reports its timeout then): no grace after `TERM`.
async fn end_at_deadline(door: Arc<Door>, session: Arc<Session>, limit: Duration) {
    let ended = tokio::select! {
        r = tokio::time::timeout(limit, session.wait(None)) => r.is_ok(),
        () = door.stop.cancelled() => true,
    };
    if ended || session.state().is_terminal() {
        return;
    }
    let mut opts = door.engine.terminate_options();
    opts.grace = Duration::ZERO;
    let reason = format!("its E2B timeout of {} ms passed", limit.as_millis());
    session.kill(opts, &reason).await;
}

async fn reconnect(door: Arc<Door>, headers: &HeaderMap, body: Body, streaming: bool) -> Response {
    let request: SelectRequest = match connect::request_message(body, streaming).await {
        Ok(r) => r,
        Err(e) => return connect::stream_error(e),
    };
    match door.select(request.process.as_ref()) {
        Ok(session) => serve_events(door, session, keepalive(headers)),
        Err(e) => connect::stream_error(e),
    }
}

fn serve_events(door: Arc<Door>, session: Arc<Session>, keepalive: Option<Duration>) -> Response {
    let (tx, response) = connect::stream_response();
    tokio::spawn(output::stream(session, tx, keepalive, door.stop.clone()));
    response
}

/// `StreamInput`: a `start` naming the command, then `data` messages written in order.
async fn stream_input(door: Arc<Door>, visitor: &Visitor, body: Body) -> Response {
    let result = async {
        let mut frames = Envelopes::default();
        let mut body = body.into_data_stream();
        let mut session: Option<Arc<Session>> = None;
        use futures_util::StreamExt as _;
        while let Some(chunk) = body.next().await {
            let chunk = chunk.map_err(|e| RpcError::new("canceled", e.to_string()))?;
            frames.push(&chunk);
            while let Some((_, message)) = frames.next_frame()? {
                let m: StreamInputRequest = connect::decode(&message)?;
                if let Some(start) = m.start {
                    let s = door.select(start.process.as_ref())?;
                    // One audit line per input stream, as `SendInput` has one per write.
                    door.hall.audit(visitor, "write", Some(s.id()));
                    session = Some(s);
                } else if let Some(data) = m.data {
                    let Some(s) = session.as_ref() else {
                        return Err(RpcError::invalid("data before the start message"));
                    };
                    write(s, data.input.map(|i| i.into_bytes()).unwrap_or_default()).await?;
                }
            }
        }
        Ok(Empty {})
    }
    .await;
    let (tx, response) = connect::stream_response();
    tokio::spawn(async move {
        match result {
            Ok(m) => {
                if tx.send(&m).await {
                    tx.end(None).await;
                }
            }
            Err(e) => tx.end(Some(e)).await,
        }
    });
    response
}

impl Door {
    /// The session a selector names: a running command with that pid or tag, else the latest
    /// that had it (its output stays readable after the end, so a late `Connect` misses
    /// nothing).
    pub(crate) fn select(
        &self,
        selector: Option<&ProcessSelector>,
    ) -> Result<Arc<Session>, RpcError> {
        let Some(sel) = selector else {
            return Err(RpcError::invalid("no process selector (pid or tag)"));
        };
        let matches = |s: &Arc<Session>| match (&sel.pid, &sel.tag) {
            (Some(pid), _) => s.pid() == *pid,
            (None, Some(tag)) => self.table.get(s.id()).and_then(|t| t.tag).as_deref() == Some(tag),
            (None, None) => false,
        };
        let mut found: Vec<Arc<Session>> =
            self.engine.sessions().into_iter().filter(matches).collect();
        found.sort_by_key(|s| (!s.state().is_terminal(), s.started_at()));
        found.pop().ok_or_else(|| {
            RpcError::not_found(match (&sel.pid, &sel.tag) {
                (Some(pid), _) => format!("process with pid {pid} not found"),
                (_, Some(tag)) => format!("process with tag {tag} not found"),
                _ => "no process selected".into(),
            })
        })
    }
}
