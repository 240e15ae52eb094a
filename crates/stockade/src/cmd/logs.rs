//! `stockade logs`: a session's output from the daemon — all of it from a cursor, its tail or
//! its head — and with `-f`, long-poll reads until the session ends, then a footer saying how it
//! ended and its exit status. Only one answer at a time is in this process's memory, whatever
//! the log's size.
//!
//! Sessions the daemon does not know (a foreground `run`, or no daemon at all) are read from
//! the state directory, like `stockade read`. `stockade read` of a remote daemon's session is
//! answered here too: through the daemon, never from this machine's files.

use std::ops::ControlFlow;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Args;
use stockade_client::{Client, ClientError};
use stockade_proto::ReadMode;
use stockade_proto::rpc::{ReadParams, method};

use super::read::{ColorArg, ModeArg, ReadArgs};
use crate::args::{LimitArgs, StreamArg};
use crate::global::Global;
use crate::out;

/// `stockade logs`.
#[derive(Debug, Args)]
pub struct LogsArgs {
    /// The session id (`sh-3`).
    pub id: String,
    /// Keep printing new output as it arrives, until the session ends.
    #[arg(short = 'f', long)]
    pub follow: bool,
    /// Start after this byte offset (a cursor from an earlier answer).
    #[arg(long, value_name = "CURSOR", conflicts_with_all = ["tail", "head"])]
    pub after: Option<u64>,
    /// Only the last N lines (then follow, with `-f`).
    #[arg(short = 'n', long, value_name = "N", conflicts_with = "head")]
    pub tail: Option<usize>,
    /// Only the first N lines.
    #[arg(long, value_name = "N", conflicts_with = "follow")]
    pub head: Option<usize>,
    /// Only this stream.
    #[arg(long, value_enum)]
    pub stream: Option<StreamArg>,
    /// Write exactly the bytes of the log (no notice, no lossy conversion), for piping.
    #[arg(long, conflicts_with_all = ["json", "stream", "tail", "head"])]
    pub raw: bool,
    /// Print each answer as JSON (one object per line when several).
    #[arg(long)]
    pub json: bool,
    /// Show the command's colours (SGR sequences); `auto`: when stdout is a terminal. Other
    /// control characters are always escaped (`--raw` writes the exact bytes).
    #[arg(long, value_enum, value_name = "WHEN", default_value = "auto")]
    pub color: ColorArg,
}

/// Bytes asked for per answer while copying a log.
const CHUNK_BYTES: usize = 1024 * 1024;
/// Bytes asked for per answer while copying a log's exact bytes (sent without base64; 4 MiB was
/// faster than 16 MiB, which fits no cache; a daemon that sends base64 answers with at most that).
const RAW_CHUNK_BYTES: usize = 4 * 1024 * 1024;
/// Bytes a `--tail`/`--head` view may hold.
const VIEW_BYTES: usize = 4 * 1024 * 1024;
/// How long one follow read waits for new output before asking again.
const FOLLOW_WAIT_MS: u64 = 30_000;
/// Pause after a follow read that returned early with nothing new, so a daemon that does not
/// long-poll is not asked in a busy loop.
const IDLE_PAUSE: Duration = Duration::from_millis(50);
/// How long `-f` keeps trying to reconnect after losing the daemon.
const RECONNECT_PATIENCE: Duration = Duration::from_secs(60);
/// How many connections in a row a copy without `-f` may lose before it gives up.
const COPY_RESUMES: u32 = 5;
/// How long a copy without `-f` keeps trying to reconnect after one loss.
const COPY_PATIENCE: Duration = Duration::from_secs(10);

pub fn logs(global: &Global, args: LogsArgs) -> anyhow::Result<ExitCode> {
    if let Some(mut client) = global.connect_existing()? {
        let mut printed = false;
        match from_daemon(global, &mut client, &args, &mut printed) {
            // A remote daemon's sessions are not in this machine's state directory.
            Err(e) if !printed && no_such_session(&e) && global.remote.is_none() => {}
            other => return other,
        }
    }
    from_disk(global, &args)
}

fn no_such_session(e: &anyhow::Error) -> bool {
    e.downcast_ref::<ClientError>().is_some_and(ClientError::is_no_such_session)
}

fn from_daemon(
    global: &Global,
    client: &mut Client,
    args: &LogsArgs,
    printed: &mut bool,
) -> anyhow::Result<ExitCode> {
    let stream = args.stream.map(Into::into);
    let mut cursor = args.after.unwrap_or(0);
    if let Some(lines) = args.tail.or(args.head) {
        match print_view(client, args, lines, printed)? {
            ControlFlow::Break(code) => return Ok(code),
            ControlFlow::Continue(next) => cursor = next,
        }
    }

    // Exact bytes unless a stream filter or JSON asks for views.
    let raw = stream.is_none() && !args.json;
    let colour = args.color.keep();
    let mut shown = out::ShownStream::new(colour);
    // Connections lost in a row without an answer in between.
    let mut losses = 0;
    let state = loop {
        let asked = Instant::now();
        let params = ReadParams {
            id: args.id.clone(),
            after: Some(cursor),
            mode: Some(ReadMode::Delta),
            max_bytes: Some(if raw { RAW_CHUNK_BYTES } else { CHUNK_BYTES }),
            max_lines: Some(CHUNK_BYTES),
            stream,
            wait_ms: args.follow.then_some(FOLLOW_WAIT_MS),
            raw,
            ..ReadParams::default()
        };
        let answer = if raw {
            client.read_bytes(params).map(|(answer, bytes)| (answer, Some(bytes)))
        } else {
            client.call::<method::Read>(params).map(|answer| (answer, None))
        };
        let answer = match answer {
            // A lost connection (a daemon restart, a lossy link) is resumed from the cursor, so
            // nothing printed is lost or repeated. Following goes on as long as the daemon comes
            // back; a plain copy gives up after a few losses in a row without progress.
            Err(e) if e.is_connection_lost() && (args.follow || losses < COPY_RESUMES) => {
                losses += 1;
                eprintln!("stockade: {e}; reconnecting and resuming at byte {cursor}");
                let patience = if args.follow { RECONNECT_PATIENCE } else { COPY_PATIENCE };
                *client = stockade_client::reconnect(&global.connect_options()?, patience)?;
                continue;
            }
            other => other?,
        };
        let (answer, bytes) = answer;
        losses = 0;
        *printed = true;
        let next = answer.view.next_cursor.max(cursor);
        let progressed = next > cursor;
        if let Some(bytes) = bytes {
            // A read that jumps bytes that were not kept: named on stderr, so stdout stays
            // exactly the bytes that were.
            let view = &answer.view;
            let resumes_at = if bytes.is_empty() { next } else { view.start_cursor };
            if resumes_at > cursor {
                let why = view.gaps.iter().find(|g| g.start < resumes_at && g.end > cursor);
                let reason = why.map_or("not kept", |g| g.reason.as_str());
                eprintln!(
                    "stockade: bytes {cursor}..{resumes_at} of the output are missing ({reason}); the copy goes on after them"
                );
            }
            if args.raw {
                out::print_bytes(&bytes)?;
            } else {
                out::print(&shown.push(&bytes))?;
            }
        } else if args.json {
            if progressed || !args.follow {
                out::print_json_line(&answer)?;
            }
        } else {
            out::print(&out::shown(&answer.view.output, colour))?;
        }
        cursor = next;
        let at_end = cursor >= answer.view.total_bytes;
        if at_end && (!args.follow || answer.state.is_terminal()) {
            break answer.state;
        }
        if !progressed && !args.follow {
            break answer.state; // Nothing more can be read now (a gap the daemon cannot jump?).
        }
        if !progressed && asked.elapsed() < IDLE_PAUSE {
            std::thread::sleep(IDLE_PAUSE);
        }
    };
    out::print(&shown.finish())?;
    if args.follow { footer(client, args, &state) } else { Ok(ExitCode::SUCCESS) }
}

/// `--tail N` / `--head N`: one view of the session's last or first lines. `Break` when that is
/// all there is to print; `Continue` with the cursor `-f` follows from.
fn print_view(
    client: &mut Client,
    args: &LogsArgs,
    lines: usize,
    printed: &mut bool,
) -> anyhow::Result<ControlFlow<ExitCode, u64>> {
    let mode = if args.tail.is_some() { ReadMode::Tail } else { ReadMode::Head };
    let answer = client.call::<method::Read>(ReadParams {
        id: args.id.clone(),
        mode: Some(mode),
        max_lines: Some(lines),
        max_bytes: Some(VIEW_BYTES),
        stream: args.stream.map(Into::into),
        ..ReadParams::default()
    })?;
    *printed = true;
    if args.json && args.follow {
        out::print_json_line(&answer)?;
    } else if args.json {
        out::print_json(&answer)?;
    } else {
        // The content only: a reader that continues from `next_cursor` has no use for the
        // notice's "read more".
        let mut text = out::shown(&answer.view.output, args.color.keep()).into_owned();
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        out::print(&text)?;
    }
    if !args.follow {
        return Ok(ControlFlow::Break(ExitCode::SUCCESS));
    }
    if answer.state.is_terminal() && answer.view.next_cursor >= answer.view.total_bytes {
        return footer(client, args, &answer.state).map(ControlFlow::Break);
    }
    Ok(ControlFlow::Continue(answer.view.next_cursor))
}

/// The end of `logs -f`: one line on stderr saying how the session ended (`[sh-3 exited 3 after
/// 4.2 s]`; not with `--json`, whose answers carry the state), and the session's exit status.
fn footer(
    client: &mut Client,
    args: &LogsArgs,
    state: &stockade_proto::SessionState,
) -> anyhow::Result<ExitCode> {
    if !args.json {
        let wall = super::wait::wall_time(client, &args.id);
        eprintln!("[{}]", out::ended_phrase(&args.id, state, wall));
    }
    Ok(ExitCode::from(stockade_log::answer::exit_status(state).clamp(0, 255) as u8))
}

/// The log in the state directory: for sessions the daemon does not know.
fn from_disk(global: &Global, args: &LogsArgs) -> anyhow::Result<ExitCode> {
    let whole = args.tail.is_none() && args.head.is_none() && args.stream.is_none() && !args.json;
    if whole {
        let (log, _) = super::read::open_target(global.home.clone(), &args.id)?;
        let text = (!args.raw).then(|| args.color.keep());
        super::read::copy_raw(&log, args.after.unwrap_or(0), text)?;
        return Ok(ExitCode::SUCCESS);
    }
    let mode = match (args.tail, args.head) {
        (Some(_), _) => ModeArg::Tail,
        (_, Some(_)) => ModeArg::Head,
        _ => ModeArg::Delta,
    };
    let read = ReadArgs {
        target: args.id.clone(),
        after: args.after,
        mode: Some(mode),
        stream: args.stream,
        limits: LimitArgs {
            max_bytes: VIEW_BYTES,
            max_lines: args.tail.or(args.head).unwrap_or(CHUNK_BYTES),
        },
        raw: false,
        json: args.json,
        color: args.color,
    };
    super::read::read(global.home.clone(), read)
}

/// `read` of a remote daemon's session: through its `read` method, never this machine's files.
pub fn read_remote(global: &Global, args: ReadArgs) -> anyhow::Result<ExitCode> {
    super::read::refuse_remote_path(global, &args.target)?;
    if args.raw {
        // The same copy as `logs --raw`: chunked, resumed after a lost connection.
        let copy = LogsArgs {
            id: args.target,
            follow: false,
            after: args.after,
            tail: None,
            head: None,
            stream: None,
            raw: true,
            json: false,
            color: args.color,
        };
        return logs(global, copy);
    }
    let answer = global.connect()?.call::<method::Read>(ReadParams {
        id: args.target.clone(),
        after: args.after,
        mode: args.mode.map(Into::into),
        max_bytes: Some(args.limits.max_bytes),
        max_lines: Some(args.limits.max_lines),
        stream: args.stream.map(Into::into),
        ..ReadParams::default()
    })?;
    if args.json {
        out::print_json(&answer.view)?;
    } else {
        let mut text = out::view_text_shown(&answer.view, Some(&args.target), args.color.keep());
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        out::print(&text)?;
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use stockade_proto::OutputView;

    #[test]
    fn the_notice_is_beside_the_content() {
        // What `logs` prints of a cut view is `output`: the content only, the notice's facts
        // are in `notice` (and absent in answers from daemons that predate it).
        let mut json = serde_json::json!({
            "output": "a\nb\n",
            "notice": {"omitted_bytes": 10, "omitted_lines": null, "dropped": null, "after": 4},
            "truncated": true, "start_cursor": 0, "next_cursor": 4, "total_bytes": 14,
            "total_lines": 5, "omitted_bytes": 10, "omitted_lines": null, "dropped_bytes": 0,
            "gaps": [], "spool_path": "/x", "stream": null
        });
        let view: OutputView = serde_json::from_value(json.clone()).unwrap();
        assert_eq!(view.output, "a\nb\n");
        assert_eq!(view.notice.map(|n| n.after), Some(4));
        json.as_object_mut().unwrap().remove("notice");
        let old: OutputView = serde_json::from_value(json).unwrap();
        assert_eq!((old.output.as_str(), old.notice), ("a\nb\n", None));
    }
}
