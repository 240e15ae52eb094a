//! Remote daemons as a platform runs them: each `stockade daemon run` is PID 1 of its own PID,
//! mount and network namespaces, chrooted into a minimal root (busybox and the binary), serving
//! its door with TLS on a veth address; the clients are this process (the client library) and
//! the real CLI and MCP server with `--remote`, in the host's network namespace.
//!
//! The fleet test runs `STOCKADE_FLEET_DAEMONS` × `STOCKADE_FLEET_SESSIONS` sessions (default
//! the full 8 × 400: about 25 s on 2 cores, most of it starting the namespaces).

use std::collections::BTreeMap;
use std::io::Read as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use stockade_client::{Client, raw_bytes};
use stockade_proto::ReadMode;
use stockade_proto::SessionState;
use stockade_proto::rpc::{
    KillParams, ListParams, NoParams, PtySize, ReadParams, RunParams, SessionInfo, method,
};
use stockade_testkit::eventually;

use crate::remote_support::{Ca, Root, Sandbox, deploy_python, namespaces_usable, repo_root};

/// One test's remote daemons: a test CA and the sandboxes it signs, each started. The CA lives as
/// long as this value; declare the sandboxes after it so they are torn down first.
struct Remote {
    ca: Ca,
}

impl Remote {
    /// `None` (the test returns) where namespaces cannot be used here; `namespaces_usable` has
    /// said why.
    fn new() -> Option<Remote> {
        namespaces_usable().then(|| Remote { ca: Ca::new() })
    }

    /// A sandbox on `root` with its daemon started.
    fn sandbox(&self, root: Root) -> Sandbox {
        let mut sandbox = Sandbox::new(&self.ca, root);
        sandbox.start();
        sandbox
    }
}

/// `stockade --remote URL [--token-file T] [--ca-file C] ARGS` without the sandbox's own
/// credentials (to show what a wrong or missing one says).
fn remote_cli(url: &str, token: Option<&Path>, ca: Option<&Path>, args: &[&str]) -> Command {
    let mut c = Command::new(stockade_testkit::stockade_bin());
    c.arg("--remote").arg(url);
    if let Some(token) = token {
        c.arg("--token-file").arg(token);
    }
    if let Some(ca) = ca {
        c.arg("--ca-file").arg(ca);
    }
    c.args(args);
    c
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// What one session of the mix runs, and what it must print.
enum Kind {
    /// `seq 1 N`: every byte is known.
    Output(Vec<u8>),
    /// A PTY session printing a word.
    Pty(String),
    /// A session whose child escapes with `setsid` (the kill must find it anyway).
    Escape(String),
}

fn session_for(i: usize) -> (RunParams, Kind) {
    let mut p = RunParams { background: true, ..RunParams::default() };
    let kind = match i % 3 {
        0 => {
            let n = 300 + i;
            p.command = format!("seq 1 {n}");
            let text: String = (1..=n).map(|k| format!("{k}\n")).collect();
            Kind::Output(text.into_bytes())
        }
        1 => {
            p.command = format!("echo pty-word-{i}; sleep 600");
            p.pty = Some(PtySize { rows: 24, cols: 80 });
            Kind::Pty(format!("pty-word-{i}"))
        }
        _ => {
            p.command = format!(
                "setsid sleep 600 </dev/null >/dev/null 2>&1 & echo escaped-{i}; sleep 600"
            );
            Kind::Escape(format!("escaped-{i}"))
        }
    };
    (p, kind)
}

/// Every byte of a session from cursor 0, by cursor, until it ends (or, with `until_has`, until
/// its output contains that text).
fn read_by_cursor(client: &mut Client, id: &str, until_has: Option<&str>) -> Vec<u8> {
    let mut bytes = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let r = client
            .call::<method::Read>(ReadParams {
                id: id.to_owned(),
                after: Some(bytes.len() as u64),
                mode: Some(ReadMode::Delta),
                max_bytes: Some(64 * 1024),
                wait_ms: Some(500),
                raw: true,
                ..ReadParams::default()
            })
            .unwrap();
        bytes.extend(raw_bytes(&r).unwrap().unwrap_or_default());
        assert_eq!(bytes.len() as u64, r.view.next_cursor, "{id}: the cursor and the bytes agree");
        let done = match until_has {
            Some(text) => String::from_utf8_lossy(&bytes).contains(text),
            None => r.state.is_terminal() && bytes.len() as u64 >= r.view.total_bytes,
        };
        if done {
            return bytes;
        }
        assert!(std::time::Instant::now() < deadline, "{id}: output never complete");
    }
}

fn list(client: &mut Client) -> BTreeMap<String, SessionInfo> {
    let sessions = client.call::<method::List>(ListParams::default()).unwrap().sessions;
    sessions.into_iter().map(|s| (s.id.clone(), s)).collect()
}

/// Start `count` sleeping sessions on a daemon; their ids.
fn sleepers(client: &mut Client, count: usize) -> Vec<String> {
    (0..count)
        .map(|k| {
            let p = RunParams {
                command: format!("echo sleeper-{k}; sleep 600"),
                background: true,
                ..RunParams::default()
            };
            client.call::<method::Run>(p).unwrap().id
        })
        .collect()
}

#[test]
fn a_fleet_of_namespaced_daemons_serves_kills_and_recovers() {
    let Some(remote) = Remote::new() else { return };
    let daemons = env_usize("STOCKADE_FLEET_DAEMONS", 8);
    let sessions = env_usize("STOCKADE_FLEET_SESSIONS", 400);
    let mut fleet: Vec<Sandbox> = (0..daemons).map(|_| remote.sandbox(Root::Minimal)).collect();
    for s in &fleet {
        // PID 1 of its namespace, as in a container.
        assert_eq!(s.processes().len(), 1, "only the daemon runs in a fresh sandbox");
    }
    let started = std::time::Instant::now();

    // One client, one connection per daemon, the sessions dealt round-robin.
    std::thread::scope(|scope| {
        for (d, sandbox) in fleet.iter().enumerate() {
            scope.spawn(move || {
                let mut client = sandbox.client();
                let mut mine = Vec::new();
                for i in (d..sessions).step_by(daemons) {
                    let (params, kind) = session_for(i);
                    let id = client.call::<method::Run>(params).unwrap().id;
                    mine.push((id, kind));
                }
                for (id, kind) in &mine {
                    match kind {
                        Kind::Output(want) => {
                            let got = read_by_cursor(&mut client, id, None);
                            assert!(got == *want, "{id} on daemon {d}: bytes differ from seq's");
                        }
                        Kind::Pty(word) | Kind::Escape(word) => {
                            read_by_cursor(&mut client, id, Some(word));
                        }
                    }
                }
                for (id, kind) in &mine {
                    if matches!(kind, Kind::Output(_)) {
                        continue;
                    }
                    let kill = client
                        .call::<method::Kill>(KillParams {
                            id: id.clone(),
                            ..KillParams::default()
                        })
                        .unwrap();
                    assert!(kill.report.terminated, "{id} on daemon {d}: {:?}", kill.report);
                }
            });
        }
    });
    for (d, s) in fleet.iter().enumerate() {
        let left = s.processes();
        assert_eq!(left.len(), 1, "daemon {d}: processes left besides PID 1: {left:?}");
    }
    eprintln!(
        "fleet: {daemons} daemons, {sessions} sessions run, read back and killed in {:?}",
        started.elapsed()
    );

    // SIGKILL one daemon mid-run; the others' sessions are untouched; the restarted one shows
    // its lost sessions as failed, with the reason.
    let mut running = Vec::new();
    for s in &fleet {
        let mut c = s.client();
        running.push(sleepers(&mut c, 2));
    }
    let before: Vec<Vec<u32>> = fleet.iter().map(Sandbox::processes).collect();
    fleet[0].sigkill();
    assert!(fleet[0].processes().is_empty());
    for (d, s) in fleet.iter().enumerate().skip(1) {
        assert_eq!(s.processes(), before[d], "daemon {d}: its processes changed");
        let sessions = list(&mut s.client());
        for id in &running[d] {
            assert_eq!(sessions[id].state, SessionState::Running, "{id} on daemon {d}");
        }
    }
    fleet[0].start();
    let sessions = list(&mut fleet[0].client());
    for id in &running[0] {
        match &sessions[id].state {
            SessionState::Failed { reason } => assert!(!reason.is_empty()),
            other => panic!("{id} after the daemon's SIGKILL and restart: {other:?}"),
        }
    }
    assert_eq!(fleet[0].processes().len(), 1, "nothing of the killed daemon's sessions runs");
    for (d, s) in fleet.iter().enumerate().skip(1) {
        let mut c = s.client();
        for id in &running[d] {
            let kill = c
                .call::<method::Kill>(KillParams { id: id.clone(), ..KillParams::default() })
                .unwrap();
            assert!(kill.report.terminated);
        }
        assert_eq!(s.processes().len(), 1, "daemon {d}: processes left");
    }
}

#[test]
fn logs_follow_over_wss_survives_a_daemon_restart_without_losing_or_repeating_bytes() {
    let Some(remote) = Remote::new() else { return };
    let mut sandbox = remote.sandbox(Root::Minimal);
    let mut client = sandbox.client();
    let id = client
        .call::<method::Run>(RunParams {
            command: "i=0; while [ $i -lt 100000 ]; do echo line-$i-abcdefghij; i=$((i+1)); sleep 0.01; done"
                .into(),
            background: true,
            ..RunParams::default()
        })
        .unwrap()
        .id;
    let mut follower = sandbox
        .cli(&["logs", "-f", &id])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = follower.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut all = Vec::new();
        let _ = stdout.read_to_end(&mut all);
        all
    });
    // Mid-stream: some output is out when the daemon dies.
    eventually(Duration::from_secs(30), "some output", || {
        let r = client
            .call::<method::Read>(ReadParams { id: id.clone(), ..ReadParams::default() })
            .ok()?;
        (r.view.total_bytes > 2000).then_some(())
    });
    sandbox.sigkill();
    std::thread::sleep(Duration::from_millis(500));
    sandbox.start();
    let status = stockade_testkit::child::wait_bounded(&mut follower, Duration::from_secs(90))
        .expect("the follower ends once the recovered session is read to its end");
    let printed = reader.join().unwrap();
    let mut err = String::new();
    follower.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    // The recovered session failed (its daemon died): `logs -f` ends with its status, 125.
    assert_eq!(status.code(), Some(125), "logs -f ends with the session's status: {err}");
    assert!(err.contains("reconnecting"), "the follower says it reconnects: {err}");
    let mut client = sandbox.client();
    let spool = read_by_cursor(&mut client, &id, None);
    assert!(spool.len() > 2000);
    assert!(printed == spool, "printed {} bytes, the spool has {}", printed.len(), spool.len());
    let info = &list(&mut client)[&id];
    assert!(matches!(info.state, SessionState::Failed { .. }), "{:?}", info.state);
}

#[test]
fn probes_and_metrics_answer_on_the_door_and_match_stats() {
    let Some(remote) = Remote::new() else { return };
    let sandbox = remote.sandbox(Root::Minimal);
    let mut client = sandbox.client();
    for k in 0..3 {
        let p = RunParams { command: format!("seq 1 {}", 1000 * (k + 1)), ..RunParams::default() };
        client.call::<method::Run>(p).unwrap();
    }
    let id = sleepers(&mut client, 1).remove(0);
    client.call::<method::Kill>(KillParams { id, ..KillParams::default() }).unwrap();
    let stats = client.call::<method::Stats>(NoParams {}).unwrap();
    let scrape = |path: &str, token: bool| {
        let mut c = std::process::Command::new(deploy_python());
        c.arg(repo_root().join("tests/deploy/scrape.py"))
            .arg(format!("https://{}:{}{path}", sandbox.ip, crate::remote_support::PORT))
            .arg("--ca-file")
            .arg(sandbox.ca_file());
        if token {
            c.arg("--token-file").arg(sandbox.token_file());
        }
        let out = c.output().unwrap();
        assert!(out.status.success(), "scrape {path}: {}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    assert_eq!(scrape("/healthz", false)["status"], 200);
    assert_eq!(scrape("/readyz", false)["status"], 200);
    assert_eq!(scrape("/metrics", false)["status"], 401, "metrics need the token");
    let m = scrape("/metrics", true);
    assert_eq!(m["status"], 200, "{m}");
    let samples = &m["samples"];
    let num = |name: &str| samples[name].as_f64().unwrap_or_else(|| panic!("{name} in {samples}"));
    assert_eq!(num("stockade_spooled_bytes"), stats.spooled_bytes as f64);
    assert_eq!(num("stockade_output_bytes"), stats.output_bytes as f64);
    assert_eq!(num("stockade_dropped_bytes"), stats.dropped_bytes as f64);
    for (state, n) in &stats.sessions {
        assert_eq!(num(&format!("stockade_sessions{{state={state}}}")), *n as f64, "{state}");
    }
    assert_eq!(num("stockade_spawn_seconds_count"), 4.0);
    assert_eq!(num("stockade_kills_total"), 1.0);
    assert_eq!(num("stockade_terminate_survivors_total"), 0.0);
    assert!(num("stockade_resident_memory_bytes") > 0.0);
    assert!(num("stockade_connections") >= 1.0);
}

#[test]
fn mcp_remote_passes_the_scenarios_against_a_daemon_in_another_namespace() {
    let Some(remote) = Remote::new() else { return };
    // The host's root: the PTY scenario runs python3 in the session.
    let sandbox = remote.sandbox(Root::Host);
    let home = stockade_testkit::Home::new();
    let url = sandbox.url();
    let token = sandbox.token_file().display().to_string();
    let ca_file = sandbox.ca_file().display().to_string();
    let args = ["--remote", &url, "--token-file", &token, "--ca-file", &ca_file];
    for scenario in ["basic", "big", "pty"] {
        home.python_stdio(scenario, &args)
            .assert_success(&format!("scenario {scenario} over --remote"));
    }
    // The sessions are the remote daemon's, not a local one's.
    assert!(home.daemon_pid().is_none(), "no local daemon was started");
    assert!(!list(&mut sandbox.client()).is_empty());
}

#[test]
fn remote_failures_are_one_plain_sentence() {
    let Some(remote) = Remote::new() else { return };
    let mut sandbox = remote.sandbox(Root::Minimal);
    let run = |c: &mut Command| {
        let out = c.output().unwrap();
        assert!(!out.status.success());
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    // A wrong token.
    let wrong = sandbox.dir.path().join("wrong-token");
    // Long enough for the token-file rule, so the daemon is the one that refuses it.
    std::fs::write(&wrong, "not-the-token-of-this-daemon\n").unwrap();
    std::fs::set_permissions(&wrong, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let url = sandbox.url();
    let err = run(&mut remote_cli(&url, Some(&wrong), Some(sandbox.ca_file()), &["ps"]));
    assert!(err.contains("token was not accepted"), "{err}");
    // A CA that did not sign the daemon's certificate.
    let other_ca = Ca::new();
    let token = sandbox.token_file();
    let err = run(&mut remote_cli(&url, Some(&token), Some(&other_ca.pem()), &["ps"]));
    assert!(err.contains("TLS with the daemon") && err.contains("--ca-file"), "{err}");
    // The other CA's file is read: it is the signature that fails, not the file.
    assert!(!err.contains("cannot read the CA file"), "{err}");
    // No daemon there any more.
    sandbox.sigkill();
    let err = run(&mut sandbox.cli(&["ps"]));
    assert!(err.contains("cannot reach the daemon at wss://"), "{err}");
    // --remote without a token.
    let err = run(remote_cli(&url, None, None, &["ps"]).env_remove("STOCKADE_TOKEN_FILE"));
    assert!(err.contains("needs the door's token"), "{err}");
}

#[test]
fn a_clear_text_door_off_loopback_is_refused_unless_asked_for() {
    let home = stockade_testkit::Home::new();
    let token = home.path().join("token");
    std::fs::write(&token, "t0ken-of-the-clear-text-door-test\n").unwrap();
    std::fs::set_permissions(&token, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let t = token.to_str().unwrap();
    let out = home.run(&["daemon", "run", "--ws", "0.0.0.0:0", "--token-file", t]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("without TLS") && err.contains("--insecure-plaintext"), "{err}");
}

#[test]
fn every_cli_command_drives_a_remote_daemon() {
    let Some(remote) = Remote::new() else { return };
    let sandbox = remote.sandbox(Root::Minimal);
    let ok = |args: &[&str]| {
        let out = sandbox.cli(args).output().unwrap();
        let (stdout, stderr) =
            (stockade_testkit::text(&out.stdout), stockade_testkit::text(&out.stderr));
        assert!(out.status.success(), "stockade --remote {args:?}: {stdout}{stderr}");
        stdout
    };
    // A foreground run goes to the remote daemon too (its root has no /etc/hostname of ours).
    let fg = ok(&["run", "echo from-the-sandbox; ls /"]);
    assert!(fg.contains("from-the-sandbox") && fg.contains("stockade"), "{fg}");
    let bg = ok(&["run", "--bg", "--json", "seq 1 5000; sleep 600"]);
    let id =
        serde_json::from_str::<serde_json::Value>(&bg).unwrap()["id"].as_str().unwrap().to_owned();
    assert!(ok(&["ps"]).contains(&id));
    // `grep` exits 1 until the line has been printed: poll without asserting success.
    eventually(Duration::from_secs(30), "the output", || {
        let out = sandbox.cli(&["grep", &id, "^4999$"]).output().unwrap();
        stockade_testkit::text(&out.stdout).contains("4999").then_some(())
    });
    let pty = ok(&["run", "--pty", "--bg", "--json", "cat"]);
    let pty_id =
        serde_json::from_str::<serde_json::Value>(&pty).unwrap()["id"].as_str().unwrap().to_owned();
    let echoed = ok(&["send", "--yield-ms", "1000", &pty_id, "typed-remotely\\n"]);
    assert!(echoed.contains("typed-remotely"), "{echoed}");
    ok(&["schedule", "add", "tick", "--every", "1h", "--", "echo tick"]);
    assert!(ok(&["schedule", "list"]).contains("tick"));
    ok(&["schedule", "rm", "tick"]);
    for id in [&id, &pty_id] {
        ok(&["kill", id]);
    }
    assert_eq!(sandbox.processes().len(), 1, "only the daemon is left");
    let stats: serde_json::Value = serde_json::from_str(&ok(&["stats", "--json"])).unwrap();
    // `seq 1 5000` alone printed 23893 bytes.
    assert!(stats["output_bytes"].as_u64().unwrap() >= 23893, "{stats}");
}
