//! What a session shows is what a terminal would have shown: both streams in the order the
//! command wrote them (one pipe, however late the daemon reads it), the model's text rendered
//! (no escape sequences or raw control bytes, a progress bar in its final state), and a write to
//! a REPL answered once its prompt is back, not at the end of the window.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use stockade_testkit::{Home, PATIENCE, text};

/// `sh` that prints `n` lines alternating between stdout and stderr.
fn alternating(n: u32) -> (String, String) {
    let cmd = format!(
        "i=0; while [ $i -lt {n} ]; do echo \"out $i\"; i=$((i+1)); echo \"err $i\" >&2; i=$((i+1)); done"
    );
    let want = (0..n)
        .map(|i| if i.is_multiple_of(2) { format!("out {i}\n") } else { format!("err {i}\n") })
        .collect();
    (cmd, want)
}

#[test]
fn both_streams_keep_the_write_order_20_of_20() {
    let home = Home::new();
    let (cmd, want) = alternating(1000);
    for run in 0..20 {
        let id = home.json_bg(&[&cmd])["id"].as_str().unwrap().to_owned();
        assert_eq!(home.wait_finished(&id)["code"], 0);
        let logs = home.run(&["logs", "--raw", &id]);
        assert_eq!(text(&logs.stdout), want, "run {run}: not in write order");
        // `--stream stderr` of one pipe reads that pipe: both streams, in order.
        assert_eq!(home.ok(&["logs", &id, "--stream", "stderr"]), want, "run {run}");
    }
    // Split capture keeps the streams apart, each exact.
    let id = home.json_bg(&["--capture", "split", &cmd])["id"].as_str().unwrap().to_owned();
    home.wait_finished(&id);
    let err: String =
        want.lines().filter(|l| l.starts_with("err")).map(|l| format!("{l}\n")).collect();
    assert_eq!(home.ok(&["logs", &id, "--stream", "stderr"]), err);
}

/// Sends `SIGCONT` to the daemon when dropped: a failing test never leaves it stopped.
struct Stopped(u32);

impl Stopped {
    fn new(pid: u32) -> Stopped {
        // SAFETY: kill(2) on the daemon's pid, which this test started.
        assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGSTOP) }, 0);
        Stopped(pid)
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        // SAFETY: as above.
        unsafe { libc::kill(self.0 as i32, libc::SIGCONT) };
    }
}

#[test]
fn a_daemon_stopped_for_2_s_splits_and_reorders_nothing() {
    let home = Home::new();
    // A build: 3,000 lines on stdout, a pause where the daemon is stopped, the error on stderr.
    let cmd = "i=1; while [ $i -le 3000 ]; do echo \"compiling unit $i of the build\"; \
               if [ $i = 1500 ]; then sleep 0.3; fi; i=$((i+1)); done; \
               echo 'error: build failed' >&2; exit 1";
    let mut want: String =
        (1..=3000).map(|i| format!("compiling unit {i} of the build\n")).collect();
    want.push_str("error: build failed\n");
    for run in 0..20 {
        let id = home.json_bg(&[cmd])["id"].as_str().unwrap().to_owned();
        let pid = home.daemon_pid().expect("the daemon's pid");
        {
            let _stopped = Stopped::new(pid);
            std::thread::sleep(Duration::from_secs(2));
        }
        assert_eq!(home.wait_finished(&id)["code"], 1);
        let logs = text(&home.run(&["logs", "--raw", &id]).stdout);
        assert_eq!(logs, want, "run {run}: out of order or split");
        assert_eq!(logs.lines().last(), Some("error: build failed"));
        // The tail a model reads ends with the error.
        let tail = home.ok(&["logs", &id, "--tail", "3"]);
        assert!(tail.ends_with("error: build failed\n"), "run {run}: {tail}");
    }
}

/// `stockade mcp` over stdio, driven line by line.
pub(crate) struct Mcp {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    next: u64,
}

impl Mcp {
    fn start(home: &Home) -> Mcp {
        Mcp::start_with(home, &[])
    }

    /// `stockade mcp ARGS…`, initialized.
    pub(crate) fn start_with(home: &Home, args: &[&str]) -> Mcp {
        let mut child = home
            .stockade(&[&["mcp"], args].concat())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let mut mcp = Mcp { child, stdin, stdout, next: 1 };
        mcp.request(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "order-test", "version": "1"}}),
        );
        mcp.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        mcp
    }

    fn send(&mut self, msg: &Value) {
        writeln!(self.stdin, "{msg}").unwrap();
        self.stdin.flush().unwrap();
    }

    pub(crate) fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next;
        self.next += 1;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        loop {
            let mut line = String::new();
            assert!(self.stdout.read_line(&mut line).unwrap() > 0, "stockade mcp closed stdout");
            let msg: Value = serde_json::from_str(&line).unwrap();
            if msg["id"] == id {
                return msg;
            }
        }
    }

    /// A tool's text answer.
    fn call(&mut self, tool: &str, args: Value) -> String {
        let answer = self.request("tools/call", json!({"name": tool, "arguments": args}));
        answer["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_else(|| panic!("{answer}"))
            .to_owned()
    }
}

impl Drop for Mcp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `session_id=` in an answer.
fn session_id(answer: &str) -> String {
    let at = answer.find("sh-").unwrap_or_else(|| panic!("no session id in {answer}"));
    answer[at..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '-').collect()
}

/// The id of the session started last (an answer for a finished one names none).
fn newest_session(home: &Home) -> String {
    let list = home.json(&["ps"]);
    let ids = list["sessions"].as_array().unwrap().iter().filter_map(|s| s["id"].as_str());
    let newest = ids.max_by_key(|id| id.trim_start_matches("sh-").parse::<u64>().unwrap_or(0));
    newest.unwrap_or_else(|| panic!("no session in {list}")).to_owned()
}

#[test]
fn hostile_output_reaches_the_model_rendered_and_counted() {
    let home = Home::new();
    let mut mcp = Mcp::start(&home);
    let cmd = "printf '\\033[31mred\\033[0m plain\\n'; \
               for p in 10 50 100; do printf '\\rprogress %s%%' $p; done; printf '\\n'; \
               printf 'nul:\\000: bell:\\007:\\n'; printf 'bad:\\377\\376:\\n'; \
               printf '\\033]0;title\\007osc gone\\n'; echo done";
    let answer = mcp.call("exec_command", json!({"cmd": cmd, "yield_time_ms": 5000}));
    assert!(answer.contains("Exit code: 0"), "{answer}");
    assert!(answer.contains("red plain\n"), "{answer}");
    assert_eq!(answer.matches("progress").count(), 1, "{answer}");
    assert!(answer.contains("progress 100%\n"), "{answer}");
    assert!(answer.contains("nul:\\x00: bell:\\x07:\n"), "{answer}");
    assert!(answer.contains("bad:\\xff\\xfe:\n"), "{answer}");
    assert!(answer.contains("osc gone\n"), "{answer}");
    let bad: Vec<u8> = answer.bytes().filter(|&b| b < 0x20 && b != b'\n' && b != b'\t').collect();
    assert!(bad.is_empty(), "control bytes {bad:?} in {answer}");
    // The raw bytes stay in the spool, and the counts are the spool's.
    let id = newest_session(&home);
    let raw = home.run(&["logs", "--raw", &id]).stdout;
    assert!(raw.windows(2).any(|w| w == b"\x1b["), "the spool keeps the escapes");
    let total = home.session(&id)["total_bytes"].as_u64().unwrap();
    assert_eq!(raw.len() as u64, total);

    // grep_output shows a matched line rendered too.
    let grep = mcp.call("grep_output", json!({"session_id": id, "pattern": "red"}));
    assert!(grep.contains(":red plain\n"), "{grep}");

    // A 1 MiB line: bounded, cut, counted against the spool.
    let answer = mcp.call(
        "exec_command",
        json!({"cmd": "head -c 1048576 /dev/zero | tr '\\0' 'x'; printf '\\033[0m\\n'", "yield_time_ms": 10000}),
    );
    let bad = answer.bytes().filter(|&b| b < 0x20 && b != b'\n' && b != b'\t').count();
    assert_eq!(bad, 0, "{}", &answer[..answer.len().min(2000)]);
    assert!(answer.len() < 200 * 1024, "{} bytes", answer.len());
    let id = newest_session(&home);
    let total = home.session(&id)["total_bytes"].as_u64().unwrap();
    assert_eq!(total, 1_048_576 + 5);
    assert!(
        answer.contains(&format!("of total_bytes={total}")) || answer.contains("omitted"),
        "{}",
        &answer[..2000.min(answer.len())]
    );
}

#[test]
fn a_repl_step_ends_when_the_prompt_is_back() {
    let home = Home::new();
    let mut mcp = Mcp::start(&home);
    let python = ["python3", "python"]
        .into_iter()
        .find(|p| Command::new(p).arg("-c").arg("0").status().is_ok_and(|s| s.success()));
    let python = python.expect("this test needs python3 on PATH");
    let answer = mcp.call(
        "exec_command",
        json!({"cmd": format!("{python} -i -q"), "tty": true, "yield_time_ms": 10000, "until": "^>>> $"}),
    );
    assert!(answer.contains(">>> "), "{answer}");
    let id = session_id(&answer);
    let mut total = Duration::ZERO;
    for (step, (input, want)) in
        [("1+1\n", "2"), ("print('hi')\n", "hi"), ("x = 6 * 7; x\n", "42")].into_iter().enumerate()
    {
        let started = Instant::now();
        let answer = mcp
            .call("write_stdin", json!({"session_id": id, "chars": input, "yield_time_ms": 5000}));
        let took = started.elapsed();
        total += took;
        assert!(
            answer.contains(want) && answer.trim_end().ends_with(">>>"),
            "step {step}: {answer}"
        );
        assert!(took < Duration::from_secs(3), "step {step} took {took:?}: {answer}");
    }
    // Three steps, each far below the 5 s window on a loaded machine.
    assert!(total < Duration::from_secs(6), "{total:?}");
    eprintln!("three REPL steps took {total:?}");
    mcp.call("kill_session", json!({"session_id": id}));
    let _ = PATIENCE;
}

#[test]
fn a_stream_read_right_after_exec_has_its_own_cursor() {
    let home = Home::new();
    let mut mcp = Mcp::start(&home);
    let answer = mcp.call(
        "exec_command",
        json!({"cmd": "echo out1; echo ERR-LINE >&2; echo out2; sleep 30", "yield_time_ms": 1000, "until": "out2"}),
    );
    assert!(answer.contains("out1\nERR-LINE\nout2\n"), "in write order: {answer}");
    let id = session_id(&answer);
    // The merged answer's cursor is not stderr's: the first stderr read shows it so far.
    let stderr = mcp.call("read_output", json!({"session_id": id, "stream": "stderr"}));
    // One pipe: the stream read shows both streams, in write order.
    assert!(stderr.contains("out1\nERR-LINE\nout2\n"), "{stderr}");
    // Read again without a cursor: it continues after what it showed, so nothing repeats.
    let again = mcp.call("read_output", json!({"session_id": id, "stream": "stderr"}));
    assert!(!again.contains("ERR-LINE"), "{again}");
    mcp.call("kill_session", json!({"session_id": id}));
}

/// `exec_command` with `capture: "split"`: a pipe per stream, so a stream read is that stream's
/// bytes exactly (and the tools list documents the argument).
#[test]
fn exec_command_capture_split_gives_exact_per_stream_reads() {
    let home = Home::new();
    let mut mcp = Mcp::start(&home);
    let tools = mcp.request("tools/list", json!({}));
    let exec =
        tools["result"]["tools"].as_array().unwrap().iter().find(|t| t["name"] == "exec_command");
    let capture = &exec.unwrap()["inputSchema"]["properties"]["capture"];
    assert_eq!(capture["enum"], json!(["pipe", "split"]), "{capture}");
    assert!(capture["description"].as_str().unwrap().contains("split"), "{capture}");
    let (cmd, want) = alternating(1000);
    let cmd = format!("{cmd}; sleep 30");
    let only = |p: &str| -> String {
        want.lines().filter(|l| l.starts_with(p)).map(|l| format!("{l}\n")).collect()
    };
    let (out, err) = (only("out"), only("err"));
    let answer = mcp.call(
        "exec_command",
        json!({"cmd": cmd, "capture": "split", "yield_time_ms": 10000, "until": "err 999"}),
    );
    let id = session_id(&answer);
    assert_eq!(home.session(&id)["capture"], "split", "{answer}");
    let max = json!(100_000);
    for (stream, want) in [("stdout", &out), ("stderr", &err)] {
        let read = mcp.call(
            "read_output",
            json!({"session_id": id, "stream": stream, "after": 0, "max_output_tokens": max}),
        );
        let got: String = read
            .lines()
            .filter(|l| l.starts_with("out ") || l.starts_with("err "))
            .map(|l| format!("{l}\n"))
            .collect();
        assert_eq!(&got, want, "{stream}: {read}");
    }
    // The default keeps one pipe (another command line: the same one would be followed as a
    // retry of the running session).
    let cmd = format!("{cmd}; true");
    let answer =
        mcp.call("exec_command", json!({"cmd": cmd, "yield_time_ms": 10000, "until": "err 999"}));
    let merged = session_id(&answer);
    assert_eq!(home.session(&merged)["capture"], "pipe", "{answer}");
    mcp.call("kill_session", json!({"session_id": id}));
    mcp.call("kill_session", json!({"session_id": merged}));
}
