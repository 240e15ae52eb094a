//! A session's start options on disk (`spec.json` in its directory, mode 0600, written once at
//! start): what `restart` needs to start a session of an earlier daemon again — command, shell,
//! cwd, base environment and env, timeout, capture, caps, PTY size, stdin mode and source. Kept apart from the
//! record, which is rewritten on every state change and read by every `list`, so the
//! environment (which may hold secrets) is written once and read only by `restart`.

use std::path::Path;

use stockade_proto::rpc::RunParams;

use stockade_log::{SessionDir, Spare};

use crate::RunSpec;

/// The wire form of `spec`: a `run` request that starts the same command the same way.
fn params(spec: &RunSpec) -> RunParams {
    RunParams {
        command: spec.command.clone(),
        shell: spec.shell.clone(),
        login: spec.login,
        cwd: spec.cwd.clone(),
        base_env: spec.base_env.as_ref().map(|b| b.iter().cloned().collect()),
        env: spec.env.iter().cloned().collect(),
        timeout_ms: spec.timeout.map(|t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX)),
        grace_ms: spec.grace.map(|t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX)),
        capture: spec.capture,
        retained_cap: spec.retained_cap,
        disk_cap: spec.disk_cap,
        disk_policy: spec.disk_policy,
        source: spec.source.clone(),
        pty: spec.pty,
        stdin: spec.stdin,
        sandbox: spec.sandbox.clone(),
        ..RunParams::default()
    }
}

/// Write `spec` into `dir` (created by the output log), once: a new file, mode 0600, never
/// through a symlink, not forced to disk (a machine crash that loses it also ended the session).
/// Written once, it needs no temporary file and rename: a write that fails removes it, and one
/// torn by a crash does not parse, which [`load`] answers like a session without options.
///
/// A directory made ahead of time holds an empty spare for it (`slots.rs`): the options are
/// written into that and it is renamed to `spec.json`, so no inode is allocated now.
pub(crate) fn store(dir: &Path, spec: &RunSpec) -> std::io::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let text = serde_json::to_vec(&params(spec)).map_err(std::io::Error::other)?;
    let path = SessionDir::new(dir).spec();
    let spare = SessionDir::new(dir).spare(Spare::Spec);
    if let Some(written) = stockade_log::write_through_spare(&spare, &path, &text) {
        return written;
    }
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&path)?;
    file.write_all(&text).inspect_err(|_| {
        let _ = std::fs::remove_file(&path);
    })
}

/// The spec stored in `dir`, if there is one that parses (older sessions have none).
pub(crate) fn load(dir: &Path) -> Option<RunSpec> {
    let text = std::fs::read(SessionDir::new(dir).spec()).ok()?;
    let params: RunParams = serde_json::from_slice(&text).ok()?;
    Some(RunSpec::from(params))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spec_comes_back_as_it_was_stored() {
        let dir = tempfile::tempdir().unwrap();
        let spec = RunSpec {
            command: "echo $A".into(),
            cwd: Some("/tmp".into()),
            base_env: Some(vec![("HOME".into(), "/home/x".into()), ("PATH".into(), "/bin".into())]),
            env: vec![("A".into(), "1".into()), ("B".into(), "two words".into())],
            timeout: Some(std::time::Duration::from_millis(1500)),
            disk_cap: Some(4096),
            source: Some("k".into()),
            ..RunSpec::default()
        };
        store(dir.path(), &spec).unwrap();
        let back = load(dir.path()).unwrap();
        assert_eq!(format!("{back:?}"), format!("{spec:?}"));
        use std::os::unix::fs::PermissionsExt as _;
        let mode =
            std::fs::metadata(SessionDir::new(dir.path()).spec()).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert!(load(&dir.path().join("none")).is_none());
    }
}
