//! The front hall: what every door passes on its way to the engine. A door (the Unix socket, the
//! WebSocket door, the E2B door, schedules) only translates its wire format; who the caller is,
//! what a sandboxed caller may ask, the start of a command with its metric and audit line are
//! decided here, once.
//!
//! - [`Caller`]: who sent a request, known from something the kernel vouches for (the Unix
//!   socket's `SO_PEERCRED`, then the session that accounts for that process), or a network
//!   door's client that presented the door's token.
//! - [`admit`]: the one rule for what a run of a caller may ask: a command inside a sandboxed
//!   session inherits that session's sandbox as its ceiling and may not use `source`; the
//!   operator's ceiling is checked by the engine for every run (`stockade-engine`'s `sandbox.rs`).
//! - [`spawn`]: the start itself, off the async workers, counted in the spawn metric.
//! - [`Hall`]: the same for a door outside this crate, which also writes the audit line.

use std::net::SocketAddr;
use std::sync::Arc;

use stockade_engine::{RunSpec, Session, Started};

pub use crate::spawn::StartError;
use stockade_proto::rpc::{RpcError, code};

use crate::audit::Peer;
use crate::error::rpc_error;
use crate::state::Shared;

/// Who sent a connection's requests (known from the Unix socket's `SO_PEERCRED`).
#[derive(Debug)]
pub(crate) enum Caller {
    /// Not confined by any sandbox below the daemon (or a network door's client).
    Free,
    /// A process of a running sandboxed session (its id): its policy is the ceiling of what it
    /// asks, and it reaches only its own session and those it started.
    Sandboxed(String, stockade_proto::Sandbox),
    /// A process under a sandbox that no running session accounts for: it gets nothing.
    Unmatched,
}

impl Caller {
    /// Who the process `pid` (the peer of a Unix-socket connection) is to `engine`.
    pub(crate) fn of_pid(engine: &stockade_engine::Engine, pid: Option<u32>) -> Caller {
        let Some(pid) = pid else { return Caller::Unmatched };
        // 0: the peer lives outside the daemon's pid namespace (the daemon runs as PID 1 of its
        // own). No session's process can: a sandboxed one cannot make a pid namespace.
        if pid == 0 {
            return Caller::Free;
        }
        match stockade_proc::sandbox::confined_below_us(pid) {
            Some(false) => Caller::Free,
            // Gone already, or confined: only a session it belongs to can vouch for it.
            _ => engine
                .sandbox_of_process(pid)
                .map_or(Caller::Unmatched, |(id, policy)| Caller::Sandboxed(id, policy)),
        }
    }

    /// Refuses what a sandboxed caller may not ask: it may start (sandboxed) commands, see the
    /// daemon's status, and reach (read, write to, kill, forget) only its own session and the
    /// sessions it started: their output is as private as the home it cannot read.
    pub(crate) fn allows(
        &self,
        engine: &stockade_engine::Engine,
        method: stockade_proto::rpc::MethodName,
        params: &serde_json::Value,
    ) -> Result<(), RpcError> {
        use stockade_proto::rpc::MethodName as M;
        let refuse = |why: String| Err(rpc_error(code::INVALID_PARAMS, why));
        match self {
            Caller::Free => Ok(()),
            Caller::Unmatched if method == M::Status => Ok(()),
            Caller::Unmatched => refuse(format!(
                "this caller runs under a sandbox no running session accounts for, so `{}` is refused; call from outside the sandbox",
                method.name()
            )),
            Caller::Sandboxed(..) if matches!(method, M::Run | M::Status | M::Stats) => Ok(()),
            Caller::Sandboxed(own, _)
                if matches!(
                    method,
                    M::Read | M::Grep | M::Write | M::Kill | M::Forget | M::Resize | M::Restart
                ) =>
            {
                let id = params.get("id").and_then(serde_json::Value::as_str).unwrap_or("");
                if engine.descends_from(id, own) {
                    Ok(())
                } else {
                    refuse(format!(
                        "a command inside sandboxed session {own} reaches only that session and the sessions it started, not {id:?}; do it from outside the sandbox"
                    ))
                }
            }
            // Several of its own sessions at once: allowed when each is.
            Caller::Sandboxed(own, _) if method == M::KillMany => {
                let ids = params.get("ids").and_then(serde_json::Value::as_array);
                let all_own = ids.is_some_and(|ids| {
                    ids.iter().all(|id| engine.descends_from(id.as_str().unwrap_or(""), own))
                });
                if all_own && params.get("all").and_then(serde_json::Value::as_bool) != Some(true) {
                    Ok(())
                } else {
                    refuse(format!(
                        "a command inside sandboxed session {own} may end only that session and the sessions it started, by id; do it from outside the sandbox"
                    ))
                }
            }
            Caller::Sandboxed(..) => refuse(format!(
                "a command inside a sandboxed session may start sandboxed commands and reach its own sessions, not call `{}`; do it from outside the sandbox",
                method.name()
            )),
        }
    }
}

/// Holds `spec` to what `caller` may ask: a command inside a sandboxed session may not use
/// `source` (it would find sessions outside the sandbox), inherits that session's sandbox when
/// it asks for none, and may ask for no more than it (the engine checks, beside the
/// operator's ceiling); the run is recorded as started by that session.
pub(crate) fn admit(caller: &Caller, spec: &mut RunSpec) -> Result<(), String> {
    match caller {
        Caller::Free => Ok(()),
        Caller::Unmatched => Err(
            "this caller runs under a sandbox no running session accounts for, so `run` is refused; call from outside the sandbox"
                .into(),
        ),
        Caller::Sandboxed(parent, ceiling) => {
            if spec.source.is_some() {
                return Err(
                    "a command inside a sandboxed session cannot use `source` (it would find sessions outside the sandbox); leave it out"
                        .into(),
                );
            }
            if spec.sandbox.is_none() {
                spec.sandbox =
                    Some(stockade_proto::Sandbox { writable_roots: Vec::new(), ..ceiling.clone() });
            }
            spec.sandbox_ceilings.push(ceiling.clone());
            spec.parent = Some(parent.clone());
            Ok(())
        }
    }
}

/// Starts `spec` (already [`admit`]ted) off the async workers, counted in the spawn metric.
pub(crate) async fn spawn(shared: &Arc<Shared>, spec: RunSpec) -> Result<Started, StartError> {
    crate::spawn::spawn(&shared.engine, &shared.metrics, spec).await
}

/// The hall for a door served outside this crate (the E2B door): its requests pass the same
/// admission, spawn, metric and audit as the daemon's own doors. Cheap to clone.
#[derive(Clone)]
pub struct Hall(pub(crate) Arc<Shared>);

impl std::fmt::Debug for Hall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Hall")
    }
}

/// Who is at an outside door: its caller and what the audit log says of it.
#[derive(Debug, Clone)]
pub struct Visitor {
    caller: Arc<Caller>,
    peer: Arc<Peer>,
}

impl Visitor {
    /// A client of network door `door` (`e2b`, …) at `addr` that presented the token whose
    /// fingerprint is `token_id`.
    pub fn network(door: &'static str, addr: SocketAddr, token_id: Option<String>) -> Visitor {
        let peer = Peer { door, peer: addr.to_string(), token_id };
        Visitor { caller: Arc::new(Caller::Free), peer: Arc::new(peer) }
    }
}

impl Hall {
    /// The engine behind the hall, for what a door reads (sessions, views).
    pub fn engine(&self) -> &Arc<stockade_engine::Engine> {
        &self.0.engine
    }

    /// Starts a command for `visitor`: admitted, spawned and counted as on the daemon's own
    /// doors, with one audit line (`method` `run`, the session and the command).
    pub async fn start(
        &self,
        visitor: &Visitor,
        mut spec: RunSpec,
    ) -> Result<Arc<Session>, StartError> {
        admit(&visitor.caller, &mut spec).map_err(StartError::Refused)?;
        let command = spec.command.clone();
        let started = spawn(&self.0, spec).await;
        if let Some(audit) = &self.0.audit {
            let session = started.as_ref().ok().map(|s| s.session.id().to_owned());
            audit.started(&visitor.peer, "run", session.as_deref(), Some(&command));
        }
        Ok(started?.session)
    }

    /// Writes the audit line of a request of `visitor` that ends or changes session `session`
    /// (`kill`, `write`, …).
    pub fn audit(&self, visitor: &Visitor, method: &str, session: Option<&str>) {
        if let Some(audit) = &self.0.audit {
            audit.started(&visitor.peer, method, session, None);
        }
    }

    /// Writes the audit line of an accepted connection.
    pub fn connected(&self, visitor: &Visitor) {
        if let Some(audit) = &self.0.audit {
            audit.connected(&visitor.peer);
        }
    }
}

/// A failed start as a JSON-RPC error.
pub(crate) fn rpc_error_of(e: StartError) -> RpcError {
    match e {
        StartError::Engine(e) => crate::error::from_engine(e),
        StartError::Refused(why) => rpc_error(code::INVALID_PARAMS, why),
        StartError::Internal(why) => rpc_error(code::INTERNAL_ERROR, why),
    }
}

/// What a door's file request does to a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileAccess {
    /// Read it (or list it, stat it, watch it).
    Read,
    /// Create, write, move or remove it.
    Write,
}

impl Hall {
    /// The path a door's file request may use for `path` (absolute), under the same rules as a
    /// command: Stockade's home and every door's secret are never reachable (nor, for a write,
    /// a directory that holds one), and the operator's ceiling bounds writes — none under
    /// `read-only`, only beneath its writable roots under `workspace-write`. What exists of the
    /// path is resolved (symlinks followed), so a link cannot lead around the rule; the answer
    /// is that resolved path. `Err` is one sentence for the client.
    pub fn reach(
        &self,
        path: &std::path::Path,
        access: FileAccess,
    ) -> Result<std::path::PathBuf, String> {
        let real = resolved(path);
        let config = self.0.engine.config();
        if let Some(secret) = self
            .hidden()
            .into_iter()
            .find(|h| real.starts_with(h) || (access == FileAccess::Write && h.starts_with(&real)))
        {
            return Err(format!(
                "{} is not reachable through this door: it is (or holds) {}, which Stockade keeps from every client and command",
                path.display(),
                secret.display()
            ));
        }
        let ceiling = &config.sandbox.ceiling;
        if access == FileAccess::Write {
            match ceiling.mode {
                stockade_proto::SandboxMode::Off => {}
                stockade_proto::SandboxMode::ReadOnly => {
                    return Err(format!(
                        "{} cannot be written: this daemon runs everything under `sandbox read-only`, which this door obeys too",
                        path.display()
                    ));
                }
                stockade_proto::SandboxMode::WorkspaceWrite => {
                    let roots: Vec<_> =
                        ceiling.writable_roots.iter().map(|r| resolved(r)).collect();
                    if !roots.iter().any(|r| real.starts_with(r)) {
                        return Err(format!(
                            "{} cannot be written: this daemon's sandbox allows writes only beneath {}",
                            path.display(),
                            if roots.is_empty() {
                                "its --writable-root directories, and none is given".to_owned()
                            } else {
                                roots
                                    .iter()
                                    .map(|r| r.display().to_string())
                                    .collect::<Vec<_>>()
                                    .join(", ")
                            }
                        ));
                    }
                }
            }
        }
        Ok(real)
    }

    /// Whether `path` (resolved) is, or is inside, something no client may reach.
    pub fn hides(&self, path: &std::path::Path) -> bool {
        let real = resolved(path);
        self.hidden().iter().any(|h| real.starts_with(h))
    }

    /// Stockade's home and every door's secret, resolved.
    fn hidden(&self) -> Vec<std::path::PathBuf> {
        let config = self.0.engine.config();
        std::iter::once(config.state_dir.root())
            .chain(config.sandbox.hidden.iter().map(std::path::PathBuf::as_path))
            .map(resolved)
            .collect()
    }
}

/// `path` with what exists of it resolved (symlinks followed), the rest appended; `.` and `..`
/// are taken lexically first, so the answer has neither and a `..` below a directory that does
/// not exist yet cannot climb out of where the check looked.
fn resolved(path: &std::path::Path) -> std::path::PathBuf {
    use std::path::Component;
    let mut lexical = std::path::PathBuf::from("/");
    for part in path.components() {
        match part {
            Component::Normal(p) => lexical.push(p),
            Component::ParentDir => {
                lexical.pop();
            }
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    let path = lexical.as_path();
    let mut rest = Vec::new();
    let mut at = path;
    loop {
        if let Ok(real) = std::fs::canonicalize(at) {
            let mut real = real;
            for part in rest.iter().rev() {
                real.push(part);
            }
            return real;
        }
        match (at.parent(), at.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_owned());
                at = parent;
            }
            _ => return path.to_path_buf(),
        }
    }
}
