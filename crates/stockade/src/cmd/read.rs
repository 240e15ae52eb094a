//! `stockade read` and `stockade grep` over a log in the state directory.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use stockade_core::output::{GrepRequest, OutputLog, ReadRequest};
use stockade_core::state_dir::is_session_id;
use stockade_proto::{OutputLimits, ReadMode};

use crate::cli::{GrepArgs, ReadArgs};
use crate::out;

/// Bytes per chunk when `--raw` streams a range to stdout.
const RAW_CHUNK: usize = 256 * 1024;

pub fn read(home: Option<PathBuf>, args: ReadArgs) -> anyhow::Result<ExitCode> {
    let (log, label) = open_target(home, &args.target)?;
    if args.raw {
        let mut cursor = args.after.unwrap_or(0);
        loop {
            let (bytes, next) = log.read_raw(cursor, RAW_CHUNK)?;
            if bytes.is_empty() && next == cursor {
                break;
            }
            out::print_bytes(&bytes)?;
            cursor = next;
        }
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
        limits: OutputLimits { max_bytes: args.limits.max_bytes, max_lines: args.limits.max_lines },
        stream: args.stream.map(Into::into),
        label,
    };
    let view = log.read(&request)?;
    if args.json {
        out::print_json(&view)?;
    } else {
        let mut text = view.output;
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        out::print(&text)?;
    }
    Ok(ExitCode::SUCCESS)
}

pub fn grep(home: Option<PathBuf>, args: GrepArgs) -> anyhow::Result<ExitCode> {
    let (log, _) = open_target(home, &args.target)?;
    let request = GrepRequest {
        pattern: args.pattern.clone(),
        context: args.context,
        max_matches: args.max_matches,
        ignore_case: args.ignore_case,
        stream: None,
    };
    let result = log.grep(&request)?;
    if args.json {
        out::print_json(&result)?;
    } else {
        let mut text = String::new();
        for line in &result.lines {
            let sep = if line.is_match { ':' } else { '-' };
            text.push_str(&format!("{}{sep}{}{sep}{}\n", line.line_number, line.offset, line.text));
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
fn open_target(home: Option<PathBuf>, target: &str) -> anyhow::Result<(OutputLog, Option<String>)> {
    let dir = if is_session_id(target) {
        super::state_dir(home)?.find_session(target)?
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
