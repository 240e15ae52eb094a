//! What an agent pays through `stockade mcp`, measured with MCP clients nobody here wrote: the
//! official TypeScript SDK (`tests/mcp/agents.mjs`) and fastmcp (`tests/mcp/fastmcp_agent.py`),
//! both installed by `tests/mcp/install-ts-deps.sh` from `scripts/test`. Each scenario asserts
//! its own bounds (calls, text bytes, lateness, progress gaps) and prints what it measured.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use stockade_testkit::child::{Finished, run_bounded};
use stockade_testkit::{Home, stockade_bin};

/// Bound on one scenario run (the longest waits 90 s on purpose).
const SCENARIO_TIMEOUT: Duration = Duration::from_secs(240);

pub(super) fn installed(relative: &str, what: &str) -> PathBuf {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let path = root.join(relative);
    assert!(
        path.exists(),
        "{what} is not installed at {}: run the tests with ./scripts/test, which installs it",
        path.display()
    );
    path
}

pub(super) fn args(c: &mut Command, scenario: &str, home: &Home) {
    c.arg(scenario)
        .arg("--stockade")
        .arg(stockade_bin())
        .args(["--home", home.path_str()])
        .env_remove("STOCKADE_HOME")
        .env_remove("STOCKADE_NO_AUTOSTART")
        .env("STOCKADE_LOG", "error");
}

/// Run `tests/mcp/agents.mjs SCENARIO` (TypeScript SDK) against `home`.
fn typescript(home: &Home, scenario: &str) -> Finished {
    installed("target/mcp-ts/node_modules/@modelcontextprotocol/sdk", "the MCP TypeScript SDK");
    let mut c = Command::new("node");
    c.arg(installed("tests/mcp/agents.mjs", "the scenario script"));
    args(&mut c, scenario, home);
    let done = run_bounded(&mut c, SCENARIO_TIMEOUT);
    done.assert_success(&format!("TypeScript SDK scenario {scenario}"));
    println!("{}", done.stdout);
    done
}

/// Run `tests/mcp/fastmcp_agent.py SCENARIO` (fastmcp) against `home`.
fn fastmcp(home: &Home, scenario: &str) -> Finished {
    let python = installed("target/fastmcp-venv/bin/python", "fastmcp");
    let mut c = Command::new(python);
    c.args(["-W", "ignore"]).arg(installed("tests/mcp/fastmcp_agent.py", "the scenario script"));
    args(&mut c, scenario, home);
    let done = run_bounded(&mut c, SCENARIO_TIMEOUT);
    done.assert_success(&format!("fastmcp scenario {scenario}"));
    println!("{}", done.stdout);
    done
}

#[test]
fn polling_a_200_line_build_costs_few_calls_and_little_text() {
    let home = Home::new();
    typescript(&home, "build");
    fastmcp(&home, "build");
}

#[test]
fn following_a_loud_build_without_a_cursor_shows_the_newest_not_every_page() {
    let home = Home::new();
    typescript(&home, "loud");
}

#[test]
fn until_answers_at_the_listening_line() {
    let home = Home::new();
    typescript(&home, "until");
    fastmcp(&home, "until");
}

#[test]
fn a_90_s_wait_outlives_the_sdk_default_timeout_with_progress() {
    let home = Home::new();
    typescript(&home, "progress");
}

#[test]
fn cancelling_a_wait_stops_the_wait_not_the_session() {
    let home = Home::new();
    typescript(&home, "cancel");
}

#[test]
fn list_sessions_of_a_thousand_is_bounded_and_running_first() {
    let home = Home::new();
    typescript(&home, "list");
}

#[test]
fn joining_structured_output_over_a_cursor_walk_rebuilds_the_log() {
    let home = Home::new();
    typescript(&home, "walk");
}

#[test]
fn every_schema_compiles_under_strict_ajv_2020() {
    let home = Home::new();
    typescript(&home, "schemas");
}
