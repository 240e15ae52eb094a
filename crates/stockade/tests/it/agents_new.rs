//! The agents that came after the first three, through the same harness (`tests/agents/`):
//! Claude Code's newest release (MCP 2026-07-28, deferred tools found with ToolSearch), Gemini
//! CLI over stdio and `--http`, Qwen Code (deferred tools behind `tool_search`/`tool_call`) and
//! the OpenAI Agents SDK (a 5 s tool timeout). Each is driven by the scripted stand-in model; the
//! tests assert on what the agent handed its model.

use std::collections::BTreeSet;

use crate::agents::{Run, assert_not_cut_by_agent, assert_round_trip, drive_with};

const CLAUDE_NEW: &str = "target/agents-node-claude-new/node_modules/.bin/claude";
const GEMINI: &str = "target/agents-node-claude-new/node_modules/.bin/gemini";
const QWEN: &str = "target/agents-node-claude-new/node_modules/.bin/qwen";
const AGENTS_SDK: &str = "target/agents-venv/bin/python";

/// Every agent of the harness: (name for drive.py, its executable).
const ALL: &[(&str, &str)] = &[
    ("codex", "codex"),
    ("claude", "claude"),
    ("claude-new", CLAUDE_NEW),
    ("opencode", "opencode"),
    ("gemini", GEMINI),
    ("qwen", QWEN),
    ("agents-sdk", AGENTS_SDK),
];

/// What the stand-in recorded of kind `kind`.
fn recorded(run: &Run, kind: &str) -> Vec<serde_json::Value> {
    let record = std::fs::read_to_string(run.home.root().join("record.jsonl")).unwrap();
    record
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|e| e["kind"] == kind)
        .collect()
}

/// The deferred-tool searches the stand-in made found these tools first, on the first try; a
/// tool it never had to search for was loaded by an earlier search, and it called it.
fn assert_found_first(agent: &str, run: &Run, tools: &[&str]) {
    let searches = recorded(run, "search");
    for tool in tools {
        let Some(s) = searches.iter().find(|s| s["wanted"] == *tool) else {
            let called =
                run.calls.iter().any(|c| c["tool"].as_str().is_some_and(|t| t.ends_with(tool)));
            assert!(called, "{agent}: {tool} neither searched for nor called: {searches:?}");
            continue;
        };
        assert_eq!(s["first_try"], true, "{agent}: {tool} was not the first result: {s}");
    }
}

#[test]
fn claude_code_newest_reads_lines_once_within_its_limit_and_finds_the_tools() {
    let Some(run) = drive_with("claude-new", CLAUDE_NEW, "basic", &[]) else { return };
    assert_round_trip("claude-new", &run, |text| {
        // Its limit is ~50 KB (bytes / 4 over half of 25,000 tokens is counted and replaced).
        assert!(text.len() / 4 <= 12_500, "claude-new: {} bytes reached the model", text.len());
    });
    assert_found_first("claude-new", &run, &["exec_command", "read_output", "kill_session"]);
    let log = std::fs::read_to_string(run.home.root().join("claude-debug.log")).unwrap();
    assert_stopped_by_sigint(&log, "claude-new");
}

/// Claude Code stops a stdio server with SIGINT, looks every 50 ms whether it is gone (logging
/// "exited cleanly" when a look finds it gone), and 100 ms after the signal either finds it gone
/// (then it stops looking, logging nothing) or logs "SIGINT failed" and sends SIGTERM, then
/// SIGKILL. So a server that ended within 100 ms of SIGINT leaves the SIGINT line and neither of
/// the others, whether or not a 50 ms look caught it first.
fn assert_stopped_by_sigint(log: &str, what: &str) {
    let tail: String = log.lines().filter(|l| l.contains("stockade")).collect();
    assert!(log.contains("Sending SIGINT to MCP server process"), "{what}: no SIGINT: {tail}");
    assert!(
        !log.contains("SIGINT failed") && !log.contains("SIGKILL"),
        "{what}: the server outlived SIGINT by 100 ms: {tail}"
    );
}

#[test]
fn claude_code_newest_never_sigkills_the_server_over_ten_runs() {
    for i in 0..10 {
        let Some(run) = drive_with("claude-new", CLAUDE_NEW, "seqhttp", &[]) else { return };
        let log = std::fs::read_to_string(run.home.root().join("claude-debug.log")).unwrap();
        assert_stopped_by_sigint(&log, &format!("run {i}"));
    }
}

#[test]
fn claude_code_newest_reads_a_3000_line_build_uncut_with_the_id_and_how_to_read_more() {
    let Some(run) = drive_with("claude-new", CLAUDE_NEW, "build", &[]) else { return };
    assert_eq!(run.texts.len(), 2, "{:?}", run.calls);
    let exec = &run.texts[0];
    assert!(exec.contains("Exit code: 1"), "{exec}");
    assert!(exec.contains("Read more: read_output session_id=sh-1 after="), "{exec}");
    assert!(exec.len() <= 50_000, "{} bytes", exec.len());
    assert_not_cut_by_agent("claude-new build", exec);
    let last = exec.lines().rfind(|l| !l.trim().is_empty() && !l.starts_with('[')).unwrap();
    assert!(last.contains("error: build failed"), "the error is the last output line: {exec}");
    // Whole lines only: every "Compiling" line is complete.
    for line in exec.lines().filter(|l| l.contains("Compiling unit")) {
        assert!(line.ends_with(".rs)"), "a cut line: {line:?}");
    }
    let read = &run.texts[1];
    assert!(read.contains("   Compiling unit 1 of the workspace (src/unit_1.rs)"), "{read}");
}

/// Every warning line (the unit numbers) an answer shows.
fn warnings(text: &str) -> BTreeSet<u64> {
    text.lines()
        .filter_map(|l| l.split("warning: unit ").nth(1))
        .filter_map(|rest| rest.split(':').next()?.parse().ok())
        .collect()
}

#[test]
fn grep_output_of_200_matches_reaches_every_agent_with_nothing_dropped() {
    for (agent, bin) in ALL {
        let Some(run) = drive_with(agent, bin, "grep", &[]) else { continue };
        assert!(run.texts.len() >= 2, "{agent}: {:?}", run.calls);
        let grep = &run.texts[1];
        assert_not_cut_by_agent(&format!("{agent} grep"), grep);
        // The grep answer, and the pages it said to read on with, hold all 200, each once.
        let mut seen = warnings(grep);
        for page in &run.texts[2..] {
            assert_not_cut_by_agent(&format!("{agent} page"), page);
            seen.extend(warnings(page));
        }
        let want: BTreeSet<u64> = (1..=200).map(|i| i * 15).collect();
        let missing: Vec<_> = want.difference(&seen).collect();
        assert!(
            missing.is_empty(),
            "{agent}: warnings of units {missing:?} never reached the model"
        );
        eprintln!(
            "{agent}: grep answer {} bytes, {} page(s) more",
            grep.len(),
            run.texts.len() - 2
        );
    }
}

#[test]
fn gemini_cli_and_qwen_code_read_lines_once_within_their_limits() {
    // Gemini CLI cuts a result over 40,000 characters; Qwen Code files one over 28,000 away.
    for (agent, bin, limit) in [("gemini", GEMINI, 40_000), ("qwen", QWEN, 28_000)] {
        let Some(run) = drive_with(agent, bin, "basic", &[]) else { return };
        assert_round_trip(agent, &run, |text| {
            assert!(text.len() <= limit, "{agent}: {} bytes", text.len());
        });
    }
}

#[test]
fn gemini_cli_over_http_lists_the_tools_and_runs_seq_with_wait_for_previous() {
    let Some(run) = drive_with("gemini-http", GEMINI, "seqhttp", &[]) else { return };
    assert!(
        run.calls.iter().any(|c| c["arguments"]["wait_for_previous"] == true),
        "{:?}",
        run.calls
    );
    assert_eq!(run.texts.len(), 1, "{:?}", run.calls);
    let text = &run.texts[0];
    assert!(text.contains("Exit code: 0") && text.contains("\n100000\n"), "{text}");
    assert!(text.contains("does not take wait_for_previous; ignored"), "{text}");
    assert!(text.len() <= 40_000, "{} bytes", text.len());
}

#[test]
fn a_build_retried_after_the_agents_sdk_timeout_runs_once_and_is_read_to_its_end() {
    let Some(run) = drive_with("agents-sdk", AGENTS_SDK, "retry", &[]) else { return };
    let t = &run.texts;
    assert!(t.len() >= 2, "{:?}", run.calls);
    // The SDK gave up after its 5 s; the model asked again and got the running session.
    assert!(!t[0].contains("sh-"), "the first call did not time out: {}", t[0]);
    assert!(t[1].contains("instead of starting a second copy"), "{}", t[1]);
    assert!(t.last().unwrap().contains("RETRY-BUILD-DONE"), "{t:?}");
    let all = run.home.json(&["ps", "--all"]);
    let builds: Vec<_> = all["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["command"].as_str().unwrap_or_default().contains("RETRY-BUILD-DONE"))
        .collect();
    assert_eq!(builds.len(), 1, "one build: {all}");
    assert_eq!(builds[0]["state"], "exited", "{all}");
    let id = builds[0]["id"].as_str().unwrap();
    let log = run.home.ok(&["logs", id]);
    assert_eq!(log.matches("RETRY-BUILD-DONE").count(), 1, "{log}");
}

/// Claude Code 2.1.332's own ToolSearch, asked with the words a model would use for each tool
/// (the `toolsearch` script of tests/agents/standin.py): "send input to a running process" and
/// the other input searches return `write_stdin` first; every search returns the tool it means
/// among those it loads, the first of Stockade's. Claude Code's own `TaskStop` carries "stop" in
/// its name, which its search weighs above any word of a description or hint, so "stop a
/// running command" finds `TaskStop` first and `kill_session` right after it (loaded by the
/// same search).
#[test]
fn claude_code_newest_tool_search_finds_each_tool_on_the_first_try() {
    let Some(run) = drive_with("claude-new", CLAUDE_NEW, "toolsearch", &[]) else { return };
    let searches = recorded(&run, "search");
    assert_eq!(searches.len(), 10, "{searches:?}");
    for s in &searches {
        let (query, wanted) = (s["query"].as_str().unwrap(), s["wanted"].as_str().unwrap());
        let ranked: Vec<&str> =
            s["ranked"].as_array().unwrap().iter().map(|n| n.as_str().unwrap()).collect();
        eprintln!("{query:?}: {ranked:?}");
        let ours: Vec<&&str> = ranked.iter().filter(|n| n.starts_with("mcp__stockade__")).collect();
        assert!(
            ours.first().is_some_and(|n| n.ends_with(wanted)),
            "{query:?}: not {wanted} first of Stockade's tools: {ranked:?}"
        );
        if query != "stop a running command" {
            assert_eq!(s["first_try"], true, "{query:?}: {wanted} not first: {ranked:?}");
        } else {
            assert!(ranked[..2].iter().any(|n| n.ends_with(wanted)), "{query:?}: {ranked:?}");
        }
    }
}
