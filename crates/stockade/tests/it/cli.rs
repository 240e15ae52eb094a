//! The `stockade` binary as a user drives it: answers, exit statuses, reads by id, and one plain
//! sentence for every kind of bad input.

use std::path::Path;
use std::process::{Command, Output};

use stockade_testkit::text;

fn stockade(home: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_stockade"))
        .args(args)
        .env("STOCKADE_HOME", home)
        .env_remove("STOCKADE_LOG")
        .output()
        .expect("the stockade binary runs")
}

#[test]
fn run_prints_a_bounded_answer_with_a_usable_notice() {
    let home = tempfile::tempdir().unwrap();
    let out = stockade(home.path(), &["run", "seq 1 3000000"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.starts_with("Exit code: 0\nWall time: "), "{stdout}");
    assert!(stdout.len() < 60 * 1024, "answer is bounded: {} bytes", stdout.len());
    assert!(stdout.contains("2999999\n3000000\n"));
    assert!(stdout.contains("lines omitted. Full output: "), "{stdout}");
    // The notice names a spool that really holds every byte.
    let spool = stdout
        .split("Full output: ")
        .nth(1)
        .and_then(|rest| rest.split(". Read more").next())
        .unwrap();
    let expected: u64 = (1..=3_000_000u64).map(|n| n.to_string().len() as u64 + 1).sum();
    assert_eq!(std::fs::metadata(spool).unwrap().len(), expected);
}

#[test]
fn exit_status_is_the_commands() {
    let home = tempfile::tempdir().unwrap();
    assert_eq!(stockade(home.path(), &["run", "exit 3"]).status.code(), Some(3));
    assert_eq!(stockade(home.path(), &["run", "kill -9 $$"]).status.code(), Some(137));
    let timed_out = stockade(home.path(), &["run", "--timeout-ms", "200", "--", "sleep", "100"]);
    assert_eq!(timed_out.status.code(), Some(124));
    assert!(text(&timed_out.stdout).starts_with("Timed out"));
}

#[test]
fn json_read_and_grep_by_id() {
    let home = tempfile::tempdir().unwrap();
    // Split capture: this reads stderr apart (one pipe, the default, has one stream).
    let out = stockade(
        home.path(),
        &["run", "--json", "--capture", "split", "seq 1 50000; echo problem >&2"],
    );
    let result: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(result["state"], "exited");
    assert_eq!(result["code"], 0);
    let id = result["id"].as_str().unwrap().to_owned();
    let total = result["total_bytes"].as_u64().unwrap();
    assert_eq!(result["truncated"], true);

    // --raw reproduces the spool byte for byte.
    let raw = stockade(home.path(), &["read", &id, "--raw"]);
    assert!(raw.status.success());
    let spool = std::fs::read(result["spool_path"].as_str().unwrap()).unwrap();
    assert_eq!(raw.stdout, spool);
    assert_eq!(raw.stdout.len() as u64, total);

    // A cursor read from the middle continues exactly there.
    let after = stockade(home.path(), &["read", &id, "--after", "100", "--max-bytes", "300"]);
    assert!(text(&after.stdout).starts_with(&text(&spool[100..250])), "{}", text(&after.stdout));
    // Even when max_bytes is smaller than the notice, a cursor read makes progress.
    let tiny =
        stockade(home.path(), &["read", &id, "--after", "100", "--max-bytes", "10", "--json"]);
    let tiny: serde_json::Value = serde_json::from_slice(&tiny.stdout).unwrap();
    let next = tiny["next_cursor"].as_u64().unwrap();
    assert!(next > 100 && next <= 110, "next_cursor {next}");
    assert!(tiny["output"].as_str().unwrap().starts_with(&text(&spool[100..next as usize])));

    let stderr_only = stockade(home.path(), &["read", &id, "--stream", "stderr"]);
    assert_eq!(text(&stderr_only.stdout), "problem\n");

    let grep = stockade(home.path(), &["grep", &id, "^4999[89]$"]);
    assert_eq!(text(&grep.stdout).lines().count(), 2, "{}", text(&grep.stdout));
    assert_eq!(stockade(home.path(), &["grep", &id, "nomatch-xyz"]).status.code(), Some(1));
}

#[test]
fn bad_input_gets_one_plain_sentence() {
    let home = tempfile::tempdir().unwrap();
    let cases: &[&[&str]] = &[
        &["run"],                                // missing command
        &["run", "--bogus", "true"],             // unknown flag
        &["run", "--max-bytes", "lots", "true"], // bad size
        &["read", "sh-424242"],                  // unknown session
        &["read", "/no/such/spool"],             // bad path
    ];
    for args in cases {
        let out = stockade(home.path(), args);
        assert!(!out.status.success(), "{args:?} should fail");
        let err = text(&out.stderr);
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert!(!err.trim().is_empty(), "{args:?} says why");
    }
    let id = {
        let out = stockade(home.path(), &["run", "--json", "echo hi"]);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        v["id"].as_str().unwrap().to_owned()
    };
    let bad_regex = stockade(home.path(), &["grep", &id, "(unclosed"]);
    assert_eq!(bad_regex.status.code(), Some(2));
    let err = text(&bad_regex.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("stockade: bad regex \"(unclosed\": "), "{err}");
}

#[test]
fn unwritable_state_dir_is_reported() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("not-a-dir");
    std::fs::write(&file, "x").unwrap();
    let out = stockade(&file, &["run", "true"]);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(err.contains("state directory") && err.contains("STOCKADE_HOME"), "{err}");
}

#[test]
fn empty_output_is_fine() {
    let home = tempfile::tempdir().unwrap();
    let out = stockade(home.path(), &["run", "true"]);
    assert!(out.status.success());
    assert_eq!(text(&out.stdout).lines().last(), Some("Output:"));
}

#[test]
fn doctor_names_the_containment() {
    let home = tempfile::tempdir().unwrap();
    let out = stockade(home.path(), &["doctor", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let method = v["containment"]["method"].as_str().unwrap();
    assert!(method == "cgroup" || method == "process-group", "{method}");
}

/// A home beside many entries costs every sandboxed spawn a read rule per entry: `doctor` counts
/// them and, past a hundred, says so.
#[test]
fn doctor_counts_the_read_rules_that_hide_the_home() {
    let crowded = tempfile::tempdir().unwrap();
    for n in 0..150 {
        std::fs::write(crowded.path().join(format!("entry-{n}")), "").unwrap();
    }
    std::os::unix::fs::symlink("entry-0", crowded.path().join("a-link")).unwrap();
    let home = crowded.path().join("home");
    let out = stockade(&home, &["doctor", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rules = v["sandbox_hiding_rules"].as_u64().unwrap();
    // The 150 entries beside it (not the symlink, which gets no rule), and the ones beside each
    // directory above.
    assert!(rules >= 150, "{v}");
    let out = stockade(&home, &["doctor"]);
    let text = text(&out.stdout);
    let line = text.lines().find(|l| l.contains("hiding the state directory")).unwrap();
    assert!(line.contains("read rules") && line.contains("less crowded directory"), "{line}");
    let quiet = tempfile::tempdir().unwrap();
    let out = stockade(&quiet.path().join("home"), &["doctor", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["sandbox_hiding_rules"].as_u64().unwrap() < rules, "{v}");
}

#[test]
fn broken_pipe_is_success() {
    let home = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_stockade"))
        .args(["run", "--max-bytes", "1MiB", "--max-lines", "100000", "seq 1 200000"])
        .env("STOCKADE_HOME", home.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take()); // the reader goes away at once, like `| head -0`
    let out = child.wait_with_output().unwrap();
    assert!(!text(&out.stderr).contains("panicked"), "{}", text(&out.stderr));
    assert_eq!(out.status.code(), Some(0));
}

/// As a shell hands its stdin on: piped input reaches a foreground run's command, a file
/// redirected in is read whole, and an empty stdin is an end of file.
#[test]
fn a_foreground_run_reads_the_callers_piped_stdin() {
    use std::io::Write as _;
    use std::process::Stdio;
    let home = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_stockade"))
        .args(["run", "cat; echo end"])
        .env("STOCKADE_HOME", home.path())
        .env_remove("STOCKADE_LOG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Written, then closed (dropped): `cat` sees the line, then the end of its input.
    child.stdin.take().unwrap().write_all(b"hi from the pipe\n").unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("Output:\nhi from the pipe\nend\n"),
        "{}",
        text(&out.stdout)
    );

    let file = home.path().join("input.bin");
    std::fs::write(&file, vec![b'x'; 1 << 20]).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_stockade"))
        .args(["run", "wc -c"])
        .env("STOCKADE_HOME", home.path())
        .stdin(std::fs::File::open(&file).unwrap())
        .output()
        .unwrap();
    assert!(text(&out.stdout).contains("Output:\n1048576\n"), "{}", text(&out.stdout));
}
