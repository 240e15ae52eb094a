//! One file per subcommand; each translates its arguments into engine calls.

pub mod attach;
pub mod bench;
mod daemon_ctl;
mod daemon_run;
pub mod docs;
mod doctor;
mod kill;
mod logs;
pub mod mcp;
mod ps;
mod read;
pub mod restart;
mod run;
pub mod schedule;
mod schedule_table;
pub mod send;
mod stats;
pub mod wait;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use stockade_client::{Client, ConnectOptions, RemoteOptions};
use stockade_engine::StateDir;

use crate::cli::{Cli, Command, DaemonAction};

/// Run the chosen subcommand.
pub fn dispatch(cli: Cli) -> anyhow::Result<ExitCode> {
    let home = cli.home.clone();
    let global = Global {
        home: cli.home,
        no_autostart: cli.no_autostart,
        remote: cli.remote.filter(|u| !u.is_empty()),
        remote_token_file: cli.remote_token_file,
        ca_file: cli.ca_file,
    };
    match cli.command {
        Command::Run(args) => run::run(&global, args),
        Command::Send(args) => send::send(&global, args),
        Command::Resize(args) => send::resize(&global, args),
        Command::Attach(args) => attach::attach(&global, args),
        Command::Ps(args) => ps::ps(&global, args),
        Command::Logs(args) => logs::logs(&global, args),
        Command::Wait(args) => wait::wait(&global, args),
        Command::Kill(args) => kill::kill(&global, args),
        Command::Restart(args) => restart::restart(&global, args),
        Command::Forget(args) => kill::forget(&global, args),
        Command::Cleanup(args) => kill::cleanup(&global, args),
        Command::Stats(args) => stats::stats(&global, args),
        Command::Read(args) => read::read(home, args),
        Command::Grep(args) => read::grep(&global, args),
        Command::Doctor(args) => doctor::doctor(home, args),
        Command::Bench(args) => bench::bench(home, args),
        Command::Mcp(args) => mcp::mcp(&global, args),
        Command::Schedule(args) => schedule::schedule(&global, args),
        Command::Completions(args) => docs::completions(args),
        Command::Man(args) => docs::man(args),
        Command::Daemon(args) => match args.action {
            None => daemon_run::run(home, crate::cli::DaemonRunArgs::default()),
            Some(DaemonAction::Run(run)) => daemon_run::run(home, *run),
            Some(DaemonAction::Start(a)) => daemon_ctl::start(&global, a),
            Some(DaemonAction::Stop(a)) => daemon_ctl::stop(&global, a),
            Some(DaemonAction::Status(a)) => daemon_ctl::status(&global, a),
        },
    }
}

/// The global options every subcommand sees.
#[derive(Debug, Clone)]
pub struct Global {
    /// `--home` / `STOCKADE_HOME`.
    pub home: Option<PathBuf>,
    /// `--no-autostart` / `STOCKADE_NO_AUTOSTART`.
    pub no_autostart: bool,
    /// `--remote` / `STOCKADE_REMOTE`: a remote daemon's door URL.
    pub remote: Option<String>,
    /// `--token-file` / `STOCKADE_TOKEN_FILE`: the remote door's token.
    pub remote_token_file: Option<PathBuf>,
    /// `--ca-file` / `STOCKADE_CA_FILE`: the CA of a wss:// door.
    pub ca_file: Option<PathBuf>,
}

impl Global {
    /// How to reach the daemon of this state directory (an absolute path: the daemon does not
    /// share our working directory).
    pub fn connect_options(&self) -> anyhow::Result<ConnectOptions> {
        let home = match &self.home {
            Some(h) => h.clone(),
            None => StateDir::locate()?,
        };
        let home = std::path::absolute(&home)
            .with_context(|| format!("cannot resolve the state directory {}", home.display()))?;
        let mut opts = ConnectOptions::new(home);
        opts.autostart = !self.no_autostart;
        opts.remote = self.remote_options()?;
        Ok(opts)
    }

    /// The remote daemon to use, if `--remote` names one.
    pub fn remote_options(&self) -> anyhow::Result<Option<RemoteOptions>> {
        let Some(url) = self.remote.clone() else { return Ok(None) };
        let Some(token_file) = self.remote_token_file.clone() else {
            anyhow::bail!(
                "--remote {url} needs the door's token: pass --token-file FILE before the subcommand, or set STOCKADE_TOKEN_FILE"
            );
        };
        Ok(Some(RemoteOptions { url, token_file, ca_file: self.ca_file.clone() }))
    }

    /// Connect to the daemon, starting it on demand unless `--no-autostart`.
    pub fn connect(&self) -> anyhow::Result<Client> {
        Ok(Client::connect(&self.connect_options()?)?)
    }

    /// Connect to a daemon only if one is running.
    pub fn connect_existing(&self) -> anyhow::Result<Option<Client>> {
        Ok(Client::connect_existing(&self.connect_options()?)?)
    }
}

/// Open the state directory (from `--home`/`STOCKADE_HOME` or the default).
pub fn state_dir(home: Option<PathBuf>) -> anyhow::Result<StateDir> {
    let root = match home {
        Some(h) => h,
        None => StateDir::locate()?,
    };
    StateDir::open(&root)
        .with_context(|| format!("cannot use the state directory {}", root.display()))
}

/// A tokio runtime for one command.
pub fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

/// An instance name for a one-shot engine: unique within the state directory.
pub fn oneshot_instance() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    format!("run-{secs}-{}", std::process::id())
}
