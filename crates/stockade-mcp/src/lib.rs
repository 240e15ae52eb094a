//! Stockade's MCP server: the daemon's sessions as tools an agent can call.
//!
//! # The model
//!
//! **transport → handler → daemon → answer.**
//!
//! * A transport carries MCP's JSON-RPC: stdio (the agent starts `stockade mcp` as a child
//!   process) or streamable HTTP (`--http 127.0.0.1:PORT`, behind a bearer token on every bind
//!   and an `Origin` check; see [`http`]). rmcp, the official Rust SDK, speaks the
//!   protocol.
//! * The handler ([`StockadeMcp`]) offers six tools named after Codex's (`exec_command`,
//!   `write_stdin`) and for what a model does with a log (`read_output`, `grep_output`,
//!   `kill_session`, `list_sessions`). Their descriptions are part of the product: they tell the
//!   model that the full output is kept, so it never needs `| head`, and how to read the rest.
//! * Each call becomes one request to the daemon through `stockade-client` (the same client the
//!   CLI uses), on tokio's blocking pool. The daemon owns every session, so sessions outlive the
//!   agent and this server: a restarted agent finds them with `list_sessions`. The daemon is
//!   started on demand; with [`Daemon::Embedded`] a private one runs inside this process and
//!   its sessions end with it.
//! * Each answer carries the Codex-style text a model reads (`Exit code: 0` or `Process running
//!   with session ID sh-3`, `Wall time`, `Output:`; the notice of what was left out before and
//!   after the output) and nothing else: agents hand their model `structuredContent` instead
//!   of the text when it is there. With [`Answers::structured`] (`--structured`, for programs)
//!   the daemon's `*Result` also goes out as `structuredContent`, described by each tool's
//!   `outputSchema`. For an agent this server knows (`clientInfo.name`), the view is bounded to
//!   fit what that agent passes on to its model (`budget.rs`). A failure the model can act on
//!   (unknown session, bad regex, a limit, something not supported) is a tool result with
//!   `isError: true` and one sentence saying what to do; only protocol problems (an unknown
//!   tool) are JSON-RPC errors.

#![deny(missing_docs)]

mod backend;
mod budget;
mod error;
pub mod http;
mod liberal;
mod retry;
mod schema;
mod server;
mod stdio;
mod text;
pub mod tools;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;

use rmcp::ServiceExt as _;
use stockade_client::ConnectOptions;
use stockade_daemon::DaemonConfig;

pub use backend::Backend;
pub use error::{ServeError, ToolError};
pub use server::StockadeMcp;
pub use text::Answers;
pub use tokio_util::sync::CancellationToken;

/// Which daemon the tools use.
#[derive(Debug, Clone)]
pub enum Daemon {
    /// The shared daemon of a state directory, started on demand (unless the options say not
    /// to). Sessions survive this server.
    Shared(ConnectOptions),
    /// A private daemon inside this process, in a fresh temporary state directory removed on
    /// exit. Its sessions are terminated when the server stops.
    Embedded,
}

/// Where an `exec_command` runs and what environment it starts from when the call does not
/// say: the directory and environment `stockade mcp` was started with — the agent's project —
/// so every project sharing one daemon runs in its own place, not where the daemon was first
/// started. Empty (the daemon's own) for a remote daemon, whose machine is not ours.
#[derive(Debug, Clone, Default)]
pub struct RunDefaults {
    /// The directory a call without `workdir` runs in (and a relative `workdir` is taken from).
    pub cwd: Option<PathBuf>,
    /// The environment every call starts from instead of the daemon's.
    pub base_env: Option<BTreeMap<String, String>>,
}

/// How clients reach this server.
#[derive(Debug, Clone)]
pub enum Transport {
    /// MCP over stdin/stdout (one client: the process that started us).
    Stdio,
    /// Streamable HTTP on `addr` at [`http::MCP_PATH`].
    Http {
        /// Where to listen.
        addr: SocketAddr,
        /// The bearer token every request must carry, and the browser origins allowed.
        guard: http::HttpGuard,
        /// Serve HTTPS with this certificate and key (PEM), as the daemon's WebSocket door.
        tls: Option<stockade_daemon::TlsFiles>,
    },
}

/// Serve MCP on `transport` until the client goes away (stdio) or `cancel` fires. With
/// [`Daemon::Embedded`], the private daemon is stopped (its sessions terminated) before this
/// returns. `on_ready` is called once the server can take requests, with the HTTP address.
pub async fn serve(
    daemon: Daemon,
    transport: Transport,
    answers: Answers,
    defaults: RunDefaults,
    cancel: CancellationToken,
    on_ready: impl FnOnce(Option<SocketAddr>),
) -> Result<(), ServeError> {
    if let Transport::Http { guard, .. } = &transport {
        http::check_guard(guard)?;
    }
    let embedded = match daemon {
        Daemon::Shared(opts) => {
            let backend = Backend::new(opts);
            return serve_with(backend, transport, answers, defaults, cancel, on_ready).await;
        }
        Daemon::Embedded => Embedded::start()?,
    };
    let result =
        serve_with(embedded.backend(), transport, answers, defaults, cancel, on_ready).await;
    embedded.stop().await;
    result
}

async fn serve_with(
    backend: Backend,
    transport: Transport,
    answers: Answers,
    defaults: RunDefaults,
    cancel: CancellationToken,
    on_ready: impl FnOnce(Option<SocketAddr>),
) -> Result<(), ServeError> {
    let server = StockadeMcp::with_answers(backend.clone(), answers).with_defaults(defaults);
    match transport {
        Transport::Stdio => {
            on_ready(None);
            let gone = CancellationToken::new();
            let pipes = stdio::filtered(tokio::io::stdin(), tokio::io::stdout(), gone.clone());
            let running = server
                .serve_with_ct(pipes, cancel)
                .await
                .map_err(|e| ServeError::Transport(e.to_string()))?;
            tokio::select! {
                done = running.waiting() => {
                    done.map_err(|e| ServeError::Transport(e.to_string()))?;
                }
                // The client died mid-call: nobody reads the answers, and the sessions run on
                // in the daemon.
                () = gone.cancelled() => {}
            }
            Ok(())
        }
        Transport::Http { addr, guard, tls } => {
            hide_secrets(&backend, &guard, tls.as_ref()).await?;
            http::serve(server, addr, guard, tls, cancel, |bound| on_ready(Some(bound))).await
        }
    }
}

/// Tells the daemon (a local one: a remote daemon's sandboxes are on another machine) to keep
/// this server's token file and TLS key from every sandboxed command, as it keeps its own doors'
/// secrets: whoever reads the token can run commands here unsandboxed. A daemon that cannot be
/// told is a server that does not start.
async fn hide_secrets(
    backend: &Backend,
    guard: &http::HttpGuard,
    tls: Option<&stockade_daemon::TlsFiles>,
) -> Result<(), ServeError> {
    if backend.options().remote.is_some() {
        return Ok(());
    }
    let mut paths = Vec::new();
    if let http::HttpToken::File(path) = &guard.token {
        paths.push(std::path::absolute(path).unwrap_or_else(|_| path.clone()));
    }
    if let Some(files) = tls {
        paths.push(std::path::absolute(&files.key).unwrap_or_else(|_| files.key.clone()));
    }
    if paths.is_empty() {
        return Ok(());
    }
    let params = stockade_proto::rpc::HideParams { paths };
    backend
        .call(move |c| c.call::<stockade_proto::rpc::method::Hide>(params))
        .await
        .map(drop)
        .map_err(|e| ServeError::HideSecrets { reason: e.to_string() })
}

/// A private daemon served by this process on a socket in a temporary state directory.
struct Embedded {
    dir: tempfile::TempDir,
    socket: PathBuf,
    token: CancellationToken,
    task: tokio::task::JoinHandle<Result<(), stockade_daemon::DaemonError>>,
}

impl Embedded {
    fn start() -> Result<Embedded, ServeError> {
        let dir = tempfile::Builder::new().prefix("stockade-mcp-").tempdir().map_err(|source| {
            ServeError::Io {
                context: "cannot create the embedded daemon's directory".into(),
                source,
            }
        })?;
        let daemon = stockade_daemon::Daemon::bind(DaemonConfig::new(dir.path()))?;
        let socket = daemon.socket().to_path_buf();
        let token = CancellationToken::new();
        let task = tokio::spawn(daemon.serve(token.clone()));
        Ok(Embedded { dir, socket, token, task })
    }

    fn backend(&self) -> Backend {
        let mut opts = ConnectOptions::new(self.dir.path());
        opts.socket = Some(self.socket.clone());
        opts.autostart = false;
        Backend::new(opts)
    }

    /// Stop the daemon (terminating its sessions), then remove its directory.
    async fn stop(self) {
        self.token.cancel();
        match self.task.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!("the embedded daemon stopped with an error: {e}"),
            Err(e) => tracing::warn!("the embedded daemon task failed: {e}"),
        }
        drop(self.dir);
    }
}
