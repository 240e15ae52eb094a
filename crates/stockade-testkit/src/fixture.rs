//! An in-process daemon (feature `daemon`): served on its own runtime in a temporary home, shut
//! down on `Drop` (terminating its sessions through the engine), then whatever still carries its
//! marker is killed by pid.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use stockade_daemon::{CancellationToken, Daemon, DaemonConfig, DaemonError};

use crate::procs::kill_marked;
use crate::rpc::Rpc;

/// A daemon served in-process.
pub struct Fixture {
    /// Its home.
    pub home: PathBuf,
    /// Its Unix socket.
    pub socket: PathBuf,
    /// Its engine instance (the first half of its sessions' markers).
    pub instance: String,
    /// Where its WebSocket door listens, when configured.
    pub ws: Option<SocketAddr>,
    token: CancellationToken,
    serving: Option<tokio::task::JoinHandle<Result<(), DaemonError>>>,
    rt: Option<tokio::runtime::Runtime>,
    _tmp: tempfile::TempDir,
}

impl Fixture {
    /// A daemon with the default configuration (and a short grace).
    pub fn start() -> Fixture {
        Fixture::with(|_| {})
    }

    /// A daemon whose configuration `adjust` changes first.
    pub fn with(adjust: impl FnOnce(&mut DaemonConfig)) -> Fixture {
        let tmp = tempfile::tempdir().unwrap();
        let home = tmp.path().join("home");
        let mut config = DaemonConfig::new(&home);
        config.grace = Duration::from_millis(300);
        adjust(&mut config);
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let daemon = rt.block_on(async { Daemon::bind(config) }).unwrap();
        let socket = daemon.socket().to_path_buf();
        let instance = daemon.instance().to_owned();
        let ws = daemon.ws_addr();
        let token = CancellationToken::new();
        let serving = rt.spawn(daemon.serve(token.clone()));
        Fixture {
            home,
            socket,
            instance,
            ws,
            token,
            serving: Some(serving),
            rt: Some(rt),
            _tmp: tmp,
        }
    }

    /// A new connection to it.
    pub fn client(&self) -> Rpc {
        Rpc::connect(&self.socket)
    }

    /// Whether the daemon task has finished within `within` (after a `shutdown` request).
    pub fn wait_stopped(&mut self, within: Duration) -> bool {
        let (Some(rt), Some(serving)) = (self.rt.as_ref(), self.serving.as_mut()) else {
            return true;
        };
        let done = rt.block_on(async { tokio::time::timeout(within, serving).await.is_ok() });
        if done {
            self.serving = None;
        }
        done
    }

    /// Cancels the daemon and insists `serve` returns cleanly within 20 s.
    pub fn stop(&mut self) {
        self.token.cancel();
        if let (Some(rt), Some(serving)) = (self.rt.as_ref(), self.serving.take()) {
            let done =
                rt.block_on(async { tokio::time::timeout(Duration::from_secs(20), serving).await });
            assert!(matches!(done, Ok(Ok(Ok(())))), "the daemon stops cleanly: {done:?}");
        }
    }

    /// The environment entry of session `id`'s processes.
    pub fn marker(&self, id: &str) -> String {
        format!("STOCKADE_SESSION={}:{id}", self.instance)
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        self.token.cancel();
        if let (Some(rt), Some(serving)) = (self.rt.as_ref(), self.serving.take()) {
            let _ =
                rt.block_on(async { tokio::time::timeout(Duration::from_secs(20), serving).await });
        }
        if let Some(rt) = self.rt.take() {
            rt.shutdown_timeout(Duration::from_secs(2));
        }
        // Whatever still carries this daemon's marker is killed by pid (never by name).
        kill_marked(&format!("STOCKADE_SESSION={}:", self.instance));
    }
}
