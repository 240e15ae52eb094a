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
        // A restart runs under the same sandbox.
        let id = answer["id"].as_str().unwrap();
        let again = s.output(&["restart", id, "--json"]);
        let again: serde_json::Value = serde_json::from_slice(&again.stdout).unwrap();
        let policy = again["sandbox"].as_str().unwrap_or_default();
        assert!(policy.starts_with("sandbox workspace-write") && policy.contains("nofile 64"));
    }
}

#[test]
fn memory_and_pids_limits_hold_and_end_honestly() {
    let Some(py) = crate::sandbox_common::python() else { return };
    for user in users() {
        let s = Sbx::new(user);
        // 4 GiB in 64 MiB pieces, each written (so it is really used).
        let hog = "l = []\nfor i in range(64): l.append(b'a' * (64 << 20))\nprint('survived')";
        let mem = ["--sandbox", "workspace-write", "--memory", "256MiB"];
        let mut args = vec!["run", "--bg", "--json", "--yield-ms", "120000"];
        args.extend(mem);
        args.extend(["--", py, "-c", hog]);
        let out = s.output(&args);
        if user == crate::sandbox_common::User::Nobody {
            // v1 cgroups are root's here: the limit cannot be enforced, so the run is refused.
            let err = text(&out.stderr);
            assert!(
                err.contains("need a cgroup controller this user may write"),
                "as nobody: {err}{}",
                text(&out.stdout)
            );
            continue;
        }
        let answer: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(answer["state"], "killed", "{answer}");
        assert_eq!(answer["reason"], "memory limit 256 MiB", "{answer}");
        assert!(!answer["output"].as_str().unwrap().contains("survived"));

        // A fork loop under pids 64: contained, counted, and ended by `kill` with none left.
        // bash, which retries a refused fork and goes on (sh would give up and exit).
        let bomb = "exec bash -c 'while :; do sleep 300 & done' 2>/dev/null";
        let started = s.run_started(&["--sandbox", "workspace-write", "--pids", "64"], bomb);
        let id = started["id"].as_str().unwrap().to_owned();
        let info = stockade_testkit::eventually(
            std::time::Duration::from_secs(20),
            "the pids limit to be hit",
            || {
                let ps = s.output(&["ps", "--json"]);
                let list: serde_json::Value = serde_json::from_slice(&ps.stdout).ok()?;
                let me = list["sessions"].as_array()?.iter().find(|x| x["id"] == id)?.clone();
                (me["pids_limit_hits"].as_u64()? > 0).then_some(me)
            },
        );
        let processes = info["processes"].as_u64().unwrap();
        assert!((1..=64).contains(&processes), "{processes} processes under pids 64: {info}");
        let killed = s.output(&["kill", &id, "--json"]);
        let killed: serde_json::Value = serde_json::from_slice(&killed.stdout).unwrap();
        assert_eq!(killed["report"]["terminated"], true, "{killed}");
        assert_eq!(killed["report"]["survivors"].as_array().map(Vec::len), Some(0), "{killed}");
    }
}

#[test]
fn where_clone3_is_refused_the_fork_path_confines_the_same() {
    // The test build's hook (`stockade-proc`'s `FORCE_FORK_ENV`): every spawn forks.
    const FORK: &str = "STOCKADE_TEST_SPAWN_FORK";
    for user in users() {
        let s = Sbx::new(user);
        let (w, o) = (s.work.display().to_string(), s.outside.display().to_string());
        let script = format!(
            "{}\nt outside touch {o}/x\nt inside touch {w}/x\nt kill_daemon kill -9 {}\nt nofile sh -c '[ $(ulimit -n) = 32 ]'\nt unshare unshare -r true",
            crate::sandbox_common::TRY,
            std::process::id()
        );
        let out = s
            .cli(&["run", "--bg", "--json", "--yield-ms", "60000", "--sandbox", "workspace-write"])
            .args(["--nofile", "32", "--", "sh", "-c", &script])
            .env(FORK, "1")
            .output()
            .unwrap();
        let answer: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let said = answer["output"].as_str().unwrap();
        for (name, verdict) in [
            ("outside", "denied"),
            ("inside", "allowed"),
            ("kill_daemon", "denied"),
            ("nofile", "allowed"),
            ("unshare", "denied"),
        ] {
            assert!(said.contains(&format!("{name}={verdict}")), "as {user:?}: {said}");
        }
        assert!(!s.outside.join("x").exists());
    }
}

#[test]
fn a_cpu_limit_holds_the_session_to_its_share() {
    let Some(py) = crate::sandbox_common::python() else { return };
    for user in users() {
        let s = Sbx::new(user);
        // Two busy processes for 2 s of wall time under 20% of one CPU: at most 0.4 s of CPU
        // between them, give or take a period; unconfined they would use up to 4 s.
        let burn = "import time\nt = time.time()\nwhile time.time() - t < 2: pass";
        let script = format!(
            "{py} -c '{burn}' & {py} -c '{burn}'; wait; cat /proc/self/stat >/dev/null; times"
        );
        let mut args = vec!["run", "--bg", "--json", "--yield-ms", "60000"];
        args.extend(["--sandbox", "workspace-write", "--cpu", "20", "--", "bash", "-c", &script]);
        let out = s.output(&args);
        if user == crate::sandbox_common::User::Nobody {
            let err = text(&out.stderr);
            assert!(err.contains("need a cgroup controller this user may write"), "{err}");
            continue;
        }
        let answer: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        // `times`, second line: the children's user and system time, e.g. `0m0.351s 0m0.012s`.
        let said = answer["output"].as_str().unwrap();
        let children = said.lines().nth(1).unwrap_or_default();
        let secs: f64 = children
            .split_whitespace()
            .map(|t| {
                let (m, s) = t.trim_end_matches('s').split_once('m').unwrap();
                m.parse::<f64>().unwrap() * 60.0 + s.parse::<f64>().unwrap()
            })
            .sum();
        assert!(secs < 1.0, "{secs} s of CPU under a 20% limit over 2 s: {said}");
        assert!(answer["sandbox"].as_str().unwrap().contains("cpu 20%"), "{answer}");
    }
}
