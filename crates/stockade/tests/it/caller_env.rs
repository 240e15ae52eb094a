//! Commands run where the caller stands: the daemon is auto-started once, from directory A with
//! its own environment (no `FOO`, another `PATH`), and then serves a caller in directory B with
//! `FOO=bar`, an extra `PATH` entry and a venv. `run --bg`, a foreground `run`, a schedule,
//! `restart` from a third directory, MCP `exec_command` without `workdir` (official TypeScript
//! SDK and fastmcp, and two servers from two projects at once) each run in B with B's
//! environment; `--env-clear` starts from nothing; `--remote` sends neither and says where the
//! command ran.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;
use stockade_testkit::child::run_bounded;
use stockade_testkit::{DaemonProc, Home, PATIENCE, text};

use super::mcp_agents::{args as scenario_args, installed};

/// The daemon's own `PATH`, unlike any caller's.
const DAEMON_PATH: &str = "/usr/bin:/bin";
/// What each command prints of where it stands.
const WHERE: &str = r#"pwd; echo "FOO=$FOO"; echo "PATH=$PATH"; echo "VIRTUAL_ENV=$VIRTUAL_ENV""#;
/// Bound on one MCP client scenario.
const SCENARIO_TIMEOUT: Duration = Duration::from_secs(120);

/// A directory of its own (canonical: what `pwd` prints in it).
struct Dir {
    _tmp: tempfile::TempDir,
    path: PathBuf,
}

impl Dir {
    fn new(prefix: &str) -> Dir {
        let tmp = tempfile::Builder::new().prefix(prefix).tempdir().unwrap();
        let path = tmp.path().canonicalize().unwrap();
        Dir { _tmp: tmp, path }
    }

    fn str(&self) -> &str {
        self.path.to_str().unwrap()
    }
}

/// A caller: its directory, `FOO`, and a `PATH` with its own `bin` first.
struct Caller {
    dir: Dir,
    foo_value: &'static str,
}

impl Caller {
    fn new(prefix: &str, foo_value: &'static str) -> Caller {
        Caller { dir: Dir::new(prefix), foo_value }
    }

    fn path_var(&self) -> String {
        format!("{}/bin:{}", self.dir.str(), std::env::var("PATH").unwrap_or_default())
    }

    /// Sets this caller's directory and environment on `c`, as its shell would.
    fn apply<'c>(&self, c: &'c mut Command) -> &'c mut Command {
        c.current_dir(&self.dir.path)
            .env("PWD", &self.dir.path)
            .env("FOO", self.foo_value)
            .env("PATH", self.path_var())
            .env("VIRTUAL_ENV", "/some/venv")
    }

    /// `stockade ARGS` from this caller.
    fn cmd(&self, home: &Home, args: &[&str]) -> Command {
        let mut c = home.cmd(args);
        self.apply(&mut c);
        c
    }

    /// Runs `stockade ARGS` from this caller, insisting on success; stdout.
    fn ok(&self, home: &Home, args: &[&str]) -> String {
        let out = self.cmd(home, args).output().unwrap();
        assert!(out.status.success(), "{args:?}: {}{}", text(&out.stdout), text(&out.stderr));
        text(&out.stdout)
    }

    /// What [`WHERE`] prints when run here.
    fn expected(&self) -> String {
        format!(
            "{}\nFOO={}\nPATH={}\nVIRTUAL_ENV=/some/venv\n",
            self.dir.str(),
            self.foo_value,
            self.path_var()
        )
    }
}

/// Auto-starts `home`'s daemon from a directory of its own with another environment (no `FOO`,
/// no venv, [`DAEMON_PATH`]); that directory must outlive the test's commands.
fn daemon_started_elsewhere(home: &Home) -> Dir {
    let a = Dir::new("daemon-dir-");
    let out = home
        .cmd(&["run", "--bg", "true"])
        .current_dir(&a.path)
        .env("PWD", &a.path)
        .env_remove("FOO")
        .env_remove("VIRTUAL_ENV")
        .env("PATH", DAEMON_PATH)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let pid = home.daemon_pid().expect("the daemon was auto-started");
    assert_eq!(std::fs::read_link(format!("/proc/{pid}/cwd")).unwrap(), a.path);
    a
}

/// The id of a `run --bg --json` answer, remembered for clean-up.
fn started(home: &Home, answer: &str) -> String {
    let answer: Value = serde_json::from_str(answer).unwrap();
    let id = answer["id"].as_str().unwrap().to_owned();
    home.session(&id);
    id
}

#[test]
fn run_bg_and_foreground_run_use_the_callers_directory_and_environment() {
    let home = Home::new();
    let _a = daemon_started_elsewhere(&home);
    let b = Caller::new("caller-b-", "bar");

    let id = started(&home, &b.ok(&home, &["run", "--bg", "--json", WHERE]));
    assert_eq!(home.run(&["wait", "-q", &id]).status.code(), Some(0));
    assert_eq!(home.ok(&["logs", &id]), b.expected(), "run --bg");
    // The session names its directory in `ps`.
    assert_eq!(home.session(&id)["cwd"], b.dir.str());

    let fg = b.ok(&home, &["run", WHERE]);
    assert!(fg.contains(&format!("Output:\n{}", b.expected())), "foreground run: {fg}");
}

#[test]
fn a_schedule_runs_where_it_was_added_and_lists_no_values() {
    let home = Home::new();
    let _a = daemon_started_elsewhere(&home);
    let b = Caller::new("caller-b-", "bar");
    let mut add = b.cmd(&home, &["schedule", "add", "here", "--every", "1s", "--", WHERE]);
    let out = add.env("SECRET_TOKEN", "s3cr3t-not-for-lists").output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let added = text(&out.stdout);
    assert!(added.contains(&format!("in {}, with the environment of", b.dir.str())), "{added}");

    // The first fire (one interval after the add), read once it ended.
    let deadline = Instant::now() + PATIENCE;
    let run = loop {
        let runs = home.json(&["schedule", "runs", "here"]);
        let done = runs["runs"].as_array().unwrap().iter().find(|r| r["state"] != "running");
        if let Some(run) = done {
            break run["id"].as_str().unwrap().to_owned();
        }
        assert!(Instant::now() < deadline, "no fire within {PATIENCE:?}: {runs}");
        std::thread::sleep(Duration::from_millis(100));
    };
    home.ok(&["schedule", "pause", "here"]);
    assert_eq!(home.ok(&["logs", &run]), b.expected(), "a scheduled run");

    // Shown: the directory and how many variables were captured; never their values.
    let listed = home.ok(&["schedule", "list"]);
    let words = |line: &str| line.split_whitespace().map(str::to_owned).collect::<Vec<_>>();
    let mut lines = listed.lines();
    let header = words(lines.next().unwrap());
    let row = words(lines.next().unwrap());
    let at = header.iter().position(|w| w == "ENV").unwrap();
    assert_eq!(header[at + 1], "DIR", "{listed}");
    // The row's LAST cell is two words ("sh-2," "0.2s ago" …): find ENV from the right.
    let dir_at = row.iter().position(|w| w == b.dir.str()).unwrap();
    assert_eq!(row[dir_at - 1], "vars", "{listed}");
    assert!(row[dir_at - 2].parse::<usize>().unwrap() >= 4, "{listed}");
    let json = home.ok(&["schedule", "list", "--json"]);
    assert!(!json.contains("s3cr3t-not-for-lists") && !json.contains("/some/venv"), "{json}");
    let list: Value = serde_json::from_str(&json).unwrap();
    let count = list["schedules"][0]["base_env_vars"].as_u64().unwrap();
    assert!(count >= 4, "FOO, PATH, VIRTUAL_ENV, SECRET_TOKEN at least: {list}");
    assert_eq!(list["schedules"][0]["run"]["cwd"], b.dir.str());
    assert!(list["schedules"][0]["run"].get("base_env").is_none(), "{list}");
    home.ok(&["schedule", "rm", "here"]);
}

#[test]
fn restart_from_elsewhere_runs_where_and_with_what_the_original_had() {
    let home = Home::new();
    let _a = daemon_started_elsewhere(&home);
    let b = Caller::new("caller-b-", "bar");
    let id = started(&home, &b.ok(&home, &["run", "--bg", "--json", WHERE]));
    assert_eq!(home.run(&["wait", "-q", &id]).status.code(), Some(0));

    let c = Dir::new("caller-c-");
    let out = home
        .cmd(&["restart", "--json", &id])
        .current_dir(&c.path)
        .env("PWD", &c.path)
        .env_remove("FOO")
        .env_remove("VIRTUAL_ENV")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let again = started(&home, &text(&out.stdout));
    assert_eq!(home.run(&["wait", "-q", &again]).status.code(), Some(0));
    assert_eq!(home.ok(&["logs", &again]), b.expected(), "restarted from C");
}

#[test]
fn env_clear_starts_from_nothing_but_env() {
    let home = Home::new();
    let _a = daemon_started_elsewhere(&home);
    let b = Caller::new("caller-b-", "bar");
    // `env` sorted by name; dash adds PWD itself, the daemon the session marker.
    let cmd = "env | cut -d= -f1 | sort | tr '\\n' ' '";
    let id = started(
        &home,
        &b.ok(&home, &["run", "--bg", "--json", "--env-clear", "--env", "A=1", cmd]),
    );
    assert_eq!(home.run(&["wait", "-q", &id]).status.code(), Some(0));
    assert_eq!(home.ok(&["logs", &id]), "A PWD STOCKADE_SESSION ");
    let fg = b.ok(&home, &["run", "--env-clear", "--env", "A=1", cmd]);
    assert!(fg.contains("Output:\nA PWD STOCKADE_SESSION \n"), "foreground: {fg}");
    // The same through the fork path of the spawn (where `clone3` is refused).
    let mut forked = b.cmd(&home, &["run", "--env-clear", "--env", "A=1", cmd]);
    let out = forked.env("STOCKADE_TEST_SPAWN_FORK", "1").output().unwrap();
    let fg = text(&out.stdout);
    assert!(fg.contains("Output:\nA PWD STOCKADE_SESSION \n"), "forked: {fg}");
}

/// MCP client `program SCRIPT where …` from `caller` against `home`.
fn mcp_where(home: &Home, caller: &Caller, program: &Path, script: &str) -> Command {
    let mut c = Command::new(program);
    if program.ends_with("python") {
        c.args(["-W", "ignore"]);
    }
    c.arg(installed(script, "the scenario script"));
    scenario_args(&mut c, "where", home);
    caller.apply(&mut c);
    c
}

/// Runs an [`mcp_where`] client to its end (bounded); what its `exec_command` printed.
fn printed(mut client: Command) -> String {
    let done = run_bounded(&mut client, SCENARIO_TIMEOUT);
    done.assert_success("scenario where");
    let measured = done.stdout.lines().find_map(|l| l.strip_prefix("measured ")).unwrap();
    let measured: Value = serde_json::from_str(measured).unwrap();
    measured["output"].as_str().unwrap().to_owned()
}

fn node() -> PathBuf {
    installed("target/mcp-ts/node_modules/@modelcontextprotocol/sdk", "the MCP TypeScript SDK");
    PathBuf::from("node")
}

#[test]
fn mcp_exec_without_workdir_runs_in_the_agents_directory_typescript_sdk_and_fastmcp() {
    let home = Home::new();
    let _a = daemon_started_elsewhere(&home);
    let b = Caller::new("agent-b-", "bar");
    let ts = printed(mcp_where(&home, &b, &node(), "tests/mcp/agents.mjs"));
    assert_eq!(ts, b.expected(), "TypeScript SDK");
    let python = installed("target/fastmcp-venv/bin/python", "fastmcp");
    let fast = printed(mcp_where(&home, &b, &python, "tests/mcp/fastmcp_agent.py"));
    assert_eq!(fast, b.expected(), "fastmcp");
}

#[test]
fn two_mcp_servers_from_two_projects_on_one_daemon_each_see_their_own() {
    let home = Home::new();
    let _a = daemon_started_elsewhere(&home);
    let p1 = Caller::new("project-one-", "one");
    let p2 = Caller::new("project-two-", "two");
    let daemon = home.daemon_pid();
    let one = mcp_where(&home, &p1, &node(), "tests/mcp/agents.mjs");
    let two = mcp_where(&home, &p2, &node(), "tests/mcp/agents.mjs");
    // Both at once, against the one daemon.
    let (one, two) = std::thread::scope(|s| {
        let one = s.spawn(|| printed(one));
        let two = s.spawn(|| printed(two));
        (one.join().unwrap(), two.join().unwrap())
    });
    assert_eq!(one, p1.expected());
    assert_eq!(two, p2.expected());
    assert_eq!(home.daemon_pid(), daemon, "the one daemon served both");
}

#[test]
fn remote_sends_neither_directory_nor_environment_and_names_where_it_ran() {
    let tmp = tempfile::tempdir().unwrap();
    let token = stockade_testkit::owner_token_file(tmp.path(), "caller-env-test-token-77a1");
    let daemon = DaemonProc::start_at(
        &tmp.path().join("home"),
        &["--ws", "127.0.0.1:0", "--token-file", token.to_str().unwrap()],
    )
    .expect("the daemon starts");
    let daemon_dir = std::fs::read_link(format!("/proc/{}/cwd", daemon.pid)).unwrap();
    let url = format!("ws://{}", daemon.ws_addr());
    let b = Caller::new("remote-caller-", "bar");
    let remote = |args: &[&str]| {
        let mut c = Command::new(stockade_testkit::stockade_bin());
        c.args(["--remote", &url, "--token-file", token.to_str().unwrap()]).args(args);
        b.apply(&mut c).env("CLIENT_ONLY", "from-the-client").env_remove("STOCKADE_HOME");
        let out = c.output().unwrap();
        assert!(out.status.success(), "{args:?}: {}{}", text(&out.stdout), text(&out.stderr));
        text(&out.stdout)
    };
    let cmd = r#"pwd; echo "[$CLIENT_ONLY]""#;
    let said = remote(&["run", "--bg", "--yield-ms", "10000", cmd]);
    let ran_in = format!("Ran in: {}\n", daemon_dir.display());
    assert!(said.contains(&ran_in), "the answer names the directory: {said}");
    assert!(said.contains(&format!("Output:\n{}\n[]\n", daemon_dir.display())), "{said}");
    let fg = remote(&["run", cmd]);
    assert!(fg.contains(&ran_in) && fg.contains("\n[]\n"), "foreground: {fg}");
}
