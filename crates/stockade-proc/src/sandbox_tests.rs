use super::*;

/// A `workspace-write` sandbox writing in `roots`, hiding nothing.
fn spec(roots: &[&Path]) -> SandboxSpec {
    let roots: Vec<PathBuf> = roots.iter().map(|r| r.to_path_buf()).collect();
    let policy = Sandbox {
        mode: SandboxMode::WorkspaceWrite,
        network: NetworkMode::None,
        writable_roots: roots.clone(),
        ..Sandbox::default()
    };
    SandboxSpec { policy, writable_roots: roots, hidden: Vec::new() }
}

fn take(spec: &SandboxSpec) -> Option<OwnedFd> {
    let abi = landlock_abi().min(MAX_LANDLOCK_ABI);
    let listing = readable(&spec.hidden).unwrap();
    take_prebuilt(spec, abi, &listing)
}

#[test]
fn a_ruleset_built_ahead_serves_one_spawn_whose_roots_are_the_same_files() {
    assert!(
        landlock_abi() >= MIN_LANDLOCK_ABI,
        "this test needs Landlock ABI {MIN_LANDLOCK_ABI} (the kernel has {})",
        landlock_abi()
    );
    let dir = tempfile::tempdir().unwrap();
    let (work, ready) = (dir.path().join("work"), dir.path().join(".slot-tmp-1"));
    std::fs::create_dir(&work).unwrap();
    std::fs::create_dir(&ready).unwrap();
    prebuild(&spec(&[&work, &ready])).unwrap();
    // Moved into place as a session's temporary directory: the same file, so it is used...
    let tmp = dir.path().join("tmp");
    std::fs::rename(&ready, &tmp).unwrap();
    assert!(take(&spec(&[&work, &tmp])).is_some());
    // ...once.
    assert!(take(&spec(&[&work, &tmp])).is_none());
    // Another policy, or a root that is now another directory: built afresh.
    prebuild(&spec(&[&work, &tmp])).unwrap();
    let mut networked = spec(&[&work, &tmp]);
    networked.policy.network = NetworkMode::Allow;
    assert!(take(&networked).is_none());
    std::fs::rename(&work, dir.path().join("old")).unwrap();
    std::fs::create_dir(&work).unwrap();
    assert!(take(&spec(&[&work, &tmp])).is_none(), "the rule is on the old directory");
    let other = dir.path().join("other");
    std::fs::create_dir(&other).unwrap();
    assert!(take(&spec(&[&other, &tmp])).is_none());
}

/// Runs classic BPF `prog` on a `struct seccomp_data` (the instructions seccompiler and
/// `sandbox_bpf.rs` use).
fn run_bpf(prog: &[seccompiler::sock_filter], nr: u32, args: [u64; 6]) -> u32 {
    let mut data = Vec::new();
    data.extend(nr.to_le_bytes());
    data.extend(0xC000_003Eu32.to_le_bytes());
    data.extend(0u64.to_le_bytes());
    for a in args {
        data.extend(a.to_le_bytes());
    }
    let (mut acc, mut pc) = (0u32, 0usize);
    loop {
        let i = &prog[pc];
        pc += 1;
        let k = i.k;
        let jump = |taken: bool| if taken { usize::from(i.jt) } else { usize::from(i.jf) };
        match i.code {
            0x20 => {
                let at = k as usize;
                acc = u32::from_le_bytes(data[at..at + 4].try_into().unwrap());
            }
            0x54 => acc &= k,
            0x05 => pc += k as usize,
            0x15 => pc += jump(acc == k),
            0x25 => pc += jump(acc > k),
            0x35 => pc += jump(acc >= k),
            0x45 => pc += jump(acc & k != 0),
            0x06 => return k,
            other => panic!("instruction {other:#x} not known to this test"),
        }
    }
}

#[test]
fn the_written_seccomp_program_decides_every_call_as_seccompilers_does() {
    let mut firsts =
        vec![0u64, 1, libc::AF_UNIX as u64, libc::AF_INET as u64, libc::AF_INET6 as u64];
    firsts.extend([
        libc::AF_NETLINK as u64,
        libc::AF_PACKET as u64,
        1 << 32 | libc::AF_UNIX as u64,
    ]);
    firsts.extend(CLONE_NEW_FLAGS.iter().flat_map(|&f| [f, f | 0x11, f << 32]));
    firsts.push(libc::SIGCHLD as u64 | libc::CLONE_VM as u64 | libc::CLONE_VFORK as u64);
    // A pid, a `which` (process, group, user), the self pidfds (as an `int` and sign-extended),
    // a pid whose upper half alone is set (the kernel reads the lower: the caller).
    firsts.extend([2, 3, 4242, 1 << 32, 0xFFFF_D8F0, 0xFFFF_B1E0, -10_000i64 as u64]);
    let seconds = [0u64, libc::TIOCSTI, 0x541C, 1 << 32 | libc::TIOCSTI, 0x5401, 1 << 32, 4242];
    for network in [NetworkMode::None, NetworkMode::Allow] {
        let reference = seccomp_program(network).unwrap();
        let written = bpf::program(network);
        assert!(written.len() * 3 < reference.len(), "{} vs {}", written.len(), reference.len());
        // seccompiler's program, then `clone3` and x32 calls answered `ENOSYS` (the kernel takes
        // the strictest answer of the filters; these calls are allowed by the first).
        let expected = |nr: u32, args| {
            if nr == libc::SYS_clone3 as u32 || nr >= bpf::X32_BIT {
                0x0005_0000 | libc::ENOSYS as u32
            } else {
                run_bpf(&reference, nr, args)
            }
        };
        for nr in (0..=470u32).chain(bpf::X32_BIT..bpf::X32_BIT + 8) {
            for &a0 in &firsts {
                for &a1 in &seconds {
                    let args = [a0, a1, 0, 0, 0, 0];
                    assert_eq!(
                        run_bpf(&written, nr, args),
                        expected(nr, args),
                        "system call {nr} with {args:x?}, network {network:?}"
                    );
                }
            }
        }
    }
}

#[test]
fn calls_on_another_process_and_on_the_machine_are_refused_and_on_the_caller_allowed() {
    const ALLOW: u32 = 0x7fff_0000;
    const EPERM: u32 = 0x0005_0000 | libc::EPERM as u32;
    let prog = bpf::program(NetworkMode::Allow);
    let verdict = |nr: i64, a0: u64, a1: u64| run_bpf(&prog, nr as u32, [a0, a1, 0, 0, 0, 0]);
    let daemon = 4242;
    for nr in [
        libc::SYS_prlimit64,
        libc::SYS_sched_setscheduler,
        libc::SYS_sched_setparam,
        libc::SYS_sched_setattr,
        libc::SYS_sched_setaffinity,
    ] {
        assert_eq!(verdict(nr, 0, 7), ALLOW, "system call {nr} on the caller");
        assert_eq!(verdict(nr, daemon, 7), EPERM, "system call {nr} on another process");
    }
    // setpriority(which, who): the calling process only; 0 under PRIO_USER is the whole uid.
    let (process, group, user) = (0, 1, 2);
    assert_eq!(verdict(libc::SYS_setpriority, process, 0), ALLOW);
    assert_eq!(verdict(libc::SYS_setpriority, process, daemon), EPERM);
    assert_eq!(verdict(libc::SYS_setpriority, group, 0), EPERM);
    assert_eq!(verdict(libc::SYS_setpriority, user, 0), EPERM);
    // ioprio_set(which, who): IOPRIO_WHO_PROCESS (1) of 0 only; IOPRIO_WHO_USER (3) of 0 is the uid.
    assert_eq!(verdict(libc::SYS_ioprio_set, 1, 0), ALLOW);
    assert_eq!(verdict(libc::SYS_ioprio_set, 1, daemon), EPERM);
    assert_eq!(verdict(libc::SYS_ioprio_set, 3, 0), EPERM);
    // process_madvise(pidfd, …): the self pidfds only, never a pidfd of another process.
    assert_eq!(verdict(libc::SYS_process_madvise, -20_000i64 as u64, 0), ALLOW);
    assert_eq!(verdict(libc::SYS_process_madvise, 5, 0), EPERM);
    for nr in calls::HOST_WIDE.map(|(nr, _)| nr).iter().chain(&calls::SYSV_IPC) {
        assert_eq!(verdict(*nr, 0, 0), EPERM, "system call {nr}");
    }
    // IPC_PRIVATE too: a filter cannot tell the session's ids from another process's.
    assert_eq!(verdict(libc::SYS_shmget, libc::IPC_PRIVATE as u64, 4096), EPERM);
    // What a command does to itself stays: its own limits read, the clock read, shmdt.
    assert_eq!(verdict(libc::SYS_getpriority, user, 0), ALLOW);
    assert_eq!(verdict(libc::SYS_clock_gettime, 0, 0), ALLOW);
    assert_eq!(verdict(libc::SYS_shmdt, 0, 0), ALLOW);
}
