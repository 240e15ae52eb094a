//! Stockade's daemon: one [`Engine`](stockade_engine::Engine) served over JSON-RPC 2.0 on a Unix
//! socket, so background sessions outlive any one client.
//!
//! # The model
//!
//! **bind → accept → frame → dispatch → handler → engine.**
//!
//! * [`Daemon::bind`] takes the daemon lock (`$STOCKADE_HOME/daemon.lock`, an exclusive `flock`
//!   held for the daemon process's life, with its pid inside), replaces a stale socket (only a socket,
//!   never through a symlink), binds the socket (0600, parent 0700) and creates the engine.
//!   A second daemon on the same home is refused with the live daemon's pid.
//! * [`Daemon::serve`] accepts connections until its [`CancellationToken`] is cancelled (by the
//!   binary on SIGTERM/SIGINT, or by the `shutdown` method), then terminates every running session
//!   through the engine's one terminate routine, removes the socket, empties the lock file and
//!   returns. The lock itself is held until the process exits (work of the daemon may still run
//!   in it), so no second daemon starts beside a live one.
//! * Each connection reads newline-delimited JSON with a bounded line reader (a line longer than
//!   [`MAX_REQUEST_BYTES`](stockade_proto::rpc::MAX_REQUEST_BYTES) is answered with an error and
//!   skipped without being buffered), handles every request in its own task (a long-poll `read`
//!   never blocks the connection's other requests) and writes answers through one writer task.
//!   A client that goes away cancels its connection's token: long polls stop, and a foreground
//!   `run` it was waiting on is terminated.
//! * `handlers` holds one file per method and the one `match` that dispatches to them. A
//!   handler only translates `*Params` into engine calls and engine answers into `*Result`; the
//!   engine owns all state. No lock is held across I/O or an await.
//!
//! [`run`] is `bind` + `serve`, for callers that need no readiness signal.

#![deny(missing_docs)]

mod admission;
mod answer_budget;
mod audit;
mod config;
mod error;
mod frame_clock;
mod framing;
mod gate;
mod hall;
mod handlers;
mod home_doors;
mod http;
mod janitor;
mod lockfile;
mod memory;
mod metrics;
mod metrics_door;
mod outer_door;
mod payload;
mod reload;
mod requests;
mod schedule;
mod server;
mod socket;
mod spawn;
mod state;
mod tls;
mod token;
mod trim;
mod write_keys;
mod ws;

pub use admission::{Admission, PENDING_CAP, UNIX_RESERVE};
pub use config::{
    DEFAULT_AUDIT_LOG_MAX_BYTES, DEFAULT_SWEEP_INTERVAL, DaemonConfig, E2bConfig, MAX_CONNECTIONS,
    MAX_IN_FLIGHT_PER_CONNECTION, MIN_SWEEP_INTERVAL, MetricsConfig, WsConfig,
};
pub use error::{DaemonError, WsSetupError};
pub use gate::{Authenticates, GatedDoor, HEAD_DEADLINE};
pub use hall::{FileAccess, Hall, StartError, Visitor};
pub use home_doors::{HOME_DOORS_FILE, HomeDoors};
pub use memory::ALLOCATOR;
pub use outer_door::{DoorKey, OuterDoor};
pub use reload::{DoorCert, Keyring, Reloader};
pub use schedule::{CRASH_AFTER_CLAIM_ENV, MIN_INTERVAL_ENV};
pub use server::Daemon;
pub use tls::{DoorStream, TlsFiles};
pub use tokio_util::sync::CancellationToken;

/// Bind the daemon for `config` and serve until `token` is cancelled (or a `shutdown` request
/// arrives). Every running session is terminated before this returns.
pub async fn run(config: DaemonConfig, token: CancellationToken) -> Result<(), DaemonError> {
    Daemon::bind(config)?.serve(token).await
}
