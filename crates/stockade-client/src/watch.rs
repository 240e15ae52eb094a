//! What a client looks at while its daemon does not answer: the daemon's process, from the
//! pid in its lock file (a local daemon) or from who listens on the door's port (a remote URL
//! on this machine). A daemon stopped by a signal (`kill -STOP`, state `T`) is named within a
//! fraction of a second, with the command that continues it, instead of a call timeout later
//! (a call already sent when it stops waits out a stop of up to [`STOPPED_PATIENCE`]);
//! a local daemon whose heartbeat (the stamp of its `daemon.beat`, see `stockade_proto::home`) has been
//! still for 1.5 s while an answer is late is named hung.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use stockade_proto::home::{HEARTBEAT_FILE, HEARTBEAT_STALE_MS};

/// How often a call that waits for its answer looks at the daemon's state.
pub(crate) const LOOK_EVERY: Duration = Duration::from_millis(200);
/// How late an answer must be before the daemon's heartbeat is looked at.
const LATE: Duration = Duration::from_millis(500);
/// How long a call already sent waits out a daemon stopped meanwhile (a debugger's step, an
/// orchestrator's freeze, an operator's short `kill -STOP`) before it says so: the request is in
/// the daemon's socket and is answered when it continues. A call to a daemon that is stopped
/// already is refused before it is sent, at once.
pub(crate) const STOPPED_PATIENCE: Duration = Duration::from_secs(5);

/// Why a daemon gives no answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Silent {
    /// Stopped by a signal or a tracer (its pid).
    Stopped(u32),
    /// Running, but its heartbeat has been still this long (its pid).
    Hung(u32, Duration),
}

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

    /// The daemon's pid and how long its heartbeat has been still, if it beats (a local daemon
    /// that stamps its lock file) and the stamp is older than [`HEARTBEAT_STALE_MS`].
    fn hung(&mut self) -> Option<(u32, Duration)> {
        let DaemonWatch::Local(home) = self else { return None };
        let path = home.join(HEARTBEAT_FILE);
        let beats: u32 = std::fs::read_to_string(&path).ok()?.trim().parse().ok()?;
        let pid = crate::daemon_pid(home).filter(|&p| p == beats)?;
        let still = std::fs::metadata(&path).ok()?.modified().ok()?.elapsed().ok()?;
        (still >= Duration::from_millis(HEARTBEAT_STALE_MS) && stockade_procfs::pid_alive(pid))
            .then_some((pid, still))
    }

    /// Waits until `ready` says the answer has begun to arrive, or `deadline`, looking at the
    /// daemon every [`LOOK_EVERY`]: an error once it has been stopped for
    /// [`STOPPED_PATIENCE`], or (once the answer is [`LATE`] late, and the daemon has not been
    /// stopped for a heartbeat's staleness) its heartbeat says it is hung.
    pub(crate) fn wait(
        &mut self,
        deadline: Instant,
        mut ready: impl FnMut(Duration) -> std::io::Result<bool>,
    ) -> Result<(), Silent> {
        let sent = Instant::now();
        let stale = Duration::from_millis(HEARTBEAT_STALE_MS);
        let (mut stopped_since, mut last_stopped): (Option<Instant>, Option<Instant>) =
            (None, None);
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
                let since = *stopped_since.get_or_insert_with(Instant::now);
                last_stopped = Some(Instant::now());
                if since.elapsed() >= STOPPED_PATIENCE {
                    return Err(Silent::Stopped(pid));
                }
                continue;
            }
            stopped_since = None;
            // A daemon just continued has not stamped its heartbeat yet: not hung.
            let beating_again = last_stopped.is_none_or(|t| t.elapsed() >= stale);
            if sent.elapsed() >= LATE
                && beating_again
                && let Some((pid, still)) = self.hung()
            {
                return Err(Silent::Hung(pid, still));
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
