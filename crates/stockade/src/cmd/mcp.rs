//! `stockade mcp`: serve the daemon's sessions as MCP tools. This file only wires flags into
//! `stockade_mcp::serve` and SIGTERM/SIGINT into its cancellation token; the server is the
//! `stockade-mcp` library.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use stockade_mcp::{CancellationToken, Daemon, Transport};

use super::Global;

/// How long to wait for blocking work (a daemon call in flight) when stopping.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

/// `stockade mcp`.
#[derive(Debug, Args)]
pub struct McpArgs {
    /// Serve streamable HTTP on this address (e.g. 127.0.0.1:8765) at /mcp instead of stdio.
    #[arg(long, value_name = "ADDR")]
    pub http: Option<SocketAddr>,
    /// Bearer token HTTP clients must send (`Authorization: Bearer T`). Required for any
    /// address that is not loopback.
    #[arg(long, value_name = "T", env = "STOCKADE_MCP_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Read the bearer token from this file (first line), instead of --token.
    #[arg(long, value_name = "PATH", conflicts_with = "token")]
    pub token_file: Option<PathBuf>,
    /// Run a private daemon inside this process instead of the shared one: its sessions end
    /// when this server stops.
    #[arg(long)]
    pub embedded: bool,
}

pub fn mcp(global: &Global, mut args: McpArgs) -> anyhow::Result<ExitCode> {
    // `stockade mcp --remote URL --token-file F` over stdio: F is the remote door's token.
    let mut global = global.clone();
    if global.remote.is_some() && args.http.is_none() && global.remote_token_file.is_none() {
        global.remote_token_file = args.token_file.take();
    }
    if global.remote.is_some() && args.embedded {
        anyhow::bail!("--embedded runs a private daemon here; it cannot be combined with --remote");
    }
    let global = &global;
    let token = match (&args.token, &args.token_file) {
        (_, Some(path)) => Some(read_token(path)?),
        (Some(t), None) => Some(t.clone()),
        (None, None) => None,
    };
    if token.is_some() && args.http.is_none() {
        anyhow::bail!("--token and --token-file only apply with --http ADDR");
    }
    let transport = match args.http {
        Some(addr) => Transport::Http { addr, token },
        None => Transport::Stdio,
    };
    let daemon =
        if args.embedded { Daemon::Embedded } else { Daemon::Shared(global.connect_options()?) };
    let rt = super::runtime()?;
    let result = rt.block_on(async {
        let cancel = CancellationToken::new();
        let on_signal = cancel.clone();
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .context("cannot watch SIGTERM")?;
        let mut int = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
            .context("cannot watch SIGINT")?;
        tokio::spawn(async move {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
            on_signal.cancel();
        });
        stockade_mcp::serve(daemon, transport, cancel, |addr| {
            if let Some(addr) = addr {
                eprintln!(
                    "stockade mcp: listening on http://{addr}{}",
                    stockade_mcp::http::MCP_PATH
                );
            }
        })
        .await?;
        anyhow::Ok(())
    });
    // A blocking read of stdin cannot be interrupted: do not wait for it forever.
    rt.shutdown_timeout(SHUTDOWN_GRACE);
    result?;
    Ok(ExitCode::SUCCESS)
}

fn read_token(path: &std::path::Path) -> anyhow::Result<String> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the token file {}", path.display()))?;
    let token = text.lines().next().unwrap_or_default().trim().to_owned();
    if token.is_empty() {
        anyhow::bail!("the token file {} is empty", path.display());
    }
    Ok(token)
}
