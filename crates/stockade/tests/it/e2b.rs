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
const SCENARIOS: [&str; 16] = [
    "echo",
    "big_output",
    "reconnect",
    "stdin",
    "pty",
    "kill",
    "list",
    "files",
    "watch",
    "user",
    "timeout",
    "signed",
    "env",
    "refusals",
    "gzip",
    "watch_mkdir",
];

fn need(path: PathBuf, what: &str) -> PathBuf {
    assert!(
        path.exists(),
        "{what} is missing at {}: run tests/e2b/install-deps.sh (scripts/test does)",
        path.display()
    );
    path
}

/// Runs `program driver ARGS` in a fresh network and PID namespace with loopback up — with
/// `tls`, also a mount namespace in which `tests/e2b/tls-ns.sh` puts the daemon in a network
/// namespace of its own, serving TLS, and the driver reaches it from this one; its stdout, after
/// checking it ended well within the deadline.
fn in_namespace(program: &[PathBuf], tls: bool) -> String {
    assert!(
        rustix::process::geteuid().is_root(),
        "the e2b tests need root: the SDKs' debug port is served in a private network namespace"
    );
    let mut script = if tls {
        format!("exec bash '{}'", repo_root().join("tests/e2b/tls-ns.sh").display())
    } else {
        String::from("ip link set lo up && exec")
    };
    for word in program {
        script.push_str(&format!(" '{}'", word.display()));
    }
    let mount: &[&str] = if tls { &["--mount"] } else { &[] };
    let mut child = Command::new("unshare")
        .args(["--net", "--pid"])
        .args(mount)
        .args(["--fork", "--kill-child", "--mount-proc", "sh", "-c", &script])
        .env("E2B_CERTIFI", certifi())
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

/// The venv's certifi bundle (the Python SDK's file transfers trust it), which the TLS set-up
/// replaces with the test CA inside its mount namespace.
fn certifi() -> PathBuf {
    let lib = repo_root().join("target/e2b-venv/lib");
    std::fs::read_dir(&lib)
        .into_iter()
        .flatten()
        .flatten()
        .map(|d| d.path().join("site-packages/certifi/cacert.pem"))
        .find(|p| p.is_file())
        .unwrap_or_default()
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
    assert!(out.contains("ok timeout ") && out.contains(" left=0"), "{out}");
}

fn python_driver() -> [PathBuf; 3] {
    let root = repo_root();
    let python = need(root.join("target/e2b-venv/bin/python"), "the E2B Python SDK's venv");
    [python, root.join("tests/e2b/sdk.py"), stockade_testkit::stockade_bin()]
}

fn js_driver() -> [PathBuf; 3] {
    let root = repo_root();
    need(root.join("target/e2b-js/node_modules/e2b"), "the E2B JS SDK");
    let node = std::env::var_os("PATH")
        .and_then(|p| std::env::split_paths(&p).map(|d| d.join("node")).find(|n| n.is_file()))
        .expect("node is on PATH (tests/e2b/install-deps.sh needs it too)");
    [node, root.join("tests/e2b/sdk.mjs"), stockade_testkit::stockade_bin()]
}

/// The Python driver's own scenario besides the common ones: a 200 MiB multipart upload with
/// the daemon's RSS within 16 MiB.
fn assert_python_passed(out: &str) {
    assert_all_passed(out);
    assert!(out.contains("ok upload_memory bytes=209715200 "), "{out}");
}

#[test]
fn the_python_sdk_drives_the_e2b_door() {
    assert_python_passed(&in_namespace(&python_driver(), false));
}

#[test]
fn the_python_sdk_drives_the_e2b_door_over_tls_from_another_network_namespace() {
    assert_python_passed(&in_namespace(&python_driver(), true));
}

#[test]
fn the_js_sdk_drives_the_e2b_door_over_tls_from_another_network_namespace() {
    assert_all_passed(&in_namespace(&js_driver(), true));
}

#[test]
fn the_js_sdk_drives_the_e2b_door() {
    assert_all_passed(&in_namespace(&js_driver(), false));
}

/// 32 commands × 20 MiB streamed at once to 32 Python SDK clients: the daemon's peak RSS stays
/// within 2× that of the same load through the JSON-RPC door (32 CLI clients reading every byte
/// by cursor), each measured on a fresh daemon (`VmHWM`).
#[test]
fn thirty_two_sdk_streams_peak_within_twice_the_json_rpc_doors_memory() {
    let [python, driver, bin] = python_driver();
    let out = in_namespace(&[python, driver, bin, PathBuf::from("memory")], false);
    let line = out.lines().find(|l| l.starts_with("ok memory ")).expect("the memory line");
    eprintln!("{line}");
}

/// docs/e2b.md's table of SDK scenarios names exactly the drivers' scenarios.
#[test]
fn the_docs_table_of_scenarios_is_the_drivers_list() {
    let doc = std::fs::read_to_string(repo_root().join("docs/e2b.md")).unwrap();
    let table = doc.split("| Scenario | What holds |").nth(1).expect("the scenario table");
    let rows: Vec<&str> = table
        .lines()
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .filter_map(|l| l.split('`').nth(1))
        .collect();
    let mut want: Vec<&str> = SCENARIOS.to_vec();
    want.push("upload_memory");
    assert_eq!(rows, want, "docs/e2b.md's scenario table and the drivers' scenarios differ");
}

/// The daemon refusing to start with `extra`: its one-sentence stderr, after checking the exit
/// status (2) and that it left no socket behind.
fn refused(extra: &[&str]) -> String {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let (stderr, status) = match stockade_testkit::DaemonProc::start_at(&home, extra) {
        Ok(_) => panic!("the daemon started with {extra:?}"),
        Err(e) => e,
    };
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "one sentence: {stderr}");
    assert!(!home.join("stockade.sock").exists(), "no socket left behind");
    stderr
}

/// Off loopback the E2B door needs TLS or --insecure-plaintext (as the WebSocket door): without
/// either the daemon does not start. It always has a token (one is made in the home when no
/// --token-file is given), so the token is no longer what refuses it.
#[test]
fn a_non_loopback_e2b_door_without_tls_is_refused_with_a_sentence() {
    let stderr = refused(&["--e2b", "0.0.0.0:0"]);
    assert!(stderr.contains("refusing to serve the E2B door on 0.0.0.0:0 without TLS"), "{stderr}");
    assert!(stderr.contains("--tls-cert") && stderr.contains("--insecure-plaintext"), "{stderr}");
}
