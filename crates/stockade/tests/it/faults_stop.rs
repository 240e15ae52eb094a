//! A daemon that cannot answer, through the binary: one stopped by `kill -STOP` is named by
//! every door within 2 s (the CLI on the socket, `--remote` on the WebSocket door, the MCP
//! server), with the command that continues it, and nothing is carried out twice once it is
//! continued; one whose home is deleted under it exits within a minute, saying why in its log.

use std::process::Output;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use stockade_testkit::daemon::{DaemonProc, owner_token_file};
use stockade_testkit::home::Home;
use stockade_testkit::{eventually, text};

use crate::order::Mcp;

const TOKEN: &str = "stopped-door-token-0123456789abcdef";
/// What a client may take to name a stopped daemon.
const SAY_WITHIN: Duration = Duration::from_secs(2);

/// Sends SIGCONT to the daemon when dropped, so a failing test leaves no stopped process for
/// the cleanup that follows (which then ends it by its pid).
struct Continue(u32);

impl Drop for Continue {
    fn drop(&mut self) {
        // SAFETY: kill(2) on the daemon this test started (our own child, by its pid).
        unsafe { libc::kill(self.0 as i32, libc::SIGCONT) };
    }
}

fn state(pid: u32) -> u8 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    after.trim_start().bytes().next().unwrap_or(b'?')
}

/// `what` took at most [`SAY_WITHIN`] and said the sentence.
fn named_at_once(what: &str, took: Duration, said: &str, pid: u32) {
    let sentence = format!("the daemon (pid {pid}) is stopped: `kill -CONT {pid}`");
    assert!(said.contains(&sentence), "{what} said: {said}");
    assert!(took <= SAY_WITHIN, "{what} took {took:?}");
    eprintln!("{what}: {} ms", took.as_millis());
}

fn timed(f: impl FnOnce() -> Output) -> (Output, Duration) {
    let started = Instant::now();
    let out = f();
    (out, started.elapsed())
}

fn sessions_with(home: &Home, marker: &str) -> usize {
    let all = home.json(&["ps", "-a"]);
    let sessions = all["sessions"].as_array().cloned().unwrap_or_default();
    sessions.iter().filter(|s| s["command"].as_str().is_some_and(|c| c.contains(marker))).count()
}

#[test]
fn a_stopped_daemon_is_named_by_every_door_in_two_seconds_and_serves_again_when_continued() {
    let home = Home::nested("home");
    let tmp = tempfile::tempdir().unwrap();
    let token = owner_token_file(tmp.path(), TOKEN);
    let token_arg = token.to_str().unwrap().to_owned();
    let daemon =
        DaemonProc::start_at(home.path(), &["--ws", "127.0.0.1:0", "--token-file", &token_arg])
            .expect("the daemon starts");
    let pid = daemon.pid;
    let url = format!("ws://{}", daemon.ws_addr());
    let remote = |args: &[&str]| {
        let mut c = home.cmd(&["--remote", &url, "--token-file", &token_arg]);
        c.args(args).env_remove("STOCKADE_HOME");
        c.output().unwrap()
    };
    let mut mcp = Mcp::start_with(&home, &["--structured"]);
    let listed = mcp.request("tools/call", json!({"name": "list_sessions", "arguments": {}}));
    assert_ne!(listed["result"]["isError"], true, "{listed}");
    assert!(remote(&["ps"]).status.success(), "the door answers before the stop");

    let cont = Continue(pid);
    // SAFETY: kill(2) on the daemon this test started.
    assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGSTOP) }, 0);
    eventually(Duration::from_secs(5), "the daemon to be stopped", || {
        (state(pid) == b'T').then_some(())
    });

    let (out, took) = timed(|| home.run(&["ps"]));
    assert!(!out.status.success(), "ps answered a stopped daemon: {}", text(&out.stdout));
    named_at_once("ps", took, &text(&out.stderr), pid);
    let (out, took) = timed(|| home.run(&["run", "--bg", "echo run-while-stopped"]));
    assert!(!out.status.success(), "run --bg answered: {}", text(&out.stdout));
    named_at_once("run --bg", took, &text(&out.stderr), pid);
    let (out, took) = timed(|| remote(&["ps"]));
    assert!(!out.status.success(), "--remote ps answered: {}", text(&out.stdout));
    named_at_once("--remote ps", took, &text(&out.stderr), pid);
    let started = Instant::now();
    let listed = mcp.request("tools/call", json!({"name": "list_sessions", "arguments": {}}));
    let took = started.elapsed();
    assert_eq!(listed["result"]["isError"], true, "{listed}");
    let said = listed["result"]["content"][0]["text"].as_str().unwrap_or_default().to_owned();
    named_at_once("MCP list_sessions", took, &said, pid);

    // Continued, every door serves again, and the run refused while stopped never ran.
    drop(cont);
    eventually(Duration::from_secs(5), "the daemon to run again", || {
        (state(pid) != b'T').then_some(())
    });
    let out = home.run(&["ps"]);
    assert!(out.status.success(), "ps after SIGCONT: {}", text(&out.stderr));
    let after = home.json_bg(&["echo run-after-continue"]);
    assert!(after["id"].is_string(), "{after}");
    let out = remote(&["ps"]);
    assert!(out.status.success(), "--remote ps after SIGCONT: {}", text(&out.stderr));
    let listed = mcp.request("tools/call", json!({"name": "list_sessions", "arguments": {}}));
    assert_ne!(listed["result"]["isError"], true, "{listed}");
    let listed: &Value = &listed["result"]["structuredContent"]["sessions"];
    assert!(listed.as_array().is_some_and(|s| !s.is_empty()), "{listed}");
    // A moment for anything a stopped daemon had queued to be carried out.
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(sessions_with(&home, "run-while-stopped"), 0, "a refused run ran");
    assert_eq!(sessions_with(&home, "run-after-continue"), 1, "ran once");
    drop(daemon);
}

#[test]
fn a_daemon_whose_home_is_deleted_exits_within_a_minute_and_says_why() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let mut daemon = DaemonProc::start_at(&home, &[]).expect("the daemon starts");
    let mut rpc = daemon.client();
    let running = rpc.ok("run", json!({"command": "sleep 600", "background": true}));
    let root = running["pid"].as_u64().unwrap() as u32;
    drop(rpc);
    let removed = Instant::now();
    std::fs::remove_dir_all(&home).unwrap();
    let status = daemon.wait_exit(Duration::from_secs(60));
    let took = removed.elapsed();
    assert!(status.is_some(), "the daemon still runs 60 s after its home was deleted");
    let log = daemon.stderr.lock().unwrap().clone();
    assert!(log.contains("the state directory was removed"), "its log: {log}");
    eprintln!("exited {} ms after its home was deleted", took.as_millis());
    // Its session was ended with it.
    eventually(Duration::from_secs(10), "the session's command to end", || {
        (!stockade_client::pid_alive(root)).then_some(())
    });
}

#[test]
fn a_hung_daemon_is_named_within_two_seconds_and_answers_again_when_it_moves() {
    let home = Home::new();
    let warm = home.json_bg(&["echo warm"]);
    assert!(warm["id"].is_string(), "{warm}");
    let pid = home.daemon_pid().unwrap();
    // Every thread but the main one held by ptrace: the process runs (state S, not T), its
    // runtime and its heartbeat do nothing, a request is accepted and never answered.
    let tids: Vec<i32> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .filter(|&t: &i32| t != pid as i32)
        .collect();
    let held: Vec<crate::faults_drain::Stopped> = tids
        .iter()
        .map(|&t| {
            crate::faults_drain::Stopped::interrupt(t).unwrap_or_else(|why| {
                panic!("cannot hold thread {t} ({why}): this test needs ptrace")
            })
        })
        .collect();
    assert_ne!(state(pid), b'T');
    let (out, took) = timed(|| home.run(&["ps"]));
    let said = text(&out.stderr);
    assert!(!out.status.success(), "ps answered a hung daemon: {}", text(&out.stdout));
    assert!(said.contains(&format!("the daemon (pid {pid}) is hung")), "{said}");
    assert!(took <= SAY_WITHIN, "ps took {took:?}");
    eprintln!("hung: ps {} ms", took.as_millis());
    drop(held);
    let out = home.run(&["ps"]);
    assert!(out.status.success(), "ps after the threads were let go: {}", text(&out.stderr));
}
