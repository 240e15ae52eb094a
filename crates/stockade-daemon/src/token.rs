//! The bearer token a network door holds (the WebSocket door and the `--metrics` address): read
//! under the token-file rules of [`stockade_proto::token`] (at start, and again on each reload:
//! `reload`), then compared, in constant time, with what a request's `Authorization` header
//! presents.

use std::path::Path;

use stockade_proto::token::{bearer, read_token_file};
use subtle::ConstantTimeEq as _;
use tokio_tungstenite::tungstenite::http::{HeaderMap, header};

use crate::error::WsSetupError;

/// The secret every connection must present. Never printed.
pub(crate) struct WsToken(Vec<u8>);

impl std::fmt::Debug for WsToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WsToken(<redacted>)")
    }
}

impl WsToken {
    /// Read the token from `path` under the token-file rules of [`stockade_proto::token`].
    pub(crate) fn load(path: &Path) -> Result<WsToken, WsSetupError> {
        read_token_file(path)
            .map(WsToken)
            .map_err(|problem| WsSetupError::TokenFile { path: path.to_owned(), problem })
    }

    /// A token given whole rather than read from a file, under the same length rule.
    pub(crate) fn given(token: &str) -> Result<WsToken, stockade_proto::token::TokenFileError> {
        stockade_proto::token::check_token(token.as_bytes())?;
        Ok(WsToken(token.as_bytes().to_vec()))
    }

    /// Whether `presented` is the token. Constant time in the token's content (a different
    /// length is refused at once: the length is not the secret).
    fn matches(&self, presented: &[u8]) -> bool {
        bool::from(self.0.as_slice().ct_eq(presented))
    }

    /// Whether `presented` (a header's raw value) is the token, in constant time.
    pub(crate) fn presented(&self, presented: &[u8]) -> bool {
        self.matches(presented)
    }

    /// The secret itself, for a check derived from it (a signature made with it). Never printed.
    pub(crate) fn secret(&self) -> &[u8] {
        &self.0
    }

    /// A non-secret fingerprint of the token (see `audit::token_id`).
    pub(crate) fn id(&self) -> String {
        crate::audit::token_id(&self.0)
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
        for mode in [0o644, 0o604, 0o660, 0o666] {
            let msg = problem(b"secret-0123456789abcdef\n", mode);
            assert!(msg.contains("chmod 600"), "{msg}");
            assert!(msg.contains(&format!("{mode:04o}")), "{msg}");
        }
        // Readable by our own group only (a Kubernetes Secret volume with an fsGroup): taken.
        let (_dir, path) = token_file(b"secret-0123456789abcdef\n", 0o640);
        assert!(WsToken::load(&path).is_ok());
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
}
