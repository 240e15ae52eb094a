//! The memory and pids limits for an unprivileged user, as an operator gives them: root
//! delegates a subtree of the v1 `memory` and `pids` hierarchies to `nobody` (made, chowned,
//! the daemon started in it), and `nobody`'s daemon makes each session's groups beneath it. A
//! 4 GiB allocation under `memory 256MiB` ends `killed: memory limit 256 MiB`; a fork loop under
//! `pids 64` is contained, counted, and ended by `kill` with nothing left in its group.

use std::os::fd::AsRawFd as _;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::Value;
use stockade_testkit::child::Reaped;
use stockade_testkit::{eventually, text};

use crate::sandbox_common::{NOBODY, Sbx, User, python, users};

/// A subtree of the v1 `memory` and `pids` hierarchies owned by `nobody`, beneath this test's
/// own groups; removed on drop (its session groups first), even when the test fails.
struct Delegated {
    dirs: Vec<PathBuf>,
}

impl Delegated {
    fn new() -> Delegated {
        let name = format!("stockade-test-{}", std::process::id());
        // Filled as it goes: a failure half-way still removes what was made.
        let mut made = Delegated { dirs: Vec::new() };
        for controller in ["memory", "pids"] {
            let mount = Path::new("/sys/fs/cgroup").join(controller);
            assert!(
                mount.join("cgroup.procs").exists(),
                "this test cannot run here: no cgroup v1 `{controller}` hierarchy at {}",
                mount.display()
            );
            let dir = mount.join(own_group(controller).trim_start_matches('/')).join(&name);
            std::fs::create_dir(&dir).unwrap_or_else(|e| panic!("mkdir {}: {e}", dir.display()));
            made.dirs.push(dir.clone());
            // What an operator hands over: the directory (to make groups in) and the files
            // that move processes into it.
            for p in [dir.clone(), dir.join("cgroup.procs"), dir.join("tasks")] {
                std::os::unix::fs::chown(&p, Some(NOBODY), Some(NOBODY)).unwrap();
            }
        }
        made
    }

    /// Every process left in the subtree (its own and its session groups').
    fn processes(&self) -> Vec<String> {
        let mut left = Vec::new();
        for dir in &self.dirs {
            for d in std::iter::once(dir.clone()).chain(subgroups(dir)) {
                let procs = std::fs::read_to_string(d.join("cgroup.procs")).unwrap_or_default();
                left.extend(procs.lines().map(|l| format!("{}: {l}", d.display())));
            }
        }
        left
    }
}

impl Drop for Delegated {
    fn drop(&mut self) {
        // The daemon (stopped before this guard drops) and its sessions may take a moment to
        // leave; a group with a process in it cannot be removed.
        let deadline = Instant::now() + Duration::from_secs(15);
        for dir in &self.dirs {
            loop {
                for sub in subgroups(dir) {
                    let _ = std::fs::remove_dir(sub);
                }
                match std::fs::remove_dir(dir) {
                    Err(_) if Instant::now() < deadline && dir.exists() => {
                        std::thread::sleep(Duration::from_millis(50));
                    }
                    Err(e) if dir.exists() => {
                        eprintln!("cannot remove the test's cgroup {}: {e}", dir.display());
                        break;
                    }
                    _ => break,
                }
            }
        }
    }
}

/// This process's group in the v1 hierarchy of `controller` (`/proc/self/cgroup`).
fn own_group(controller: &str) -> String {
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap();
    own.lines()
        .find_map(|l| {
            let mut parts = l.splitn(3, ':');
            let (_, list, path) = (parts.next()?, parts.next()?, parts.next()?);
            list.split(',').any(|c| c == controller).then(|| path.to_owned())
        })
        .unwrap_or_else(|| "/".into())
}

fn subgroups(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .map(|d| d.flatten().filter(|e| e.path().is_dir()).map(|e| e.path()).collect())
        .unwrap_or_default()
}

#[test]
fn memory_and_pids_limits_hold_as_nobody_in_a_delegated_cgroup() {
    let Some(py) = python() else { return };
    // `users()` says why when this machine cannot switch to nobody.
    if !users().contains(&User::Nobody) {
        return;
    }
    let s = Sbx::new(User::Nobody);
    let delegated = Delegated::new();
    // The daemon starts inside the delegated groups (as a service manager with delegation
    // starts it): the child writes itself into them while still root, then becomes nobody.
    let procs: Vec<std::fs::File> = delegated
        .dirs
        .iter()
        .map(|d| std::fs::OpenOptions::new().write(true).open(d.join("cgroup.procs")).unwrap())
        .collect();
    let fds: Vec<i32> = procs.iter().map(|f| f.as_raw_fd()).collect();
    let mut daemon = s.cli(&["daemon", "run"]);
    daemon.stdout(Stdio::null()).stderr(Stdio::null());
    // SAFETY: only write(2) on descriptors opened above, between fork and exec.
    unsafe {
        daemon.pre_exec(move || {
            for &fd in &fds {
                if libc::write(fd, b"0".as_ptr().cast(), 1) != 1 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    let _daemon = Reaped(daemon.spawn().unwrap());
    drop(procs);
    let sock = s.home.path().join("stockade.sock");
    eventually(Duration::from_secs(20), "nobody's daemon listens", || sock.exists().then_some(()));

    // 4 GiB in 64 MiB pieces, each written (so it is really used).
    let hog = "l = []\nfor i in range(64): l.append(b'a' * (64 << 20))\nprint('survived')";
    let mut args = vec!["run", "--bg", "--json", "--yield-ms", "120000"];
    args.extend(["--sandbox", "workspace-write", "--memory", "256MiB", "--", py, "-c", hog]);
    let out = s.output(&args);
    let answer: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("no JSON ({e}): {}", text(&out.stderr)));
    assert_eq!(answer["state"], "killed", "{answer}");
    assert_eq!(answer["reason"], "memory limit 256 MiB", "{answer}");
    assert!(!answer["output"].as_str().unwrap().contains("survived"));

    // A fork loop under pids 64 (bash retries a refused fork and goes on).
    let bomb = "exec bash -c 'while :; do sleep 300 & done' 2>/dev/null";
    let started = s.run_started(&["--sandbox", "workspace-write", "--pids", "64"], bomb);
    let id = started["id"].as_str().unwrap().to_owned();
    let info = eventually(Duration::from_secs(20), "the pids limit to be hit", || {
        let ps = s.output(&["ps", "--json"]);
        let list: Value = serde_json::from_slice(&ps.stdout).ok()?;
        let me = list["sessions"].as_array()?.iter().find(|x| x["id"] == id)?.clone();
        (me["pids_limit_hits"].as_u64()? > 0).then_some(me)
    });
    let processes = info["processes"].as_u64().unwrap();
    assert!((1..=64).contains(&processes), "{processes} processes under pids 64: {info}");
    // The session's groups are beneath the delegated ones.
    let made: Vec<PathBuf> = delegated.dirs.iter().flat_map(|d| subgroups(d)).collect();
    assert!(made.iter().any(|d| d.to_string_lossy().contains(&id)), "{made:?}");
    let killed = s.output(&["kill", &id, "--json"]);
    let killed: Value = serde_json::from_slice(&killed.stdout).unwrap();
    assert_eq!(killed["report"]["terminated"], true, "{killed}");
    assert_eq!(killed["report"]["survivors"].as_array().map(Vec::len), Some(0), "{killed}");
    // Nothing of the session is left in the subtree, only the daemon itself (an exiting
    // process may be listed a moment longer).
    let daemon_pid = format!(": {}", s.daemon_pid());
    let deadline = Instant::now() + Duration::from_secs(5);
    let left = loop {
        let left: Vec<String> =
            delegated.processes().into_iter().filter(|l| !l.ends_with(&daemon_pid)).collect();
        if left.is_empty() || Instant::now() >= deadline {
            break left;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(left.is_empty(), "left in the delegated groups after kill: {left:?}");
}
