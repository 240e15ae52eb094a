//! The MCP handler: `tools/list` answers with [`tools::all`]; `tools/call` decodes the arguments,
//! translates them into one daemon call and the daemon's answer into a tool result (Codex-style
//! text; with `--structured` also the daemon's `*Result` as `structuredContent`).
//!
//! Two things live per connection rather than in the daemon: where this connection's last
//! answer for each session ended (a `read_output` without `after` shows the newest output since
//! there, and says what it skipped), and the waits' progress notifications and cancellation.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ProgressNotificationParam, ProgressToken,
    ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{Peer, RequestContext};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use stockade_proto::rpc::{
    GrepParams, KillParams, ListParams, MAX_WAIT_MS, PtySize, ReadParams, RunParams, StateFilter,
    WriteParams, code, method,
};
use stockade_proto::{ReadMode, Stream};
use tokio_util::sync::CancellationToken;

use crate::backend::Backend;
use crate::budget::Budget;
use crate::error::ToolError;
use crate::text::{self, Answers, Continued};
use crate::tools::{
    self, BYTES_PER_TOKEN, DEFAULT_BACKGROUND_YIELD_MS, DEFAULT_EXEC_YIELD_MS, DEFAULT_LIST_LIMIT,
    DEFAULT_UNTIL_YIELD_MS, DEFAULT_WRITE_YIELD_MS, ExecCommandArgs, GrepOutputArgs,
    KillSessionArgs, ListSessionsArgs, MAX_LIST_LIMIT, ModeArg, ReadOutputArgs, StateArg,
    StreamArg, WriteStdinArgs,
};
use crate::{liberal, retry};

/// How often a waiting call with a `progressToken` sends `notifications/progress`: well inside
/// the usual 60 s client timeout, so `resetTimeoutOnProgress` keeps a long wait alive.
pub const PROGRESS_EVERY: Duration = Duration::from_secs(2);

const INSTRUCTIONS: &str = "\
Stockade runs shell commands for you and keeps every byte they print on disk. Run commands with \
exec_command; never pipe output into head/tail/grep to shorten it: answers are already bounded, \
and read_output (with after = next_cursor) or grep_output show the rest. Long-running commands \
keep running as sessions (sh-N) that survive restarts of this client: follow them with \
read_output (yield_time_ms collects output in one call; until=REGEX answers at a matching line), type into tty sessions with write_stdin, stop them with kill_session (the whole \
process tree), find them with list_sessions.";

/// The Stockade MCP server: a [`ServerHandler`] over a [`Backend`].
///
/// One value serves one connection. A clone serves a new connection (the HTTP transport clones
/// one per MCP session): it shares the backend and the tools, not the cursor memory.
#[derive(Debug)]
pub struct StockadeMcp {
    backend: Backend,
    tools: Arc<Vec<Tool>>,
    answers: Answers,
    /// Where calls run and the environment they start from, unless they say.
    defaults: Arc<crate::RunDefaults>,
    /// (Session id, stream read) → where this connection's last answer for it ended
    /// (`next_cursor`). Each stream has its own: a read of stderr continues where the last read
    /// of stderr ended, not where the last answer showing every stream did.
    cursors: Arc<Mutex<HashMap<CursorKey, u64>>>,
    /// The name the client last gave (in `initialize` or a request's `_meta`): requests of
    /// revisions without `initialize` may leave it out after the first.
    client: Arc<Mutex<Option<String>>>,
    /// This server's `exec_command` calls whose answers have not been delivered.
    calls: retry::Calls,
    /// This connection among the server's (a clone is another connection).
    connection: u64,
}

/// A session id and the stream a read filtered by (`None`: every stream).
type CursorKey = (String, Option<Stream>);

impl Clone for StockadeMcp {
    fn clone(&self) -> StockadeMcp {
        StockadeMcp {
            backend: self.backend.clone(),
            tools: Arc::clone(&self.tools),
            answers: self.answers.clone(),
            defaults: Arc::clone(&self.defaults),
            cursors: Arc::default(),
            client: Arc::default(),
            calls: self.calls.clone(),
            connection: self.calls.connection(),
        }
    }
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
        if let Some(policy) = &answers.sandbox {
            // The model learns the policy from the tool itself, not by trying.
            for tool in all.iter_mut().filter(|t| t.name == tools::EXEC_COMMAND) {
                let base = tool.description.clone().unwrap_or_default();
                tool.description = Some(format!(
                    "{base} Every command runs under {policy}: writes outside the writable roots and network access fail with `Permission denied`/`Operation not permitted`/`Read-only file system`; a looser `sandbox` is refused."
                ).into());
            }
        }
        // Unanswered calls outlive this server in the local daemon's state directory.
        let calls = match backend.options().remote {
            Some(_) => retry::Calls::default(),
            None => retry::Calls::kept_in(backend.options().home.join("mcp-calls")),
        };
        StockadeMcp {
            backend,
            tools: Arc::new(all),
            answers,
            defaults: Arc::default(),
            cursors: Arc::default(),
            client: Arc::default(),
            connection: calls.connection(),
            calls,
        }
    }

    /// This server with calls run where `defaults` say unless they name a `workdir`.
    pub fn with_defaults(mut self, defaults: crate::RunDefaults) -> StockadeMcp {
        self.defaults = Arc::new(defaults);
        self
    }

    /// The sandbox an `exec_command` asks for, and this server's policy as the run's ceiling:
    /// the daemon holds the run to it with its one rule (a run naming none runs under it). A
    /// `sandbox` that does not name the network keeps this server's.
    fn sandbox_for(
        &self,
        asked: Option<tools::AskedSandbox>,
    ) -> (Option<stockade_proto::Sandbox>, Option<stockade_proto::Sandbox>) {
        let ceiling = self.answers.sandbox.clone();
        let asked = asked.map(|a| match &ceiling {
            Some(c) if !a.names_network => {
                stockade_proto::Sandbox { network: c.network, ..a.policy }
            }
            _ => a.policy,
        });
        (asked, ceiling)
    }

    fn remember(&self, id: &str, stream: Option<Stream>, cursor: u64) {
        if let Ok(mut c) = self.cursors.lock() {
            c.insert((id.to_owned(), stream), cursor);
        }
    }

    fn remembered(&self, id: &str, stream: Option<Stream>) -> Option<u64> {
        self.cursors.lock().ok().and_then(|c| c.get(&(id.to_owned(), stream)).copied())
    }

    /// Who is calling: the request's `_meta` (revisions without `initialize`), else
    /// `initialize`'s `clientInfo`, else the last name this connection gave, else Claude Code
    /// when this server runs in its environment (it sets `CLAUDECODE`).
    fn client_name(&self, context: &RequestContext<RoleServer>) -> Option<String> {
        let given = context.client_info().map(|info| info.name);
        let mut last = self.client.lock().ok();
        match (given, last.as_deref_mut()) {
            (Some(name), Some(last)) => {
                *last = Some(name.clone());
                Some(name)
            }
            (Some(name), None) => Some(name),
            (None, last) => last.and_then(|l| l.clone()).or_else(|| {
                (std::env::var_os("CLAUDECODE").is_some_and(|v| v == "1"))
                    .then(|| "claude-code".to_owned())
            }),
        }
    }

    /// Run one tool. `Err` is a tool-level error (shown to the model); unknown tools are caught
    /// before this. `cancel` fires on `notifications/cancelled`: the wait stops, the session
    /// does not.
    async fn dispatch(
        &self,
        name: &str,
        args: Value,
        cancel: &CancellationToken,
    ) -> Result<CallToolResult, ToolError> {
        match name {
            tools::EXEC_COMMAND => self.exec_command(parse(name, args)?, cancel).await,
            tools::WRITE_STDIN => self.write_stdin(parse(name, args)?, cancel).await,
            tools::READ_OUTPUT => self.read_output(parse(name, args)?, cancel).await,
            tools::GREP_OUTPUT => self.grep_output(parse(name, args)?).await,
            tools::KILL_SESSION => self.kill_session(parse(name, args)?).await,
            tools::LIST_SESSIONS => self.list_sessions(parse(name, args)?).await,
            other => Err(ToolError::Internal(format!("no handler for tool {other}"))),
        }
    }

    async fn list_sessions(&self, a: ListSessionsArgs) -> Result<CallToolResult, ToolError> {
        let params = ListParams {
            limit: Some(a.limit.unwrap_or(DEFAULT_LIST_LIMIT).clamp(1, MAX_LIST_LIMIT)),
            state: a.state.map(|s| match s {
                StateArg::Running => StateFilter::Running,
                StateArg::Finished => StateFilter::Finished,
            }),
            source: a.source,
            idempotency_key: a.idempotency_key,
        };
        let r = self.backend.call(move |c| c.call::<method::List>(params)).await?;
        ok(text::list(&r), &r)
    }

    async fn exec_command(
        &self,
        a: ExecCommandArgs,
        cancel: &CancellationToken,
    ) -> Result<CallToolResult, ToolError> {
        let default_yield =
            if a.background { DEFAULT_BACKGROUND_YIELD_MS } else { DEFAULT_EXEC_YIELD_MS };
        // A relative `workdir` is taken from the server's directory, as a shell would.
        let cwd = match (a.workdir, &self.defaults.cwd) {
            (Some(dir), Some(base)) => Some(base.join(dir)),
            (Some(dir), None) => Some(dir.into()),
            (None, base) => base.clone(),
        };
        // One key per call: a retry naming it (after an answer that never came) gets the
        // session this call started instead of a second copy.
        let retried = a.idempotency_key.is_some();
        let key = a.idempotency_key.unwrap_or_else(|| stockade_client::new_idempotency_key("mcp"));
        let (sandbox, ceiling) = self.sandbox_for(a.sandbox);
        let params = RunParams {
            command: a.cmd,
            cwd,
            base_env: self.defaults.base_env.clone(),
            shell: a.shell.map(Into::into),
            login: a.login,
            // Always: a session outlives the call that started it. A cancelled, timed-out or
            // abandoned call, or this server's end, closes the daemon connection, and a
            // foreground run would be killed with it. The wait is the same either way.
            background: true,
            timeout_ms: a.timeout_ms,
            yield_ms: Some(clamp_wait(a.yield_time_ms.unwrap_or(default_yield))),
            pty: a.tty.then(PtySize::default),
            source: a.source,
            max_bytes: a.max_output_tokens.map(tokens_to_bytes),
            max_lines: a.max_lines,
            until: a.until,
            sandbox,
            ceiling,
            capture: a.capture.map(Into::into).unwrap_or_default(),
            idempotency_key: Some(key),
            ..RunParams::default()
        };
        self.run_or_follow(params, retried, cancel).await
    }

    /// Run `params`, or follow the session of an earlier call of the same shape whose answer
    /// never arrived (see [`retry`]).
    async fn run_or_follow(
        &self,
        params: RunParams,
        retried: bool,
        cancel: &CancellationToken,
    ) -> Result<CallToolResult, ToolError> {
        let shape = retry::Shape::of(&params);
        // A retry with its key is the daemon's to answer; without one, only a call of this
        // server whose answer never arrived is followed.
        let earlier = match self.calls.earlier(&shape, self.connection) {
            Some(e) if params.source.is_none() && !retried => {
                retry::still_running(&self.backend, &e.key).await.then_some(e)
            }
            _ => None,
        };
        let key = match &earlier {
            Some(e) => e.key.clone(),
            None => params.idempotency_key.clone().unwrap_or_default(),
        };
        let params = RunParams { idempotency_key: Some(key.clone()), ..params };
        let pending = self.calls.begin(&key, shape, self.connection);
        let r = self.backend.call_until(cancel, move |c| c.call::<method::Run>(params)).await;
        let r = match r {
            Err(ToolError::Cancelled) => {
                // Most clients drop this answer; one that shows it names the session.
                let found = retry::session_of(&self.backend, &key).await;
                return Err(found.map_or(ToolError::Cancelled, ToolError::CancelledRun));
            }
            other => {
                // An answer (or an error sentence naming the key) goes to the client.
                pending.answered();
                other.map_err(|e| {
                    e.name_the_key(|| {
                        format!(
                            "The command may have started: call exec_command again with the same cmd and idempotency_key \"{key}\" to get that session instead of a second copy (list_sessions with idempotency_key \"{key}\" shows it, or nothing)."
                        )
                    })
                })?
            }
        };
        self.remember(&r.id, None, r.view.next_cursor);
        let text = text::run(&r);
        match earlier {
            Some(e) => ok(format!("{}\n{text}", retry::note(&e, &r.id)), &r),
            None if retried && retry::died_with_daemon(&r.state) => {
                ok(format!("{}\n{text}", retry::died_note(&r.id)), &r)
            }
            None => ok(text, &r),
        }
    }

    async fn write_stdin(
        &self,
        a: WriteStdinArgs,
        cancel: &CancellationToken,
    ) -> Result<CallToolResult, ToolError> {
        let yield_ms = clamp_wait(a.yield_time_ms.unwrap_or(DEFAULT_WRITE_YIELD_MS));
        if a.chars.is_empty() && self.remembered(&a.session_id, None).is_some() {
            // An empty write is a poll (how Codex's models follow a command): the same
            // continued read as `read_output` without `after`, so a loud log is not paged.
            let read = ReadOutputArgs {
                session_id: a.session_id,
                after: None,
                mode: None,
                max_output_tokens: a.max_output_tokens,
                max_lines: None,
                yield_time_ms: Some(yield_ms),
                until: a.until,
                stream: None,
            };
            return self.read_output(read, cancel).await;
        }
        let typing = !a.chars.is_empty();
        let key = a.idempotency_key.unwrap_or_else(|| stockade_client::new_idempotency_key("mcp"));
        let params = WriteParams {
            id: a.session_id,
            chars: typing.then_some(a.chars),
            yield_ms: Some(yield_ms),
            max_bytes: a.max_output_tokens.map(tokens_to_bytes),
            until: a.until,
            idempotency_key: typing.then(|| key.clone()),
            ..WriteParams::default()
        };
        let r = self
            .backend
            .call_until(cancel, move |c| c.call::<method::Write>(params))
            .await
            .map_err(|e| match e {
                lost @ ToolError::Lost(_) if typing => lost.name_the_key(|| {
                    format!(
                        "The input may have been typed: call write_stdin again with the same chars and idempotency_key \"{key}\" to get its answer without typing it twice."
                    )
                }),
                ToolError::Daemon { code: code::NOT_SUPPORTED, message } => ToolError::Daemon {
                    code: code::NOT_SUPPORTED,
                    message: format!(
                        "{}. To type into a program, start it with exec_command tty: true",
                        message.trim_end_matches('.')
                    ),
                },
                other => other,
            })?;
        self.remember(&r.id, None, r.view.next_cursor);
        ok(text::read(&r, None), &r)
    }

    async fn read_output(
        &self,
        a: ReadOutputArgs,
        cancel: &CancellationToken,
    ) -> Result<CallToolResult, ToolError> {
        // No cursor and no mode: continue where this connection's last answer ended, with the
        // newest output since then (a tail from that cursor), so a follower of a loud log sees
        // what is new instead of paging through it; `after` pages through every byte. A
        // stream filter keeps paging (the engine's tail-since counts the whole log).
        let stream = a.stream.map(|s| match s {
            StreamArg::Stdout => Stream::Stdout,
            StreamArg::Stderr => Stream::Stderr,
        });
        let continued = if a.after.is_none() && a.mode.is_none() {
            self.remembered(&a.session_id, stream)
        } else {
            None
        };
        let tail_since = continued.filter(|_| a.stream.is_none()).map(|_| ReadMode::Tail);
        let yield_ms =
            a.yield_time_ms.or_else(|| a.until.is_some().then_some(DEFAULT_UNTIL_YIELD_MS));
        let params = ReadParams {
            id: a.session_id,
            after: a.after.or(continued),
            max_bytes: a.max_output_tokens.map(tokens_to_bytes),
            max_lines: a.max_lines,
            mode: a
                .mode
                .map(|m| match m {
                    ModeArg::Delta => ReadMode::Delta,
                    ModeArg::Tail => ReadMode::Tail,
                    ModeArg::Head => ReadMode::Head,
                    ModeArg::Middle => ReadMode::Middle,
                })
                .or(tail_since),
            stream,
            wait_ms: yield_ms.map(clamp_wait),
            collect: true,
            until: a.until,
            ..ReadParams::default()
        };
        let r = self.backend.call_until(cancel, move |c| c.call::<method::Read>(params)).await?;
        self.remember(&r.id, stream, r.view.next_cursor);
        let text = text::read(&r, continued.map(|cursor| Continued { cursor }));
        match (stream, r.view.stream) {
            (Some(asked), Some(one @ (Stream::Combined | Stream::Pty))) => {
                ok(format!("{}\n{text}", text::unsplit(asked, one)), &r)
            }
            _ => ok(text, &r),
        }
    }

    /// Run `work`, sending `notifications/progress` for `token` every [`PROGRESS_EVERY`] until
    /// it is done (with the session's bytes and lines so far, when the call names a session).
    async fn with_progress(
        &self,
        work: impl Future<Output = Result<CallToolResult, ToolError>>,
        token: ProgressToken,
        session: Option<String>,
        peer: &Peer<RoleServer>,
    ) -> Result<CallToolResult, ToolError> {
        let started = Instant::now();
        let mut tick =
            tokio::time::interval_at(tokio::time::Instant::now() + PROGRESS_EVERY, PROGRESS_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut work = std::pin::pin!(work);
        loop {
            tokio::select! {
                result = &mut work => return result,
                _ = tick.tick() => {
                    let message = self.progress_message(session.as_deref(), started).await;
                    let param = ProgressNotificationParam::new(
                        token.clone(),
                        started.elapsed().as_secs_f64().floor(),
                    )
                    .with_message(message);
                    if let Err(e) = peer.notify_progress(param).await {
                        tracing::debug!("cannot send a progress notification: {e}");
                    }
                }
            }
        }
    }

    async fn progress_message(&self, session: Option<&str>, started: Instant) -> String {
        let waited = started.elapsed().as_secs();
        let Some(id) = session else { return format!("waited {waited} s for the command") };
        let params = ReadParams {
            id: id.to_owned(),
            mode: Some(ReadMode::Tail),
            max_bytes: Some(1),
            max_lines: Some(1),
            ..ReadParams::default()
        };
        let peek = self.backend.call(move |c| c.call::<method::Read>(params));
        match tokio::time::timeout(Duration::from_secs(1), peek).await {
            Ok(Ok(r)) => format!(
                "waited {waited} s; {id} has printed {} bytes, {} lines so far ({})",
                r.view.total_bytes,
                r.view.total_lines,
                r.state.name()
            ),
            _ => format!("waited {waited} s on {id}"),
        }
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
    // No clamp here: the engine's one clamp (`stockade_log::limits`) bounds the view.
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
        let budget = self
            .client_name(&context)
            .and_then(|client| Budget::for_client(&client, text::claude_tokens_from_env()));
        let ignored = match self.tools.iter().find(|t| t.name == name) {
            Some(tool) => liberal::strip_unknown(tool, &mut args),
            None => Vec::new(),
        };
        let notes: Vec<String> = liberal::ignored_note(name, &ignored)
            .into_iter()
            .chain(budget.and_then(|b| b.fit(name, &mut args)))
            .collect();
        let note = (!notes.is_empty()).then(|| notes.join("\n"));
        let session = args.get("session_id").and_then(Value::as_str).map(str::to_owned);
        let work = self.dispatch(name, args, &context.ct);
        let outcome = match context.meta.get_progress_token() {
            Some(token) => self.with_progress(work, token, session, &context.peer).await,
            None => work.await,
        };
        let mut result = match outcome {
            Ok(result) => result,
            Err(e) => {
                tracing::debug!(tool = name, error = %e, "tool error");
                CallToolResult::error(vec![ContentBlock::text(e.to_string())])
            }
        };
        liberal::fit_listing(name, budget, &mut result);
        Ok(text::deliver(result, &self.answers, note).into())
    }
}
