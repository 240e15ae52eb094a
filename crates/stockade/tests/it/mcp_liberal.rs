//! `stockade mcp` over stdio, driven line by line as the newest clients and the less careful
//! ones speak: a request without `initialize` naming its client in `_meta` (MCP 2026-07-28) gets
//! that client's budget; `grep_output` and `list_sessions` stay within it with a notice saying how
//! to page; arguments a tool does not take are ignored and named; a call that is cancelled, whose
//! server dies, or that is retried never kills or doubles its session.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use stockade_testkit::child::STOP_TIMEOUT;
use stockade_testkit::{Home, procs, stockade_bin};

/// Bound on one answer.
const ANSWER: Duration = Duration::from_secs(60);

/// `stockade --home H mcp` over stdio; killed and reaped on drop.
struct Stdio2 {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
    next_id: u64,
}

impl Stdio2 {
    /// Started in another directory than the test's, with no `initialize` sent.
    fn start(home: &Home) -> Stdio2 {
        let mut child = Command::new(stockade_bin())
            .args(["--home", home.path_str(), "mcp"])
            .current_dir(home.path())
            .env_remove("CLAUDECODE")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in stdout.lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Stdio2 { child, stdin, lines, next_id: 1 }
    }

    /// Started and initialised as `client` (the handshake of revisions before 2026-07-28).
    fn initialized(home: &Home, client: &str) -> Stdio2 {
        let mut s = Stdio2::start(home);
        let init = json!({"protocolVersion":"2025-06-18","capabilities":{},
            "clientInfo":{"name":client,"version":"1"}});
        s.call("initialize", init);
        s.send(&json!({"jsonrpc":"2.0","method":"notifications/initialized"}));
        s
    }

    fn send(&mut self, message: &Value) {
        let stdin = self.stdin.as_mut().expect("stdin is open");
        writeln!(stdin, "{message}").unwrap();
        stdin.flush().unwrap();
    }

    /// Send a request; its id.
    fn request(&mut self, method: &str, params: Value) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&json!({"jsonrpc":"2.0","id":id,"method":method,"params":params}));
        id
    }

    /// The answer to request `id` (notifications and other answers skipped), bounded.
    fn answer(&mut self, id: u64) -> Value {
        let deadline = Instant::now() + ANSWER;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = self.lines.recv_timeout(left).expect("an answer within 60 s");
            let value: Value = serde_json::from_str(&line).unwrap();
            if value["id"] == id {
                return value;
            }
        }
    }

    /// The answers to requests `ids`, in that order, whatever order they come in (bounded).
    fn answers(&mut self, ids: &[u64]) -> Vec<Value> {
        let deadline = Instant::now() + ANSWER;
        let mut got: Vec<Option<Value>> = vec![None; ids.len()];
        while got.iter().any(Option::is_none) {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = self.lines.recv_timeout(left).expect("the answers within 60 s");
            let value: Value = serde_json::from_str(&line).unwrap();
            if let Some(at) = ids.iter().position(|id| value["id"] == *id) {
                got[at] = Some(value);
            }
        }
        got.into_iter().flatten().collect()
    }

    fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.request(method, params);
        self.answer(id)
    }

    /// `tools/call` as a 2026-07-28 client: no `initialize`, its name (which the revision makes
    /// optional) in `_meta`.
    fn tool_as(&mut self, client: Option<&str>, name: &str, args: Value) -> String {
        let mut meta = json!({
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
        });
        if let Some(client) = client {
            meta["io.modelcontextprotocol/clientInfo"] =
                json!({"name": client, "version": "2.1.332"});
        }
        let answer =
            self.call("tools/call", json!({"name": name, "arguments": args, "_meta": meta}));
        text_of(&answer)
    }

    fn tool(&mut self, name: &str, args: Value) -> String {
        text_of(&self.call("tools/call", json!({"name": name, "arguments": args})))
    }
}

impl Drop for Stdio2 {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn text_of(answer: &Value) -> String {
    answer["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no text in {answer}"))
        .to_owned()
}

/// The session id an answer names (`sh-N`).
fn session_id(text: &str) -> String {
    let at = text.find("sh-").unwrap_or_else(|| panic!("no session id in {text}"));
    text[at..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '-').collect()
}

#[test]
fn a_client_named_only_in_meta_gets_its_budget_without_initialize() {
    let home = Home::new();
    let mut mcp = Stdio2::start(&home);
    let codex =
        mcp.tool_as(Some("codex-mcp-client"), "exec_command", json!({"cmd": "seq 1 100000"}));
    assert!(codex.len() <= 10_000, "Codex passes 10,000 bytes; the answer had {}", codex.len());
    assert!(codex.contains("100000\n"), "the end is shown: {codex}");
    assert!(codex.contains("read_output"), "it says how to read more: {codex}");
    // Claude Code passes more (no line limit of its own): a call asking for every line gets
    // its bytes' worth.
    let head = json!({"session_id": session_id(&codex), "mode": "head", "max_lines": 100_000});
    let claude = mcp.tool_as(Some("claude-code"), "read_output", head.clone());
    assert!(claude.len() > 30_000 && claude.len() <= 40_000, "Claude Code's: {}", claude.len());
    // The name given once holds for the connection's later requests that leave it out.
    let again = mcp.tool_as(None, "read_output", head);
    assert!(again.len() > 30_000 && again.len() <= 40_000, "{}", again.len());
}

#[test]
fn grep_output_and_list_sessions_stay_within_the_budget_and_say_how_to_page() {
    let home = Home::new();
    let mut mcp = Stdio2::initialized(&home, "codex-mcp-client");
    let build = "for i in $(seq 1 3000); do echo \"compiling unit $i of the workspace\"; \
        [ $((i % 15)) -eq 0 ] && echo \"warning: unit $i has an unused variable named something_long_$i\"; done; true";
    let run = mcp.tool("exec_command", json!({"cmd": build, "yield_time_ms": 30000}));
    assert!(run.contains("Exit code: 0"), "{run}");
    let id = session_id(&run);
    let grep = mcp.tool("grep_output", json!({"session_id": id, "pattern": "^warning"}));
    eprintln!("grep answer: {} bytes", grep.len());
    assert!(grep.len() <= 10_000, "grep answer of {} bytes over Codex's 10,000", grep.len());
    assert!(
        grep.contains("more line(s) not shown") && grep.contains("read_output after="),
        "{grep}"
    );
    let shown = grep.lines().filter(|l| l.contains(":warning: unit")).count();
    assert!(shown >= 50, "{shown} matches shown");
    // What was left out is where the notice says: the next match starts at that offset.
    let after: u64 = grep
        .rsplit("after=")
        .next()
        .unwrap()
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let next = mcp.tool("read_output", json!({"session_id": id, "after": after, "max_lines": 1}));
    assert!(next.contains(&format!("unit {} has", (shown + 1) * 15)), "{next}");

    for i in 0..120 {
        let cmd = format!(
            "echo session {i} with a rather long command line to make the list grow quickly; true"
        );
        mcp.tool("exec_command", json!({"cmd": cmd}));
    }
    let list = mcp.tool("list_sessions", json!({"limit": 500}));
    eprintln!("list answer: {} bytes", list.len());
    assert!(list.len() <= 10_000, "list answer of {} bytes over Codex's 10,000", list.len());
    assert!(list.contains("not shown") && list.contains("limit"), "{list}");
}

#[test]
fn unknown_arguments_are_ignored_and_named() {
    let home = Home::new();
    let mut mcp = Stdio2::initialized(&home, "gemini-cli-mcp-client");
    let text = mcp.tool(
        "exec_command",
        json!({"cmd": "echo liberal", "wait_for_previous": true, "yield_time_ms": 20000}),
    );
    assert!(text.contains("Exit code: 0") && text.contains("liberal"), "{text}");
    assert!(text.contains("does not take wait_for_previous; ignored"), "{text}");
    let id = "sh-1";
    let read = mcp.tool("read_output", json!({"session_id": id, "wait_ms": 10, "bogus": 1}));
    assert!(read.contains("does not take bogus") && !read.contains("wait_ms;"), "{read}");
}

/// Lines of the session's whole output, through the CLI.
fn logs(home: &Home, id: &str) -> String {
    home.ok(&["logs", id])
}

fn marker_count(home: &Home, id: &str, marker: &str) -> usize {
    logs(home, id).lines().filter(|l| l.contains(marker)).count()
}

#[test]
fn a_cancelled_call_leaves_its_build_running_to_the_end_and_the_next_call_reads_it() {
    let home = Home::new();
    let mut mcp = Stdio2::initialized(&home, "claude-code");
    let cmd = "for i in 1 2 3 4 5 6; do echo step $i; sleep 0.5; done; echo BUILD-DONE-cancel";
    let id = mcp.request(
        "tools/call",
        json!({"name":"exec_command","arguments":{"cmd":cmd,"yield_time_ms":20000}}),
    );
    // Cancelled mid-call: once the build has printed its first step.
    let session = wait_for_session(&home, cmd);
    wait_for_output(&home, &session, "step 1");
    mcp.send(&json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":id,"reason":"user"}}));
    let finished = home.wait_finished(&session);
    assert_eq!(finished["state"], "exited", "{finished}");
    assert_eq!(marker_count(&home, &session, "BUILD-DONE-cancel"), 1);
    let read = mcp.tool("read_output", json!({"session_id": session}));
    assert!(read.contains("BUILD-DONE-cancel") && read.contains("Exit code: 0"), "{read}");
    assert_eq!(sessions_running(&home, cmd), 1, "one build, not two");
}

/// An agent (a small Python program) that starts `stockade --home H mcp`, calls `exec_command`
/// with `cmd` and prints the server's pid, then waits to be killed.
const AGENT: &str = r#"
import json, subprocess, sys, time
home, cmd = sys.argv[1], sys.argv[2]
p = subprocess.Popen([sys.argv[3], "--home", home, "mcp"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
def send(m):
    p.stdin.write((json.dumps(m) + "\n").encode()); p.stdin.flush()
send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18",
      "capabilities": {}, "clientInfo": {"name": "claude-code", "version": "1"}}})
p.stdout.readline()
send({"jsonrpc": "2.0", "method": "notifications/initialized"})
send({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
      "params": {"name": "exec_command", "arguments": {"cmd": cmd, "yield_time_ms": 20000}}})
print(p.pid, flush=True)
time.sleep(600)
"#;

#[test]
fn a_build_whose_mcp_server_is_sigtermed_or_whose_agent_dies_runs_to_its_end() {
    for how in ["sigterm", "agent-killed"] {
        let home = Home::new();
        let cmd = format!(
            "for i in 1 2 3 4 5 6; do echo step $i; sleep 0.5; done; echo BUILD-DONE-{how}"
        );
        let mut agent = Command::new("python3")
            .args(["-c", AGENT, home.path_str(), &cmd, stockade_bin().to_str().unwrap()])
            .current_dir(home.path())
            .env_remove("CLAUDECODE")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(agent.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let server: u32 = line.trim().parse().unwrap_or_else(|_| panic!("no pid: {line:?}"));
        let session = wait_for_session(&home, &cmd);
        // Mid-call: the build has begun printing.
        wait_for_output(&home, &session, "step 1");
        let target = if how == "sigterm" { server } else { agent.id() };
        let signal = if how == "sigterm" { libc::SIGTERM } else { libc::SIGKILL };
        // SAFETY: kill(2) on a process this test started (the agent, or its server).
        unsafe { libc::kill(target as i32, signal) };
        let asked = Instant::now();
        while procs::pid_alive(server) && asked.elapsed() < STOP_TIMEOUT {
            std::thread::sleep(Duration::from_millis(5));
        }
        let took = asked.elapsed();
        let _ = agent.kill();
        let _ = agent.wait();
        eprintln!("{how}: stockade mcp exited {took:?} after that, mid-call");
        assert!(!procs::pid_alive(server), "{how}: the server is still there");
        assert!(took < Duration::from_secs(1), "{how}: exit took {took:?}");
        let finished = home.wait_finished(&session);
        assert_eq!(finished["state"], "exited", "{how}: {finished}");
        assert_eq!(marker_count(&home, &session, &format!("BUILD-DONE-{how}")), 1);
        let mut next = Stdio2::initialized(&home, "claude-code");
        let read = next.tool("read_output", json!({"session_id": session}));
        assert!(read.contains(&format!("BUILD-DONE-{how}")), "{how}: {read}");
    }
}

#[test]
fn a_timed_out_call_asked_again_gets_the_running_session_back() {
    let home = Home::new();
    let mut mcp = Stdio2::initialized(&home, "mcp");
    let cmd = "for i in 1 2 3 4 5 6; do echo step $i; sleep 0.5; done; echo BUILD-DONE-retry";
    // The client gives up on the call (it cancels it) before any answer came.
    let first = mcp.request(
        "tools/call",
        json!({"name":"exec_command","arguments":{"cmd":cmd,"yield_time_ms":20000}}),
    );
    let id = wait_for_session(&home, cmd);
    mcp.send(&json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":first,"reason":"timeout"}}));
    // The model asks again: the answer is the first call's session, to its end.
    let again = mcp.tool("exec_command", json!({"cmd": cmd, "yield_time_ms": 20000}));
    // Cancelled (or, if the cancel is still on its way, waiting): either way not answered.
    assert!(again.contains("instead of starting a second copy"), "{again}");
    assert_eq!(session_id(&again), id, "{again}");
    assert!(again.contains("BUILD-DONE-retry") && again.contains("Exit code: 0"), "{again}");
    assert_eq!(marker_count(&home, &id, "BUILD-DONE-retry"), 1);
    assert_eq!(sessions_running(&home, cmd), 1, "one build");
    // A call asked again while the first still waits on this connection (a client that gave
    // up without cancelling) follows it too.
    let cmd = "sleep 2; echo BUILD-DONE-waiting";
    let first = mcp.request(
        "tools/call",
        json!({"name":"exec_command","arguments":{"cmd":cmd,"yield_time_ms":20000}}),
    );
    wait_for_session(&home, cmd);
    let again = mcp.request(
        "tools/call",
        json!({"name":"exec_command","arguments":{"cmd":cmd,"yield_time_ms":20000}}),
    );
    let both = mcp.answers(&[first, again]);
    let (first, again) = (text_of(&both[0]), text_of(&both[1]));
    assert!(again.contains("still waiting for its answer"), "{again}");
    assert!(first.contains("BUILD-DONE-waiting") && again.contains("BUILD-DONE-waiting"));
    assert_eq!(sessions_running(&home, cmd), 1, "one run");
}

#[test]
fn a_command_whose_answer_was_delivered_runs_again_with_the_new_result() {
    let home = Home::new();
    let mut mcp = Stdio2::initialized(&home, "mcp");
    std::fs::write(home.path().join("verdict"), "FAIL\n").unwrap();
    // Still running when answered (the answer names it), as a slow test suite is.
    let cmd = "cat verdict; sleep 30";
    let first = mcp.tool("exec_command", json!({"cmd": cmd, "yield_time_ms": 300}));
    assert!(first.contains("FAIL") && first.contains("Process running"), "{first}");
    // The model edits and re-runs within seconds: the new run, not the old one.
    std::fs::write(home.path().join("verdict"), "PASS\n").unwrap();
    let second = mcp.tool("exec_command", json!({"cmd": cmd, "yield_time_ms": 300}));
    assert!(!second.contains("second copy"), "{second}");
    assert!(second.contains("PASS") && !second.contains("FAIL"), "{second}");
    assert_ne!(session_id(&first), session_id(&second));
    assert_eq!(sessions_running(&home, cmd), 2, "two runs");
    for answer in [first, second] {
        home.ok(&["kill", &session_id(&answer)]);
    }
}

#[test]
fn two_servers_running_one_command_in_one_directory_at_once_get_two_sessions() {
    let home = Home::new();
    let mut one = Stdio2::initialized(&home, "claude-code");
    let mut two = Stdio2::initialized(&home, "claude-code");
    let cmd = "sleep 1; echo BUILD-DONE-two";
    let args = json!({"name":"exec_command","arguments":{"cmd":cmd,"yield_time_ms":20000}});
    let (a, b) = (one.request("tools/call", args.clone()), two.request("tools/call", args));
    let (a, b) = (text_of(&one.answer(a)), text_of(&two.answer(b)));
    assert!(a.contains("BUILD-DONE-two") && b.contains("BUILD-DONE-two"), "{a}\n{b}");
    assert!(!a.contains("second copy") && !b.contains("second copy"), "{a}\n{b}");
    assert_eq!(sessions_running(&home, cmd), 2, "two runs");
}

/// The running session whose command is `cmd`, waited for (bounded).
fn wait_for_session(home: &Home, cmd: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let list = home.json(&["ps", "--all"]);
        if let Some(s) = list["sessions"].as_array().unwrap().iter().find(|s| s["command"] == cmd) {
            return s["id"].as_str().unwrap().to_owned();
        }
        assert!(Instant::now() < deadline, "no session for {cmd}: {list}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits (bounded) until the session's output has a line containing `marker`.
fn wait_for_output(home: &Home, id: &str, marker: &str) {
    stockade_testkit::eventually(
        Duration::from_secs(20),
        &format!("{id} to print {marker}"),
        || (marker_count(home, id, marker) > 0).then_some(()),
    );
}

fn sessions_running(home: &Home, cmd: &str) -> usize {
    let list = home.json(&["ps", "--all"]);
    list["sessions"].as_array().unwrap().iter().filter(|s| s["command"] == cmd).count()
}

#[test]
fn a_stream_read_of_one_pipe_and_a_key_whose_session_died_with_the_daemon_say_so() {
    let home = Home::new();
    let mut mcp = Stdio2::initialized(&home, "mcp");
    let both = mcp.tool("exec_command", json!({"cmd": "echo out; echo err >&2"}));
    assert!(both.contains("Exit code: 0"), "{both}");
    // The first session of a fresh home.
    let read = mcp.tool("read_output", json!({"session_id": "sh-1", "stream": "stderr"}));
    let first = read.lines().next().unwrap();
    assert!(first.starts_with("Note: stream=stderr cannot be split out"), "{read}");
    assert!(read.contains("out") && read.contains("err"), "both streams are shown: {read}");

    let cmd = "sleep 300";
    let args = json!({"cmd": cmd, "yield_time_ms": 100, "idempotency_key": "key-of-a-dead-run"});
    let started = mcp.tool("exec_command", args.clone());
    assert!(started.contains("Process running"), "{started}");
    let daemon = home.daemon_pid().expect("a daemon");
    // SAFETY: kill(2) on the daemon this test's server started.
    unsafe { libc::kill(daemon as i32, libc::SIGKILL) };
    let killed = Instant::now();
    while procs::pid_alive(daemon) && killed.elapsed() < STOP_TIMEOUT {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(!procs::pid_alive(daemon), "the daemon outlived SIGKILL");
    // The next call starts a daemon again, whose recovery ended the session.
    let again = mcp.tool("exec_command", args);
    let first = again.lines().next().unwrap();
    assert!(
        first.contains(
            "it was terminated when the daemon died: call again without idempotency_key to run it"
        ),
        "{again}"
    );
    let fresh = mcp.tool("exec_command", json!({"cmd": cmd, "yield_time_ms": 100}));
    assert!(fresh.contains("Process running") && !fresh.contains("Note:"), "{fresh}");
    home.ok(&["kill", &session_id(&fresh)]);
}

#[test]
fn a_server_started_with_a_stripped_environment_says_so_on_stderr() {
    let home = Home::new();
    let run = |env: &[(&str, &str)]| {
        let mut c = Command::new(stockade_bin());
        c.args(["--home", home.path_str(), "mcp"]).env_clear().envs(env.iter().copied());
        stockade_testkit::child::run_bounded(&mut c, ANSWER)
    };
    // What the MCP SDKs pass a stdio server by default.
    let stripped = run(&[("HOME", home.path_str()), ("PATH", "/usr/bin:/bin"), ("USER", "u")]);
    // No client spoke: the server ended at the end of its input, having said it at start.
    assert!(
        stripped.stderr.contains("started with a stripped environment (only")
            && stripped.stderr.contains("env_vars"),
        "{}",
        stripped.stderr
    );
    let full = run(&[("HOME", home.path_str()), ("PATH", "/usr/bin:/bin"), ("PROJECT", "x")]);
    assert!(full.stderr.contains("initialize"), "{}", full.stderr);
    assert!(!full.stderr.contains("stripped"), "{}", full.stderr);
}

#[test]
fn a_call_whose_server_died_is_followed_by_the_next_server() {
    let home = Home::new();
    let cmd = "for i in 1 2 3 4 5 6; do echo step $i; sleep 0.5; done; echo BUILD-DONE-next";
    let mut first = Stdio2::initialized(&home, "mcp");
    first.request(
        "tools/call",
        json!({"name":"exec_command","arguments":{"cmd":cmd,"yield_time_ms":20000}}),
    );
    let id = wait_for_session(&home, cmd);
    // The client's connection is lost: its stdio server goes with it, the answer never sent.
    drop(first);
    let mut next = Stdio2::initialized(&home, "mcp");
    let again = next.tool("exec_command", json!({"cmd": cmd, "yield_time_ms": 20000}));
    assert!(again.contains("never reached you"), "{again}");
    assert!(again.contains(&id) && again.contains("BUILD-DONE-next"), "{again}");
    assert_eq!(sessions_running(&home, cmd), 1, "one build");
    // Answered now: the same command again is a new run.
    let fresh = next.tool("exec_command", json!({"cmd": cmd, "yield_time_ms": 100}));
    assert!(!fresh.contains("second copy"), "{fresh}");
    assert_eq!(sessions_running(&home, cmd), 2, "{fresh}");
    home.ok(&["kill", &session_id(&fresh)]);
}
