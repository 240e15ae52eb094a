//! `stockade mcp`: serve the daemon's sessions as MCP tools. This file only wires flags into
//! `stockade_mcp::serve` and SIGTERM/SIGINT into its cancellation token; the server is the
//! `stockade-mcp` library.

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use stockade_mcp::http::{HttpGuard, HttpToken};
use stockade_mcp::{Answers, CancellationToken, Daemon, RunDefaults, Transport};

use crate::global::Global;

/// The generated token's file in the state directory.
const TOKEN_FILE: &str = "mcp-token";
/// How long to wait for blocking work when stopping. Short: the stdin reader is blocked in a
/// `read` nobody can interrupt, so every stop would wait this long, and agents SIGKILL a server
/// that has not exited ~100 ms after SIGINT. A daemon call still in flight is the daemon's to
/// finish; sessions do not depend on this process.
const SHUTDOWN_GRACE: Duration = Duration::from_millis(20);

/// `stockade mcp`.
#[derive(Debug, Args)]
pub struct McpArgs {
    /// Serve streamable HTTP on this address (e.g. 127.0.0.1:8765) at /mcp instead of stdio.
    #[arg(long, value_name = "ADDR")]
    pub http: Option<SocketAddr>,
    /// Bearer token HTTP clients must send (`Authorization: Bearer T`), at least 16
    /// characters. Without --token or --token-file, one is generated into a private file in the
    /// state directory (`mcp-token`) and its path printed.
    #[arg(long, value_name = "T", env = "STOCKADE_MCP_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Read the bearer token from this file, instead of --token: yours, mode 0600 (no access
    /// for group or others), one token of at least 16 characters.
    #[arg(long, value_name = "PATH", conflicts_with = "token")]
    #[arg(value_parser = crate::args::path_parser())]
    pub token_file: Option<PathBuf>,
    /// A browser origin allowed to call the HTTP server (e.g. `http://localhost:6274`);
    /// repeatable. Requests with any other `Origin` header are refused (403).
    #[arg(long, value_name = "ORIGIN")]
    pub allow_origin: Vec<String>,
    /// MCP sessions the HTTP server keeps at once; an `initialize` past this is answered 503
    /// with what to do (close sessions with HTTP DELETE, or wait: idle ones end after 5 min).
    /// [default: 256]
    #[arg(long, value_name = "N")]
    #[arg(value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=65_536))]
    pub max_sessions: Option<usize>,
    /// Event streams (`GET /mcp`) the HTTP server keeps open at once over all sessions (4 per
    /// session at most); one past this is answered 503.
    /// [default: 256]
    #[arg(long, value_name = "N")]
    #[arg(value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=65_536))]
    pub max_streams: Option<usize>,
    /// Run a private daemon inside this process instead of the shared one: its sessions end
    /// when this server stops.
    #[arg(long)]
    pub embedded: bool,
    /// Also send each answer as `structuredContent` (the daemon's result as JSON, described by
    /// each tool's output schema), for programs. Off by default: Codex and Claude Code hand
    /// their model the JSON instead of the text when it is there.
    #[arg(long)]
    pub structured: bool,
    /// TLS certificate chain (PEM) for --http: clients then use https://, as with the daemon's
    /// WebSocket door.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    #[arg(value_parser = crate::args::path_parser())]
    pub tls_cert: Option<PathBuf>,
    /// TLS private key (PEM) for --tls-cert.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    #[arg(value_parser = crate::args::path_parser())]
    pub tls_key: Option<PathBuf>,
    /// Serve --http on a non-loopback address without TLS: the token and every command's output
    /// cross the network in clear (only inside a network you trust). Without it or
    /// --tls-cert/--tls-key such an address is refused.
    #[arg(long)]
    pub insecure_plaintext: bool,
    /// The sandbox every command runs under and the most a tool call may ask for (a looser
    /// `sandbox` argument is refused); stated in `exec_command`'s description.
    #[command(flatten)]
    pub sandbox: crate::sandbox_args::SandboxArgs,
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
    if args.http.is_none() && http_only_flags(&args) {
        anyhow::bail!(
            "--token, --token-file, --allow-origin, --tls-cert/--tls-key, --insecure-plaintext, --max-sessions and --max-streams only apply with --http ADDR"
        );
    }
    let tls = match (args.tls_cert, args.tls_key) {
        (Some(cert), Some(key)) => Some(stockade_daemon::TlsFiles { cert, key }),
        _ => None,
    };
    let scheme = if tls.is_some() { "https" } else { "http" };
    let transport = match args.http {
        Some(addr) => {
            let token = match (&args.token, &args.token_file) {
                (_, Some(path)) => HttpToken::File(checked_token_file(path)?),
                (Some(t), None) => HttpToken::Given(t.clone()),
                (None, None) => HttpToken::File(default_token(global)?),
            };
            let guard = HttpGuard {
                token,
                reloader: stockade_daemon::Reloader::default(),
                allowed_origins: args.allow_origin,
                max_sessions: args.max_sessions.unwrap_or(stockade_mcp::http::DEFAULT_MAX_SESSIONS),
                max_streams: args.max_streams.unwrap_or(stockade_mcp::http::DEFAULT_MAX_STREAMS),
            };
            Transport::Http { addr, guard, tls }
        }
        None => Transport::Stdio,
    };
    if let Transport::Http { addr, guard, tls } = &transport
        && !addr.ip().is_loopback()
        && tls.is_none()
    {
        // A weak token is the first thing to fix, wherever the server listens.
        stockade_mcp::http::check_guard(guard)?;
        if !args.insecure_plaintext {
            anyhow::bail!(
                "--http {addr} is not loopback: give it --tls-cert and --tls-key (clients use https://), or add --insecure-plaintext if this network is private to you"
            );
        }
        let _ = writeln!(
            std::io::stderr(),
            "stockade mcp: warning: http://{addr} is not loopback and has no TLS (--insecure-plaintext): the token and all output cross the network in clear"
        );
    }
    let daemon =
        if args.embedded { Daemon::Embedded } else { Daemon::Shared(global.connect_options()?) };
    let defaults = run_defaults(global);
    let rt = crate::global::runtime()?;
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
        // SIGHUP reads the token file and the certificate and key again, as the daemon does.
        if let Transport::Http { guard, .. } = &transport {
            guard.reloader.on_sighup().context("cannot watch SIGHUP")?;
        }
        let sandbox = ceiling(args.sandbox.policy(), &defaults);
        let answers = Answers { structured: args.structured, sandbox };
        stockade_mcp::serve(daemon, transport, answers, defaults, cancel, |addr| {
            if let Some(addr) = addr {
                let _ = writeln!(
                    std::io::stderr(),
                    "stockade mcp: listening on {scheme}://{addr}{}",
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

/// This server's policy, the ceiling it sends with every run. Under `workspace-write` without
/// --writable-root, the project this server was started in is where commands may write: a
/// `workdir` elsewhere is refused, as the tool's description says.
/// Where calls run and the environment they start from. The agent started this server in its
/// project: every call runs there with this environment, whichever directory the shared daemon
/// was started from (and a stripped environment is said on stderr). A remote daemon's machine is
/// not ours: its own defaults apply.
fn run_defaults(global: &Global) -> RunDefaults {
    if global.remote.is_some() {
        return RunDefaults::default();
    }
    if let Some(note) = stripped_environment(std::env::vars_os().map(|(k, _)| k)) {
        let _ = writeln!(std::io::stderr(), "{note}");
    }
    RunDefaults { cwd: std::env::current_dir().ok(), base_env: Some(crate::caller::environment()) }
}

/// The variables an MCP client that filters the environment passes on (the MCP SDKs' default
/// set and Codex's allow-list): an environment of these only was stripped by the client.
const CLIENT_DEFAULT_VARIABLES: &[&str] = &[
    "HOME",
    "LOGNAME",
    "PATH",
    "SHELL",
    "TERM",
    "USER",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "TMPDIR",
    "TZ",
    "PWD",
    "SHLVL",
    "_",
    "__CF_USER_TEXT_ENCODING",
    "SYSTEMROOT",
];

/// The note `stockade mcp` prints on stderr when its client started it with a stripped
/// environment (nothing but [`CLIENT_DEFAULT_VARIABLES`]): commands then run without the
/// project's variables, and sessions go to the default state directory.
fn stripped_environment(names: impl Iterator<Item = std::ffi::OsString>) -> Option<String> {
    let names: Vec<std::ffi::OsString> = names.collect();
    let stripped =
        names.iter().all(|n| n.to_str().is_some_and(|n| CLIENT_DEFAULT_VARIABLES.contains(&n)));
    stripped.then(|| {
        let shown: Vec<String> = names.iter().map(|n| n.to_string_lossy().into_owned()).collect();
        format!(
            "stockade mcp: note: started with a stripped environment (only {}): commands run without your shell's exported variables, and sessions go to the default state directory, not a STOCKADE_HOME you set. Pass the variables in the client's configuration (Codex: env_vars = [\"STOCKADE_HOME\", ...]; the MCP SDKs: env={{...}}), as README.md shows.",
            if shown.is_empty() { "nothing".to_owned() } else { shown.join(", ") }
        )
    })
}

fn ceiling(
    policy: Option<stockade_proto::Sandbox>,
    defaults: &RunDefaults,
) -> Option<stockade_proto::Sandbox> {
    policy.map(|mut policy| {
        if policy.mode == stockade_proto::SandboxMode::WorkspaceWrite
            && policy.writable_roots.is_empty()
        {
            policy.writable_roots.extend(defaults.cwd.clone());
        }
        policy
    })
}

/// The token in `path`, under the same rules as the daemon's WebSocket door.
/// `path` once its token is known to be usable (it is read again whenever it changes).
fn checked_token_file(path: &Path) -> anyhow::Result<PathBuf> {
    stockade_proto::token::read_token_file(path)
        .map_err(|problem| anyhow::anyhow!("token file {}: {problem}", path.display()))?;
    Ok(path.to_owned())
}

/// The token of the state directory's `mcp-token` file, generated (0600) the first time; its
/// path is printed so clients can be given it.
fn default_token(global: &Global) -> anyhow::Result<PathBuf> {
    let path =
        checked_token_file(&crate::global::home_token_file(global.home.clone(), TOKEN_FILE)?)?;
    let _ = writeln!(
        std::io::stderr(),
        "stockade mcp: clients must send `Authorization: Bearer <token>` with the token in {}",
        path.display()
    );
    Ok(path)
}

/// Whether any flag that only means something with `--http` was given.
fn http_only_flags(args: &McpArgs) -> bool {
    args.token.is_some()
        || args.token_file.is_some()
        || !args.allow_origin.is_empty()
        || args.tls_cert.is_some()
        || args.insecure_plaintext
        || args.max_sessions.is_some()
        || args.max_streams.is_some()
}
