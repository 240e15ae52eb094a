//! A sandboxed session in namespaces of its own, tried as an attacker would from `read-only`
//! and `workspace-write` sessions, against a root daemon (with its cgroup) and a `nobody`
//! daemon (without): the daemon and a same-uid process outside cannot be found to `prlimit`
//! or renice, another terminal and the SysV objects outside are not there, `/proc` shows only
//! the session, metadata outside the roots and on the home cannot be changed, no block device
//! exists, the hostname stays the host's — and the daemon keeps serving its owner. Where the
//! kernel refuses namespaces (simulated), the run still goes under Landlock and seccomp and
//! `doctor` says what does not hold; under `--isolation full` such a run is refused.

use std::os::unix::fs::PermissionsExt as _;
use std::process::{Command, Stdio};

use std::time::Duration;

use stockade_testkit::child::Reaped;
use stockade_testkit::{eventually, text};

use crate::sandbox_common::{NOBODY, Sbx, User, python, users};

const RO: &[&str] = &["--sandbox", "read-only", "--network", "none"];
const WW: &[&str] = &["--sandbox", "workspace-write", "--network", "none"];

/// `python3 -c CODE` as a script line (CODE single-quoted: it must hold no `'`).
fn py(py: &str, code: &str) -> String {
    format!("{py} -c '{code}'")
}

/// The daemon still answers its owner.
fn serves(s: &Sbx) {
    let out = s.output(&["ps", "--json"]);
    assert!(out.status.success(), "the daemon stopped serving: {}", text(&out.stderr));
}

/// A process of `user` outside every session (stopped when dropped).
fn outside_process(user: User) -> Reaped {
    let mut c = match user {
        User::Root => Command::new("sleep"),
        User::Nobody => {
            let mut c = Command::new("setpriv");
            c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--", "sleep"]);
            c
        }
    };
    Reaped(c.arg("300").stdout(Stdio::null()).spawn().expect("sleep starts"))
}

/// Waits for the daemon the test started to listen.
fn await_socket(s: &Sbx) {
    let sock = s.home.path().join("stockade.sock");
    eventually(Duration::from_secs(20), "the daemon's socket", || sock.exists().then_some(()));
}

#[test]
fn the_daemon_and_a_same_uid_process_cannot_be_found_to_prlimit_or_renice() {
    let Some(py3) = python() else { return };
    for user in users() {
        let s = Sbx::new(user);
        serves(&s);
        let daemon = s.daemon_pid();
        let other = outside_process(user);
        for policy in [RO, WW] {
            for pid in [daemon, other.0.id()] {
                let code = format!(
                    "import os, resource\nfor name, f in ((\"prlimit\", lambda: resource.prlimit({pid}, resource.RLIMIT_NOFILE, (20, 20))), (\"setpriority\", lambda: os.setpriority(os.PRIO_PROCESS, {pid}, 19)), (\"affinity\", lambda: os.sched_setaffinity({pid}, {{0}}))):\n    try:\n        f(); print(name + \"=done\")\n    except ProcessLookupError:\n        print(name + \"=ESRCH\")\n    except OSError as e:\n        print(name + \"=\" + str(e.errno))"
                );
                let answer = s.run(policy, &py(py3, &code));
                let out = answer["output"].as_str().unwrap_or_default();
                // ESRCH: not in the session's PID namespace; EPERM: the seccomp filter, the
                // second wall, refuses any pid but 0 before the kernel looks for it.
                for name in ["prlimit", "setpriority", "affinity"] {
                    assert!(
                        out.contains(&format!("{name}=ESRCH"))
                            || out.contains(&format!("{name}={}", libc::EPERM)),
                        "{name} on {pid} as {user:?} under {policy:?}: {answer}"
                    );
                }
            }
            serves(&s);
        }
        let limits = std::fs::read_to_string(format!("/proc/{daemon}/limits")).unwrap();
        assert!(!limits.contains("Max open files            20 "), "{limits}");
    }
}

#[test]
fn proc_shows_only_the_session_and_not_the_daemons_environment() {
    for user in users() {
        let s = Sbx::new(user);
        serves(&s);
        let daemon = s.daemon_pid();
        for policy in [RO, WW] {
            let script = format!(
                "test -e /proc/{daemon}/environ && echo daemon=visible; cat /proc/{daemon}/environ >/dev/null 2>&1 && echo environ=read; echo pids=$(ls /proc | grep -c '^[0-9]')"
            );
            let answer = s.run(policy, &script);
            let out = answer["output"].as_str().unwrap_or_default();
            assert!(!out.contains("daemon=visible") && !out.contains("environ=read"), "{answer}");
            let pids: u32 = out
                .lines()
                .find_map(|l| l.strip_prefix("pids="))
                .and_then(|n| n.trim().parse().ok())
                .unwrap_or_else(|| panic!("no count: {answer}"));
            // The keeper, the shell, `ls` and `grep`, maybe a subshell: a handful, not the host.
            assert!(pids <= 8, "{pids} processes in the session's /proc as {user:?}: {answer}");
        }
        serves(&s);
    }
}

#[test]
fn another_terminal_and_outside_sysv_objects_are_not_there() {
    for user in users() {
        let s = Sbx::new(user);
        // A terminal of the host, as another PTY session's.
        let master = std::fs::OpenOptions::new().read(true).write(true).open("/dev/ptmx").unwrap();
        let mut name = [0u8; 64];
        // SAFETY: a buffer of its stated length.
        let r = unsafe {
            libc::ptsname_r(std::os::fd::AsRawFd::as_raw_fd(&master), name.as_mut_ptr().cast(), 64)
        };
        assert_eq!(r, 0, "ptsname");
        let pts = text(&name).trim_end_matches('\0').to_owned();
        // A SysV segment of the host.
        let made = Command::new("ipcmk").args(["-M", "4096"]).output().unwrap();
        let shmid: String = text(&made.stdout).chars().filter(char::is_ascii_digit).collect();
        assert!(!shmid.is_empty(), "ipcmk: {}", text(&made.stdout));
        for policy in [RO, WW] {
            let script = format!(
                "test -e {pts} && echo pts=there; ls /dev/pts; grep -w '{shmid}' /proc/sysvipc/shm && echo shm=there; ls /dev"
            );
            let answer = s.run(policy, &script);
            let out = answer["output"].as_str().unwrap_or_default();
            assert!(!out.contains("pts=there") && !out.contains("shm=there"), "{answer}");
            for dev in out.lines().skip_while(|l| *l != "ptmx").skip(1) {
                assert!(
                    [
                        "fd", "full", "null", "ptmx", "pts", "random", "shm", "stderr", "stdin",
                        "stdout", "tty", "urandom", "zero"
                    ]
                    .contains(&dev),
                    "{dev} in the session's /dev as {user:?}: {answer}"
                );
            }
            assert!(!out.lines().any(|l| l.starts_with("loop") || l.starts_with("sd")), "{answer}");
        }
        let _ = Command::new("ipcrm").args(["-m", &shmid]).status();
        serves(&s);
    }
}

#[test]
fn metadata_outside_the_roots_and_on_the_home_cannot_be_changed() {
    let Some(py3) = python() else { return };
    for user in users() {
        let s = Sbx::new(user);
        serves(&s);
        let victim = s.outside.join("victim");
        std::fs::write(&victim, "x").unwrap();
        std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o644)).unwrap();
        if user == User::Nobody {
            std::os::unix::fs::chown(&victim, Some(NOBODY), Some(NOBODY)).unwrap();
        }
        let home = s.home.path().to_str().unwrap().to_owned();
        for policy in [RO, WW] {
            for target in [victim.to_str().unwrap(), home.as_str()] {
                let code = format!(
                    "import os\np = \"{target}\"\nfor name, f in ((\"chmod\", lambda: os.chmod(p, 0o777)), (\"chown\", lambda: os.chown(p, os.getuid(), os.getgid())), (\"xattr\", lambda: os.setxattr(p, b\"user.stockade.forged\", b\"1\")), (\"utime\", lambda: os.utime(p, (0, 0)))):\n    try:\n        f(); print(name + \"=done\")\n    except OSError as e:\n        print(name + \"=\" + str(e.errno))"
                );
                let answer = s.run(policy, &py(py3, &code));
                let out = answer["output"].as_str().unwrap_or_default();
                for name in ["chmod", "chown", "xattr", "utime"] {
                    let erofs = format!("{name}={}", libc::EROFS);
                    let enoent = format!("{name}={}", libc::ENOENT);
                    assert!(
                        out.contains(&erofs) || out.contains(&enoent),
                        "{name} of {target} as {user:?} under {policy:?}: {answer}"
                    );
                }
            }
        }
        let mode = std::fs::metadata(&victim).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o644, "the file outside was changed");
        let home_mode = std::fs::metadata(s.home.path()).unwrap().permissions().mode() & 0o7777;
        assert_ne!(home_mode, 0o777, "the home was changed");
        serves(&s);
    }
}

#[test]
fn the_hostname_stays_the_hosts_and_the_workspace_stays_writable() {
    for user in users() {
        let s = Sbx::new(user);
        let host = text(&Command::new("hostname").output().unwrap().stdout).trim().to_owned();
        let answer = s.run(WW, "hostname stockade-sandboxed; echo ok > in-workspace; echo tmp > \"$TMPDIR/t\" && echo tmp=written");
        let after = text(&Command::new("hostname").output().unwrap().stdout).trim().to_owned();
        assert_eq!(after, host, "{answer}");
        assert!(s.work.join("in-workspace").exists(), "{answer}");
        assert!(answer["output"].as_str().unwrap_or_default().contains("tmp=written"), "{answer}");
        serves(&s);
    }
}

#[test]
fn a_nested_stockade_reaches_the_daemon_from_inside() {
    for user in users() {
        let s = Sbx::new(user);
        serves(&s);
        let bin = stockade_testkit::stockade_bin();
        // A nested run goes through the daemon's socket, bound back into the covered home.
        let script =
            format!("{} run --bg --json --yield-ms 20000 -- echo nested-ran", bin.display());
        let answer = s.run(RO, &script);
        assert!(answer["output"].as_str().unwrap_or_default().contains("nested-ran"), "{answer}");
    }
}

#[test]
fn a_block_device_outside_cannot_be_read() {
    let Some(_) = users().into_iter().find(|u| *u == User::Root) else { return };
    let s = Sbx::new(User::Root);
    let file = s.outside.join("disk.img");
    std::fs::write(&file, vec![0u8; 1 << 20]).unwrap();
    let out = Command::new("losetup").args(["--find", "--show"]).arg(&file).output().unwrap();
    let loopdev = text(&out.stdout).trim().to_owned();
    if !out.status.success() || loopdev.is_empty() {
        stockade_testkit::cannot_run(&format!("losetup failed: {}", text(&out.stderr)));
        return;
    }
    struct Detach(String);
    impl Drop for Detach {
        fn drop(&mut self) {
            let _ = Command::new("losetup").args(["-d", &self.0]).status();
        }
    }
    let _detach = Detach(loopdev.clone());
    for policy in [RO, WW] {
        let answer =
            s.run(policy, &format!("head -c 16 {loopdev} >/dev/null 2>&1 && echo read=yes; true"));
        assert!(!answer["output"].as_str().unwrap_or_default().contains("read=yes"), "{answer}");
    }
}

#[test]
fn without_namespaces_the_run_goes_on_and_doctor_says_what_does_not_hold() {
    const HOOK: &str = "STOCKADE_TEST_NO_NAMESPACES";
    let s = Sbx::new(User::Root);
    let _daemon = Reaped(
        s.cli(&["daemon", "run"])
            .env(HOOK, "1")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    await_socket(&s);
    let answer = s.run(WW, "echo fine; test -e /proc/1/environ && echo host-proc=yes");
    let out = answer["output"].as_str().unwrap_or_default();
    assert!(out.contains("fine") && out.contains("host-proc=yes"), "{answer}");
    let said = answer["sandbox"].as_str().unwrap_or_default();
    assert!(said.contains("namespaces: unavailable") && said.contains("chmod"), "{answer}");
    let doctor = s.cli(&["doctor"]).env(HOOK, "1").output().unwrap();
    let said = text(&doctor.stdout);
    assert!(said.contains("namespaces: unavailable") && said.contains("chmod"), "{said}");
}

#[test]
fn with_isolation_full_a_run_without_namespaces_is_refused_in_one_sentence() {
    const HOOK: &str = "STOCKADE_TEST_NO_NAMESPACES";
    let s = Sbx::new(User::Root);
    let _daemon = Reaped(
        s.cli(&["daemon", "run", "--isolation", "full"])
            .env(HOOK, "1")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    await_socket(&s);
    let out = s.output(&["run", "--bg", "--json", "--sandbox", "read-only", "--", "true"]);
    let said = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert!(!out.status.success(), "{said}");
    assert!(said.contains("--isolation full") && said.contains("refused"), "{said}");
    let plain = s.output(&["run", "--bg", "--json", "--", "true"]);
    assert!(plain.status.success(), "sandbox off keeps working: {}", text(&plain.stderr));
}
