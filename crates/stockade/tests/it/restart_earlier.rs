//! `restart` of a session an earlier daemon ran, through the real binary: after `stockade daemon
//! stop` / `daemon start`, and after the daemon was SIGKILLed mid-run (the session shows
//! `failed` when the next daemon recovers it), the new session has the same command, directory,
//! environment and options; a session without the kept options (as an older Stockade left it)
//! is refused in one sentence.

use std::path::{Path, PathBuf};

use stockade_testkit::{Home, eventually, text};

/// `<home>/…/<id>/spec.json`, the options kept beside the session's record.
fn spec_file(dir: &Path, id: &str) -> Option<PathBuf> {
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let path = entry.path();
        if !path.is_dir() {
            continue;
        }
        if path.file_name().is_some_and(|n| n == id) && path.join("spec.json").is_file() {
            return Some(path.join("spec.json"));
        }
        if let Some(found) = spec_file(&path, id) {
            return Some(found);
        }
    }
    None
}

/// Start `command` in the background with an environment variable, a directory and a timeout
/// (it may have ended by the answer).
fn start(home: &Home, cwd: &Path, command: &str) -> String {
    let first = home.json_bg(&[
        "--env",
        "GREETING=hello there",
        "--cwd",
        cwd.to_str().unwrap(),
        "--timeout-ms",
        "300000",
        command,
    ]);
    first["id"].as_str().unwrap().to_owned()
}

#[test]
fn a_session_of_a_stopped_daemon_restarts_with_its_options() {
    let home = Home::new();
    let dir = tempfile::tempdir().unwrap();
    let cwd = dir.path().canonicalize().unwrap();
    let old = start(&home, &cwd, "echo \"$GREETING\"; pwd; exit 3");
    assert_eq!(home.run(&["wait", "-q", &old]).status.code(), Some(3));
    let first_pid = home.daemon_pid().expect("a daemon");

    home.ok(&["daemon", "stop"]);
    home.ok(&["daemon", "start"]);
    assert_ne!(home.daemon_pid(), Some(first_pid), "another daemon");

    // It may have exited (code 3) by the answer; the CLI then exits 3 too.
    let again = home.json_started(&["restart", "--json", &old]);
    let new = again["id"].as_str().unwrap().to_owned();
    assert_ne!(new, old, "a new id");
    assert_eq!(home.run(&["wait", "-q", &new]).status.code(), Some(3));
    let expected = format!("hello there\n{}\n", cwd.display());
    assert_eq!(home.ok(&["logs", &new]), expected);
    assert_eq!(home.ok(&["logs", &old]), expected, "the old session keeps its output");
}

#[test]
fn a_session_lost_in_a_daemon_crash_restarts_and_one_without_options_is_refused() {
    let home = Home::new();
    let dir = tempfile::tempdir().unwrap();
    let cwd = dir.path().canonicalize().unwrap();
    let lost = start(&home, &cwd, "echo \"$GREETING\"; pwd; sleep 120");
    let older = start(&home, &cwd, "echo older");
    assert_eq!(home.run(&["wait", "-q", &older]).status.code(), Some(0));
    eventually(std::time::Duration::from_secs(30), "the session's first line", || {
        home.ok(&["logs", &lost]).contains("hello there").then_some(())
    });
    // As an older Stockade left it: no options beside the record.
    let older_spec = spec_file(home.path(), &older).expect("the options are kept");
    std::fs::remove_file(older_spec).unwrap();

    let pid = home.daemon_pid().expect("a daemon");
    // SAFETY: kill(2) on the daemon of this test's own home, by its pid.
    unsafe {
        libc::kill(pid as libc::pid_t, libc::SIGKILL);
    }
    // A zombie counts as dead (nothing here reaps it).
    eventually(std::time::Duration::from_secs(30), "the daemon to die", || {
        (!stockade_testkit::procs::pid_alive(pid)).then_some(())
    });
    home.ok(&["daemon", "start"]);
    let recovered = home.session(&lost);
    assert_eq!(recovered["state"], "failed", "{recovered}");

    let again = home.json_first(&["restart", "--json", &lost]);
    let new = again["id"].as_str().unwrap().to_owned();
    assert_eq!(again["state"], "running", "{again}");
    let expected = format!("hello there\n{}\n", cwd.display());
    eventually(std::time::Duration::from_secs(30), "the restarted session's output", || {
        (home.ok(&["logs", &new]) == expected).then_some(())
    });
    assert_eq!(home.session(&new)["command"], home.session(&lost)["command"]);
    home.ok(&["kill", &new]);

    let refused = home.run(&["restart", &older]);
    assert_eq!(refused.status.code(), Some(2));
    let said = text(&refused.stderr);
    assert_eq!(said.trim().lines().count(), 1, "one sentence: {said}");
    assert!(
        said.contains(&format!(
            "{older} was started by an older Stockade that kept no copy of its environment and options; start it again with run"
        )),
        "{said}"
    );
}
