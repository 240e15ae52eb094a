//! The fast spawn (Linux, x86_64): one `clone3` with `CLONE_VM | CLONE_VFORK | CLONE_PIDFD`
//! — and `CLONE_INTO_CGROUP` when the session has a cgroup — instead of a fork of the
//! multi-threaded daemon. The child shares the daemon's memory on a stack of its own until it
//! calls `execve` (the calling thread waits meanwhile, as in `vfork`), so no page table is copied;
//! the kernel places it in its cgroup and hands back its pidfd in the same call.
//!
//! Everything the child needs is prepared before the call (C strings, the environment, stdio
//! descriptors numbered 3 and up); the child runs only raw system calls — reset signal
//! dispositions and mask, `setsid`, `TIOCSCTTY`, `dup2`, `chdir`, `setrlimit`, `execve` — and
//! writes the failing step and its errno into memory the parent reads once the call returns.
//! Where `clone3` is missing or refused (old kernel, seccomp) [`spawn`] says so and the caller
//! falls back to fork + `pre_exec` (`process/spawn.rs`); [`status`] says which is in use.

use std::ffi::{CString, OsStr, OsString, c_void};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::Path;
use std::sync::atomic::{AtomicI32, Ordering};

/// `clone3` flags (`linux/sched.h`).
const CLONE_VM: u64 = 0x100;
const CLONE_VFORK: u64 = 0x4000;
const CLONE_PIDFD: u64 = 0x1000;
const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

/// The child's own stack until `execve`; its work is a few system calls.
const CHILD_STACK: usize = 64 * 1024;

/// The step of the child that failed (0: none).
pub(super) const STEP_SETSID: u8 = 1;
pub(super) const STEP_CTTY: u8 = 2;
pub(super) const STEP_STDIO: u8 = 3;
pub(super) const STEP_CWD: u8 = 4;
pub(super) const STEP_EXEC: u8 = 5;
pub(super) const STEP_SANDBOX: u8 = 6;
pub(super) const STEP_FSIZE: u8 = 7;
pub(super) const STEP_NAMESPACE: u8 = 8;
pub(super) const STEP_CAPS: u8 = 9;

/// `struct clone_args` (`linux/sched.h`, version 2: with `cgroup`).
#[repr(C)]
#[derive(Default)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
    set_tid: u64,
    set_tid_size: u64,
    cgroup: u64,
}

/// 0: not tried yet; 1: works; otherwise the negated errno that made it unavailable.
static STATE: AtomicI32 = AtomicI32::new(0);

/// Whether to try `clone3` (not known to be unavailable, and built for this architecture).
pub(super) fn may_work() -> bool {
    #[cfg(feature = "test-hooks")]
    if std::env::var_os(FORCE_FORK_ENV).is_some() {
        return false;
    }
    cfg!(target_arch = "x86_64") && STATE.load(Ordering::Relaxed) >= 0
}

/// Test hook (feature `test-hooks` only): set, every spawn takes the fork path, as where
/// `clone3` is refused.
#[cfg(feature = "test-hooks")]
pub(crate) const FORCE_FORK_ENV: &str = "STOCKADE_TEST_SPAWN_FORK";

/// Which spawn the engine uses, in one sentence for `stockade doctor`.
pub fn status() -> String {
    match STATE.load(Ordering::Relaxed) {
        0 => match probe() {
            Ok(()) => "clone3 (vfork-style: shared memory until exec, pidfd and cgroup placement in one call)".into(),
            Err(e) => format!("fork + pre_exec (clone3 unavailable: {e})"),
        },
        1 => "clone3 (vfork-style: shared memory until exec, pidfd and cgroup placement in one call)"
            .into(),
        e => format!("fork + pre_exec (clone3 unavailable: {})", io::Error::from_raw_os_error(-e)),
    }
}

/// Whether the kernel (and any seccomp filter) lets `clone3` through: an empty call is refused
/// with `EINVAL` where it exists, `ENOSYS`/`EPERM` where it does not.
fn probe() -> io::Result<()> {
    if !cfg!(target_arch = "x86_64") {
        return Err(io::Error::new(io::ErrorKind::Unsupported, "only built for x86_64"));
    }
    // SAFETY: a size of 0 is refused before the kernel reads the (null) argument.
    let r = unsafe { libc::syscall(libc::SYS_clone3, std::ptr::null::<CloneArgs>(), 0usize) };
    let err = io::Error::last_os_error();
    match (r, err.raw_os_error()) {
        (-1, Some(libc::EINVAL)) => Ok(()),
        (-1, _) => Err(err),
        // Cannot happen for an empty call; treat as unavailable rather than guess.
        _ => Err(io::Error::other("unexpected answer to an empty clone3")),
    }
}

/// What the child does, all prepared by the parent.
pub(super) struct Plan {
    /// The program's path (resolved against `PATH` already).
    path: CString,
    argv: Vec<CString>,
    envp: Vec<CString>,
    cwd: Option<CString>,
    /// Sources of fds 0, 1, 2 (each ≥ 3, close-on-exec in the parent).
    stdio: [RawFd; 3],
    /// Take fd 0 (a terminal) as controlling terminal after `setsid`.
    ctty: bool,
    /// `RLIMIT_NOFILE` to set (soft, hard).
    nofile: Option<(u64, u64)>,
    /// `RLIMIT_FSIZE` to set (soft and hard); failing to is failing the spawn.
    pub(super) fsize: Option<u64>,
    /// The sandbox to enter last before `execve` (its `Prepared` outlives the spawn).
    pub(super) sandbox: Option<crate::sandbox::ChildSandbox>,
    /// Execute the session keeper instead of the program (see `keeper.rs`).
    keeper: Option<KeeperExec>,
    /// The namespaces to make, when the kernel lets it (`namespaces.rs`); only with a keeper,
    /// which becomes PID 1 of the session's PID namespace.
    pub(super) ns: Option<crate::namespaces::NsPlan>,
    /// Refuse the spawn rather than run without the namespaces.
    pub(super) ns_required: bool,
}

/// How the child executes the keeper: `execveat` of its open executable, with the status
/// pipe's write end left open across the exec (close-on-exec cleared in the child only).
struct KeeperExec {
    exe: RawFd,
    status_fd: RawFd,
    argv: Vec<CString>,
}

impl Plan {
    /// Prepares the child's work. `env` is the full environment, in order; `stdio` must stay
    /// open until [`spawn`] returns.
    pub(super) fn new(
        program: &OsStr,
        args: &[OsString],
        env: Vec<(OsString, OsString)>,
        cwd: Option<&Path>,
        stdio: [RawFd; 3],
        ctty: bool,
        nofile: Option<(u64, u64)>,
    ) -> io::Result<Plan> {
        let c = |s: &OsStr| {
            CString::new(s.as_bytes())
                .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "contains a NUL byte"))
        };
        let path = resolve(program, &env)?;
        let mut argv = vec![c(program)?];
        for a in args {
            argv.push(c(a)?);
        }
        let envp = env
            .into_iter()
            .map(|(k, v)| {
                let mut kv = k.into_vec();
                kv.push(b'=');
                kv.extend_from_slice(v.as_bytes());
                c(OsStr::from_bytes(&kv))
            })
            .collect::<io::Result<Vec<_>>>()?;
        let cwd = cwd.map(|p| c(p.as_os_str())).transpose()?;
        Ok(Plan {
            path: c(path.as_os_str())?,
            argv,
            envp,
            cwd,
            stdio,
            ctty,
            nofile,
            fsize: None,
            sandbox: None,
            keeper: None,
            ns: None,
            ns_required: false,
        })
    }

    /// Gives this spawn (under a keeper) the namespaces of `sandbox`, with its Landlock ruleset
    /// for the rules on the new mounts.
    pub(super) fn attach_namespaces(
        &mut self,
        sandbox: Option<&crate::sandbox::SandboxSpec>,
    ) -> io::Result<()> {
        self.ns = crate::namespaces::plan_for(sandbox)?;
        if let (Some(ns), Some(sb)) = (self.ns.as_mut(), self.sandbox.as_ref())
            && let Some(m) = ns.mounts.as_mut()
        {
            m.ruleset = sb.ruleset_fd();
        }
        self.ns_required = crate::namespaces::required();
        Ok(())
    }

    /// Executes the keeper `exe` (an open executable) instead of the program, which the keeper
    /// then runs; `status_fd` (≥ 3, close-on-exec) is the status pipe's write end it gets.
    pub(super) fn use_keeper(&mut self, exe: RawFd, status_fd: RawFd) {
        let argv = crate::keeper::argv(status_fd, &self.path, &self.argv);
        self.keeper = Some(KeeperExec { exe, status_fd, argv });
    }
}

/// `program` as `execvp` would find it: as given when it has a `/`, else the first executable
/// regular file of that name in `PATH` (the command's own `PATH` when it sets one).
pub(super) fn resolve(
    program: &OsStr,
    env: &[(OsString, OsString)],
) -> io::Result<std::path::PathBuf> {
    if program.as_bytes().contains(&b'/') {
        return Ok(program.into());
    }
    let path = env
        .iter()
        .rev()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.clone())
        .unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    for dir in std::env::split_paths(&path) {
        let candidate = dir.join(program);
        let Ok(meta) = std::fs::metadata(&candidate) else { continue };
        if meta.is_file() && rustix::fs::access(&candidate, rustix::fs::Access::EXEC_OK).is_ok() {
            return Ok(candidate);
        }
    }
    Err(io::Error::from_raw_os_error(libc::ENOENT))
}

/// How a `clone3` spawn ended.
pub(super) enum Outcome {
    /// The child runs the program: its pid and pidfd, and whether it got its namespaces.
    Started { pid: u32, pidfd: OwnedFd, namespaces: bool },
    /// The namespaces are required and the kernel refused them (why).
    NoNamespaces(String),
    /// `clone3` cannot be used here: fall back to fork.
    Unavailable,
    /// The kernel refused to create the child (or to place it in the cgroup).
    Refused(io::Error),
    /// The child was created but a step before `exec` failed; it has exited and been reaped.
    Failed { step: u8, error: io::Error },
}

/// Shared between the parent and the child (same memory until `execve`).
#[repr(C)]
struct Shared {
    plan: *const Plan,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
    /// Enter the plan's namespaces (they were asked of `clone3`).
    ns: bool,
    step: u8,
    errno: i32,
}

/// Starts `plan` with `clone3`, placed in the cgroup of `cgroup_dir` when given, in the
/// plan's namespaces when the kernel makes them (else without, unless they are required).
pub(super) fn spawn(plan: &Plan, cgroup_dir: Option<&OwnedFd>) -> Outcome {
    use crate::namespaces;
    let state = STATE.load(Ordering::Relaxed);
    if state < 0 || !cfg!(target_arch = "x86_64") {
        return Outcome::Unavailable;
    }
    if plan.ns.is_some() && namespaces::refused_by_hook() {
        namespaces::mark_refused(libc::EPERM);
    }
    if plan.ns.is_some() && namespaces::may_work() {
        match attempt(plan, cgroup_dir, true) {
            Outcome::Refused(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EPERM | libc::EINVAL | libc::ENOSPC | libc::EUSERS | libc::EACCES)
                ) =>
            {
                namespaces::mark_refused(e.raw_os_error().unwrap_or(libc::EPERM));
            }
            Outcome::Failed { step: STEP_NAMESPACE, error } => {
                namespaces::mark_refused(error.raw_os_error().unwrap_or(libc::EPERM));
            }
            other => {
                if matches!(other, Outcome::Started { .. }) {
                    namespaces::mark_working();
                }
                return other;
            }
        }
    }
    if plan.ns.is_some() && plan.ns_required {
        let why = namespaces::unavailable_reason().unwrap_or_else(|| "not made".into());
        return Outcome::NoNamespaces(why);
    }
    attempt(plan, cgroup_dir, false)
}

/// One `clone3`, with the plan's namespaces when `with_ns`.
fn attempt(plan: &Plan, cgroup_dir: Option<&OwnedFd>, with_ns: bool) -> Outcome {
    let exec_argv = plan.keeper.as_ref().map_or(&plan.argv, |k| &k.argv);
    let argv: Vec<*const libc::c_char> =
        exec_argv.iter().map(|a| a.as_ptr()).chain(std::iter::once(std::ptr::null())).collect();
    let envp: Vec<*const libc::c_char> =
        plan.envp.iter().map(|a| a.as_ptr()).chain(std::iter::once(std::ptr::null())).collect();
    let mut shared =
        Shared { plan, argv: argv.as_ptr(), envp: envp.as_ptr(), ns: with_ns, step: 0, errno: 0 };
    let mut stack = ChildStack::take();
    let mut pidfd: RawFd = -1;
    let mut args = CloneArgs {
        flags: CLONE_VM | CLONE_VFORK | CLONE_PIDFD,
        pidfd: (&raw mut pidfd) as u64,
        exit_signal: libc::SIGCHLD as u64,
        stack: stack.as_mut_ptr() as u64,
        stack_size: (stack.len() * 16) as u64,
        ..CloneArgs::default()
    };
    if let Some(ns) = plan.ns.as_ref().filter(|_| with_ns) {
        args.flags |= ns.flags;
    }
    if let Some(dir) = cgroup_dir {
        args.flags |= CLONE_INTO_CGROUP;
        args.cgroup = dir.as_raw_fd() as u64;
    }
    // No handler of the daemon may run in the child while it shares our memory: block every
    // signal around the call; the child resets dispositions and unblocks before `execve`.
    let ret = {
        let _blocked = BlockSignals::new();
        // SAFETY: `args` describes a stack owned by this frame (`stack`) and alive until the call
        // returns (CLONE_VFORK: after the child's `execve` or exit); `child_main` never returns
        // and touches only `shared`, which outlives the child's use of it.
        unsafe { clone3_vm(&mut args, child_main, (&raw mut shared).cast()) }
    };
    stack.give_back();
    if ret < 0 {
        let errno = -ret as i32;
        if with_ns {
            // Said of the namespaces (the caller tries again without): clone3 itself may work.
            return Outcome::Refused(io::Error::from_raw_os_error(errno));
        }
        return match errno {
            libc::ENOSYS | libc::EPERM | libc::E2BIG | libc::EINVAL => {
                STATE.store(-errno, Ordering::Relaxed);
                Outcome::Unavailable
            }
            _ => Outcome::Refused(io::Error::from_raw_os_error(errno)),
        };
    }
    STATE.store(1, Ordering::Relaxed);
    // SAFETY: with CLONE_PIDFD the kernel stored a new descriptor we now own.
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd) };
    // SAFETY: the child no longer runs in our memory (it exec'd or exited): plain reads.
    let (step, errno) =
        unsafe { (std::ptr::read_volatile(&shared.step), std::ptr::read_volatile(&shared.errno)) };
    if step != 0 {
        // It exited right after recording the failure: reap it through its pidfd.
        let _ = rustix::process::waitid(
            rustix::process::WaitId::PidFd(std::os::fd::AsFd::as_fd(&pidfd)),
            rustix::process::WaitIdOptions::EXITED,
        );
        return Outcome::Failed { step, error: io::Error::from_raw_os_error(errno) };
    }
    Outcome::Started { pid: ret as u32, pidfd, namespaces: with_ns }
}

/// The child's stack, kept by each spawning thread for its next spawn: a fresh one per spawn
/// cost an allocation, page faults in the child and, with the daemon's allocator returning
/// freed memory at once, an `madvise` (a TLB shootdown across the daemon's threads) after it.
/// One spawn per thread at a time (`CLONE_VFORK` suspends the thread until the child's
/// `execve`), so a thread's stack is never shared.
struct ChildStack(Box<[u128]>);

thread_local! {
    static SPARE_STACK: std::cell::Cell<Option<Box<[u128]>>> = const { std::cell::Cell::new(None) };
}

impl ChildStack {
    /// This thread's stack (or a new one). 16-byte aligned top of stack: `u128` elements.
    fn take() -> ChildStack {
        let kept = SPARE_STACK.try_with(std::cell::Cell::take).ok().flatten();
        ChildStack(kept.unwrap_or_else(|| vec![0u128; CHILD_STACK / 16].into_boxed_slice()))
    }

    fn as_mut_ptr(&mut self) -> *mut u128 {
        self.0.as_mut_ptr()
    }

    fn len(&self) -> usize {
        self.0.len()
    }

    /// Keeps it for this thread's next spawn.
    fn give_back(self) {
        let _ = SPARE_STACK.try_with(|spare| spare.set(Some(self.0)));
    }
}

/// Blocks every signal in this thread until dropped.
struct BlockSignals(libc::sigset_t);

impl BlockSignals {
    fn new() -> BlockSignals {
        // SAFETY: plain sigset manipulation on owned values.
        unsafe {
            let mut all: libc::sigset_t = std::mem::zeroed();
            let mut old: libc::sigset_t = std::mem::zeroed();
            libc::sigfillset(&mut all);
            libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
            BlockSignals(old)
        }
    }
}

impl Drop for BlockSignals {
    fn drop(&mut self) {
        // SAFETY: restores the mask saved in `new`.
        unsafe {
            libc::pthread_sigmask(libc::SIG_SETMASK, &self.0, std::ptr::null_mut());
        }
    }
}

/// `clone3` whose child starts on the stack of `args` and calls `f(arg)` (never returning); the
/// parent gets the raw result (pid, or a negated errno).
#[cfg(target_arch = "x86_64")]
unsafe fn clone3_vm(
    args: &mut CloneArgs,
    f: extern "C" fn(*mut c_void) -> !,
    arg: *mut c_void,
) -> i64 {
    let ret: i64;
    // SAFETY: the caller guarantees `args`; the child branch switches to its own stack (set by
    // the kernel), clears the frame pointer and calls `f`, which never returns.
    unsafe {
        std::arch::asm!(
            "syscall",
            "test rax, rax",
            "jnz 2f",
            "xor ebp, ebp",
            "mov rdi, r12",
            "call r13",
            "ud2",
            "2:",
            inlateout("rax") libc::SYS_clone3 => ret,
            in("rdi") args as *mut CloneArgs,
            in("rsi") std::mem::size_of::<CloneArgs>(),
            in("r12") arg,
            in("r13") f,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    ret
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn clone3_vm(
    _args: &mut CloneArgs,
    _f: extern "C" fn(*mut c_void) -> !,
    _arg: *mut c_void,
) -> i64 {
    -i64::from(libc::ENOSYS)
}

/// The child, on its own stack in the parent's memory: raw system calls only, no allocation,
/// no lock, no unwinding.
extern "C" fn child_main(arg: *mut c_void) -> ! {
    // SAFETY: `arg` is the parent's `Shared`, alive and untouched by the parent (it waits).
    unsafe {
        let shared = arg.cast::<Shared>();
        let plan = &*(*shared).plan;
        let fail = |step: u8| -> ! {
            let errno = *libc::__errno_location();
            std::ptr::write_volatile(&raw mut (*shared).errno, errno);
            std::ptr::write_volatile(&raw mut (*shared).step, step);
            libc::syscall(libc::SYS_exit_group, 127);
            libc::abort()
        };
        // Into the namespaces first: the user namespace's maps before anything needs its
        // capabilities, the mounts before the directory is entered.
        if (*shared).ns
            && let Some(ns) = &plan.ns
            && let Err(errno) = crate::namespaces::enter_in_child(ns)
        {
            *libc::__errno_location() = errno;
            fail(STEP_NAMESPACE);
        }
        reset_handlers();
        if let Some((soft, hard)) = plan.nofile {
            // Best effort, as in the fork path: a limit it cannot lower only means a higher one.
            let lim = libc::rlimit { rlim_cur: soft, rlim_max: hard };
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
        if let Some(bytes) = plan.fsize {
            let lim = libc::rlimit { rlim_cur: bytes, rlim_max: bytes };
            if libc::setrlimit(libc::RLIMIT_FSIZE, &lim) != 0 {
                fail(STEP_FSIZE);
            }
        }
        if libc::setsid() < 0 {
            fail(STEP_SETSID);
        }
        // A signal sent to the spawner's process group before `setsid` (a Ctrl-C meant for a
        // foreground client) is pending here, blocked until the mask is emptied before `exec`:
        // it was not meant for the command, which would die of it before it ran. Discard it —
        // setting a pending signal's action to "ignore" drops it — and put the action back.
        let mut pending: libc::sigset_t = std::mem::zeroed();
        if libc::sigpending(&mut pending) == 0 {
            for sig in 1..=libc::SIGRTMAX() {
                if sig == libc::SIGKILL
                    || sig == libc::SIGSTOP
                    || libc::sigismember(&pending, sig) != 1
                {
                    continue;
                }
                let mut ignore: libc::sigaction = std::mem::zeroed();
                ignore.sa_sigaction = libc::SIG_IGN;
                let mut was: libc::sigaction = std::mem::zeroed();
                if libc::sigaction(sig, &ignore, &mut was) == 0 {
                    libc::sigaction(sig, &was, std::ptr::null_mut());
                }
            }
        }
        for (target, &src) in plan.stdio.iter().enumerate() {
            if libc::dup2(src, target as i32) < 0 {
                fail(STEP_STDIO);
            }
        }
        // The new session has no controlling terminal yet: take the terminal on fd 0.
        if plan.ctty && libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
            fail(STEP_CTTY);
        }
        if let Some(cwd) = &plan.cwd
            && libc::chdir(cwd.as_ptr()) < 0
        {
            fail(STEP_CWD);
        }
        // No capability survives into the session (the keeper needs none).
        if (*shared).ns
            && let Err(errno) = crate::namespaces::drop_caps()
        {
            *libc::__errno_location() = errno;
            fail(STEP_CAPS);
        }
        // Last: the sandbox's own calls (and nothing after them but exec) run confined.
        if let Some(sb) = &plan.sandbox
            && let Err(errno) = crate::sandbox::apply_in_child(sb)
        {
            *libc::__errno_location() = errno;
            fail(STEP_SANDBOX);
        }
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
        if let Some(k) = &plan.keeper {
            exec_keeper(k, (*shared).argv, (*shared).envp);
            fail(STEP_EXEC)
        }
        libc::execve(plan.path.as_ptr(), (*shared).argv, (*shared).envp);
        fail(STEP_EXEC)
    }
}

/// Caught signals get their default action back (the handlers are the daemon's) and SIGPIPE,
/// which the daemon ignores, too; the child empties the mask before `execve`. Raw calls only.
fn reset_handlers() {
    // SAFETY: `sigaction` with stack values.
    unsafe {
        for sig in 1..=libc::SIGRTMAX() {
            if sig == libc::SIGKILL || sig == libc::SIGSTOP {
                continue;
            }
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(sig, std::ptr::null(), &mut old) != 0 {
                continue;
            }
            if old.sa_sigaction != libc::SIG_DFL
                && (old.sa_sigaction != libc::SIG_IGN || sig == libc::SIGPIPE)
            {
                let mut dfl: libc::sigaction = std::mem::zeroed();
                dfl.sa_sigaction = libc::SIG_DFL;
                libc::sigaction(sig, &dfl, std::ptr::null_mut());
            }
        }
    }
}

/// Executes the keeper (returns only when that fails, errno set). Its own copy of the status
/// pipe survives the exec; the daemon's stays close-on-exec (the descriptor flag is per table,
/// and the child has its own table).
///
/// # Safety
/// Called in the spawned child only, with `argv` and `envp` null-terminated arrays of C strings.
unsafe fn exec_keeper(
    k: &KeeperExec,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
) {
    // SAFETY: the caller's; raw system calls on descriptors the child holds.
    unsafe {
        if libc::fcntl(k.status_fd, libc::F_SETFD, 0) < 0 {
            return;
        }
        libc::syscall(libc::SYS_execveat, k.exe, c"".as_ptr(), argv, envp, libc::AT_EMPTY_PATH);
    }
}

/// A descriptor numbered 3 or above for `fd` (a duplicate when it is 0, 1 or 2), so the child's
/// `dup2` onto 0–2 never overwrites a source it still needs.
pub(super) fn above_stdio(fd: OwnedFd) -> io::Result<OwnedFd> {
    if fd.as_raw_fd() > 2 {
        return Ok(fd);
    }
    Ok(rustix::io::fcntl_dupfd_cloexec(&fd, 3)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolves_like_execvp() {
        let env = vec![(OsString::from("PATH"), OsString::from("/nonexistent:/bin:/usr/bin"))];
        let sh = resolve(OsStr::new("sh"), &env).unwrap();
        assert!(sh.is_absolute() && sh.ends_with("sh"), "{sh:?}");
        let err = resolve(OsStr::new("no-such-program-here"), &env).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ENOENT));
        // With a slash it is taken as given (exec reports what is wrong with it).
        assert_eq!(resolve(OsStr::new("./x"), &env).unwrap(), Path::new("./x"));
    }

    #[test]
    fn status_names_the_spawn() {
        let s = status();
        assert!(s.starts_with("clone3") || s.starts_with("fork + pre_exec"), "{s}");
    }
}
