//! The mount namespace of a sandboxed session (see `namespaces.rs`), set up by the spawned
//! child with the mount API, in this order:
//!
//! 1. every mount made private (nothing propagates back to the host);
//! 2. detached clones (`open_tree(OPEN_TREE_CLONE)`) of each writable root — checked to be the
//!    very directory the parent granted (device and inode), so a rename in between cannot swap
//!    it — of the daemon's sockets in its home, and of the devices the session keeps;
//! 3. the whole tree made read-only, `nosuid` and `nodev` (`mount_setattr(AT_RECURSIVE)`);
//! 4. each hidden directory (the daemon's home) covered by an empty tmpfs, each hidden file
//!    (a door's secret) by `/dev/null` on a `nodev` mount (it cannot even be opened);
//! 5. the writable roots and the sockets moved back in place (`move_mount`), writable;
//! 6. a new `/dev`: a tmpfs holding only `null`, `zero`, `full`, `random`, `urandom`, `tty`, a
//!    new `devpts` instance (`/dev/pts`, `/dev/ptmx`) and an `shm` tmpfs;
//! 7. a new `/proc`, of the session's PID namespace.
//!
//! Everything is prepared by [`MountPlan::new`] in the parent; the child ([`enter_in_child`])
//! makes raw system calls only, on that memory and its own stack.

use std::ffi::{CStr, CString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use stockade_proto::SandboxMode;

/// The last system call's errno.
fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EPERM)
}

/// Most clones one session's set-up holds (writable roots, sockets, hidden files, devices).
const MAX_CLONES: usize = 64;

/// The devices a session keeps, bound from the host's.
const DEVICES: [&CStr; 6] =
    [c"/dev/null", c"/dev/zero", c"/dev/full", c"/dev/random", c"/dev/urandom", c"/dev/tty"];
/// Where each of [`DEVICES`] goes on the new `/dev` (the same paths).
const NEW_DEVICES: [&CStr; 6] = DEVICES;

const OPEN_TREE_CLONE: u32 = 1;
const AT_RECURSIVE: u32 = 0x8000;
const MOVE_MOUNT_F_EMPTY_PATH: u32 = 4;
const MOUNT_ATTR_RDONLY: u64 = 1;
const MOUNT_ATTR_NOSUID: u64 = 2;
const MOUNT_ATTR_NODEV: u64 = 4;

/// `struct mount_attr` (`linux/mount.h`).
#[repr(C)]
struct MountAttr {
    set: u64,
    clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// A directory or file bound into the session, with the identity the parent saw.
struct Bound {
    path: CString,
    id: (u64, u64),
}

/// A hidden directory: covered by an empty tmpfs holding only the mount points of what is
/// bound back beneath it.
struct Cover {
    path: CString,
    /// Directories to make in it, parents first.
    dirs: Vec<CString>,
    /// Empty files to make in it (mount points of sockets).
    files: Vec<CString>,
}

/// The mount set-up of a session, prepared in the parent.
pub(crate) struct MountPlan {
    /// Writable roots outside every hidden directory.
    roots: Vec<Bound>,
    /// Writable roots and daemon sockets inside a hidden directory (bound after the covers).
    inner: Vec<Bound>,
    covers: Vec<Cover>,
    hidden_files: Vec<CString>,
    /// The session's Landlock ruleset (-1: none): the new `/proc`, `/dev` and `devpts` are new
    /// files the parent could not put rules on, so the child adds them before entering it.
    pub(crate) ruleset: i32,
    /// Rights on them: read (`/proc`, `/dev`), terminal (`/dev/pts`), all (`/dev/shm`).
    rights: (u64, u64, u64),
}

fn cstring(p: &Path) -> std::io::Result<CString> {
    CString::new(p.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidInput, "a NUL in a path"))
}

fn identity(p: &Path) -> std::io::Result<(u64, u64)> {
    let st = rustix::fs::lstat(p)?;
    #[allow(clippy::unnecessary_cast)] // the field types differ between targets
    Ok((st.st_dev as u64, st.st_ino as u64))
}

impl MountPlan {
    /// The mounts of a session under `spec`; `None` when there are more binds than one
    /// set-up holds (the session then runs without a mount namespace).
    pub(crate) fn new(spec: &crate::sandbox::SandboxSpec) -> std::io::Result<Option<MountPlan>> {
        let hidden: Vec<PathBuf> = spec
            .hidden
            .iter()
            .filter_map(|h| std::fs::canonicalize(h).ok())
            .filter(|h| h.parent().is_some())
            .collect();
        let under_hidden = |p: &Path| hidden.iter().find(|h| p.starts_with(h) && p != *h);
        let mut plan = MountPlan {
            roots: Vec::new(),
            inner: Vec::new(),
            covers: Vec::new(),
            hidden_files: Vec::new(),
            ruleset: -1,
            rights: rights(),
        };
        for h in &hidden {
            if under_hidden(h).is_some() {
                continue;
            }
            if h.is_dir() {
                plan.covers.push(Cover { path: cstring(h)?, dirs: Vec::new(), files: Vec::new() });
            } else {
                plan.hidden_files.push(cstring(h)?);
            }
        }
        let mut inner: Vec<(PathBuf, bool)> = Vec::new();
        if spec.policy.mode == SandboxMode::WorkspaceWrite {
            for root in &spec.writable_roots {
                let bound = Bound { path: cstring(root)?, id: identity(root)? };
                if under_hidden(root).is_some() {
                    inner.push((root.clone(), true));
                    plan.inner.push(bound);
                } else {
                    plan.roots.push(bound);
                }
            }
        }
        // The daemon's sockets at the top of a hidden directory stay reachable: a nested
        // `stockade` talks to the daemon through them.
        for h in hidden.iter().filter(|h| h.is_dir() && under_hidden(h).is_none()) {
            for entry in std::fs::read_dir(h)?.flatten() {
                let is_socket =
                    entry.file_type().is_ok_and(|t| std::os::unix::fs::FileTypeExt::is_socket(&t));
                if is_socket {
                    let path = entry.path();
                    plan.inner.push(Bound { path: cstring(&path)?, id: identity(&path)? });
                    inner.push((path, false));
                }
            }
        }
        for (path, is_dir) in inner {
            let Some(h) = under_hidden(&path) else { continue };
            let Some(cover) =
                plan.covers.iter_mut().find(|c| c.path.as_bytes() == h.as_os_str().as_bytes())
            else {
                continue;
            };
            let mut chain: Vec<&Path> =
                path.ancestors().take_while(|a| *a != h.as_path()).collect();
            chain.reverse();
            let last = chain.pop();
            for dir in chain {
                cover.dirs.push(cstring(dir)?);
            }
            match (last, is_dir) {
                (Some(p), true) => cover.dirs.push(cstring(p)?),
                (Some(p), false) => cover.files.push(cstring(p)?),
                (None, _) => {}
            }
        }
        let clones = plan.roots.len() + plan.inner.len() + plan.hidden_files.len() + DEVICES.len();
        Ok((clones <= MAX_CLONES).then_some(plan))
    }
}

/// A detached clone of the mount tree at `path` (not following a last symlink).
unsafe fn clone_tree(path: &CStr) -> Result<i32, i32> {
    // SAFETY: a NUL-terminated path.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_open_tree,
            libc::AT_FDCWD,
            path.as_ptr(),
            OPEN_TREE_CLONE
                | libc::O_CLOEXEC as u32
                | AT_RECURSIVE
                | libc::AT_SYMLINK_NOFOLLOW as u32,
        )
    };
    if fd < 0 { Err(errno()) } else { Ok(fd as i32) }
}

/// A clone of `b`, checked to be what the parent saw (`EXDEV` when it is not).
unsafe fn clone_checked(b: &Bound) -> Result<i32, i32> {
    // SAFETY: the caller's; `st` is a stack value the kernel fills.
    unsafe {
        let fd = clone_tree(&b.path)?;
        let mut st: libc::stat = std::mem::zeroed();
        if libc::fstat(fd, &mut st) != 0 {
            return Err(errno());
        }
        #[allow(clippy::unnecessary_cast)] // the field types differ between targets
        if (st.st_dev as u64, st.st_ino as u64) != b.id {
            return Err(libc::EXDEV);
        }
        Ok(fd)
    }
}

/// `mount_setattr` on `path` (or on `fd` itself when `path` is empty).
unsafe fn setattr(fd: i32, path: &CStr, flags: u32, set: u64, clr: u64) -> Result<(), i32> {
    let attr = MountAttr { set, clr, propagation: 0, userns_fd: 0 };
    // SAFETY: a NUL-terminated path and a live attribute.
    let r = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            fd,
            path.as_ptr(),
            flags,
            &raw const attr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    if r != 0 { Err(errno()) } else { Ok(()) }
}

/// Moves the detached tree `fd` onto `to`.
unsafe fn move_to(fd: i32, to: &CStr) -> Result<(), i32> {
    // SAFETY: NUL-terminated paths.
    let r = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            fd,
            c"".as_ptr(),
            libc::AT_FDCWD,
            to.as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH,
        )
    };
    if r != 0 { Err(errno()) } else { Ok(()) }
}

unsafe fn mount(
    src: &CStr,
    at: &CStr,
    fstype: &CStr,
    flags: libc::c_ulong,
    data: &CStr,
) -> Result<(), i32> {
    // SAFETY: NUL-terminated strings.
    let r = unsafe {
        libc::mount(src.as_ptr(), at.as_ptr(), fstype.as_ptr(), flags, data.as_ptr().cast())
    };
    if r != 0 { Err(errno()) } else { Ok(()) }
}

/// Makes an empty file at `path` (a mount point), if there is none.
unsafe fn touch(path: &CStr) -> Result<(), i32> {
    // SAFETY: a NUL-terminated path.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC, 0o666);
        if fd < 0 {
            return Err(errno());
        }
        libc::close(fd);
    }
    Ok(())
}

unsafe fn mkdir(path: &CStr) -> Result<(), i32> {
    // SAFETY: a NUL-terminated path.
    if unsafe { libc::mkdir(path.as_ptr(), 0o755) } != 0 && errno() != libc::EEXIST {
        return Err(errno());
    }
    Ok(())
}

const FS_FLAGS: libc::c_ulong = libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;

/// Sets the mounts up inside the new mount namespace (see the module's steps). Raw system
/// calls only.
///
/// # Safety
/// Between clone and exec only; `plan`'s memory alive.
pub(crate) unsafe fn enter_in_child(plan: &MountPlan) -> Result<(), i32> {
    let mut fds = [-1i32; MAX_CLONES];
    // SAFETY: the caller's; raw calls on prepared data and stack values.
    unsafe {
        mount(c"none", c"/", c"", libc::MS_REC | libc::MS_PRIVATE, c"")?;
        let mut n = 0;
        for b in plan.roots.iter().chain(&plan.inner) {
            fds[n] = clone_checked(b)?;
            n += 1;
        }
        for _ in &plan.hidden_files {
            fds[n] = clone_tree(c"/dev/null")?;
            n += 1;
        }
        for dev in DEVICES {
            fds[n] = clone_tree(dev).unwrap_or(-1);
            n += 1;
        }
        let all = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
        setattr(libc::AT_FDCWD, c"/", AT_RECURSIVE, all, 0)?;
        let mut fd = fds.iter().copied();
        for b in &plan.roots {
            move_to(fd.next().unwrap_or(-1), &b.path)?;
            setattr(
                libc::AT_FDCWD,
                &b.path,
                AT_RECURSIVE,
                MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
                0,
            )?;
        }
        let inner: [i32; MAX_CLONES] = {
            let mut v = [-1; MAX_CLONES];
            for slot in v.iter_mut().take(plan.inner.len()) {
                *slot = fd.next().unwrap_or(-1);
            }
            v
        };
        for c in &plan.covers {
            mount(c"tmpfs", &c.path, c"tmpfs", FS_FLAGS, c"mode=0755,size=64k")?;
            for d in &c.dirs {
                mkdir(d)?;
            }
            for f in &c.files {
                touch(f)?;
            }
        }
        for path in &plan.hidden_files {
            move_to(fd.next().unwrap_or(-1), path)?;
            setattr(libc::AT_FDCWD, path, 0, all, 0)?;
        }
        for (b, &f) in plan.inner.iter().zip(&inner) {
            move_to(f, &b.path)?;
            setattr(
                libc::AT_FDCWD,
                &b.path,
                AT_RECURSIVE,
                MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
                0,
            )?;
        }
        for c in &plan.covers {
            setattr(libc::AT_FDCWD, &c.path, 0, all, 0)?;
        }
        new_dev(fd)?;
        mount(c"proc", c"/proc", c"proc", FS_FLAGS, c"")?;
        if plan.ruleset >= 0 {
            let (read, tty, all) = plan.rights;
            for (path, access) in
                [(c"/proc", read), (c"/dev", read), (c"/dev/pts", tty), (c"/dev/shm", all)]
            {
                grant(plan.ruleset, path, access)?;
            }
        }
    }
    Ok(())
}

/// `struct landlock_path_beneath_attr` (`linux/landlock.h`).
#[repr(C, packed)]
struct PathBeneathAttr {
    allowed_access: u64,
    parent_fd: i32,
}

/// Adds a Landlock rule granting `access` beneath `path` to `ruleset`.
unsafe fn grant(ruleset: i32, path: &CStr, access: u64) -> Result<(), i32> {
    // SAFETY: a NUL-terminated path, a live attribute.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_PATH | libc::O_CLOEXEC | libc::O_DIRECTORY);
        if fd < 0 {
            return Err(errno());
        }
        let attr = PathBeneathAttr { allowed_access: access, parent_fd: fd };
        let r = libc::syscall(libc::SYS_landlock_add_rule, ruleset, 1u32, &raw const attr, 0u32);
        let err = errno();
        libc::close(fd);
        if r != 0 {
            return Err(err);
        }
    }
    Ok(())
}

/// The rights of [`MountPlan::rights`] at this kernel's Landlock ABI (as the sandbox uses it).
fn rights() -> (u64, u64, u64) {
    use landlock::{ABI, Access, AccessFs};
    let abi = match crate::sandbox::landlock_abi().min(7) {
        ..=5 => ABI::V5,
        6 => ABI::V6,
        _ => ABI::V7,
    };
    let read = AccessFs::from_read(abi);
    let tty = read | AccessFs::WriteFile | AccessFs::IoctlDev;
    (read.bits(), tty.bits(), AccessFs::from_all(abi).bits())
}

/// The new `/dev`: a tmpfs with the host's devices in `devices` (clones, `-1` for one the host
/// lacks) bound on empty files, a new `devpts` instance, an `shm` tmpfs; read-only after.
unsafe fn new_dev(mut devices: impl Iterator<Item = i32>) -> Result<(), i32> {
    // SAFETY: the caller's.
    unsafe {
        mount(
            c"tmpfs",
            c"/dev",
            c"tmpfs",
            libc::MS_NOSUID | libc::MS_NOEXEC,
            c"mode=0755,size=64k",
        )?;
        for path in NEW_DEVICES {
            let fd = devices.next().unwrap_or(-1);
            if fd < 0 {
                continue;
            }
            touch(path)?;
            move_to(fd, path)?;
        }
        mkdir(c"/dev/pts")?;
        mount(
            c"devpts",
            c"/dev/pts",
            c"devpts",
            libc::MS_NOSUID | libc::MS_NOEXEC,
            c"newinstance,ptmxmode=0666,mode=0620",
        )?;
        mkdir(c"/dev/shm")?;
        mount(c"tmpfs", c"/dev/shm", c"tmpfs", FS_FLAGS, c"mode=1777,size=64m")?;
        for (target, link) in [
            (c"pts/ptmx", c"/dev/ptmx"),
            (c"/proc/self/fd", c"/dev/fd"),
            (c"/proc/self/fd/0", c"/dev/stdin"),
            (c"/proc/self/fd/1", c"/dev/stdout"),
            (c"/proc/self/fd/2", c"/dev/stderr"),
        ] {
            if libc::symlink(target.as_ptr(), link.as_ptr()) != 0 {
                return Err(errno());
            }
        }
        setattr(libc::AT_FDCWD, c"/dev", 0, MOUNT_ATTR_RDONLY, 0)?;
    }
    Ok(())
}
