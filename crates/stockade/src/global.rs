//! The global options every subcommand sees, and what they lead to: the daemon to talk to, the
//! state directory, a runtime. Kept apart from `cmd/` so a subcommand's file depends on this
//! and never on the dispatcher that calls it.

use std::path::PathBuf;

use anyhow::Context;
use stockade_client::{Client, ConnectOptions, RemoteOptions};
use stockade_engine::StateDir;

/// `stockade --version`: the number, the cargo profile that built it (`dist` is what is
/// shipped, `release` the quick local build), whether it is linked statically and its global
/// allocator (jemalloc as shipped, the system's in a quick build).
pub fn long_version() -> &'static str {
    static TEXT: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
        format!(
            "{} ({} profile, {}, {} allocator)",
            env!("CARGO_PKG_VERSION"),
            env!("STOCKADE_BUILD_PROFILE"),
            env!("STOCKADE_BUILD_LINKING"),
            stockade_daemon::ALLOCATOR
        )
    });
    TEXT.as_str()
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
        // Said here, before a connect fails with the socket's "Not a directory".
        if std::fs::metadata(&home).is_ok_and(|m| !m.is_dir()) {
            anyhow::bail!(
                "the state directory {} is a file; remove it or pass another --home (or STOCKADE_HOME)",
                home.display()
            );
        }
        let mut opts = ConnectOptions::new(home);
        opts.autostart = !self.no_autostart;
        opts.remote = self.remote_options()?;
        Ok(opts)
    }

    /// The remote daemon to use, if `--remote` names one.
    pub fn remote_options(&self) -> anyhow::Result<Option<RemoteOptions>> {
        let Some(url) = self.remote.clone() else { return Ok(None) };
        if !(url.starts_with("ws://") || url.starts_with("wss://")) {
            anyhow::bail!(
                "--remote {url} is not a ws:// or wss:// URL; pass e.g. --remote wss://10.0.0.5:7433"
            );
        }
        let Some(token_file) = self.remote_token_file.clone() else {
            anyhow::bail!(
                "--remote {url} needs the door's token: pass --token-file FILE before the subcommand, or set STOCKADE_TOKEN_FILE"
            );
        };
        Ok(Some(RemoteOptions { url, token_file, ca_file: self.ca_file.clone() }))
    }

    /// Refuse `--remote` for a subcommand that can only act on this machine, in one sentence
    /// naming it and saying what to do instead: acting here while a remote was named would
    /// answer about the wrong machine.
    pub fn refuse_remote(&self, subcommand: &str, instead: &str) -> anyhow::Result<()> {
        match &self.remote {
            Some(url) => anyhow::bail!(
                "`stockade {subcommand}` acts on this machine only and cannot be used with --remote {url}; {instead}"
            ),
            None => Ok(()),
        }
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

/// The token file `name` of the state directory (`mcp-token`, `e2b-token`), generated (0600)
/// the first time, for a network door started without `--token-file`: every network door has
/// a token. The file is inside the home, so no sandboxed command can read it.
pub fn home_token_file(home: Option<PathBuf>, name: &str) -> anyhow::Result<PathBuf> {
    let home = state_dir(home)?;
    let path = home.root().join(name);
    match stockade_proto::token::generate_token_file(&path) {
        Ok(_) => Ok(path),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(path),
        Err(e) => Err(anyhow::anyhow!(
            "cannot write a token to {}: {e}; pass --token-file PATH instead",
            path.display()
        )),
    }
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
