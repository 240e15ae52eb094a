//! The files of a directory made ahead of time (`slots.rs`), on disk: a private temporary
//! directory made and emptied as made, a used session directory reset to a fresh one (its
//! records moved to spares, the spool and index truncated), moved without replacing, and
//! removed whole.

use std::fs::OpenOptions;
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use stockade_log::Spare;

/// Names of slot folders start with this (never a session id).
pub(crate) const SLOT_PREFIX: &str = ".slot-";
/// The mode of a private temporary directory (and the only one it is used again with).
pub(crate) const TMP_MODE: u32 = 0o700;

pub(crate) fn rename_noreplace(from: &Path, to: &Path) -> rustix::io::Result<()> {
    rustix::fs::renameat_with(
        rustix::fs::CWD,
        from,
        rustix::fs::CWD,
        to,
        rustix::fs::RenameFlags::NOREPLACE,
    )
}

/// Makes a private temporary directory: ours, mode [`TMP_MODE`].
pub(crate) fn make_tmp(path: &Path) -> io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new().mode(TMP_MODE).create(path)
}

/// Empties `tmp` when it is still as [`make_tmp`] made it: a directory (not a link to one)
/// owned by this process's user, mode [`TMP_MODE`] exactly (no set-group-id or sticky bit a
/// command could have added), and no extended attribute but the security label the system
/// gives every file (so no default ACL a command set). `Ok(false)`: it is not (or is gone).
pub(crate) fn empty_if_as_made(tmp: &Path) -> io::Result<bool> {
    use rustix::fs::{Mode, OFlags};
    let fd = match rustix::fs::open(
        tmp,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::NOENT | rustix::io::Errno::NOTDIR | rustix::io::Errno::LOOP) => {
            return Ok(false);
        }
        Err(e) => return Err(e.into()),
    };
    let st = rustix::fs::fstat(&fd)?;
    if st.st_uid != rustix::process::geteuid().as_raw() || st.st_mode & 0o7777 != TMP_MODE {
        return Ok(false);
    }
    let mut names = [0u8; 256];
    let len = match rustix::fs::flistxattr(&fd, &mut names) {
        Ok(len) => len,
        // More names than fit: certainly more than a label.
        Err(rustix::io::Errno::RANGE) => return Ok(false),
        Err(rustix::io::Errno::NOTSUP) => 0,
        Err(e) => return Err(e.into()),
    };
    let label_only =
        names[..len].split(|b| *b == 0).filter(|n| !n.is_empty()).all(|n| n == b"security.selinux");
    if !label_only {
        return Ok(false);
    }
    for entry in std::fs::read_dir(tmp)? {
        let entry = entry?;
        if entry.file_type()?.is_dir() {
            std::fs::remove_dir_all(entry.path())?;
        } else {
            std::fs::remove_file(entry.path())?;
        }
    }
    Ok(true)
}

pub(crate) fn create_empty(path: &Path) -> io::Result<()> {
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map(drop)
}

/// Truncates `path`, a regular file (never through a symlink); `NotFound` when absent.
fn truncate(path: &Path) -> io::Result<()> {
    let file = OpenOptions::new()
        .write(true)
        .truncate(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(path)?;
    if !file.metadata()?.file_type().is_file() {
        return Err(io::Error::other(format!("{} is not a regular file", path.display())));
    }
    Ok(())
}

/// Turns a used session directory (renamed to a slot) back into a fresh one: the records
/// become the spares, the spool and index are truncated, anything else is deleted; what is missing is
/// made.
pub(crate) fn reset(slot: &Path) -> io::Result<()> {
    // The last run's idempotency key must not name the next one's session.
    crate::key_mark::unmark_key(slot)?;
    for spare in Spare::ALL {
        let Some(record) = spare.record() else { continue };
        match rename_noreplace(&slot.join(record), &spare.path_in(slot)) {
            Ok(()) | Err(rustix::io::Errno::NOENT) => {}
            // The spare is still there (the record was written without it): drop the record.
            Err(rustix::io::Errno::EXIST) => std::fs::remove_file(slot.join(record))?,
            Err(e) => return Err(e.into()),
        }
    }
    let keep: Vec<&str> = stockade_log::SessionDir::LOG_FILES
        .into_iter()
        .chain(Spare::ALL.iter().map(|s| s.file_name()))
        .collect();
    for entry in std::fs::read_dir(slot)? {
        let entry = entry?;
        let name = entry.file_name();
        if name.to_str().is_some_and(|n| keep.contains(&n)) {
            continue;
        }
        // A temporary file a failed write left, or anything else: not part of a fresh one.
        if entry.file_type()?.is_dir() {
            std::fs::remove_dir_all(entry.path())?;
        } else {
            std::fs::remove_file(entry.path())?;
        }
    }
    for name in stockade_log::SessionDir::LOG_FILES {
        let path = slot.join(name);
        match truncate(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => create_empty(&path)?,
            Err(e) => return Err(e),
        }
    }
    // The spares keep their old bytes: the next record is written over them in place
    // (`atomic_write::write_through_spare`), so no block is freed now and none allocated then.
    for spare in Spare::ALL {
        let path = spare.path_in(slot);
        match std::fs::symlink_metadata(&path) {
            Ok(meta) if meta.file_type().is_file() => {}
            Ok(_) => {
                return Err(io::Error::other(format!("{} is not a regular file", path.display())));
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => create_empty(&path)?,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

pub(crate) fn remove(path: &Path) {
    if let Err(e) = std::fs::remove_dir_all(path)
        && e.kind() != io::ErrorKind::NotFound
    {
        tracing::warn!(dir = %path.display(), error = %e, "cannot delete a prepared session directory");
    }
}

/// Removes the slots a process that is gone left in its instance folder `dir`.
pub(crate) fn remove_leftovers(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        if entry.file_name().to_str().is_some_and(|n| n.starts_with(SLOT_PREFIX)) {
            remove(&entry.path());
        }
    }
}
