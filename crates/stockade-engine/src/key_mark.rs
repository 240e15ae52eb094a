//! A session directory's idempotency key, kept on the directory itself from before the spawn
//! (an extended attribute), so a daemon that dies before the session's first record leaves the
//! key where recovery finds it: a retry with the key then gets that session, not a second copy.

use std::path::Path;

use rustix::fs::XattrFlags;

/// The extended attribute that holds the key.
const KEY_XATTR: &str = "user.stockade.idempotency_key";

/// Marks `dir` with the idempotency key of the run about to start in it. Best effort: a file
/// system without user extended attributes keeps the window this closes (microseconds between
/// the spawn and the first record).
pub(crate) fn mark_key(dir: &Path, key: &str) {
    if let Err(e) = rustix::fs::setxattr(dir, KEY_XATTR, key.as_bytes(), XattrFlags::empty()) {
        tracing::debug!(dir = %dir.display(), error = %e, "cannot mark the session directory with its key");
    }
}

/// Removes the key [`mark_key`] left on `dir` (a session directory about to be used again).
/// A file system without user extended attributes has none to remove.
pub(crate) fn unmark_key(dir: &Path) -> std::io::Result<()> {
    match rustix::fs::removexattr(dir, KEY_XATTR) {
        Ok(()) | Err(rustix::io::Errno::NODATA | rustix::io::Errno::NOTSUP) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// The idempotency key [`mark_key`] left on `dir`, if any (and a valid key).
pub(crate) fn marked_key(dir: &Path) -> Option<String> {
    let mut buf = [0u8; 256];
    let n = rustix::fs::getxattr(dir, KEY_XATTR, &mut buf[..]).ok()?;
    let key = std::str::from_utf8(buf.get(..n)?).ok()?;
    crate::run_spec::check_idempotency_key(key).ok()?;
    Some(key.to_owned())
}
