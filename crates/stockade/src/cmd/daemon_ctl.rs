//! `stockade daemon start|stop|status`: the daemon seen from a client.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Args;
use stockade_client::{Client, ClientError, pid_alive};
use stockade_proto::rpc::{NoParams, StatusResult, method};

use crate::global::Global;
use crate::out;

/// `stockade daemon start|stop|status`.
#[derive(Debug, Args)]
pub struct DaemonCtlArgs {
    /// Print as JSON.
    #[arg(long)]
    pub json: bool,
}

/// How long `stop` waits for the daemon's pid to go away after `shutdown` answered. Shutdown
/// terminates every running session (each with its grace period) first.
const STOP_WAIT: Duration = Duration::from_secs(30);
/// How often `stop` looks at the pid.
const STOP_POLL: Duration = Duration::from_millis(20);

pub fn start(global: &Global, args: DaemonCtlArgs) -> anyhow::Result<ExitCode> {
    // Starting is what was asked for: --no-autostart does not apply here.
    let mut opts = global.connect_options()?;
    opts.autostart = true;
    let mut client = Client::connect(&opts)?;
    let started = client.started_daemon();
    let status = client.call::<method::Status>(NoParams {})?;
    if args.json {
        out::print_json(&status_json(&status, Some(started)))?;
    } else {
        out::print(&format!(
            "{} (pid {}, socket {})\n",
            if started { "Daemon started" } else { "Daemon already running" },
            status.pid,
            status.socket.display()
        ))?;
    }
    Ok(ExitCode::SUCCESS)
}

pub fn stop(global: &Global, args: DaemonCtlArgs) -> anyhow::Result<ExitCode> {
    let opts = global.connect_options()?;
    let Some(mut client) = Client::connect_existing(&opts)? else {
        if args.json {
            out::print_json(&serde_json::json!({"running": false, "home": opts.home}))?;
        } else {
            out::print(&format!("No daemon is running for {}\n", opts.home.display()))?;
        }
        return Ok(ExitCode::SUCCESS);
    };
    let pid = client.call::<method::Status>(NoParams {})?.pid;
    let terminated = match client.call::<method::Shutdown>(NoParams {}) {
        Ok(result) => Some(result.terminated),
        // Closing the connection as it exits is an answer too.
        Err(ClientError::Disconnected { .. }) => None,
        Err(e) => return Err(e.into()),
    };
    if let Some(url) = &global.remote {
        // The remote's pid is on its machine, not this one: its exit shows here as the
        // connection it closes.
        if !client.wait_closed(STOP_WAIT) {
            anyhow::bail!(
                "the remote daemon at {url} (pid {pid} there) still holds the connection {} s after it was asked to stop; look at its log on that machine",
                STOP_WAIT.as_secs()
            );
        }
        return print_stopped(pid, terminated, args.json);
    }
    let deadline = Instant::now() + STOP_WAIT;
    while pid_alive(pid) {
        if Instant::now() >= deadline {
            anyhow::bail!(
                "the daemon (pid {pid}) is still running {} s after it was asked to stop; see {}",
                STOP_WAIT.as_secs(),
                stockade_client::log_path(&opts.home).display()
            );
        }
        std::thread::sleep(STOP_POLL);
    }
    print_stopped(pid, terminated, args.json)
}

/// What `stop` prints once the daemon is gone.
fn print_stopped(
    pid: u32,
    terminated: Option<Vec<String>>,
    json: bool,
) -> anyhow::Result<ExitCode> {
    if json {
        out::print_json(&serde_json::json!({
            "running": false,
            "pid": pid,
            "stopped": true,
            "terminated": terminated,
        }))?;
    } else {
        out::print(&format!("{}\n", stop_sentence(pid, terminated.as_deref())))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// `Daemon stopped (pid 7); terminated 2 running sessions: sh-3, sh-4`.
fn stop_sentence(pid: u32, terminated: Option<&[String]>) -> String {
    match terminated {
        None => format!("Daemon stopped (pid {pid})"),
        Some([]) => format!("Daemon stopped (pid {pid}); no session was running"),
        Some([one]) => format!("Daemon stopped (pid {pid}); terminated 1 running session: {one}"),
        Some(ids) if ids.len() <= NAMED => format!(
            "Daemon stopped (pid {pid}); terminated {} running sessions: {}",
            ids.len(),
            ids.join(", ")
        ),
        Some(ids) => format!(
            "Daemon stopped (pid {pid}); terminated {} running sessions: {}, and {} more \
             (`stockade daemon stop --json` names them all)",
            ids.len(),
            ids[..NAMED].join(", "),
            ids.len() - NAMED
        ),
    }
}

/// How many terminated sessions the stop sentence names before it only counts the rest.
const NAMED: usize = 10;

pub fn status(global: &Global, args: DaemonCtlArgs) -> anyhow::Result<ExitCode> {
    let opts = global.connect_options()?;
    let Some(mut client) = Client::connect_existing(&opts)? else {
        if args.json {
            out::print_json(&serde_json::json!({
                "running": false,
                "home": opts.home,
                "socket": opts.socket_path(),
            }))?;
        } else {
            out::print(&format!("not running (state directory {})\n", opts.home.display()))?;
        }
        return Ok(ExitCode::from(1));
    };
    let status = client.call::<method::Status>(NoParams {})?;
    if args.json {
        out::print_json(&status_json(&status, None))?;
    } else {
        out::print(&format!(
            "running:     pid {}\nsocket:      {}\nhome:        {}\nversion:     {}\ncontainment: {}\nsessions:    {}\n",
            status.pid,
            status.socket.display(),
            status.home.display(),
            status.version,
            serde_json::to_value(status.containment)?.as_str().unwrap_or("?"),
            status.sessions
        ))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The `status` result with `running: true` (and `started` for `start`).
fn status_json(status: &StatusResult, started: Option<bool>) -> serde_json::Value {
    let mut value = serde_json::to_value(status).unwrap_or_default();
    if let Some(map) = value.as_object_mut() {
        map.insert("running".into(), true.into());
        if let Some(started) = started {
            map.insert("started".into(), started.into());
        }
    }
    value
}

#[cfg(test)]
mod tests {
    use super::stop_sentence;

    #[test]
    fn stop_says_what_it_terminated() {
        let ids = ["sh-3".to_owned(), "sh-4".to_owned()];
        assert_eq!(
            stop_sentence(7, Some(&ids)),
            "Daemon stopped (pid 7); terminated 2 running sessions: sh-3, sh-4"
        );
        assert_eq!(stop_sentence(7, Some(&[])), "Daemon stopped (pid 7); no session was running");
        assert_eq!(stop_sentence(7, None), "Daemon stopped (pid 7)");
    }

    #[test]
    fn stop_with_many_sessions_names_ten_and_counts_the_rest() {
        let ids: Vec<String> = (1..=1000).map(|i| format!("sh-{i}")).collect();
        let said = stop_sentence(7, Some(&ids));
        assert_eq!(
            said,
            "Daemon stopped (pid 7); terminated 1000 running sessions: sh-1, sh-2, sh-3, sh-4, \
             sh-5, sh-6, sh-7, sh-8, sh-9, sh-10, and 990 more (`stockade daemon stop --json` \
             names them all)"
        );
        let ten = &ids[..10];
        assert!(stop_sentence(7, Some(ten)).ends_with("sh-9, sh-10"));
    }
}
