//! `stockade mcp` driven by the official MCP Python SDK (installed by `scripts/test`), over stdio
//! and streamable HTTP. The scenarios themselves are `tests/mcp/scenarios.py`.

use stockade_testkit::Home;
use stockade_testkit::mcp::HttpServer;

#[test]
fn python_sdk_over_stdio_lists_runs_and_reports_tool_errors() {
    let home = Home::new();
    home.python_stdio("basic", &[]).assert_success("scenario basic over stdio");
}

#[test]
fn python_sdk_over_stdio_reads_20_mib_by_cursor_and_greps_it() {
    let home = Home::new();
    home.python_stdio("big", &[]).assert_success("scenario big over stdio");
}

#[test]
fn python_sdk_over_streamable_http_with_a_token() {
    let home = Home::new();
    let mut server = HttpServer::start(&home, &["--token", "test-token-0123456789"]);
    server
        .python("basic", Some("test-token-0123456789"))
        .assert_success("scenario basic over HTTP");
    server.python("big", Some("test-token-0123456789")).assert_success("scenario big over HTTP");
    let refused = server.python("basic", Some("wrong-token"));
    assert!(!refused.status.success(), "a wrong token must be refused:\n{}", refused.stdout);
    let status = server.stop().expect("stockade mcp --http stops on SIGTERM");
    assert!(status.success(), "{status:?}");
}

#[test]
fn sessions_survive_a_restart_of_the_mcp_client() {
    let home = Home::new();
    // Two separate `stockade mcp` processes: the second finds the first one's session.
    home.python_stdio("restart-start", &[]).assert_success("starting a background session");
    home.python_stdio("restart-check", &[]).assert_success("finding it from a new client");
}

#[test]
fn embedded_daemon_serves_the_same_tools_and_leaves_no_daemon_behind() {
    let home = Home::new();
    home.python_stdio("basic", &["--embedded"]).assert_success("scenario basic, --embedded");
    assert_eq!(home.daemon_pid(), None, "--embedded must not start the shared daemon");
}

#[test]
fn python_sdk_types_into_a_pty_repl() {
    let home = Home::new();
    home.python_stdio("pty", &[]).assert_success("scenario pty (python3 -i on a tty)");
}
