//! The one atomic file writer: every file Stockade replaces goes through [`atomic_write`]
//! (durable: the daemon's schedule store) or [`atomic_replace`] (atomic, not forced to disk:
//! session records, written twice per run, where an `fsync` would cost more than the command,
//! and a log's `log.json`, which can be rebuilt from the spool). A crash or a full disk leaves
//! the old file or the new one, never a torn one. A session directory made ahead of time holds
//! a spare file per record (empty, or an older record), written over and renamed instead of a
//! new temporary file ([`replace_from_spare`]).

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// Replaces the file at `path` with `bytes`, atomically and durably.
///
/// # Durability
///
/// 1. The bytes go to a temporary file *in the same directory* (`<name>.tmp`; a stale one left
///    by a crash is removed when found in the way), created exclusively with mode `0600` and never through a
///    symlink (`O_NOFOLLOW`).
/// 2. The temporary file is written in full and `fsync`ed; either failing (a full disk, an I/O
///    error) removes it and returns the error, leaving `path` untouched.
/// 3. It is renamed over `path`: a reader, or a crash at any moment, sees the old contents or
///    the new ones, never a mix.
/// 4. The directory is `fsync`ed, so the new name survives a power loss. An error here is
///    returned too: the new contents are visible but may not be durable yet.
///
/// One writer per path at a time: two concurrent writers of the same path share the temporary
/// name, and the second fails with `AlreadyExists` rather than interleaving.
pub fn atomic_write(path: &Path, bytes: &[u8]) -> io::Result<()> {
    write_and_rename(path, bytes, true)
}

/// [`atomic_write`] without the two `fsync`s: a reader, or a crash of the writing process, sees
/// the old contents or the new ones (what reached `write(2)` is in the page cache, which
/// outlives the process). Only a crash of the machine can lose the new contents — or leave an
/// empty file, which readers must treat as corrupt — and such a crash also ends every process
/// the file describes.
pub fn atomic_replace(path: &Path, bytes: &[u8]) -> io::Result<()> {
    write_and_rename(path, bytes, false)
}

/// [`atomic_replace`] through `spare`, a file made ahead of time in the same directory (empty,
/// or an older record that is written over; see `slots.rs`): the bytes go into it and it is renamed over `path` (exchanged with it, when
/// there is one: the old contents stay behind under the spare's name), so no inode is
/// allocated or freed now. Each spare has one writer, which uses it once; without the spare (a
/// directory made without one, or already used) this is [`atomic_replace`]. A failed write
/// removes the spare and leaves `path` untouched.
pub fn replace_from_spare(spare: &Path, path: &Path, bytes: &[u8]) -> io::Result<()> {
    write_through_spare(spare, path, bytes).unwrap_or_else(|| atomic_replace(path, bytes))
}

/// The spare half of [`replace_from_spare`]: `None` when there is no usable spare (nothing was
/// written), for the caller's own way of writing `path`.
pub fn write_through_spare(spare: &Path, path: &Path, bytes: &[u8]) -> Option<io::Result<()>> {
    // Not `O_TRUNC`: ext4 (`auto_da_alloc`, on by default) starts writing back a file that was
    // truncated to zero when it is closed, which costs a short run more than the rest of its
    // record keeping. The spare is empty (fresh) or holds an older record of about the same
    // size: the bytes are written over it from the start and only a longer remainder is cut.
    let file = OpenOptions::new().write(true).custom_flags(libc::O_NOFOLLOW).open(spare).ok()?;
    let written = overwrite(&file, bytes).and_then(|()| {
        drop(file);
        // Over an existing file, exchange the two: the old one stays as the spare (a directory
        // used again truncates it) instead of being freed, and no inode changes hands.
        match rustix::fs::renameat_with(
            rustix::fs::CWD,
            spare,
            rustix::fs::CWD,
            path,
            rustix::fs::RenameFlags::EXCHANGE,
        ) {
            Ok(()) => Ok(()),
            Err(_) => std::fs::rename(spare, path),
        }
    });
    if written.is_err() {
        let _ = std::fs::remove_file(spare);
    }
    Some(written)
}

/// Makes `file`'s contents `bytes`: written from offset 0, then cut to their length when the
/// file was longer. Never truncates to zero (see [`write_through_spare`]).
fn overwrite(file: &File, bytes: &[u8]) -> io::Result<()> {
    use std::os::unix::fs::FileExt;
    file.write_all_at(bytes, 0)?;
    let len = bytes.len() as u64;
    if file.metadata()?.len() > len {
        file.set_len(len)?;
    }
    Ok(())
}

fn write_and_rename(path: &Path, bytes: &[u8], durable: bool) -> io::Result<()> {
    let tmp = temp_path(path)?;
    let create = || {
        OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&tmp)
    };
    // A stale temporary file (left by a crash) is removed only when one is in the way: the
    // common case costs no `unlink`.
    let mut file = match create() {
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            let _ = std::fs::remove_file(&tmp);
            create()?
        }
        other => other?,
    };
    let written =
        file.write_all(bytes).and_then(|()| if durable { file.sync_all() } else { Ok(()) });
    if let Err(e) = written {
        // A full disk must not leave a half-written temporary file behind.
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    drop(file);
    if let Err(e) = std::fs::rename(&tmp, path) {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    if !durable {
        return Ok(());
    }
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    File::open(dir)?.sync_all()
}

/// `<dir>/<name>.tmp` for `<dir>/<name>`.
fn temp_path(path: &Path) -> io::Result<PathBuf> {
    let Some(name) = path.file_name() else {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "atomic_write needs a file name"));
    };
    let mut tmp = name.to_os_string();
    tmp.push(".tmp");
    Ok(path.with_file_name(tmp))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn replaces_the_file_and_leaves_no_temporary() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("state.json");
        atomic_write(&p, b"one").unwrap();
        // A stale temporary from a crash does not block the next write.
        std::fs::write(dir.path().join("state.json.tmp"), b"torn").unwrap();
        atomic_write(&p, b"two").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"two");
        assert!(!dir.path().join("state.json.tmp").exists());
    }

    #[test]
    fn a_spare_is_used_once_and_without_one_a_temporary_is_made() {
        let dir = tempfile::tempdir().unwrap();
        let (spare, p) = (dir.path().join(".spare"), dir.path().join("session.json"));
        std::fs::write(&spare, b"").unwrap();
        let ino = |p: &Path| std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(p).unwrap());
        let spare_ino = ino(&spare);
        replace_from_spare(&spare, &p, b"one").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"one");
        assert_eq!(ino(&p), spare_ino, "the spare became the record");
        assert!(!spare.exists());
        // Used once: the next write makes a temporary file as before.
        replace_from_spare(&spare, &p, b"two").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"two");
        assert!(!spare.exists() && !dir.path().join("session.json.tmp").exists());
        // Over an existing record the two are exchanged: the old one stays as the spare.
        std::fs::write(&spare, b"").unwrap();
        let (old_ino, spare_ino) = (ino(&p), ino(&spare));
        replace_from_spare(&spare, &p, b"three").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"three");
        assert_eq!((ino(&p), ino(&spare)), (spare_ino, old_ino));
        assert_eq!(std::fs::read(&spare).unwrap(), b"two");
        // A spare holding an older, longer record is written over and cut to the new length.
        replace_from_spare(&spare, &p, b"4").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"4");
        assert_eq!(std::fs::read(&spare).unwrap(), b"three");
        std::fs::remove_file(&spare).unwrap();
        // A spare that is a symlink is not followed (nor written through).
        let target = dir.path().join("elsewhere");
        std::fs::write(&target, b"keep").unwrap();
        std::os::unix::fs::symlink(&target, &spare).unwrap();
        replace_from_spare(&spare, &p, b"four").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"four");
        assert_eq!(std::fs::read(&target).unwrap(), b"keep");
    }

    #[test]
    fn a_symlinked_temporary_is_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("target");
        std::fs::write(&target, b"keep").unwrap();
        let p = dir.path().join("f");
        // Removed first, so the write goes to a fresh file, never through the link.
        std::os::unix::fs::symlink(&target, dir.path().join("f.tmp")).unwrap();
        atomic_write(&p, b"new").unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"keep");
        assert_eq!(std::fs::read(&p).unwrap(), b"new");
    }

    #[test]
    fn replace_without_fsync_is_still_atomic_and_tidy() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("session.json");
        atomic_replace(&p, b"start").unwrap();
        atomic_replace(&p, b"end").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"end");
        assert!(!dir.path().join("session.json.tmp").exists());
    }

    #[test]
    fn a_path_without_a_file_name_is_refused() {
        assert_eq!(
            atomic_write(Path::new("/"), b"x").unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
    }
}
