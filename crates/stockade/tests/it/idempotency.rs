//! Idempotency keys: a `run` carrying the key of a session the daemon keeps (running or
//! finished, across a daemon restart) starts nothing and answers with that session; `ps --key`
//! finds the one session a key started, or none; bad keys are refused in a sentence.

use stockade_testkit::{Home, text};

/// `stockade run --bg --json --idempotency-key KEY COMMAND`: the answer.
fn run_keyed(home: &Home, key: &str, command: &str) -> serde_json::Value {
    home.json_bg(&["--idempotency-key", key, command])
}

/// The ids `ps --key KEY -q` prints.
fn ids_with_key(home: &Home, key: &str) -> Vec<String> {
    home.ok(&["ps", "--key", key, "-q"]).lines().map(str::to_owned).collect()
}

#[test]
fn a_run_retried_with_its_key_gets_the_first_session_running_finished_or_after_a_restart() {
    let home = Home::new();
    // Running: the retry answers with the same session and starts no second copy.
    let first = run_keyed(&home, "k-running", "echo started; sleep 30");
    let again = run_keyed(&home, "k-running", "echo started; sleep 30");
    assert_eq!(first["id"], again["id"], "{first} / {again}");
    assert_eq!(again["state"], "running", "{again}");
    let id = first["id"].as_str().unwrap().to_owned();
    assert_eq!(ids_with_key(&home, "k-running"), vec![id.clone()]);
    let running = home.json(&["ps", "--state", "running"]);
    let n = running["sessions"].as_array().map_or(0, Vec::len);
    assert_eq!(n, 1, "one session runs, not two: {running}");
    home.ok(&["kill", &id]);

    // Finished: the retry is answered as the first run was, with its output and exit.
    let done = run_keyed(&home, "k-done", "echo hello; exit 3");
    let waited = home.run(&["wait", done["id"].as_str().unwrap()]);
    assert_eq!(waited.status.code(), Some(3), "{}", text(&waited.stderr));
    let replay = run_keyed(&home, "k-done", "echo hello; exit 3");
    assert_eq!(replay["id"], done["id"], "{replay}");
    assert_eq!(replay["state"], "exited", "{replay}");
    assert_eq!(replay["code"], 3, "{replay}");
    assert!(replay["output"].as_str().unwrap().contains("hello"), "{replay}");

    // A key nobody used finds nothing.
    assert!(ids_with_key(&home, "k-never").is_empty());

    // Across a restart of the daemon: the key is kept with the session's record.
    home.ok(&["daemon", "stop"]);
    assert_eq!(ids_with_key(&home, "k-done"), vec![done["id"].as_str().unwrap().to_owned()]);
    let after = run_keyed(&home, "k-done", "echo hello; exit 3");
    assert_eq!(after["id"], done["id"], "{after}");
    let all = home.json(&["ps", "-a"]);
    let n = all["sessions"].as_array().map_or(0, Vec::len);
    assert_eq!(n, 2, "two keyed runs made two sessions in all: {all}");
}

#[test]
fn a_bad_key_is_refused_in_a_sentence() {
    let home = Home::new();
    for key in ["has space", &"x".repeat(129)] {
        let out = home.run(&["run", "--bg", "--idempotency-key", key, "true"]);
        assert_eq!(out.status.code(), Some(2), "{key}: {}", text(&out.stderr));
        let err = text(&out.stderr);
        assert!(err.contains("idempotency key is 1 to 128 printable"), "{err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
    }
    // A foreground run happens in the CLI's own process: no daemon could find it by its key.
    let out = home.run(&["run", "--idempotency-key", "k", "true"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("add --bg"), "{}", text(&out.stderr));
}
