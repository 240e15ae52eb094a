//! The sandbox policy of a session: what the kernel lets its commands touch. The default
//! ([`SandboxMode::Off`], network allowed, no limits) is the behaviour of a run that asks for
//! nothing. A policy can be compared with a ceiling ([`Sandbox::exceeds`]): a request may only
//! tighten what the operator (or the session it comes from) allows.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// How much of the filesystem a sandboxed command may write.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default, Hash, Serialize, Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum SandboxMode {
    /// Read (and execute) everywhere except Stockade's own home; write nowhere but the
    /// terminal and `/dev/null`.
    ReadOnly,
    /// As `read-only`, plus writing beneath the writable roots (default: the session's working
    /// directory and a private temporary directory, its `TMPDIR`).
    WorkspaceWrite,
    /// No sandbox: the command has all of the user's rights.
    #[default]
    Off,
}

impl SandboxMode {
    /// The wire name.
    pub fn name(self) -> &'static str {
        match self {
            SandboxMode::ReadOnly => "read-only",
            SandboxMode::WorkspaceWrite => "workspace-write",
            SandboxMode::Off => "off",
        }
    }
}

/// Whether a sandboxed command may use the network.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default, Hash, Serialize, Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum NetworkMode {
    /// No TCP bind/connect, no socket but `AF_UNIX`, no abstract Unix socket outside the
    /// session.
    None,
    /// The network as the user has it.
    #[default]
    Allow,
}

impl NetworkMode {
    /// The wire name.
    pub fn name(self) -> &'static str {
        match self {
            NetworkMode::None => "none",
            NetworkMode::Allow => "allow",
        }
    }
}

/// A session's sandbox policy.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sandbox {
    /// Filesystem mode.
    #[serde(default)]
    pub mode: SandboxMode,
    /// Extra directories a `workspace-write` command may write beneath (absolute). Empty: the
    /// session's working directory and its private temporary directory.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub writable_roots: Vec<PathBuf>,
    /// Network access.
    #[serde(default)]
    pub network: NetworkMode,
    /// Most bytes of memory the session's processes may use together.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<u64>,
    /// Most processes (and threads) the session may have at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pids: Option<u64>,
    /// Most open files per process (`RLIMIT_NOFILE`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nofile: Option<u64>,
    /// Most CPU time of the session's processes together, in percent of one CPU (150: one and
    /// a half CPUs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<u64>,
}

impl Sandbox {
    /// Whether this policy asks for anything at all (a mode, no network, or a limit).
    pub fn is_active(&self) -> bool {
        self.mode != SandboxMode::Off
            || self.network == NetworkMode::None
            || self.memory.is_some()
            || self.pids.is_some()
            || self.nofile.is_some()
            || self.cpu.is_some()
    }

    /// Whether this policy confines the command with the kernel's access control (Landlock and
    /// seccomp), not only with limits.
    pub fn confines(&self) -> bool {
        self.mode != SandboxMode::Off || self.network == NetworkMode::None
    }

    /// `None` when this policy asks for no more than `ceiling`; otherwise one sentence saying
    /// what it asks for beyond it. `writable_roots` of both are the resolved ones (the ceiling's
    /// empty list allows no root beyond the request's defaults, which the caller adds to both).
    pub fn exceeds(&self, ceiling: &Sandbox) -> Option<String> {
        if self.mode > ceiling.mode {
            return Some(format!(
                "the sandbox `{}` is looser than the `{}` allowed here",
                self.mode.name(),
                ceiling.mode.name()
            ));
        }
        if self.network > ceiling.network {
            return Some("network `allow` is asked for where the network is `none`".into());
        }
        if ceiling.mode == SandboxMode::WorkspaceWrite && self.mode == SandboxMode::WorkspaceWrite {
            for root in &self.writable_roots {
                if !ceiling.writable_roots.iter().any(|c| root.starts_with(c)) {
                    return Some(format!(
                        "the writable root {} is outside the roots allowed here ({})",
                        root.display(),
                        list(&ceiling.writable_roots)
                    ));
                }
            }
        }
        for (what, asked, max) in [
            ("memory", self.memory, ceiling.memory),
            ("pids", self.pids, ceiling.pids),
            ("nofile", self.nofile, ceiling.nofile),
            ("cpu", self.cpu, ceiling.cpu),
        ] {
            match (asked, max) {
                (_, None) => {}
                (None, Some(m)) => {
                    return Some(format!(
                        "no {what} limit is asked for where at most {m} is allowed"
                    ));
                }
                (Some(a), Some(m)) if a > m => {
                    return Some(format!("{what} {a} is more than the {m} allowed here"));
                }
                _ => {}
            }
        }
        None
    }

    /// `self` with every unset part taken from `default` (a request that names no limit gets the
    /// default's; its mode and network are its own when it gave a policy at all).
    pub fn with_limits_from(mut self, default: &Sandbox) -> Sandbox {
        self.memory = self.memory.or(default.memory);
        self.pids = self.pids.or(default.pids);
        self.nofile = self.nofile.or(default.nofile);
        self.cpu = self.cpu.or(default.cpu);
        self
    }
}

fn list(paths: &[PathBuf]) -> String {
    if paths.is_empty() {
        return "none beyond the working directory and the private temporary directory".into();
    }
    paths.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
}

impl fmt::Display for Sandbox {
    /// One line: `sandbox workspace-write (writable: /w, /tmp/x), network none, memory 256 MiB`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sandbox {}", self.mode.name())?;
        if self.mode == SandboxMode::WorkspaceWrite && !self.writable_roots.is_empty() {
            write!(f, " (writable: {})", list(&self.writable_roots))?;
        }
        write!(f, ", network {}", self.network.name())?;
        if let Some(m) = self.memory {
            write!(f, ", memory {}", human_bytes(m))?;
        }
        if let Some(p) = self.pids {
            write!(f, ", pids {p}")?;
        }
        if let Some(n) = self.nofile {
            write!(f, ", nofile {n}")?;
        }
        if let Some(c) = self.cpu {
            write!(f, ", cpu {c}%")?;
        }
        Ok(())
    }
}

/// `256 MiB`, `2 GiB`, `1500 B`: the unit that divides evenly, else bytes.
pub fn human_bytes(n: u64) -> String {
    for (unit, size) in [("GiB", 1u64 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)] {
        if n >= size && n.is_multiple_of(size) {
            return format!("{} {unit}", n / size);
        }
    }
    format!("{n} B")
}

/// Whether `root` would let a command write `home` (Stockade's state: spools, records, the
/// door's token): the same path, or an ancestor of it.
pub fn root_covers(root: &Path, home: &Path) -> bool {
    home.starts_with(root)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_is_off_and_inactive() {
        let s: Sandbox = serde_json::from_str("{}").unwrap();
        assert_eq!(s, Sandbox::default());
        assert!(!s.is_active());
        let s: Sandbox =
            serde_json::from_str(r#"{"mode":"workspace-write","network":"none"}"#).unwrap();
        assert!(s.confines());
        assert_eq!(s.to_string(), "sandbox workspace-write, network none");
    }

    #[test]
    fn ceiling_only_tightens() {
        let ceiling = Sandbox {
            mode: SandboxMode::WorkspaceWrite,
            network: NetworkMode::None,
            memory: Some(256 << 20),
            writable_roots: vec!["/w".into()],
            ..Sandbox::default()
        };
        let ok = Sandbox { writable_roots: vec!["/w/sub".into()], ..ceiling.clone() };
        assert_eq!(ok.exceeds(&ceiling), None);
        let looser = Sandbox { mode: SandboxMode::Off, ..ceiling.clone() };
        assert!(looser.exceeds(&ceiling).unwrap().contains("looser"));
        let net = Sandbox { network: NetworkMode::Allow, ..ceiling.clone() };
        assert!(net.exceeds(&ceiling).is_some());
        let mem = Sandbox { memory: Some(1 << 30), ..ceiling.clone() };
        assert!(mem.exceeds(&ceiling).unwrap().contains("memory"));
        let root = Sandbox { writable_roots: vec!["/etc".into()], ..ceiling.clone() };
        assert!(root.exceeds(&ceiling).unwrap().contains("/etc"));
        let tighter = Sandbox { mode: SandboxMode::ReadOnly, ..ceiling.clone() };
        assert_eq!(tighter.exceeds(&ceiling), None);
        assert_eq!(human_bytes(256 << 20), "256 MiB");
    }
}
