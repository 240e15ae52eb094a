//! PID namespaces (`unshare --fork --pid --mount-proc`, root only; Linux-only): a daemon whose
//! namespace's PID 1 never calls `wait` stays a zombie for good after a SIGKILL, and the next
//! `ps` recovers its sessions all the same; `stockade daemon run` as a namespace's PID 1 reaps
//! every orphan that lands on it, ends its sessions on SIGTERM and exits 0.

use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

use serde_json::{Value, json};
use stockade_testkit::procs::{instance_of, marked_processes, read_stat};
use stockade_testkit::{Rpc, cannot_run, eventually, stockade_bin};

use crate::restart::Markers;

/// `unshare --fork --pid --mount-proc --kill-child ARGS`: a new PID namespace whose PID 1 is
/// `ARGS`. Dropping it SIGKILLs `unshare`, which (`--kill-child`) SIGKILLs that PID 1, and with
/// it every process of the namespace.
struct Namespace {
    unshare: Child,
    /// The host pid of the namespace's PID 1.
    init: u32,
}

impl Namespace {
    fn start(args: &[&std::ffi::OsStr]) -> Result<Namespace, String> {
        let mut unshare = Command::new("unshare")
            .args(["--fork", "--pid", "--mount-proc", "--kill-child"])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("unshare cannot run: {e}"))?;
        let parent = unshare.id();
        let mut init = None;
        for _ in 0..500 {
            if let Ok(Some(status)) = unshare.try_wait() {
                let mut err = String::new();
                use std::io::Read;
                let _ = unshare.stderr.take().map(|mut e| e.read_to_string(&mut err));
                return Err(format!("unshare exited ({status}): {}", err.trim()));
            }
            init = children(parent).into_iter().next();
            if init.is_some() {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let init = init.ok_or("unshare started no child")?;
        Ok(Namespace { unshare, init })
    }

    /// `nsenter` into the namespace (its PIDs and its /proc) running `stockade ARGS` on `home`.
    fn stockade(&self, home: &Path, args: &[&str]) -> Command {
        let mut c = Command::new("nsenter");
        c.arg("-t")
            .arg(self.init.to_string())
            .args(["-p", "-m", "--"])
            .arg(stockade_bin())
            .args(args)
            .env("STOCKADE_HOME", home)
            .env_remove("STOCKADE_NO_AUTOSTART")
            .env("STOCKADE_LOG", "warn")
            .stdin(Stdio::null());
        c
    }

    fn ok(&self, home: &Path, args: &[&str]) -> String {
        let out = self.stockade(home, args).output().unwrap();
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn json(&self, home: &Path, args: &[&str]) -> Value {
        serde_json::from_str(&self.ok(home, args)).unwrap()
    }

    /// `unshare`'s exit (the namespace's PID 1's status), within `within`.
    fn wait(&mut self, within: Duration) -> Option<ExitStatus> {
        stockade_testkit::child::wait_bounded(&mut self.unshare, within)
    }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        let _ = self.unshare.kill();
        let _ = self.unshare.wait();
    }
}

/// Host pids whose parent is `pid`.
fn children(pid: u32) -> Vec<u32> {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        if let Some(p) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok())
            && read_stat(p).is_some_and(|s| s.ppid == pid)
        {
            found.push(p);
        }
    }
    found
}

/// Whether this machine can make PID namespaces (root); says why not otherwise.
fn namespaces_usable() -> bool {
    let ok = Command::new("unshare")
        .args(["--fork", "--pid", "--mount-proc", "true"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        cannot_run("cannot make a PID namespace here (needs root and unshare)");
    }
    ok
}

#[test]
fn a_daemon_that_stays_a_zombie_for_good_is_recovered_all_the_same() {
    if !namespaces_usable() {
        return;
    }
    // PID 1 of this namespace is a `sleep`: it never calls wait, so a dead daemon stays `Z`.
    let ns = Namespace::start(&["sleep".as_ref(), "600".as_ref()]).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let mut markers = Markers::default();
    ns.ok(&home, &["daemon", "start"]);
    let mut ids = Vec::new();
    for i in 0..4 {
        let cmd = format!("while :; do echo ns-{i}; sleep 0.01; done");
        let s = ns.json(&home, &["run", "--bg", "--json", &cmd]);
        ids.push(s["id"].as_str().unwrap().to_owned());
    }
    let s = ns.json(&home, &["run", "--bg", "--json", "sleep 300"]);
    ids.push(s["id"].as_str().unwrap().to_owned());
    let instance = instance_of(&s);
    markers.instance(&instance);
    let prefix = format!("STOCKADE_SESSION={instance}:");
    assert!(marked_processes(&prefix).len() >= 5);
    // The daemon's pid inside the namespace, from its lock; SIGKILL it there.
    let inner: u32 =
        std::fs::read_to_string(home.join("daemon.lock")).unwrap().trim().parse().unwrap();
    let killed = Command::new("nsenter")
        .arg("-t")
        .arg(ns.init.to_string())
        .args(["-p", "-m", "--", "sh", "-c", &format!("kill -9 {inner}")])
        .status()
        .unwrap();
    assert!(killed.success());
    let host_daemon = eventually(Duration::from_secs(5), "the daemon a zombie", || {
        children(ns.init).into_iter().find(|&p| {
            read_stat(p).is_some_and(|s| s.is_zombie())
                && std::fs::read_to_string(format!("/proc/{p}/status")).is_ok_and(|t| {
                    t.lines().any(|l| l.starts_with("NSpid:") && l.ends_with(&format!("\t{inner}")))
                })
        })
    });

    let list = ns.json(&home, &["ps", "--json"]);
    eventually(Duration::from_secs(5), "nothing of the dead daemon's sessions alive", || {
        marked_processes(&prefix).is_empty().then_some(())
    });
    // Still a zombie: nobody reaped it, and recovery did not need it to be reaped.
    assert!(read_stat(host_daemon).is_some_and(|s| s.is_zombie()));
    let sessions = list["sessions"].as_array().unwrap();
    for id in &ids {
        let s: Vec<&Value> = sessions.iter().filter(|s| s["id"] == id.as_str()).collect();
        assert_eq!(s.len(), 1, "{id} listed once: {list}");
        assert_eq!(s[0]["state"], "failed", "{}", s[0]);
        assert!(s[0]["reason"].as_str().unwrap().starts_with("owner daemon died"), "{}", s[0]);
    }
    let mut rpc = Rpc::connect(&home.join("stockade.sock"));
    for id in &ids[..4] {
        let (bytes, last) = rpc.read_all_raw(id, 1 << 20);
        assert_eq!(last["total_bytes"], bytes.len() as u64);
    }
    drop(rpc);
    ns.ok(&home, &["daemon", "stop"]);
}

#[test]
fn as_pid_1_the_daemon_reaps_orphans_ends_sessions_on_sigterm_and_exits_0() {
    if !namespaces_usable() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let bin = stockade_bin();
    let mut ns = Namespace::start(&[
        bin.as_os_str(),
        "--home".as_ref(),
        home.as_os_str(),
        "daemon".as_ref(),
        "run".as_ref(),
        "--grace-ms".as_ref(),
        "500".as_ref(),
    ])
    .unwrap();
    let socket = home.join("stockade.sock");
    eventually(Duration::from_secs(20), "the PID-1 daemon listening", || {
        std::os::unix::net::UnixStream::connect(&socket).ok()
    });
    let mut rpc = Rpc::connect(&socket);
    let s = rpc.ok("run", json!({"command": "sleep 300", "background": true}));
    let id = s["id"].as_str().unwrap().to_owned();
    let list = rpc.ok("list", json!({}));
    let instance = instance_of(&list["sessions"][0]);
    let mut markers = Markers::default();
    markers.instance(&instance);
    assert!(instance.starts_with("daemon-1-"), "the daemon is PID 1: {instance}");
    // Orphans land on PID 1: each `sh` exits at once and leaves its `sleep` to the daemon.
    for _ in 0..5 {
        let st = Command::new("nsenter")
            .arg("-t")
            .arg(ns.init.to_string())
            .args(["-p", "-m", "--", "sh", "-c", "sleep 1 & exit 0"])
            .status()
            .unwrap();
        assert!(st.success());
    }
    eventually(Duration::from_secs(3), "orphans landed on the daemon", || {
        (children(ns.init).len() >= 2).then_some(())
    });
    // Every orphan exits and is reaped: no zombie child of the daemon stays.
    eventually(Duration::from_secs(10), "every orphan reaped", || {
        let zombies: Vec<u32> = children(ns.init)
            .into_iter()
            .filter(|&p| read_stat(p).is_some_and(|s| s.is_zombie()))
            .collect();
        let orphans = children(ns.init)
            .into_iter()
            .filter(|&p| {
                std::fs::read(format!("/proc/{p}/cmdline")).is_ok_and(|c| c == b"sleep\x001\x00")
            })
            .count();
        (zombies.is_empty() && orphans == 0).then_some(())
    });
    // The session is still running (its root was not reaped from under it).
    let list = rpc.ok("list", json!({}));
    assert_eq!(list["sessions"][0]["state"], "running", "{list}");
    drop(rpc);

    // SIGTERM to PID 1 (from the parent namespace: it has a handler, so it is delivered).
    // SAFETY: kill(2) of the namespace's PID 1, a grandchild of this test by pid.
    assert_eq!(unsafe { libc::kill(ns.init as libc::pid_t, libc::SIGTERM) }, 0);
    let status = ns.wait(Duration::from_secs(20)).expect("PID 1 exits on SIGTERM");
    assert!(status.success(), "{status}");
    assert!(marked_processes(&format!("STOCKADE_SESSION={instance}:{id}")).is_empty());
    // Its record says how it ended.
    let record: Value = serde_json::from_slice(
        &std::fs::read(home.join("spool").join(&instance).join(&id).join("session.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(record["state"], "killed", "{record}");
}
