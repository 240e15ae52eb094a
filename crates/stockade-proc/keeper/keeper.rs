//! The tiny session keeper (x86_64 Linux): a static executable of a few KiB, with no libc and no
//! Rust runtime, that does exactly what `stockade-proc/src/keeper.rs` `run()` does in the big
//! binary. `stockade-proc/build.rs` compiles this one file with `$RUSTC` (no nested cargo) and
//! the crate embeds the result; `src/keeper.rs` describes the protocol.
//!
//! argv: `stockade --stockade-session-keeper <status_fd> <path> <argv...>`; the environment is
//! the command's. The keeper becomes a child subreaper, ignores the job-control signals and
//! `SIGPIPE`, blocks the termination signals (the command gets all of them back at their
//! default), forks and executes `<path>` with
//! `<argv...>`, moves its own stdio to `/dev/null`, changes to `/`, and reaps every child until
//! none is left: the command's wait status (4 bytes, native order) goes to `<status_fd>`, which
//! is then closed. A termination signal some other process than its parent (the daemon) sent
//! the keeper while the command runs is passed on to the command; one from its parent or from a
//! terminal is not (the command has its own copy). A command that cannot be executed: "stockade: cannot execute <path>: <error>"
//! on stderr, status 127 << 8 and exit 127. Bad arguments: exit 2.
//!
//! Every system call is a raw `syscall` instruction; nothing here may allocate, format or panic
//! (the panic handler just exits 2).

#![no_std]
#![no_main]

#[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
compile_error!("the tiny session keeper is written for x86_64 Linux only");

use core::arch::{asm, global_asm};

// System call numbers (x86_64).
const SYS_READ: usize = 0;
const SYS_WRITE: usize = 1;
const SYS_CLOSE: usize = 3;
const SYS_RT_SIGACTION: usize = 13;
const SYS_RT_SIGPROCMASK: usize = 14;
const SYS_WRITEV: usize = 20;
const SYS_DUP2: usize = 33;
const SYS_FORK: usize = 57;
const SYS_EXECVE: usize = 59;
const SYS_WAIT4: usize = 61;
const SYS_KILL: usize = 62;
const SYS_CHDIR: usize = 80;
const SYS_GETPPID: usize = 110;
const SYS_RT_SIGTIMEDWAIT: usize = 128;
const SYS_PRCTL: usize = 157;
const SYS_EXIT_GROUP: usize = 231;
const SYS_OPENAT: usize = 257;
const SYS_PIPE2: usize = 293;

const PR_SET_CHILD_SUBREAPER: usize = 36;
const AT_FDCWD: isize = -100;
const O_RDWR: usize = 2;
const O_CLOEXEC: usize = 0o2000000;
const EINTR: isize = 4;
const SIG_DFL: usize = 0;
const SIG_IGN: usize = 1;
const SIG_SETMASK: usize = 2;
const WNOHANG: usize = 1;
const SIGCHLD: usize = 17;

/// The signals the keeper ignores — the same as `src/keeper.rs` `IGNORED`: SIGTSTP, SIGTTIN,
/// SIGTTOU, SIGPIPE.
const IGNORED: [usize; 4] = [20, 21, 22, 13];

/// The termination signals the keeper blocks and waits for, to pass on to the command those
/// another process sent it — the same as `src/keeper.rs` `FORWARDED`: SIGHUP, SIGINT, SIGQUIT,
/// SIGTERM.
const FORWARDED: [usize; 4] = [1, 2, 3, 15];

/// The signal set the keeper waits on: [`FORWARDED`] and `SIGCHLD`.
const WAITED: u64 =
    (1 << (1 - 1)) | (1 << (2 - 1)) | (1 << (3 - 1)) | (1 << (15 - 1)) | (1 << (SIGCHLD - 1));

/// The exit code of a command that could not be executed (as a shell reports it).
const CANNOT_EXECUTE: i32 = 127;

/// `argv[1]` of a keeper (`src/keeper.rs` `KEEPER_FLAG`).
const KEEPER_FLAG: &[u8] = b"--stockade-session-keeper";

/// One system call; the kernel's return value (`-errno` on failure).
#[inline(always)]
unsafe fn syscall(n: usize, a: usize, b: usize, c: usize, d: usize) -> isize {
    let ret: isize;
    // SAFETY: the caller's: the arguments are what system call `n` expects.
    unsafe {
        asm!(
            "syscall",
            inlateout("rax") n as isize => ret,
            in("rdi") a,
            in("rsi") b,
            in("rdx") c,
            in("r10") d,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    ret
}

fn exit(code: i32) -> ! {
    loop {
        // SAFETY: `exit_group` takes a plain integer and does not return.
        unsafe { syscall(SYS_EXIT_GROUP, code as usize, 0, 0, 0) };
    }
}

fn close(fd: i32) {
    // SAFETY: closing a number is harmless (EBADF at worst).
    unsafe { syscall(SYS_CLOSE, fd as usize, 0, 0, 0) };
}

/// The kernel's `struct sigaction` (x86_64): handler, flags, restorer, mask.
#[repr(C)]
struct SigAction {
    handler: usize,
    flags: usize,
    restorer: usize,
    mask: u64,
}

fn set_handler(signals: &[usize], handler: usize) {
    let act = SigAction { handler, flags: 0, restorer: 0, mask: 0 };
    for &sig in signals {
        // SAFETY: `act` is a valid `struct sigaction`; SIG_IGN/SIG_DFL need no restorer.
        unsafe { syscall(SYS_RT_SIGACTION, sig, (&raw const act) as usize, 0, 8) };
    }
}

/// Sets this thread's blocked signals to `mask`.
fn set_mask(mask: u64) {
    // SAFETY: `mask` is a valid 8-byte signal set; no old set is asked for.
    unsafe { syscall(SYS_RT_SIGPROCMASK, SIG_SETMASK, (&raw const mask) as usize, 0, 8) };
}

/// The length of a NUL-terminated string.
///
/// # Safety
/// `s` points to a NUL-terminated string.
unsafe fn strlen(s: *const u8) -> usize {
    let mut n = 0;
    // SAFETY: the caller's; reads stop at the NUL.
    while unsafe { core::ptr::read_volatile(s.add(n)) } != 0 {
        n += 1;
    }
    n
}

/// Whether the NUL-terminated `s` equals `want`.
///
/// # Safety
/// `s` points to a NUL-terminated string.
unsafe fn equals(s: *const u8, want: &[u8]) -> bool {
    let mut i = 0;
    while i < want.len() {
        // SAFETY: the caller's; a mismatch (the NUL included) stops before the end.
        if unsafe { *s.add(i) } != want[i] {
            return false;
        }
        i += 1;
    }
    // SAFETY: every byte before was not NUL, so this one is still in the string.
    unsafe { *s.add(i) == 0 }
}

/// A decimal file descriptor number.
///
/// # Safety
/// `s` points to a NUL-terminated string.
unsafe fn parse_fd(s: *const u8) -> Option<i32> {
    let mut value: i32 = 0;
    let mut i = 0;
    loop {
        // SAFETY: the caller's; reads stop at the NUL.
        let b = unsafe { *s.add(i) };
        if b == 0 {
            break;
        }
        if !b.is_ascii_digit() {
            return None;
        }
        value = value.checked_mul(10)?.checked_add(i32::from(b - b'0'))?;
        i += 1;
    }
    (i > 0).then_some(value)
}

/// An `iovec` for `writev`.
#[repr(C)]
struct IoVec {
    base: *const u8,
    len: usize,
}

/// Writes the parts to stderr in one `writev` (one line, not interleaved with another's).
fn complain(parts: &[&[u8]]) {
    let mut iov = [const { IoVec { base: core::ptr::null(), len: 0 } }; 8];
    let mut n = 0;
    for part in parts {
        if n < iov.len() {
            iov[n] = IoVec { base: part.as_ptr(), len: part.len() };
            n += 1;
        }
    }
    // SAFETY: `iov` holds `n` valid buffers.
    unsafe { syscall(SYS_WRITEV, 2, iov.as_ptr() as usize, n, 0) };
}

/// The description of an errno, as Rust's `std::io::Error` shows it (before " (os error N)").
fn describe(errno: i32) -> &'static [u8] {
    match errno {
        1 => b"Operation not permitted",
        2 => b"No such file or directory",
        5 => b"Input/output error",
        7 => b"Argument list too long",
        8 => b"Exec format error",
        11 => b"Resource temporarily unavailable",
        12 => b"Cannot allocate memory",
        13 => b"Permission denied",
        14 => b"Bad address",
        20 => b"Not a directory",
        21 => b"Is a directory",
        22 => b"Invalid argument",
        23 => b"Too many open files in system",
        24 => b"Too many open files",
        26 => b"Text file busy",
        36 => b"File name too long",
        40 => b"Too many levels of symbolic links",
        80 => b"Accessing a corrupted shared library",
        _ => b"Unknown error",
    }
}

/// `n` in decimal, into the end of `buf`; the digits.
fn decimal(mut n: u32, buf: &mut [u8; 10]) -> &[u8] {
    let mut at = buf.len();
    loop {
        at -= 1;
        buf[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 || at == 0 {
            break;
        }
    }
    &buf[at..]
}

/// Writes a wait status (4 bytes, native order: one atomic pipe write) and closes the fd.
fn write_status(fd: i32, status: i32) {
    let bytes = status.to_ne_bytes();
    // SAFETY: writes a stack buffer; a reader gone (EPIPE, SIGPIPE ignored) is no error here.
    while unsafe { syscall(SYS_WRITE, fd as usize, bytes.as_ptr() as usize, 4, 0) } == -EINTR {}
    close(fd);
}

/// `wait4(pid, &status, options)`, retried on EINTR: (pid or -errno, status).
fn wait(pid: isize, options: usize) -> (isize, i32) {
    let mut status: i32 = 0;
    loop {
        // SAFETY: `status` is a valid out-pointer; no rusage.
        let r = unsafe { syscall(SYS_WAIT4, pid as usize, (&raw mut status) as usize, options, 0) };
        if r != -EINTR {
            return (r, status);
        }
    }
}

/// Forks and executes the command; its pid, or `None` (after saying why on stderr and writing
/// an exit of 127 to the status pipe) when it could not be executed.
///
/// # Safety
/// `path` is NUL-terminated; `argv` and `envp` are NULL-terminated arrays of such strings.
unsafe fn start(
    status_fd: i32,
    path: *const u8,
    argv: *const *const u8,
    envp: *const *const u8,
) -> Option<isize> {
    // Close-on-exec: the parent reads the child's errno from it when `execve` fails, EOF when
    // it succeeds.
    let mut report: [i32; 2] = [-1, -1];
    // SAFETY: `report` has room for two descriptors.
    if unsafe { syscall(SYS_PIPE2, report.as_mut_ptr() as usize, O_CLOEXEC, 0, 0) } != 0 {
        report = [-1, -1];
    }
    // SAFETY: a plain fork; the child only makes system calls.
    let pid = unsafe { syscall(SYS_FORK, 0, 0, 0, 0) };
    if pid == 0 {
        set_handler(&IGNORED, SIG_DFL);
        set_handler(&FORWARDED, SIG_DFL);
        set_mask(0);
        close(status_fd);
        close(report[0]);
        // SAFETY: the caller's.
        let r = unsafe { syscall(SYS_EXECVE, path as usize, argv as usize, envp as usize, 0) };
        let errno = (-r) as i32;
        // SAFETY: writes a stack buffer.
        unsafe { syscall(SYS_WRITE, report[1] as usize, (&raw const errno) as usize, 4, 0) };
        exit(CANNOT_EXECUTE);
    }
    close(report[1]);
    let failed = if pid < 0 {
        Some((-pid) as i32)
    } else {
        let mut errno: i32 = 0;
        let mut got = 0;
        while got < 4 {
            // SAFETY: reads into the unfilled rest of `errno`.
            let n = unsafe {
                syscall(SYS_READ, report[0] as usize, (&raw mut errno) as usize + got, 4 - got, 0)
            };
            match n {
                n if n > 0 => got += n as usize,
                n if n == -EINTR => {}
                _ => break,
            }
        }
        (got == 4).then_some(errno)
    };
    close(report[0]);
    let Some(errno) = failed else { return Some(pid) };
    let mut digits = [0; 10];
    // SAFETY: the caller's.
    let path = unsafe { core::slice::from_raw_parts(path, strlen(path)) };
    complain(&[
        b"stockade: cannot execute ",
        path,
        b": ",
        describe(errno),
        b" (os error ",
        decimal(errno as u32, &mut digits),
        b")\n",
    ]);
    if pid > 0 {
        wait(pid, 0);
    }
    write_status(status_fd, CANNOT_EXECUTE << 8);
    None
}

/// Reopens 0, 1 and 2 on `/dev/null`.
fn detach_stdio() {
    // SAFETY: opens a NUL-terminated path.
    let null = unsafe {
        syscall(
            SYS_OPENAT,
            AT_FDCWD as usize,
            c"/dev/null".as_ptr() as usize,
            O_RDWR | O_CLOEXEC,
            0,
        )
    };
    if null < 0 {
        // Nothing to move them to: close them, the keeper never uses them.
        for fd in 0..3 {
            close(fd);
        }
        return;
    }
    for fd in 0..3 {
        // SAFETY: plain descriptor numbers.
        unsafe { syscall(SYS_DUP2, null as usize, fd, 0, 0) };
    }
    if null > 2 {
        close(null as i32);
    }
}

/// The keeper, from the initial stack: `argc`, then `argv`, a NULL, then `envp`.
///
/// # Safety
/// `sp` is the process's initial stack pointer, as the kernel set it up.
unsafe extern "C" fn keeper_main(sp: *const usize) -> ! {
    // SAFETY: the kernel's initial stack layout.
    let (argc, argv) = unsafe { (*sp, sp.add(1) as *const *const u8) };
    // SAFETY: `argv` has `argc` entries and a NULL; `envp` follows.
    let envp = unsafe { argv.add(argc + 1) };
    // argv: "stockade", the flag, the status fd, the path, then the program's argv (not empty).
    // SAFETY: argv strings are NUL-terminated; only the first `argc` are read.
    let status_fd = unsafe {
        if argc < 5 || !equals(*argv.add(1), KEEPER_FLAG) { None } else { parse_fd(*argv.add(2)) }
    };
    let Some(status_fd) = status_fd else {
        complain(&[b"stockade: session keeper started with bad arguments\n"]);
        exit(2);
    };
    // SAFETY: `argc` ≥ 5.
    let (path, command_argv) = unsafe { (*argv.add(3), argv.add(4)) };
    // Orphans of the session land here, not on the daemon.
    // SAFETY: plain integers.
    unsafe { syscall(SYS_PRCTL, PR_SET_CHILD_SUBREAPER, 1, 0, 0) };
    // Blocked, they wait for `rt_sigtimedwait` below (a blocked signal is never discarded).
    set_mask(WAITED);
    set_handler(&FORWARDED, SIG_DFL);
    set_handler(&IGNORED, SIG_IGN);
    // SAFETY: the kernel's NUL-terminated strings and NULL-terminated arrays.
    let Some(command) = (unsafe { start(status_fd, path, command_argv, envp) }) else {
        exit(CANNOT_EXECUTE);
    };
    detach_stdio();
    // The directory stays the command's only: the keeper holds none of the session's.
    // SAFETY: a NUL-terminated path.
    unsafe { syscall(SYS_CHDIR, c"/".as_ptr() as usize, 0, 0, 0) };
    // Reap every child until none is left (ECHILD: the session is gone); the command's wait
    // status goes to the status pipe. Between reaps, wait for a signal: SIGCHLD, or one to
    // pass on.
    let waited = WAITED;
    let mut open = true;
    loop {
        let (pid, status) = wait(-1, WNOHANG);
        if pid < 0 {
            break;
        }
        if pid > 0 {
            if pid == command && open {
                write_status(status_fd, status);
                open = false;
            }
            continue;
        }
        // `siginfo_t` (128 bytes): `si_code` at byte 8, the sender's `si_pid` at byte 16.
        let mut info = [0i32; 32];
        // SAFETY: `waited` is a valid 8-byte set and `info` has room for a `siginfo_t`; no
        // timeout.
        let sig = unsafe {
            syscall(
                SYS_RT_SIGTIMEDWAIT,
                (&raw const waited) as usize,
                info.as_mut_ptr() as usize,
                0,
                8,
            )
        };
        if sig <= 0 || sig as usize == SIGCHLD || !open {
            continue;
        }
        // Sent by a process (`si_code` ≤ 0: kill, sigqueue, tkill) other than the daemon: the
        // command did not get it, as it does a group's or a terminal's. As PID 1 of the
        // session's own PID namespace the parent is outside it (0 here), and so is every sender
        // outside (`si_pid` 0): the daemon then signals the command, never the keeper, so
        // whatever comes is passed on.
        // SAFETY: a plain system call.
        let parent = unsafe { syscall(SYS_GETPPID, 0, 0, 0, 0) };
        if info[2] <= 0 && (parent == 0 || info[4] as isize != parent) {
            // SAFETY: `command` is this process's child, not yet reaped (`open`).
            unsafe { syscall(SYS_KILL, command as usize, sig as usize, 0, 0) };
        }
    }
    if open {
        close(status_fd);
    }
    exit(0)
}

// The entry point: the kernel starts here with `argc` at the stack pointer.
global_asm!(
    ".globl _start",
    "_start:",
    "xor ebp, ebp",
    "mov rdi, rsp",
    "and rsp, -16",
    "call {main}",
    "ud2",
    main = sym keeper_main,
);

#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    exit(2)
}
