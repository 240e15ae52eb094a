//! Background sessions through the daemon, as a user drives them from the CLI: `run --bg`,
//! `ps`, `logs` (cursor, tail, raw, follow), `grep`, `kill`, `forget`, `cleanup`, `stats`.

use std::io::Read;
use std::process::Stdio;
use std::time::{Duration, Instant};

use stockade_testkit::procs::{marked_processes, session_marker};
use stockade_testkit::{Home, PATIENCE, text};

#[test]
fn run_bg_ps_logs_kill_forget() {
    let home = Home::new();
    let started = home.run_bg("seq 1 20000; echo ready; sleep 300 & sleep 300; echo never");
    let id = started["id"].as_str().unwrap().to_owned();
    let spool = started["spool_path"].as_str().unwrap().to_owned();
    let marker = session_marker(&spool);
    let expected: Vec<u8> = (1..=20000)
        .map(|n| format!("{n}\n"))
        .chain(["ready\n".to_owned()])
        .collect::<String>()
        .into_bytes();

    // ps lists it, running, until all the output is in.
    let deadline = Instant::now() + PATIENCE;
    loop {
        let s = home.session(&id);
        assert_eq!(s["state"], "running", "{s}");
        if s["total_bytes"].as_u64() == Some(expected.len() as u64) {
            break;
        }
        assert!(Instant::now() < deadline, "output never arrived: {s}");
        std::thread::sleep(Duration::from_millis(50));
    }
    let table = home.ok(&["ps"]);
    let row = table.lines().find(|l| l.starts_with(&format!("{id} "))).expect(&table);
    assert!(row.contains("running") && row.contains("seq 1 20000"), "{table}");
    assert!(table.starts_with("ID  "), "{table}");

    // logs by cursor: what follows offset 100, exactly; and the JSON answer's cursors.
    let raw = home.run(&["logs", &id, "--after", "100", "--raw"]);
    assert!(raw.status.success());
    assert_eq!(raw.stdout, &expected[100..]);
    let answer: serde_json::Value = serde_json::from_str(
        home.ok(&["logs", &id, "--after", "100", "--json"]).lines().next().unwrap(),
    )
    .unwrap();
    assert_eq!(answer["id"], id.as_str());
    assert_eq!(answer["start_cursor"], 100);
    assert_eq!(answer["next_cursor"], expected.len() as u64);
    assert_eq!(answer["total_bytes"], expected.len() as u64);
    assert_eq!(answer["output"].as_str().unwrap().as_bytes(), &expected[100..]);
    assert_eq!(home.ok(&["logs", &id, "--tail", "2"]), "20000\nready\n");
    assert_eq!(home.ok(&["logs", &id, "--head", "2"]), "1\n2\n");

    // The session's processes are there, marked…
    assert!(marked_processes(&marker).len() >= 2, "{:?}", marked_processes(&marker));
    // …and kill leaves none of them.
    let killed = home.run(&["kill", &id]);
    let stdout = text(&killed.stdout);
    assert_eq!(killed.status.code(), Some(0), "{stdout}{}", text(&killed.stderr));
    assert!(stdout.starts_with("Killed: "), "{stdout}");
    assert!(stdout.contains("none left") || stdout.contains("nothing was left"), "{stdout}");
    assert_eq!(marked_processes(&marker), Vec::<u32>::new());
    assert_eq!(home.session(&id)["state"], "killed");
    // The output is intact after the kill.
    assert_eq!(home.run(&["logs", &id, "--raw"]).stdout, expected);

    // forget removes the spool and the record.
    let forgot = home.ok(&["forget", &id]);
    assert!(forgot.starts_with(&format!("Forgot {id}: removed ")), "{forgot}");
    assert!(!std::path::Path::new(&spool).exists(), "{spool} still there");
    assert!(!home.ok(&["ps"]).contains(&id));
    let gone = home.run(&["logs", &id]);
    assert!(!gone.status.success());
    assert_eq!(text(&gone.stderr).lines().count(), 1, "{}", text(&gone.stderr));
}

#[test]
fn logs_raw_is_the_spool_and_follow_prints_everything_once() {
    let home = Home::new();
    // Invalid UTF-8 and a multi-byte character, in pieces over time.
    let started = home.run_bg(
        r"i=0; while [ $i -lt 40 ]; do seq 1 300; printf 'x\377\376 é %s\n' $i; i=$((i+1)); sleep 0.02; done",
    );
    let id = started["id"].as_str().unwrap().to_owned();
    let spawn = |args: &[&str]| home.cmd(args).stdout(Stdio::piped()).spawn().unwrap();
    let follow_raw = spawn(&["logs", "-f", "--raw", &id]);
    let follow_text = spawn(&["logs", "-f", &id]);
    let raw = follow_raw.wait_with_output().unwrap();
    let followed = follow_text.wait_with_output().unwrap();
    assert!(raw.status.success() && followed.status.success());

    // Both followers return only once the session is over, with everything.
    let s = home.session(&id);
    assert_eq!(s["state"], "exited", "{s}");
    let spool = std::fs::read(started["spool_path"].as_str().unwrap()).unwrap();
    assert_eq!(spool.len() as u64, s["total_bytes"].as_u64().unwrap());
    assert_eq!(raw.stdout, spool, "logs -f --raw is the spool byte for byte");
    assert_eq!(text(&followed.stdout), String::from_utf8_lossy(&spool), "each byte exactly once");
    // A plain raw read of the finished log is the spool too.
    assert_eq!(home.run(&["logs", "--raw", &id]).stdout, spool);
}

#[test]
fn grep_stats_and_cleanup_through_the_daemon() {
    let home = Home::new();
    // Quick: it may have ended by the answer.
    // Split capture: `--stream stderr` below reads stderr apart (one pipe has one stream).
    let done = home.json_bg(&["--capture", "split", "seq 1 5000; echo 'needle here' >&2"]);
    let id = done["id"].as_str().unwrap().to_owned();
    assert_eq!(home.wait_finished(&id)["code"], 0);
    let running = home.run_bg("sleep 300");
    let running_id = running["id"].as_str().unwrap().to_owned();

    assert_eq!(home.ok(&["grep", &id, "^499[89]$"]).lines().count(), 2);
    assert!(home.ok(&["grep", &id, "needle"]).contains(":needle here"));
    assert_eq!(home.run(&["grep", &id, "absent-xyz"]).status.code(), Some(1));
    assert_eq!(home.ok(&["logs", &id, "--stream", "stderr"]), "needle here\n");

    let stats = home.json(&["stats"]);
    for field in [
        "rss_bytes",
        "peak_rss_bytes",
        "allocated_bytes",
        "hot_tail_bytes",
        "spooled_bytes",
        "dropped_bytes",
    ] {
        assert!(stats[field].is_u64(), "{field} in {stats}");
    }
    assert!(stats["spooled_bytes"].as_u64().unwrap() >= 5000);
    assert!(home.ok(&["stats"]).contains("resident"));

    // cleanup keeps running sessions unless --all.
    let cleaned = home.json(&["cleanup"]);
    assert_eq!(cleaned["forgotten"], serde_json::json!([id]));
    assert_eq!(home.session(&running_id)["state"], "running");
    let all = home.json(&["cleanup", "--all"]);
    assert_eq!(all["forgotten"], serde_json::json!([running_id]));
    assert_eq!(home.ok(&["ps"]), "no sessions\n");
    assert_eq!(
        marked_processes(&session_marker(running["spool_path"].as_str().unwrap())),
        Vec::<u32>::new()
    );
}

#[test]
fn a_background_run_that_ends_within_yield_answers_with_its_exit() {
    let home = Home::new();
    let out = home.run(&["run", "--bg", "--yield-ms", "30000", "echo hi; exit 3"]);
    assert_eq!(out.status.code(), Some(3));
    let stdout = text(&out.stdout);
    assert!(stdout.starts_with("Exit code: 3\n"), "{stdout}");
    assert!(stdout.ends_with("Output:\nhi\n"), "{stdout}");
    // It ran in our working directory, not the daemon's.
    let dir = tempfile::tempdir().unwrap();
    let out = home
        .cmd(&["run", "--bg", "--yield-ms", "30000", "pwd"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(text(&out.stdout).contains(dir.path().to_str().unwrap()), "{}", text(&out.stdout));
    let mut child = home.cmd(&["ps"]).stdout(Stdio::piped()).spawn().unwrap();
    let mut table = String::new();
    child.stdout.take().unwrap().read_to_string(&mut table).unwrap();
    child.wait().unwrap();
    assert!(table.contains("exit 3"), "{table}");
}

/// A foreground `run` (in-process engine) and a background one (the daemon) with the same
/// arguments print the same view: one clamp, one view, both in the engine.
#[test]
fn foreground_and_background_runs_answer_alike() {
    let home = Home::new();
    let args = ["--max-lines", "50", "seq 1 100000"];
    let fg = home.ok(&[&["run"][..], &args].concat());
    let bg = home.ok(&[&["run", "--bg", "--yield-ms", "60000"][..], &args].concat());
    assert!(fg.contains("lines omitted. Full output: "), "{fg}");
    assert!(fg.contains("Output:\n99951\n") && fg.contains("\n100000\n[… "), "{fg}");
    assert_eq!(same_view_text(&fg), same_view_text(&bg));

    // Past the view limit: both are clamped alike (the engine's 4 MiB), JSON field by field.
    let args = ["--json", "--max-bytes", "100MiB", "--max-lines", "2000000", "seq 1 1000000"];
    let fg = home.json_first(&[&["run"][..], &args].concat());
    let bg = home.json_first(&[&["run", "--bg", "--yield-ms", "60000"][..], &args].concat());
    assert_eq!((fg["state"].as_str(), bg["state"].as_str()), (Some("exited"), Some("exited")));
    let output = fg["output"].as_str().unwrap();
    assert!(fg["truncated"] == true && output.len() <= 4 * 1024 * 1024, "{}", output.len());
    assert!(output.len() > 4 * 1024 * 1024 - 4096 && output.ends_with("1000000\n"));
    for field in [
        "output",
        "notice",
        "truncated",
        "start_cursor",
        "next_cursor",
        "total_bytes",
        "total_lines",
        "omitted_bytes",
        "omitted_lines",
        "dropped_bytes",
        "gaps",
        "stream",
    ] {
        assert_eq!(fg[field], bg[field], "{field}");
    }
}

/// A `run` answer without what differs between two runs: the wall time, the session id and the
/// spool path.
fn same_view_text(answer: &str) -> String {
    let mut lines = Vec::new();
    for line in answer.lines().filter(|l| !l.starts_with("Wall time: ")) {
        let mut line = line.to_owned();
        if let (Some(a), Some(b)) = (line.find("Full output: "), line.find("/output.log")) {
            line.replace_range(a + "Full output: ".len()..b, "SPOOL");
        }
        lines.push(line);
    }
    let mut text = lines.join("\n");
    while let Some(at) =
        text.find("sh-").filter(|&at| text[at + 3..].starts_with(|c: char| c.is_ascii_digit()))
    {
        let digits = text[at + 3..].bytes().take_while(u8::is_ascii_digit).count();
        text.replace_range(at..at + 3 + digits, "SESSION");
    }
    text
}
