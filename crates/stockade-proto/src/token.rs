//! Bearer tokens of the network doors (the daemon's WebSocket door, MCP over HTTP) and of the
//! clients that knock on them: one rule for a token file, read the same way by the side that
//! guards a door and the side that presents the token, a minimum length, the `Authorization`
//! header's parsing, and generating a token file when none is given.
//!
//! A token file must be a regular file (never reached through a symlink) owned by the effective
//! user, not readable or writable by group or others, at most [`MAX_TOKEN_FILE_BYTES`] long, and
//! hold one token of at least [`MIN_TOKEN_LEN`] bytes (surrounding whitespace, e.g. the final
//! newline, is ignored). The checks are made on the opened file, so what is checked is what is
//! read.

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
    /// Another user owns it.
    #[error(
        "it belongs to uid {owner}, not to this user (uid {euid}), so another user may have written it; use a token file of your own"
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
    // `O_NOFOLLOW`: a symlink is refused rather than followed to whatever it names.
    let fd =
        rustix::fs::open(path, OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty())
            .map_err(|e| TokenFileError::Open(e.into()))?;
    let file = std::fs::File::from(fd);
    let meta = file.metadata().map_err(TokenFileError::Inspect)?;
    if !meta.is_file() {
        return Err(TokenFileError::NotAFile);
    }
    let euid = rustix::process::geteuid().as_raw();
    if meta.uid() != euid {
        return Err(TokenFileError::ForeignOwner { owner: meta.uid(), euid });
    }
    let mode = meta.mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(TokenFileError::NotPrivate { mode, path: path.to_owned() });
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
    fn a_symlinked_token_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real");
        generate_token_file(&real).unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        assert!(read_token_file(&link).unwrap_err().to_string().contains("cannot open"));
    }
}
