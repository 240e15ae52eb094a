//! Restart-proof, with daemons started the way users start them (`stockade daemon start`, or
//! auto-started by `stockade ps`), so this test is not their parent and cannot reap them: a
//! SIGKILLed daemon stays a zombie until its real parent reaps it, and the next `ps` recovers
//! its sessions all the same; history survives `daemon stop` and a crash, listed exactly once;
//! a foreground `stockade run` is listed while it runs and after, and its tree dies within
//! seconds when it is SIGKILLed, and `ps` right after one ends shows it ended; `daemon stop`
//! names what it terminated; failed spawns leave no directory `list` does not show; an error
//! after the spawn leaves no process.

use std::collections::HashSet;
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use stockade_testkit::procs::{instance_of, kill_marked, marked_processes, read_stat};
use stockade_testkit::{DaemonProc, Home, Rpc, eventually};

/// Kills (by pid, on drop) whatever still carries the marker of a daemon or run this test saw,
/// and every daemon still serving a state directory this test made.
#[derive(Default)]
pub(crate) struct Markers(Vec<String>, Vec<std::path::PathBuf>);

impl Markers {
    /// Every daemon of this state directory (started with `daemon start` or auto-started, so
    /// not this test's child).
    pub(crate) fn home(&mut self, home: &Path) {
        self.1.push(home.to_path_buf());
    }
    /// Every session of the daemon with this pid.
    pub(crate) fn daemon(&mut self, pid: u32) {
        self.0.push(format!("STOCKADE_SESSION=daemon-{pid}-"));
    }
    /// Every session of this instance.
    pub(crate) fn instance(&mut self, instance: &str) {
        self.0.push(format!("STOCKADE_SESSION={instance}:"));
    }
}

/// A fresh state directory with a daemon started as users start it (`daemon start`), and the
/// markers that clean up after both; the daemon's pid.
pub(crate) fn started_home() -> (Home, Markers, u32) {
    let home = Home::new();
    let mut markers = Markers::default();
    markers.home(home.path());
    home.ok(&["daemon", "start"]);
    let pid = home.daemon_pid().unwrap();
    markers.daemon(pid);
    (home, markers, pid)
}

impl Drop for Markers {
    fn drop(&mut self) {
        for home in &self.1 {
            for pid in stockade_testkit::procs::daemons_for(home) {
                // SAFETY: kill(2) on a pid just seen serving this test's own state directory.
                unsafe {
                    libc::kill(pid as libc::pid_t, libc::SIGKILL);
                }
            }
        }
        for m in &self.0 {
            kill_marked(m);
        }
    }
}

/// A child of this test (a foreground `stockade run`), killed and reaped on drop.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts a background run (it may already have finished when this returns); its id.
fn start(home: &Home, command: &str) -> String {
    home.json_first(&["run", "--bg", "--json", command])["id"].as_str().unwrap().to_owned()
}

/// `ps --json` as a list.
fn ps(home: &Home) -> Vec<Value> {
    home.json(&["ps"])["sessions"].as_array().unwrap().clone()
}

/// The listed session `id`, insisting it is listed exactly once.
fn listed<'a>(list: &'a [Value], id: &str) -> &'a Value {
    let found: Vec<&Value> = list.iter().filter(|s| s["id"] == id).collect();
    assert_eq!(found.len(), 1, "{id} must be listed exactly once: {list:?}");
    found[0]
}

/// Every id listed is listed once.
fn assert_unique(list: &[Value]) {
    let mut seen = HashSet::new();
    for s in list {
        assert!(seen.insert(s["id"].as_str().unwrap().to_owned()), "listed twice: {list:?}");
    }
}

/// SIGKILL a process that is not this test's child (a daemon started as users start it), and
/// wait until the kernel is done killing it: a zombie nobody here reaps (or gone) whose other
/// threads have exited too. Until then its file table, and so its listening socket, lives on:
/// a client that connects in that window is accepted by the kernel and never answered.
pub(crate) fn sigkill(pid: u32) {
    // SAFETY: kill(2) of a pid a daemon of this test's own home wrote into its lock file.
    assert_eq!(unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) }, 0);
    eventually(Duration::from_secs(10), "the SIGKILLed daemon dead", || {
        let zombie = read_stat(pid).is_none_or(|s| s.is_zombie());
        let threads = std::fs::read_dir(format!("/proc/{pid}/task")).map_or(0, |d| d.count());
        (zombie && threads <= 1).then_some(())
    });
}

/// The socket of `home`'s daemon, for raw reads.
fn rpc(home: &Home) -> Rpc {
    Rpc::connect(&home.path().join("stockade.sock"))
}

/// `session dirs` under `home/spool/*/`: (instance, id).
pub(crate) fn session_dirs(home: &Path) -> Vec<(String, String)> {
    let mut dirs = Vec::new();
    for inst in std::fs::read_dir(home.join("spool")).unwrap().flatten() {
        let instance = inst.file_name().to_str().unwrap().to_owned();
        if !inst.file_type().unwrap().is_dir() {
            continue;
        }
        for s in std::fs::read_dir(inst.path()).unwrap().flatten() {
            let name = s.file_name().to_str().unwrap().to_owned();
            if name.starts_with("sh-") {
                dirs.push((instance.clone(), name));
            }
        }
    }
    dirs
}

#[test]
fn a_sigkilled_daemon_nobody_reaps_is_recovered_by_the_next_ps() {
    let home = Home::new();
    let mut markers = Markers::default();
    home.ok(&["daemon", "start"]);
    let pid = home.daemon_pid().unwrap();
    markers.daemon(pid);
    let mut ids = Vec::new();
    for i in 0..4 {
        let s = home.run_bg(&format!("while :; do echo line-{i}; sleep 0.01; done"));
        ids.push(s["id"].as_str().unwrap().to_owned());
    }
    let sleeper = home.run_bg("sleep 300");
    ids.push(sleeper["id"].as_str().unwrap().to_owned());
    let prefix = format!("STOCKADE_SESSION=daemon-{pid}-");
    eventually(Duration::from_secs(20), "every printer printed", || {
        let list = ps(&home);
        ids[..4]
            .iter()
            .all(|id| listed(&list, id)["total_bytes"].as_u64().unwrap() > 0)
            .then_some(())
    });
    assert!(marked_processes(&prefix).len() >= 5, "the sessions run");

    sigkill(pid);
    let killed_at = Instant::now();
    // The dead daemon is a zombie now (its parent is init, or whoever adopted it).
    let list = ps(&home); // auto-starts the next daemon, which recovers before it answers
    let next = home.daemon_pid().unwrap();
    markers.daemon(next);
    assert_ne!(next, pid);
    eventually(Duration::from_secs(5), "nothing of the dead daemon's sessions alive", || {
        marked_processes(&prefix).is_empty().then_some(())
    });
    let took = killed_at.elapsed();
    assert!(took <= Duration::from_secs(5), "{took:?}");
    assert_unique(&list);
    let mut rpc = rpc(&home);
    for (i, id) in ids.iter().enumerate() {
        let s = listed(&list, id);
        assert_eq!(s["state"], "failed", "{s}");
        assert!(s["reason"].as_str().unwrap().starts_with("owner daemon died"), "{s}");
        let (bytes, _) = rpc.read_all_raw(id, 1 << 20);
        assert_eq!(bytes.len() as u64, s["total_bytes"].as_u64().unwrap(), "{id}");
        if i < 4 {
            let line = format!("line-{i}\n");
            let whole = line.repeat(bytes.len() / line.len() + 1);
            assert!(whole.as_bytes().starts_with(&bytes), "{id}: not a prefix of its output");
        }
    }
}

#[test]
fn history_survives_stop_and_crash_and_foreground_runs_are_listed_while_they_run() {
    let home = Home::new();
    let mut markers = Markers::default();
    let one = start(&home, "echo one");
    markers.daemon(home.daemon_pid().unwrap());
    home.wait_finished(&one);
    home.ok(&["daemon", "stop"]);
    // The next daemon (auto-started) lists the stopped one's session with its true state.
    let list = ps(&home);
    markers.daemon(home.daemon_pid().unwrap());
    let s = listed(&list, &one);
    assert_eq!((s["state"].as_str(), s["code"].as_i64()), (Some("exited"), Some(0)), "{s}");

    let two = start(&home, "echo two");
    home.wait_finished(&two);
    sigkill(home.daemon_pid().unwrap());
    let list = ps(&home);
    markers.daemon(home.daemon_pid().unwrap());
    assert_unique(&list);
    for id in [&one, &two] {
        assert_eq!(listed(&list, id)["state"], "exited", "{list:?}");
    }

    // A foreground run while the daemon is up: listed running, with its pid, then finished.
    let fg = Reaped(home.cmd(&["run", "sleep 2"]).stdout(Stdio::null()).spawn().unwrap());
    let running = eventually(Duration::from_secs(10), "the foreground run listed", || {
        ps(&home).into_iter().find(|s| s["command"] == "sleep 2" && s["state"] == "running")
    });
    markers.instance(&instance_of(&running));
    assert!(running["pid"].as_u64().unwrap() > 0, "{running}");
    let fg_id = running["id"].as_str().unwrap().to_owned();
    let done = eventually(Duration::from_secs(20), "the foreground run finished", || {
        let list = ps(&home);
        let s = listed(&list, &fg_id).clone();
        (s["state"] != "running").then_some(s)
    });
    assert_eq!((done["state"].as_str(), done["code"].as_i64()), (Some("exited"), Some(0)));
    drop(fg);
    // Ids are never reused, and every session is listed once.
    let list = ps(&home);
    assert_unique(&list);
    let mut numbers: Vec<u64> =
        [&one, &two, &fg_id].iter().map(|id| id[3..].parse().unwrap()).collect();
    numbers.dedup();
    assert_eq!(numbers.len(), 3);
    assert!(numbers.windows(2).all(|w| w[0] < w[1]), "{numbers:?}");
}

#[test]
fn ps_right_after_a_foreground_run_lists_it_finished() {
    let (home, _markers, _) = started_home();
    // Runs and `ps` calls close together: most calls fall within the last look's freshness
    // window, so a `list` that skipped its look wrongly would show a stale or missing run.
    for k in 0..6 {
        let command = format!("echo fg-{k}; exit {k}");
        let out = home.run(&["run", &command]);
        assert_eq!(out.status.code(), Some(k), "{}", stockade_testkit::text(&out.stderr));
        for _ in 0..2 {
            let list = ps(&home);
            let s = list.iter().find(|s| s["command"] == command.as_str());
            let s = s.unwrap_or_else(|| panic!("{command:?} is not listed: {list:?}"));
            assert_eq!((s["state"].as_str(), s["code"].as_i64()), (Some("exited"), Some(k as i64)));
        }
    }
}

#[test]
fn a_sigkilled_foreground_run_is_noticed_within_seconds() {
    let home = Home::new();
    let mut markers = Markers::default();
    home.ok(&["daemon", "start"]);
    markers.daemon(home.daemon_pid().unwrap());
    let mut fg = Reaped(
        home.cmd(&["run", "sleep 300 & sleep 301; wait"]).stdout(Stdio::null()).spawn().unwrap(),
    );
    let running = eventually(Duration::from_secs(10), "the foreground run listed", || {
        ps(&home).into_iter().find(|s| s["state"] == "running")
    });
    let id = running["id"].as_str().unwrap().to_owned();
    let marker = format!("STOCKADE_SESSION={}:{id}", instance_of(&running));
    markers.instance(&instance_of(&running));
    assert_eq!(marked_processes(&marker).len(), 3, "sh and two sleeps");
    let _ = fg.0.kill(); // SIGKILL to the foreground client: its tree is now unsupervised
    let _ = fg.0.wait();
    let killed_at = Instant::now();
    // No new daemon start: the running daemon notices the dead owner by itself.
    eventually(Duration::from_secs(10), "the dead run's tree terminated", || {
        marked_processes(&marker).is_empty().then_some(())
    });
    let took = killed_at.elapsed();
    assert!(took <= Duration::from_secs(10), "{took:?}");
    let list = ps(&home);
    let s = listed(&list, &id);
    assert_eq!(s["state"], "failed", "{s}");
    assert!(s["reason"].as_str().unwrap().contains("processes terminated at recovery"), "{s}");
    eprintln!("foreground run SIGKILLed: its tree was gone after {took:?}");
}

#[test]
fn daemon_stop_names_the_sessions_it_terminated() {
    let home = Home::new();
    let mut markers = Markers::default();
    let a = home.run_bg("sleep 300")["id"].as_str().unwrap().to_owned();
    markers.daemon(home.daemon_pid().unwrap());
    let b = home.run_bg("sleep 301")["id"].as_str().unwrap().to_owned();
    let pid = home.daemon_pid().unwrap();
    let said = home.ok(&["daemon", "stop"]);
    assert_eq!(
        said,
        format!("Daemon stopped (pid {pid}); terminated 2 running sessions: {a}, {b}\n")
    );
    let list = ps(&home);
    markers.daemon(home.daemon_pid().unwrap());
    for id in [&a, &b] {
        let s = listed(&list, id);
        assert_eq!(s["state"], "killed", "{s}");
    }
}

#[test]
fn fifty_failed_spawns_leave_no_directory_that_list_does_not_show() {
    let home = Home::new();
    let mut markers = Markers::default();
    home.ok(&["daemon", "start"]);
    markers.daemon(home.daemon_pid().unwrap());
    let mut rpc = rpc(&home);
    let bad: [Value; 3] = [
        json!({"command": "true", "cwd": "/nonexistent/stockade-test", "background": true}),
        json!({"command": "true", "shell": "/nonexistent/sh", "background": true}),
        json!({"command": "echo a\u{0}b", "background": true}),
    ];
    for i in 0..50 {
        let answer = rpc.call("run", bad[i % bad.len()].clone());
        assert!(answer.is_err(), "run {i} must fail: {answer:?}");
    }
    let ok = rpc.ok("run", json!({"command": "echo fine", "background": true}));
    let listed: HashSet<String> =
        ps(&home).iter().map(|s| s["id"].as_str().unwrap().to_owned()).collect();
    let dirs = session_dirs(home.path());
    let invisible: Vec<_> = dirs.iter().filter(|(_, id)| !listed.contains(id)).collect();
    assert!(invisible.is_empty(), "directories list does not show: {invisible:?}");
    assert_eq!(dirs.len(), 1, "only the run that started has a directory: {dirs:?}");
    assert!(listed.contains(ok["id"].as_str().unwrap()));
}

#[test]
fn an_error_after_the_spawn_leaves_no_process_and_answers_a_resource_error() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let daemon =
        DaemonProc::start_env(&home, &[], &[("STOCKADE_TEST_FAIL_AFTER_SPAWN", "1")]).unwrap();
    let mut rpc = daemon.client();
    let (code, message) = rpc
        .call("run", json!({"command": "sleep 300 & sleep 301; wait", "background": true}))
        .unwrap_err();
    assert_eq!(code, stockade_proto::rpc::code::RESOURCE, "{message}");
    assert!(message.contains("terminated"), "{message}");
    eventually(Duration::from_secs(10), "the unsupervised tree terminated", || {
        marked_processes(&daemon.marker_prefix()).is_empty().then_some(())
    });
    // It is listed, ended, with the reason: nothing of it is invisible.
    let list = rpc.ok("list", json!({}));
    let sessions = list["sessions"].as_array().unwrap();
    assert_eq!(sessions.len(), 1, "{list}");
    let s = eventually(Duration::from_secs(10), "the session ended", || {
        let list = rpc.ok("list", json!({}));
        let s = list["sessions"][0].clone();
        (s["state"] != "running").then_some(s)
    });
    assert!(s["reason"].as_str().unwrap().contains("not supervised"), "{s}");
}
