//! What a daemon tells the foreground runs of its home (`stockade run` without `--bg`, which run
//! in the CLI's own process): its audit log, where each such run appends its line as the daemon
//! does for its own doors, and the paths it keeps from sandboxed commands (its doors' secrets and
//! what `hide` added), which such a run's sandbox keeps out too. Written by the daemon when it
//! starts (`doors.json` in the home, 0600, replaced whole) and when `hide` adds a path; a daemon
//! started without `--audit-log` writes none there, so the home's foreground runs stop auditing.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The file in the home.
pub const HOME_DOORS_FILE: &str = "doors.json";

/// The daemon's audit log and hidden paths, as its home's foreground runs read them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HomeDoors {
    /// The audit log the daemon writes, if it was started with one.
    #[serde(default)]
    pub audit_log: Option<PathBuf>,
    /// Paths no sandboxed command may read, besides the home.
    #[serde(default)]
    pub hidden: Vec<PathBuf>,
}

impl HomeDoors {
    /// What the daemon of `home` wrote; nothing when there is no such file or it cannot be
    /// read (a home whose daemon never ran, or a foreground run inside a sandbox, which cannot
    /// see the home).
    pub fn read(home: &Path) -> HomeDoors {
        std::fs::read(home.join(HOME_DOORS_FILE))
            .ok()
            .and_then(|bytes| serde_json::from_slice(&bytes).ok())
            .unwrap_or_default()
    }

    /// Replace the file in `home` whole (a reader sees the old one or this one).
    pub(crate) fn write(&self, home: &Path) -> std::io::Result<()> {
        let bytes = serde_json::to_vec_pretty(self).map_err(std::io::Error::other)?;
        stockade_log::atomic_replace(&home.join(HOME_DOORS_FILE), &bytes)
    }

    /// Appends the audit line of a foreground run (door `foreground`, this process's uid) to the
    /// daemon's audit log, if it has one. A line that cannot be written is reported on stderr by
    /// the caller's choice: the run goes on either way.
    pub fn audit_foreground(&self, session: &str, command: &str) -> std::io::Result<()> {
        let Some(path) = &self.audit_log else { return Ok(()) };
        let uid = rustix::process::getuid().as_raw();
        let peer =
            crate::audit::Peer { door: "foreground", peer: format!("uid:{uid}"), token_id: None };
        crate::audit::append_once(path, &peer, "run", Some(session), Some(command))
    }
}
