//! Sessions seen from outside: a foreground run leaves nothing behind, timeouts and the disk cap
//! end the whole tree, terminal states never change, every path finalises.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use stockade_engine::{Engine, EngineConfig, RunSpec, Session, StateDir};
use stockade_log::ReadRequest;
use stockade_proc::{CgroupMode, ContainmentConfig};
use stockade_proto::{Capture, DiskPolicy, OutputLimits, ReadMode, SessionState};
use stockade_testkit::procs;

/// An engine in a temporary state dir, with a short grace so tests stay quick.
struct Fixture {
    engine: Engine,
    _tmp: tempfile::TempDir,
}

impl Fixture {
    fn new(cgroup: bool) -> Fixture {
        let tmp = tempfile::tempdir().unwrap();
        let state = StateDir::open(tmp.path().join("home")).unwrap();
        // Markers are `<instance>:<id>` and ids restart in each state dir: the instance must be
        // unique per fixture, or parallel tests would see each other's sessions as their own.
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let mut config = EngineConfig::new(state, format!("t{}-{n}", std::process::id()));
        config.grace = Duration::from_millis(300);
        if !cgroup {
            config.containment =
                ContainmentConfig { cgroup: CgroupMode::Off, ..ContainmentConfig::default() };
        }
        Fixture { engine: Engine::new(config).unwrap(), _tmp: tmp }
    }

    fn run(&self, command: &str) -> Arc<Session> {
        self.engine.run(RunSpec { command: command.into(), ..RunSpec::default() }).unwrap()
    }
}

impl Drop for Fixture {
    /// Whatever a failing test left running is terminated through the engine (never by name).
    fn drop(&mut self) {
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                tokio::task::block_in_place(|| handle.block_on(self.engine.shutdown()));
            }
            Err(_) => {
                if let Ok(rt) = tokio::runtime::Runtime::new() {
                    rt.block_on(self.engine.shutdown());
                }
            }
        }
    }
}

/// Live (non-zombie) processes whose environment carries this session's marker, read from /proc.
fn marked_processes(session: &Session, instance: &str) -> Vec<u32> {
    procs::marked_processes(&format!("STOCKADE_SESSION={instance}:{}", session.id()))
}

fn instance(f: &Fixture) -> String {
    f.engine.config().instance.clone()
}

fn tail(session: &Session) -> String {
    let req = ReadRequest {
        mode: ReadMode::Tail,
        after: 0,
        limits: OutputLimits::default(),
        stream: None,
    };
    session.log().read(&req).unwrap().output
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreground_run_leaves_nothing_behind() {
    for cgroup in [true, false] {
        let f = Fixture::new(cgroup);
        // A `&` child and a grandchild that keeps the stdout pipe open after the shell exits.
        let s = f.run("sleep 1000 & (sleep 1000; echo never) & echo started; exit 7");
        let state = tokio::time::timeout(Duration::from_secs(30), s.wait(None)).await.unwrap();
        assert_eq!(state, SessionState::Exited { code: 7 }, "cgroup={cgroup}");
        let cleanup = s.end().unwrap().cleanup.expect("leftovers were terminated and reported");
        assert!(cleanup.terminated, "{cleanup:?}");
        assert!(cleanup.pids_signalled.len() >= 2, "{cleanup:?}");
        assert!(marked_processes(&s, &instance(&f)).is_empty(), "cgroup={cgroup}");
        assert_eq!(tail(&s), "started\n");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeout_terminates_the_whole_tree() {
    for cgroup in [true, false] {
        let f = Fixture::new(cgroup);
        let spec = RunSpec {
            command: "timeout 180s sh -c 'yes | head -c 1G | sleep 1000'".into(),
            timeout: Some(Duration::from_millis(300)),
            ..RunSpec::default()
        };
        let s = f.engine.run(spec).unwrap();
        let state = tokio::time::timeout(Duration::from_secs(30), s.wait(None)).await.unwrap();
        assert_eq!(state, SessionState::TimedOut);
        let report = s.end().unwrap().cleanup.unwrap();
        assert!(report.terminated && report.survivors.is_empty(), "{report:?}");
        assert!(marked_processes(&s, &instance(&f)).is_empty(), "cgroup={cgroup}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disk_cap_kill_policy_ends_the_session() {
    let f = Fixture::new(true);
    let spec = RunSpec {
        // Endless output: only the cap can end it (a finite burst may exit before the cap is
        // acted on, which is reported as an exit with a gap instead).
        command: "yes".into(),
        timeout: Some(Duration::from_secs(60)),
        disk_cap: Some(1 << 20),
        disk_policy: Some(DiskPolicy::Kill),
        ..RunSpec::default()
    };
    let s = f.engine.run(spec).unwrap();
    let state = tokio::time::timeout(Duration::from_secs(30), s.wait(None)).await.unwrap();
    match state {
        SessionState::Killed { reason } => assert!(reason.contains("disk cap"), "{reason}"),
        other => panic!("expected killed by the disk cap, got {other:?}"),
    }
    let stats = s.log().stats();
    assert_eq!(stats.spooled_bytes, 1 << 20);
    assert!(stats.dropped_bytes > 0);
    assert!(marked_processes(&s, &instance(&f)).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_head_tail_runs_to_the_end_and_reports_the_gap() {
    let f = Fixture::new(true);
    let spec = RunSpec {
        command: "seq 1 200000".into(),
        disk_cap: Some(64 * 1024),
        disk_policy: Some(DiskPolicy::KeepHeadTail),
        retained_cap: Some(16 * 1024),
        ..RunSpec::default()
    };
    let s = f.engine.run(spec).unwrap();
    let state = tokio::time::timeout(Duration::from_secs(30), s.wait(None)).await.unwrap();
    assert_eq!(state, SessionState::Exited { code: 0 });
    let stats = s.log().stats();
    let printed: u64 = (1..=200000u64).map(|n| n.to_string().len() as u64 + 1).sum();
    assert_eq!(stats.total_bytes, printed);
    assert_eq!(stats.gaps.len(), 1);
    let gap = &stats.gaps[0];
    assert_eq!(gap.start, 64 * 1024);
    assert_eq!(gap.end - gap.start, stats.dropped_bytes);
    assert!(tail(&s).contains("199999\n200000\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_capture_keeps_every_byte() {
    let f = Fixture::new(true);
    let spec = RunSpec {
        command: "seq 1 100000; echo oops >&2".into(),
        capture: Capture::File,
        ..RunSpec::default()
    };
    let s = f.engine.run(spec).unwrap();
    let state = tokio::time::timeout(Duration::from_secs(30), s.wait(None)).await.unwrap();
    assert_eq!(state, SessionState::Exited { code: 0 });
    let spool = std::fs::read(s.log().spool_path()).unwrap();
    let printed: u64 = (1..=100000u64).map(|n| n.to_string().len() as u64 + 1).sum::<u64>() + 5;
    assert_eq!(spool.len() as u64, printed);
    assert_eq!(s.log().stats().total_bytes, printed);
    assert!(tail(&s).contains("100000\noops\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminal_states_are_terminal() {
    let f = Fixture::new(true);
    let s = f.run("exit 0");
    assert_eq!(s.wait(None).await, SessionState::Exited { code: 0 });
    // Killing a finished session verifies the tree is gone and changes nothing.
    let report = s.kill(f.engine.terminate_options(), "late kill").await;
    assert!(report.terminated && report.pids_signalled.is_empty(), "{report:?}");
    assert_eq!(s.state(), SessionState::Exited { code: 0 });
    let record = stockade_engine::read_record(s.dir()).unwrap();
    assert_eq!(record.state, SessionState::Exited { code: 0 });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_reports_and_finalises_once() {
    let f = Fixture::new(false);
    let s = f.run("trap '' TERM; echo ready; while :; do sleep 0.05; done");
    assert!(s.log().wait_for_output(0, Duration::from_secs(10)).await);
    let (a, b) = tokio::join!(
        s.kill(f.engine.terminate_options(), "first"),
        s.kill(f.engine.terminate_options(), "second")
    );
    assert!(a.terminated && b.terminated, "{a:?} {b:?}");
    // SIGTERM is ignored, so the routine had to escalate; exactly one reason won.
    assert!(a.escalated || b.escalated);
    match s.state() {
        SessionState::Killed { reason } => assert!(reason == "first" || reason == "second"),
        other => panic!("{other:?}"),
    }
    assert!(marked_processes(&s, &instance(&f)).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_are_clear_errors() {
    let f = Fixture::new(true);
    let empty = f.engine.run(RunSpec { command: "  ".into(), ..RunSpec::default() });
    assert!(empty.unwrap_err().to_string().contains("empty"));
    let bad_cwd = f.engine.run(RunSpec {
        command: "true".into(),
        cwd: Some("/nonexistent/dir".into()),
        ..RunSpec::default()
    });
    assert!(bad_cwd.unwrap_err().to_string().contains("/nonexistent/dir"));
    let no_shell = f.engine.run(RunSpec {
        command: "true".into(),
        shell: Some("/no/such/shell".into()),
        ..RunSpec::default()
    });
    assert!(no_shell.is_err());
}
