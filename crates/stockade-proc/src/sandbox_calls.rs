//! Which system calls a confining sandbox's seccomp filter refuses (x86_64 numbers), and on
//! what arguments: what Landlock does not cover ([`DENIED`]), and what reaches past the
//! command's own processes into the machine it shares with the daemon and its neighbours — the
//! same PID, IPC and UTS namespaces, the same uid — ([`HOST_WIDE`], [`SYSV_IPC`], [`OWN_ONLY`]).
//! The filter keeps refusing them once a session has namespaces of its own (defence in depth).
//! `sandbox_bpf.rs` writes them into the program; [`seccomp_program`] (tests only) is
//! seccompiler's form of the same rules, which checks it.

#[cfg(test)]
use stockade_proto::NetworkMode;

#[cfg(test)]
use super::{CLONE_NEW_FLAGS, SandboxError, setup};

/// System calls refused with `EPERM` whatever their arguments.
pub(super) const DENIED: [i64; 34] = [
    libc::SYS_ptrace,
    libc::SYS_process_vm_readv,
    libc::SYS_process_vm_writev,
    libc::SYS_io_uring_setup,
    libc::SYS_io_uring_enter,
    libc::SYS_io_uring_register,
    libc::SYS_kexec_load,
    libc::SYS_kexec_file_load,
    libc::SYS_bpf,
    libc::SYS_perf_event_open,
    libc::SYS_mount,
    libc::SYS_umount2,
    libc::SYS_pivot_root,
    libc::SYS_move_mount,
    libc::SYS_open_tree,
    libc::SYS_fsopen,
    libc::SYS_fsconfig,
    libc::SYS_fsmount,
    libc::SYS_fspick,
    libc::SYS_mount_setattr,
    libc::SYS_keyctl,
    libc::SYS_add_key,
    libc::SYS_request_key,
    libc::SYS_unshare,
    libc::SYS_setns,
    libc::SYS_userfaultfd,
    libc::SYS_init_module,
    libc::SYS_finit_module,
    libc::SYS_delete_module,
    libc::SYS_swapon,
    libc::SYS_swapoff,
    libc::SYS_reboot,
    libc::SYS_chroot,
    libc::SYS_acct,
];

/// Calls on what the whole machine shares, refused with `EPERM` whatever their arguments: a
/// `fanotify` mark (a permission mark on the home freezes the daemon's opens), the clock
/// (`clock_settime`, `clock_adjtime`, `adjtimex`, `settimeofday`; even a read-only `adjtimex`,
/// which nothing a sandboxed command needs), the host and domain name, the kernel log
/// (`syslog`: `dmesg`'s fallback, `klogctl`) and `vhangup` of the terminal. Only a sandboxed
/// root (or an unprivileged `fanotify` or `syslog` where the host allows it) could make them.
pub(super) const HOST_WIDE: [(i64, &str); 9] = [
    (libc::SYS_fanotify_init, "fanotify_init"),
    (libc::SYS_clock_settime, "clock_settime"),
    (libc::SYS_clock_adjtime, "clock_adjtime"),
    (libc::SYS_adjtimex, "adjtimex"),
    (libc::SYS_settimeofday, "settimeofday"),
    (libc::SYS_sethostname, "sethostname"),
    (libc::SYS_setdomainname, "setdomainname"),
    (libc::SYS_syslog, "syslog"),
    (libc::SYS_vhangup, "vhangup"),
];

/// System V IPC, refused whole with `EPERM`. Without an IPC namespace of its own a command
/// shares the machine's SysV objects: refusing `shmget`/`msgget`/`semget` on a key leaves the
/// ids, which are small and guessable, and a process of the same uid may attach, read, write
/// and remove another's segment by id (`shmat`, `shmctl`, `msgsnd`, `semop`, …). A filter
/// cannot tell an object the session made from another's, so every call that names one is
/// refused (`shmdt` names only the caller's own mapping, and stays).
pub(super) const SYSV_IPC: [i64; 11] = [
    libc::SYS_shmget,
    libc::SYS_shmat,
    libc::SYS_shmctl,
    libc::SYS_msgget,
    libc::SYS_msgsnd,
    libc::SYS_msgrcv,
    libc::SYS_msgctl,
    libc::SYS_semget,
    libc::SYS_semop,
    libc::SYS_semtimedop,
    libc::SYS_semctl,
];

/// A call that acts on the process (or group, or user) it is given, allowed only on the caller
/// itself, refused with `EPERM` on any other. The uid check the kernel makes lets a command
/// reach every process of its user — the daemon, other sessions — and Landlock does not cover
/// these (it scopes signals and ptrace, not limits, priorities or affinity).
pub(super) struct OwnOnly {
    /// The system call.
    pub(super) nr: i64,
    /// Its name, for `stockade doctor`.
    pub(super) name: &'static str,
    /// The values its first argument (low 32 bits, a C `int`) may take.
    pub(super) first: &'static [u32],
    /// Its second argument (the `who` after a `which`) must be 0: the caller.
    pub(super) who_zero: bool,
}

/// `PRIO_PROCESS` (`setpriority`'s `which`; 0 also names the caller's group or user under
/// `PRIO_PGRP`/`PRIO_USER`: every process of the uid).
const PRIO_PROCESS: u32 = 0;
/// `IOPRIO_WHO_PROCESS` (`ioprio_set`'s `which`; `who` 0 under `IOPRIO_WHO_USER` is every
/// process of the caller's uid).
const IOPRIO_WHO_PROCESS: u32 = 1;
/// `PIDFD_SELF_THREAD` and `PIDFD_SELF_THREAD_GROUP`: the caller, where a pidfd is taken.
const PIDFD_SELF_THREAD: i32 = -10_000;
const PIDFD_SELF_THREAD_GROUP: i32 = -20_000;

/// The calls of [`OwnOnly`]: a pid of 0 (the caller) where the call takes a pid; `setpriority`
/// and `ioprio_set` on the calling process only (`nice`, `ionice -c3 CMD` and `taskset -c 0
/// CMD` work; `renice -p PID`, `ionice -p PID`, `taskset -p`, `prlimit --pid` of any other
/// process — a child of the session too — are refused, as is a thread's own id where 0 is
/// not given, e.g. `pthread_setaffinity_np`); `process_madvise` through the self pidfds only.
pub(super) const OWN_ONLY: [OwnOnly; 8] = [
    OwnOnly { nr: libc::SYS_prlimit64, name: "prlimit64", first: &[0], who_zero: false },
    OwnOnly {
        nr: libc::SYS_setpriority,
        name: "setpriority",
        first: &[PRIO_PROCESS],
        who_zero: true,
    },
    OwnOnly {
        nr: libc::SYS_ioprio_set,
        name: "ioprio_set",
        first: &[IOPRIO_WHO_PROCESS],
        who_zero: true,
    },
    OwnOnly {
        nr: libc::SYS_sched_setscheduler,
        name: "sched_setscheduler",
        first: &[0],
        who_zero: false,
    },
    OwnOnly { nr: libc::SYS_sched_setparam, name: "sched_setparam", first: &[0], who_zero: false },
    OwnOnly { nr: libc::SYS_sched_setattr, name: "sched_setattr", first: &[0], who_zero: false },
    OwnOnly {
        nr: libc::SYS_sched_setaffinity,
        name: "sched_setaffinity",
        first: &[0],
        who_zero: false,
    },
    OwnOnly {
        nr: libc::SYS_process_madvise,
        name: "process_madvise",
        first: &[PIDFD_SELF_THREAD as u32, PIDFD_SELF_THREAD_GROUP as u32],
        who_zero: false,
    },
];

/// What the filter keeps a sandboxed command from doing to the machine it shares with the daemon
/// and its neighbours, and what it cannot (no namespaces yet), for `stockade doctor`.
pub fn own_world_lines() -> Vec<String> {
    let own: Vec<&str> = OWN_ONLY.iter().map(|o| o.name).collect();
    let host: Vec<&str> = HOST_WIDE.iter().map(|&(_, name)| name).collect();
    vec![
        format!(
            "seccomp, the command's own world: {} only on the caller itself (pid 0), never on the daemon or another process of the user",
            own.join(", ")
        ),
        format!("seccomp, the command's own world: {} refused", host.join(", ")),
        "seccomp, the command's own world: System V IPC (shm, msg, sem) refused whole: without an IPC namespace another process's segment is reachable by its id".to_owned(),
        "not held without namespaces: chmod, chown, setxattr and utime outside the writable roots (Landlock does not cover metadata); another session's terminal (/dev/pts/N); to a sandboxed root, /proc/<pid>/environ and maps of other processes, the daemon's included (and to any user, their fd listings); the kernel log through /dev/kmsg where the user may read it (root, or kernel.dmesg_restrict 0)".to_owned(),
    ]
}

/// The seccomp program: what Landlock does not cover, refused with `EPERM`, through
/// seccompiler: [`super::bpf::program`] is checked against it instruction by instruction's
/// effect (it is over 3 times longer, and the kernel compiles a program again at every spawn).
#[cfg(test)]
pub(super) fn seccomp_program(
    network: NetworkMode,
) -> Result<Vec<seccompiler::sock_filter>, SandboxError> {
    use seccompiler::{
        BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
        SeccompRule, TargetArch,
    };
    use std::collections::BTreeMap;
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = DENIED
        .iter()
        .chain(&HOST_WIDE.map(|(nr, _)| nr))
        .chain(&SYSV_IPC)
        .map(|&nr| (nr, Vec::new()))
        .collect();
    let cond = |arg: u8, len: SeccompCmpArgLen, op: SeccompCmpOp, v: u64| {
        SeccompCondition::new(arg, len, op, v).map_err(setup)
    };
    let rule = |c: Vec<SeccompCondition>| SeccompRule::new(c).map_err(setup);
    // Refused when the first argument is none of the allowed values, or the `who` is not 0.
    for own in &OWN_ONLY {
        let not_first = own
            .first
            .iter()
            .map(|&v| cond(0, SeccompCmpArgLen::Dword, SeccompCmpOp::Ne, u64::from(v)))
            .collect::<Result<Vec<_>, _>>()?;
        let mut refused = vec![rule(not_first)?];
        if own.who_zero {
            refused.push(rule(vec![cond(1, SeccompCmpArgLen::Dword, SeccompCmpOp::Ne, 0)?])?);
        }
        rules.insert(own.nr, refused);
    }
    // A clone that makes a namespace (the flags are its first argument).
    let clone_rules = CLONE_NEW_FLAGS
        .iter()
        .map(|&f| rule(vec![cond(0, SeccompCmpArgLen::Qword, SeccompCmpOp::MaskedEq(f), f)?]))
        .collect::<Result<Vec<_>, _>>()?;
    rules.insert(libc::SYS_clone, clone_rules);
    // Typing into the terminal's input queue would run commands outside the sandbox.
    let tiocsti = libc::TIOCSTI;
    let tioclinux = 0x541C;
    rules.insert(
        libc::SYS_ioctl,
        vec![
            rule(vec![cond(1, SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, tiocsti)?])?,
            rule(vec![cond(1, SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, tioclinux)?])?,
        ],
    );
    if network == NetworkMode::None {
        // Landlock covers TCP only: UDP, raw and every other family but AF_UNIX are refused here.
        let unix = libc::AF_UNIX as u64;
        rules.insert(
            libc::SYS_socket,
            vec![rule(vec![cond(0, SeccompCmpArgLen::Dword, SeccompCmpOp::Ne, unix)?])?],
        );
        rules.insert(
            libc::SYS_socketpair,
            vec![rule(vec![cond(0, SeccompCmpArgLen::Dword, SeccompCmpOp::Ne, unix)?])?],
        );
    }
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        TargetArch::x86_64,
    )
    .map_err(setup)?;
    let program: BpfProgram = filter.try_into().map_err(setup)?;
    Ok(program)
}
