//! What every connection, handler and background task of the daemon shares: the engine, the
//! schedules and the daemon's identity. It only holds them; it imports nothing of the daemon
//! but the scheduler's type.

use std::path::PathBuf;
use std::sync::Arc;

use stockade_engine::Engine;
use tokio_util::sync::CancellationToken;

use crate::schedule::Scheduler;

/// What every connection and handler shares: the engine and the daemon's identity.
pub(crate) struct Shared {
    pub(crate) engine: Arc<Engine>,
    pub(crate) socket: PathBuf,
    pub(crate) home: PathBuf,
    pub(crate) pid: u32,
    /// Cancelled once start-up recovery is done: `/readyz` says ready and the door upgrades
    /// (the probes are served before it, so a kubelet sees the daemon alive while it recovers).
    pub(crate) recovered: CancellationToken,
    /// Cancelled by the `shutdown` method, or when `serve`'s token is.
    pub(crate) stop: CancellationToken,
    /// The schedules, fired by the scheduler task.
    pub(crate) schedules: Arc<Scheduler>,
    /// Counted events for `GET /metrics`.
    pub(crate) metrics: crate::metrics::Metrics,
    /// TLS for the WebSocket door, when it has TLS (replaced by a reload).
    pub(crate) door_tls: Option<crate::reload::LiveTls>,
    /// The audit log, when asked for.
    pub(crate) audit: Option<crate::audit::Audit>,
    /// The door's token (replaced by a reload), whose fingerprint the audit lines of its
    /// connections carry.
    pub(crate) door_token: Option<crate::reload::LiveToken>,
    /// What the start-up trim did, once it has run.
    pub(crate) trim: std::sync::OnceLock<stockade_proto::rpc::TrimStats>,
    /// The idempotency keys of `write` calls.
    pub(crate) write_keys: crate::write_keys::WriteKeys,
}
