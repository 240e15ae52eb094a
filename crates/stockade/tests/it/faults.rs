//! Faults in the surroundings a user brings: a shared directory given as the home, a small
//! open-file limit. Through the binary, daemons auto-started as a user's shell starts them.

use std::os::unix::fs::PermissionsExt as _;
use std::time::{Duration, Instant};

use stockade_testkit::{Home, eventually, text};

#[test]
fn a_shared_directory_is_refused_as_home_and_left_as_it_was() {
    for mode in [0o1777, 0o777, 0o775] {
        let home = Home::nested("shared");
        std::fs::create_dir(home.path()).unwrap();
        std::fs::set_permissions(home.path(), std::fs::Permissions::from_mode(mode)).unwrap();
        for args in [&["doctor"][..], &["run", "true"], &["run", "--bg", "sleep 1"]] {
            let out = home.run(args);
            let said = format!("{}{}", text(&out.stdout), text(&out.stderr));
            assert!(said.contains(&format!("chmod 700 {}", home.path_str())), "{args:?}: {said}");
            if args[0] != "doctor" {
                assert!(!out.status.success(), "{args:?} ran in a {mode:o} home: {said}");
            }
            let now = std::fs::metadata(home.path()).unwrap().permissions().mode() & 0o7777;
            assert_eq!(now, mode, "{args:?} changed the mode of a home it did not create");
        }
        // Nothing was made in it: no daemon, no spool.
        assert_eq!(std::fs::read_dir(home.path()).unwrap().count(), 0, "{mode:o}");
    }
}

#[test]
fn a_small_open_file_limit_still_runs_commands() {
    let home = Home::new();
    // `ulimit -n 256` sets the soft and the hard limit: the daemon it auto-starts cannot raise it.
    let under_limit = |args: &str| {
        let mut c = std::process::Command::new("sh");
        c.arg("-c")
            .arg(format!("ulimit -n 256 && exec \"$0\" {args}"))
            .arg(stockade_testkit::stockade_bin())
            .env("STOCKADE_HOME", home.path())
            .env("NO_COLOR", "1")
            .stdin(std::process::Stdio::null());
        c.output().unwrap()
    };
    // The first auto-starts the daemon under the limit.
    let out = under_limit("run --bg -q 'echo hello'");
    assert!(out.status.success(), "{}{}", text(&out.stdout), text(&out.stderr));
    let id = text(&out.stdout).trim().to_owned();
    assert_eq!(home.wait_finished(&id)["state"], "exited");
    assert_eq!(home.ok(&["logs", &id]), "hello\n");
    let limits =
        std::fs::read_to_string(format!("/proc/{}/limits", home.daemon_pid().unwrap())).unwrap();
    let line = limits.lines().find(|l| l.starts_with("Max open files")).unwrap().to_owned();
    assert!(line.split_whitespace().any(|w| w == "256"), "the daemon's limit: {line}");
    // Twenty running at once fit; past the budget a run is refused in a sentence, and `ps`
    // still answers at once.
    for i in 0..20 {
        let out = under_limit("run --bg -q 'sleep 30'");
        assert!(out.status.success(), "run {i}: {}", text(&out.stderr));
    }
    let mut refused = None;
    for _ in 0..10 {
        let out = under_limit("run --bg -q 'sleep 30'");
        if !out.status.success() {
            refused = Some(text(&out.stderr));
            break;
        }
    }
    let refused = refused.expect("a run past the open-file budget was refused");
    assert!(refused.contains("open-file limit"), "{refused}");
    let t = Instant::now();
    let ps = home.run(&["ps", "--json"]);
    assert!(ps.status.success(), "{}", text(&ps.stderr));
    assert!(t.elapsed() < Duration::from_secs(10), "ps took {:?}", t.elapsed());
    let list: serde_json::Value = serde_json::from_slice(&ps.stdout).unwrap();
    let running =
        list["sessions"].as_array().unwrap().iter().filter(|s| s["state"] == "running").count();
    assert!((20..=30).contains(&running), "{running} running");
}

#[test]
fn grep_finds_what_follows_a_line_too_long_to_hold() {
    let home = Home::new();
    // 70 MiB on one line (past the 64 MiB a search may hold), then the line looked for.
    let id =
        home.run_bg("head -c 73400320 /dev/zero | tr '\\0' x; echo; echo 'error: after it'")["id"]
            .as_str()
            .unwrap()
            .to_owned();
    assert_eq!(home.wait_finished(&id)["state"], "exited");
    let g = home.json(&["grep", &id, "^error"]);
    let lines = g["lines"].as_array().unwrap();
    assert_eq!(lines.len(), 1, "{g}");
    assert_eq!(lines[0]["line_number"], 2, "{g}");
    assert_eq!(lines[0]["offset"], 73400321, "{g}");
    assert_eq!(lines[0]["text"], "error: after it", "{g}");
}

/// The peak resident size (`VmHWM`) of `pid`, in bytes.
fn peak_rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .unwrap();
    kib * 1024
}

#[test]
fn an_over_long_mcp_stdio_line_is_skipped_in_constant_memory() {
    use std::io::{BufRead as _, Write as _};
    let home = Home::new();
    let mut child = stockade_testkit::child::Reaped(
        home.stockade(&["mcp", "--embedded"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut stdin = child.0.stdin.take().unwrap();
    // 400 MiB on one line (the limit is 16 MiB), then a request that must still be answered.
    let chunk = vec![b'x'; 1 << 20];
    for _ in 0..400 {
        stdin.write_all(&chunk).unwrap();
    }
    stdin.write_all(b"\n").unwrap();
    let init = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"0"}}}"#;
    stdin.write_all(format!("{init}\n").as_bytes()).unwrap();
    stdin.flush().unwrap();
    let mut stdout = std::io::BufReader::new(child.0.stdout.take().unwrap());
    let mut answers = Vec::new();
    let mut line = String::new();
    while answers.len() < 2 && stdout.read_line(&mut line).unwrap_or(0) > 0 {
        answers.push(serde_json::from_str::<serde_json::Value>(&line).unwrap());
        line.clear();
    }
    let peak = peak_rss(child.0.id());
    drop(stdin);
    let status = stockade_testkit::child::wait_bounded(&mut child.0, Duration::from_secs(10));
    assert!(status.is_some(), "stockade mcp did not end after its input closed");
    assert!(answers.iter().any(|a| a["error"]["code"] == -32700), "{answers:?}");
    assert!(answers.iter().any(|a| a["id"] == 1 && a["result"].is_object()), "{answers:?}");
    assert!(peak < 96 << 20, "stockade mcp peaked at {} MiB reading a 400 MiB line", peak >> 20);
}

/// The resident size (`VmRSS`) of `pid`, in bytes.
fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .unwrap()
        * 1024
}

#[test]
fn a_peer_that_pings_and_never_reads_is_closed_not_buffered() {
    use stockade_testkit::ws::tungstenite::Message;
    use stockade_testkit::ws::tungstenite::protocol::frame::coding::CloseCode;
    const TOKEN: &str = "ping-flood-token-0123456789";
    let tmp = tempfile::tempdir().unwrap();
    let file = stockade_testkit::owner_token_file(tmp.path(), TOKEN);
    let daemon = stockade_testkit::DaemonProc::start(&[
        "--ws",
        "127.0.0.1:0",
        "--token-file",
        file.to_str().unwrap(),
    ]);
    let before = rss(daemon.pid);
    let mut ws =
        stockade_testkit::ws::connect(daemon.ws_addr(), Some(&format!("Bearer {TOKEN}"))).unwrap();
    // 200,000 pings of 120 bytes, none of their pongs read: a flood that grew the daemon by ~123
    // bytes a ping before. (Sends keep succeeding after the close: the daemon reads and drops
    // what a closed peer still sends.)
    let mut sent = 0;
    while sent < 200_000 && ws.send(Message::Ping(vec![b'p'; 120].into())).is_ok() {
        sent += 1;
    }
    let grown = rss(daemon.pid).saturating_sub(before);
    let code = loop {
        match ws.read() {
            Ok(Message::Close(frame)) => break frame.map(|f| f.code),
            Ok(_) => {}
            Err(e) => panic!("no close frame after {sent} pings: {e}"),
        }
    };
    assert_eq!(code, Some(CloseCode::Policy), "after {sent} pings");
    assert!(grown < 16 << 20, "the daemon grew {} MiB under {sent} pings", grown >> 20);
    // The door still serves a well-behaved client.
    let mut fresh = stockade_testkit::ws::WsRpc(
        stockade_testkit::ws::connect(daemon.ws_addr(), Some(&format!("Bearer {TOKEN}"))).unwrap(),
    );
    assert!(fresh.ok("list", serde_json::json!({}))["sessions"].is_array());
}

#[test]
fn wait_timeout_holds_against_a_stopped_daemon() {
    let home = Home::new();
    let id = home.run_bg("sleep 60")["id"].as_str().unwrap().to_owned();
    let pid = home.daemon_pid().unwrap();
    // SAFETY: kill(2) on the daemon this test's home started (its pid from its lock file).
    unsafe { libc::kill(pid as i32, libc::SIGSTOP) };
    // The stop is delivered asynchronously: the call is made once the daemon is stopped.
    eventually(Duration::from_secs(5), "the daemon in state T", || {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        (stat.rsplit(')').next()?.split_whitespace().next()? == "T").then_some(())
    });
    let started = Instant::now();
    let out = home.run(&["wait", "--timeout", "2s", &id]);
    let took = started.elapsed();
    // SAFETY: as above.
    unsafe { libc::kill(pid as i32, libc::SIGCONT) };
    assert_eq!(out.status.code(), Some(124), "{}", text(&out.stderr));
    let said = text(&out.stderr);
    assert!(
        said.contains(&format!("the daemon (pid {pid}) is stopped: `kill -CONT {pid}`")),
        "{said}"
    );
    // Seen at once (it took 30-65 s before, then the 2 s and a grace).
    assert!(took < Duration::from_secs(2), "wait --timeout 2s took {took:?}");
    // Once the daemon answers again, so does wait.
    let out = home.run(&["wait", "--timeout", "1s", &id]);
    assert_eq!(out.status.code(), Some(124), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("still running"), "{}", text(&out.stdout));
}

/// Puts a swapped home back when dropped, so a failing test still stops its daemon.
struct Swapped {
    home: std::path::PathBuf,
    kept: std::path::PathBuf,
}

impl Drop for Swapped {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.home);
        let _ = std::fs::rename(&self.kept, &self.home);
    }
}

#[test]
fn a_home_swapped_under_a_running_daemon_receives_nothing_and_is_reported() {
    let home = Home::nested("swapped");
    let first = home.json_bg(&["echo before"]);
    assert!(first["id"].is_string(), "{first}");
    // One that ends while the home is swapped.
    let ending = home.json_bg(&["sleep 2"])["id"].as_str().unwrap().to_owned();
    // The home is moved away and another directory put in its place, with a link to the
    // daemon's socket so clients still reach it.
    let kept = home.root().join("swapped.kept");
    std::fs::rename(home.path(), &kept).unwrap();
    let swapped = Swapped { home: home.path().to_owned(), kept: kept.clone() };
    std::fs::create_dir(home.path()).unwrap();
    std::fs::set_permissions(home.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    std::os::unix::fs::symlink(kept.join("stockade.sock"), home.path().join("stockade.sock"))
        .unwrap();

    let out = home.run(&["--no-autostart", "run", "--bg", "echo after"]);
    let said = text(&out.stderr);
    assert!(!out.status.success(), "a run started in a replaced home: {}", text(&out.stdout));
    assert!(said.contains("was replaced since this process opened it"), "{said}");
    let deadline = Instant::now() + Duration::from_secs(10);
    while home.session(&ending)["state"] == "running" {
        assert!(Instant::now() < deadline, "{ending} did not end");
        std::thread::sleep(Duration::from_millis(100));
    }
    // Nothing reached the directory put in its place: no id counter, no spool, no end record.
    let names: Vec<String> = std::fs::read_dir(home.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["stockade.sock"], "written into the replacement");
    // The daemon's log says so within its watch's second.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let log = std::fs::read_to_string(kept.join("daemon.log")).unwrap_or_default();
        if log.contains("was replaced") {
            break;
        }
        assert!(Instant::now() < deadline, "the daemon's log does not say it: {log}");
        std::thread::sleep(Duration::from_millis(100));
    }

    // Put back, the home serves again, and the end record held back reaches it.
    drop(swapped);
    let after = home.json_bg(&["echo back"]);
    assert!(after["id"].is_string(), "{after}");
    let spool = home.path().join("spool");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let record = std::fs::read_dir(&spool)
            .unwrap()
            .flatten()
            .find_map(|d| std::fs::read_to_string(d.path().join(&ending).join("session.json")).ok())
            .unwrap_or_default();
        if record.contains("\"exited\"") {
            break;
        }
        assert!(Instant::now() < deadline, "the end record of {ending} was not written: {record}");
        std::thread::sleep(Duration::from_millis(100));
    }
}
