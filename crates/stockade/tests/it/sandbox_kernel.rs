//! The sandbox fails closed where the kernel lacks what it needs (a kernel without Landlock,
//! simulated by the test build's hook: the daemon takes the kernel to have none), while
//! `sandbox off` still runs; and its limits are honoured (`nofile`).

use stockade_testkit::text;

use crate::sandbox_common::{Sbx, users};

/// The test build's hook: the process layer answers "no Landlock" (`stockade-proc`'s
/// `NO_LANDLOCK_ENV`).
const NO_LANDLOCK: &str = "STOCKADE_TEST_NO_LANDLOCK";

#[test]
fn without_landlock_a_sandboxed_run_is_refused_and_off_still_runs() {
    for user in users() {
        let s = Sbx::new(user);
        let marker = s.work.join("ran");
        let touch = format!("touch {}", marker.display());
        // The CLI auto-starts the daemon with this environment: the daemon is the one without.
        let out = s
            .cli(&["run", "--bg", "--yield-ms", "20000", "--sandbox", "workspace-write", &touch])
            .env(NO_LANDLOCK, "1")
            .output()
            .unwrap();
        let err = text(&out.stderr);
        assert!(!out.status.success(), "a sandboxed run started without Landlock: {err}");
        assert!(
            err.contains("the sandbox cannot be enforced on this host")
                && err.contains("no Landlock"),
            "the refusal names what is missing: {err}"
        );
        assert_eq!(err.trim().lines().count(), 1, "one sentence: {err}");
        assert!(!marker.exists(), "the refused command ran");
        // Nothing of the refused run is left (no session for it).
        let ps = s.cli(&["ps", "--json"]).env(NO_LANDLOCK, "1").output().unwrap();
        let listed: serde_json::Value = serde_json::from_slice(&ps.stdout).unwrap();
        assert_eq!(listed["sessions"].as_array().map(Vec::len), Some(0), "{listed}");

        let off = s
            .cli(&["run", "--bg", "--json", "--yield-ms", "20000", "--sandbox", "off", &touch])
            .env(NO_LANDLOCK, "1")
            .output()
            .unwrap();
        assert!(off.status.success(), "{}", text(&off.stderr));
        assert!(marker.exists(), "sandbox off runs where Landlock is missing");
    }
}

#[test]
fn nofile_is_honoured_and_cannot_be_raised() {
    for user in users() {
        let s = Sbx::new(user);
        let answer = s.run(
            &["--sandbox", "workspace-write", "--nofile", "64"],
            "ulimit -n; (ulimit -n 4096) 2>/dev/null && echo raised || echo not-raised",
        );
        let out = answer["output"].as_str().unwrap();
        assert_eq!(out.lines().collect::<Vec<_>>(), ["64", "not-raised"], "as {user:?}: {answer}");
        assert!(answer["sandbox"].as_str().unwrap().contains("nofile 64"), "{answer}");
    }
}
