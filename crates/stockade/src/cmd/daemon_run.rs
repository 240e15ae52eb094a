//! `stockade daemon run`: serve the engine over the Unix socket in the foreground. This file only
//! wires flags into `stockade_daemon::DaemonConfig` and SIGTERM/SIGINT into its cancellation
//! token; the daemon is the `stockade-daemon` library.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use stockade_daemon::{CancellationToken, Daemon, DaemonConfig, MetricsConfig, TlsFiles, WsConfig};
use stockade_engine::StateDir;
use stockade_proc::{CgroupMode, ContainmentConfig, KeeperExe};

use crate::args::{parse_age, parse_ms, parse_size_u64, parse_size_usize, path_parser};

/// `stockade daemon run`: how the daemon is set up.
/// When sessions run under a keeper (`daemon run --session-keeper`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum KeeperWhen {
    /// Where sessions get no cgroup.
    #[default]
    Auto,
    /// Every session.
    Always,
    /// No session.
    Never,
}

/// What a sandboxed session must get (`daemon run --isolation`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Isolation {
    /// Namespaces where the kernel gives them, else Landlock and seccomp alone.
    #[default]
    Best,
    /// Namespaces, or the run is refused.
    Full,
}

#[derive(Debug, Clone, Default, Args)]
pub struct DaemonRunArgs {
    /// Socket path (default: $STOCKADE_HOME/stockade.sock).
    #[arg(long, value_name = "PATH", value_parser = path_parser())]
    pub socket: Option<PathBuf>,
    /// The sandbox of every run that names none, and the most any run may ask for (a request
    /// for more — a looser mode, network under `none`, a higher limit — is refused).
    #[command(flatten)]
    pub sandbox: crate::sandbox_args::SandboxArgs,
    /// Do not use a cgroup even where one is available.
    #[arg(long)]
    pub no_cgroup: bool,
    /// What a sandboxed session must get (Linux): `best`, namespaces of its own where the
    /// kernel gives them, else Landlock and seccomp alone; `full`, namespaces or the run is
    /// refused.
    #[arg(long, value_enum, value_name = "LEVEL", default_value_t = Isolation::Best)]
    pub isolation: Isolation,
    /// When to run every session under its own keeper (a child subreaper between the daemon and
    /// the command that stays until every process of the session is gone), so that without a
    /// cgroup even processes orphaned at once (`setsid`, `env -i`, closed stdio, double forks)
    /// are found and killed, each named in the session that made it. `auto`: when sessions get
    /// no cgroup; `always`; `never`. `--session-keeper` alone is `always`. Linux only; the
    /// keeper is a static executable of under 4 KiB on x86_64.
    #[arg(
        long,
        value_enum,
        value_name = "WHEN",
        num_args = 0..=1,
        require_equals = true,
        default_value_t = KeeperWhen::Auto,
        default_missing_value = "always"
    )]
    pub session_keeper: KeeperWhen,
    /// Grace between SIGTERM and SIGKILL when terminating a tree, in milliseconds [default: 2000].
    #[arg(long, value_name = "MS", value_parser = parse_ms, allow_hyphen_values = true)]
    pub grace_ms: Option<u64>,
    /// Most sessions running at once [default: what the open-file and process limits allow, at
    /// least 1024]. The daemon raises its open-file limit to the hard limit at start and counts
    /// 8 descriptors per running session.
    #[arg(long, value_name = "N")]
    pub max_running: Option<usize>,
    /// Most finished sessions kept; the oldest finished are forgotten first [default: 1000].
    #[arg(long, value_name = "N")]
    pub max_finished: Option<usize>,
    /// Most bytes the hot tails of running sessions may hold together; a hot tail holds bytes only
    /// after its spool stopped (disk cap or disk full) [default: 512MiB].
    #[arg(long, value_name = "SIZE", value_parser = parse_size_u64)]
    pub hot_tail_budget: Option<u64>,
    /// Default hot-tail size per session: the newest bytes kept in memory once the spool stops
    /// (disk cap or disk full); until then output goes only to the spool [default: 1MiB].
    #[arg(long, value_name = "SIZE", value_parser = parse_size_usize)]
    pub retained_cap: Option<usize>,
    /// Default disk cap per session [default: 1GiB].
    #[arg(long, value_name = "SIZE", value_parser = parse_size_u64)]
    pub disk_cap: Option<u64>,
    /// Largest disk cap a session may ask for [default: 16GiB].
    #[arg(long, value_name = "SIZE", value_parser = parse_size_u64)]
    pub max_disk_cap: Option<u64>,
    /// Most bytes all kept spools may hold; new runs are refused beyond it [default: 64GiB].
    #[arg(long, value_name = "SIZE", value_parser = parse_size_u64)]
    pub disk_budget: Option<u64>,
    /// Also serve the same JSON-RPC over WebSocket on ADDR (e.g. 127.0.0.1:8765) for remote
    /// clients (`stockade --remote`); every connection must send `Authorization: Bearer <token>`.
    /// The same port answers GET /healthz, /readyz (no token) and /metrics (token). A
    /// non-loopback ADDR needs --tls-cert/--tls-key (wss://) or --insecure-plaintext.
    #[arg(long, value_name = "ADDR")]
    pub ws: Option<std::net::SocketAddr>,
    /// The file holding the WebSocket token (mode 0600 or stricter, not empty); also asked of
    /// scrapes on a non-loopback --metrics address. Read again on SIGHUP and when it changes
    /// (so are --metrics-token-file, --tls-cert and --tls-key); sessions are never ended by it.
    #[arg(long, value_name = "FILE", value_parser = path_parser())]
    pub token_file: Option<PathBuf>,
    /// TLS certificate chain (PEM) for the WebSocket door (clients then use wss://), the
    /// --metrics address and the --e2b door (https://).
    #[arg(long, value_name = "FILE", requires = "tls_key", value_parser = path_parser())]
    pub tls_cert: Option<PathBuf>,
    /// TLS private key (PEM) for --tls-cert.
    #[arg(long, value_name = "FILE", requires = "tls_cert", value_parser = path_parser())]
    pub tls_key: Option<PathBuf>,
    /// Serve the WebSocket door (or --metrics, --e2b) without TLS on a non-loopback address (the token
    /// and all output cross the network in clear: only inside a network you trust, e.g. a pod's
    /// own).
    #[arg(long)]
    pub insecure_plaintext: bool,
    /// Also serve GET /metrics, /healthz and /readyz on ADDR, apart from the door (e.g.
    /// 127.0.0.1:9433 for a scraper in the same pod). On a loopback ADDR /metrics needs no token;
    /// otherwise it needs --token-file's token and TLS or --insecure-plaintext, as the door.
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<std::net::SocketAddr>,
    /// A second token (a file under the same rules as --token-file) that reads GET /metrics, on
    /// the door and on --metrics, and nothing else: it opens no WebSocket (401), so a scraper
    /// never holds the token that runs commands. --token-file's token still reads /metrics too.
    #[arg(long, value_name = "FILE", value_parser = path_parser())]
    pub metrics_token_file: Option<PathBuf>,
    /// Append one JSON line per accepted connection and per command-starting or session-ending
    /// request (run, kill, write, restart, forget, cleanup, shutdown, schedule.add/fire/remove)
    /// to FILE: time, peer (uid or address), door, token id (first 8 hex of the token's
    /// SHA-256), method, session, command. Off unless given.
    #[arg(long, value_name = "FILE", value_parser = path_parser())]
    pub audit_log: Option<PathBuf>,
    /// Rotate the audit log to FILE.1 (replacing it) past this size [default: 16MiB].
    #[arg(long, value_name = "SIZE", value_parser = parse_size_u64, requires = "audit_log")]
    pub audit_log_max_bytes: Option<u64>,
    /// Also serve E2B's in-sandbox API on ADDR (envd's process and filesystem services, /files,
    /// /health), so the unmodified `e2b` SDKs drive this daemon; given without ADDR, envd's own
    /// 127.0.0.1:49983. Every request but /health must carry a token in X-Access-Token: the one
    /// in --token-file, or one made in the state directory's `e2b-token` file (0600, its path
    /// printed at start), since every local user can reach loopback. A non-loopback ADDR needs
    /// --tls-cert/--tls-key (https://) or --insecure-plaintext. See docs/e2b.md.
    #[arg(long, value_name = "ADDR", num_args = 0..=1, default_missing_value = "127.0.0.1:49983")]
    pub e2b: Option<std::net::SocketAddr>,
    /// Delete finished sessions (record and spool) this long after they ended: a number with a
    /// unit, s, m, h or d (e.g. 12h, 7d) [default: 7d].
    #[arg(long, value_name = "AGE", value_parser = parse_age)]
    pub retention: Option<std::time::Duration>,
    /// How often the retention janitor sweeps, in milliseconds (it also sweeps at start-up)
    /// [default: 3600000]. Tests shorten it.
    #[arg(long, value_name = "MS", hide = true, value_parser = parse_ms)]
    pub sweep_interval_ms: Option<u64>,
}

impl DaemonRunArgs {
    /// The certificate and key every network listener serves, when given.
    fn tls(&self) -> Option<TlsFiles> {
        self.tls_cert.clone().zip(self.tls_key.clone()).map(|(cert, key)| TlsFiles { cert, key })
    }
}

/// How long a stopped daemon waits for its blocking threads before the process exits anyway.
const RUNTIME_SHUTDOWN: Duration = Duration::from_secs(2);

pub fn run(home: Option<PathBuf>, args: DaemonRunArgs) -> anyhow::Result<ExitCode> {
    let home = match home {
        Some(h) => h,
        None => StateDir::locate()?,
    };
    if args.ws.is_some() && args.token_file.is_none() {
        anyhow::bail!(
            "--ws needs --token-file FILE: every WebSocket connection must present the token in that file (make one with `openssl rand -hex 32 > FILE; chmod 600 FILE`)"
        );
    }
    if args.ws.is_none() && args.metrics.is_none() && args.e2b.is_none() {
        let flag = [
            (args.token_file.is_some(), "--token-file"),
            (args.metrics_token_file.is_some(), "--metrics-token-file"),
            (args.tls_cert.is_some(), "--tls-cert"),
            (args.insecure_plaintext, "--insecure-plaintext"),
        ]
        .into_iter()
        .find_map(|(given, flag)| given.then_some(flag));
        if let Some(flag) = flag {
            anyhow::bail!(
                "{flag} is for the network listeners: add --ws ADDR (the WebSocket door) or --metrics ADDR, or leave {flag} out"
            );
        }
    }
    // Before the limits are computed: the default --max-running follows the fd limit. Where the
    // hard limit cannot be reached the old soft one stays, and the fd budget refuses runs with a
    // sentence naming it.
    let _ = stockade_proc::fd_budget::raise_nofile_limit();
    // Every door has a token: the E2B door's is the --token-file, or one made in the home.
    let e2b_token = match (&args.e2b, &args.token_file) {
        (Some(_), Some(file)) => Some(file.clone()),
        (Some(_), None) => {
            Some(crate::global::home_token_file(Some(home.clone()), E2B_TOKEN_FILE)?)
        }
        (None, _) => None,
    };
    let mut config = config(home, &args);
    config.e2b = args.e2b.zip(e2b_token).map(|(addr, token_file)| stockade_daemon::E2bConfig {
        addr,
        token_file,
        tls: args.tls(),
        insecure_plaintext: args.insecure_plaintext,
    });
    let rt = crate::global::runtime()?;
    let served = rt.block_on(async {
        let mut daemon = Daemon::bind(config)?;
        let e2b = start_e2b(&mut daemon, args.token_file.is_none());
        // One readiness line (tests and supervisors wait for "listening on").
        let metrics = match daemon.metrics_addr() {
            None => String::new(),
            Some((addr, token)) => {
                let scheme = if args.tls_cert.is_some() { "https" } else { "http" };
                let token = if token { "token required" } else { "no token: loopback" };
                format!(", metrics on {scheme}://{addr}/metrics ({token})")
            }
        };
        match daemon.ws_addr() {
            None => eprintln!(
                "stockade daemon: listening on {}{metrics}, pid {}",
                daemon.socket().display(),
                daemon.pid()
            ),
            Some(addr) => {
                let scheme = if args.tls_cert.is_some() { "wss" } else { "ws" };
                eprintln!(
                    "stockade daemon: listening on {} and {scheme}://{addr} (token required){metrics}, pid {}",
                    daemon.socket().display(),
                    daemon.pid()
                );
                if !addr.ip().is_loopback() && args.tls_cert.is_none() {
                    eprintln!(
                        "stockade daemon: warning: ws://{addr} is not loopback and has no TLS (--insecure-plaintext): the token and all traffic cross the network in clear; use --tls-cert/--tls-key unless this network is private to you"
                    );
                }
            }
        }
        let token = CancellationToken::new();
        let on_signal = token.clone();
        let mut signals = signals().context("cannot watch SIGTERM/SIGINT")?;
        tokio::spawn(async move {
            signals.recv().await;
            on_signal.cancel();
        });
        daemon.reloader().on_sighup().context("cannot watch SIGHUP")?;
        let served = daemon.serve(token).await;
        if let Some(stop) = e2b {
            stop.cancel();
        }
        served?;
        anyhow::Ok(())
    });
    // Blocking work still running (a search that has not reached its next cancel check) must not
    // keep a stopped daemon alive; the daemon lock goes with the process.
    rt.shutdown_timeout(RUNTIME_SHUTDOWN);
    served?;
    Ok(ExitCode::SUCCESS)
}

/// The name of the E2B door's token file in the home, made when `--e2b` has no `--token-file`.
const E2B_TOKEN_FILE: &str = "e2b-token";

/// Serves the E2B door the daemon bound, when asked; the token cancels it. `made` says the
/// token is one made in the home (its path is printed, for the clients).
fn start_e2b(daemon: &mut Daemon, made: bool) -> Option<CancellationToken> {
    let door = daemon.take_e2b()?;
    let scheme = if door.has_tls() { "https" } else { "http" };
    let addr = door.addr();
    let token = if made {
        format!(
            "X-Access-Token required: the token is in {}",
            daemon.home().join(E2B_TOKEN_FILE).display()
        )
    } else {
        "X-Access-Token required".to_owned()
    };
    eprintln!("stockade daemon: E2B door on {scheme}://{addr} ({token})");
    if !addr.ip().is_loopback() && !door.has_tls() {
        eprintln!(
            "stockade daemon: warning: http://{addr} is not loopback and has no TLS (--insecure-plaintext): the token and all traffic cross the network in clear; use --tls-cert/--tls-key unless this network is private to you"
        );
    }
    let stop = CancellationToken::new();
    tokio::spawn(stockade_e2b::serve(door, stop.clone()));
    Some(stop)
}

fn config(home: PathBuf, args: &DaemonRunArgs) -> DaemonConfig {
    let mut config = DaemonConfig::new(home);
    config.socket = args.socket.clone();
    config.ws = args.ws.zip(args.token_file.clone()).map(|(addr, token_file)| {
        let mut ws = WsConfig::new(addr, token_file);
        ws.tls = args.tls();
        ws.insecure_plaintext = args.insecure_plaintext;
        ws
    });
    config.metrics = args.metrics.map(|addr| MetricsConfig {
        addr,
        token_file: args.token_file.clone(),
        tls: args.tls(),
        insecure_plaintext: args.insecure_plaintext,
    });
    config.metrics_token_file = args.metrics_token_file.clone();
    config.audit_log = args.audit_log.clone();
    if let Some(max) = args.audit_log_max_bytes {
        config.audit_log_max_bytes = max;
    }
    if let Some(policy) = args.sandbox.policy() {
        config.sandbox.default = policy.clone();
        config.sandbox.ceiling = policy;
    }
    stockade_proc::namespaces::set_required(args.isolation == Isolation::Full);
    stockade_proc::namespaces::set_no_keepers(args.session_keeper == KeeperWhen::Never);
    if args.no_cgroup {
        config.containment =
            ContainmentConfig { cgroup: CgroupMode::Off, ..ContainmentConfig::default() };
    }
    // Sessions run under a keeper (by default only where they get no cgroup): the tiny one
    // embedded in stockade-proc where there is one (x86_64 Linux), else this executable (see
    // `stockade_proc::run_if_keeper`).
    if args.session_keeper != KeeperWhen::Never {
        config.containment.keeper = Some(if stockade_proc::EMBEDDED_KEEPER {
            KeeperExe::Embedded
        } else {
            KeeperExe::Path(crate::KEEPER_EXE.into())
        });
        config.containment.keeper_with_cgroup = args.session_keeper == KeeperWhen::Always;
    }
    if let Some(ms) = args.grace_ms {
        config.grace = Duration::from_millis(ms);
    }
    if let Some(cap) = args.retained_cap {
        config.retained_cap = cap;
    }
    if let Some(cap) = args.disk_cap {
        config.disk_cap = cap;
    }
    let limits = &mut config.limits;
    if let Some(n) = args.max_running {
        limits.max_running = n;
    }
    if let Some(n) = args.max_finished {
        limits.max_finished = n;
    }
    if let Some(b) = args.hot_tail_budget {
        limits.hot_tail_budget = b;
    }
    if let Some(b) = args.max_disk_cap {
        limits.max_disk_cap = b;
    }
    if let Some(b) = args.disk_budget {
        limits.disk_budget = b;
    }
    if let Some(age) = args.retention {
        config.retention = age;
    }
    if let Some(ms) = args.sweep_interval_ms {
        config.sweep_interval = Duration::from_millis(ms);
    }
    config
}

/// SIGTERM or SIGINT, whichever comes first.
struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl Signals {
    async fn recv(&mut self) {
        tokio::select! {
            _ = self.term.recv() => {}
            _ = self.int.recv() => {}
        }
    }
}

fn signals() -> std::io::Result<Signals> {
    use tokio::signal::unix::{SignalKind, signal};
    Ok(Signals { term: signal(SignalKind::terminate())?, int: signal(SignalKind::interrupt())? })
}
