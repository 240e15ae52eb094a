//! The session directory and the files in it, created so that a planted symlink is refused,
//! never followed: the directory is made with `mkdir` (which does not follow a final symlink),
//! opened with `O_DIRECTORY|O_NOFOLLOW`, and every file is opened relative to that fd with
//! `O_NOFOLLOW` (new ones also `O_CREAT|O_EXCL`).
//!
//! The spool itself is append-only; reads use positional I/O (`pread`), so a reader never needs
//! the log's lock while it waits on the disk.

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

use rustix::fs::{AtFlags, CWD, FileType, Mode, OFlags};
use rustix::io::Errno;

use super::OutputError;

/// Mode of the session directory.
const DIR_MODE: u32 = 0o700;
/// Mode of every file in it.
const FILE_MODE: u32 = 0o600;

fn is_symlink_at(dirfd: impl AsFd, name: &Path) -> bool {
    rustix::fs::statat(dirfd, name, AtFlags::SYMLINK_NOFOLLOW)
        .map(|st| FileType::from_raw_mode(st.st_mode) == FileType::Symlink)
        .unwrap_or(false)
}

/// Creates the session directory `dir` (its parent must exist; `dir` must not) and opens it.
pub(crate) fn create_session_dir(dir: &Path) -> Result<OwnedFd, OutputError> {
    match rustix::fs::mkdirat(CWD, dir, Mode::from_raw_mode(DIR_MODE)) {
        Ok(()) => {}
        Err(Errno::EXIST) if is_symlink_at(CWD, dir) => {
            return Err(OutputError::SymlinkRefused { path: dir.to_path_buf() });
        }
        Err(Errno::EXIST) => return Err(OutputError::AlreadyExists { path: dir.to_path_buf() }),
        Err(e) => {
            return Err(OutputError::io(format!("create session dir {}", dir.display()), e.into()));
        }
    }
    open_session_dir(dir)
}

/// Opens an existing session directory without following a symlink.
pub(crate) fn open_session_dir(dir: &Path) -> Result<OwnedFd, OutputError> {
    let flags = OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::RDONLY;
    rustix::fs::openat(CWD, dir, flags, Mode::empty()).map_err(|e| match e {
        Errno::LOOP | Errno::NOTDIR if is_symlink_at(CWD, dir) => {
            OutputError::SymlinkRefused { path: dir.to_path_buf() }
        }
        e => OutputError::io(format!("open session dir {}", dir.display()), e.into()),
    })
}

/// Creates `name` inside the session directory: exclusive, 0600, never through a symlink.
pub(crate) fn create_file(dirfd: &OwnedFd, dir: &Path, name: &str) -> Result<File, OutputError> {
    let flags = OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::RDWR;
    rustix::fs::openat(dirfd, name, flags, Mode::from_raw_mode(FILE_MODE))
        .map(File::from)
        .map_err(|e| file_error(dirfd, dir, name, "create", e))
}

/// Opens an existing file of the session directory with `flags` (plus `O_NOFOLLOW|O_CLOEXEC`).
pub(crate) fn open_file(
    dirfd: &OwnedFd,
    dir: &Path,
    name: &str,
    flags: OFlags,
) -> Result<OwnedFd, OutputError> {
    rustix::fs::openat(dirfd, name, flags | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty())
        .map_err(|e| file_error(dirfd, dir, name, "open", e))
}

fn file_error(dirfd: &OwnedFd, dir: &Path, name: &str, what: &str, e: Errno) -> OutputError {
    let path = dir.join(name);
    match e {
        Errno::LOOP | Errno::EXIST if is_symlink_at(dirfd, Path::new(name)) => {
            OutputError::SymlinkRefused { path }
        }
        Errno::NOENT => OutputError::NotFound { path },
        e => OutputError::io(format!("{what} {}", path.display()), e.into()),
    }
}

/// Whether a write error means the disk (or the user's quota) is full.
pub(crate) fn is_disk_full(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOSPC) | Some(libc::EDQUOT))
}

/// Current size of a file.
pub(crate) fn file_len(file: &File) -> Result<u64, OutputError> {
    file.metadata().map(|m| m.len()).map_err(|e| OutputError::io("stat spool", e))
}

/// Writes as much of `data` as possible at `offset`; returns the bytes written and the error
/// that stopped it, if any (a partial write before `ENOSPC` still counts).
pub(crate) fn write_at(
    file: &File,
    mut data: &[u8],
    mut offset: u64,
) -> (usize, Option<io::Error>) {
    use std::os::unix::fs::FileExt;
    let mut written = 0;
    while !data.is_empty() {
        match file.write_at(data, offset) {
            Ok(0) => return (written, Some(io::Error::from(io::ErrorKind::WriteZero))),
            Ok(n) => {
                written += n;
                offset += n as u64;
                data = &data[n..];
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return (written, Some(e)),
        }
    }
    (written, None)
}
