//! Bearer tokens of the network doors (the daemon's WebSocket door, MCP over HTTP) and of the
//! clients that knock on them: one rule for a token file, read the same way by the side that
//! guards a door and the side that presents the token, a minimum length, the `Authorization`
//! header's parsing, and generating a token file when none is given.
//!
//! A token file must be a regular file owned by the effective user or by root, that others may
//! not read or write and its group may at most read — and only a group this process is in (so
//! a Kubernetes Secret volume's `root:<fsGroup> 0440` file is accepted, as OpenSSH accepts
//! root-owned keys) — at most [`MAX_TOKEN_FILE_BYTES`] long, holding one token of at least
//! [`MIN_TOKEN_LEN`] bytes (surrounding whitespace, e.g. the final newline, is ignored).
//! A symlink is followed only while it stays inside the named file's own directory: the
//! kubelet's `token -> ..data/token`, `..data -> ..<timestamp>` layout, never a link out to some
//! other file. The checks are made on the opened file, so what is checked is what is read.

use std::io::{Read as _, Write as _};
use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};

use rustix::fs::{Mode, OFlags};

/// Shortest token accepted: whoever guesses it runs commands as the daemon's user.
pub const MIN_TOKEN_LEN: usize = 16;
/// Longest token file read; a token is a short secret, not a document.
pub const MAX_TOKEN_FILE_BYTES: u64 = 4096;
/// Random bytes in a generated token (hex-encoded: twice as many characters).
const GENERATED_BYTES: usize = 32;

/// Why a token file (or a token) cannot be used; each sentence says what to do, and the caller
/// names the file.
#[derive(Debug, thiserror::Error)]
pub enum TokenFileError {
    /// The file cannot be opened (missing, unreadable, or a symlink).
    #[error("cannot open it: {0}")]
    Open(#[source] std::io::Error),
    /// Its metadata cannot be read.
    #[error("cannot inspect it: {0}")]
    Inspect(#[source] std::io::Error),
    /// A directory, a FIFO, a device …
    #[error("it is not a regular file")]
    NotAFile,
    /// Another user (not root) owns it.
    #[error(
        "it belongs to uid {owner}, neither this user (uid {euid}) nor root, so another user may have written it; use a token file of your own"
    )]
    ForeignOwner {
        /// The file's owner.
        owner: u32,
        /// This process's effective uid.
        euid: u32,
    },
    /// Group or others may read or write it.
    #[error(
        "its mode is {mode:04o}, so other users may read the token; make it private with `chmod 600 {path}`",
        path = .path.display()
    )]
    NotPrivate {
        /// The permission bits.
        mode: u32,
        /// The file, for the command to run.
        path: PathBuf,
    },
    /// Its group may read it, and that group is not one of this process's.
    #[error(
        "its group (gid {gid}) may read it and this user is not in that group; make it private with `chmod 600 {path}`",
        path = .path.display()
    )]
    ForeignGroup {
        /// The file's group.
        gid: u32,
        /// The file, for the command to run.
        path: PathBuf,
    },
    /// A symlink leads out of the file's own directory.
    #[error(
        "it is a symlink to {target}, outside its own directory; name the token file itself",
        target = .target.display()
    )]
    LinkOutside {
        /// Where the links lead.
        target: PathBuf,
    },
    /// Reading it failed.
    #[error("cannot read it: {0}")]
    Read(#[source] std::io::Error),
    /// More than [`MAX_TOKEN_FILE_BYTES`].
    #[error("it is longer than {MAX_TOKEN_FILE_BYTES} bytes; it should hold only the token")]
    TooLong,
    /// Nothing but whitespace.
    #[error("it is empty; put a long random token in it, e.g. `openssl rand -hex 32`")]
    Empty,
    /// Shorter than [`MIN_TOKEN_LEN`].
    #[error(
        "it is {len} characters long, shorter than the minimum of {MIN_TOKEN_LEN}; use a long random token, e.g. `openssl rand -hex 32`"
    )]
    TooShort {
        /// The token's length.
        len: usize,
    },
}

/// Whether `token` is long enough to guard a door.
pub fn check_token(token: &[u8]) -> Result<(), TokenFileError> {
    if token.is_empty() {
        return Err(TokenFileError::Empty);
    }
    if token.len() < MIN_TOKEN_LEN {
        return Err(TokenFileError::TooShort { len: token.len() });
    }
    Ok(())
}

/// Read the token from `path` under the rules above.
pub fn read_token_file(path: &Path) -> Result<Vec<u8>, TokenFileError> {
    let real = resolve_inside_own_dir(path)?;
    // `O_NOFOLLOW`: `real` has no symlink left; one swapped in since is refused, not followed.
    let fd =
        rustix::fs::open(&real, OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty())
            .map_err(|e| TokenFileError::Open(e.into()))?;
    let file = std::fs::File::from(fd);
    let meta = file.metadata().map_err(TokenFileError::Inspect)?;
    if !meta.is_file() {
        return Err(TokenFileError::NotAFile);
    }
    let euid = rustix::process::geteuid().as_raw();
    if meta.uid() != euid && meta.uid() != 0 {
        return Err(TokenFileError::ForeignOwner { owner: meta.uid(), euid });
    }
    let mode = meta.mode() & 0o777;
    // Others: nothing. Group: read at most (writing is replacing the token).
    if mode & 0o027 != 0 {
        return Err(TokenFileError::NotPrivate { mode, path: path.to_owned() });
    }
    if mode & 0o040 != 0 && !in_group(meta.gid()) {
        return Err(TokenFileError::ForeignGroup { gid: meta.gid(), path: path.to_owned() });
    }
    let mut raw = Vec::new();
    file.take(MAX_TOKEN_FILE_BYTES + 1).read_to_end(&mut raw).map_err(TokenFileError::Read)?;
    if raw.len() as u64 > MAX_TOKEN_FILE_BYTES {
        return Err(TokenFileError::TooLong);
    }
    let token = raw.trim_ascii();
    check_token(token)?;
    Ok(token.to_vec())
}

/// `path` with its symlinks resolved, if they stay inside its own directory (the kubelet's
/// Secret volume layout); a path that is no symlink comes back as it is.
fn resolve_inside_own_dir(path: &Path) -> Result<PathBuf, TokenFileError> {
    let is_link =
        std::fs::symlink_metadata(path).map_err(TokenFileError::Open)?.file_type().is_symlink();
    if !is_link {
        return Ok(path.to_owned());
    }
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let dir = std::fs::canonicalize(dir).map_err(TokenFileError::Open)?;
    let real = std::fs::canonicalize(path).map_err(TokenFileError::Open)?;
    if !real.starts_with(&dir) {
        return Err(TokenFileError::LinkOutside { target: real });
    }
    Ok(real)
}

/// Whether `gid` is this process's effective group or one of its supplementary groups.
fn in_group(gid: u32) -> bool {
    if rustix::process::getegid().as_raw() == gid {
        return true;
    }
    rustix::process::getgroups().is_ok_and(|groups| groups.iter().any(|g| g.as_raw() == gid))
}

/// Create `path` (0600, never through a symlink, never over an existing file) holding a new
/// random token, and return the token.
pub fn generate_token_file(path: &Path) -> std::io::Result<String> {
    let mut random = [0u8; GENERATED_BYTES];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut random)?;
    let token: String = random.iter().map(|b| format!("{b:02x}")).collect();
    // `create_new` is `O_EXCL`, which never follows a symlink at the last component.
    let mut file =
        std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path)?;
    file.write_all(format!("{token}\n").as_bytes())?;
    file.sync_all()?;
    Ok(token)
}

/// What an `Authorization` header value presents as a bearer token: the scheme is matched
/// without regard to case (RFC 9110), the token is what follows the blanks after it.
pub fn bearer(value: &[u8]) -> Option<&[u8]> {
    let (scheme, rest) = value.split_at_checked(b"Bearer".len())?;
    if !scheme.eq_ignore_ascii_case(b"Bearer") || rest.first() != Some(&b' ') {
        return None;
    }
    let token = rest.trim_ascii();
    (!token.is_empty()).then_some(token)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::os::unix::fs::PermissionsExt as _;

    use super::*;

    #[test]
    fn the_bearer_scheme_is_case_insensitive() {
        assert_eq!(bearer(b"Bearer abc"), Some(&b"abc"[..]));
        assert_eq!(bearer(b"bearer abc"), Some(&b"abc"[..]));
        assert_eq!(bearer(b"BEARER   abc "), Some(&b"abc"[..]));
        for bad in [&b"Bearerabc"[..], b"Bearer", b"Bearer ", b"Basic abc", b"abc", b""] {
            assert_eq!(bearer(bad), None, "{}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn short_tokens_are_refused() {
        assert!(check_token(b"x").unwrap_err().to_string().contains("minimum of 16"));
        assert!(check_token(b"").unwrap_err().to_string().contains("empty"));
        assert!(check_token(b"0123456789abcdef").is_ok());
    }

    #[test]
    fn a_generated_token_file_is_private_and_reads_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t");
        let token = generate_token_file(&path).unwrap();
        assert_eq!(token.len(), 2 * GENERATED_BYTES);
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(read_token_file(&path).unwrap(), token.as_bytes());
        // Never over an existing file.
        assert!(generate_token_file(&path).is_err());
    }

    #[test]
    fn a_symlink_out_of_its_directory_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real");
        generate_token_file(&real).unwrap();
        let sub = dir.path().join("volume");
        std::fs::create_dir(&sub).unwrap();
        let link = sub.join("token");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let err = read_token_file(&link).unwrap_err();
        assert!(matches!(err, TokenFileError::LinkOutside { .. }), "{err}");
        assert!(err.to_string().contains("outside its own directory"), "{err}");
    }

    /// The kubelet's Secret volume: `token -> ..data/token`, `..data -> ..<timestamp>`, the
    /// file itself group-readable by the pod's fsGroup.
    #[test]
    fn a_secret_volume_layout_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let stamp = dir.path().join("..2026_11_26_10_00_00.000000001");
        std::fs::create_dir(&stamp).unwrap();
        let real = stamp.join("token");
        let token = generate_token_file(&real).unwrap();
        std::os::unix::fs::symlink("..2026_11_26_10_00_00.000000001", dir.path().join("..data"))
            .unwrap();
        std::os::unix::fs::symlink("..data/token", dir.path().join("token")).unwrap();
        // Group-readable by our own group, as `fsGroup` makes it.
        std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o440)).unwrap();
        assert_eq!(read_token_file(&dir.path().join("token")).unwrap(), token.as_bytes());
        // Group-writable or readable by others: refused, naming the mode.
        for mode in [0o460, 0o444] {
            std::fs::set_permissions(&real, std::fs::Permissions::from_mode(mode)).unwrap();
            let err = read_token_file(&dir.path().join("token")).unwrap_err();
            assert!(matches!(err, TokenFileError::NotPrivate { .. }), "{mode:o}: {err}");
        }
    }

    /// Root-owned (a Secret mounted by the kubelet) is accepted; a file of another user is not;
    /// a group that may read it must be ours.
    #[test]
    fn owner_and_group_rules() {
        if !rustix::process::geteuid().is_root() {
            // As a user, root-owned files cannot be made here; the rule is exercised as root.
            eprintln!(
                "owner_and_group_rules: needs root to chown; checked where the tests run as root"
            );
        }
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("t");
        let token = generate_token_file(&real).unwrap();
        if rustix::process::geteuid().is_root() {
            std::os::unix::fs::chown(&real, Some(65534), None).unwrap();
            let err = read_token_file(&real).unwrap_err();
            assert!(matches!(err, TokenFileError::ForeignOwner { owner: 65534, .. }), "{err}");
            assert!(err.to_string().contains("nor root"), "{err}");
            std::os::unix::fs::chown(&real, Some(0), Some(65534)).unwrap();
            std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o440)).unwrap();
            let err = read_token_file(&real).unwrap_err();
            assert!(matches!(err, TokenFileError::ForeignGroup { gid: 65534, .. }), "{err}");
            std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o400)).unwrap();
        }
        assert_eq!(read_token_file(&real).unwrap(), token.as_bytes());
    }
}
