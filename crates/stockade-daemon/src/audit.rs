//! The audit log (`--audit-log FILE`, off unless asked): one JSON line per accepted connection
//! and per request that starts a command or ends a session, saying who asked for what: time
//! (RFC 3339), peer (the uid on the Unix socket, from `SO_PEERCRED`; the address on the door),
//! door, token id (a non-secret fingerprint of the token presented: the first 8 hex digits of its
//! SHA-256), method, session and command.
//!
//! Lines are written by a thread of their own through a bounded queue: a slow or failing disk
//! never holds up a connection. A line the queue has no room for, or that cannot be written, is
//! counted and logged, never retried. When the file would grow past its size bound it is renamed
//! `FILE.1` (replacing the one before) and a new one is started: at most two files, each at most
//! the bound plus one line.

use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{SyncSender, TrySendError, sync_channel};

use serde::Serialize;

/// Lines waiting to be written; more are dropped (and counted).
const QUEUE: usize = 4096;

/// The methods that start a command or end a session: each gets a line.
const AUDITED: &[&str] = &[
    "run",
    "kill",
    "kill_many",
    "write",
    "restart",
    "forget",
    "hide",
    "cleanup",
    "shutdown",
    "schedule.add",
    "schedule.fire",
    "schedule.remove",
];

/// Whether requests of `method` get a line.
pub(crate) fn audited(method: &str) -> bool {
    AUDITED.contains(&method)
}

/// Who is on the other end of a connection, for its audit lines.
#[derive(Debug, Clone)]
pub(crate) struct Peer {
    /// `unix`, `ws` or `e2b`.
    pub(crate) door: &'static str,
    /// `uid:N` on the Unix socket, the address on the door.
    pub(crate) peer: String,
    /// The fingerprint of the token the connection presented (the door), if any.
    pub(crate) token_id: Option<String>,
}

#[derive(Serialize)]
struct Line<'a> {
    time: String,
    peer: &'a str,
    door: &'a str,
    token_id: Option<&'a str>,
    method: &'a str,
    session: Option<&'a str>,
    /// Every session a request ended together (`kill_many`, `kill --all`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    sessions: Vec<String>,
    command: Option<&'a str>,
}

/// The audit log of a daemon (a clone writes to the same log).
#[derive(Debug, Clone)]
pub(crate) struct Audit {
    tx: SyncSender<Vec<u8>>,
    /// Lines lost: no room in the queue, or the write failed.
    lost: std::sync::Arc<AtomicU64>,
}

impl Audit {
    /// Start the writer of `path`, rotated past `max_bytes`. The file is opened (created 0600)
    /// now, so a path that cannot be written fails the start.
    pub(crate) fn open(path: &Path, max_bytes: u64) -> std::io::Result<Audit> {
        let file = open(path)?;
        let len = file.metadata()?.len();
        let (tx, rx) = sync_channel::<Vec<u8>>(QUEUE);
        let lost = std::sync::Arc::new(AtomicU64::new(0));
        let mut writer = Writer { path: path.to_owned(), file, len, max_bytes };
        let counted = std::sync::Arc::clone(&lost);
        std::thread::Builder::new().name("stockade-audit".into()).spawn(move || {
            for line in rx {
                if let Err(e) = writer.write(&line) {
                    let n = counted.fetch_add(1, Ordering::Relaxed) + 1;
                    tracing::warn!(error = %e, lost = n, "an audit line could not be written");
                }
            }
        })?;
        Ok(Audit { tx, lost })
    }

    /// Record an accepted connection.
    pub(crate) fn connected(&self, peer: &Peer) {
        self.record(peer, "connect", None, None);
    }

    /// Record a request (of an [`audited`] method): `params` give the session (`id`, or the
    /// answer's `id` for a run; `answer` is the result's JSON, `None` when it failed) and the
    /// command.
    pub(crate) fn request(
        &self,
        peer: &Peer,
        method: &str,
        params: &serde_json::Value,
        answer: Option<&[u8]>,
    ) {
        // Only the ids are kept of the answer (a run's may carry its output).
        #[derive(serde::Deserialize)]
        struct Answered {
            id: Option<String>,
            #[serde(default)]
            results: Vec<Ended>,
        }
        #[derive(serde::Deserialize)]
        struct Ended {
            id: String,
        }
        let answered = answer.and_then(|a| serde_json::from_slice::<Answered>(a).ok());
        let session = params
            .get("id")
            .and_then(serde_json::Value::as_str)
            .map(str::to_owned)
            .or_else(|| answered.as_ref()?.id.clone());
        let sessions = answered.map(|a| a.results.into_iter().map(|e| e.id).collect());
        let command = params.get("command").and_then(serde_json::Value::as_str);
        self.write(peer, method, session.as_deref(), sessions.unwrap_or_default(), command);
    }

    /// Record a request a door outside the JSON-RPC pipeline handled (see `crate::hall::Hall`).
    pub(crate) fn started(
        &self,
        peer: &Peer,
        method: &str,
        session: Option<&str>,
        command: Option<&str>,
    ) {
        self.record(peer, method, session, command);
    }

    fn record(&self, peer: &Peer, method: &str, session: Option<&str>, command: Option<&str>) {
        self.write(peer, method, session, Vec::new(), command);
    }

    fn write(
        &self,
        peer: &Peer,
        method: &str,
        session: Option<&str>,
        sessions: Vec<String>,
        command: Option<&str>,
    ) {
        let Some(bytes) = line(peer, method, session, sessions, command) else { return };
        if let Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) = self.tx.try_send(bytes)
        {
            let n = self.lost.fetch_add(1, Ordering::Relaxed) + 1;
            tracing::warn!(lost = n, "an audit line was dropped: the writer is behind or gone");
        }
    }
}

/// One line of the log, with its newline.
fn line(
    peer: &Peer,
    method: &str,
    session: Option<&str>,
    sessions: Vec<String>,
    command: Option<&str>,
) -> Option<Vec<u8>> {
    let line = Line {
        time: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        peer: &peer.peer,
        door: peer.door,
        token_id: peer.token_id.as_deref(),
        method,
        session,
        sessions,
        command,
    };
    let mut bytes = serde_json::to_vec(&line).ok()?;
    bytes.push(b'\n');
    Some(bytes)
}

/// Appends one line to the log at `path` from another process (a foreground run of the
/// daemon's home): one `write(2)` with `O_APPEND`, so it never lands inside a line of the
/// daemon's. The daemon's writer counts it when it next writes.
pub(crate) fn append_once(
    path: &Path,
    peer: &Peer,
    method: &str,
    session: Option<&str>,
    command: Option<&str>,
) -> std::io::Result<()> {
    let bytes = line(peer, method, session, Vec::new(), command)
        .ok_or_else(|| std::io::Error::other("the audit line cannot be encoded"))?;
    open(path)?.write_all(&bytes)
}

/// The first 8 hex digits of the SHA-256 of `token`: names it in the log without revealing it.
pub(crate) fn token_id(token: &[u8]) -> String {
    use sha2::Digest as _;
    let digest = sha2::Sha256::digest(token);
    digest.iter().take(4).map(|b| format!("{b:02x}")).collect()
}

struct Writer {
    path: PathBuf,
    file: File,
    len: u64,
    max_bytes: u64,
}

impl Writer {
    fn write(&mut self, line: &[u8]) -> std::io::Result<()> {
        // Foreground runs append too (`append_once`): the file's size, not only ours.
        self.len = self.file.metadata().map_or(self.len, |m| m.len());
        if self.len > 0 && self.len + line.len() as u64 > self.max_bytes {
            let mut rotated = self.path.clone().into_os_string();
            rotated.push(".1");
            std::fs::rename(&self.path, &rotated)?;
            self.file = open(&self.path)?;
            self.len = 0;
        }
        self.file.write_all(line)?;
        self.len += line.len() as u64;
        Ok(())
    }
}

fn open(path: &Path) -> std::io::Result<File> {
    OpenOptions::new().create(true).append(true).mode(0o600).open(path)
}
