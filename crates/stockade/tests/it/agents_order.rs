//! Both streams in write order through every agent of the harness (`tests/agents/`): the
//! stand-in model runs the order workloads (`order` / `order20` in `tests/agents/standin.py`) —
//! 1,000 alternating stdout/stderr lines, then a 3,000-line build whose error is on stderr, with
//! the daemon the agent's `stockade mcp` talks to SIGSTOPped for 2 s in the middle of the build —
//! and the tests check what the agent handed its model, and `logs`, for every repetition: write
//! order, the error the last line, no line split. Codex runs the workloads 20 times in one
//! conversation; every other agent once.

use serde_json::Value;

use crate::agents::{Run, assert_not_cut_by_agent, drive_with};

const CLAUDE_NEW: &str = "target/agents-node-claude-new/node_modules/.bin/claude";
const GEMINI: &str = "target/agents-node-claude-new/node_modules/.bin/gemini";
const QWEN: &str = "target/agents-node-claude-new/node_modules/.bin/qwen";
const AGENTS_SDK: &str = "target/agents-venv/bin/python";

/// The lines the workload wrote, in write order.
fn alternating() -> String {
    (0..1000).map(|i| format!("{} {i}\n", if i % 2 == 0 { "out" } else { "err" })).collect()
}

fn build() -> String {
    let mut want: String = (1..=3000).map(|i| format!("compiling unit {i}\n")).collect();
    want.push_str("error: build failed\n");
    want
}

/// The lines of `text` the workload wrote (a notice's lines left out), each one whole.
fn output_lines<'a>(text: &'a str, want: &str) -> Vec<&'a str> {
    let known: std::collections::HashSet<&str> = want.lines().collect();
    let prefixes = ["out ", "err ", "compiling unit", "error:"];
    let lines: Vec<&str> =
        text.lines().filter(|l| prefixes.iter().any(|p| l.trim_start().starts_with(p))).collect();
    for line in &lines {
        assert!(known.contains(line.trim_end()), "a split or foreign line {line:?} in:\n{text}");
    }
    lines
}

/// What the model read is a contiguous run of the written lines, in write order, to the end.
fn assert_in_write_order(what: &str, text: &str, want: &str, at_least: usize) {
    assert_not_cut_by_agent(what, text);
    let got = output_lines(text, want);
    assert!(got.len() >= at_least, "{what}: only {} lines reached the model:\n{text}", got.len());
    let all: Vec<&str> = want.lines().collect();
    let tail = &all[all.len() - got.len()..];
    let got: Vec<&str> = got.iter().map(|l| l.trim_end()).collect();
    assert_eq!(got, tail, "{what}: not the written lines in write order:\n{text}");
}

/// The session a repetition's command ran in (its command names the repetition).
fn session_of<'a>(sessions: &'a [Value], rep: usize, marker: &str) -> &'a Value {
    let tag = format!("REP={rep};");
    let found: Vec<_> = sessions
        .iter()
        .filter(|s| {
            let cmd = s["command"].as_str().unwrap_or_default();
            cmd.contains(&tag) && cmd.contains(marker)
        })
        .collect();
    assert_eq!(found.len(), 1, "rep {rep} {marker}: {sessions:?}");
    found[0]
}

fn assert_order(agent: &str, bin: &str, reps: usize) {
    let scenario = if reps == 1 { "order" } else { "order20" };
    let Some(run) = drive_with(agent, bin, scenario, &[]) else { return };
    // Whatever happened, the daemon is not left stopped for the clean-up.
    if let Some(pid) = run.home.daemon_pid() {
        // SAFETY: kill(2) on the daemon this test's agent started.
        unsafe { libc::kill(pid as i32, libc::SIGCONT) };
    }
    check(agent, &run, reps);
}

fn check(agent: &str, run: &Run, reps: usize) {
    assert_eq!(run.texts.len(), 2 * reps, "{agent}: {:#?}", run.calls);
    let record = std::fs::read_to_string(run.home.root().join("record.jsonl")).unwrap();
    let stops: Vec<Value> = record
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|e| e["kind"] == "stopped" || e["kind"] == "stop_missed")
        .collect();
    let daemon = run.home.daemon_pid().expect("the daemon's pid");
    for rep in 0..reps {
        let stop = stops.iter().find(|s| s["rep"] == rep);
        let stop =
            stop.unwrap_or_else(|| panic!("{agent}: rep {rep} was never stopped: {stops:?}"));
        assert_eq!(stop["kind"], "stopped", "{agent}: {stop}");
        assert_eq!(stop["pid"], daemon, "{agent}: another process was stopped: {stop}");
        assert!(stop["seconds"].as_f64().unwrap() >= 2.0, "{agent}: {stop}");
    }
    let all = run.home.json(&["ps", "--all"]);
    let sessions = all["sessions"].as_array().unwrap();
    let (alt, bld) = (alternating(), build());
    for rep in 0..reps {
        let what = format!("{agent} rep {rep}");
        let (a, b) = (&run.texts[2 * rep], &run.texts[2 * rep + 1]);
        // Codex keeps 10,000 bytes of a tool result: at least its last 500 short lines (the
        // alternating ones) or 300 of the build's reach the model.
        assert_in_write_order(&format!("{what} alternating"), a, &alt, 500);
        assert_in_write_order(&format!("{what} build"), b, &bld, 300);
        assert!(b.contains("Exit code: 1"), "{what}:\n{b}");
        // The last line of output (not the notice, nor an agent's wrapper such as Gemini CLI's
        // `</untrusted_context>`).
        let last = b.lines().rfind(|l| !l.trim().is_empty() && !l.starts_with(['[', '<']));
        assert_eq!(last.map(str::trim), Some("error: build failed"), "{what}:\n{b}");
        for (marker, want) in [("echo \"out $i\"", &alt), ("compiling unit", &bld)] {
            let id = session_of(sessions, rep, marker)["id"].as_str().unwrap().to_owned();
            let logs = run.home.run(&["logs", "--raw", &id]).stdout;
            assert_eq!(String::from_utf8_lossy(&logs), **want, "{what}: logs {id}");
            assert_eq!(run.home.ok(&["logs", &id]), **want, "{what}: logs {id}");
        }
    }
    eprintln!("{agent}: {reps} rep(s) of both order workloads, each build's daemon stopped 2 s");
}

#[test]
fn codex_model_reads_both_streams_in_write_order_20_of_20() {
    assert_order("codex", "codex", 20);
}

#[test]
fn claude_code_model_reads_both_streams_in_write_order() {
    assert_order("claude", "claude", 1);
}

#[test]
fn claude_code_newest_model_reads_both_streams_in_write_order() {
    assert_order("claude-new", CLAUDE_NEW, 1);
}

#[test]
fn opencode_model_reads_both_streams_in_write_order() {
    assert_order("opencode", "opencode", 1);
}

#[test]
fn gemini_cli_model_reads_both_streams_in_write_order() {
    assert_order("gemini", GEMINI, 1);
}

#[test]
fn qwen_code_model_reads_both_streams_in_write_order() {
    assert_order("qwen", QWEN, 1);
}

#[test]
fn agents_sdk_model_reads_both_streams_in_write_order() {
    assert_order("agents-sdk", AGENTS_SDK, 1);
}
