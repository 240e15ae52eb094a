//! The state directory: where spools, session records and the id counter live.
//!
//! Layout (all directories 0700):
//!
//! ```text
//! $STOCKADE_HOME/            default $XDG_STATE_HOME/stockade, else ~/.local/state/stockade
//!   next-id                  the session id counter (ids are never reused within a state dir)
//!   spool/<instance>/<id>/   one directory per engine instance and per session (its run's
//!                            idempotency key in the attribute `user.stockade.idempotency_key`,
//!                            owned by `key_mark`)
//!     output.log             the spool (owned by `output`)
//!     streams.idx            the stream index (owned by `output`)
//!     log.json               the finished log's counters (owned by `output`)
//!     session.json           the session record (owned by `session`)
//!     spec.json              the start options, for `restart` (owned by `spec_file`)
//!     .spare-*               empty files records are written into (owned by `slots`)
//!   spool/<instance>/.slot-<n>/  a session directory made ahead of time (`slots`)
//! ```

use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io::Read;
use std::os::unix::fs::{DirBuilderExt, FileExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The environment variable that overrides the state directory.
pub(crate) const HOME_ENV: &str = "STOCKADE_HOME";
/// Name of the id counter file.
const COUNTER_FILE: &str = "next-id";
/// Name of the folder holding one directory per engine instance.
const SPOOL_DIR: &str = "spool";
/// Prefix of every session id (`sh-1`, `sh-2`, …).
pub(crate) const SESSION_ID_PREFIX: &str = "sh-";

/// Errors about the state directory.
#[derive(Debug, thiserror::Error)]
pub enum StateDirError {
    /// Neither `STOCKADE_HOME`, `XDG_STATE_HOME` nor `HOME` is set.
    #[error("cannot find a state directory: set STOCKADE_HOME (or HOME)")]
    NoHome,
    /// A directory could not be created or used.
    #[error(
        "state directory {path} is not usable: {source} (set STOCKADE_HOME to a writable directory)"
    )]
    Unusable {
        /// The directory.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// A path that must be a real directory is a symlink or a file.
    #[error(
        "{path} is not a directory Stockade created (a symlink or a file is in the way); remove it or choose another STOCKADE_HOME"
    )]
    NotADirectory {
        /// The path.
        path: PathBuf,
    },
    /// The id counter is unreadable.
    #[error("the session id counter {path} is damaged: {detail}")]
    BadCounter {
        /// The counter file.
        path: PathBuf,
        /// What is wrong with it.
        detail: String,
    },
    /// No session with this id exists in the state directory.
    #[error("no session {id} in {home}")]
    NoSuchSession {
        /// The id asked for.
        id: String,
        /// The state directory searched.
        home: PathBuf,
    },
    /// A directory of the state directory belongs to another user.
    #[error(
        "{path} belongs to uid {owner}, not to this user (uid {euid}), so its owner could read the sessions' output or put their own daemon in its place; use a state directory of your own (set STOCKADE_HOME) or remove it"
    )]
    ForeignOwner {
        /// The directory.
        path: PathBuf,
        /// Its owner.
        owner: u32,
        /// Our effective uid.
        euid: u32,
    },
    /// A directory of the state directory that Stockade did not just create lets other users in.
    #[error(
        "{path} has mode {mode:04o}, so other users could put files in it or swap the daemon's socket; Stockade does not change a directory it did not create: make it private with `chmod 700 {path}` or choose another STOCKADE_HOME"
    )]
    LooseMode {
        /// The directory.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// The path no longer leads to the directory this process checked and opened.
    #[error(
        "the state directory {path} was replaced since this process opened it (moved, removed or swapped for another directory), so sessions would land where nobody checked; nothing was started: restart the daemon (`stockade daemon stop`, then any command) to check and use what is there now"
    )]
    Replaced {
        /// The directory's path.
        path: PathBuf,
    },
    /// A file of the state directory is not a regular file of this user.
    #[error(
        "{path} is not a regular file of this user (uid {euid}), so it may have been planted; remove it (Stockade makes it again) or choose another STOCKADE_HOME"
    )]
    ForeignFile {
        /// The file.
        path: PathBuf,
        /// Our effective uid.
        euid: u32,
    },
}

/// A resolved, existing state directory, held open: files of its own (the id counter) are
/// opened below the directory this process checked, never by a path looked up again, and each
/// run first checks that the path still leads there ([`StateDir::check`]).
#[derive(Debug, Clone)]
pub struct StateDir {
    root: PathBuf,
    /// `O_PATH` descriptor of `root`, opened right after it was checked.
    handle: std::sync::Arc<std::os::fd::OwnedFd>,
    /// Device and inode of `handle`.
    identity: (u64, u64),
}

impl StateDir {
    /// Where the state directory is, from the environment (`STOCKADE_HOME`, `XDG_STATE_HOME`,
    /// `HOME`), without creating it.
    pub fn locate() -> Result<PathBuf, StateDirError> {
        let non_empty = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
        if let Some(home) = non_empty(HOME_ENV) {
            return Ok(PathBuf::from(home));
        }
        if let Some(xdg) = non_empty("XDG_STATE_HOME") {
            return Ok(PathBuf::from(xdg).join("stockade"));
        }
        let home = non_empty("HOME").ok_or(StateDirError::NoHome)?;
        Ok(PathBuf::from(home).join(".local/state/stockade"))
    }

    /// Open (creating if needed, mode 0700) the state directory at `root`.
    pub fn open(root: impl Into<PathBuf>) -> Result<StateDir, StateDirError> {
        use rustix::fs::{Mode, OFlags};
        let root = root.into();
        ensure_private_dir(&root, true)?;
        let unusable =
            |e: rustix::io::Errno| StateDirError::Unusable { path: root.clone(), source: e.into() };
        let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let handle = rustix::fs::open(&root, flags, Mode::empty()).map_err(unusable)?;
        let stat = rustix::fs::fstat(&handle).map_err(unusable)?;
        let dir = StateDir {
            identity: (stat.st_dev, stat.st_ino),
            handle: std::sync::Arc::new(handle),
            root,
        };
        // What was checked is what is held: a swap between the two is refused here.
        dir.check()?;
        ensure_private_dir(&dir.root.join(SPOOL_DIR), false)?;
        Ok(dir)
    }

    /// Whether the state directory is still the one this process checked: the path leads to
    /// the directory held open, which is this user's and lets no one else write. Every run
    /// asks first (an `fstat` and an `lstat`); the daemon's watch asks every second and says
    /// so in its log and `/readyz`.
    pub fn check(&self) -> Result<(), StateDirError> {
        let held = rustix::fs::fstat(&*self.handle)
            .map_err(|e| StateDirError::Unusable { path: self.root.clone(), source: e.into() })?;
        ensure_ours(&self.root, held.st_uid, held.st_mode)?;
        match fs::symlink_metadata(&self.root) {
            Ok(now) if (now.dev(), now.ino()) == self.identity => Ok(()),
            _ => Err(StateDirError::Replaced { path: self.root.clone() }),
        }
    }

    /// Whether the directory held open was deleted (its link count is 0): no path leads to it
    /// any more and none ever will, so a daemon over it has nothing left to serve.
    pub fn removed(&self) -> bool {
        rustix::fs::fstat(&*self.handle).is_ok_and(|st| st.st_nlink == 0)
    }

    /// The state directory's path.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The folder holding one directory per engine instance (`spool/`).
    pub(crate) fn spool_root(&self) -> PathBuf {
        self.root.join(SPOOL_DIR)
    }

    /// The directory of one engine instance (created, 0700).
    pub fn instance_dir(&self, instance: &str) -> Result<PathBuf, StateDirError> {
        let dir = self.root.join(SPOOL_DIR).join(instance);
        ensure_private_dir(&dir, false)?;
        Ok(dir)
    }

    /// Allocate the next session id (`sh-N`). Ids are never reused within this state directory,
    /// even across processes and crashes: the counter file is locked while it is advanced.
    ///
    /// The counter is not `fsync`ed on every allocation (that was a disk flush per `run`).
    /// Within one boot the page cache is shared by every process, so a plain write is seen by
    /// the next allocator; only an OS crash can lose it. So the file also records a
    /// *reservation* (ids below it may have been handed out) that is made durable before any id
    /// at or past it is used, and the boot it was written in: a counter read in a later boot
    /// restarts from the reservation, never below an id handed out before the crash. One flush
    /// per `ID_RESERVATION` (1024) ids, plus one per boot.
    pub(crate) fn allocate_id(&self) -> Result<String, StateDirError> {
        let path = self.root.join(COUNTER_FILE);
        let unusable = |source| StateDirError::Unusable { path: path.clone(), source };
        let mut file = self.open_checked(COUNTER_FILE)?;
        rustix::fs::flock(&file, rustix::fs::FlockOperation::LockExclusive)
            .map_err(|e| unusable(e.into()))?;
        let mut text = String::new();
        file.read_to_string(&mut text).map_err(unusable)?;
        let counter = Counter::parse(&text)
            .map_err(|detail| StateDirError::BadCounter { path: path.clone(), detail })?;
        let boot = boot_id();
        let mut next = counter.next;
        let mut reserved = counter.reserved;
        let mut durable = false;
        if boot.is_none() || counter.boot != boot {
            // Written in another boot (or unknowable): writes after the last flush may be lost,
            // so continue past everything that was reserved.
            next = next.max(reserved);
            durable = true;
        }
        if next >= reserved {
            reserved = next.saturating_add(ID_RESERVATION);
            durable = true;
        }
        let after =
            Counter { next: next.saturating_add(1), reserved, boot: boot.clone() }.to_string();
        // The numbers only grow, so the new text is never shorter unless the file held
        // something longer (another layout): cut that off.
        file.write_all_at(after.as_bytes(), 0).map_err(unusable)?;
        if (after.len() as u64) < text.len() as u64 {
            file.set_len(after.len() as u64).map_err(unusable)?;
        }
        if durable {
            file.sync_data().map_err(unusable)?;
        }
        Ok(format!("{SESSION_ID_PREFIX}{next}"))
        // The lock is released when `file` is closed.
    }

    /// Open (creating it 0600 if needed) the file `name` of the held directory — only while
    /// the path still leads there ([`Self::check`]), below the handle, never through a
    /// symlink — and refuse one that is not a regular file of this user.
    pub(crate) fn open_checked(&self, name: &str) -> Result<File, StateDirError> {
        use rustix::fs::{FileType, Mode, OFlags};
        self.check()?;
        let path = self.root.join(name);
        let unusable =
            |e: rustix::io::Errno| StateDirError::Unusable { path: path.clone(), source: e.into() };
        let flags = OFlags::RDWR | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = rustix::fs::openat(&*self.handle, name, flags, Mode::from_raw_mode(0o600))
            .map_err(unusable)?;
        let stat = rustix::fs::fstat(&fd).map_err(unusable)?;
        let euid = rustix::process::geteuid().as_raw();
        if stat.st_uid != euid || FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
            return Err(StateDirError::ForeignFile { path, euid });
        }
        Ok(File::from(fd))
    }

    /// Find the directory of session `id`, whatever instance ran it.
    pub fn find_session(&self, id: &str) -> Result<PathBuf, StateDirError> {
        let not_found =
            || StateDirError::NoSuchSession { id: id.to_owned(), home: self.root.clone() };
        if !is_session_id(id) {
            return Err(not_found());
        }
        let spool = self.root.join(SPOOL_DIR);
        let entries = fs::read_dir(&spool)
            .map_err(|source| StateDirError::Unusable { path: spool.clone(), source })?;
        for entry in entries.flatten() {
            let candidate = entry.path().join(id);
            if fs::symlink_metadata(&candidate).map(|m| m.is_dir()).unwrap_or(false) {
                return Ok(candidate);
            }
        }
        Err(not_found())
    }
}

/// Ids reserved by one durable write of the counter (see [`StateDir::allocate_id`]).
pub(crate) const ID_RESERVATION: u64 = 1024;

/// The id counter file: `next reserved boot-id` (one line). A file holding just `next` (the
/// earlier layout) reads as reserved up to `next`, boot unknown.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Counter {
    next: u64,
    reserved: u64,
    boot: Option<String>,
}

impl Counter {
    fn parse(text: &str) -> Result<Counter, String> {
        let mut words = text.split_ascii_whitespace();
        let number = |w: Option<&str>, default: u64| match w {
            None => Ok(default),
            Some(w) => w.parse::<u64>().map_err(|_| format!("expected a number, found {w:?}")),
        };
        let next = number(words.next(), 1)?.max(1);
        let reserved = number(words.next(), next)?;
        let boot = words.next().map(str::to_owned);
        if let Some(extra) = words.next() {
            return Err(format!("unexpected {extra:?} after the boot id"));
        }
        Ok(Counter { next, reserved, boot })
    }
}

impl std::fmt::Display for Counter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.next, self.reserved)?;
        if let Some(boot) = &self.boot {
            write!(f, " {boot}")?;
        }
        writeln!(f)
    }
}

/// This boot's id (Linux), if the kernel says. Read once per process: it cannot change while
/// the process lives, and every `run` allocates an id.
fn boot_id() -> Option<String> {
    static BOOT: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    BOOT.get_or_init(|| {
        let text = fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
        let id = text.trim();
        (!id.is_empty() && !id.contains(char::is_whitespace)).then(|| id.to_owned())
    })
    .clone()
}

/// Whether `s` has the shape of a session id (`sh-` and digits without a leading zero), so it is
/// safe to use as a path component and names one session only.
pub fn is_session_id(s: &str) -> bool {
    s.strip_prefix(SESSION_ID_PREFIX).is_some_and(|n| {
        !n.is_empty() && !n.starts_with('0') && n.bytes().all(|b| b.is_ascii_digit())
    })
}

/// Create `dir` with mode 0700 if missing; refuse a symlink or a non-directory in its place,
/// and a directory that lets other users in.
fn ensure_private_dir(dir: &Path, recursive: bool) -> Result<(), StateDirError> {
    let unusable = |source| StateDirError::Unusable { path: dir.to_path_buf(), source };
    // Whether it existed is asked first: `create_dir_all` answers Ok for an existing directory.
    let existed = fs::symlink_metadata(dir).is_ok();
    match DirBuilder::new().recursive(recursive).mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(unusable(e)),
    }
    let meta = fs::symlink_metadata(dir).map_err(unusable)?;
    if !meta.is_dir() {
        return Err(StateDirError::NotADirectory { path: dir.to_path_buf() });
    }
    let mut mode = meta.permissions().mode();
    // Never change the mode of a directory someone else made (it may be `/tmp`, shared on
    // purpose): one others may write to is refused by `ensure_ours` (they could swap the socket
    // or plant records); one they may only list is used as it is (what it holds is made
    // 0700/0600). One we just made is loosened only by a umask or an ACL default: tightened.
    if !existed && mode & 0o077 != 0 && meta.uid() == rustix::process::geteuid().as_raw() {
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700)).map_err(unusable)?;
        mode = 0o700;
    }
    ensure_ours(dir, meta.uid(), mode)?;
    // Probe that we can write here, so an unwritable state dir is reported up front.
    let probe = dir.join(format!(".probe-{}", std::process::id()));
    File::create(&probe).map_err(unusable)?;
    let _ = fs::remove_file(&probe);
    Ok(())
}

/// The one rule for a directory of the state directory, given its owner and mode: the
/// effective user owns it (whoever owns it can swap the socket, read spools and forge records)
/// and no one else may write to it.
fn ensure_ours(dir: &Path, owner: u32, mode: u32) -> Result<(), StateDirError> {
    let euid = rustix::process::geteuid().as_raw();
    if owner != euid {
        return Err(StateDirError::ForeignOwner { path: dir.to_path_buf(), owner, euid });
    }
    let mode = mode & 0o7777;
    if mode & 0o022 != 0 {
        return Err(StateDirError::LooseMode { path: dir.to_path_buf(), mode });
    }
    Ok(())
}

/// Opens (creating it 0600 if needed, never through a symlink, never truncating) a small file
/// of the state directory that is read, written and `flock`ed in place: the id counter, the
/// recovery lock, the daemon lock.
pub fn open_lock_file(path: &Path) -> std::io::Result<std::fs::File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_never_reused() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = StateDir::open(tmp.path().join("home")).unwrap();
        let a = dir.allocate_id().unwrap();
        let b = dir.allocate_id().unwrap();
        assert_eq!((a.as_str(), b.as_str()), ("sh-1", "sh-2"));
        // A second handle on the same directory continues the sequence.
        let again = StateDir::open(tmp.path().join("home")).unwrap();
        assert_eq!(again.allocate_id().unwrap(), "sh-3");
    }

    #[test]
    fn the_counter_is_flushed_once_per_reservation_and_a_new_boot_skips_it() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = StateDir::open(tmp.path().join("home")).unwrap();
        let counter = || fs::read_to_string(dir.root().join(COUNTER_FILE)).unwrap();
        assert_eq!(dir.allocate_id().unwrap(), "sh-1");
        let c = Counter::parse(&counter()).unwrap();
        assert_eq!((c.next, c.reserved, c.boot.clone()), (2, 1 + ID_RESERVATION, boot_id()));
        // Past the reservation: a new one is taken.
        let boot = boot_id().map(|b| format!(" {b}")).unwrap_or_default();
        fs::write(dir.root().join(COUNTER_FILE), format!("1025 1025{boot}\n")).unwrap();
        assert_eq!(dir.allocate_id().unwrap(), "sh-1025");
        assert_eq!(Counter::parse(&counter()).unwrap().reserved, 1025 + ID_RESERVATION);
        // Written in another boot: writes after its last flush may be lost, so ids restart
        // past its reservation.
        fs::write(dir.root().join(COUNTER_FILE), "7 1031 another-boot\n").unwrap();
        assert_eq!(dir.allocate_id().unwrap(), "sh-1031");
        // The earlier layout (just the next id) continues where it was.
        fs::write(dir.root().join(COUNTER_FILE), "42").unwrap();
        assert_eq!(dir.allocate_id().unwrap(), "sh-42");
        assert_eq!(dir.allocate_id().unwrap(), "sh-43");
        // A longer text left in the file is cut off, not mixed in.
        fs::write(dir.root().join(COUNTER_FILE), format!("5 900{boot}         \n")).unwrap();
        assert_eq!(dir.allocate_id().unwrap(), "sh-5");
        assert_eq!(Counter::parse(&counter()).unwrap().next, 6);
        fs::write(dir.root().join(COUNTER_FILE), "x").unwrap();
        assert!(matches!(dir.allocate_id(), Err(StateDirError::BadCounter { .. })));
    }

    #[test]
    fn state_dir_is_private() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = StateDir::open(tmp.path().join("home")).unwrap();
        let mode = fs::metadata(dir.root()).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        let inst = dir.instance_dir("i1").unwrap();
        assert_eq!(fs::metadata(inst).unwrap().permissions().mode() & 0o777, 0o700);
    }

    #[test]
    fn a_loose_directory_it_did_not_create_is_refused_not_changed() {
        let tmp = tempfile::tempdir().unwrap();
        for mode in [0o1777, 0o777, 0o770, 0o2775] {
            let root = tmp.path().join(format!("home-{mode:o}"));
            fs::create_dir(&root).unwrap();
            fs::set_permissions(&root, fs::Permissions::from_mode(mode)).unwrap();
            let err = StateDir::open(&root).unwrap_err();
            assert!(matches!(err, StateDirError::LooseMode { .. }), "{mode:o}: {err}");
            assert!(err.to_string().contains("chmod 700"), "{err}");
            let now = fs::metadata(&root).unwrap().permissions().mode() & 0o7777;
            assert_eq!(now, mode, "the mode of a directory it did not create was changed");
        }
        // One others may only list is used as it is, its mode kept.
        let listed = tmp.path().join("listed");
        fs::create_dir(&listed).unwrap();
        fs::set_permissions(&listed, fs::Permissions::from_mode(0o755)).unwrap();
        StateDir::open(&listed).unwrap();
        assert_eq!(fs::metadata(&listed).unwrap().permissions().mode() & 0o7777, 0o755);
        // A spool directory loosened after the fact is refused too.
        let root = tmp.path().join("home");
        StateDir::open(&root).unwrap();
        fs::set_permissions(root.join(SPOOL_DIR), fs::Permissions::from_mode(0o777)).unwrap();
        assert!(matches!(StateDir::open(&root), Err(StateDirError::LooseMode { .. })));
    }

    #[test]
    fn symlinked_instance_dir_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = StateDir::open(tmp.path().join("home")).unwrap();
        std::os::unix::fs::symlink(tmp.path(), dir.root().join("spool/evil")).unwrap();
        assert!(matches!(dir.instance_dir("evil"), Err(StateDirError::NotADirectory { .. })));
    }

    #[test]
    fn a_state_dir_of_another_user_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("home");
        StateDir::open(&root).unwrap();
        let meta = fs::symlink_metadata(&root).unwrap();
        assert!(ensure_ours(&root, meta.uid(), meta.mode()).is_ok());
        // Root gives the directory away; anyone else finds `/` foreign (it is root's).
        let (foreign, owner) = if rustix::process::geteuid().is_root() {
            std::os::unix::fs::chown(&root, Some(65534), Some(65534)).unwrap();
            (root.clone(), 65534)
        } else {
            (PathBuf::from("/"), 0)
        };
        let meta = fs::symlink_metadata(&foreign).unwrap();
        let err = ensure_ours(&foreign, meta.uid(), 0o700).unwrap_err();
        assert!(matches!(err, StateDirError::ForeignOwner { owner: o, .. } if o == owner), "{err}");
        assert!(err.to_string().contains(&format!("uid {owner}")), "{err}");
        if owner == 65534 {
            assert!(matches!(StateDir::open(&root), Err(StateDirError::ForeignOwner { .. })));
        }
    }

    #[test]
    fn session_ids_are_checked_before_use_as_paths() {
        assert!(is_session_id("sh-12"));
        for bad in ["sh-", "sh-1/../x", "../sh-1", "sh-1a", "x-1", "sh-+64", "sh-064", "sh- 1"] {
            assert!(!is_session_id(bad), "{bad}");
        }
    }
}
