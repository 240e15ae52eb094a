//! The listening socket: replace a stale one safely, bind, restrict to the owner.

use std::fs::{DirBuilder, Permissions};
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, PermissionsExt};
use std::path::Path;

use tokio::net::UnixListener;

use crate::error::DaemonError;

/// Bind `path`: create its parent (0700) if missing, remove a stale socket there (only a socket,
/// and only when nothing answers on it; never through a symlink), bind, and chmod 0600.
pub(crate) fn bind(path: &Path) -> Result<UnixListener, DaemonError> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        match DirBuilder::new().recursive(true).mode(0o700).create(parent) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => {
                return Err(DaemonError::io(
                    format!("cannot create the socket's directory {}", parent.display()),
                    e,
                ));
            }
        }
    }
    remove_stale(path)?;
    let listener = UnixListener::bind(path)
        .map_err(|e| DaemonError::io(format!("cannot listen on {}", path.display()), e))?;
    // The parent directory (0700 for the default socket) keeps others out until this lands.
    std::fs::set_permissions(path, Permissions::from_mode(0o600))
        .map_err(|e| DaemonError::io(format!("cannot restrict {}", path.display()), e))?;
    Ok(listener)
}

/// Remove a socket left by a daemon that is gone. Anything else at the path is refused.
fn remove_stale(path: &Path) -> Result<(), DaemonError> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(DaemonError::io(format!("cannot inspect {}", path.display()), e)),
    };
    if !meta.file_type().is_socket() {
        return Err(DaemonError::NotASocket { path: path.to_path_buf() });
    }
    if std::os::unix::net::UnixStream::connect(path).is_ok() {
        return Err(DaemonError::SocketInUse { path: path.to_path_buf() });
    }
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => {
            Err(DaemonError::io(format!("cannot remove the stale socket {}", path.display()), e))
        }
    }
}
