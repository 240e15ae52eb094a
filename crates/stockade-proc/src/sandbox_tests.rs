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
