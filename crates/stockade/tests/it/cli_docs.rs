//! What a person reads about the CLI: every `--help` ends with examples kept line by line, the
//! shell completions (`bash -n` accepts the bash one) and the man page (`man -l` renders it) are
//! generated from the same declaration as the flags.

use std::process::Command;

use stockade_testkit::{Home, cannot_run, text};

#[test]
fn help_shows_examples_line_by_line() {
    let home = Home::new();
    stockade_testkit::stockade_bench_bin(); // `stockade bench` runs it
    for (args, line) in [
        (&["run", "--help"][..], "  stockade run --timeout-ms 5000 --json 'make test'\n"),
        (&["ps", "--help"], "  stockade ps -a                  # every session the daemon knows\n"),
        (&["kill", "-h"], "  stockade kill -s INT --grace-ms 500 sh-3 sh-4\n"),
        (&["logs", "--help"], "  stockade logs -n 50 sh-3        # the last 50 lines\n"),
        (
            &["schedule", "add", "--help"],
            "  stockade schedule add tests --every 10m -- cargo test\n",
        ),
        (&["bench", "growth", "--help"], "  stockade bench growth --variants pipe,file,node\n"),
        (&["daemon", "--help"], "  stockade daemon status\n"),
    ] {
        let help = home.ok(args);
        assert!(help.contains("Examples:\n"), "{args:?}: {help}");
        assert!(help.contains(line), "{args:?} lacks {line:?}: {help}");
    }
    // Global options are listed apart from the command's own.
    let help = home.ok(&["ps", "--help"]);
    let global = help.find("Global options:").expect("a Global options heading");
    assert!(help[global..].contains("--home <DIR>"), "{help}");
    assert!(help[..global].contains("--state <STATE>"), "{help}");
}

#[test]
fn completions_are_generated_and_bash_accepts_them() {
    let home = Home::new();
    let bash = home.ok(&["completions", "bash"]);
    assert!(bash.contains("stockade__wait") || bash.contains("stockade,wait"), "knows `wait`");
    assert!(bash.contains("--tail"), "knows the flags");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("stockade.bash");
    std::fs::write(&file, &bash).unwrap();
    let checked = Command::new("bash").arg("-n").arg(&file).output().unwrap();
    assert!(checked.status.success(), "bash -n: {}", text(&checked.stderr));
    for shell in ["zsh", "fish"] {
        let script = home.ok(&["completions", shell]);
        assert!(script.contains("stockade") && script.contains("schedule"), "{shell}: {script}");
    }
    let bad = home.run(&["completions", "tcsh"]);
    assert_eq!(bad.status.code(), Some(2));
}

#[test]
fn the_man_page_renders_with_man() {
    let home = Home::new();
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("stockade.1");
    let roff = home.run(&["man"]);
    assert!(roff.status.success());
    std::fs::write(&page, &roff.stdout).unwrap();
    let pages = dir.path().join("man1");
    let wrote = home.ok(&["man", "--dir", pages.to_str().unwrap()]);
    assert!(wrote.starts_with("Wrote the man pages into"), "{wrote}");
    for name in ["stockade.1", "stockade-run.1", "stockade-wait.1", "stockade-schedule-add.1"] {
        assert!(pages.join(name).is_file(), "{name} written");
    }
    let Ok(rendered) = Command::new("man")
        .arg("-l")
        .arg(&page)
        .env("MANPAGER", "cat")
        .env("PAGER", "cat")
        .env("MANWIDTH", "100")
        .output()
    else {
        cannot_run("`man` is not installed (tests/cli/install-deps.sh installs man-db)");
        return;
    };
    assert!(rendered.status.success(), "man -l: {}", text(&rendered.stderr));
    let shown = text(&rendered.stdout);
    assert!(shown.contains("NAME") && shown.contains("stockade"), "{shown}");
    assert!(shown.contains("SUBCOMMANDS") || shown.contains("wait"), "{shown}");
    let run_page = Command::new("man")
        .arg("-l")
        .arg(pages.join("stockade-run.1"))
        .env("MANPAGER", "cat")
        .env("MANWIDTH", "100")
        .output()
        .unwrap();
    assert!(text(&run_page.stdout).contains("--timeout-ms"), "{}", text(&run_page.stdout));
}
