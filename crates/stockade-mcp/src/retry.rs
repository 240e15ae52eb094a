//! A repeated `exec_command` gets back the session of a call whose answer never arrived, and
//! nothing else.
//!
//! Clients give up on a tool call on their own clock (the OpenAI Agents SDK after 5 s) and the
//! model, seeing an error without a session id, asks again. The first command is still running
//! (sessions outlive their callers), so starting it again would build twice. This server keeps
//! the calls it has not answered: one still waiting on this connection, or one that ended
//! without an answer on any connection of this server (cancelled, or its connection closed).
//! An identical call — same command line, directory, terminal and sandbox — made at most
//! [`RETRY_WINDOW_MS`] after such a call, while the session it started still runs, follows that
//! session: it is sent again with that call's idempotency key, so the daemon answers with the
//! session it started.
//!
//! A call whose answer was delivered is never followed: the model that re-runs a command after
//! an edit reads the new run. Another server (another agent) never follows this one's calls,
//! except a call left unanswered by a server that has since died (a stdio server ends with its
//! client's connection): every call not yet answered is also a small file in the state
//! directory (`mcp-calls/KEY`), removed once answered, so the server the client starts next
//! follows it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use stockade_proto::rpc::{ListParams, RunParams, StateFilter, method};

use crate::backend::Backend;

/// How long after its start an unanswered call's session can still be followed.
pub const RETRY_WINDOW_MS: u64 = 30_000;

/// Which calls count as the same call asked again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shape {
    command: String,
    cwd: Option<PathBuf>,
    pty: bool,
    sandbox: Option<stockade_proto::Sandbox>,
}

impl Shape {
    /// The shape of a `run`.
    pub fn of(run: &RunParams) -> Shape {
        Shape {
            command: run.command.clone(),
            cwd: run.cwd.clone(),
            pty: run.pty.is_some(),
            sandbox: run.sandbox.clone(),
        }
    }
}

/// Whether a call's answer is still to come.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    /// The call is waiting: its answer may yet reach its client.
    Waiting,
    /// The call ended without an answer (cancelled, or its connection closed).
    Unanswered,
}

#[derive(Debug)]
struct Call {
    shape: Shape,
    connection: u64,
    started: Instant,
    fate: Fate,
}

/// The `exec_command` calls of this server that have not delivered their answer, by key.
/// Shared by every connection of one server.
#[derive(Debug, Clone, Default)]
pub struct Calls {
    calls: Arc<Mutex<HashMap<String, Call>>>,
    next_connection: Arc<AtomicU64>,
    /// Where unanswered calls are also kept for the next server (`None`: in memory only).
    dir: Option<Arc<PathBuf>>,
}

/// An unanswered call as a file: what a later server needs to follow it.
#[derive(Debug, Serialize, Deserialize)]
struct Kept {
    shape: Shape,
    /// When it was made, ms since the Unix epoch.
    started_ms: u64,
    /// The server that made it.
    pid: u32,
}

fn now_ms() -> u64 {
    let since = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
}

/// An earlier call that the current one may follow.
#[derive(Debug, Clone)]
pub struct Earlier {
    /// Its idempotency key.
    pub key: String,
    /// How long ago it was made.
    pub age: Duration,
    /// Whether it ended without an answer (else it is still waiting on this connection).
    pub unanswered: bool,
}

impl Calls {
    /// Calls also kept in `dir` (created when first needed), for the server started next.
    pub fn kept_in(dir: PathBuf) -> Calls {
        Calls { dir: Some(Arc::new(dir)), ..Calls::default() }
    }

    /// A number naming one connection (one MCP session) of this server.
    pub fn connection(&self) -> u64 {
        self.next_connection.fetch_add(1, Ordering::Relaxed)
    }

    /// The newest call of `shape` made at most [`RETRY_WINDOW_MS`] ago that ended without an
    /// answer, or that still waits on `connection`.
    pub fn earlier(&self, shape: &Shape, connection: u64) -> Option<Earlier> {
        let window = Duration::from_millis(RETRY_WINDOW_MS);
        let mine = {
            let mut calls = self.calls.lock().ok()?;
            calls.retain(|_, c| c.started.elapsed() <= window);
            calls
                .iter()
                .filter(|(_, c)| {
                    c.shape == *shape && (c.fate == Fate::Unanswered || c.connection == connection)
                })
                .max_by_key(|(_, c)| c.started)
                .map(|(key, c)| Earlier {
                    key: key.clone(),
                    age: c.started.elapsed(),
                    unanswered: c.fate == Fate::Unanswered,
                })
        };
        mine.or_else(|| self.dir.as_deref().and_then(|dir| left_by_a_dead_server(dir, shape)))
    }

    /// Note a call about to be made: until [`Pending::answered`], it counts as not answered.
    pub fn begin(&self, key: &str, shape: Shape, connection: u64) -> Pending {
        let started = match self.calls.lock() {
            Ok(mut calls) => {
                // A followed call keeps its first start: the window counts from there.
                let started = calls.get(key).map_or_else(Instant::now, |c| c.started);
                if let Some(dir) = self.dir.as_deref() {
                    let pid = std::process::id();
                    keep(dir, key, &Kept { shape: shape.clone(), started_ms: now_ms(), pid });
                }
                let call = Call { shape, connection, started, fate: Fate::Waiting };
                calls.insert(key.to_owned(), call);
                started
            }
            Err(_) => Instant::now(),
        };
        Pending { calls: self.clone(), key: key.to_owned(), started, answered: false }
    }
}

/// A call on its way; dropped without [`Pending::answered`], it is left as unanswered.
#[derive(Debug)]
pub struct Pending {
    calls: Calls,
    key: String,
    started: Instant,
    answered: bool,
}

impl Pending {
    /// The call's answer goes to its client: it is never followed.
    pub fn answered(mut self) {
        self.answered = true;
        if let Ok(mut calls) = self.calls.calls.lock() {
            calls.remove(&self.key);
        }
        if let Some(dir) = self.calls.dir.as_deref() {
            // Best effort: a file left behind only expires.
            let _ = std::fs::remove_file(dir.join(&self.key));
        }
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if self.answered {
            return;
        }
        if let Ok(mut calls) = self.calls.calls.lock()
            && let Some(call) = calls.get_mut(&self.key)
            && call.started == self.started
        {
            call.fate = Fate::Unanswered;
        }
    }
}

/// The id of the session started with `key`, if the daemon names it within a second.
pub async fn session_of(backend: &Backend, key: &str) -> Option<String> {
    let params = ListParams {
        limit: Some(1),
        idempotency_key: Some(key.to_owned()),
        ..ListParams::default()
    };
    let listed = backend.call(move |c| c.call::<method::List>(params));
    let listed = tokio::time::timeout(Duration::from_secs(1), listed).await.ok()?.ok()?;
    listed.sessions.into_iter().next().map(|s| s.id)
}

/// Writes `kept` as `dir/KEY` (best effort: a call not kept is only not followed by the next
/// server). Keys are printable ASCII; one with a `/` (or `.` first) is not kept.
fn keep(dir: &Path, key: &str, kept: &Kept) {
    if key.contains('/') || key.starts_with('.') {
        return;
    }
    let Ok(text) = serde_json::to_vec(kept) else { return };
    if std::fs::create_dir_all(dir).is_ok() {
        let _ = std::fs::write(dir.join(key), text);
    }
}

/// The newest call of `shape` kept in `dir` by a server that is gone, at most
/// [`RETRY_WINDOW_MS`] ago; expired files are removed on the way.
fn left_by_a_dead_server(dir: &Path, shape: &Shape) -> Option<Earlier> {
    let now = now_ms();
    let mut best: Option<(u64, String)> = None;
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let Ok(key) = entry.file_name().into_string() else { continue };
        let read = std::fs::read(entry.path()).ok();
        let Some(kept) = read.and_then(|t| serde_json::from_slice::<Kept>(&t).ok()) else {
            continue;
        };
        if now.saturating_sub(kept.started_ms) > RETRY_WINDOW_MS {
            let _ = std::fs::remove_file(entry.path());
            continue;
        }
        let gone = kept.pid != std::process::id() && !stockade_client::pid_alive(kept.pid);
        let newer = best.as_ref().is_none_or(|(t, _)| kept.started_ms > *t);
        if gone && kept.shape == *shape && newer {
            best = Some((kept.started_ms, key));
        }
    }
    best.map(|(started_ms, key)| Earlier {
        key,
        age: Duration::from_millis(now.saturating_sub(started_ms)),
        unanswered: true,
    })
}

/// Whether the session started with `key` still runs (a failed list counts as no).
pub async fn still_running(backend: &Backend, key: &str) -> bool {
    let params = ListParams {
        limit: Some(1),
        state: Some(StateFilter::Running),
        idempotency_key: Some(key.to_owned()),
        ..ListParams::default()
    };
    backend
        .call(move |c| c.call::<method::List>(params))
        .await
        .is_ok_and(|listed| !listed.sessions.is_empty())
}

/// The sentence that tells the model its call found the session an earlier one started.
pub fn note(earlier: &Earlier, id: &str) -> String {
    let why = if earlier.unanswered {
        "whose answer never reached you (the call was cancelled or its connection closed)"
    } else {
        "still waiting for its answer"
    };
    format!(
        "Note: this same command was started {:.1} s ago by a call {why}; this answer follows that session, {id}, instead of starting a second copy.",
        earlier.age.as_secs_f64(),
    )
}

/// Whether a session ended because the daemon running it died (crash recovery ended it).
pub fn died_with_daemon(state: &stockade_proto::SessionState) -> bool {
    matches!(state, stockade_proto::SessionState::Failed { reason } if reason.starts_with("owner daemon died"))
}

/// The first line of the answer to a key whose session the daemon's death ended.
pub fn died_note(id: &str) -> String {
    format!(
        "Note: the session this idempotency_key started, {id}, did not finish: it was terminated when the daemon died: call again without idempotency_key to run it."
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(cmd: &str) -> Shape {
        Shape::of(&RunParams { command: cmd.to_owned(), ..RunParams::default() })
    }

    #[test]
    fn an_answered_call_is_never_followed() {
        let calls = Calls::default();
        let conn = calls.connection();
        calls.begin("k1", shape("make"), conn).answered();
        assert!(calls.earlier(&shape("make"), conn).is_none());
    }

    #[test]
    fn a_waiting_call_is_followed_only_on_its_connection_and_an_unanswered_one_on_any() {
        let calls = Calls::default();
        let (a, b) = (calls.connection(), calls.connection());
        let pending = calls.begin("k1", shape("make"), a);
        assert_eq!(calls.earlier(&shape("make"), a).map(|e| e.key), Some("k1".to_owned()));
        assert!(calls.earlier(&shape("make"), b).is_none(), "another connection's waiting call");
        assert!(calls.earlier(&shape("make test"), a).is_none(), "another command");
        drop(pending);
        let found = calls.earlier(&shape("make"), b).expect("an unanswered call");
        assert!(found.unanswered);
        // Followed and answered this time: no longer followed.
        calls.begin("k1", shape("make"), b).answered();
        assert!(calls.earlier(&shape("make"), b).is_none());
    }
}
