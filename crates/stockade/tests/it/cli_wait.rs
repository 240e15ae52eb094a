//! Waiting for and following background sessions from the CLI as a pueue or docker user would:
//! `wait` (exit statuses, `--timeout`), `logs -f` (footer and status), `logs -n`, `ps` filters,
//! and `kill`/`forget` over several ids — all through the real binary and an auto-started daemon.

use stockade_testkit::{Home, text};

fn id_of(result: &serde_json::Value) -> String {
    result["id"].as_str().unwrap().to_owned()
}

/// `stockade run --bg --json COMMAND` for commands that may have ended by the answer.
fn start(home: &Home, args: &[&str]) -> String {
    let r = home.json_bg(args);
    let id = id_of(&r);
    home.session(&id); // remembered for the cleanup
    id
}

fn lines(s: &str) -> Vec<String> {
    let mut v: Vec<String> = s.lines().map(str::to_owned).collect();
    v.sort();
    v
}

#[test]
fn wait_exits_with_the_sessions_status() {
    let home = Home::new();
    let three = start(&home, &["sleep 0.3; exit 3"]);
    let out = home.run(&["wait", &three]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    let said = text(&out.stdout);
    assert!(said.starts_with(&format!("{three} exited 3 after ")), "{said}");
    assert!(said.ends_with(" s\n"), "{said}");

    // A signal is 128+N, as a shell says it.
    let termed = start(&home, &["sleep 0.2; kill -TERM $$"]);
    let out = home.run(&["wait", &termed]);
    assert_eq!(out.status.code(), Some(143), "{}", text(&out.stdout));
    assert!(text(&out.stdout).contains("was killed by SIGTERM"), "{}", text(&out.stdout));

    // Several: the first that did not exit 0, in the order given.
    let ok = start(&home, &["true"]);
    let out = home.run(&["wait", &ok, &three, &termed]);
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(text(&out.stdout).lines().count(), 3, "{}", text(&out.stdout));
    assert_eq!(home.run(&["wait", "-q", &ok]).status.code(), Some(0));

    // --timeout: 124, and the session is left running.
    let long = start(&home, &["sleep 60"]);
    let out = home.run(&["wait", "--timeout", "300ms", &long]);
    assert_eq!(out.status.code(), Some(124), "{}", text(&out.stdout));
    assert!(text(&out.stdout).contains("is still running"), "{}", text(&out.stdout));
    assert_eq!(home.session(&long)["state"], "running");
    home.ok(&["kill", &long]);
    // Killed by Stockade: 137.
    assert_eq!(home.run(&["wait", &long]).status.code(), Some(137));

    // An unknown id is an error sentence, not a hang.
    let out = home.run(&["wait", "sh-99999"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("no session sh-99999"), "{}", text(&out.stderr));
}

#[test]
fn wait_sees_a_foreground_run_of_another_terminal_end_through_its_record() {
    let home = Home::new();
    let finished = home.run(&["run", "--json", "exit 5"]);
    assert_eq!(finished.status.code(), Some(5));
    let id = id_of(&serde_json::from_slice(&finished.stdout).unwrap());
    let out = home.run(&["wait", &id]);
    assert_eq!(out.status.code(), Some(5), "{}{}", text(&out.stdout), text(&out.stderr));
    assert!(text(&out.stdout).starts_with(&format!("{id} exited 5")), "{}", text(&out.stdout));
}

#[test]
fn logs_follow_ends_with_a_footer_and_the_sessions_status() {
    let home = Home::new();
    let id = start(&home, &["echo one; sleep 0.5; echo two; exit 3"]);
    let out = home.run(&["logs", "-f", &id]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "one\ntwo\n", "the footer stays off stdout");
    let footer = text(&out.stderr);
    assert!(footer.starts_with(&format!("[{id} exited 3 after ")), "{footer}");
    assert!(footer.ends_with(" s]\n"), "{footer}");

    // Without -f, the status is logs' own.
    assert_eq!(home.run(&["logs", &id]).status.code(), Some(0));

    // -n N is --tail N.
    let seq = start(&home, &["seq 1 10"]);
    home.wait_finished(&seq);
    assert_eq!(home.ok(&["logs", "-n", "2", &seq]), "9\n10\n");
    let out = home.run(&["logs", "-f", "-n", "1", &seq]);
    assert_eq!(text(&out.stdout), "10\n");
    assert_eq!(out.status.code(), Some(0));
    assert!(text(&out.stderr).starts_with(&format!("[{seq} exited 0 after ")));
}

#[test]
fn ps_filters_and_kill_and_forget_take_several_ids() {
    let home = Home::new();
    let a = start(&home, &["sleep 60"]);
    let b = start(&home, &["sleep 60"]);
    let keyed = start(&home, &["--source", "job-k", "sleep 60"]);
    let failed = start(&home, &["exit 4"]);
    home.wait_finished(&failed);
    let ok = start(&home, &["true"]);
    home.wait_finished(&ok);

    assert_eq!(
        lines(&home.ok(&["ps", "-q", "--state", "running"])),
        lines(&format!("{a}\n{b}\n{keyed}\n"))
    );
    assert_eq!(home.ok(&["ps", "-q", "--state", "failed"]), format!("{failed}\n"));
    assert_eq!(home.ok(&["ps", "-q", "--state", "ok"]), format!("{ok}\n"));
    assert_eq!(
        lines(&home.ok(&["ps", "-q", "--state", "ok,failed"])),
        lines(&format!("{failed}\n{ok}\n"))
    );
    assert_eq!(home.ok(&["ps", "-q", "--source", "job-k"]), format!("{keyed}\n"));
    let json = home.json(&["ps", "--state", "done"]);
    assert_eq!(json["sessions"].as_array().unwrap().len(), 2, "{json}");

    // kill over several ids: every one ends; an unknown one is reported and the rest still run.
    let out = home.run(&["kill", &a, "sh-99999", &b]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("no session sh-99999"), "{}", text(&out.stderr));
    let said = text(&out.stdout);
    assert!(
        said.contains(&format!("(session {a})")) && said.contains(&format!("(session {b})")),
        "{said}"
    );
    assert_eq!(home.ok(&["ps", "-q", "--state", "running"]), format!("{keyed}\n"));
    let killed = home.json_first(&["kill", "--json", &keyed, &a]);
    assert_eq!(killed.as_array().map(Vec::len), Some(2), "{killed}");
    assert_eq!(home.ok(&["ps", "-q", "--state", "running"]), "");
    assert_eq!(
        lines(&home.ok(&["ps", "-q", "--state", "killed"])),
        lines(&format!("{a}\n{b}\n{keyed}\n"))
    );

    home.ok(&["forget", &a, &b]);
    let left = home.ok(&["ps", "-a", "-q"]);
    assert!(!left.lines().any(|l| l == a || l == b), "{left}");
    assert_eq!(left.lines().count(), 3, "{left}");
}

#[test]
fn ps_shows_recent_finished_sessions_and_all_with_a() {
    let home = Home::new();
    let running = start(&home, &["sleep 60"]);
    let mut done = Vec::new();
    for _ in 0..22 {
        done.push(start(&home, &["true"]));
    }
    for id in &done {
        home.wait_finished(id);
    }
    let recent = home.ok(&["ps", "-q"]);
    assert_eq!(recent.lines().count(), 21, "the running one and the 20 newest finished: {recent}");
    assert!(recent.lines().any(|l| l == running));
    assert!(
        !recent.lines().any(|l| l == done[0] || l == done[1]),
        "the oldest are hidden: {recent}"
    );
    let table = home.ok(&["ps"]);
    assert!(
        table.ends_with("(2 older finished sessions not shown; `stockade ps -a` lists all)\n"),
        "{table}"
    );
    assert_eq!(home.ok(&["ps", "-a", "-q"]).lines().count(), 23);
    home.ok(&["kill", &running]);
}
