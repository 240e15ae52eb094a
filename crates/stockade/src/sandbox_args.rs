//! The sandbox flags every door of the CLI shares (`run`, `schedule add`, `daemon run`, `mcp`).

use std::path::PathBuf;

use clap::{Args, ValueEnum};
use stockade_proto::{NetworkMode, Sandbox, SandboxMode};

use crate::args::parse_size_u64;

/// `--sandbox` and its companions.
#[derive(Debug, Clone, Default, Args)]
pub struct SandboxArgs {
    /// Confine the command with the kernel (Landlock, seccomp): `read-only` writes nowhere,
    /// `workspace-write` only beneath the working directory, a private TMPDIR and
    /// `--writable-root`s; `off` gives it all of your rights. Without it: the daemon's default.
    #[arg(long, value_enum, value_name = "MODE")]
    pub sandbox: Option<ModeArg>,
    /// With `--sandbox workspace-write`: another directory the command may write beneath
    /// (repeatable).
    #[arg(long = "writable-root", value_name = "DIR", requires = "sandbox")]
    pub writable_roots: Vec<PathBuf>,
    /// With `--sandbox`: `none` (the default for a sandbox) refuses TCP, UDP, raw sockets and
    /// abstract Unix sockets outside the session; `allow` lets the network through.
    #[arg(long, value_enum, value_name = "none|allow", requires = "sandbox")]
    pub network: Option<NetworkArg>,
    /// With `--sandbox`: most memory of the session's processes together (e.g. 256MiB).
    #[arg(long, value_name = "SIZE", value_parser = parse_size_u64, requires = "sandbox")]
    pub memory: Option<u64>,
    /// With `--sandbox`: most processes the session may have at once.
    #[arg(long, value_name = "N", requires = "sandbox")]
    pub pids: Option<u64>,
    /// With `--sandbox`: most open files per process (RLIMIT_NOFILE).
    #[arg(long, value_name = "N", requires = "sandbox")]
    pub nofile: Option<u64>,
    /// With `--sandbox`: most CPU of the session's processes together, in percent of one CPU
    /// (150: one and a half CPUs).
    #[arg(long, value_name = "PERCENT", value_parser = clap::value_parser!(u64).range(1..), requires = "sandbox")]
    pub cpu: Option<u64>,
}

/// `--sandbox`.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ModeArg {
    /// Read everywhere (except Stockade's home), write nowhere.
    ReadOnly,
    /// Write beneath the working directory, a private TMPDIR and the writable roots.
    WorkspaceWrite,
    /// No sandbox.
    Off,
}

/// `--network`.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum NetworkArg {
    /// No network.
    None,
    /// The network as you have it.
    Allow,
}

impl SandboxArgs {
    /// The policy the flags describe; `None` without `--sandbox`.
    pub fn policy(&self) -> Option<Sandbox> {
        let mode = match self.sandbox? {
            ModeArg::ReadOnly => SandboxMode::ReadOnly,
            ModeArg::WorkspaceWrite => SandboxMode::WorkspaceWrite,
            ModeArg::Off => SandboxMode::Off,
        };
        let network = match self.network {
            Some(NetworkArg::None) => NetworkMode::None,
            Some(NetworkArg::Allow) => NetworkMode::Allow,
            // A sandbox keeps the network out unless asked; `off` changes nothing.
            None if mode == SandboxMode::Off => NetworkMode::Allow,
            None => NetworkMode::None,
        };
        let writable_roots = self
            .writable_roots
            .iter()
            .map(|p| std::path::absolute(p).unwrap_or_else(|_| p.clone()))
            .collect();
        Some(Sandbox {
            mode,
            writable_roots,
            network,
            memory: self.memory,
            pids: self.pids,
            nofile: self.nofile,
            cpu: self.cpu,
        })
    }
}
