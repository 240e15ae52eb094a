//! `--remote` for every subcommand: each one either acts on the remote daemon or refuses in one
//! sentence naming itself — none quietly acts on this machine instead (no local daemon started,
//! no local file read). Then the remote's own answers: `daemon stop` waits for the remote daemon
//! (PID 1 of its namespace) to close the connection, not for a pid on this machine; `read`,
//! `grep` and `logs` read the remote's sessions, and a copy resumes after its connection is cut.

use std::os::unix::fs::PermissionsExt as _;
use std::process::Command;
use std::time::{Duration, Instant};

use stockade_proto::rpc::{ReadParams, RunParams, method};
use stockade_testkit::child::run_bounded;
use stockade_testkit::home::Home;

use crate::remote_support::{Ca, Root, Sandbox, namespaces_usable};

/// What a subcommand must do with `--remote` and nothing listening there.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Expect {
    /// Try the remote: the error names the address it could not reach.
    Remote,
    /// Refuse `--remote` in one sentence naming the subcommand (or the target).
    Refused(&'static str),
    /// Print something that involves no daemon at all (shell completions, the manual).
    NoDaemon,
}

use Expect::{NoDaemon, Refused, Remote};

/// Every subcommand (and the forms of it that take other paths), with what it must do.
const TABLE: &[(&[&str], Expect)] = &[
    (&["run", "true"], Remote),
    (&["run", "--bg", "true"], Remote),
    (&["run", "--pty", "true"], Remote),
    (&["send", "sh-1", "hi"], Remote),
    (&["resize", "sh-1", "24", "80"], Remote),
    (&["attach", "sh-1"], Remote),
    (&["ps"], Remote),
    (&["logs", "sh-1"], Remote),
    (&["logs", "-f", "sh-1"], Remote),
    (&["logs", "--raw", "sh-1"], Remote),
    (&["logs", "-n", "5", "sh-1"], Remote),
    (&["wait", "sh-1"], Remote),
    (&["kill", "sh-1"], Remote),
    (&["restart", "sh-1"], Remote),
    (&["forget", "sh-1"], Remote),
    (&["cleanup"], Remote),
    (&["cleanup", "--all"], Remote),
    (&["stats"], Remote),
    (&["read", "sh-1"], Remote),
    (&["read", "--raw", "sh-1"], Remote),
    (&["read", "/etc/hostname"], Refused("is not a session id; with --remote")),
    (&["grep", "sh-1", "x"], Remote),
    (&["grep", "/etc/hostname", "x"], Refused("is not a session id; with --remote")),
    (&["doctor"], Refused("`stockade doctor` acts on this machine only")),
    (&["bench", "growth"], Refused("`stockade bench` acts on this machine only")),
    (&["schedule", "list"], Remote),
    (&["schedule", "add", "t", "--every", "10m", "--", "true"], Remote),
    (&["schedule", "rm", "t"], Remote),
    (&["schedule", "runs", "t"], Remote),
    (&["schedule", "run", "t"], Remote),
    (&["daemon"], Refused("`stockade daemon run` acts on this machine only")),
    (&["daemon", "run"], Refused("`stockade daemon run` acts on this machine only")),
    (&["daemon", "start"], Remote),
    (&["daemon", "stop"], Remote),
    (&["daemon", "status"], Remote),
    // `mcp` over stdio calls the remote per tool call (remote_ns drives it); `--embedded`
    // would be a daemon here.
    (&["mcp", "--embedded"], Refused("--embedded runs a private daemon here")),
    (&["completions", "bash"], NoDaemon),
    (&["man"], NoDaemon),
];

/// Nothing listens on port 1 here.
const NOWHERE: &str = "wss://127.0.0.1:1";

#[test]
fn every_subcommand_acts_on_the_remote_or_refuses() {
    let home = Home::new();
    let secrets = tempfile::tempdir().unwrap();
    let token = secrets.path().join("token");
    std::fs::write(&token, "remote-cli-token-0123456789\n").unwrap();
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).unwrap();
    let token = token.to_str().unwrap();
    let mut failures = Vec::new();
    for (args, expect) in TABLE {
        let mut cmd = home.cmd(&["--remote", NOWHERE, "--token-file", token]);
        cmd.args(*args);
        // `attach` wants a terminal before anything else.
        let (code, stderr) = run_table_form(&mut cmd, args[0] == "attach");
        let stderr = stderr.trim();
        let ok = match expect {
            Remote => {
                code == Some(2) && stderr.contains(&format!("cannot reach the daemon at {NOWHERE}"))
            }
            Refused(sentence) => {
                code == Some(2) && stderr.contains(sentence) && stderr.lines().count() == 1
            }
            NoDaemon => code == Some(0),
        };
        if !ok {
            failures.push(format!("stockade --remote {NOWHERE} {args:?}: exit {code:?}: {stderr}"));
        }
        // Never this machine instead: no daemon started (nor its socket) in the home.
        for file in [stockade_client::LOCK_FILE, stockade_client::SOCKET_FILE] {
            if home.path().join(file).exists() {
                failures.push(format!("{args:?} left {file} in the local home"));
            }
        }
    }
    assert!(home.daemon_pid().is_none(), "a local daemon was started");
    assert!(
        failures.is_empty(),
        "{} of {} forms:\n{}",
        failures.len(),
        TABLE.len(),
        failures.join("\n")
    );
}

/// Runs one form of the table to its end: its exit code and stderr. `attach` wants a terminal
/// before anything else: it gets one as stdin.
fn run_table_form(cmd: &mut Command, terminal: bool) -> (Option<i32>, String) {
    if !terminal {
        let out = run_bounded(cmd, Duration::from_secs(30));
        return (out.status.code(), out.stderr);
    }
    let pty = stockade_testkit::pty::Pty::open();
    let mut child = cmd
        .stdin(pty.stdio())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let status = stockade_testkit::child::wait_bounded(&mut child, Duration::from_secs(30));
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    (status.expect("attach finished within 30 s").code(), stderr)
}

/// A sandbox with its daemon (PID 1) started; where namespaces cannot be used here the test
/// fails, saying why.
fn sandbox(ca: &Ca) -> Sandbox {
    assert!(namespaces_usable(), "the remote CLI tests need namespaces (see above)");
    let mut sandbox = Sandbox::new(ca, Root::Minimal);
    sandbox.start();
    sandbox
}

fn run_ok(cmd: &mut Command, what: &str) -> String {
    let out = run_bounded(cmd, Duration::from_secs(60));
    out.assert_success(what);
    out.stdout
}

#[test]
fn daemon_stop_waits_for_the_remote_daemon_itself() {
    let ca = Ca::new();
    let mut sandbox = sandbox(&ca);
    let mut client = sandbox.client();
    let started = client
        .call::<method::Run>(RunParams {
            command: "sleep 600".into(),
            background: true,
            ..RunParams::default()
        })
        .unwrap();
    let t0 = Instant::now();
    let stdout = run_ok(&mut sandbox.cli(&["daemon", "stop"]), "daemon stop --remote");
    let took = t0.elapsed();
    eprintln!("daemon stop --remote returned in {} ms", took.as_millis());
    assert_eq!(
        stdout.trim(),
        format!("Daemon stopped (pid 1); terminated 1 running session: {}", started.id)
    );
    // Its answer came from the remote: the daemon there is gone (it was PID 1, so its
    // namespace is empty and the launcher has exited), and nothing was started here.
    stockade_testkit::eventually(Duration::from_secs(10), "the remote daemon to exit", || {
        sandbox.exited()
    });
    assert!(took < Duration::from_secs(20), "stop took {took:?}");
    let cli_home = sandbox.dir.path().join("cli-home");
    assert!(!cli_home.join(stockade_client::LOCK_FILE).exists(), "a local daemon was started");
    // Asked again, the remote is not there to answer: said, not "stopped".
    let again = run_bounded(&mut sandbox.cli(&["daemon", "stop"]), Duration::from_secs(30));
    assert_eq!(again.status.code(), Some(2), "{}", again.stderr);
    assert!(again.stderr.contains("cannot reach the daemon at"), "{}", again.stderr);
}

#[test]
fn read_grep_and_doctor_with_remote_answer_about_the_remote() {
    let ca = Ca::new();
    let sandbox = sandbox(&ca);
    let mut client = sandbox.client();
    let started = client
        .call::<method::Run>(RunParams {
            command: "seq 1 20000".into(),
            background: false,
            timeout_ms: Some(30_000),
            ..RunParams::default()
        })
        .unwrap();
    let id = started.id.as_str();
    let expected: String = (1..=20000).map(|k| format!("{k}\n")).collect();

    let raw = run_ok(&mut sandbox.cli(&["read", "--raw", id]), "read --raw --remote");
    assert_eq!(raw.len(), expected.len());
    assert!(raw == expected, "read --raw --remote gave other bytes");
    let tail = run_ok(&mut sandbox.cli(&["read", id, "--max-lines", "3"]), "read --remote");
    assert!(tail.contains("19999\n20000"), "{tail}");
    let view: serde_json::Value =
        serde_json::from_str(&run_ok(&mut sandbox.cli(&["read", id, "--json"]), "read --json"))
            .unwrap();
    assert_eq!(view["total_bytes"], expected.len() as u64, "{view}");
    let grep = run_ok(&mut sandbox.cli(&["grep", id, "^1999[0-9]$"]), "grep --remote");
    assert_eq!(grep.lines().count(), 10, "{grep}");

    // The sandbox's minimal root has no /etc/hostname; this machine may: a path is refused.
    let path = run_bounded(&mut sandbox.cli(&["read", "/etc/passwd"]), Duration::from_secs(30));
    assert_eq!(path.status.code(), Some(2));
    assert!(
        path.stdout.is_empty() && path.stderr.contains("is not a session id"),
        "{}",
        path.stderr
    );
    let doctor = run_bounded(&mut sandbox.cli(&["doctor"]), Duration::from_secs(30));
    assert_eq!(doctor.status.code(), Some(2));
    assert!(doctor.stdout.is_empty(), "doctor described this machine: {}", doctor.stdout);
    // An unknown id is the remote's answer, never a lookup in this machine's state directory.
    let unknown = run_bounded(&mut sandbox.cli(&["read", "sh-999"]), Duration::from_secs(30));
    assert_eq!(unknown.status.code(), Some(2));
    assert!(unknown.stderr.contains("sh-999"), "{}", unknown.stderr);
    let cli_home = sandbox.dir.path().join("cli-home");
    assert!(!cli_home.join(stockade_client::LOCK_FILE).exists(), "a local daemon was started");
}

#[test]
fn a_copy_without_follow_resumes_after_its_connection_is_cut() {
    let ca = Ca::new();
    let sandbox = sandbox(&ca);
    let mut client = sandbox.client();
    // 22 MiB of known bytes: the copy reads 4 MiB per answer, each one a chance to cut the
    // connection.
    let started = client
        .call::<method::Run>(RunParams {
            command: "seq 1 3000000".into(),
            background: false,
            timeout_ms: Some(60_000),
            ..RunParams::default()
        })
        .unwrap();
    let id = started.id.clone();
    let total = client
        .call::<method::Read>(ReadParams {
            id: id.clone(),
            max_bytes: Some(1),
            ..ReadParams::default()
        })
        .unwrap()
        .view
        .total_bytes;
    drop(client);
    // The copy's stdout is a pipe this test reads at its own pace: while the test does not
    // read, the copy is blocked writing an answer it has received, its connection idle. Then
    // every connection to the door is cut (the daemon's side reset), and reading goes on.
    let mut copy = sandbox.cli(&["logs", "--raw", &id]);
    copy.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped());
    let mut child = copy.spawn().unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut got = Vec::new();
    let mut cuts = 0;
    let mut buf = vec![0u8; 64 * 1024];
    // A cut while the copy writes out one answer (1 MiB into it), so its connection is idle and
    // the next read must resume: in the first, second and third answers.
    for cut_at in [1usize << 20, 5 << 20, 9 << 20] {
        while got.len() < cut_at {
            let n = std::io::Read::read(&mut stdout, &mut buf).unwrap();
            assert!(n > 0, "the copy ended at {} bytes, before the cut at {cut_at}", got.len());
            got.extend_from_slice(&buf[..n]);
        }
        std::thread::sleep(Duration::from_millis(200));
        let out = Command::new("ip")
            .args(["netns", "exec", &sandbox.netns, "ss", "-K", "-t", "state", "established"])
            .args(["sport", "=", ":7433"])
            .output()
            .unwrap();
        // One line per socket cut, after the header.
        cuts += String::from_utf8_lossy(&out.stdout).lines().count().saturating_sub(1);
    }
    std::io::Read::read_to_end(&mut stdout, &mut got).unwrap();
    let status = stockade_testkit::child::wait_bounded(&mut child, Duration::from_secs(60));
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    let resumes = stderr.matches("reconnecting and resuming at byte").count();
    eprintln!(
        "logs --raw --remote: {cuts} connections cut, {resumes} resumes, {} of {total} bytes",
        got.len()
    );
    assert!(status.is_some_and(|s| s.success()), "the copy failed: {stderr}");
    assert!(cuts >= 3, "ss -K cut {cuts} connections (the kernel needs INET_DIAG_DESTROY)");
    assert_eq!(resumes, 3, "one resume per cut: {stderr}");
    assert_eq!(got.len() as u64, total, "every byte, once");
    let expected: String = (1..=3_000_000).map(|k| format!("{k}\n")).collect();
    assert!(got == expected.as_bytes(), "the bytes differ from seq's");
}
