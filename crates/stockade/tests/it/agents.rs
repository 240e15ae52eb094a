//! Stockade inside the agents people use: the real Codex CLI, Claude Code and opencode
//! (installed by `tests/agents/install-deps.sh`), each configured from README.md's own snippet
//! and driven by a scripted stand-in model on loopback (`tests/agents/drive.py`,
//! `tests/agents/standin.py`). The stand-in calls exec (`seq 1 100000`) → a cursor read → grep →
//! a PTY session, a write into it, a kill → a background session, and records exactly what the
//! agent hands back for each call. The tests assert on that record: what the model reads.
//!
//! The `terminal` script checks what a terminal would have shown: both streams in write order, a
//! build's error last, hostile bytes rendered, a Python REPL stepped through on a terminal.
//!
//! After the agent has exited (and its process group is gone), the background session it
//! started must still run: the daemon `stockade mcp` auto-started is nobody's descendant.

use std::path::Path;
use std::time::Duration;

use serde_json::Value;
use stockade_testkit::child::run_bounded;
use stockade_testkit::{Home, cannot_run, procs, stockade_bin};

/// Bound on one whole agent run (opencode alone takes ~30 s to start on a loaded machine).
const RUN_TIMEOUT: Duration = Duration::from_secs(240);

/// What one run recorded.
pub(crate) struct Run {
    /// The state directory the agent's `stockade mcp` used, cleaned up on drop.
    pub(crate) home: Home,
    /// The stand-in's calls, in order (`tool`, `arguments`).
    pub(crate) calls: Vec<Value>,
    /// What the agent handed back for each call, in order: `payload` as sent, `text` as read.
    pub(crate) texts: Vec<String>,
    /// Claude Code's token-count requests.
    counted: Vec<Value>,
    /// Every tool name the agent offered its model.
    tools: Vec<String>,
    /// When the stand-in made each call and when it got each answer back (seconds, its clock).
    call_times: Vec<f64>,
    result_times: Vec<f64>,
}

fn repo() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

/// Runs `agent` through the `basic` script; `None` (after `cannot_run`) when it is not here.
fn drive(agent: &str, bin: &str) -> Option<Run> {
    drive_with(agent, bin, "basic", &[])
}

/// Runs `agent` through the stand-in's `scenario`, with `extra` arguments to `drive.py`.
pub(crate) fn drive_with(agent: &str, bin: &str, scenario: &str, extra: &[&str]) -> Option<Run> {
    // A bare name is in the first install; a path (`target/…`) names its own.
    let exe = match bin.starts_with("target/") {
        true => repo().join(bin),
        false => repo().join("target/agents-node/node_modules/.bin").join(bin),
    };
    if !exe.exists() {
        cannot_run(&format!(
            "{} is not installed; run tests/agents/install-deps.sh",
            exe.display()
        ));
        return None;
    }
    let home = Home::nested("home/.local/state/stockade");
    let path = format!(
        "{}:{}",
        stockade_bin().parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = run_bounded(
        std::process::Command::new("python3")
            .arg(repo().join("tests/agents/drive.py"))
            .args(["--agent", agent, "--scenario", scenario, "--timeout", "200"])
            .args(extra)
            .arg("--out")
            .arg(home.root())
            .env("PATH", path),
        RUN_TIMEOUT,
    );
    out.assert_success("tests/agents/drive.py");
    let summary: Value = serde_json::from_str(out.stdout.trim()).unwrap();
    let log = |name: &str| std::fs::read_to_string(home.root().join(name)).unwrap_or_default();
    assert_eq!(
        summary["status"],
        0,
        "{agent} did not finish: {summary}\n--- agent stdout\n{}\n--- agent stderr\n{}",
        log("agent.stdout"),
        log("agent.stderr")
    );
    let record = std::fs::read_to_string(home.root().join("record.jsonl")).unwrap();
    let entries: Vec<Value> = record.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let of = |kind: &str| entries.iter().filter(|e| e["kind"] == kind).cloned().collect::<Vec<_>>();
    let texts = of("tool_result").iter().map(|e| e["text"].as_str().unwrap().to_owned()).collect();
    assert!(of("missing_tool").is_empty(), "{agent} did not offer a tool: {record}");
    let tools = of("tools")
        .first()
        .map(|e| e["names"].as_array().unwrap().iter().map(|n| n.as_str().unwrap().to_owned()))
        .into_iter()
        .flatten()
        .collect();
    let times = |kind: &str| of(kind).iter().map(|e| e["t"].as_f64().unwrap_or(0.0)).collect();
    let (call_times, result_times) = (times("call"), times("tool_result"));
    Some(Run {
        calls: of("call"),
        texts,
        counted: of("count_tokens"),
        tools,
        home,
        call_times,
        result_times,
    })
}

/// The lines of `text` that are only a number: the `seq` output the model sees.
fn numbers(text: &str) -> Vec<u64> {
    text.lines().filter_map(|l| l.trim().parse().ok()).collect()
}

/// `seq`'s lines arrive as lines, each once, in order, from `first` on; how many there are.
fn assert_seq_lines(what: &str, text: &str, first: Option<u64>, last: Option<u64>) -> usize {
    let n = numbers(text);
    assert!(n.len() >= 1_000, "{what}: only {} output lines reached the model:\n{text}", n.len());
    assert!(n.windows(2).all(|w| w[1] == w[0] + 1), "{what}: lines missing or repeated:\n{text}");
    if let Some(first) = first {
        assert_eq!(n[0], first, "{what}");
    }
    if let Some(last) = last {
        assert_eq!(n[n.len() - 1], last, "{what}");
    }
    assert!(!text.contains("\\n"), "{what}: escaped newlines (JSON) reached the model:\n{text}");
    n.len()
}

/// The notice (what was left out, the session, how to read more) stands before the first
/// output line and after the last.
fn assert_notice_both_ends(what: &str, text: &str, id: &str) {
    let hint = format!("Read more: read_output session_id={id} after=");
    let lines: Vec<&str> = text.lines().collect();
    let is_number = |l: &&str| l.trim().parse::<u64>().is_ok();
    let first_line = lines.iter().position(is_number).unwrap();
    let last_line = lines.iter().rposition(is_number).unwrap();
    let before = lines[..first_line].join("\n");
    let after = lines[last_line + 1..].join("\n");
    for (end, part) in [("before", &before), ("after", &after)] {
        assert!(
            part.contains("omitted") && part.contains(&hint),
            "{what}: no notice {end}:\n{text}"
        );
    }
}

/// Nothing the agent itself cut or replaced: no agent's marker of a cut.
pub(crate) fn assert_not_cut_by_agent(what: &str, text: &str) {
    for marker in [
        "tokens truncated",
        "lines truncated",
        "output was truncated",
        "MAX_MCP_OUTPUT",
        "<persisted-output>",
    ] {
        assert!(!text.contains(marker), "{what}: the agent cut the answer ({marker}):\n{text}");
    }
}

/// The round trip every agent must pass; `budget` checks the exec answer against the agent's
/// own limit.
pub(crate) fn assert_round_trip(agent: &str, run: &Run, budget: impl Fn(&str)) {
    let tools: Vec<&str> = run.calls.iter().map(|c| c["tool"].as_str().unwrap()).collect();
    assert_eq!(run.texts.len(), 7, "{agent}: calls {tools:?}, answers {:#?}", run.texts);
    let t = &run.texts;

    // 1. exec of seq 1 100000: the end, as lines, once, with the notice at both ends.
    assert!(t[0].contains("Exit code: 0"), "{agent} exec:\n{}", t[0]);
    assert_seq_lines(&format!("{agent} exec"), &t[0], None, Some(100_000));
    assert_notice_both_ends(&format!("{agent} exec"), &t[0], "sh-1");
    assert_not_cut_by_agent(&format!("{agent} exec"), &t[0]);
    budget(&t[0]);

    // 2. the cursor read from the notice's `after=0`: the start, and where to read on.
    assert_eq!(run.calls[1]["arguments"]["after"], 0, "{agent}");
    assert_seq_lines(&format!("{agent} read"), &t[1], Some(1), None);
    let last = *numbers(&t[1]).last().unwrap();
    let next: u64 = (1..=last).map(|i| i.to_string().len() as u64 + 1).sum();
    assert!(
        t[1].contains(&format!("read_output session_id=sh-1 after={next}")),
        "{agent} read: no cursor {next} to read on from:\n{}",
        t[1]
    );
    assert_notice_both_ends(&format!("{agent} read"), &t[1], "sh-1");
    assert_not_cut_by_agent(&format!("{agent} read"), &t[1]);
    budget(&t[1]);

    // 3. grep over the whole log.
    assert!(t[2].contains("1 matching line in sh-1"), "{agent} grep:\n{}", t[2]);
    assert!(t[2].lines().any(|l| l.starts_with("99999:") && l.ends_with(":99999")), "{}", t[2]);

    // 4.–6. a PTY session: started, typed into, killed with its tree.
    assert!(t[3].contains("Process running with session ID sh-2"), "{agent} pty:\n{}", t[3]);
    assert!(t[3].contains("name?"), "{agent} pty:\n{}", t[3]);
    assert!(t[4].contains("got:hello"), "{agent} write:\n{}", t[4]);
    assert!(t[5].contains("sh-2") && t[5].contains("none left"), "{agent} kill:\n{}", t[5]);

    // 7. a background session, which must outlive the agent.
    assert!(t[6].contains("Process running with session ID sh-3"), "{agent} bg:\n{}", t[6]);
    let s = run.home.session("sh-3");
    assert_eq!(s["state"], "running", "{agent}: the background session died with the agent: {s}");
    let pid = u32::try_from(s["pid"].as_u64().unwrap()).unwrap();
    assert!(procs::pid_alive(pid), "{agent}: sh-3's process {pid} is gone");
    let out = run.home.ok(&["read", "sh-3"]);
    assert!(out.contains("survivor-started"), "{out}");
}

#[test]
fn codex_reads_lines_once_within_its_limit_and_its_session_outlives_it() {
    let Some(run) = drive("codex", "codex") else { return };
    // The README's set-up turns Codex's own shell tools off: only Stockade's carry these names.
    for name in ["exec_command", "write_stdin"] {
        assert!(
            !run.tools.iter().any(|t| t == name),
            "Codex's own {name} is offered: {:?}",
            run.tools
        );
        assert!(run.tools.contains(&format!("mcp__stockade__{name}")), "{:?}", run.tools);
    }
    assert_round_trip("codex", &run, |text| {
        // Codex cuts the middle out of a tool output over 10,000 bytes (its limit for a model
        // it has no metadata for, as here): the whole answer, with its own prefix, fits.
        assert!(text.len() <= 10_000, "codex: {} bytes reached the model", text.len());
    });
}

#[test]
fn claude_code_reads_lines_once_within_its_limit_and_its_session_outlives_it() {
    let Some(run) = drive("claude", "claude") else { return };
    assert_round_trip("claude", &run, |text| {
        // Claude Code counts tokens (and may replace the result) only when bytes / 4 is over
        // half of MAX_MCP_OUTPUT_TOKENS (25,000): below that, it is passed as it is.
        assert!(text.len() / 4 <= 12_500, "claude: {} bytes reached the model", text.len());
    });
    assert!(run.counted.is_empty(), "Claude Code had to count tokens: {:?}", run.counted);
}

#[test]
fn opencode_reads_lines_once_within_its_limit_and_its_session_outlives_it() {
    let Some(run) = drive("opencode", "opencode") else { return };
    assert_round_trip("opencode", &run, |text| {
        // opencode keeps the first 2,000 lines / 51,200 bytes of a tool result.
        assert!(text.lines().count() <= 2_000, "opencode: {} lines", text.lines().count());
        assert!(text.len() <= 51_200, "opencode: {} bytes", text.len());
    });
}

/// Codex's code mode (its `code_mode` feature with a model name it knows): the model writes a
/// program that calls Stockade's tools. The result object a program gets carries the output
/// once (no structured content beside the text), whole, with the notice; its text content is
/// the output as lines.
#[test]
fn codex_code_mode_hands_a_program_the_output_once() {
    let args = ["--codex-model", "gpt-5.1-codex", "--codex-feature", "code_mode"];
    let Some(run) = drive_with("codex", "codex", "codemode", &args) else { return };
    assert!(run.tools.iter().any(|t| t == "exec"), "no code-mode tool: {:?}", run.tools);
    assert_eq!(run.texts.len(), 2, "{:?}", run.calls);
    let (object, text) = (&run.texts[0], &run.texts[1]);
    // The whole result object, as `text(r)` hands it over: JSON, the output in it once.
    assert!(!object.contains("structuredContent"), "{object}");
    assert_eq!(object.matches("\\n100000\\n").count(), 1, "{object}");
    assert_eq!(object.matches("\\n99000\\n").count(), 1, "{object}");
    assert!(object.contains("omitted") && object.contains("read_output session_id=sh-1"));
    // Its text content: lines, each once, to the end, the notice at both ends, within the limit.
    let shown = assert_seq_lines("Codex code mode", text, None, Some(100_000));
    assert!(shown >= 1_000, "{shown}");
    assert_notice_both_ends("Codex code mode", text, "sh-2");
    assert!(text.len() <= 10_000 + 200, "{} bytes", text.len());
}

/// The `terminal` script (tests/agents/standin.py): what the model reads is what a terminal
/// would have shown. Both streams in write order, a build's error on stderr its last line, hostile
/// bytes rendered (no control byte but newline and tab, a progress bar once, in its final state),
/// and three steps of a Python REPL on a terminal, each answered once the prompt is back.
fn assert_terminal(agent: &str, bin: &str) {
    let Some(run) = drive_with(agent, bin, "terminal", &[]) else { return };
    let t = &run.texts;
    assert_eq!(t.len(), 8, "{agent}: {:#?}", run.calls);
    // 1. 1,000 alternating lines: in write order, none split.
    let lines: Vec<&str> =
        t[0].lines().filter(|l| l.starts_with("out ") || l.starts_with("err ")).collect();
    assert!(lines.len() >= 500, "{agent}: {} lines reached the model:\n{}", lines.len(), t[0]);
    let first: u32 = lines[0][4..].trim().parse().unwrap();
    for (k, line) in lines.iter().enumerate() {
        let i = first + k as u32;
        let want = if i.is_multiple_of(2) { format!("out {i}") } else { format!("err {i}") };
        assert_eq!(line.trim(), want, "{agent}: out of order:\n{}", t[0]);
    }
    // 2. the build: the error is the last line the model reads, after the last unit.
    let last = t[1].lines().rfind(|l| l.contains("compiling unit") || l.contains("error:"));
    assert_eq!(last.map(str::trim), Some("error: build failed"), "{agent}:\n{}", t[1]);
    assert!(t[1].contains("compiling unit 3000\nerror: build failed"), "{agent}:\n{}", t[1]);
    // 3. hostile output, rendered; counts are the spool's.
    let h = &t[2];
    let bad: Vec<u8> = h.bytes().filter(|&b| b < 0x20 && b != b'\n' && b != b'\t').collect();
    assert!(bad.is_empty(), "{agent}: control bytes {bad:?}:\n{h}");
    assert_eq!(h.matches("progress").count(), 1, "{agent}:\n{h}");
    assert!(h.contains("progress 100%"), "{agent}:\n{h}");
    assert!(h.contains("red plain") && h.contains("nul:\\x00:") && h.contains("bad:\\xff\\xfe:"));
    let spool = run.home.run(&["logs", "--raw", "sh-3"]).stdout;
    let total = run.home.session("sh-3")["total_bytes"].as_u64().unwrap();
    assert_eq!(spool.len() as u64, total, "{agent}");
    assert!(h.contains(&total.to_string()) || !h.contains("total_bytes="), "{agent}:\n{h}");
    // 4. the REPL: the prompt back after each step, each answered well inside its 5 s window.
    assert!(t[3].contains(">>>"), "{agent}:\n{}", t[3]);
    let mut sum = 0.0;
    for (step, want) in [(4, "2"), (5, "hi"), (6, "42")] {
        assert!(
            t[step].contains(want) && t[step].trim_end().ends_with(">>>"),
            "{agent}:\n{}",
            t[step]
        );
        let took = run.result_times[step] - run.call_times[step];
        eprintln!("{agent}: REPL step {} took {took:.3} s", step - 3);
        assert!(took < 2.5, "{agent}: REPL step {} took {took:.3} s", step - 3);
        sum += took;
    }
    assert!(sum < 5.0, "{agent}: three REPL steps took {sum:.3} s");
}

#[test]
fn codex_model_reads_what_a_terminal_showed() {
    assert_terminal("codex", "codex");
}

#[test]
fn claude_code_model_reads_what_a_terminal_showed() {
    assert_terminal("claude", "claude");
}

#[test]
fn opencode_model_reads_what_a_terminal_showed() {
    assert_terminal("opencode", "opencode");
}
