//! How a daemon is set up.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use stockade_engine::EngineLimits;
use stockade_proc::ContainmentConfig;
use stockade_proto::home::{LOCK_FILE, SOCKET_FILE};
use stockade_proto::{DEFAULT_DISK_CAP, DEFAULT_GRACE_MS, DEFAULT_RETAINED_CAP};

/// Most client connections served at once; more are answered with an error and closed.
pub const MAX_CONNECTIONS: usize = 512;
/// Most requests one connection may have in flight; the reader waits for one to finish before
/// reading the next line (backpressure, bounded memory).
pub const MAX_IN_FLIGHT_PER_CONNECTION: usize = 64;
/// The size past which the audit log is rotated, by default: 16 MiB.
pub const DEFAULT_AUDIT_LOG_MAX_BYTES: u64 = 16 << 20;
/// How often the retention janitor sweeps by default: hourly.
pub const DEFAULT_SWEEP_INTERVAL: Duration = Duration::from_secs(60 * 60);
/// The shortest sweep interval accepted (tests shorten it; nothing needs it busier).
pub const MIN_SWEEP_INTERVAL: Duration = Duration::from_millis(100);

/// A daemon's configuration. [`DaemonConfig::new`] gives the defaults for a state directory.
#[derive(Debug, Clone)]
pub struct DaemonConfig {
    /// The state directory (`$STOCKADE_HOME`): spools, records, the lock, the default socket.
    pub home: PathBuf,
    /// The socket path (default `<home>/stockade.sock`).
    pub socket: Option<PathBuf>,
    /// The engine instance name (default: unique per daemon, `daemon-<pid>-<start ms>`).
    pub instance: Option<String>,
    /// Containment choice.
    pub containment: ContainmentConfig,
    /// Grace between the polite signal and `SIGKILL` when terminating a tree.
    pub grace: Duration,
    /// Default hot-tail size per session.
    pub retained_cap: usize,
    /// Default disk cap per session.
    pub disk_cap: u64,
    /// Limits on sessions, memory and disk.
    pub limits: EngineLimits,
    /// Finished sessions older than this are deleted (record and spool) by the janitor.
    pub retention: Duration,
    /// How often the janitor sweeps (it also sweeps once at start-up).
    pub sweep_interval: Duration,
    /// The WebSocket door for a remote gateway (off by default).
    pub ws: Option<WsConfig>,
    /// A separate address for `GET /metrics` (and the probes), off by default.
    pub metrics: Option<MetricsConfig>,
    /// A token that reads `GET /metrics` (on the door and on the metrics address) and nothing
    /// else: it opens no WebSocket, so a scraper never holds a token that runs commands.
    pub metrics_token_file: Option<PathBuf>,
    /// The audit log: one JSON line per accepted connection and per request that starts a
    /// command or ends a session. Off unless asked for.
    pub audit_log: Option<PathBuf>,
    /// The audit log is rotated (to `<file>.1`) past this size.
    pub audit_log_max_bytes: u64,
    /// The sandbox of runs that name none, and the most any run may ask for.
    pub sandbox: stockade_engine::SandboxConfig,
    /// The E2B door (off by default), served outside this crate through the daemon's hall.
    pub e2b: Option<E2bConfig>,
}

/// A listener of its own for `GET /metrics`, `/healthz` and `/readyz` (no WebSocket), for a
/// scraper that should not reach the door. On a loopback address scrapes need no token (only
/// this machine, or this pod, can reach it); anywhere else they need the door's bearer token (or
/// the read-only metrics token) and TLS (or `insecure_plaintext`), the same rules as the door.
#[derive(Debug, Clone)]
pub struct MetricsConfig {
    /// Where to listen.
    pub addr: SocketAddr,
    /// The token file (the door's); required unless `addr` is loopback or there is a metrics
    /// token (`DaemonConfig::metrics_token_file`).
    pub token_file: Option<PathBuf>,
    /// Serve HTTPS with this certificate and key (the door's).
    pub tls: Option<crate::tls::TlsFiles>,
    /// Serve clear text on a non-loopback address (refused otherwise).
    pub insecure_plaintext: bool,
}

/// The E2B door of `daemon run --e2b` (served by `stockade-e2b` through the daemon's hall).
#[derive(Debug, Clone)]
pub struct E2bConfig {
    /// Where to listen.
    pub addr: SocketAddr,
    /// The token every request but `/health` must carry in `X-Access-Token`.
    pub token_file: PathBuf,
    /// Serve HTTPS with this certificate and key.
    pub tls: Option<crate::tls::TlsFiles>,
    /// Serve clear text on a non-loopback address (refused otherwise).
    pub insecure_plaintext: bool,
}

/// The WebSocket door: the same JSON-RPC, one message per text frame, behind a bearer token.
#[derive(Debug, Clone)]
pub struct WsConfig {
    /// Where to listen (loopback unless a remote gateway must reach it directly).
    pub addr: SocketAddr,
    /// The file holding the token every connection must present (not readable by group or
    /// others, not empty; surrounding whitespace is ignored).
    pub token_file: PathBuf,
    /// TLS certificate and key: the door serves `wss://` (and HTTPS probes) when set.
    pub tls: Option<crate::tls::TlsFiles>,
    /// Serve clear text on a non-loopback address (refused otherwise).
    pub insecure_plaintext: bool,
}

impl WsConfig {
    /// A clear-text door on `addr` (loopback, or refused at bind) behind the token in `token_file`.
    pub fn new(addr: SocketAddr, token_file: impl Into<PathBuf>) -> WsConfig {
        WsConfig { addr, token_file: token_file.into(), tls: None, insecure_plaintext: false }
    }
}

impl DaemonConfig {
    /// The defaults for state directory `home`.
    pub fn new(home: impl Into<PathBuf>) -> DaemonConfig {
        DaemonConfig {
            home: home.into(),
            socket: None,
            instance: None,
            containment: ContainmentConfig::default(),
            grace: Duration::from_millis(DEFAULT_GRACE_MS),
            retained_cap: DEFAULT_RETAINED_CAP,
            disk_cap: DEFAULT_DISK_CAP,
            limits: EngineLimits::default(),
            retention: stockade_engine::DEFAULT_RETENTION,
            sweep_interval: DEFAULT_SWEEP_INTERVAL,
            ws: None,
            metrics: None,
            metrics_token_file: None,
            audit_log: None,
            audit_log_max_bytes: DEFAULT_AUDIT_LOG_MAX_BYTES,
            sandbox: stockade_engine::SandboxConfig::default(),
            e2b: None,
        }
    }

    /// The socket path in use.
    pub fn socket_path(&self) -> PathBuf {
        self.socket.clone().unwrap_or_else(|| self.home.join(SOCKET_FILE))
    }

    /// Every file of the daemon's doors no sandboxed command may read: the token files, the
    /// TLS private keys and the audit log (its home is hidden besides).
    pub fn secrets(&self) -> Vec<PathBuf> {
        let mut files: Vec<PathBuf> = Vec::new();
        if let Some(ws) = &self.ws {
            files.push(ws.token_file.clone());
            files.extend(ws.tls.iter().map(|t| t.key.clone()));
        }
        if let Some(m) = &self.metrics {
            files.extend(m.token_file.clone());
            files.extend(m.tls.iter().map(|t| t.key.clone()));
        }
        if let Some(e) = &self.e2b {
            files.push(e.token_file.clone());
            files.extend(e.tls.iter().map(|t| t.key.clone()));
        }
        files.extend(self.metrics_token_file.clone());
        if let Some(audit) = &self.audit_log {
            // The log and the file it is rotated to.
            let mut rotated = audit.clone().into_os_string();
            rotated.push(".1");
            files.push(audit.clone());
            files.push(rotated.into());
        }
        files.sort();
        files.dedup();
        files
    }

    /// The lock file path.
    pub fn lock_path(&self) -> PathBuf {
        self.home.join(LOCK_FILE)
    }
}
