//! Namespaces of a sandboxed session (Linux, x86_64 `clone3` spawn): the `clone3` that starts
//! the session's keeper also makes it PID 1 of a new PID namespace, with IPC and UTS namespaces
//! of its own, a network namespace holding only loopback under `network none`, a mount
//! namespace (`ns_mount.rs`: the root read-only, the writable roots bound writable, the
//! daemon's home and secrets covered, a minimal `/dev`, a fresh `/proc`), and — when the daemon
//! is not root — a user namespace mapping only the daemon's own uid and gid. Before `exec` the
//! child drops every capability (bounding, ambient, effective, permitted, inheritable).
//!
//! Everything is prepared here, in the parent (`NsPlan::new`); the child runs only raw system
//! calls (`enter_in_child`, `drop_caps`). Where the kernel (or a container's seccomp
//! profile) refuses the namespaces, the spawn falls back to Landlock and seccomp alone and
//! [`status`] says so, with the reason; a daemon that requires the full world refuses such a
//! run instead (`SpawnError::Isolation`).

use std::ffi::CString;
use std::sync::atomic::{AtomicI32, Ordering};

/// Namespace flags of `clone3` (`linux/sched.h`).
const CLONE_NEWNS: u64 = 0x0002_0000;
const CLONE_NEWUTS: u64 = 0x0400_0000;
const CLONE_NEWIPC: u64 = 0x0800_0000;
const CLONE_NEWUSER: u64 = 0x1000_0000;
const CLONE_NEWPID: u64 = 0x2000_0000;
const CLONE_NEWNET: u64 = 0x4000_0000;

/// 0: not tried yet; 1: works; otherwise the negated errno that made namespaces unavailable.
static STATE: AtomicI32 = AtomicI32::new(0);

/// Test hook (feature `test-hooks` only): set, the kernel is taken to refuse namespaces
/// (`EPERM`), as a container's default seccomp profile does.
#[cfg(feature = "test-hooks")]
pub const NO_NAMESPACES_ENV: &str = "STOCKADE_TEST_NO_NAMESPACES";

/// Whether the test hook refuses namespaces.
pub(crate) fn refused_by_hook() -> bool {
    #[cfg(feature = "test-hooks")]
    if std::env::var_os(NO_NAMESPACES_ENV).is_some() {
        return true;
    }
    false
}

/// Whether to ask for namespaces (not known to be refused, and spawned with `clone3`).
pub(crate) fn may_work() -> bool {
    cfg!(target_arch = "x86_64") && STATE.load(Ordering::Relaxed) >= 0
}

/// Records that the kernel refused the namespaces with `errno`: later spawns do not ask again.
pub(crate) fn mark_refused(errno: i32) {
    STATE.store(-errno.max(1), Ordering::Relaxed);
}

/// Records that a spawn got its namespaces.
pub(crate) fn mark_working() {
    STATE.store(1, Ordering::Relaxed);
}

/// Why sandboxed sessions get no namespaces of their own, when they do not (known after the
/// first sandboxed spawn, or from the test hook).
pub fn unavailable_reason() -> Option<String> {
    if refused_by_hook() {
        return Some("refused by the kernel (EPERM, simulated)".into());
    }
    if !cfg!(target_arch = "x86_64") {
        return Some("only built for x86_64".into());
    }
    match STATE.load(Ordering::Relaxed) {
        0 => probe()
            .err()
            .map(|e| format!("refused by the kernel ({})", std::io::Error::from_raw_os_error(e))),
        e if e < 0 => {
            Some(format!("refused by the kernel ({})", std::io::Error::from_raw_os_error(-e)))
        }
        _ => None,
    }
}

/// Why sandboxed sessions get no namespaces, when that is known without trying (no probe):
/// for a session's answer.
pub fn known_missing() -> Option<String> {
    if NO_KEEPERS.load(Ordering::Relaxed) {
        return Some("sessions run under no keeper, --session-keeper=never".into());
    }
    if refused_by_hook() {
        return Some("refused by the kernel (EPERM, simulated)".into());
    }
    match STATE.load(Ordering::Relaxed) {
        e if e < 0 => {
            Some(format!("refused by the kernel ({})", std::io::Error::from_raw_os_error(-e)))
        }
        _ => None,
    }
}

/// What still holds without namespaces, one sentence (for the answer and `stockade doctor`).
pub const WITHOUT_NAMESPACES: &str = "Landlock and seccomp still confine paths, sockets and the listed system calls, but chmod, chown, xattrs and utimes outside the roots, other sessions' terminals, SysV IPC keys, /proc of other processes and block devices are not hidden";

/// One line for `stockade doctor`: which namespaces a sandboxed session gets here.
pub fn status() -> String {
    match unavailable_reason() {
        Some(why) => format!("namespaces: unavailable ({why}): {WITHOUT_NAMESPACES}"),
        None => {
            let user = if rustix::process::geteuid().is_root() {
                "no user namespace (root daemon; every capability dropped)"
            } else {
                "user (own uid and gid only, every capability dropped)"
            };
            format!(
                "namespaces: pid (the keeper is PID 1), ipc, uts, mount (read-only root, private /dev and /proc), net under network none (loopback only), {user}"
            )
        }
    }
}

/// What the child does to enter its namespaces, prepared in the parent.
pub(crate) struct NsPlan {
    /// The `clone3` namespace flags.
    pub(crate) flags: u64,
    /// `uid_map` and `gid_map` lines, when a user namespace is made (the daemon is not root).
    maps: Option<(CString, CString)>,
    /// Bring loopback up (a new network namespace).
    lo: bool,
    /// The mount namespace's set-up.
    pub(crate) mounts: Option<crate::ns_mount::MountPlan>,
}

impl NsPlan {
    /// The namespaces of a sandboxed session: a user namespace when this process is not root,
    /// a network namespace when `own_net` (network `none`).
    pub(crate) fn new(own_net: bool, mounts: Option<crate::ns_mount::MountPlan>) -> NsPlan {
        let mut flags = CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS;
        let uid = rustix::process::geteuid().as_raw();
        let gid = rustix::process::getegid().as_raw();
        let maps = (uid != 0).then(|| {
            flags |= CLONE_NEWUSER;
            let line = |id: u32| CString::new(format!("{id} {id} 1\n")).unwrap_or_default();
            (line(uid), line(gid))
        });
        if own_net {
            flags |= CLONE_NEWNET;
        }
        if mounts.is_some() {
            flags |= CLONE_NEWNS;
        }
        NsPlan { flags, maps, lo: own_net, mounts }
    }
}

/// Writes `data` to the file at `path` (raw calls). Errno on failure.
///
/// # Safety
/// Between clone and exec only.
pub(crate) unsafe fn write_file(path: &std::ffi::CStr, data: &[u8]) -> Result<(), i32> {
    // SAFETY: plain system calls on a NUL-terminated path and a live buffer.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return Err(errno());
        }
        let n = libc::write(fd, data.as_ptr().cast(), data.len());
        let err = errno();
        libc::close(fd);
        if n != data.len() as isize {
            return Err(err);
        }
    }
    Ok(())
}

pub(crate) fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EPERM)
}

/// Sets the namespaces up from inside (the child of `clone3`, before anything else): the user
/// namespace's maps, loopback, the mounts. Raw system calls only.
///
/// # Safety
/// Between clone and exec only; `plan`'s memory alive (the parent waits).
pub(crate) unsafe fn enter_in_child(plan: &NsPlan) -> Result<(), i32> {
    // SAFETY: the caller's; raw calls on prepared data.
    unsafe {
        if let Some((uid, gid)) = &plan.maps {
            write_file(c"/proc/self/setgroups", b"deny")?;
            write_file(c"/proc/self/uid_map", uid.as_bytes())?;
            write_file(c"/proc/self/gid_map", gid.as_bytes())?;
        }
        if plan.lo {
            loopback_up()?;
        }
        if let Some(m) = &plan.mounts {
            crate::ns_mount::enter_in_child(m)?;
        }
    }
    Ok(())
}

/// `struct ifreq` as far as `SIOCGIFFLAGS`/`SIOCSIFFLAGS` use it.
#[repr(C)]
struct IfReq {
    name: [u8; 16],
    flags: libc::c_short,
    _pad: [u8; 22],
}

/// Brings the new network namespace's loopback up.
unsafe fn loopback_up() -> Result<(), i32> {
    // SAFETY: a socket used for two ioctls on a stack `ifreq`.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(errno());
        }
        let mut req = IfReq { name: [0; 16], flags: 0, _pad: [0; 22] };
        req.name[..2].copy_from_slice(b"lo");
        let mut ok = libc::ioctl(fd, libc::SIOCGIFFLAGS, &raw mut req) == 0;
        if ok {
            req.flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
            ok = libc::ioctl(fd, libc::SIOCSIFFLAGS, &raw mut req) == 0;
        }
        let err = errno();
        libc::close(fd);
        if !ok {
            return Err(err);
        }
    }
    Ok(())
}

/// `struct __user_cap_header_struct` and `__user_cap_data_struct` (`linux/capability.h`).
#[repr(C)]
struct CapHeader {
    version: u32,
    pid: i32,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// Drops every capability: the bounding set (so no `exec` gets any back, not even as root),
/// the ambient set, then effective, permitted and inheritable. Raw system calls only.
///
/// # Safety
/// Between clone and exec only.
pub(crate) unsafe fn drop_caps() -> Result<(), i32> {
    // SAFETY: plain system calls with stack values.
    unsafe {
        for cap in 0..64 {
            // EINVAL past the kernel's last capability.
            if libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno() != libc::EINVAL {
                return Err(errno());
            }
        }
        if libc::prctl(libc::PR_CAP_AMBIENT, libc::PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0 {
            return Err(errno());
        }
        let header = CapHeader { version: 0x2008_0522, pid: 0 }; // _LINUX_CAPABILITY_VERSION_3
        let data = [CapData { effective: 0, permitted: 0, inheritable: 0 }; 2];
        if libc::syscall(libc::SYS_capset, &raw const header, data.as_ptr()) != 0 {
            return Err(errno());
        }
    }
    Ok(())
}

/// Whether `pid` is PID 1 of a PID namespace below ours (`NSpid:` ends in 1 with more levels
/// than our own).
pub(crate) fn pid_1_of_own_ns(pid: u32) -> bool {
    let levels = |status: &str| -> Option<Vec<String>> {
        let line = status.lines().find_map(|l| l.strip_prefix("NSpid:"))?;
        Some(line.split_whitespace().map(str::to_owned).collect())
    };
    let theirs = std::fs::read_to_string(format!("/proc/{pid}/status")).ok();
    let ours = std::fs::read_to_string("/proc/self/status").ok();
    match (theirs.as_deref().and_then(levels), ours.as_deref().and_then(levels)) {
        (Some(t), Some(o)) => t.len() > o.len() && t.last().is_some_and(|l| l == "1"),
        _ => false,
    }
}

/// Set once at start-up: sandboxed sessions must get their namespaces (`--isolation full`).
static REQUIRED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Requires namespaces for every sandboxed session (`--isolation full`): a run that cannot get
/// them is refused, naming what is missing.
pub fn set_required(required: bool) {
    REQUIRED.store(required, Ordering::Relaxed);
}

/// Whether namespaces are required ([`set_required`]).
pub(crate) fn required() -> bool {
    REQUIRED.load(Ordering::Relaxed)
}

/// Set once at start-up: sessions run under no keeper at all (`--session-keeper=never`), so
/// none gets a PID namespace (whose PID 1 the keeper is), nor the other namespaces.
static NO_KEEPERS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// No session runs under a keeper (`daemon run --session-keeper=never`): sandboxed sessions
/// then get no namespaces of their own (Landlock and seccomp alone).
pub fn set_no_keepers(none: bool) {
    NO_KEEPERS.store(none, Ordering::Relaxed);
}

/// Whether a spawn under `sandbox` is to get namespaces of its own: the policy confines, and
/// the kernel is not known to refuse them (or they are required, so the spawn says why not).
pub(crate) fn wanted(sandbox: Option<&crate::sandbox::SandboxSpec>) -> bool {
    cfg!(target_arch = "x86_64")
        && !NO_KEEPERS.load(Ordering::Relaxed)
        && sandbox.is_some_and(|s| s.policy.confines())
        && (may_work() || required())
}

/// The namespaces of a spawn under `sandbox` (see [`wanted`]).
pub(crate) fn plan_for(
    sandbox: Option<&crate::sandbox::SandboxSpec>,
) -> std::io::Result<Option<NsPlan>> {
    let Some(spec) = sandbox.filter(|_| wanted(sandbox)) else { return Ok(None) };
    let own_net = spec.policy.network == stockade_proto::NetworkMode::None;
    let mounts = crate::ns_mount::MountPlan::new(spec)?;
    Ok(Some(NsPlan::new(own_net, mounts)))
}

/// Whether this process may make the namespaces of a sandboxed session: a forked child tries
/// `unshare` with the same flags and exits with its errno (for `stockade doctor`, before any
/// spawn has found out).
fn probe() -> Result<(), i32> {
    if refused_by_hook() {
        return Err(libc::EPERM);
    }
    let flags = (NsPlan::new(true, None).flags | CLONE_NEWNS) as libc::c_int;
    // SAFETY: the child makes only async-signal-safe calls (`unshare`, `_exit`); the parent
    // reaps it.
    unsafe {
        let pid = libc::fork();
        if pid == 0 {
            let code = if libc::unshare(flags) == 0 { 0 } else { errno() };
            libc::_exit(code.clamp(0, 255));
        }
        if pid < 0 {
            return Err(errno());
        }
        let mut status = 0;
        while libc::waitpid(pid, &mut status, 0) < 0 && errno() == libc::EINTR {}
        match libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status)) {
            Some(0) => Ok(()),
            Some(e) => Err(e),
            None => Err(libc::ECHILD),
        }
    }
}

/// The keeper a session in namespaces of its own runs under where sessions get none otherwise
/// (`configured`: the containment's): the embedded one, as its PID 1.
pub(crate) fn keeper_for(
    sandbox: Option<&crate::sandbox::SandboxSpec>,
    configured: &Option<std::os::fd::OwnedFd>,
) -> Option<std::os::fd::OwnedFd> {
    match configured {
        None if wanted(sandbox) => crate::keeper::open_embedded().ok(),
        _ => None,
    }
}
