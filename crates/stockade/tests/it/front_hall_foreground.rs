//! A foreground `stockade run` (in the CLI's own process, no daemon in the path) is held to what
//! the home's daemon holds its own runs to: its line in the daemon's audit log (door
//! `foreground`), and the daemon's secrets — its doors' token files, and a path `hide` added —
//! kept from its sandbox.

use std::os::unix::fs::PermissionsExt as _;
use std::process::{Command, Stdio};
use std::time::Duration;

use stockade_testkit::{DaemonProc, eventually, text};

/// `stockade --home HOME run ARGS…` in the foreground (stdout a pipe): exit code and output.
fn foreground(d: &DaemonProc, args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(stockade_testkit::stockade_bin())
        .arg("--home")
        .arg(&d.home)
        .arg("run")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (out.status.code(), format!("{}{}", text(&out.stdout), text(&out.stderr)))
}

#[test]
fn a_foreground_run_is_audited_and_kept_from_the_daemons_secrets() {
    let tmp = tempfile::tempdir().unwrap();
    let audit = tmp.path().join("audit.log");
    let token = stockade_testkit::owner_token_file(tmp.path(), "door-token-0123456789abcdef");
    let added = tmp.path().join("added-secret");
    std::fs::write(&added, "added-secret-contents\n").unwrap();
    std::fs::set_permissions(&added, std::fs::Permissions::from_mode(0o600)).unwrap();
    let control = tmp.path().join("control");
    std::fs::write(&control, "control-contents\n").unwrap();
    let d = DaemonProc::start(&[
        "--ws",
        "127.0.0.1:0",
        "--token-file",
        token.to_str().unwrap(),
        "--audit-log",
        audit.to_str().unwrap(),
    ]);
    // A path hidden after the start, as `stockade mcp --http` hides its token file.
    let mut rpc = stockade_testkit::Rpc::connect(&d.home.join("stockade.sock"));
    let hidden = rpc.call("hide", serde_json::json!({ "paths": [&added] })).unwrap();
    assert!(hidden["hidden"].to_string().contains("added-secret"), "{hidden}");

    // Unsandboxed, the files are there to read (so the refusals below are the sandbox's).
    let all = format!("cat {} {} {}", token.display(), added.display(), control.display());
    let (code, out) = foreground(&d, &[&all]);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("door-token") && out.contains("added-secret-contents"), "{out}");

    for policy in ["read-only", "workspace-write"] {
        for (secret, what) in [(&token, "door-token"), (&added, "added-secret-contents")] {
            let (code, out) =
                foreground(&d, &["--sandbox", policy, &format!("cat {}", secret.display())]);
            assert_ne!(code, Some(0), "{policy}: {} was read: {out}", secret.display());
            assert!(!out.contains(what), "{policy}: {out}");
        }
        let (code, out) =
            foreground(&d, &["--sandbox", policy, &format!("cat {}", control.display())]);
        assert_eq!(code, Some(0), "{policy}: the control file is readable: {out}");
    }

    // One audit line per foreground run, door `foreground`, with its session and command.
    let (code, out) = foreground(&d, &["echo audited-foreground-run"]);
    assert_eq!(code, Some(0), "{out}");
    let line = eventually(Duration::from_secs(10), "the foreground run's audit line", || {
        let log = std::fs::read_to_string(&audit).ok()?;
        log.lines().find(|l| l.contains("audited-foreground-run")).map(str::to_owned)
    });
    let line: serde_json::Value = serde_json::from_str(&line).unwrap();
    assert_eq!(line["door"], "foreground", "{line}");
    assert_eq!(line["method"], "run", "{line}");
    assert_eq!(line["command"], "echo audited-foreground-run", "{line}");
    assert!(line["session"].as_str().is_some_and(|s| !s.is_empty()), "{line}");
    let uid = rustix::process::getuid().as_raw();
    assert_eq!(line["peer"], format!("uid:{uid}"), "{line}");
    let log = std::fs::read_to_string(&audit).unwrap();
    let foreground_lines = log.lines().filter(|l| l.contains(r#""door":"foreground""#)).count();
    assert_eq!(foreground_lines, 8, "one line per foreground run (8 runs):\n{log}");
}
