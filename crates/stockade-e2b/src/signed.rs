//! envd's signed `/files` URLs (the SDKs' `download_url`/`upload_url`): a request without the
//! token that carries `signature` (and maybe `signature_expiration`, Unix seconds) is let in when
//! the signature is `v1_` + base64 (no padding) of SHA-256 of
//! `path:operation:username:token[:expiration]` with the door's token in force (`read` for a
//! download, `write` for an upload) and the expiration, if any, has not passed.

use std::time::{SystemTime, UNIX_EPOCH};

use axum::extract::Request;
use axum::http::{Method, StatusCode};
use base64::Engine as _;
use sha2::{Digest as _, Sha256};
use stockade_daemon::DoorKey;
use subtle::ConstantTimeEq as _;

use crate::files::query;

/// What a `/files` request's signature says.
pub(crate) enum Signed {
    /// No `signature` parameter.
    Absent,
    /// A valid signature made with the token of this fingerprint.
    Valid(String),
    /// A signature that does not let the request in: the status and the sentence.
    Refused(StatusCode, String),
}

/// The signature envd expects for these request fields and `token`.
pub(crate) fn signature(
    path: &str,
    operation: &str,
    user: &str,
    token: &[u8],
    expiration: Option<&str>,
) -> String {
    let mut h = Sha256::new();
    h.update(format!("{path}:{operation}:{user}:").as_bytes());
    h.update(token);
    if let Some(e) = expiration {
        h.update(format!(":{e}").as_bytes());
    }
    format!("v1_{}", base64::engine::general_purpose::STANDARD_NO_PAD.encode(h.finalize()))
}

/// Checks `req`'s signature with the door's token in force.
pub(crate) fn check(req: &Request, key: &DoorKey) -> Signed {
    let Some(presented) = query(req, "signature") else { return Signed::Absent };
    let operation = if req.method() == Method::GET { "read" } else { "write" };
    let path = query(req, "path").unwrap_or_default();
    let user = query(req, "username").unwrap_or_default();
    let expiration = query(req, "signature_expiration");
    if let Some(e) = &expiration {
        let Ok(at) = e.parse::<u64>() else {
            let why = format!("signature_expiration {e:?} is not a time in Unix seconds");
            return Signed::Refused(StatusCode::BAD_REQUEST, why);
        };
        let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        if now > at {
            let why = format!(
                "the signed URL expired {} s ago; ask for a new one",
                now.saturating_sub(at)
            );
            return Signed::Refused(StatusCode::UNAUTHORIZED, why);
        }
    }
    let valid = key.check_derived(|token| {
        let want = signature(&path, operation, &user, token, expiration.as_deref());
        bool::from(want.as_bytes().ct_eq(presented.as_bytes()))
    });
    match valid {
        Some(id) => Signed::Valid(id),
        None => Signed::Refused(
            StatusCode::UNAUTHORIZED,
            format!(
                "the signature does not match this {operation} of {path} (a URL signed with an older token, or changed since)"
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::signature;

    /// The SDKs' own computation (`e2b.sandbox.signature.get_signature`) of these fields, so
    /// both sides hash the same bytes.
    #[test]
    fn the_signature_is_envds() {
        let s = signature("/home/user/a.txt", "read", "", b"tok", None);
        assert_eq!(s, "v1_Zkbb3914oLJLvMBzCAHQhm2ydBLxbSx2eQUR/kLdvIY");
        let s = signature("/a", "write", "user", b"tok", Some("1700000000"));
        assert_eq!(s, "v1_i+niDH5XtBUG0leWOIAI0gdZ5bvzT5G6r7S/OPk8Z7Y");
    }
}
