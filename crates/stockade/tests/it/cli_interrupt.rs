//! Ctrl-C or SIGTERM to a foreground `stockade run` ends the command's whole tree, prints the
//! summary, and then the client dies of that same signal, as the command itself would have in a
//! shell: a shell loop around it stops instead of starting the next run.

use std::os::unix::process::{CommandExt as _, ExitStatusExt as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use stockade_testkit::child::{STOP_TIMEOUT, wait_bounded};
use stockade_testkit::{Home, eventually, procs, stockade_bin};

/// On drop (a failed test too): kills the process group this test started, its children by pid,
/// and whatever still carries the marker of any session of `home`.
struct Cleanup {
    home: PathBuf,
    group: Option<i32>,
    children: Vec<Child>,
}

impl Cleanup {
    fn new(home: &Home) -> Cleanup {
        Cleanup { home: home.path().to_owned(), group: None, children: Vec::new() }
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        if let Some(pgid) = self.group {
            send(-pgid, libc::SIGKILL);
        }
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
        let instances = std::fs::read_dir(self.home.join("spool")).into_iter().flatten().flatten();
        for session in instances.flat_map(|i| std::fs::read_dir(i.path()).into_iter().flatten()) {
            let spool = session.map(|s| s.path().join("output.log"));
            if let Ok(spool) = spool
                && let Some(spool) = spool.to_str()
                && spool.contains("/sh-")
            {
                procs::kill_marked(&procs::session_marker(spool));
            }
        }
    }
}

/// The spool of the first foreground session of `home`, once its record is written.
fn first_spool(home: &Path) -> PathBuf {
    eventually(Duration::from_secs(15), "the foreground run to start", || {
        let instances = std::fs::read_dir(home.join("spool")).ok()?;
        instances.flatten().map(|i| i.path().join("sh-1")).find(|d| d.join("session.json").exists())
    })
    .join("output.log")
}

/// Sends `sig` to `pid` (a process group when negative) this test started.
fn send(pid: i32, sig: i32) {
    // SAFETY: kill(2) on a process or group this test started.
    unsafe { libc::kill(pid, sig) };
}

#[test]
fn a_foreground_run_ends_its_tree_then_dies_of_the_same_signal() {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        let home = Home::new();
        let mut cleanup = Cleanup::new(&home);
        let client = home
            .cmd(&["run", "sleep 31; echo never"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let pid = client.id() as i32;
        cleanup.children.push(client);
        let marker = procs::session_marker(first_spool(home.path()).to_str().unwrap());
        send(pid, sig);
        let status =
            wait_bounded(&mut cleanup.children[0], STOP_TIMEOUT).expect("the client ended");
        assert_eq!(status.signal(), Some(sig), "signal {sig}: the client ended with {status:?}");
        assert!(procs::marked_processes(&marker).is_empty(), "signal {sig}: the tree is gone");
    }
}

#[test]
fn a_shell_loop_of_foreground_runs_stops_at_ctrl_c() {
    let home = Home::new();
    let mut cleanup = Cleanup::new(&home);
    let bin = stockade_bin();
    let script = format!(
        "for i in 1 2 3; do '{}' run 'sleep 32'; done; echo the-loop-went-on",
        bin.display()
    );
    // Its own process group, as a terminal's foreground job: Ctrl-C goes to the whole group.
    let mut shell = Command::new("bash");
    shell
        .args(["-c", &script])
        .env("STOCKADE_HOME", home.path())
        .env_remove("STOCKADE_NO_AUTOSTART")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .process_group(0);
    // SAFETY: one async-signal-safe `signal` call between fork and exec. A shell started from
    // a terminal takes Ctrl-C; one that inherits SIGINT ignored (a test run launched as a
    // background job of a non-interactive shell) cannot, whatever Stockade does, so the
    // default is put back.
    unsafe {
        shell.pre_exec(|| {
            if libc::signal(libc::SIGINT, libc::SIG_DFL) == libc::SIG_ERR {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let shell = shell.spawn().unwrap();
    let pgid = shell.id() as i32;
    cleanup.group = Some(pgid);
    cleanup.children.push(shell);
    let marker = procs::session_marker(first_spool(home.path()).to_str().unwrap());
    send(-pgid, libc::SIGINT);
    let status = wait_bounded(&mut cleanup.children[0], STOP_TIMEOUT).expect("the loop ended");
    assert_eq!(status.signal(), Some(libc::SIGINT), "bash ended with {status:?}");
    let mut out = String::new();
    if let Some(mut stdout) = cleanup.children[0].stdout.take() {
        let _ = std::io::Read::read_to_string(&mut stdout, &mut out);
    }
    assert!(!out.contains("the-loop-went-on"), "the loop went on: {out}");
    assert!(procs::marked_processes(&marker).is_empty(), "the tree is gone");
    let second = std::fs::read_dir(home.path().join("spool"))
        .unwrap()
        .flatten()
        .any(|i| i.path().join("sh-2").exists());
    assert!(!second, "a second run was started after Ctrl-C");
}
