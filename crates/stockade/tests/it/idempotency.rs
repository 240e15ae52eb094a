//! Idempotency keys: a `run` carrying the key of a session the daemon keeps (running or
//! finished, across a daemon restart) starts nothing and answers with that session; `ps --key`
//! finds the one session a key started, or none; a `send` carrying the key of one the daemon
//! has seen types nothing again; bad keys are refused in a sentence.

use stockade_testkit::{Home, text};

/// `stockade run --bg --json --idempotency-key KEY COMMAND`: the answer.
fn run_keyed(home: &Home, key: &str, command: &str) -> serde_json::Value {
    home.json_bg(&["--idempotency-key", key, command])
}

/// The ids `ps --key KEY -q` prints.
fn ids_with_key(home: &Home, key: &str) -> Vec<String> {
    home.ok(&["ps", "--key", key, "-q"]).lines().map(str::to_owned).collect()
}

#[test]
fn a_run_retried_with_its_key_gets_the_first_session_running_finished_or_after_a_restart() {
    let home = Home::new();
    // Running: the retry answers with the same session and starts no second copy.
    let first = run_keyed(&home, "k-running", "echo started; sleep 30");
    let again = run_keyed(&home, "k-running", "echo started; sleep 30");
    assert_eq!(first["id"], again["id"], "{first} / {again}");
    assert_eq!(again["state"], "running", "{again}");
    let id = first["id"].as_str().unwrap().to_owned();
    assert_eq!(ids_with_key(&home, "k-running"), vec![id.clone()]);
    let running = home.json(&["ps", "--state", "running"]);
    let n = running["sessions"].as_array().map_or(0, Vec::len);
    assert_eq!(n, 1, "one session runs, not two: {running}");
    home.ok(&["kill", &id]);

    // Finished: the retry is answered as the first run was, with its output and exit.
    let done = run_keyed(&home, "k-done", "echo hello; exit 3");
    let waited = home.run(&["wait", done["id"].as_str().unwrap()]);
    assert_eq!(waited.status.code(), Some(3), "{}", text(&waited.stderr));
    let replay = run_keyed(&home, "k-done", "echo hello; exit 3");
    assert_eq!(replay["id"], done["id"], "{replay}");
    assert_eq!(replay["state"], "exited", "{replay}");
    assert_eq!(replay["code"], 3, "{replay}");
    assert!(replay["output"].as_str().unwrap().contains("hello"), "{replay}");

    // A key nobody used finds nothing.
    assert!(ids_with_key(&home, "k-never").is_empty());

    // Across a restart of the daemon: the key is kept with the session's record.
    home.ok(&["daemon", "stop"]);
    assert_eq!(ids_with_key(&home, "k-done"), vec![done["id"].as_str().unwrap().to_owned()]);
    let after = run_keyed(&home, "k-done", "echo hello; exit 3");
    assert_eq!(after["id"], done["id"], "{after}");
    let all = home.json(&["ps", "-a"]);
    let n = all["sessions"].as_array().map_or(0, Vec::len);
    assert_eq!(n, 2, "two keyed runs made two sessions in all: {all}");
}

#[test]
fn a_bad_key_is_refused_in_a_sentence() {
    let home = Home::new();
    for key in ["has space", &"x".repeat(129)] {
        let out = home.run(&["run", "--bg", "--idempotency-key", key, "true"]);
        assert_eq!(out.status.code(), Some(2), "{key}: {}", text(&out.stderr));
        let err = text(&out.stderr);
        assert!(err.contains("idempotency key is 1 to 128 printable"), "{err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
    }
    // A foreground run happens in the CLI's own process: no daemon could find it by its key.
    let out = home.run(&["run", "--idempotency-key", "k", "true"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("add --bg"), "{}", text(&out.stderr));
}

/// `stockade send --json --idempotency-key KEY ID TEXT`: the answer's output.
fn send_keyed(home: &Home, key: &str, id: &str, input: &str) -> String {
    let answer = home.json(&["send", "--yield-ms", "300", "--idempotency-key", key, id, input]);
    answer["output"].as_str().unwrap_or_default().to_owned()
}

#[test]
fn a_send_retried_with_its_key_types_its_input_once() {
    let home = Home::new();
    let id = home.json_bg(&["--stdin", "pipe", "cat"])["id"].as_str().unwrap().to_owned();
    // The first send types; its retry types nothing and answers from where the first started.
    assert!(send_keyed(&home, "s-1", &id, r"hello\n").contains("hello"));
    assert!(send_keyed(&home, "s-1", &id, r"hello\n").contains("hello"), "the retry's answer");
    // Another key is another send.
    assert!(send_keyed(&home, "s-2", &id, r"world\n").contains("world"));
    // Two sends with one key at once: one of them types.
    let args = ["send", "--json", "--yield-ms", "300", "--idempotency-key", "s-3", &id, r"once\n"];
    let both = [(); 2].map(|()| {
        let mut send = home.cmd(&args);
        send.stdout(std::process::Stdio::piped());
        send.spawn().unwrap()
    });
    for one in both {
        let out = one.wait_with_output().unwrap();
        assert!(out.status.success(), "{}", text(&out.stderr));
        assert!(text(&out.stdout).contains("once"), "{}", text(&out.stdout));
    }
    // The same key for another session types there: keys are per session.
    let other = home.json_bg(&["--stdin", "pipe", "cat"])["id"].as_str().unwrap().to_owned();
    assert!(send_keyed(&home, "s-1", &other, r"elsewhere\n").contains("elsewhere"));
    home.ok(&["send", "--close-stdin", "--idempotency-key", "s-4", &id]);
    home.ok(&["send", "--close-stdin", &other]);
    let waited = home.run(&["wait", &id, &other]);
    assert!(waited.status.success(), "{}", text(&waited.stderr));
    // What `cat` read is each send once.
    assert_eq!(home.ok(&["logs", &id]), "hello\nworld\nonce\n");
    assert_eq!(home.ok(&["logs", &other]), "elsewhere\n");
}

#[test]
fn a_send_with_a_bad_key_is_refused_in_a_sentence() {
    let home = Home::new();
    let id = home.json_bg(&["--stdin", "pipe", "cat"])["id"].as_str().unwrap().to_owned();
    let out = home.run(&["send", "--idempotency-key", "has space", &id, "x"]);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(err.contains("idempotency key is 1 to 128 printable"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    home.ok(&["kill", &id]);
}

#[test]
fn a_restart_retried_with_its_key_starts_one_new_session() {
    let home = Home::new();
    let old = home.json_bg(&["echo started; sleep 30"])["id"].as_str().unwrap().to_owned();
    let restart = ["restart", "--kill", "--json", "--idempotency-key", "r-1", &old];
    let first = home.json_started(&restart);
    let again = home.json_started(&restart);
    assert_eq!(first["id"], again["id"], "{first} / {again}");
    assert_ne!(first["id"].as_str(), Some(old.as_str()), "{first}");
    let new = first["id"].as_str().unwrap().to_owned();
    assert_eq!(ids_with_key(&home, "r-1"), vec![new.clone()]);
    // Two sessions in all, the old one killed by the first restart, the new one running.
    let all = home.json(&["ps", "-a"]);
    let sessions = all["sessions"].as_array().unwrap();
    assert_eq!(sessions.len(), 2, "{all}");
    let running = home.json(&["ps", "--state", "running"]);
    let running: Vec<&str> =
        running["sessions"].as_array().unwrap().iter().filter_map(|s| s["id"].as_str()).collect();
    assert_eq!(running, vec![new.as_str()]);
    // A bad key is refused before anything is killed or started.
    let out = home.run(&["restart", "--kill", "--idempotency-key", "has space", &new]);
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("idempotency key is 1 to 128 printable"));
    assert_eq!(home.json(&["ps", "--state", "running"])["sessions"][0]["id"], new.as_str());
    home.ok(&["kill", &new]);
}

/// The key an MCP error names: `idempotency_key "KEY"`.
fn named_key(text: &str) -> String {
    let at = text.find("idempotency_key \"").unwrap_or_else(|| panic!("no key named: {text}"));
    let rest = &text[at + "idempotency_key \"".len()..];
    rest[..rest.find('"').unwrap_or_else(|| panic!("{text}"))].to_owned()
}

#[test]
fn an_mcp_exec_command_whose_answer_was_lost_names_its_key_and_a_retry_with_it_gets_that_session() {
    use serde_json::json;
    use std::time::{Duration, Instant};

    let home = Home::new();
    let mut mcp = crate::order::Mcp::start_with(&home, &["--structured"]);
    let cmd = "echo started; sleep 60";
    // The daemon dies while the call waits for its command: the answer never comes.
    let spool = home.path().join("spool");
    let killer = std::thread::spawn({
        let home_dir = home.path().to_owned();
        move || {
            let deadline = Instant::now() + Duration::from_secs(20);
            let started = || {
                std::fs::read_dir(&spool)
                    .into_iter()
                    .flatten()
                    .flatten()
                    .any(|dir| dir.path().join("sh-1").join("output.log").exists())
            };
            while !started() {
                assert!(Instant::now() < deadline, "the session never started");
                std::thread::sleep(Duration::from_millis(20));
            }
            // Let the daemon answer the spawn and settle into the call's wait.
            std::thread::sleep(Duration::from_millis(300));
            let pid = stockade_client::daemon_pid(&home_dir).expect("the daemon's pid");
            // SAFETY: kill(2) on the daemon this test's MCP server started.
            assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGKILL) }, 0);
        }
    });
    let lost = mcp.request(
        "tools/call",
        json!({"name": "exec_command", "arguments": {"cmd": cmd, "yield_time_ms": 30000}}),
    );
    killer.join().expect("the killer thread");
    assert_eq!(lost["result"]["isError"], true, "{lost}");
    let said = lost["result"]["content"][0]["text"].as_str().unwrap_or_default().to_owned();
    assert!(said.contains("may have started"), "{said}");
    let key = named_key(&said);

    // The key finds the one session the lost call started (the next call starts a daemon).
    let listed = mcp.request(
        "tools/call",
        json!({"name": "list_sessions", "arguments": {"idempotency_key": key}}),
    );
    let sessions = listed["result"]["structuredContent"]["sessions"].as_array().cloned();
    let sessions = sessions.unwrap_or_else(|| panic!("{listed}"));
    assert_eq!(sessions.len(), 1, "{listed}");
    assert_eq!(sessions[0]["id"], "sh-1", "{listed}");

    // A retry with it gets that session, recovered after its daemon died, and starts nothing.
    let retried = mcp.request(
        "tools/call",
        json!({"name": "exec_command",
               "arguments": {"cmd": cmd, "idempotency_key": key, "yield_time_ms": 0}}),
    );
    assert_eq!(retried["result"]["structuredContent"]["id"], "sh-1", "{retried}");
    let all = home.json(&["ps", "-a"]);
    assert_eq!(all["sessions"].as_array().map_or(0, Vec::len), 1, "one session in all: {all}");
    assert_ne!(all["sessions"][0]["state"], "running", "recovered as ended: {all}");
}

#[test]
fn a_key_outlives_a_daemon_killed_between_the_spawn_and_the_first_record() {
    use std::time::Duration;
    use stockade_testkit::daemon::DaemonProc;
    use stockade_testkit::eventually;
    use stockade_testkit::procs::marked_processes;

    let home = Home::nested("home");
    // A test build's daemon that SIGKILLs itself right after spawning, before any record.
    let mut crashing =
        DaemonProc::start_env(home.path(), &[], &[("STOCKADE_TEST_CRASH_AFTER_SPAWN", "1")])
            .unwrap();
    let prefix = crashing.marker_prefix();
    let lost =
        home.run(&["--no-autostart", "run", "--bg", "--idempotency-key", "k-crash", "sleep 300"]);
    assert!(!lost.status.success(), "{}", text(&lost.stdout));
    let said = text(&lost.stderr);
    assert!(said.contains("may have started") && said.contains("k-crash"), "{said}");
    assert!(crashing.wait_exit(Duration::from_secs(10)).is_some(), "the daemon did not die");
    assert!(!marked_processes(&prefix).is_empty(), "the command never started: {said}");

    // The next command starts a daemon as users' shells do; its recovery ends the unrecorded
    // session and keeps the key it was marked with.
    let found = ids_with_key(&home, "k-crash");
    assert_eq!(found.len(), 1, "the key names one session: {found:?}");
    eventually(Duration::from_secs(10), "the unrecorded tree terminated", || {
        marked_processes(&prefix).is_empty().then_some(())
    });
    let session = home.session(&found[0]);
    let reason = session["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("before recording it"), "{session}");
    // A retry with the key gets that session: the command does not run a second time.
    let retried = run_keyed(&home, "k-crash", "sleep 300");
    assert_eq!(retried["id"].as_str(), Some(found[0].as_str()), "{retried}");
    let all = home.json(&["ps", "-a"]);
    assert_eq!(all["sessions"].as_array().map_or(0, Vec::len), 1, "one session in all: {all}");
}
