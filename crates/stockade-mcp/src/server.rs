//! The MCP handler: `tools/list` answers with [`tools::all`]; `tools/call` decodes the arguments,
//! translates them into one daemon call and the daemon's answer into a tool result (Codex-style
//! text; with `--structured` also the daemon's `*Result` as `structuredContent`).

use std::time::Instant;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use stockade_proto::rpc::{
    GrepParams, KillParams, MAX_WAIT_MS, NoParams, PtySize, ReadParams, RunParams, WriteParams,
    code, method,
};
use stockade_proto::{ReadMode, Stream};

use crate::backend::Backend;
use crate::budget::Budget;
use crate::error::ToolError;
use crate::text::{self, Answers};
use crate::tools::{
    self, BYTES_PER_TOKEN, DEFAULT_BACKGROUND_YIELD_MS, DEFAULT_EXEC_YIELD_MS,
    DEFAULT_WRITE_YIELD_MS, ExecCommandArgs, GrepOutputArgs, KillSessionArgs, ListSessionsArgs,
    ModeArg, ReadOutputArgs, StreamArg, WriteStdinArgs,
};

const INSTRUCTIONS: &str = "\
Stockade runs shell commands for you and keeps every byte they print on disk. Run commands with \
exec_command; never pipe output into head/tail/grep to shorten it: answers are already bounded, \
and read_output (with after = next_cursor) or grep_output show the rest. Long-running commands \
keep running as sessions (sh-N) that survive restarts of this client: follow them with \
read_output, type into tty sessions with write_stdin, stop them with kill_session (the whole \
process tree), find them with list_sessions.";

/// The Stockade MCP server: a [`ServerHandler`] over a [`Backend`].
#[derive(Debug, Clone)]
pub struct StockadeMcp {
    backend: Backend,
    tools: std::sync::Arc<Vec<Tool>>,
    answers: Answers,
}

impl StockadeMcp {
    /// A server whose tools call the daemon behind `backend`, answering in text only.
    pub fn new(backend: Backend) -> StockadeMcp {
        StockadeMcp::with_answers(backend, Answers::default())
    }

    /// A server whose answers carry what `answers` says.
    pub fn with_answers(backend: Backend, answers: Answers) -> StockadeMcp {
        let mut all = tools::all();
        if !answers.structured {
            for tool in &mut all {
                tool.output_schema = None;
            }
        }
        StockadeMcp { backend, tools: std::sync::Arc::new(all), answers }
    }

    /// Run one tool. `Err` is a tool-level error (shown to the model); unknown tools are caught
    /// before this.
    async fn dispatch(&self, name: &str, args: Value) -> Result<CallToolResult, ToolError> {
        match name {
            tools::EXEC_COMMAND => self.exec_command(parse(name, args)?).await,
            tools::WRITE_STDIN => self.write_stdin(parse(name, args)?).await,
            tools::READ_OUTPUT => self.read_output(parse(name, args)?).await,
            tools::GREP_OUTPUT => self.grep_output(parse(name, args)?).await,
            tools::KILL_SESSION => self.kill_session(parse(name, args)?).await,
            tools::LIST_SESSIONS => {
                let _: ListSessionsArgs = parse(name, args)?;
                let r = self.backend.call(|c| c.call::<method::List>(NoParams {})).await?;
                ok(text::list(&r), &r)
            }
            other => Err(ToolError::Internal(format!("no handler for tool {other}"))),
        }
    }

    async fn exec_command(&self, a: ExecCommandArgs) -> Result<CallToolResult, ToolError> {
        let default_yield =
            if a.background { DEFAULT_BACKGROUND_YIELD_MS } else { DEFAULT_EXEC_YIELD_MS };
        let params = RunParams {
            command: a.cmd,
            cwd: a.workdir.map(Into::into),
            shell: a.shell.map(Into::into),
            login: a.login,
            background: a.background,
            timeout_ms: a.timeout_ms,
            yield_ms: Some(clamp_wait(a.yield_time_ms.unwrap_or(default_yield))),
            pty: a.tty.then(PtySize::default),
            source: a.source,
            max_bytes: a.max_output_tokens.map(tokens_to_bytes),
            max_lines: a.max_lines,
            ..RunParams::default()
        };
        let r = self.backend.call(move |c| c.call::<method::Run>(params)).await?;
        ok(text::run(&r), &r)
    }

    async fn write_stdin(&self, a: WriteStdinArgs) -> Result<CallToolResult, ToolError> {
        let yield_ms = clamp_wait(a.yield_time_ms.unwrap_or(DEFAULT_WRITE_YIELD_MS));
        let params = WriteParams {
            id: a.session_id,
            chars: (!a.chars.is_empty()).then_some(a.chars),
            yield_ms: Some(yield_ms),
            max_bytes: a.max_output_tokens.map(tokens_to_bytes),
            ..WriteParams::default()
        };
        let started = Instant::now();
        let r =
            self.backend.call(move |c| c.call::<method::Write>(params)).await.map_err(
                |e| match e {
                    ToolError::Daemon { code: code::NOT_SUPPORTED, message } => ToolError::Daemon {
                        code: code::NOT_SUPPORTED,
                        message: format!(
                            "{}. To type into a program, start it with exec_command tty: true",
                            message.trim_end_matches('.')
                        ),
                    },
                    other => other,
                },
            )?;
        ok(text::read(&r, started.elapsed()), &r)
    }

    async fn read_output(&self, a: ReadOutputArgs) -> Result<CallToolResult, ToolError> {
        let params = ReadParams {
            id: a.session_id,
            after: a.after,
            max_bytes: a.max_output_tokens.map(tokens_to_bytes),
            max_lines: a.max_lines,
            mode: a.mode.map(|m| match m {
                ModeArg::Delta => ReadMode::Delta,
                ModeArg::Tail => ReadMode::Tail,
                ModeArg::Head => ReadMode::Head,
                ModeArg::Middle => ReadMode::Middle,
            }),
            stream: a.stream.map(|s| match s {
                StreamArg::Stdout => Stream::Stdout,
                StreamArg::Stderr => Stream::Stderr,
            }),
            wait_ms: a.wait_ms.map(clamp_wait),
            ..ReadParams::default()
        };
        let started = Instant::now();
        let r = self.backend.call(move |c| c.call::<method::Read>(params)).await?;
        ok(text::read(&r, started.elapsed()), &r)
    }

    async fn grep_output(&self, a: GrepOutputArgs) -> Result<CallToolResult, ToolError> {
        let params = GrepParams {
            id: a.session_id,
            pattern: a.pattern,
            context: a.context.unwrap_or(0),
            max_matches: a.max_matches,
            ignore_case: a.ignore_case,
            timeout_ms: None,
        };
        let r = self.backend.call(move |c| c.call::<method::Grep>(params)).await?;
        ok(text::grep(&r), &r)
    }

    async fn kill_session(&self, a: KillSessionArgs) -> Result<CallToolResult, ToolError> {
        let params = KillParams { id: a.session_id, signal: a.signal, grace_ms: None };
        let r = self.backend.call(move |c| c.call::<method::Kill>(params)).await?;
        ok(text::kill(&r), &r)
    }
}

/// Decode a tool's arguments; a mismatch is the model's to fix, so it is a tool error.
fn parse<T: DeserializeOwned>(tool: &str, args: Value) -> Result<T, ToolError> {
    serde_json::from_value(args)
        .map_err(|e| ToolError::BadArguments { tool: tool.to_owned(), detail: e.to_string() })
}

/// A successful result: the text for the model, the daemon's answer as structured content.
fn ok<T: Serialize>(text: String, structured: &T) -> Result<CallToolResult, ToolError> {
    let value = serde_json::to_value(structured)
        .map_err(|e| ToolError::Internal(format!("cannot encode the answer: {e}")))?;
    let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
    result.structured_content = Some(value);
    Ok(result)
}

fn tokens_to_bytes(tokens: u64) -> usize {
    // No clamp here: the engine's one clamp (`stockade_core::limits`) bounds the view.
    usize::try_from(tokens.saturating_mul(BYTES_PER_TOKEN)).unwrap_or(usize::MAX)
}

fn clamp_wait(ms: u64) -> u64 {
    ms.min(MAX_WAIT_MS)
}

impl ServerHandler for StockadeMcp {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("stockade", env!("CARGO_PKG_VERSION")))
            .with_instructions(INSTRUCTIONS)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.tools.as_ref().clone()))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.tools.iter().find(|t| t.name == name).cloned()
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let name = request.name.as_ref();
        if !self.tools.iter().any(|t| t.name == name) {
            let known: Vec<&str> = self.tools.iter().map(|t| t.name.as_ref()).collect();
            return Err(ErrorData::invalid_params(
                format!("unknown tool {name:?}; the tools are {}", known.join(", ")),
                None,
            ));
        }
        let mut args = Value::Object(request.arguments.unwrap_or_default());
        let budget = context.peer.peer_info().and_then(|info| {
            Budget::for_client(&info.client_info.name, text::claude_tokens_from_env())
        });
        let note = budget.and_then(|b| b.fit(name, &mut args));
        let result = match self.dispatch(name, args).await {
            Ok(result) => result,
            Err(e) => {
                tracing::debug!(tool = name, error = %e, "tool error");
                CallToolResult::error(vec![ContentBlock::text(e.to_string())])
            }
        };
        Ok(text::deliver(result, &self.answers, note).into())
    }
}
