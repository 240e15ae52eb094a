//! `stockade read` and `stockade grep` over a log in the state directory.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, ValueEnum};
use stockade_engine::is_session_id;
use stockade_log::limits;
use stockade_log::{GrepRequest, OutputLog, ReadRequest};
use stockade_proto::rpc::{GrepParams, method};
use stockade_proto::{GrepResult, ReadMode};

use crate::args::{LimitArgs, StreamArg};
use crate::global::Global;
use crate::out;

/// `stockade read`.
#[derive(Debug, Args)]
pub struct ReadArgs {
    /// A session id (`sh-3`), a session directory, or a spool file.
    pub target: String,
    /// Show what follows this byte offset (a cursor from an earlier answer).
    #[arg(long, value_name = "CURSOR")]
    pub after: Option<u64>,
    /// Which part to show (default: `delta` with --after, else `tail`).
    #[arg(long, value_enum)]
    pub mode: Option<ModeArg>,
    /// Only this stream.
    #[arg(long, value_enum)]
    pub stream: Option<StreamArg>,
    #[command(flatten)]
    pub limits: LimitArgs,
    /// Write exactly the bytes of the range (no notice, no lossy conversion), for piping.
    #[arg(long, conflicts_with_all = ["json", "stream"])]
    pub raw: bool,
    /// Print the structured result as JSON.
    #[arg(long)]
    pub json: bool,
    /// Show the command's colours (SGR sequences); `auto`: when stdout is a terminal. Other
    /// control characters are always escaped (`--raw` writes the exact bytes).
    #[arg(long, value_enum, value_name = "WHEN", default_value = "auto")]
    pub color: ColorArg,
}

/// `--color`.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ColorArg {
    /// When stdout is a terminal. (`NO_COLOR` is about colour Stockade adds; these are the
    /// command's own, and escaping them would only show them as text.)
    Auto,
    /// Always, also into a pipe.
    Always,
    /// Never: colour sequences are escaped like other control characters.
    Never,
}

impl ColorArg {
    /// Whether the command's colour sequences are written as they are.
    pub fn keep(self) -> bool {
        match self {
            ColorArg::Auto => std::io::IsTerminal::is_terminal(&std::io::stdout()),
            ColorArg::Always => true,
            ColorArg::Never => false,
        }
    }
}

/// `--mode`.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ModeArg {
    /// From `--after` onward.
    Delta,
    /// The end.
    Tail,
    /// The start.
    Head,
    /// Both ends.
    Middle,
}

impl From<ModeArg> for ReadMode {
    fn from(m: ModeArg) -> ReadMode {
        match m {
            ModeArg::Delta => ReadMode::Delta,
            ModeArg::Tail => ReadMode::Tail,
            ModeArg::Head => ReadMode::Head,
            ModeArg::Middle => ReadMode::Middle,
        }
    }
}

/// `stockade grep`.
#[derive(Debug, Args)]
pub struct GrepArgs {
    /// A session id (`sh-3`), a session directory, or a spool file.
    pub target: String,
    /// The regular expression (Rust regex syntax, as ripgrep).
    pub pattern: String,
    /// Lines of context before and after each match.
    #[arg(short = 'C', long, value_name = "N", default_value_t = 0)]
    pub context: usize,
    /// Stop after this many matching lines.
    #[arg(long, value_name = "N", default_value_t = stockade_log::DEFAULT_GREP_MATCHES)]
    pub max_matches: usize,
    /// Case-insensitive.
    #[arg(short = 'i', long)]
    pub ignore_case: bool,
    /// Print the structured result as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Bytes per chunk when `--raw` streams a range to stdout.
const RAW_CHUNK: usize = 256 * 1024;

pub fn read(home: Option<PathBuf>, args: ReadArgs) -> anyhow::Result<ExitCode> {
    let (log, label) = open_target(home, &args.target)?;
    if args.raw {
        copy_raw(&log, args.after.unwrap_or(0), None)?;
        return Ok(ExitCode::SUCCESS);
    }
    let mode = match (args.mode, args.after) {
        (Some(m), _) => m.into(),
        (None, Some(_)) => ReadMode::Delta,
        (None, None) => ReadMode::Tail,
    };
    let request = ReadRequest {
        mode,
        after: args.after.unwrap_or(0),
        limits: limits::view_limits(Some(args.limits.max_bytes), Some(args.limits.max_lines)),
        stream: args.stream.map(Into::into),
    };
    let view = log.read(&request)?;
    if args.json {
        out::print_json(&view)?;
    } else {
        let mut text = out::view_text_shown(&view, label.as_deref(), args.color.keep());
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        out::print(&text)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// With `--remote`, a target must be a session id: a path names a file on this machine.
pub(super) fn refuse_remote_path(global: &Global, target: &str) -> anyhow::Result<()> {
    match &global.remote {
        Some(url) if !is_session_id(target) => anyhow::bail!(
            "{target} is not a session id; with --remote {url} pass the remote session's id (like sh-3): a path names a file on this machine"
        ),
        _ => Ok(()),
    }
}

/// Write the log from `after` to its current end to stdout, a chunk at a time: the exact bytes
/// (`text` is `None`), or as lossy UTF-8 text with control characters escaped, colour sequences
/// kept when `text` is `Some(true)`.
pub(super) fn copy_raw(log: &OutputLog, after: u64, text: Option<bool>) -> anyhow::Result<()> {
    let mut cursor = after;
    let mut shown = text.map(out::ShownStream::new);
    loop {
        let (bytes, next) = log.read_raw(cursor, RAW_CHUNK)?;
        if bytes.is_empty() && next == cursor {
            break;
        }
        match &mut shown {
            Some(shown) => out::print(&shown.push(&bytes))?,
            None => out::print_bytes(&bytes)?,
        }
        cursor = next;
    }
    match &mut shown {
        Some(shown) => out::print(&shown.finish()),
        None => Ok(()),
    }
}

pub fn grep(global: &Global, args: GrepArgs) -> anyhow::Result<ExitCode> {
    refuse_remote_path(global, &args.target)?;
    // The daemon answers for the sessions it knows; anything else is searched on disk.
    if is_session_id(&args.target)
        && let Some(mut client) = global.connect_existing()?
    {
        let params = GrepParams {
            id: args.target.clone(),
            pattern: args.pattern.clone(),
            context: args.context,
            max_matches: Some(args.max_matches),
            ignore_case: args.ignore_case,
            timeout_ms: None,
        };
        match client.call::<method::Grep>(params) {
            Ok(r) => {
                let result = GrepResult {
                    lines: r.lines,
                    matches: r.matches,
                    truncated: r.truncated,
                    spool_path: r.spool_path,
                };
                return print_grep(&result, args.json);
            }
            // A remote daemon's sessions are not in this machine's state directory.
            Err(e) if e.is_no_such_session() && global.remote.is_none() => {}
            Err(e) => return Err(e.into()),
        }
    }
    let (log, _) = open_target(global.home.clone(), &args.target)?;
    let request = GrepRequest {
        pattern: args.pattern.clone(),
        context: args.context,
        max_matches: args.max_matches,
        ignore_case: args.ignore_case,
        stream: None,
    };
    let result = log.grep(&request)?;
    print_grep(&result, args.json)
}

fn print_grep(result: &GrepResult, json: bool) -> anyhow::Result<ExitCode> {
    if json {
        out::print_json(result)?;
    } else {
        let mut text = String::new();
        for line in &result.lines {
            let sep = if line.is_match { ':' } else { '-' };
            let shown = out::escape_controls(&line.text);
            text.push_str(&format!("{}{sep}{}{sep}{shown}\n", line.line_number, line.offset));
        }
        if result.truncated {
            text.push_str(&format!(
                "[stopped after {} matching lines; raise --max-matches or narrow the pattern]\n",
                result.matches
            ));
        }
        out::print(&text)?;
    }
    // Like grep(1): 1 when nothing matched.
    Ok(if result.matches == 0 { ExitCode::from(1) } else { ExitCode::SUCCESS })
}

/// Open the log a target names: a session id, a session directory, or a spool file.
pub(super) fn open_target(
    home: Option<PathBuf>,
    target: &str,
) -> anyhow::Result<(OutputLog, Option<String>)> {
    if target.is_empty() {
        anyhow::bail!(
            "the target is empty; pass a session id (like sh-3), a session directory or a spool file"
        );
    }
    let dir = if is_session_id(target) {
        crate::global::state_dir(home)?.find_session(target)?
    } else {
        let path = Path::new(target);
        let meta = std::fs::symlink_metadata(path).with_context(|| {
            format!("{target} is neither a session id (like sh-3) nor an existing spool file or session directory")
        })?;
        if meta.is_dir() {
            path.to_path_buf()
        } else {
            path.parent().map(Path::to_path_buf).unwrap_or_default()
        }
    };
    let label =
        dir.file_name().and_then(|n| n.to_str()).filter(|n| is_session_id(n)).map(str::to_owned);
    let log = OutputLog::open(&dir)
        .with_context(|| format!("cannot open the output log in {}", dir.display()))?;
    Ok((log, label))
}
