//! `stockade mcp` driven by the official MCP Inspector in CLI mode (installed by `scripts/test`)
//! over stdio. Each Inspector call starts its own `stockade mcp`, so these tests also show that
//! sessions live in the daemon, not in the MCP server.

use serde_json::Value;
use stockade_testkit::Home;
use stockade_testkit::child::Finished;

fn json(out: &Finished) -> Value {
    serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}):\n{}\n--- stderr\n{}", out.stdout, out.stderr))
}

#[test]
fn inspector_lists_the_tools_with_schemas() {
    let home = Home::new();
    let out = home.inspector(&["--method", "tools/list"]);
    out.assert_success("inspector tools/list");
    let listed = json(&out);
    let tools = listed["tools"].as_array().unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "exec_command",
            "write_stdin",
            "read_output",
            "grep_output",
            "kill_session",
            "list_sessions"
        ]
    );
    for tool in tools {
        assert_eq!(tool["inputSchema"]["type"], "object", "{tool}");
        assert_eq!(tool["outputSchema"]["type"], "object", "{tool}");
    }
    let exec = &tools[0]["description"].as_str().unwrap();
    assert!(exec.contains("do NOT pipe") && exec.contains("read_output"), "{exec}");
}

#[test]
fn inspector_runs_echo_and_gets_the_codex_layout() {
    let home = Home::new();
    let out = home.inspector(&[
        "--method",
        "tools/call",
        "--tool-name",
        "exec_command",
        "--tool-arg",
        "cmd=echo hello inspector",
    ]);
    out.assert_success("inspector tools/call exec_command");
    let result = json(&out);
    assert_eq!(result["isError"], false, "{result}");
    let text = result["content"][0]["text"].as_str().unwrap();
    assert!(text.starts_with("Exit code: 0\nWall time: "), "{text}");
    assert!(text.ends_with("Output:\nhello inspector\n"), "{text}");
    assert_eq!(result["structuredContent"]["code"], 0);
    assert_eq!(result["structuredContent"]["output"], "hello inspector\n");
}

#[test]
fn inspector_sees_a_session_from_an_earlier_server_and_kills_it() {
    let home = Home::new();
    let started = home.inspector(&[
        "--method",
        "tools/call",
        "--tool-name",
        "exec_command",
        "--tool-arg",
        "cmd=sleep 120",
        "background=true",
        "yield_time_ms=0",
    ]);
    started.assert_success("inspector exec_command background");
    let started = json(&started);
    assert_eq!(started["structuredContent"]["state"], "running", "{started}");
    let id = started["structuredContent"]["id"].as_str().unwrap().to_owned();

    let listed = home.inspector(&["--method", "tools/call", "--tool-name", "list_sessions"]);
    listed.assert_success("inspector list_sessions");
    let listed = json(&listed);
    let sessions = listed["structuredContent"]["sessions"].as_array().unwrap();
    assert!(sessions.iter().any(|s| s["id"] == id.as_str() && s["state"] == "running"));

    let killed = home.inspector(&[
        "--method",
        "tools/call",
        "--tool-name",
        "kill_session",
        "--tool-arg",
        &format!("session_id={id}"),
    ]);
    killed.assert_success("inspector kill_session");
    let killed = json(&killed);
    assert_eq!(killed["structuredContent"]["report"]["terminated"], true, "{killed}");
}

#[test]
fn inspector_gets_a_tool_error_for_an_unknown_session() {
    let home = Home::new();
    let out = home.inspector(&[
        "--method",
        "tools/call",
        "--tool-name",
        "read_output",
        "--tool-arg",
        "session_id=sh-404",
    ]);
    let result = json(&out);
    assert_eq!(result["isError"], true, "{result}");
    let text = result["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("sh-404") && text.contains("list_sessions"), "{text}");
}
