//! The tools an agent sees: names, descriptions (written for a model), input schemas (derived
//! from the argument structs) and output schemas (the shape of `structuredContent`, which is the
//! daemon's `*Result` as it is on the wire, derived from proto's types).

use std::sync::Arc;

use rmcp::model::{JsonObject, Tool, ToolAnnotations};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use stockade_proto::RunResult;
use stockade_proto::rpc::{GrepResultMsg, KillResult, ListResult, ReadResult};

/// `exec_command`.
pub const EXEC_COMMAND: &str = "exec_command";
/// `write_stdin`.
pub const WRITE_STDIN: &str = "write_stdin";
/// `read_output`.
pub const READ_OUTPUT: &str = "read_output";
/// `grep_output`.
pub const GREP_OUTPUT: &str = "grep_output";
/// `kill_session`.
pub const KILL_SESSION: &str = "kill_session";
/// `list_sessions`.
pub const LIST_SESSIONS: &str = "list_sessions";

/// How long `exec_command` waits for the command to finish before answering (foreground).
pub const DEFAULT_EXEC_YIELD_MS: u64 = 10_000;
/// How long `exec_command` with `background: true` waits for first output before answering.
pub const DEFAULT_BACKGROUND_YIELD_MS: u64 = 1_000;
/// How long `write_stdin` collects output after writing.
pub const DEFAULT_WRITE_YIELD_MS: u64 = 1_000;
/// Bytes per model token, for `max_output_tokens` (1 token ≈ 4 bytes, as README.md documents).
pub const BYTES_PER_TOKEN: u64 = 4;
/// Largest `max_output_tokens` honoured: the engine's one bound on a view
/// (`stockade_core::limits::MAX_VIEW_BYTES`, 4 MiB), in tokens. The daemon applies it; this
/// constant only says it in the tools' terms.
pub const MAX_OUTPUT_TOKENS: u64 = stockade_core::limits::MAX_VIEW_BYTES as u64 / BYTES_PER_TOKEN;

const EXEC_COMMAND_DESCRIPTION: &str = "\
Run a shell command (`/bin/sh -c CMD`) and return its exit code and output.

Every byte the command prints is kept on disk, so do NOT pipe it into `head`, `tail` or `grep` \
and do not redirect it to a file to shorten it: the answer shows a bounded view (the end by \
default) and says how much was left out; read any part later with `read_output` (pass `after` = \
the `next_cursor` of the last answer to continue) or search all of it with `grep_output`.

Waits up to `yield_time_ms` (default 10000) for the command to finish. If it is still running \
then, the answer starts with `Process running with session ID sh-N` and the command keeps \
running: follow it with `read_output` (`wait_ms` waits for new output, better than sleeping), \
type into it with `write_stdin`, stop it with `kill_session`.

For servers, watchers and anything meant to keep running, set `background: true`: the answer \
comes after `yield_time_ms` (default 1000) with the output so far. For interactive programs \
(REPLs, prompts, anything that wants a terminal) set `tty: true`, then send keys with \
`write_stdin`. `timeout_ms` terminates the whole process tree after that long. A kill or timeout \
always takes the whole tree: nothing the command started is left running.";

const WRITE_STDIN_DESCRIPTION: &str = "\
Send keys to a running session (one started with `tty: true`), wait `yield_time_ms` (default \
1000), and return what it printed meanwhile.

`chars` is sent as is: end a line with `\\n` to press Enter (`print(6*7)\\n`); `\\u0003` is \
Ctrl-C, `\\u0004` Ctrl-D (end of input), `\\u001b` Escape, `\\t` Tab. Empty `chars` only waits \
and returns new output. The answer's `next_cursor` works with `read_output` like any other.";

const READ_OUTPUT_DESCRIPTION: &str = "\
Read a session's output from its log on disk. Nothing is ever lost, however much it printed, \
so prefer this to re-running a command.

Page through everything: pass `after` = the `next_cursor` of the previous answer and repeat \
with each new `next_cursor`; you have everything when `next_cursor` equals `total_bytes` and \
the session is no longer running. Without `after` you get the end of the log (`mode: tail`); \
`mode: head` shows the start (with compiler errors the first one is the cause), `middle` both \
ends. `wait_ms` waits up to that long for output after `after`, or for the session to end: use \
it instead of sleeping. `stream` limits the answer to `stdout` or `stderr`.";

const GREP_OUTPUT_DESCRIPTION: &str = "\
Search a session's full output (every byte, on disk) with a regular expression (Rust regex \
syntax, as ripgrep) and return the matching lines as `line_number:byte_offset:text` (context \
lines use `-`). Much cheaper than paging through a large log. To read on from a match, pass its \
byte offset as `after` to `read_output`. `context` adds lines around each match, `max_matches` \
caps the matching lines (default 200), `ignore_case` makes it case-insensitive.";

const KILL_SESSION_DESCRIPTION: &str = "\
Stop a session and every process it started (the whole tree, including children that \
daemonized), then verify they are gone. `signal` goes first (default SIGTERM; SIGINT, SIGHUP, \
SIGKILL, …); whatever is still alive after a 2 s grace gets SIGKILL. The answer says whether \
anything survived. The output stays readable afterwards.";

const LIST_SESSIONS_DESCRIPTION: &str = "\
List the sessions Stockade knows: id, state (running, exited with its code, killed, timed out, \
failed), pid, bytes printed, wall time and command. Sessions outlive the agent's own restarts: \
use this to find a command started earlier.";

/// `exec_command` arguments.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExecCommandArgs {
    /// The shell command line, run with `/bin/sh -c` (or `shell`).
    pub cmd: String,
    /// Working directory (absolute path). Default: the MCP server's working directory.
    #[serde(default)]
    pub workdir: Option<String>,
    /// Milliseconds to wait for the command to finish (or, with `background`, for first output)
    /// before answering. Default 10000 (background: 1000); at most 300000.
    #[serde(default)]
    pub yield_time_ms: Option<u64>,
    /// Bound on the answer's output, in tokens (1 token ≈ 4 bytes). Default ≈ 12800 (50 KiB),
    /// at most 1048576 (4 MiB).
    #[serde(default)]
    pub max_output_tokens: Option<u64>,
    /// Bound on the answer's lines. Default 2000.
    #[serde(default)]
    pub max_lines: Option<usize>,
    /// Run on a pseudo-terminal (for REPLs and interactive programs); send keys with
    /// `write_stdin`.
    #[serde(default)]
    pub tty: bool,
    /// Keep it running and answer after `yield_time_ms` (servers, watchers, long builds).
    #[serde(default)]
    pub background: bool,
    /// Terminate the whole process tree after this many milliseconds.
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// A key for a recurring job: if a running session already has it, no second copy is
    /// started and the answer describes that session.
    #[serde(default)]
    pub source: Option<String>,
    /// The shell (default `/bin/sh`).
    #[serde(default)]
    pub shell: Option<String>,
    /// Run the shell as a login shell (`-lc`).
    #[serde(default)]
    pub login: bool,
}

/// `write_stdin` arguments.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WriteStdinArgs {
    /// The session id from `exec_command` (`sh-3`).
    pub session_id: String,
    /// Text to send: `\n` presses Enter, `\u0003` is Ctrl-C, `\u0004` Ctrl-D. May be empty.
    #[serde(default)]
    pub chars: String,
    /// Milliseconds to collect output after writing. Default 1000; at most 300000.
    #[serde(default)]
    pub yield_time_ms: Option<u64>,
    /// Bound on the answer's output, in tokens (1 token ≈ 4 bytes). Default ≈ 12800 (50 KiB),
    /// at most 1048576 (4 MiB).
    #[serde(default)]
    pub max_output_tokens: Option<u64>,
}

/// Which part of the log `read_output` shows.
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ModeArg {
    /// From `after` forward (the default when `after` is given).
    Delta,
    /// The end of the log (the default without `after`).
    Tail,
    /// The start of the log.
    Head,
    /// Both ends, with a marker where the middle was left out.
    Middle,
}

/// Which stream `read_output` shows.
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum StreamArg {
    /// Standard output only.
    Stdout,
    /// Standard error only.
    Stderr,
}

/// `read_output` arguments.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadOutputArgs {
    /// The session id (`sh-3`).
    pub session_id: String,
    /// Cursor: show what follows this byte offset (the `next_cursor` of the last answer).
    #[serde(default)]
    pub after: Option<u64>,
    /// `delta` (from `after`), `tail`, `head` or `middle`.
    #[serde(default)]
    pub mode: Option<ModeArg>,
    /// Bound on the answer's output, in tokens (1 token ≈ 4 bytes). Default ≈ 12800 (50 KiB),
    /// at most 1048576 (4 MiB).
    #[serde(default)]
    pub max_output_tokens: Option<u64>,
    /// Bound on the answer's lines. Default 2000.
    #[serde(default)]
    pub max_lines: Option<usize>,
    /// Wait up to this many milliseconds for new output (or the end). At most 300000.
    #[serde(default)]
    pub wait_ms: Option<u64>,
    /// Only `stdout` or only `stderr`.
    #[serde(default)]
    pub stream: Option<StreamArg>,
}

/// `grep_output` arguments.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GrepOutputArgs {
    /// The session id (`sh-3`).
    pub session_id: String,
    /// The regular expression (Rust regex syntax, as ripgrep).
    pub pattern: String,
    /// Lines of context before and after each match.
    #[serde(default)]
    pub context: Option<usize>,
    /// Stop after this many matching lines (default 200).
    #[serde(default)]
    pub max_matches: Option<usize>,
    /// Case-insensitive.
    #[serde(default)]
    pub ignore_case: bool,
}

/// `kill_session` arguments.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct KillSessionArgs {
    /// The session id (`sh-3`).
    pub session_id: String,
    /// The first signal: SIGTERM (default), SIGINT, SIGHUP, SIGKILL, … or a number.
    #[serde(default)]
    pub signal: Option<String>,
}

/// `list_sessions` arguments (none).
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListSessionsArgs {}

/// Every tool, in the order `tools/list` shows them.
pub fn all() -> Vec<Tool> {
    vec![
        Tool::new(EXEC_COMMAND, EXEC_COMMAND_DESCRIPTION, input_schema::<ExecCommandArgs>())
            .with_title("Run a shell command")
            .with_raw_output_schema(output_schema::<RunResult>())
            .with_annotations(
                ToolAnnotations::new().read_only(false).destructive(true).open_world(true),
            ),
        Tool::new(WRITE_STDIN, WRITE_STDIN_DESCRIPTION, input_schema::<WriteStdinArgs>())
            .with_title("Type into a running session")
            .with_raw_output_schema(output_schema::<ReadResult>())
            .with_annotations(ToolAnnotations::new().read_only(false).destructive(true)),
        Tool::new(READ_OUTPUT, READ_OUTPUT_DESCRIPTION, input_schema::<ReadOutputArgs>())
            .with_title("Read a session's output")
            .with_raw_output_schema(output_schema::<ReadResult>())
            .with_annotations(ToolAnnotations::new().read_only(true)),
        Tool::new(GREP_OUTPUT, GREP_OUTPUT_DESCRIPTION, input_schema::<GrepOutputArgs>())
            .with_title("Search a session's output")
            .with_raw_output_schema(output_schema::<GrepResultMsg>())
            .with_annotations(ToolAnnotations::new().read_only(true).idempotent(true)),
        Tool::new(KILL_SESSION, KILL_SESSION_DESCRIPTION, input_schema::<KillSessionArgs>())
            .with_title("Stop a session's whole process tree")
            .with_raw_output_schema(output_schema::<KillResult>())
            .with_annotations(
                ToolAnnotations::new().read_only(false).destructive(true).idempotent(true),
            ),
        Tool::new(LIST_SESSIONS, LIST_SESSIONS_DESCRIPTION, input_schema::<ListSessionsArgs>())
            .with_title("List sessions")
            .with_raw_output_schema(output_schema::<ListResult>())
            .with_annotations(ToolAnnotations::new().read_only(true).idempotent(true)),
    ]
}

/// The input schema of an argument struct, as MCP wants it (a JSON object with `type: object`).
fn input_schema<T: JsonSchema>() -> Arc<JsonObject> {
    let schema = schemars::generate::SchemaSettings::draft2020_12()
        .with(|s| s.inline_subschemas = true)
        .into_generator()
        .into_root_schema_for::<T>();
    let mut value = serde_json::to_value(schema).unwrap_or_else(|_| json!({}));
    if let Some(map) = value.as_object_mut() {
        map.remove("$schema");
        map.remove("title");
        map.entry("type").or_insert_with(|| json!("object"));
        map.entry("properties").or_insert_with(|| json!({}));
    }
    object(value)
}

fn object(value: Value) -> Arc<JsonObject> {
    match value {
        Value::Object(map) => Arc::new(map),
        _ => Arc::new(JsonObject::new()),
    }
}

/// The output schema of a daemon result type: the shape of `structuredContent`, derived from
/// proto's type (so it cannot drift from the wire), inlined, without the integer `format`s
/// (`uint64`, …) that JSON Schema validators do not know.
fn output_schema<T: JsonSchema>() -> Arc<JsonObject> {
    let schema = schemars::generate::SchemaSettings::draft2020_12()
        .with(|s| s.inline_subschemas = true)
        .into_generator()
        .into_root_schema_for::<T>();
    let mut value = serde_json::to_value(schema).unwrap_or_else(|_| json!({}));
    drop_integer_formats(&mut value);
    if let Some(map) = value.as_object_mut() {
        map.remove("$schema");
        map.remove("title");
        map.entry("type").or_insert_with(|| json!("object"));
    }
    object(value)
}

/// Remove `format` wherever it qualifies an integer type.
fn drop_integer_formats(value: &mut Value) {
    match value {
        Value::Object(map) => {
            let integer = match map.get("type") {
                Some(Value::String(t)) => t == "integer",
                Some(Value::Array(ts)) => ts.iter().any(|t| t == "integer"),
                _ => false,
            };
            if integer {
                map.remove("format");
            }
            map.values_mut().for_each(drop_integer_formats);
        }
        Value::Array(items) => items.iter_mut().for_each(drop_integer_formats),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn every_tool_has_object_schemas_and_a_description() {
        let tools = all();
        assert_eq!(tools.len(), 6);
        for tool in tools {
            assert_eq!(tool.input_schema.get("type"), Some(&json!("object")), "{}", tool.name);
            let out = tool.output_schema.as_ref().expect("output schema");
            assert_eq!(out.get("type"), Some(&json!("object")), "{}", tool.name);
            assert!(tool.description.as_ref().is_some_and(|d| d.len() > 80), "{}", tool.name);
        }
    }

    #[test]
    fn output_schemas_follow_proto_and_accept_real_answers() {
        let tools = all();
        let schema = |name: &str| {
            let tool = tools.iter().find(|t| t.name == name).unwrap();
            Value::Object(tool.output_schema.as_ref().unwrap().as_ref().clone())
        };
        let run = schema(EXEC_COMMAND).to_string();
        for key in
            ["\"next_cursor\"", "\"spool_path\"", "\"state\"", "\"timed_out\"", "\"cleanup\""]
        {
            assert!(run.contains(key), "{key} in {run}");
        }
        assert!(!run.contains("uint"), "no integer formats: {run}");
        let list = schema(LIST_SESSIONS);
        assert_eq!(list["required"], json!(["sessions"]));
        assert!(schema(GREP_OUTPUT).to_string().contains("\"is_match\""));
        assert!(schema(KILL_SESSION).to_string().contains("\"survivors\""));
        assert!(schema(READ_OUTPUT).to_string().contains("\"total_bytes\""));
    }

    #[test]
    fn exec_command_schema_names_the_codex_fields() {
        let schema = input_schema::<ExecCommandArgs>();
        let props = schema.get("properties").and_then(Value::as_object).unwrap();
        for key in ["cmd", "workdir", "yield_time_ms", "max_output_tokens", "tty", "background"] {
            assert!(props.contains_key(key), "{key}");
        }
        assert_eq!(schema.get("required"), Some(&json!(["cmd"])));
    }
}
