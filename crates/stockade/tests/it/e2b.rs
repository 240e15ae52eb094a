//! E2B's unmodified SDKs against `stockade daemon run --e2b`: the SDKs' debug mode talks to
//! envd's port on localhost (49983), so each run is in a private network and PID namespace
//! (`unshare --net --pid --kill-child`): parallel tests never share the port, and every process
//! a run starts — daemon, commands, escaped `setsid` children — dies with the namespace, even
//! when the test fails. The drivers (`tests/e2b/sdk.py`, `tests/e2b/sdk.mjs`) start the daemon from their own
//! directory and environment, run the scenarios, print `ok NAME facts` for each that held and
//! stop the daemon. The SDKs are installed, pinned, by `tests/e2b/install-deps.sh`.

use std::io::Read as _;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::remote_support::repo_root;

/// Longest one driver may take (its slowest scenario pushes 100 MiB through the SDK: seconds
/// on an idle machine).
const DRIVER_DEADLINE: Duration = Duration::from_secs(600);

/// Every scenario of a driver, in the order it runs them.
const SCENARIOS: [&str; 8] =
    ["echo", "big_output", "reconnect", "stdin", "pty", "kill", "list", "files"];

fn need(path: PathBuf, what: &str) -> PathBuf {
    assert!(
        path.exists(),
        "{what} is missing at {}: run tests/e2b/install-deps.sh (scripts/test does)",
        path.display()
    );
    path
}

/// Runs `program driver ARGS` in a fresh network and PID namespace with loopback up; its
/// stdout, after checking it ended well within the deadline.
fn in_namespace(program: &[PathBuf]) -> String {
    assert!(
        rustix::process::geteuid().is_root(),
        "the e2b tests need root: the SDKs' debug port is served in a private network namespace"
    );
    let mut script = String::from("ip link set lo up && exec");
    for word in program {
        script.push_str(&format!(" '{}'", word.display()));
    }
    let mut child = Command::new("unshare")
        .args(["--net", "--pid", "--fork", "--kill-child", "--mount-proc", "sh", "-c", &script])
        .current_dir(std::env::temp_dir())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("unshare (util-linux) runs the driver in its own namespaces");
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let out = std::thread::spawn(move || {
        let mut s = String::new();
        stdout.read_to_string(&mut s).map(|_| s)
    });
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        stderr.read_to_string(&mut s).map(|_| s)
    });
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if started.elapsed() > DRIVER_DEADLINE {
            // Ends the namespace's init: the kernel ends everything inside.
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let (out, err) = (out.join().unwrap().unwrap(), err.join().unwrap().unwrap());
    let elapsed = started.elapsed();
    assert!(status.is_some(), "the driver ran past {DRIVER_DEADLINE:?}:\n{out}\n{err}");
    assert!(
        status.is_some_and(|s| s.success()),
        "the driver failed after {elapsed:?}:\nstdout:\n{out}\nstderr:\n{err}"
    );
    eprintln!("{out}driver took {elapsed:?}");
    out
}

fn assert_all_passed(out: &str) {
    for name in SCENARIOS {
        assert!(
            out.lines().any(|l| l == format!("ok {name}") || l.starts_with(&format!("ok {name} "))),
            "scenario {name} did not report ok:\n{out}"
        );
    }
    assert!(out.contains("ok big_output bytes=104857600 "), "{out}");
    assert!(out.contains("ok kill left=0"), "{out}");
}

#[test]
fn the_python_sdk_drives_the_e2b_door() {
    let root = repo_root();
    let python = need(root.join("target/e2b-venv/bin/python"), "the E2B Python SDK's venv");
    let driver = root.join("tests/e2b/sdk.py");
    let out = in_namespace(&[python, driver, stockade_testkit::stockade_bin()]);
    assert_all_passed(&out);
}

#[test]
fn the_js_sdk_drives_the_e2b_door() {
    let root = repo_root();
    need(root.join("target/e2b-js/node_modules/e2b"), "the E2B JS SDK");
    let node = std::env::var_os("PATH")
        .and_then(|p| std::env::split_paths(&p).map(|d| d.join("node")).find(|n| n.is_file()))
        .expect("node is on PATH (tests/e2b/install-deps.sh needs it too)");
    let driver = root.join("tests/e2b/sdk.mjs");
    let out = in_namespace(&[node, driver, stockade_testkit::stockade_bin()]);
    assert_all_passed(&out);
}
