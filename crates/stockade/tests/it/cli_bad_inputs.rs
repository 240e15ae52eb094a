//! The table of bad inputs: each command line (and environment) with the exit status and the
//! exact sentence it prints, run through the real binary, and the same table in docs/usage.md
//! ("Errors"), compared here so the two cannot drift. Also what the table's neighbours promise:
//! durations wherever a time is taken, `wait --json`, `~` in paths, a `--bg` session's grace.

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use stockade_testkit::{Home, stockade_bin, text};

/// One bad input. In `args`, `env` and `stderr`, `{home}` is the state directory and `{tmp}`
/// the caller's `HOME` (which holds a file `a-file`); `\xNN` in an argument is that byte.
struct Row {
    args: &'static [&'static str],
    env: &'static [(&'static str, &'static str)],
    status: i32,
    stderr: &'static str,
}

const fn row(args: &'static [&'static str], stderr: &'static str) -> Row {
    Row { args, env: &[], status: 2, stderr }
}

const TABLE: &[Row] = &[
    // Sizes, numbers, ranges.
    row(
        &["run", "--max-bytes", "10XB", "true"],
        "--max-bytes 10XB is not a size; write one such as 4096, 64KiB, 20MiB or 1GiB",
    ),
    row(
        &["run", "--max-lines", "abc", "true"],
        "--max-lines abc is not a whole number; pass digits only, e.g. 100",
    ),
    row(&["run", "--max-lines", "-3", "true"], "--max-lines -3 is negative; pass 0 or more"),
    row(
        &["run", "--max-lines", "99999999999999999999999", "true"],
        "--max-lines 99999999999999999999999 is too large; pass a smaller number",
    ),
    row(
        &["run", "--pty", "--rows", "100000", "true"],
        "--rows 100000 is out of range: pass 1 to 65535",
    ),
    row(&["resize", "sh-1", "0", "80"], "<ROWS> 0 is out of range: pass 1 to 65535"),
    // Durations.
    row(
        &["run", "--timeout", "5x", "true"],
        "--timeout 5x is not a duration; write e.g. 30s, 500ms, 10m or 1h (a plain number is seconds)",
    ),
    row(
        &["run", "--timeout", "-1s", "true"],
        "--timeout -1s is negative; write a duration such as 30s or 500ms",
    ),
    row(
        &["run", "--timeout-ms", "abc", "true"],
        "--timeout-ms abc is not a time; write milliseconds (500) or a duration with a unit (2s, 1m)",
    ),
    row(
        &["run", "--grace-ms", "-5", "true"],
        "--grace-ms -5 is negative; write milliseconds (500) or a duration (2s)",
    ),
    row(
        &["send", "sh-1", "--yield-ms", "1x"],
        "--yield-ms 1x is not a time; write milliseconds (500) or a duration with a unit (2s, 1m)",
    ),
    row(
        &["schedule", "add", "x", "--every", "5x", "true"],
        "--every 5x is not a duration; write e.g. 30s, 500ms, 10m or 1h (a plain number is seconds)",
    ),
    // Ids.
    row(&["kill", "nosuch"], "no session nosuch; `stockade ps -a` lists the sessions"),
    row(&["wait", "sh-0"], "no session sh-0 in {home}; `stockade ps -a` lists the sessions"),
    row(
        &["read", ""],
        "the target is empty; pass a session id (like sh-3), a session directory or a spool file",
    ),
    // Paths, `~` and the state directory.
    row(
        &["run", "--cwd", "~/nosuch", "true"],
        "--cwd {tmp}/nosuch does not exist; create it or pass another directory",
    ),
    row(
        &["run", "--cwd", "~bob/x", "true"],
        "--cwd ~bob/x starts with ~NAME, which is not expanded; write the full path",
    ),
    row(
        &["run", "--cwd", "{tmp}/a-file", "true"],
        "--cwd {tmp}/a-file is not a directory; pass a directory to run in",
    ),
    Row {
        args: &["ps"],
        env: &[("STOCKADE_HOME", "{tmp}/a-file")],
        status: 2,
        stderr: "the state directory {tmp}/a-file is a file; remove it or pass another --home (or STOCKADE_HOME)",
    },
    // Not UTF-8.
    row(&["run", "--env", "\\xff", "true"], "--env \\xff is not UTF-8 text; pass it as UTF-8"),
    row(
        &["run", "echo \\xff"],
        "the argument echo \\xff is not UTF-8 text; commands and names must be UTF-8 (only paths may be other bytes)",
    ),
    // Flags: unknown, missing, malformed, conflicting.
    row(
        &["frobnicate"],
        "`stockade` has no command \"frobnicate\"; `stockade --help` lists what it takes",
    ),
    row(&["run"], "`stockade run` needs <COMMAND>...; `stockade run --help` lists what it takes"),
    row(
        &["run", "--env", "NOEQUALS", "true"],
        "--env NOEQUALS is not KEY=VALUE; write e.g. --env RUST_LOG=debug",
    ),
    row(
        &["run", "--timeout", "5s", "--timeout-ms", "100", "true"],
        "--timeout cannot be used with --timeout-ms; drop one of them",
    ),
    row(
        &["run", "--bg", "--no-cgroup", "true"],
        "--bg cannot be used with --no-cgroup; drop one of them",
    ),
    row(
        &["run", "--yield-ms", "5", "true"],
        "`stockade run` needs --bg; `stockade run --help` lists what it takes",
    ),
    row(&["wait", "--json", "-q", "sh-1"], "--json cannot be used with --quiet; drop one of them"),
    // The remote door.
    row(
        &["--remote", "foo", "ps"],
        "--remote foo is not a ws:// or wss:// URL; pass e.g. --remote wss://10.0.0.5:7433",
    ),
    row(
        &["--remote", "ws://127.0.0.1:9", "ps"],
        "--remote ws://127.0.0.1:9 needs the door's token: pass --token-file FILE before the subcommand, or set STOCKADE_TOKEN_FILE",
    ),
    row(
        &[
            "--remote",
            "ws://127.0.0.1:9",
            "--token-file",
            "{tmp}/a-file",
            "run",
            "--no-cgroup",
            "true",
        ],
        "--no-cgroup cannot be used with --remote: start the remote daemon with `stockade daemon run --no-cgroup` instead",
    ),
];

/// `s` with the placeholders filled in.
fn fill(s: &str, home: &Path, tmp: &Path) -> String {
    s.replace("{home}", home.to_str().unwrap()).replace("{tmp}", tmp.to_str().unwrap())
}

/// An argument with each `\xNN` turned into that byte.
fn arg_bytes(s: &str) -> OsString {
    let mut out = Vec::new();
    let mut rest = s.as_bytes();
    while let Some(at) = rest.windows(2).position(|w| w == b"\\x") {
        out.extend_from_slice(&rest[..at]);
        let hex = std::str::from_utf8(&rest[at + 2..at + 4]).unwrap();
        out.push(u8::from_str_radix(hex, 16).unwrap());
        rest = &rest[at + 4..];
    }
    out.extend_from_slice(rest);
    OsString::from_vec(out)
}

/// A caller's `HOME` with a plain file in it.
fn caller_home() -> tempfile::TempDir {
    let tmp = tempfile::Builder::new().prefix("stockade-caller-").tempdir().unwrap();
    std::fs::write(tmp.path().join("a-file"), "x").unwrap();
    tmp
}

#[test]
fn every_bad_input_prints_its_sentence() {
    let home = Home::new();
    let tmp = caller_home();
    let elsewhere = tempfile::tempdir().unwrap();
    let mut wrong = Vec::new();
    for r in TABLE {
        let mut cmd = home.cmd(&[]);
        cmd.args(r.args.iter().map(|a| arg_bytes(&fill(a, home.path(), tmp.path()))))
            .env("HOME", tmp.path())
            .env("RUST_BACKTRACE", "1")
            .current_dir(elsewhere.path());
        for (k, v) in r.env {
            cmd.env(k, fill(v, home.path(), tmp.path()));
        }
        let out = cmd.output().unwrap();
        let stderr = text(&out.stderr);
        let expected = format!("stockade: {}\n", fill(r.stderr, home.path(), tmp.path()));
        if out.status.code() != Some(r.status) || stderr != expected {
            wrong.push(format!(
                "stockade {:?}\n  status {:?} (expected {})\n  got      {stderr:?}\n  expected {expected:?}",
                r.args,
                out.status.code(),
                r.status
            ));
        }
        assert!(!stderr.contains("panicked") && !stderr.contains("backtrace"), "{stderr}");
        assert_eq!(stderr.lines().count(), 1, "{:?}: one line: {stderr}", r.args);
        assert!(out.stdout.is_empty(), "{:?}: {}", r.args, text(&out.stdout));
    }
    assert!(!elsewhere.path().join("~").exists(), "a directory named ~ was made");
    assert!(TABLE.len() >= 25, "{} rows", TABLE.len());
    assert!(wrong.is_empty(), "{} of {} differ:\n{}", wrong.len(), TABLE.len(), wrong.join("\n"));
}

/// The "Errors" table of docs/usage.md, as the test's table renders it.
fn docs_table() -> String {
    let mut t = String::from("| command line | exit | stderr |\n| --- | --- | --- |\n");
    for r in TABLE {
        let env: String = r.env.iter().map(|(k, v)| format!("{k}={} ", shell_word(v))).collect();
        let args: Vec<String> = r.args.iter().map(|a| shell_word(a)).collect();
        let line = format!("{env}stockade {}", args.join(" "));
        t.push_str(&format!(
            "| {} | {} | {} |\n",
            code(&line),
            r.status,
            code(&format!("stockade: {}", r.stderr))
        ));
    }
    t
}

/// A word as a shell user types it: quoted when needed, `$'…'` for bytes.
fn shell_word(w: &str) -> String {
    if w.contains("\\x") {
        format!("$'{w}'")
    } else if !w.is_empty()
        && w.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_./=:,+@%{}".contains(&b))
    {
        w.to_owned()
    } else {
        format!("'{w}'")
    }
}

/// A Markdown code span that may hold backticks and pipes.
fn code(s: &str) -> String {
    format!("`` {} ``", s.replace('|', "\\|"))
}

const START: &str =
    "<!-- errors-table:start (generated from crates/stockade/tests/it/cli_bad_inputs.rs) -->\n";
const END: &str = "<!-- errors-table:end -->";

#[test]
fn the_docs_show_the_same_table() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/usage.md");
    let docs = std::fs::read_to_string(&path).unwrap();
    let (Some(a), Some(b)) = (docs.find(START), docs.find(END)) else {
        panic!("docs/usage.md has no errors table between {START:?} and {END:?}");
    };
    let table = docs_table();
    if std::env::var_os("STOCKADE_BLESS_DOCS").is_some() {
        let updated = format!("{}{START}{table}{}", &docs[..a], &docs[b..]);
        std::fs::write(&path, updated).unwrap();
        return;
    }
    assert_eq!(
        &docs[a + START.len()..b],
        table,
        "docs/usage.md's errors table differs from the test's; regenerate it with STOCKADE_BLESS_DOCS=1"
    );
}

/// `stockade ARGS` for `home`, started from another directory with `HOME` = `tmp`.
fn caller(home: &Home, tmp: &Path, args: &[&str]) -> Command {
    let mut c = home.cmd(args);
    c.env("HOME", tmp).current_dir(tmp).stdin(Stdio::null());
    c
}

#[test]
fn a_timeout_takes_a_duration() {
    let home = Home::new();
    let tmp = caller_home();
    // Foreground: `--timeout 1s` ends `sleep 30`, status 124, and says it timed out.
    let started = Instant::now();
    let out = caller(&home, tmp.path(), &["run", "--timeout", "1s", "sleep 30"]).output().unwrap();
    assert!(started.elapsed() < Duration::from_secs(5), "took {:?}", started.elapsed());
    assert_eq!(out.status.code(), Some(124), "{}", text(&out.stderr));
    assert!(text(&out.stdout).starts_with("Timed out"), "{}", text(&out.stdout));
    // `--timeout-ms` keeps taking milliseconds, and a unit too.
    for t in ["1000", "1s"] {
        let out = caller(&home, tmp.path(), &["run", "--json", "--timeout-ms", t, "sleep 30"])
            .output()
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["state"], "timed_out", "{t}: {v}");
        assert!(v["wall_time_ms"].as_u64().unwrap() < 5000, "{t}: {v}");
    }
    // In the background, then `wait --json`: one JSON object a line.
    let out = caller(&home, tmp.path(), &["run", "--bg", "--json", "--timeout", "1s", "sleep 30"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let id = v["id"].as_str().unwrap().to_owned();
    home.session(&id);
    let out =
        caller(&home, tmp.path(), &["wait", "--json", "--timeout", "10s", &id]).output().unwrap();
    assert_eq!(out.status.code(), Some(124), "{}", text(&out.stderr));
    let line: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(line["id"], id.as_str());
    assert_eq!(line["ended"], true);
    assert_eq!(line["state"]["state"], "timed_out", "{line}");
    assert_eq!(line["exit_status"], 124);
    assert!(line["wall_time_ms"].as_u64().unwrap() < 5000, "{line}");
}

#[test]
fn wait_json_says_a_session_is_still_running() {
    let home = Home::new();
    let id = home.run_bg("sleep 60")["id"].as_str().unwrap().to_owned();
    let out = home.run(&["wait", "--json", "--timeout", "200ms", &id]);
    assert_eq!(out.status.code(), Some(124));
    let line: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(line["ended"], false, "{line}");
    assert_eq!(line["state"]["state"], "running", "{line}");
    home.ok(&["kill", &id]);
}

#[test]
fn a_tilde_in_a_path_is_the_callers_home() {
    // A foreground run: no daemon is started, and the run ends its own tree.
    let tmp = caller_home();
    std::fs::create_dir(tmp.path().join("proj")).unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let out = Command::new(stockade_bin())
        .args(["run", "--json", "--cwd", "~/proj", "pwd"])
        .env("STOCKADE_HOME", "~/x")
        .env("HOME", tmp.path())
        .env("NO_COLOR", "1")
        .current_dir(elsewhere.path())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let spool = v["spool_path"].as_str().unwrap();
    assert!(spool.starts_with(tmp.path().join("x").to_str().unwrap()), "{spool}");
    assert_eq!(v["output"].as_str().unwrap().trim(), tmp.path().join("proj").to_str().unwrap());
    assert!(!elsewhere.path().join("~").exists(), "a directory named ~ was made");
}

#[test]
fn a_background_session_keeps_its_own_grace() {
    let home = Home::new();
    // The command ignores SIGTERM, so only SIGKILL after the grace ends it: with the default
    // grace (2 s) the session would last at least 2.5 s.
    let v = home.json_bg(&[
        "--grace-ms",
        "300",
        "--timeout",
        "500ms",
        "--yield-ms",
        "10s",
        "trap '' TERM; sleep 30",
    ]);
    assert_eq!(v["state"], "timed_out", "{v}");
    let wall = v["wall_time_ms"].as_u64().unwrap();
    assert!((500..2300).contains(&wall), "ended after {wall} ms: {v}");
}
