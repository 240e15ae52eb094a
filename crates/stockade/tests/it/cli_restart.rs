//! `restart` (same command, directory, environment, options; a new id) and `schedule run` (fire
//! now, skipped while the last run is active) with `schedule list` as a table, through the real
//! binary and an auto-started daemon.

use stockade_testkit::{Home, text};

#[test]
fn restart_starts_the_same_command_in_the_same_place_with_the_same_environment() {
    let home = Home::new();
    let dir = tempfile::tempdir().unwrap();
    let dir_path = dir.path().canonicalize().unwrap();
    let first = home.json_first(&[
        "run",
        "--bg",
        "--json",
        "--env",
        "GREETING=hello there",
        "--cwd",
        dir_path.to_str().unwrap(),
        "sleep 1; echo \"$GREETING\"; pwd; exit 2",
    ]);
    let old = first["id"].as_str().unwrap().to_owned();
    assert_eq!(home.run(&["wait", "-q", &old]).status.code(), Some(2));

    let again = home.json_first(&["restart", "--json", &old]);
    let new = again["id"].as_str().unwrap().to_owned();
    assert_ne!(new, old, "a new id");
    home.session(&new);
    assert_eq!(home.run(&["wait", "-q", &new]).status.code(), Some(2));
    let expected = format!("hello there\n{}\n", dir_path.display());
    assert_eq!(home.ok(&["logs", &new]), expected);
    assert_eq!(home.ok(&["logs", &old]), expected, "the old session keeps its output");

    // A running session is refused without --kill, and ended first with it.
    let running = home.run_bg("sleep 60");
    let running = running["id"].as_str().unwrap().to_owned();
    let refused = home.run(&["restart", &running]);
    assert_eq!(refused.status.code(), Some(2));
    assert!(text(&refused.stderr).contains("is still running"), "{}", text(&refused.stderr));
    let replaced = home.json_first(&["restart", "--kill", "--json", &running]);
    let replacement = replaced["id"].as_str().unwrap().to_owned();
    home.session(&replacement);
    assert_eq!(replaced["state"], "running", "{replaced}");
    assert_eq!(home.session(&running)["state"], "killed");
    home.ok(&["kill", &replacement]);
}

#[test]
fn schedule_run_fires_now_and_skips_while_active_and_list_is_a_table() {
    let home = Home::new();
    home.ok(&["schedule", "add", "nightly", "--every", "1h", "--", "sleep", "30"]);
    let fired = home.run(&["schedule", "run", "nightly"]);
    assert_eq!(fired.status.code(), Some(0), "{}", text(&fired.stderr));
    let said = text(&fired.stdout);
    assert!(said.starts_with("Fired nightly: sh-"), "{said}");
    let id = said["Fired nightly: ".len()..].split_whitespace().next().unwrap().to_owned();
    home.session(&id);
    assert_eq!(home.session(&id)["source"], "schedule:nightly");

    let skipped = home.run(&["schedule", "run", "nightly"]);
    assert_eq!(skipped.status.code(), Some(1));
    assert_eq!(
        text(&skipped.stdout),
        format!("Skipped nightly: its last run {id} is still active (skips so far: 1)\n")
    );

    let table = home.ok(&["schedule", "list"]);
    let mut lines = table.lines();
    let header: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        ["NAME", "WHEN", "NEXT", "LEFT", "LAST", "STATE", "ENV", "DIR", "FIRES", "SKIPPED"]
    );
    let row = lines.next().unwrap();
    assert!(row.starts_with("nightly  every 1h  20"), "an absolute date: {row}");
    assert!(row.contains(&format!("running {id}")), "{row}");
    let words: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(words[words.len() - 2..], ["1", "1"], "one fire, one skip: {row}");
    home.ok(&["kill", &id]);
    home.ok(&["schedule", "rm", "nightly"]);
}
