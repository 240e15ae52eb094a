//! The sandbox through every door's ceiling: `stockade daemon run --sandbox …` sets the default
//! and the most a run may ask for (a looser request is refused in one sentence), and
//! `stockade mcp --sandbox …` does the same for `exec_command`, whose description states the
//! policy and whose answer to a denied write names the sandbox.

use std::io::{BufReader, Write as _};
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use stockade_testkit::child::{STOP_TIMEOUT, wait_bounded};
use stockade_testkit::{eventually, text};

use crate::sandbox_common::{Sbx, User, exists};

#[test]
fn the_daemons_sandbox_is_the_default_and_the_ceiling() {
    let s = Sbx::new(User::Root);
    let mut daemon = s
        .cli(&["daemon", "run", "--sandbox", "workspace-write", "--network", "none"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let sock = s.home.path().join("stockade.sock");
    eventually(Duration::from_secs(20), "the daemon's socket", || sock.exists().then_some(()));
    let outside = s.outside.join("escaped");
    let touch = format!("touch {}", outside.display());

    // No policy asked: the default applies.
    let answer = s.run(&[], &touch);
    assert!(answer["sandbox"].as_str().unwrap().starts_with("sandbox workspace-write"));
    assert!(!exists(&outside), "{answer}");
    // Looser than the ceiling: refused, in one sentence, nothing run.
    for looser in
        [&["--sandbox", "off"][..], &["--sandbox", "workspace-write", "--network", "allow"]]
    {
        let mut args = vec!["run", "--bg", "--yield-ms", "20000"];
        args.extend(looser);
        args.push(&touch);
        let out = s.output(&args);
        let err = text(&out.stderr);
        assert!(!out.status.success() && err.contains("refused"), "{looser:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
    }
    assert!(!exists(&outside));
    // Tighter is fine.
    let answer = s.run(&["--sandbox", "read-only"], "echo ok");
    assert_eq!(answer["output"], "ok\n", "{answer}");

    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(daemon.id() as i32, libc::SIGTERM) };
    if wait_bounded(&mut daemon, STOP_TIMEOUT).is_none() {
        let _ = daemon.kill();
        let _ = daemon.wait();
    }
}

#[test]
fn mcp_states_and_enforces_its_sandbox() {
    let s = Sbx::new(User::Root);
    let mut mcp = s
        .cli(&["mcp", "--sandbox", "workspace-write", "--network", "none"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut input = mcp.stdin.take().unwrap();
    let mut output = BufReader::new(mcp.stdout.take().unwrap());
    let mut call = |id: u64, method: &str, params: Value| -> Value {
        let msg = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        writeln!(input, "{msg}").unwrap();
        if method == "initialize" {
            let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
            let answer = read_answer(&mut output, id);
            writeln!(input, "{note}").unwrap();
            return answer;
        }
        read_answer(&mut output, id)
    };
    let init = json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}});
    call(1, "initialize", init);
    let tools = call(2, "tools/list", json!({}));
    let exec = tools["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "exec_command")
        .unwrap()
        .clone();
    let description = exec["description"].as_str().unwrap();
    assert!(
        description.contains("runs under sandbox workspace-write")
            && description.contains("network none"),
        "{description}"
    );
    let outside = s.outside.join("escaped");
    let cmd = format!("touch {}", outside.display());
    let denied = call(3, "tools/call", json!({"name": "exec_command", "arguments": {"cmd": cmd}}));
    let said = denied["result"]["content"][0]["text"].as_str().unwrap();
    assert!(
        (said.contains("Permission denied") || said.contains("Read-only file system"))
            && said.contains("comes from this sandbox"),
        "{said}"
    );
    assert!(!exists(&outside));
    let looser = call(
        4,
        "tools/call",
        json!({"name": "exec_command", "arguments": {"cmd": cmd, "sandbox": {"mode": "off"}}}),
    );
    assert_eq!(looser["result"]["isError"], true, "{looser}");
    let said = looser["result"]["content"][0]["text"].as_str().unwrap();
    assert!(said.contains("looser"), "{said}");
    assert!(!exists(&outside));
    drop(input);
    if wait_bounded(&mut mcp, STOP_TIMEOUT).is_none() {
        let _ = mcp.kill();
        let _ = mcp.wait();
    }
}

/// The next line that answers request `id` (notifications in between are skipped).
fn read_answer(output: &mut impl std::io::BufRead, id: u64) -> Value {
    loop {
        let mut line = String::new();
        assert!(output.read_line(&mut line).unwrap() > 0, "the MCP server closed its output");
        let v: Value = serde_json::from_str(&line).unwrap();
        if v["id"] == id {
            return v;
        }
    }
}

#[test]
fn a_schedules_runs_keep_its_sandbox() {
    let s = Sbx::new(User::Root);
    let outside = s.outside.join("scheduled");
    let touch = format!("touch {} ; touch here", outside.display());
    let add = s.output(&[
        "schedule",
        "add",
        "boxed",
        "--every",
        "1s",
        "--sandbox",
        "workspace-write",
        "--cwd",
        s.work.to_str().unwrap(),
        "--",
        "sh",
        "-c",
        &touch,
    ]);
    assert!(add.status.success(), "{}", text(&add.stderr));
    // Its first run, as `ps` lists it: under the sandbox, the write outside denied.
    let run = eventually(Duration::from_secs(20), "the schedule's first run to end", || {
        let ps = s.output(&["ps", "--json", "-a"]);
        let list: Value = serde_json::from_slice(&ps.stdout).ok()?;
        list["sessions"].as_array()?.iter().find(|x| x["state"] == "exited").cloned()
    });
    let policy = run["sandbox"].as_str().unwrap_or_default();
    assert!(policy.starts_with("sandbox workspace-write"), "{run}");
    assert!(!exists(&outside), "a scheduled run wrote outside its sandbox");
    assert!(s.work.join("here").exists(), "the scheduled run ran in its working directory");
    let rm = s.output(&["schedule", "rm", "boxed"]);
    assert!(rm.status.success(), "{}", text(&rm.stderr));
}
