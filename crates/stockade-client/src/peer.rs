//! Who serves the socket: before a client sends anything (a command, its environment), the
//! socket's peer must be a process of the same effective user. Anyone who could replace the
//! socket file (a state directory another user pre-created) could otherwise capture requests and
//! forge answers. Linux: `SO_PEERCRED`.

use std::os::fd::AsRawFd as _;
use std::os::unix::net::UnixStream;
use std::path::Path;

use crate::ClientError;

/// The uid of the process on the other end of `stream` (as it was when it called `listen`).
pub(crate) fn peer_uid(stream: &UnixStream) -> std::io::Result<u32> {
    let mut cred = libc::ucred { pid: 0, uid: 0, gid: 0 };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `cred` and `len` are valid for writes of a `ucred`, the size passed in `len`.
    let rc = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&raw mut cred).cast(),
            &raw mut len,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(cred.uid)
}

/// Refuse a daemon of another user.
pub(crate) fn check(stream: &UnixStream, socket: &Path) -> Result<(), ClientError> {
    let uid = peer_uid(stream)
        .map_err(|source| ClientError::Connect { socket: socket.to_path_buf(), source })?;
    let euid = rustix::process::geteuid().as_raw();
    if uid != euid {
        return Err(ClientError::ForeignDaemon { socket: socket.to_path_buf(), uid, euid });
    }
    Ok(())
}

/// Refuse to start a daemon in a state directory another user owns (they could replace its
/// socket or read its logs).
pub(crate) fn check_home(home: &Path) -> Result<(), ClientError> {
    use std::os::unix::fs::MetadataExt as _;
    let meta = std::fs::symlink_metadata(home)
        .map_err(|source| ClientError::Connect { socket: home.to_path_buf(), source })?;
    let euid = rustix::process::geteuid().as_raw();
    if meta.uid() != euid {
        return Err(ClientError::ForeignHome { home: home.to_path_buf(), owner: meta.uid(), euid });
    }
    // Others who may write here could swap the socket or plant records; the daemon refuses such
    // a home too, so it is said here before a daemon is started to fail on it.
    if meta.mode() & 0o022 != 0 {
        return Err(ClientError::LooseHome {
            home: home.to_path_buf(),
            mode: meta.mode() & 0o7777,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_peer_of_our_own_socket_is_us() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s");
        let _listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let stream = UnixStream::connect(&path).unwrap();
        assert_eq!(peer_uid(&stream).unwrap(), rustix::process::geteuid().as_raw());
        assert!(check(&stream, &path).is_ok());
    }
}
