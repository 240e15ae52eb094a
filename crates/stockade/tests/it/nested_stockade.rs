//! Stockade's own executable as a session's descendant, without a cgroup (the normal mode in a
//! pod): a session runs `stockade run --bg` for another home, which auto-starts a daemon of its
//! own (it detaches: a double fork with its own session) and a session under it. Under session
//! keepers, the default without a cgroup, that daemon and its session are the outer session's
//! descendants: ending the outer session by `kill`, by the command's own exit or by `daemon stop`
//! leaves nothing of them, and `kill` says so truthfully.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::json;
use stockade_testkit::procs::{carrying, daemons_for, pid_alive};
use stockade_testkit::{DaemonProc, PATIENCE, text};

/// Kills, by pid, what a failed case left: processes carrying its tag and the nested daemon.
struct Cleanup {
    tag: String,
    inner: std::path::PathBuf,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        for pid in carrying(&self.tag).into_iter().chain(daemons_for(&self.inner)) {
            // SAFETY: kill(2) of a pid that carries this case's own tag or serves its home.
            unsafe {
                libc::kill(pid as libc::pid_t, libc::SIGKILL);
            }
        }
    }
}

/// `stockade ARGS` against `home`; (exit code, stdout + stderr).
fn cli(home: &Path, args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(stockade_testkit::stockade_bin())
        .args(args)
        .env("STOCKADE_HOME", home)
        .env("NO_COLOR", "1")
        .output()
        .unwrap_or_else(|e| panic!("stockade {args:?}: {e}"));
    (out.status.code(), format!("{}{}", text(&out.stdout), text(&out.stderr)))
}

#[derive(Clone, Copy, Debug)]
enum End {
    Kill,
    Exit,
    DaemonStop,
}

fn case(end: End, n: u32) {
    let tag = format!("1000.{:05}{n}", std::process::id() % 100_000);
    let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let inner = tmp.path().join("inner");
    let _cleanup = Cleanup { tag: tag.clone(), inner: inner.clone() };
    let mut daemon = DaemonProc::start(&["--no-cgroup"]);
    let status = daemon.client().ok("status", json!({}));
    assert_eq!(status["session_keeper"], true, "{status}");

    let bin = stockade_testkit::stockade_bin();
    let after = match end {
        End::Exit => "exit 0".to_owned(),
        End::Kill | End::DaemonStop => format!("exec sleep 6{tag}"),
    };
    let command = format!(
        "STOCKADE_HOME={} {} run --bg -q 'sleep {tag}' && echo nested-started; {after}",
        inner.display(),
        bin.display()
    );
    let (code, out) = cli(&daemon.home, &["run", "--bg", "-q", &command]);
    assert_eq!(code, Some(0), "{out}");
    let id = out.trim().to_owned();

    // The nested daemon and its session run.
    let deadline = Instant::now() + PATIENCE;
    while daemons_for(&inner).is_empty() || carrying(&format!("sleep {tag}")).is_empty() {
        assert!(Instant::now() < deadline, "the nested daemon or its session never ran");
        std::thread::sleep(Duration::from_millis(50));
    }
    let nested = daemons_for(&inner);

    match end {
        End::Kill => {
            let (code, out) = cli(&daemon.home, &["kill", "--grace-ms", "500", &id]);
            assert_eq!(code, Some(0), "kill says something survived: {out}");
        }
        End::Exit => {} // the command exits by itself after starting them
        End::DaemonStop => {
            let (code, out) = cli(&daemon.home, &["daemon", "stop"]);
            assert_eq!(code, Some(0), "{out}");
            assert!(daemon.wait_exit(PATIENCE).is_some(), "the daemon did not exit");
        }
    }
    // Nothing of the nested daemon or its session is left (bounded: 10 s).
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left: Vec<u32> = carrying(&tag)
            .into_iter()
            .chain(nested.iter().copied().filter(|p| pid_alive(*p)))
            .collect();
        if left.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "{end:?}: left {left:?} (nested daemon {nested:?})");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_nested_daemon_and_its_session_end_with_kill() {
    case(End::Kill, 1);
}

#[test]
fn a_nested_daemon_and_its_session_end_with_the_commands_exit() {
    case(End::Exit, 2);
}

#[test]
fn a_nested_daemon_and_its_session_end_with_daemon_stop() {
    case(End::DaemonStop, 3);
}
