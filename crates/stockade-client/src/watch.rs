//! What a client looks at while its daemon does not answer: the daemon's process, from the
//! pid in its lock file (a local daemon) or from who listens on the door's port (a remote URL
//! on this machine). A daemon stopped by a signal (`kill -STOP`, state `T`) is named within a
//! fraction of a second, with the command that continues it, instead of a call timeout later.

use std::path::PathBuf;
use std::time::{Duration, Instant};

/// How often a call that waits for its answer looks at the daemon's state.
pub(crate) const LOOK_EVERY: Duration = Duration::from_millis(200);

/// Where the daemon's pid comes from.
#[derive(Debug)]
pub(crate) enum DaemonWatch {
    /// The local daemon of this state directory: the pid in its lock file.
    Local(PathBuf),
    /// A door on this machine's port: the process that listens there (found once).
    Port { port: u16, pid: Option<Option<u32>> },
    /// A daemon on another machine: nothing to look at.
    Remote,
}

impl DaemonWatch {
    /// The watch for a remote URL: its port when the host is this machine.
    pub(crate) fn for_url(url: &str) -> DaemonWatch {
        let rest = url.strip_prefix("wss://").or_else(|| url.strip_prefix("ws://"));
        let authority = rest.and_then(|r| r.split('/').next()).unwrap_or_default();
        let (host, port) = match authority.strip_prefix('[') {
            Some(v6) => v6.split_once("]:").unwrap_or((v6, "")),
            None => authority.rsplit_once(':').unwrap_or((authority, "")),
        };
        let local = host == "localhost"
            || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback());
        match port.parse() {
            Ok(port) if local => DaemonWatch::Port { port, pid: None },
            _ => DaemonWatch::Remote,
        }
    }

    /// The daemon's pid, when it can be known.
    fn pid(&mut self) -> Option<u32> {
        match self {
            DaemonWatch::Local(home) => crate::daemon_pid(home),
            DaemonWatch::Port { port, pid } => {
                *pid.get_or_insert_with(|| stockade_procfs::tcp_listener_pid(*port))
            }
            DaemonWatch::Remote => None,
        }
    }

    /// The daemon's pid if it is stopped now.
    pub(crate) fn stopped(&mut self) -> Option<u32> {
        self.pid().filter(|&pid| stockade_procfs::is_stopped(pid))
    }

    /// Waits until `ready` says the answer has begun to arrive, or `deadline`, looking at the
    /// daemon every [`LOOK_EVERY`]: `Err(pid)` as soon as it is stopped.
    pub(crate) fn wait(
        &mut self,
        deadline: Instant,
        mut ready: impl FnMut(Duration) -> std::io::Result<bool>,
    ) -> Result<(), u32> {
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || matches!(self, DaemonWatch::Remote) {
                return Ok(());
            }
            // An error is left to the read that follows, which words it.
            if ready(left.min(LOOK_EVERY)).unwrap_or(true) {
                return Ok(());
            }
            if let Some(pid) = self.stopped() {
                return Err(pid);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_this_machines_urls_are_watched() {
        assert!(matches!(
            DaemonWatch::for_url("ws://127.0.0.1:7433"),
            DaemonWatch::Port { port: 7433, .. }
        ));
        assert!(matches!(
            DaemonWatch::for_url("wss://[::1]:80/x"),
            DaemonWatch::Port { port: 80, .. }
        ));
        assert!(matches!(DaemonWatch::for_url("ws://localhost:9"), DaemonWatch::Port { .. }));
        assert!(matches!(DaemonWatch::for_url("ws://10.0.0.5:7433"), DaemonWatch::Remote));
    }
}
