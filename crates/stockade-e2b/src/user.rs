//! The user a request runs as. The SDKs name one as envd's `Authorization: Basic` user (the
//! name before the colon) on the Connect calls, and as the `username` query parameter of
//! `/files`; without one, envd uses its default user and this door the daemon's own.
//!
//! A daemon running as root runs a named user's commands as that user (uid, gid, supplementary
//! groups, `HOME`, `USER`, `LOGNAME`, working directory their home) and makes the files it
//! writes for them theirs. A daemon that is not root can act only as itself: another name is
//! refused. A name with no account here is refused too.

use std::path::{Path, PathBuf};

use axum::http::HeaderMap;
use base64::Engine as _;
use stockade_engine::RunSpec;

use crate::connect::RpcError;

/// A user other than the daemon's, to run as.
#[derive(Debug, Clone)]
pub struct RunAs {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
    pub home: PathBuf,
}

/// The user named by a Connect call's `Authorization: Basic` header.
pub fn from_headers(headers: &HeaderMap) -> Result<Option<RunAs>, RpcError> {
    // Another scheme (a proxy's bearer token, say) names no user.
    let Some(encoded) = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Basic "))
    else {
        return Ok(None);
    };
    let basic = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()
        .and_then(|b| String::from_utf8(b).ok());
    let Some(basic) = basic else {
        return Err(RpcError::invalid(
            "the Authorization header's Basic credentials are not base64 of user:",
        ));
    };
    by_name(basic.split(':').next().unwrap_or(""))
}

/// The user `name` names; `None` when it is empty or the daemon's own user.
pub fn by_name(name: &str) -> Result<Option<RunAs>, RpcError> {
    if name.is_empty() {
        return Ok(None);
    }
    let user = match crate::accounts::by_name(name) {
        Ok(Some(u)) => u,
        Ok(None) => {
            return Err(RpcError::new(
                "unauthenticated",
                format!(
                    "user {name} does not exist on this machine; name an existing user or none"
                ),
            ));
        }
        Err(e) => return Err(RpcError::internal(format!("cannot look up user {name}: {e}"))),
    };
    let me = rustix::process::geteuid();
    if user.uid == me.as_raw() {
        return Ok(None);
    }
    if !me.is_root() {
        return Err(RpcError::new(
            "permission_denied",
            format!(
                "this daemon runs as uid {}, not root, so it cannot act as user {name}; leave the user out or run the daemon as root",
                me.as_raw()
            ),
        ));
    }
    Ok(Some(RunAs { name: user.name, uid: user.uid, gid: user.gid, home: user.home }))
}

/// The directory a relative path is taken from: the user's home, else the daemon's.
pub fn home(user: Option<&RunAs>) -> Option<&Path> {
    user.map(|u| u.home.as_path())
}

impl RunAs {
    /// Makes `spec` run as this user: the command is handed to `setpriv` (util-linux), which
    /// sets the groups, gid and uid and then `exec`s the same shell, so the session's process
    /// tree is the one it would have been; `HOME`, `USER` and `LOGNAME` are the user's unless
    /// the request sets them; the working directory defaults to their home (`/` when that is
    /// not a directory).
    pub fn apply(&self, spec: &mut RunSpec) -> Result<(), RpcError> {
        let setpriv = ["/usr/bin/setpriv", "/bin/setpriv", "/usr/sbin/setpriv"]
            .into_iter()
            .find(|p| Path::new(p).is_file())
            .ok_or_else(|| {
                RpcError::new(
                    "failed_precondition",
                    format!(
                        "running a command as user {} needs setpriv (util-linux) installed",
                        self.name
                    ),
                )
            })?;
        let shell = spec.shell.take().unwrap_or_else(|| PathBuf::from("/bin/sh"));
        let mut words = vec![
            setpriv.to_owned(),
            format!("--reuid={}", self.uid),
            format!("--regid={}", self.gid),
            "--init-groups".into(),
            "--".into(),
            shell.display().to_string(),
        ];
        if std::mem::take(&mut spec.login) {
            words.push("-l".into());
        }
        words.push("-c".into());
        words.push(std::mem::take(&mut spec.command));
        let quoted: Vec<String> = words.iter().map(|w| quote(w)).collect();
        spec.command = format!("exec {}", quoted.join(" "));
        let mut env = vec![
            ("HOME".to_owned(), self.home.display().to_string()),
            ("USER".to_owned(), self.name.clone()),
            ("LOGNAME".to_owned(), self.name.clone()),
        ];
        env.append(&mut spec.env);
        spec.env = env;
        if spec.cwd.is_none() {
            spec.cwd =
                Some(if self.home.is_dir() { self.home.clone() } else { PathBuf::from("/") });
        }
        Ok(())
    }

    /// Gives `path` to this user (a file or directory the door made for them).
    pub fn own(&self, path: &Path) -> std::io::Result<()> {
        std::os::unix::fs::chown(path, Some(self.uid), Some(self.gid))
    }
}

/// One word for `sh`, quoted.
pub(crate) fn quote(w: &str) -> String {
    format!("'{}'", w.replace('\'', r"'\''"))
}
