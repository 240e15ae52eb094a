//! The session keeper (Linux): a tiny process between the daemon and a session's command that
//! stays alive until every process of the session is gone, so an orphan of the session — a
//! double fork that scrubbed its environment and left the process group, say — is reparented
//! to the keeper, never to the daemon. Without a cgroup that is what keeps such an orphan the
//! session's: it stays a descendant of the session's root.
//!
//! The spawn sets everything up as for the command (session, stdio, terminal, directory,
//! limits, sandbox) and then executes the keeper's executable with argv `stockade`,
//! [`KEEPER_FLAG`], the number of the status pipe's write end, the program's path and its argv.
//! The keeper becomes a child subreaper, ignores the job-control signals, blocks the termination
//! signals, forks and executes the program in the child (the signals back at their default and
//! unblocked), passes on to the command a termination signal another process than the daemon
//! sent the keeper ([`FORWARDED`]), moves its own
//! stdio to `/dev/null` (so it never holds the output pipe or the terminal open), changes to
//! `/`, and reaps: when the command exits it writes the wait status to the status pipe
//! (`decode`), then reaps orphans until it has no child left and exits 0. A program that
//! cannot be executed: "stockade: cannot execute `<path>`: `<error>`" on stderr, status 127 << 8,
//! exit 127. The daemon reads the command's end from the pipe and reaps the keeper as the root.
//!
//! There are two implementations of that one protocol:
//!
//! - **The tiny keeper** ([`crate::KeeperExe::Embedded`], x86_64 Linux): `keeper/keeper.rs`, a
//!   `no_std`, `no_main` program of raw system calls that `build.rs` compiles with `$RUSTC`
//!   into a static executable of under 4 KiB (no libc, no start files). It is embedded in this
//!   crate, written once per process into a sealed, close-on-exec memfd
//!   (`memfd:stockade-keeper`, [`open_embedded`]) and executed from there (`execveat` of the
//!   descriptor, or `/proc/self/fd/N` on the fork path). Measured (release build): it adds
//!   0.2 to 0.6 ms of CPU to running `/bin/true`, and no difference beyond the noise to the
//!   daemon's CPU per `run --bg true` (docs/reliability.md, "The session keeper").
//! - **The fallback** ([`run`], through [`run_if_keeper`] first thing in the daemon's `main`):
//!   the same in the daemon's own executable, `/proc/self/exe`
//!   ([`crate::KeeperExe::Path`]), where there is no tiny keeper. Exec'ing that whole binary
//!   (its Rust runtime, allocator and relocations) adds about 3.7 ms of CPU to `/bin/true`
//!   and 5.5 to 7.4 ms to the daemon's CPU per `run --bg true`.

use std::ffi::{CStr, CString, OsString};
use std::os::unix::ffi::OsStrExt;

/// `argv[1]` of a keeper: a private token no user-facing command line carries.
pub const KEEPER_FLAG: &str = "--stockade-session-keeper";

/// Whether this build embeds the tiny keeper (`keeper/keeper.rs`, x86_64 Linux):
/// [`crate::KeeperExe::Embedded`] works only then.
pub const EMBEDDED_KEEPER: bool = cfg!(all(target_os = "linux", target_arch = "x86_64"));

/// The tiny keeper's executable, as `build.rs` built it.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
static TINY: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/keeper"));

/// The tiny keeper's executable, open read-only and close-on-exec: a sealed memfd written once
/// per process (at the first call), duplicated for each caller.
pub(crate) fn open_embedded() -> std::io::Result<std::os::fd::OwnedFd> {
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    {
        static MEMFD: std::sync::OnceLock<Result<std::os::fd::OwnedFd, i32>> =
            std::sync::OnceLock::new();
        match MEMFD.get_or_init(|| write_memfd(TINY).map_err(|e| e.raw_os_error().unwrap_or(0))) {
            Ok(fd) => fd.try_clone(),
            Err(errno) => Err(std::io::Error::from_raw_os_error(*errno)),
        }
    }
    #[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
    Err(std::io::Error::new(
        std::io::ErrorKind::Unsupported,
        "no tiny session keeper is built for this architecture",
    ))
}

/// `exe` in a new memfd, sealed against any change and reopened read-only (no writable
/// descriptor of it is left, whatever the kernel thinks of executing a file open for writing).
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
fn write_memfd(exe: &[u8]) -> std::io::Result<std::os::fd::OwnedFd> {
    use rustix::fs::{MemfdFlags, Mode, OFlags, SealFlags};
    use std::os::fd::AsRawFd;
    let fd = rustix::fs::memfd_create(
        "stockade-keeper",
        MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING,
    )?;
    let mut rest = exe;
    while !rest.is_empty() {
        match rustix::io::write(&fd, rest) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => rest = &rest[n..],
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    rustix::fs::fchmod(&fd, Mode::from_raw_mode(0o555))?;
    rustix::fs::fcntl_add_seals(
        &fd,
        SealFlags::WRITE | SealFlags::GROW | SealFlags::SHRINK | SealFlags::SEAL,
    )?;
    // Read-only from here on; without `/proc` the sealed memfd itself (it executes too).
    let path = format!("/proc/self/fd/{}", fd.as_raw_fd());
    Ok(rustix::fs::open(path, OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty()).unwrap_or(fd))
}

/// The signals the keeper ignores (the command gets them back at its default): those of job
/// control, and `SIGPIPE` (a status pipe nobody reads any more).
const IGNORED: [libc::c_int; 4] = [libc::SIGTSTP, libc::SIGTTIN, libc::SIGTTOU, libc::SIGPIPE];

/// The termination signals the keeper blocks and waits for (the command gets them back at their
/// default and unblocked). One another process than the daemon sent the keeper — a user's
/// `kill <pid>` of the session's pid — is passed on to the command; one the daemon sent the
/// process group, or a terminal sent its foreground group, reached the command already.
const FORWARDED: [libc::c_int; 4] = [libc::SIGHUP, libc::SIGINT, libc::SIGQUIT, libc::SIGTERM];

/// The exit code of a command that could not be executed (as a shell reports it).
const CANNOT_EXECUTE: i32 = 127;

/// Runs the keeper when this process was started as one (`argv[1]` is [`KEEPER_FLAG`]) and
/// never returns then; returns at once otherwise. Call first thing in `main`.
pub fn run_if_keeper() {
    let mut args = std::env::args_os();
    let _argv0 = args.next();
    if args.next().is_some_and(|a| a == KEEPER_FLAG) {
        let code = run(args.collect());
        // SAFETY: `_exit` ends the process at once (no destructor of ours is pending).
        unsafe { libc::_exit(code) }
    }
}

/// What the keeper was asked to run: the status fd, the program's path and argv.
struct Job {
    status_fd: libc::c_int,
    path: CString,
    argv: Vec<CString>,
}

fn parse(args: Vec<OsString>) -> Option<Job> {
    let mut args = args.into_iter();
    let status_fd = args.next()?.to_str()?.parse().ok()?;
    let c = |s: OsString| CString::new(s.as_bytes()).ok();
    let path = c(args.next()?)?;
    let argv = args.map(c).collect::<Option<Vec<_>>>()?;
    if argv.is_empty() {
        return None;
    }
    Some(Job { status_fd, path, argv })
}

/// The keeper: returns its exit code (0 once the command and every orphan of it are reaped).
fn run(args: Vec<OsString>) -> i32 {
    let Some(job) = parse(args) else {
        complain(b"stockade: session keeper started with bad arguments\n", None);
        return 2;
    };
    let mut argv: Vec<*const libc::c_char> = job.argv.iter().map(|a| a.as_ptr()).collect();
    argv.push(std::ptr::null());
    // SAFETY: plain system calls on this process; `argv` outlives the fork's child's use of it.
    unsafe {
        // Orphans of the session land here, not on the daemon.
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
        // Blocked, they wait for `sigtimedwait` in `reap` (a blocked signal is never discarded).
        libc::sigprocmask(libc::SIG_SETMASK, &waited(), std::ptr::null_mut());
        for sig in FORWARDED {
            libc::signal(sig, libc::SIG_DFL);
        }
        for sig in IGNORED {
            libc::signal(sig, libc::SIG_IGN);
        }
        let Some(command) = start(&job, &argv) else {
            return CANNOT_EXECUTE;
        };
        detach_stdio();
        // The directory stays the command's only: the keeper holds none of the session's.
        libc::chdir(c"/".as_ptr());
        reap(command, job.status_fd);
    }
    0
}

/// Forks and executes the command; its pid, or `None` (after saying why on stderr and writing
/// an exit of 127 to the status pipe) when it could not be executed.
unsafe fn start(job: &Job, argv: &[*const libc::c_char]) -> Option<libc::pid_t> {
    // SAFETY: the caller's; the child calls only async-signal-safe functions before `execv`.
    unsafe {
        // Close-on-exec: the parent reads the child's errno from it when `execv` fails, EOF
        // when it succeeds.
        let mut report = [-1; 2];
        if libc::pipe2(report.as_mut_ptr(), libc::O_CLOEXEC) != 0 {
            report = [-1, -1];
        }
        let pid = libc::fork();
        if pid == 0 {
            for sig in IGNORED.into_iter().chain(FORWARDED) {
                libc::signal(sig, libc::SIG_DFL);
            }
            let mut none: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut none);
            libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
            libc::close(job.status_fd);
            libc::close(report[0]);
            libc::execv(job.path.as_ptr(), argv.as_ptr());
            let errno = *libc::__errno_location();
            libc::write(report[1], (&raw const errno).cast(), std::mem::size_of::<i32>());
            libc::_exit(CANNOT_EXECUTE);
        }
        libc::close(report[1]);
        let failed = if pid < 0 {
            Some(*libc::__errno_location())
        } else {
            let mut errno: i32 = 0;
            let n =
                read_full(report[0], std::slice::from_raw_parts_mut((&raw mut errno).cast(), 4));
            (n == 4).then_some(errno)
        };
        libc::close(report[0]);
        let Some(errno) = failed else { return Some(pid) };
        complain(b"stockade: cannot execute ", Some((job.path.as_c_str(), errno)));
        if pid > 0 {
            let mut status = 0;
            libc::waitpid(pid, &mut status, 0);
        }
        write_status(job.status_fd, CANNOT_EXECUTE << 8);
        None
    }
}

/// Writes `prefix`, then `<path>: <error>` when given, and a newline, to stderr.
fn complain(prefix: &[u8], what: Option<(&CStr, i32)>) {
    let mut line = prefix.to_vec();
    if let Some((path, errno)) = what {
        line.extend_from_slice(path.to_bytes());
        line.extend_from_slice(b": ");
        line.extend_from_slice(std::io::Error::from_raw_os_error(errno).to_string().as_bytes());
        line.push(b'\n');
    }
    // SAFETY: writes an owned buffer to fd 2.
    unsafe {
        libc::write(2, line.as_ptr().cast(), line.len());
    }
}

/// Reopens 0, 1 and 2 on `/dev/null`.
unsafe fn detach_stdio() {
    // SAFETY: plain descriptor calls.
    unsafe {
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC);
        if null < 0 {
            // Nothing to move them to: close them, the keeper never uses them.
            for fd in 0..3 {
                libc::close(fd);
            }
            return;
        }
        for fd in 0..3 {
            libc::dup2(null, fd);
        }
        if null > 2 {
            libc::close(null);
        }
    }
}

/// The set the keeper waits on: [`FORWARDED`] and `SIGCHLD`.
fn waited() -> libc::sigset_t {
    // SAFETY: `sigemptyset` initialises the set; the signals are valid.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for sig in FORWARDED.into_iter().chain([libc::SIGCHLD]) {
            libc::sigaddset(&mut set, sig);
        }
        set
    }
}

/// Reaps every child until none is left; writes the command's wait status when it ends. Between
/// reaps it waits for a signal: `SIGCHLD`, or one of [`FORWARDED`] to pass on to the command.
unsafe fn reap(command: libc::pid_t, status_fd: libc::c_int) {
    let set = waited();
    // SAFETY: `waitpid` and `sigtimedwait` with valid pointers; `kill` of an unreaped child.
    unsafe {
        let mut open = true;
        loop {
            let mut status = 0;
            let pid = libc::waitpid(-1, &mut status, libc::WNOHANG);
            if pid < 0 {
                if *libc::__errno_location() == libc::EINTR {
                    continue;
                }
                break; // ECHILD: the session is gone
            }
            if pid > 0 {
                if pid == command && open {
                    write_status(status_fd, status);
                    open = false;
                }
                continue;
            }
            let mut info: libc::siginfo_t = std::mem::zeroed();
            let sig = libc::sigtimedwait(&set, &mut info, std::ptr::null());
            if sig <= 0 || sig == libc::SIGCHLD || !open {
                continue;
            }
            // Sent by a process (`si_code` ≤ 0: kill, sigqueue, tkill) other than the daemon:
            // the command did not get it, as it does a group's or a terminal's.
            // As PID 1 of the session's own PID namespace (parent 0: outside it) every sender
            // outside shows as pid 0, and the daemon signals the command, never the keeper.
            let parent = libc::getppid();
            if info.si_code <= 0 && (parent == 0 || info.si_pid() != parent) {
                libc::kill(command, sig);
            }
        }
        if open {
            libc::close(status_fd);
        }
    }
}

/// Writes a wait status (4 bytes, native order: one atomic pipe write) and closes the fd.
fn write_status(fd: libc::c_int, status: i32) {
    let bytes = status.to_ne_bytes();
    // SAFETY: writes a stack buffer; a reader gone (EPIPE, SIGPIPE ignored) is no error here.
    unsafe {
        while libc::write(fd, bytes.as_ptr().cast(), bytes.len()) < 0
            && *libc::__errno_location() == libc::EINTR
        {}
        libc::close(fd);
    }
}

/// Reads until `buf` is full, EOF or an error; how many bytes were read.
fn read_full(fd: libc::c_int, buf: &mut [u8]) -> usize {
    let mut got = 0;
    while got < buf.len() {
        // SAFETY: reads into the unfilled rest of `buf`.
        let n = unsafe { libc::read(fd, buf[got..].as_mut_ptr().cast(), buf.len() - got) };
        match n {
            n if n > 0 => got += n as usize,
            0 => break,
            _ if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted => {}
            _ => break,
        }
    }
    got
}

/// Whether `pid` runs a session keeper (its `argv[1]` is [`KEEPER_FLAG`]).
pub(crate) fn runs_keeper(pid: u32) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .is_ok_and(|c| c.split(|b| *b == 0).nth(1) == Some(KEEPER_FLAG.as_bytes()))
}

/// A wait status as the command's end: (exit code, terminating signal).
pub(crate) fn decode(status: i32) -> (Option<i32>, Option<i32>) {
    if libc::WIFEXITED(status) {
        (Some(libc::WEXITSTATUS(status)), None)
    } else if libc::WIFSIGNALED(status) {
        (None, Some(libc::WTERMSIG(status)))
    } else {
        (None, None)
    }
}

/// The keeper's argv: `argv0`, the flag, the status fd, the program's path and its argv.
pub(crate) fn argv(status_fd: i32, path: &CStr, argv: &[CString]) -> Vec<CString> {
    let mut out = Vec::with_capacity(argv.len() + 4);
    out.push(CString::from(c"stockade"));
    out.push(CString::from(c"--stockade-session-keeper"));
    // A decimal number has no NUL byte.
    out.push(CString::new(status_fd.to_string()).unwrap_or_default());
    out.push(path.to_owned());
    out.extend(argv.iter().cloned());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wait_statuses_decode_as_exit_codes_and_signals() {
        assert_eq!(decode(3 << 8), (Some(3), None));
        assert_eq!(decode(0), (Some(0), None));
        assert_eq!(decode(libc::SIGKILL), (None, Some(libc::SIGKILL)));
    }

    #[test]
    fn the_argv_names_the_flag_and_parses_back() {
        let a = argv(7, c"/bin/sh", &[CString::from(c"sh"), CString::from(c"-c")]);
        assert_eq!(a[1].to_bytes(), KEEPER_FLAG.as_bytes());
        let rest = a[2..].iter().map(|s| OsString::from(s.to_str().unwrap_or_default())).collect();
        let job = parse(rest).unwrap_or_else(|| panic!("does not parse back"));
        assert_eq!(job.status_fd, 7);
        assert_eq!(job.path.as_c_str(), c"/bin/sh");
        assert_eq!(job.argv.len(), 2);
    }
}

/// The tiny keeper, run from its memfd as a spawn runs it (`/proc/self/fd/N`, the status pipe's
/// write end inherited).
#[cfg(all(test, target_os = "linux", target_arch = "x86_64"))]
mod tiny_tests {
    use super::*;
    use std::os::fd::{AsRawFd, OwnedFd};
    use std::os::unix::process::CommandExt;
    use std::process::{Child, Command, Stdio};
    use std::time::{Duration, Instant};

    /// Starts the embedded keeper on `path` and `argv`; the child and the status pipe's read end.
    fn keeper(path: &CStr, args: &[&CStr], stderr: Stdio) -> (Child, OwnedFd) {
        let exe = open_embedded().unwrap_or_else(|e| panic!("no embedded keeper: {e}"));
        let (read, write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
            .unwrap_or_else(|e| panic!("pipe: {e}"));
        let args: Vec<CString> = args.iter().map(|a| CString::from(*a)).collect();
        let keeper_argv = argv(write.as_raw_fd(), path, &args);
        let mut cmd = Command::new(format!("/proc/self/fd/{}", exe.as_raw_fd()));
        cmd.arg0("stockade");
        cmd.args(keeper_argv[1..].iter().map(|a| OsString::from(a.to_str().unwrap_or_default())));
        cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(stderr);
        let fd = write.as_raw_fd();
        // SAFETY: the pre-exec hook only clears a descriptor flag (async-signal-safe).
        unsafe {
            cmd.pre_exec(move || {
                if libc::fcntl(fd, libc::F_SETFD, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd.spawn().unwrap_or_else(|e| panic!("cannot start the keeper: {e}"));
        drop(write);
        (child, read)
    }

    /// The wait status the keeper wrote (the pipe then at EOF), within 10 s.
    fn status(read: &OwnedFd) -> i32 {
        let mut poll = [rustix::event::PollFd::new(read, rustix::event::PollFlags::IN)];
        let timeout = rustix::event::Timespec { tv_sec: 10, tv_nsec: 0 };
        let ready = rustix::event::poll(&mut poll, Some(&timeout));
        assert!(matches!(ready, Ok(1)), "no status within 10 s: {ready:?}");
        let mut buf = [0u8; 4];
        assert_eq!(read_full(read.as_raw_fd(), &mut buf), 4, "no status written");
        assert_eq!(read_full(read.as_raw_fd(), &mut [0u8; 1]), 0, "the status pipe stays open");
        i32::from_ne_bytes(buf)
    }

    #[test]
    fn the_embedded_keeper_is_tiny_and_static() {
        assert!(TINY.len() < 16 * 1024, "{} bytes", TINY.len());
        assert_eq!(&TINY[..4], b"\x7fELF");
        const { assert!(EMBEDDED_KEEPER) };
    }

    #[test]
    fn the_embedded_keeper_writes_the_commands_wait_status() {
        let (mut child, read) = keeper(c"/bin/sh", &[c"sh", c"-c", c"exit 3"], Stdio::null());
        assert_eq!(status(&read), 3 << 8);
        let exit = child.wait().unwrap_or_else(|e| panic!("wait: {e}"));
        assert_eq!(exit.code(), Some(0));
    }

    #[test]
    fn the_embedded_keeper_reports_a_program_it_cannot_execute() {
        let (child, read) = keeper(c"/nonexistent/program", &[c"program"], Stdio::piped());
        assert_eq!(status(&read), CANNOT_EXECUTE << 8);
        let out = child.wait_with_output().unwrap_or_else(|e| panic!("wait: {e}"));
        assert_eq!(out.status.code(), Some(CANNOT_EXECUTE));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            stderr,
            "stockade: cannot execute /nonexistent/program: No such file or directory (os error 2)\n"
        );
    }

    #[test]
    fn the_embedded_keeper_rejects_bad_arguments() {
        let exe = open_embedded().unwrap_or_else(|e| panic!("no embedded keeper: {e}"));
        let out = Command::new(format!("/proc/self/fd/{}", exe.as_raw_fd()))
            .arg0("stockade")
            .args([KEEPER_FLAG, "x", "/bin/true"])
            .output()
            .unwrap_or_else(|e| panic!("cannot start the keeper: {e}"));
        assert_eq!(out.status.code(), Some(2));
        assert!(String::from_utf8_lossy(&out.stderr).contains("bad arguments"));
    }

    /// Waits until `path` exists.
    fn await_file(path: &std::path::Path) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !path.exists() {
            assert!(Instant::now() < deadline, "{} never appeared", path.display());
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// A command that notes each SIGTERM it gets in `<dir>/terms` and exits 5 on the second;
    /// `<dir>/ready` once its trap is set.
    fn counting_command(dir: &std::path::Path) -> CString {
        let script = format!(
            "n=0; trap 'n=$((n+1)); echo term >> {0}/terms; [ $n -ge 2 ] && exit 5' TERM; \
             : > {0}/ready; while :; do sleep 0.02; done",
            dir.display()
        );
        CString::new(script).unwrap_or_default()
    }

    /// Waits (at most 10 s) until the command noted `n` SIGTERMs.
    fn await_terms(dir: &std::path::Path, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while terms(dir) < n {
            assert!(Instant::now() < deadline, "the command never got SIGTERM {n}");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn terms(dir: &std::path::Path) -> usize {
        std::fs::read_to_string(dir.join("terms")).unwrap_or_default().lines().count()
    }

    /// SIGKILLs a process and its descendants (children first) when dropped during a panic:
    /// nothing a failed test started is left. (A test that passes has reaped its keeper, whose
    /// pid may then be another process's.)
    struct KillTree(u32);

    impl Drop for KillTree {
        fn drop(&mut self) {
            if !std::thread::panicking() {
                return;
            }
            fn kill_tree(pid: u32) {
                let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
                    .unwrap_or_default();
                for child in children.split_whitespace().filter_map(|c| c.parse().ok()) {
                    kill_tree(child);
                }
                if let Some(pid) = rustix::process::Pid::from_raw(pid as i32) {
                    let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
                }
            }
            kill_tree(self.0);
        }
    }

    /// A keeper running [`counting_command`], its trap set: its directory, the keeper, the
    /// status pipe and what kills them all if the test fails.
    fn counting_keeper() -> (tempfile::TempDir, Child, OwnedFd, KillTree) {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
        let script = counting_command(dir.path());
        let (child, read) = keeper(c"/bin/sh", &[c"sh", c"-c", &script], Stdio::null());
        let cleanup = KillTree(child.id());
        await_file(&dir.path().join("ready"));
        (dir, child, read, cleanup)
    }

    /// `kill -TERM pid` from another process than this one (the keeper's parent).
    fn kill_from_elsewhere(pid: u32) {
        let ok = Command::new("/bin/sh")
            .args(["-c", &format!("kill -TERM {pid}")])
            .status()
            .unwrap_or_else(|e| panic!("sh: {e}"));
        assert!(ok.success(), "kill -TERM {pid}: {ok}");
    }

    #[test]
    fn a_termination_signal_from_another_process_reaches_the_command_once() {
        let (dir, mut child, read, _cleanup) = counting_keeper();
        kill_from_elsewhere(child.id());
        await_terms(dir.path(), 1);
        // Passed on once, not more: a second comes only with a second kill.
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(terms(dir.path()), 1);
        kill_from_elsewhere(child.id());
        assert_eq!(status(&read), 5 << 8, "the command's exit after the second SIGTERM");
        assert_eq!(terms(dir.path()), 2);
        let exit = child.wait().unwrap_or_else(|e| panic!("wait: {e}"));
        assert_eq!(exit.code(), Some(0));
    }

    #[test]
    fn a_termination_signal_from_the_parent_is_not_passed_on() {
        let (dir, mut child, read, _cleanup) = counting_keeper();
        let pid = rustix::process::Pid::from_raw(i32::try_from(child.id()).unwrap_or(-1))
            .unwrap_or_else(|| panic!("no pid"));
        // From this process, the keeper's parent (as the daemon is): the group got it already.
        rustix::process::kill_process(pid, rustix::process::Signal::TERM)
            .unwrap_or_else(|e| panic!("kill: {e}"));
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(terms(dir.path()), 0, "the parent's SIGTERM was passed on");
        assert!(child.try_wait().ok().flatten().is_none(), "the keeper did not ignore it");
        kill_from_elsewhere(child.id());
        await_terms(dir.path(), 1);
        kill_from_elsewhere(child.id());
        assert_eq!(status(&read), 5 << 8);
        let exit = child.wait().unwrap_or_else(|e| panic!("wait: {e}"));
        assert_eq!(exit.code(), Some(0));
    }

    #[test]
    fn an_orphan_is_reparented_to_the_embedded_keeper_which_outlives_it() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
        let pid_file = dir.path().join("orphan.pid");
        // A double fork with its own session: the orphan's parent exits at once.
        let script = format!(
            "(setsid sh -c 'echo $$ > {0}.tmp; mv {0}.tmp {0}; exec sleep 1' &); exit 0",
            pid_file.display()
        );
        let script = CString::new(script).unwrap_or_default();
        let (mut child, read) = keeper(c"/bin/sh", &[c"sh", c"-c", &script], Stdio::null());
        assert_eq!(status(&read), 0, "the command exits 0");
        let deadline = Instant::now() + Duration::from_secs(5);
        let orphan: u32 = loop {
            if let Some(pid) =
                std::fs::read_to_string(&pid_file).ok().and_then(|s| s.trim().parse().ok())
            {
                break pid;
            }
            assert!(Instant::now() < deadline, "the orphan never started");
            std::thread::sleep(Duration::from_millis(10));
        };
        // Its parent is the keeper (a subreaper), not this process nor init.
        let stat = std::fs::read_to_string(format!("/proc/{orphan}/stat"))
            .unwrap_or_else(|e| panic!("the orphan is gone too early: {e}"));
        let after_comm = &stat[stat.rfind(')').unwrap_or_default() + 2..];
        let ppid: u32 = after_comm.split(' ').nth(1).and_then(|p| p.parse().ok()).unwrap_or(0);
        assert_eq!(ppid, child.id(), "the orphan's parent");
        assert!(
            child.try_wait().unwrap_or_else(|e| panic!("wait: {e}")).is_none(),
            "the keeper left before the orphan"
        );
        let exit = child.wait().unwrap_or_else(|e| panic!("wait: {e}"));
        assert_eq!(exit.code(), Some(0));
        // The keeper reaped the orphan before it exited.
        assert!(!std::path::Path::new(&format!("/proc/{orphan}")).exists(), "the orphan lives on");
    }
}
