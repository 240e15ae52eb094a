//! Bad input from a person, each answered with one sentence on stderr that names the flag or
//! file they typed and says what to do; exit status 2, no panic, no OS error said twice, none of
//! clap's or Rust's parser text. The table is the contract: change a message here on purpose.

use std::process::Command;

use stockade_testkit::{Home, stockade_bin, text};

/// `(arguments, the exact stderr)`; `{home}` stands for the test's state directory.
const TABLE: &[(&[&str], &str)] = &[
    (
        &["run", "--max-bytes", "10XB", "true"],
        "--max-bytes 10XB is not a size; write one such as 4096, 64KiB, 20MiB or 1GiB",
    ),
    (
        &["run", "--timeout-ms", "abc", "true"],
        "--timeout-ms abc is not a time; write milliseconds (500) or a duration with a unit (2s, 1m)",
    ),
    (
        &["run", "--env", "FOO", "true"],
        "--env FOO is not KEY=VALUE; write e.g. --env RUST_LOG=debug",
    ),
    (
        &["run", "--retained-cap", "99999999GiB", "true"],
        "--retained-cap 99999999GiB is out of range; write a size from 4KiB to 64 MiB",
    ),
    (
        &["run", "--direction", "sideways", "true"],
        "--direction \"sideways\" is not one of tail, head, middle; pick one of them",
    ),
    (
        &["run", "--bogus", "true"],
        "`stockade run` has no option --bogus (did you mean --bg?); `stockade run --help` lists what it takes",
    ),
    (
        &["run", "--yield-ms", "5", "true"],
        "`stockade run` needs --bg; `stockade run --help` lists what it takes",
    ),
    (
        &["frobnicate"],
        "`stockade` has no command \"frobnicate\"; `stockade --help` lists what it takes",
    ),
    (&["kill"], "`stockade kill` needs <ID>...; `stockade kill --help` lists what it takes"),
    (
        &["logs", "sh-1", "--raw", "--tail", "3"],
        "--raw cannot be used with --tail; drop one of them",
    ),
    (
        &["ps", "--state", "sleeping"],
        "--state \"sleeping\" is not one of running, done, ok, failed, killed; pick one of them",
    ),
    (
        &["wait", "--timeout", "5q", "sh-1"],
        "--timeout 5q is not a duration; write e.g. 30s, 500ms, 10m or 1h (a plain number is seconds)",
    ),
    (
        &["daemon", "run", "--retention", "7"],
        "--retention 7 is not an age; write a number and a unit, e.g. 90s, 30m, 12h, 7d",
    ),
    (
        &["run", "--cwd", "/nonexistent/stockade-dir", "true"],
        "--cwd /nonexistent/stockade-dir does not exist; create it or pass another directory",
    ),
    (
        &["run", "--cwd", "/etc/hostname", "true"],
        "--cwd /etc/hostname is not a directory; pass a directory to run in",
    ),
    (
        &["run", "--shell", "/no/such/sh", "true"],
        "--shell /no/such/sh is not a program that exists; pass an existing shell, e.g. --shell /bin/bash",
    ),
    (&["read", "sh-99999"], "no session sh-99999 in {home}; `stockade ps -a` lists the sessions"),
    (
        &["read", "/nonexistent/output.log"],
        "/nonexistent/output.log is neither a session id (like sh-3) nor an existing spool file or session directory: No such file or directory (os error 2)",
    ),
    (
        &["completions", "tcsh"],
        "<SHELL> \"tcsh\" is not one of bash, elvish, fish, powershell, zsh; pick one of them",
    ),
    (
        &["--home", "/proc/self/stockade-no", "ps"],
        "could not start the daemon: cannot create the state directory /proc/self/stockade-no: No such file or directory (os error 2); pass a writable --home (or STOCKADE_HOME)",
    ),
];

#[test]
fn every_bad_input_gets_one_sentence_and_exit_2() {
    let home = Home::new();
    let mut wrong = Vec::new();
    for (args, expected) in TABLE {
        let out = home.run(args);
        let stderr = text(&out.stderr);
        let expected = format!("stockade: {}\n", expected.replace("{home}", home.path_str()));
        if out.status.code() != Some(2) || stderr != expected {
            wrong.push(format!(
                "stockade {args:?}\n  status {:?}\n  got      {stderr:?}\n  expected {expected:?}",
                out.status.code()
            ));
        }
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: one line: {stderr}");
        assert!(stderr.matches("(os error").count() <= 1, "{args:?}: OS error twice: {stderr}");
        assert!(!stderr.contains("invalid digit"), "{args:?}: parser text: {stderr}");
    }
    assert!(TABLE.len() >= 15);
    assert!(
        wrong.is_empty(),
        "{} of {} messages differ:\n{}",
        wrong.len(),
        TABLE.len(),
        wrong.join("\n")
    );
}

#[test]
fn a_deleted_working_directory_is_named_as_such() {
    let home = Home::new();
    let gone = tempfile::tempdir().unwrap();
    let dir = gone.path().join("deleted");
    std::fs::create_dir(&dir).unwrap();
    for args in [&["run", "true"][..], &["run", "--bg", "true"]] {
        // The shell enters the directory, deletes it, then starts stockade there.
        let out = Command::new("sh")
            .arg("-c")
            .arg("mkdir -p \"$1\" && cd \"$1\" && rmdir \"$1\" && shift && exec \"$@\"")
            .arg("sh")
            .arg(&dir)
            .arg(stockade_bin())
            .args(args)
            .env("STOCKADE_HOME", home.path())
            .env("NO_COLOR", "1")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", text(&out.stdout));
        assert_eq!(
            text(&out.stderr),
            "stockade: the current directory was deleted; cd to an existing directory or pass --cwd DIR\n",
            "{args:?}"
        );
    }
}
