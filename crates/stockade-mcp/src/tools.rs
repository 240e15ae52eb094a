//! The tools an agent sees: names, descriptions (written for a model), input schemas (derived
//! from the argument structs) and output schemas (the shape of `structuredContent`, which is the
//! daemon's `*Result` as it is on the wire, derived from proto's types).

use rmcp::model::{JsonObject, Tool, ToolAnnotations};
use schemars::JsonSchema;

use crate::schema::{input_schema, output_schema};
use serde::Deserialize;
use serde_json::json;
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

/// How long `exec_command` waits for the command to finish before answering (foreground):
/// under the shortest common client tool timeout (the OpenAI Agents SDK's 5 s), so a default
/// call is answered, with the session id, before its client gives up on it.
pub const DEFAULT_EXEC_YIELD_MS: u64 = 4_000;
/// How long `exec_command` with `background: true` waits for first output before answering.
pub const DEFAULT_BACKGROUND_YIELD_MS: u64 = 1_000;
/// How long `write_stdin` collects output after writing.
pub const DEFAULT_WRITE_YIELD_MS: u64 = 1_000;
/// Bytes per model token, for `max_output_tokens` (1 token ≈ 4 bytes, as README.md documents).
pub const BYTES_PER_TOKEN: u64 = 4;
/// Largest `max_output_tokens` honoured: the engine's one bound on a view
/// (`stockade_log::limits::MAX_VIEW_BYTES`, 4 MiB), in tokens. The daemon applies it; this
/// constant only says it in the tools' terms.
pub const MAX_OUTPUT_TOKENS: u64 = stockade_log::limits::MAX_VIEW_BYTES as u64 / BYTES_PER_TOKEN;

const EXEC_COMMAND_DESCRIPTION: &str = "\
Run a shell command (bash/sh, like a terminal: builds, tests, scripts, servers) with \
`/bin/sh -c CMD`; answer with its exit code and output.

Every byte is kept on disk: do NOT pipe into `head`/`tail`/`grep` or redirect to shorten it. The \
answer shows a bounded view (the end) and says what was left out; `read_output` and \
`grep_output` reach the rest.

Waits up to `yield_time_ms` (default 4000) for the command to end. Not done by then: the \
answer says `Process running with session ID sh-N` and it goes on; follow it with \
`read_output` (also `write_stdin`, `kill_session`). For servers and \
watchers set `background: true` (default wait 1000) and `until` to a regex such as `Listening`: \
the answer comes as soon as a new line matches. `tty: true` for interactive programs. \
`timeout_ms` ends the whole process tree.";

const WRITE_STDIN_DESCRIPTION: &str = "\
Send input to a running process or command: type keys into its stdin, answer an interactive \
prompt or REPL (a session started with `tty: true`), and collect what it prints for \
`yield_time_ms` (default 1000). The wait ends early when the session ends, the answer is full, \
or a new line matches `until`.

`chars` is sent as is: `\\n` presses Enter, `\\u0003` is Ctrl-C, `\\u0004` Ctrl-D. Empty \
`chars` only waits and shows the newest output, as `read_output` without `after` does.";

const READ_OUTPUT_DESCRIPTION: &str = "\
Read a shell command's output (logs of a session, kept on disk, never lost).

Without `after` you get the newest output: of a session you have read before, what is new \
since your last answer (its end, if more came than fits; the notice says what was skipped); \
otherwise the end (`mode: tail`). Pass `after` = `next_cursor` to page through every byte; \
`mode: head`/`middle`/`tail` pick a part. `yield_time_ms` collects new output first: the wait \
ends when that time passes, the session ends, a new line matches `until` (a regex), or, paging \
with `after`, the answer is full. Use it instead of sleeping: one call per wait, not per line. \
Waits over 50000 need a client that resets its timeout on progress notifications.";

const GREP_OUTPUT_DESCRIPTION: &str = "\
Search (grep) a shell command's full output with a regex (Rust syntax, as ripgrep); matching lines come as \
`line_number:byte_offset:text` (context lines with `-`). Far cheaper than paging a large log. \
Read on from a match with `read_output` `after` = its byte offset.";

const KILL_SESSION_DESCRIPTION: &str = "\
Kill, stop, cancel or terminate a running command or process: a session and every process it \
started (the whole tree, daemonized children too), then verify they are gone. `signal` first (default SIGTERM), SIGKILL after a 2 s grace. The output \
stays readable.";

const LIST_SESSIONS_DESCRIPTION: &str = "\
List shell sessions: running and finished commands (they outlive restarts of the agent): running first, then the newest finished, \
at most `limit` (default 50); filter by `state` or `source`. Each line: id, state, pid, bytes, \
wall time, command.";

/// The words a model searches with for each tool, for agents that defer tools behind a search
/// (Claude Code's ToolSearch scores a query word found in this hint above one found only in the
/// description). Each hint leaves out the words of the other tools' searches, so the right tool
/// comes first: `exec_command`'s names no stopping, input or running process.
const SEARCH_HINTS: &[(&str, &str)] = &[
    (EXEC_COMMAND, "run shell commands, bash, scripts, builds, tests"),
    (
        WRITE_STDIN,
        "send input, keys or text to a running process or command; type into an interactive \
         prompt, REPL or shell",
    ),
    (READ_OUTPUT, "read output, logs, stdout, stderr"),
    (GREP_OUTPUT, "search or grep output, logs"),
    (KILL_SESSION, "kill, stop, cancel, terminate or end a running command or process"),
    (LIST_SESSIONS, "list running and finished sessions, jobs"),
];

/// Claude Code's key for a tool's search hint in `_meta`.
const SEARCH_HINT_META: &str = "anthropic/searchHint";

/// Most sessions one `list_sessions` answer shows when `limit` is not given.
pub const DEFAULT_LIST_LIMIT: usize = 50;
/// Most sessions one `list_sessions` answer may show.
pub const MAX_LIST_LIMIT: usize = 500;
/// How long `read_output` with `until` (and no `yield_time_ms`) waits: under the Agents SDK's
/// 5 s tool timeout, as [`DEFAULT_EXEC_YIELD_MS`].
pub const DEFAULT_UNTIL_YIELD_MS: u64 = 4_000;

/// `exec_command` arguments.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExecCommandArgs {
    /// The shell command line, run with `/bin/sh -c` (or `shell`).
    pub cmd: String,
    /// Working directory. Default: the directory the MCP server was started in (a relative
    /// path is taken from there).
    #[serde(default)]
    pub workdir: Option<String>,
    /// Wait this long (ms) for the command to end; ends early at an `until` line. Default
    /// 4000 (background 1000).
    #[serde(default)]
    #[schemars(range(min = 0, max = 300000))]
    pub yield_time_ms: Option<u64>,
    /// End the wait at the first new output line matching this regex (e.g. `Listening`).
    #[serde(default)]
    pub until: Option<String>,
    /// Bound on the answer, in tokens (≈ 4 bytes each). Default 12800.
    #[serde(default)]
    #[schemars(range(min = 1, max = 1048576))]
    pub max_output_tokens: Option<u64>,
    /// Bound on the answer's lines. Default 2000.
    #[serde(default)]
    #[schemars(range(min = 1, max = 1000000))]
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
    #[schemars(range(min = 1, max = 31536000000u64))]
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
    /// `pipe` (default): one pipe for stdout and stderr, in write order. `split`: a pipe each,
    /// for exact `read_output` `stream` reads; the order across them is then best-effort.
    #[serde(default)]
    pub capture: Option<CaptureArg>,
    /// Confine the command: `mode` `read-only`|`workspace-write` (writes only in `workdir`,
    /// TMPDIR, `writable_roots`), `network` `none`|`allow`, limits `memory` (bytes), `pids`,
    /// `nofile`, `cpu` (% of one CPU). Default and ceiling: the server's.
    #[serde(default, deserialize_with = "asked_sandbox")]
    #[schemars(with = "Option<stockade_proto::Sandbox>")]
    pub sandbox: Option<AskedSandbox>,
    /// Retry key a failed call named.
    #[serde(default)]
    pub idempotency_key: Option<String>,
}

/// The `sandbox` an `exec_command` asked for, and whether it named the network (one that does
/// not keeps the server's: `{mode: "workspace-write"}` under a `network none` server asks for
/// no network).
#[derive(Debug, Clone)]
pub struct AskedSandbox {
    /// The policy as given (serde's defaults for what it left out).
    pub policy: stockade_proto::Sandbox,
    /// Whether `network` was given.
    pub names_network: bool,
}

fn asked_sandbox<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<AskedSandbox>, D::Error> {
    let Some(value) = Option::<serde_json::Value>::deserialize(d)? else { return Ok(None) };
    let names_network = value.get("network").is_some_and(|n| !n.is_null());
    let policy = serde_json::from_value(value).map_err(serde::de::Error::custom)?;
    Ok(Some(AskedSandbox { policy, names_network }))
}

/// How `exec_command` captures stdout and stderr.
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum CaptureArg {
    /// One pipe for both streams, as a terminal merges them.
    Pipe,
    /// A pipe per stream.
    Split,
}

impl From<CaptureArg> for stockade_proto::Capture {
    fn from(c: CaptureArg) -> Self {
        match c {
            CaptureArg::Pipe => stockade_proto::Capture::Pipe,
            CaptureArg::Split => stockade_proto::Capture::Split,
        }
    }
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
    /// Collect output this long (ms) after writing. Default 1000.
    #[serde(default)]
    #[schemars(range(min = 0, max = 300000))]
    pub yield_time_ms: Option<u64>,
    /// End the wait at the first new output line matching this regex.
    #[serde(default)]
    pub until: Option<String>,
    /// Bound on the answer, in tokens (≈ 4 bytes each). Default 12800.
    #[serde(default)]
    #[schemars(range(min = 1, max = 1048576))]
    pub max_output_tokens: Option<u64>,
    /// Retry key a failed call named.
    #[serde(default)]
    pub idempotency_key: Option<String>,
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
    /// Show what follows this byte offset (the last answer's `next_cursor`).
    #[serde(default)]
    #[schemars(range(min = 0, max = 9007199254740991u64))]
    pub after: Option<u64>,
    /// `delta` (from `after`), `tail`, `head` or `middle`.
    #[serde(default)]
    pub mode: Option<ModeArg>,
    /// Bound on the answer, in tokens (≈ 4 bytes each). Default 12800.
    #[serde(default)]
    #[schemars(range(min = 1, max = 1048576))]
    pub max_output_tokens: Option<u64>,
    /// Bound on the answer's lines. Default 2000.
    #[serde(default)]
    #[schemars(range(min = 1, max = 1000000))]
    pub max_lines: Option<usize>,
    /// Collect new output for up to this long (ms) before answering. Default 0 (4000 with
    /// `until`).
    #[serde(default, alias = "wait_ms")]
    #[schemars(range(min = 0, max = 300000))]
    pub yield_time_ms: Option<u64>,
    /// End the wait at the first new line matching this regex.
    #[serde(default)]
    pub until: Option<String>,
    /// Only `stdout` or only `stderr`, of a session started with `capture: "split"`; the
    /// default capture and `tty` sessions have one stream, shown whole (the answer says so).
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
    #[schemars(range(min = 0, max = 100))]
    pub context: Option<usize>,
    /// Stop after this many matching lines (default 200).
    #[serde(default)]
    #[schemars(range(min = 1, max = 10000))]
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

/// Which sessions `list_sessions` shows.
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum StateArg {
    /// Running sessions.
    Running,
    /// Finished sessions (exited, killed, timed out, failed).
    Finished,
}

/// `list_sessions` arguments.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListSessionsArgs {
    /// At most this many sessions (default 50).
    #[serde(default)]
    #[schemars(range(min = 1, max = 500))]
    pub limit: Option<usize>,
    /// Only `running` or only `finished` sessions.
    #[serde(default)]
    pub state: Option<StateArg>,
    /// Only sessions started with this `source`.
    #[serde(default)]
    pub source: Option<String>,
    /// Only the session of this retry key.
    #[serde(default)]
    pub idempotency_key: Option<String>,
}

/// Every tool, in the order `tools/list` shows them.
pub fn all() -> Vec<Tool> {
    let mut tools = defined();
    for tool in &mut tools {
        if let Some((_, hint)) = SEARCH_HINTS.iter().find(|(name, _)| *name == tool.name) {
            let mut meta = JsonObject::new();
            meta.insert(SEARCH_HINT_META.into(), json!(hint));
            tool.meta = Some(rmcp::model::MetaObject(meta));
        }
    }
    tools
}

fn defined() -> Vec<Tool> {
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use serde_json::Value;

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
        assert!(!run.contains("\"format\""), "no formats: {run}");
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

/// How the agents' deferred-tool searches rank these tools for the words a model would use.
#[cfg(test)]
mod search_tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    /// What a model types when it needs each tool (and has not seen it yet).
    const QUERIES: &[(&str, &str)] = &[
        ("send input to a running process", WRITE_STDIN),
        ("type into an interactive prompt", WRITE_STDIN),
        ("answer a REPL prompt", WRITE_STDIN),
        ("stop a running command", KILL_SESSION),
        ("cancel a running job", KILL_SESSION),
        ("terminate a process", KILL_SESSION),
        ("run a shell command", EXEC_COMMAND),
        ("read the output of a command", READ_OUTPUT),
        ("search command output", GREP_OUTPUT),
        ("list running sessions", LIST_SESSIONS),
    ];

    fn has_word(text: &str, word: &str) -> bool {
        text.split(|c: char| !c.is_alphanumeric() && c != '_' && c != '-')
            .flat_map(|w| std::iter::once(w).chain(w.split('-')))
            .any(|w| w == word)
    }

    /// Claude Code 2.1.332's ToolSearch score of an MCP tool of server `stockade`: per query
    /// word, 12 for a whole part of `stockade__name` (6 for a part containing it), 12 / 4 for
    /// the server or tool name, 4 for the word in the `_meta` search hint, 2 in the description.
    fn claude_score(tool: &Tool, query: &str) -> u32 {
        let coarse = ["stockade".to_owned(), tool.name.to_lowercase()];
        let parts: Vec<String> = coarse
            .iter()
            .flat_map(|c| c.split('_').map(str::to_owned).collect::<Vec<_>>())
            .collect();
        let hint = tool.meta.as_ref().and_then(|m| m.0.get(SEARCH_HINT_META)).unwrap();
        let hint = hint.as_str().unwrap().to_lowercase();
        let description = tool.description.as_deref().unwrap_or_default().to_lowercase();
        let mut score = 0;
        for word in query.split_whitespace() {
            score += match () {
                _ if parts.iter().any(|p| p == word) => 12,
                _ if parts.iter().any(|p| p.contains(word)) => 6,
                _ => 0,
            };
            score += match () {
                _ if coarse.iter().any(|p| p == word) => 12,
                _ if coarse.iter().any(|p| p.contains(word)) => 4,
                _ => 0,
            };
            score += if has_word(&hint, word) { 4 } else { 0 };
            score += if has_word(&description, word) { 2 } else { 0 };
        }
        score
    }

    /// A term match as Codex's search (BM25 over name and description) sees it: how many of the
    /// query's words, stop words left out, the tool's name and description hold.
    fn term_score(tool: &Tool, query: &str) -> usize {
        const STOP: &[&str] = &["a", "an", "the", "to", "of", "into"];
        let text = format!(
            "{} {}",
            tool.name.replace('_', " "),
            tool.description.as_deref().unwrap_or_default()
        )
        .to_lowercase();
        query.split_whitespace().filter(|w| !STOP.contains(w) && has_word(&text, w)).count()
    }

    #[test]
    fn each_search_ranks_the_tool_it_means_first() {
        let tools = all();
        for (query, want) in QUERIES {
            for (how, score) in [
                (
                    "ToolSearch",
                    &(|t: &Tool| claude_score(t, query) as usize) as &dyn Fn(&Tool) -> usize,
                ),
                ("term match", &|t: &Tool| term_score(t, query)),
            ] {
                let mut ranked: Vec<(usize, &str)> =
                    tools.iter().map(|t| (score(t), &*t.name)).collect();
                ranked.sort_by_key(|r| std::cmp::Reverse(r.0));
                assert_eq!(ranked[0].1, *want, "{how} {query:?}: {ranked:?}");
                // ToolSearch loads its first results in that order: no tie with the next. A
                // term match is only the floor (BM25 weighs the name): ties allowed there.
                let strict = how == "ToolSearch";
                assert!(!strict || ranked[0].0 > ranked[1].0, "{how} {query:?}: {ranked:?}");
            }
        }
    }

    #[test]
    fn tools_list_stays_within_its_bound() {
        // The bound tests/mcp/agents.mjs holds `tools/list` to (JSON of the tools, output
        // schemas and search hints included). 25.5 KiB: the retry keys of exec_command,
        // write_stdin and list_sessions took it past 25.
        let bytes = serde_json::to_string(&all()).unwrap().len();
        assert!(bytes <= 26_112, "tools/list is {bytes} bytes");
    }
}
