//! Invariant "the answer never lies": survivors are reported when a process truly remains; spawn
//! failures are typed and leave nothing behind; terminating twice is harmless; `describe` says
//! what was chosen and why.

use std::time::Duration;

use crate::process_common::{Guard, Mode, marked_pids, stat, unique_marker, wait_shape};
use stockade_proc::{
    CgroupMode, Containment, ContainmentConfig, SessionMarker, SpawnError, SpawnSpec,
    TerminateOptions, spawn,
};
use stockade_proto::ContainmentMethod;

async fn spared_survivor(mode: Mode) {
    let containment = mode.containment();
    let mut guard = Guard::new();
    let marker = unique_marker("spare", mode);
    let entry = marker.env_entry();
    let spawned =
        spawn(SpawnSpec::shell("sleep 1000 & sleep 1000 & wait", marker), &containment).unwrap();
    let tree = guard.track(spawned.tree);
    let root = tree.root_pid();
    let procs =
        wait_shape(&entry, "two sleeps", |p| p.iter().filter(|(pid, _)| *pid != root).count() >= 2);
    let spared = *procs.iter().find(|p| **p != root).unwrap();
    guard.track_pid(spared);

    let opts = TerminateOptions {
        grace: Duration::from_millis(200),
        verify_timeout: Duration::from_millis(300),
        spare: vec![spared],
        ..Default::default()
    };
    let report = tree.terminate(&opts).await;
    assert!(
        !report.terminated,
        "a live spared process must not be reported terminated: {report:?}"
    );
    assert_eq!(report.survivors, vec![spared], "{report:?}");
    assert!(!report.pids_signalled.contains(&spared), "{report:?}");
    assert!(report.pids_signalled.contains(&root), "{report:?}");
    assert_eq!(marked_pids(&entry), vec![spared]);
    assert!(stat(spared).is_some_and(|s| !s.is_zombie()));

    // Without the test hook, the same routine finishes the job: terminate is idempotent.
    let report = tree
        .terminate(&TerminateOptions { grace: Duration::from_millis(200), ..Default::default() })
        .await;
    assert!(report.terminated, "{report:?}");
    assert!(report.survivors.is_empty());
    assert!(marked_pids(&entry).is_empty());

    // A third call finds nothing to signal and says so.
    let report = tree.terminate(&TerminateOptions::default()).await;
    assert!(report.terminated);
    assert_eq!(report.signal_sent, None);
    assert!(report.pids_signalled.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spared_process_is_a_survivor_cgroup() {
    spared_survivor(Mode::Cgroup).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spared_process_is_a_survivor_fallback() {
    spared_survivor(Mode::Fallback).await
}

fn leftover_cgroup(c: &Containment, marker: &SessionMarker) -> bool {
    c.describe().cgroup_root.is_some_and(|root| root.join(&marker.id).exists())
}

#[test]
fn spawn_errors_are_typed_and_leave_nothing() {
    for mode in [Mode::Cgroup, Mode::Fallback] {
        let c = mode.containment();

        let marker = unique_marker("nocwd", mode);
        let mut spec = SpawnSpec::shell("true", marker.clone());
        spec.cwd = Some("/nonexistent/stockade/cwd".into());
        let err = spawn(spec, &c).unwrap_err();
        assert!(matches!(err, SpawnError::Cwd { .. }), "{err}");
        assert!(!leftover_cgroup(&c, &marker));

        let marker = unique_marker("noexec", mode);
        let mut spec = SpawnSpec::shell("true", marker.clone());
        spec.program = "/nonexistent/stockade-program".into();
        let err = spawn(spec, &c).unwrap_err();
        match &err {
            SpawnError::Exec { source, .. } => {
                assert_eq!(source.kind(), std::io::ErrorKind::NotFound)
            }
            other => panic!("expected Exec, got {other}"),
        }
        assert!(!leftover_cgroup(&c, &marker));
        assert!(marked_pids(&marker.env_entry()).is_empty());

        let err =
            spawn(SpawnSpec::shell("true", SessionMarker::new("a/b", "sh-1")), &c).unwrap_err();
        assert!(matches!(err, SpawnError::InvalidMarker(_)), "{err}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_status_env_and_cwd_reach_the_child() {
    for mode in [Mode::Cgroup, Mode::Fallback] {
        let c = mode.containment();
        let mut guard = Guard::new();
        let marker = unique_marker("status", mode);
        let dir = std::env::temp_dir();
        let mut spec = SpawnSpec::shell(
            r#"[ "$PWD" = "$WANT_DIR" ] && [ "$STOCKADE_SESSION" = "$WANT_MARK" ] && [ "$(ps -o sid= -p $$ | tr -d ' ')" = "$$" ] && exit 7; exit 1"#,
            marker.clone(),
        );
        spec.cwd = Some(dir.clone());
        spec.env = vec![
            ("WANT_DIR".into(), dir.clone().into_os_string()),
            ("WANT_MARK".into(), marker.value().into()),
            // The marker always wins over a caller-given variable of the same name.
            ("STOCKADE_SESSION".into(), "forged".into()),
        ];
        let tree = guard.track(spawn(spec, &c).unwrap().tree);
        let exit =
            tokio::time::timeout(Duration::from_secs(20), tree.wait_root()).await.unwrap().unwrap();
        assert_eq!(
            exit.code,
            Some(7),
            "cwd, env, marker or setsid did not reach the child ({mode:?})"
        );
        assert_eq!(exit.signal, None);
        assert_eq!(tree.root_exit(), Some(exit));
    }
}

#[test]
fn describe_says_what_and_why() {
    let off = Containment::detect(&ContainmentConfig {
        cgroup: CgroupMode::Off,
        subreaper: true,
        keeper: None,
        keeper_with_cgroup: false,
    });
    let info = off.describe();
    assert_eq!(info.method, ContainmentMethod::ProcessGroup);
    assert!(info.fallback_reason.as_deref().is_some_and(|r| r.contains("off")), "{info:?}");
    assert!(info.subreaper);

    let auto = Containment::detect(&ContainmentConfig::default());
    let info = auto.describe();
    match info.method {
        ContainmentMethod::Cgroup => {
            assert!(info.cgroup_root.is_some() && info.fallback_reason.is_none(), "{info:?}")
        }
        ContainmentMethod::ProcessGroup => assert!(info.fallback_reason.is_some(), "{info:?}"),
    }

    let bad = Containment::detect(&ContainmentConfig {
        cgroup: CgroupMode::Parent("/definitely/not/a/cgroup".into()),
        subreaper: true,
        keeper: None,
        keeper_with_cgroup: false,
    });
    let info = bad.describe();
    assert_eq!(info.method, ContainmentMethod::ProcessGroup);
    assert!(info.fallback_reason.is_some(), "{info:?}");
}
