//! Bearer tokens of the network doors (the WebSocket door here, MCP over HTTP in `stockade-mcp`):
//! one set of rules for a token file, a minimum length, the `Authorization` header's parsing, and
//! generating a token file when none is given; and [`WsToken`], the token a door holds and
//! compares what a request presents with.
//!
//! A token file must be a regular file owned by the effective user, not readable or writable by
//! group or others, and hold one token of at least [`MIN_TOKEN_LEN`] bytes (surrounding
//! whitespace, e.g. the final newline, is ignored). The checks are made on the opened file, so
//! what is checked is what is read.

use std::io::{Read as _, Write as _};
use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _};
use std::path::Path;

use subtle::ConstantTimeEq as _;
use tokio_tungstenite::tungstenite::http::{HeaderMap, header};

use crate::error::WsSetupError;

/// Shortest token accepted: whoever guesses it runs commands as the daemon's user.
pub const MIN_TOKEN_LEN: usize = 16;
/// Longest token file read; a token is a short secret, not a document.
const MAX_TOKEN_FILE_BYTES: u64 = 4096;
/// Random bytes in a generated token (hex-encoded: twice as many characters).
const GENERATED_BYTES: usize = 32;

/// Whether `token` is long enough; the problem, worded for the user, when it is not.
pub fn check_token(token: &[u8]) -> Result<(), String> {
    if token.is_empty() {
        return Err(
            "it is empty; put a long random token in it, e.g. `openssl rand -hex 32`".into()
        );
    }
    if token.len() < MIN_TOKEN_LEN {
        return Err(format!(
            "it is {} characters long, shorter than the minimum of {MIN_TOKEN_LEN}; use a long random token, e.g. `openssl rand -hex 32`",
            token.len()
        ));
    }
    Ok(())
}

/// Read the token from `path` under the rules above; the problem, worded for the user, when the
/// file cannot be used.
pub fn read_token_file(path: &Path) -> Result<Vec<u8>, String> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| format!("cannot open it: {e}"))?;
    let meta = file.metadata().map_err(|e| format!("cannot inspect it: {e}"))?;
    if !meta.is_file() {
        return Err("it is not a regular file".to_owned());
    }
    let euid = rustix::process::geteuid().as_raw();
    if meta.uid() != euid {
        return Err(format!(
            "it belongs to uid {}, not to this user (uid {euid}), so another user may have written it; use a token file of your own",
            meta.uid()
        ));
    }
    let mode = meta.mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(format!(
            "its mode is {mode:04o}, so other users may read the token; make it private with `chmod 600 {}`",
            path.display()
        ));
    }
    let mut raw = Vec::new();
    file.take(MAX_TOKEN_FILE_BYTES + 1)
        .read_to_end(&mut raw)
        .map_err(|e| format!("cannot read it: {e}"))?;
    if raw.len() as u64 > MAX_TOKEN_FILE_BYTES {
        return Err(format!(
            "it is longer than {MAX_TOKEN_FILE_BYTES} bytes; it should hold only the token"
        ));
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
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_CLOEXEC)
        .open(path)?;
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

/// The secret every connection must present. Never printed.
pub(crate) struct WsToken(Vec<u8>);

impl std::fmt::Debug for WsToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WsToken(<redacted>)")
    }
}

impl WsToken {
    /// Read the token from `path` under the token-file rules above.
    pub(crate) fn load(path: &Path) -> Result<WsToken, WsSetupError> {
        read_token_file(path)
            .map(WsToken)
            .map_err(|problem| WsSetupError::TokenFile { path: path.to_owned(), problem })
    }

    /// Whether `presented` is the token. Constant time in the token's content (a different
    /// length is refused at once: the length is not the secret).
    fn matches(&self, presented: &[u8]) -> bool {
        bool::from(self.0.as_slice().ct_eq(presented))
    }

    /// Whether a request with these headers carries `Authorization: Bearer <token>` (any case
    /// of the scheme).
    pub(crate) fn authorizes(&self, headers: &HeaderMap) -> bool {
        headers
            .get_all(header::AUTHORIZATION)
            .iter()
            .any(|value| bearer(value.as_bytes()).is_some_and(|t| self.matches(t)))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::os::unix::fs::PermissionsExt as _;
    use std::path::PathBuf;

    use super::*;

    fn token_file(content: &[u8], mode: u32) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, content).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        (dir, path)
    }

    fn problem(content: &[u8], mode: u32) -> String {
        let (_dir, path) = token_file(content, mode);
        match WsToken::load(&path) {
            Ok(_) => panic!("token file accepted: mode {mode:o}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn a_token_file_others_can_read_is_refused() {
        for mode in [0o644, 0o604, 0o640, 0o660, 0o666] {
            let msg = problem(b"secret-0123456789abcdef\n", mode);
            assert!(msg.contains("chmod 600"), "{msg}");
            assert!(msg.contains(&format!("{mode:04o}")), "{msg}");
        }
    }

    #[test]
    fn an_empty_token_file_is_refused() {
        for content in [&b""[..], b"\n", b"  \t\n"] {
            assert!(problem(content, 0o600).contains("empty"));
        }
    }

    #[test]
    fn a_huge_token_file_is_refused() {
        assert!(problem(&[b'x'; 5000], 0o600).contains("longer than"));
    }

    #[test]
    fn the_token_is_trimmed_and_compared_whole() {
        let (_dir, path) = token_file(b"  s3cret-token-0123\n", 0o400);
        let token = WsToken::load(&path).unwrap();
        assert!(token.matches(b"s3cret-token-0123"));
        assert!(!token.matches(b"s3cret-token-012"));
        assert!(!token.matches(b"s3cret-token-01234"));
        assert!(!token.matches(b"S3cret-token-0123"));
        assert!(!token.matches(b""));
        assert_eq!(format!("{token:?}"), "WsToken(<redacted>)");
    }

    #[test]
    fn the_bearer_header_is_what_authorizes() {
        let (_dir, path) = token_file(b"tok-0123456789abcdef\n", 0o600);
        let token = WsToken::load(&path).unwrap();
        let with = |value: Option<&str>| {
            let mut headers = HeaderMap::new();
            if let Some(v) = value {
                headers.insert(header::AUTHORIZATION, v.parse().unwrap());
            }
            token.authorizes(&headers)
        };
        assert!(with(Some("Bearer tok-0123456789abcdef")));
        assert!(with(Some("bearer tok-0123456789abcdef")));
        assert!(with(Some("BEARER  tok-0123456789abcdef")));
        assert!(!with(None));
        assert!(!with(Some("tok-0123456789abcdef")));
        assert!(!with(Some("Basic tok-0123456789abcdef")));
        assert!(!with(Some("Bearer")));
        assert!(!with(Some("Bearer tok-0123456789abcdef2")));
        assert!(!with(Some("Bearertok-0123456789abcdef")));
    }

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
        assert!(check_token(b"x").unwrap_err().contains("minimum of 16"));
        assert!(check_token(b"").unwrap_err().contains("empty"));
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
        assert!(read_token_file(&link).unwrap_err().contains("cannot open"));
    }
}
