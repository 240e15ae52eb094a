//! Crash safety through real daemon processes: SIGKILL a daemon mid-output, start a new one on
//! the same home, and check that it recovered everything before serving (nothing of the dead
//! daemon's sessions alive, every record terminal with the recovery reason, every spool readable
//! by id, `file` capture complete to the last byte written); a reused pid is never signalled;
//! dedup by source through the daemon.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};
use stockade_testkit::procs::{KillCarrying, carrying, kill_marked, marked_processes, start_time};
use stockade_testkit::{DaemonProc, Rpc, eventually};

const PIPE_SESSIONS: usize = 8;
const FILE_SESSIONS: usize = 2;
const PIPE_BYTES: u64 = 20 * 1024 * 1024;
/// Bytes per raw read through the daemon.
const CHUNK: u64 = 1024 * 1024;
/// Every file-mode session prints line `n` as `%08d\n`: 9 bytes.
const LINE: usize = 9;

/// A temporary home that outlives the daemons started on it, and kills whatever still carries
/// a marker of a daemon that ran on it (by pid), even when the test fails.
struct CrashHome {
    tmp: tempfile::TempDir,
    markers: Vec<String>,
}

impl CrashHome {
    fn new() -> CrashHome {
        CrashHome { tmp: tempfile::tempdir().unwrap(), markers: Vec::new() }
    }
    fn path(&self) -> PathBuf {
        self.tmp.path().join("home")
    }
    fn start(&mut self, extra: &[&str]) -> DaemonProc {
        let d = DaemonProc::start_at(&self.path(), extra).expect("the daemon starts");
        self.markers.push(d.marker_prefix());
        d
    }
}

impl Drop for CrashHome {
    fn drop(&mut self) {
        for m in &self.markers {
            kill_marked(m);
        }
    }
}

/// A child of this test that must not be signalled by anyone else; killed on drop.
struct Bystander(Child);

impl Drop for Bystander {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// SIGKILL the daemon whose pid `$HOME/daemon.lock` names (and reap it).
fn sigkill_daemon(d: &mut DaemonProc) {
    let text = std::fs::read_to_string(d.home.join("daemon.lock")).unwrap();
    let pid: u32 = text.trim().parse().unwrap();
    assert_eq!(pid, d.pid, "the lock names the daemon");
    // SAFETY: kill(2) on our own child, by its pid.
    assert_eq!(unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) }, 0);
    assert!(d.wait_exit(Duration::from_secs(10)).is_some(), "the daemon died");
}

/// Every byte of a session's log, raw, through the daemon.
fn read_all(rpc: &mut Rpc, id: &str) -> Vec<u8> {
    let (out, last) = rpc.read_all_raw(id, CHUNK);
    assert_eq!(last["total_bytes"], out.len() as u64, "read to the end");
    out
}

/// `yes X` output: byte `i` is `X` when `i` is even, else a newline.
fn assert_yes_prefix(bytes: &[u8], what: &str) {
    for (i, &b) in bytes.iter().enumerate() {
        let want = if i % 2 == 0 { b'X' } else { b'\n' };
        assert_eq!(b, want, "{what}: byte {i}");
    }
}

/// The numbered lines `00000001\n00000002\n…`: `bytes` must be a prefix of them.
fn assert_numbered_prefix(bytes: &[u8], what: &str) {
    for (n, line) in bytes.chunks(LINE).enumerate() {
        let want = format!("{:08}\n", n + 1);
        assert_eq!(line, &want.as_bytes()[..line.len()], "{what}: line {}", n + 1);
    }
}

fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

fn session<'a>(list: &'a Value, id: &str) -> &'a Value {
    list["sessions"].as_array().unwrap().iter().find(|s| s["id"] == id).unwrap()
}

#[test]
fn a_sigkilled_daemon_is_recovered_before_the_next_one_serves() {
    let mut home = CrashHome::new();
    let mut first = home.start(&[]);
    let mut rpc = first.client();
    let mut pipe_ids = Vec::new();
    for i in 0..PIPE_SESSIONS {
        let mut params = json!({
            "command": format!("yes X | head -c {PIPE_BYTES}; sleep 1000"),
            "background": true,
        });
        if i == 0 {
            params["source"] = json!("nightly-build");
        }
        pipe_ids.push(rpc.ok("run", params)["id"].as_str().unwrap().to_owned());
    }
    let writer =
        "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); printf '%08d\\n' $i; sleep 0.004; done";
    let file_ids: Vec<String> = (0..FILE_SESSIONS)
        .map(|_| {
            let r =
                rpc.ok("run", json!({"command": writer, "background": true, "capture": "file"}));
            r["id"].as_str().unwrap().to_owned()
        })
        .collect();
    // Everyone has started printing; the pipe sessions may still be mid-output.
    let list = eventually(Duration::from_secs(30), "all sessions printing", || {
        let list = rpc.ok("list", json!({}));
        let all = list["sessions"].as_array().unwrap();
        all.iter().all(|s| s["total_bytes"].as_u64().unwrap() > 0).then_some(list)
    });
    let spools: Vec<PathBuf> = file_ids
        .iter()
        .map(|id| PathBuf::from(session(&list, id)["spool_path"].as_str().unwrap()))
        .collect();
    drop(rpc);
    sigkill_daemon(&mut first);

    // The daemon is dead; its sessions are not, and `file` capture keeps writing the spool.
    assert!(!marked_processes(&first.marker_prefix()).is_empty());
    let at_death: Vec<u64> = spools.iter().map(|p| file_len(p)).collect();
    for (i, spool) in spools.iter().enumerate() {
        eventually(Duration::from_secs(10), "file-mode spool to grow", || {
            (file_len(spool) > at_death[i] + 10 * LINE as u64).then_some(())
        });
    }
    let before_restart: Vec<u64> = spools.iter().map(|p| file_len(p)).collect();

    let second = home.start(&[]);
    let mut rpc = second.client();
    // The first answer comes after recovery: nothing of the dead daemon's sessions is left.
    let list = rpc.ok("list", json!({}));
    let left = marked_processes(&first.marker_prefix());
    assert!(left.is_empty(), "processes of the dead daemon's sessions survived: {left:?}");

    let all: Vec<&String> = pipe_ids.iter().chain(&file_ids).collect();
    assert_eq!(list["sessions"].as_array().unwrap().len(), all.len(), "{list}");
    for id in &all {
        let s = session(&list, id);
        assert_eq!(s["state"], "failed", "{s}");
        let reason = s["reason"].as_str().unwrap();
        assert!(reason.starts_with("owner daemon died; "), "{reason}");
        assert!(reason.contains(" processes terminated at recovery"), "{reason}");
        let n: usize =
            reason["owner daemon died; ".len()..].split(' ').next().unwrap().parse().unwrap();
        assert!(n >= 1, "something of {id} was still running: {reason}");
        // The record on disk says the same, and names the dead owner.
        let dir = PathBuf::from(s["spool_path"].as_str().unwrap()).parent().unwrap().to_owned();
        let record: Value =
            serde_json::from_slice(&std::fs::read(dir.join("session.json")).unwrap()).unwrap();
        assert_eq!(record["state"], "failed");
        assert_eq!(record["reason"], reason);
        assert_eq!(record["owner"]["pid"], first.pid);
        assert!(record["root_start_time"].as_u64().unwrap() > 0);
        assert!(record["finished_at_ms"].as_u64().is_some());
    }

    // Every spool reads back by id through the new daemon, exactly as it is on disk.
    for id in &pipe_ids {
        let bytes = read_all(&mut rpc, id);
        let s = session(&list, id);
        assert_eq!(bytes.len() as u64, file_len(Path::new(s["spool_path"].as_str().unwrap())));
        assert!(bytes.len() as u64 <= PIPE_BYTES);
        assert_yes_prefix(&bytes, id);
    }
    for (i, id) in file_ids.iter().enumerate() {
        let bytes = read_all(&mut rpc, id);
        // Everything written up to recovery's kill is there: at least what was seen before the
        // restart, and exactly what the file holds; a correct prefix of the sequence.
        assert_eq!(bytes.len() as u64, file_len(&spools[i]), "{id}: the log reaches the end");
        assert!(bytes.len() as u64 >= before_restart[i], "{id}");
        assert!(before_restart[i] > at_death[i], "{id} grew while the daemon was dead");
        assert_numbered_prefix(&bytes, id);
        eprintln!(
            "{id}: {} bytes at the daemon's death, {} before the restart, {} after recovery",
            at_death[i],
            before_restart[i],
            bytes.len()
        );
        let found = rpc.ok("grep", json!({"id": id, "pattern": "^00000007$"}));
        assert_eq!(found["matches"], 1, "{found}");
    }

    // A source whose session died with its daemon does not block a new run.
    let again = rpc.ok("run", json!({"command": "true", "source": "nightly-build"}));
    assert_eq!(again["deduplicated"], false, "{again}");
    assert_ne!(again["id"], json!(pipe_ids[0]));
}

/// A fake record in `home`: a session directory with an empty log and `record` as its record.
fn plant(home: &Path, instance: &str, id: &str, record: &Value) -> PathBuf {
    let dir = home.join("spool").join(instance).join(id);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("output.log"), b"").unwrap();
    std::fs::write(dir.join("streams.idx"), b"").unwrap();
    std::fs::write(dir.join("session.json"), serde_json::to_vec(record).unwrap()).unwrap();
    dir
}

#[test]
fn a_reused_pid_is_never_signalled_and_unowned_records_are_left_alone() {
    let mut home = CrashHome::new();
    std::fs::create_dir_all(home.path().join("spool")).unwrap();
    let bystander =
        Bystander(Command::new("sleep").arg("1000").stdin(Stdio::null()).spawn().unwrap());
    let pid = bystander.0.id();
    let real_start = start_time(pid).unwrap();
    let me = std::process::id();
    let instance = "daemon-4000000-1";
    // Owner: this test's pid with a start time that is not ours (the pid was "reused").
    // Root: the bystander's pid with a start time that is not its own.
    let record = |id: &str, owner: Value| {
        json!({
            "version": 1, "id": id, "instance": instance, "command": "sleep 1000",
            "state": "running", "owner": owner, "pid": pid, "root_start_time": real_start + 1,
            "pgid": pid, "containment": "process-group", "capture": "pipe",
            "started_at_ms": 1, "source": "trap"
        })
    };
    plant(&home.path(), instance, "sh-900", &record("sh-900", json!({"pid": me, "start_time": 1})));
    let unowned = plant(&home.path(), instance, "sh-901", &record("sh-901", Value::Null));
    let corrupt = home.path().join("spool").join(instance).join("sh-902");
    std::fs::create_dir_all(&corrupt).unwrap();
    std::fs::write(corrupt.join("session.json"), b"{\"id\": \"sh-902\", \"sta").unwrap();

    let daemon = home.start(&[]);
    let mut rpc = daemon.client();
    let list = rpc.ok("list", json!({}));
    // The bystander was not signalled, though the record named its pid and group.
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        Command::new("kill").args(["-0", &pid.to_string()]).status().unwrap().success(),
        "the bystander is alive"
    );
    let s = session(&list, "sh-900");
    assert_eq!(s["state"], "failed", "{s}");
    let reason = s["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("owner daemon died; 0 processes terminated at recovery"),
        "{reason}"
    );
    assert!(reason.contains(&format!("root pid {pid} now belongs to another process")), "{reason}");
    assert!(reason.contains("not signalled"), "{reason}");

    // The unowned record is not guessed at: untouched on disk, not listed, reported.
    let r: Value =
        serde_json::from_slice(&std::fs::read(unowned.join("session.json")).unwrap()).unwrap();
    assert_eq!(r["state"], "running");
    assert!(list["sessions"].as_array().unwrap().iter().all(|s| s["id"] != "sh-901"));
    assert!(list["sessions"].as_array().unwrap().iter().all(|s| s["id"] != "sh-902"));
    let stderr = daemon.stderr.lock().unwrap().clone();
    assert!(stderr.contains("sh-901") && stderr.contains("names no owner daemon"), "{stderr}");
    assert!(stderr.contains("corrupt"), "{stderr}");
    drop(bystander);
}

#[test]
fn fifty_concurrent_runs_with_one_source_start_one_session() {
    let mut home = CrashHome::new();
    let daemon = home.start(&[]);
    let socket = daemon.socket.clone();
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(50));
    let answers: Vec<Value> = (0..50)
        .map(|_| {
            let socket = socket.clone();
            let barrier = std::sync::Arc::clone(&barrier);
            std::thread::spawn(move || {
                let mut rpc = Rpc::connect(&socket);
                barrier.wait();
                rpc.ok(
                    "run",
                    json!({"command": "sleep 30", "background": true, "source": "cron:*/5"}),
                )
            })
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|t| t.join().unwrap())
        .collect();
    let mut ids: Vec<&str> = answers.iter().map(|a| a["id"].as_str().unwrap()).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 1, "one session for one source: {ids:?}");
    let fresh = answers.iter().filter(|a| a["deduplicated"] == false).count();
    assert_eq!(fresh, 1, "exactly one run started it");
    let mut rpc = daemon.client();
    let list = rpc.ok("list", json!({}));
    assert_eq!(list["sessions"].as_array().unwrap().len(), 1, "{list}");
    let killed = rpc.ok("kill", json!({"id": ids[0]}));
    assert_eq!(killed["report"]["terminated"], true, "{killed}");
}

/// The live `sleep`s carrying `tag`.
fn sleeps(tag: &str) -> usize {
    carrying(tag)
        .into_iter()
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| c.split(|b| *b == 0).next() == Some(b"sleep"))
        })
        .count()
}

/// Without a cgroup, a double fork that scrubbed its environment and left the session at once
/// is an orphan on its session's keeper (the default there), not on the daemon: after the daemon
/// is SIGKILLed, the next one's recovery finds it below the adopted keeper and ends it, and says
/// so only then.
#[test]
fn recovery_without_a_cgroup_ends_an_escapee_that_scrubbed_its_environment() {
    let tag = format!("1000.{:05}7", std::process::id() % 100_000);
    let _cleanup = KillCarrying(tag.clone());
    let mut home = CrashHome::new();
    let mut first = home.start(&["--no-cgroup"]);
    let mut rpc = first.client();
    assert_eq!(rpc.ok("status", json!({}))["session_keeper"], true);
    let command = format!(
        "(setsid env -i /bin/sh -c 'sleep 1{tag} & exec sleep 2{tag}' </dev/null >/dev/null 2>&1 &); exec sleep 3{tag}"
    );
    let id = rpc.ok("run", json!({"command": command, "background": true}))["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    eventually(Duration::from_secs(30), "the three sleeps", || (sleeps(&tag) == 3).then_some(()));
    drop(rpc);
    sigkill_daemon(&mut first);
    assert_eq!(sleeps(&tag), 3, "they outlive the daemon until recovery");

    let second = home.start(&["--no-cgroup"]);
    let mut rpc = second.client();
    let list = rpc.ok("list", json!({}));
    let s = session(&list, &id);
    assert_eq!(s["state"], "failed", "{s}");
    let reason = s["reason"].as_str().unwrap_or_default();
    assert!(reason.contains(" processes terminated at recovery"), "{reason}");
    // Bounded: recovery answers only once they are gone; allow the kernel 5 s to reap.
    eventually(Duration::from_secs(5), "nothing of the session left", || {
        carrying(&tag).is_empty().then_some(())
    });
}
