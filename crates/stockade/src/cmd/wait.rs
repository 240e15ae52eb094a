//! `stockade wait`: block until sessions end and exit with their status, as a shell's `wait`
//! does. Sessions the daemon runs are waited for with long-poll reads (woken by new output or
//! the end, never a busy loop); a session the daemon does not know (a foreground `run` of
//! another terminal) is watched through its record in the state directory.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Args;
use stockade_client::{Client, ClientError};
use stockade_engine::read_record;
use stockade_log::answer;
use stockade_proto::rpc::{ListParams, ReadParams, method};
use stockade_proto::{ReadMode, SessionState};

use crate::args::parse_duration;
use crate::global::Global;
use crate::out;

/// Longest one long-poll read waits before asking again.
const POLL_MS: u64 = 30_000;
/// How long past `--timeout` an answer may take before the daemon counts as not answering.
const ANSWER_GRACE: Duration = Duration::from_secs(1);

/// The daemon did not answer by the caller's deadline (stopped, stalled): the session's state
/// is unknown, which is said as such, never as "still running".
#[derive(Debug)]
struct NoAnswer(String);

impl std::fmt::Display for NoAnswer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the daemon did not answer by the --timeout (it may be stopped or stalled); the state of {} is unknown: see `stockade ps` once the daemon answers",
            self.0
        )
    }
}

impl std::error::Error for NoAnswer {}
/// How often a record on disk is read again.
const RECORD_POLL: Duration = Duration::from_millis(100);

/// `stockade wait`.
#[derive(Debug, Args)]
pub struct WaitArgs {
    /// The session ids (`sh-3 sh-4`).
    #[arg(required = true, value_name = "ID")]
    pub ids: Vec<String>,
    /// Give up after this long (e.g. 30s, 10m, 1h 30m): exit 124, the sessions keep running.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, allow_hyphen_values = true)]
    pub timeout: Option<Duration>,
    /// Print nothing; only the exit status tells.
    #[arg(short = 'q', long)]
    pub quiet: bool,
    /// Print one JSON object a line per session instead (`id`, `ended`, `state`,
    /// `wall_time_ms`, `exit_status`); a session still running at `--timeout` has `ended: false`.
    #[arg(long, conflicts_with = "quiet")]
    pub json: bool,
}

/// How one session ended, as `wait` reports it.
struct Ended {
    state: SessionState,
    wall_time_ms: Option<u64>,
}

pub fn wait(global: &Global, args: WaitArgs) -> anyhow::Result<ExitCode> {
    let deadline = args.timeout.map(|t| Instant::now() + t);
    let mut client = global.connect_existing()?;
    let mut status = 0;
    for id in &args.ids {
        let ended = match client.as_mut() {
            Some(c) => match from_daemon(c, id, deadline) {
                // A remote daemon's sessions are not in this machine's state directory.
                Err(e) if no_such_session(&e) && global.remote.is_none() => {
                    from_disk(global, id, deadline)?
                }
                // No answer, or a daemon seen stopped (said at once): exit 124, as at a timeout.
                Err(e)
                    if e.downcast_ref::<NoAnswer>().is_some()
                        || matches!(
                            e.downcast_ref::<ClientError>(),
                            Some(ClientError::DaemonStopped { .. })
                        ) =>
                {
                    eprintln!("stockade: {e}");
                    return Ok(ExitCode::from(124));
                }
                other => other?,
            },
            None => from_disk(global, id, deadline)?,
        };
        let Some(ended) = ended else {
            if args.json {
                out::print_json_line(&serde_json::json!({
                    "id": id, "ended": false, "state": SessionState::Running, "exit_status": 124,
                }))?;
            } else if !args.quiet {
                out::print(&format!(
                    "{id} is still running after {}; waiting stopped, the session keeps running\n",
                    out::seconds(args.timeout.unwrap_or_default().as_millis() as u64)
                ))?;
            }
            return Ok(ExitCode::from(124));
        };
        let code = answer::exit_status(&ended.state).clamp(0, 255);
        if args.json {
            out::print_json_line(&serde_json::json!({
                "id": id, "ended": true, "state": ended.state,
                "wall_time_ms": ended.wall_time_ms, "exit_status": code,
            }))?;
        } else if !args.quiet {
            out::print(&format!("{}\n", out::ended_phrase(id, &ended.state, ended.wall_time_ms)))?;
        }
        if status == 0 {
            status = code;
        }
    }
    Ok(ExitCode::from(status as u8))
}

fn no_such_session(e: &anyhow::Error) -> bool {
    e.downcast_ref::<ClientError>().is_some_and(ClientError::is_no_such_session)
}

/// Long-poll reads from the end of the log until the session is over; `None` at the deadline.
fn from_daemon(
    client: &mut Client,
    id: &str,
    deadline: Option<Instant>,
) -> anyhow::Result<Option<Ended>> {
    let mut cursor = u64::MAX;
    loop {
        let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
        let wait_ms = left.map_or(POLL_MS, |l| (l.as_millis() as u64).min(POLL_MS));
        let params = ReadParams {
            id: id.to_owned(),
            after: Some(cursor),
            mode: Some(ReadMode::Delta),
            max_bytes: Some(1),
            max_lines: Some(1),
            wait_ms: Some(wait_ms),
            raw: true,
            ..ReadParams::default()
        };
        let answer = match left {
            // The caller's deadline holds even when the daemon does not answer (stopped or
            // stalled): the read may take its wait plus a moment, no more.
            Some(left) => match client.call_within::<method::Read>(params, left + ANSWER_GRACE) {
                Err(ClientError::Timeout { .. }) => return Err(NoAnswer(id.to_owned()).into()),
                other => other?,
            },
            None => client.call::<method::Read>(params)?,
        };
        if answer.state.is_terminal() {
            return Ok(Some(Ended { wall_time_ms: wall_time(client, id), state: answer.state }));
        }
        if left.is_some_and(|l| l.is_zero()) {
            return Ok(None);
        }
        // Only output printed from now on wakes the next read.
        cursor = answer.view.total_bytes;
    }
}

/// The session's wall time from `list` (`None` if it is no longer listed).
pub(crate) fn wall_time(client: &mut Client, id: &str) -> Option<u64> {
    let list = client.call::<method::List>(ListParams::default()).ok()?;
    list.sessions.iter().find(|s| s.id == id).map(|s| s.wall_time_ms)
}

/// The session's record in the state directory, read again until it says the session ended.
fn from_disk(
    global: &Global,
    id: &str,
    deadline: Option<Instant>,
) -> anyhow::Result<Option<Ended>> {
    let dir = crate::global::state_dir(global.home.clone())?.find_session(id)?;
    loop {
        if let Some(record) = read_record(&dir)
            && record.state.is_terminal()
        {
            let wall = record.finished_at_ms.map(|end| end.saturating_sub(record.started_at_ms));
            return Ok(Some(Ended { state: record.state, wall_time_ms: wall }));
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Ok(None);
        }
        std::thread::sleep(RECORD_POLL);
    }
}
