//! The CLI on a real terminal (a tmux pane with a private server per test) and in scripts: a
//! foreground run gets a terminal of its own (live, line-buffered output; typed input; Ctrl-C
//! to the command, and a shell loop stops at it with the terminal restored), `ps` fits the
//! terminal's width, `logs` shows the command's colours, and every `run`/`restart` answer names
//! its session (`-q`: the id alone).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use stockade_testkit::{Home, PATIENCE, eventually, procs, stockade_bin, text};

/// A tmux server of its own (`tmux -L NAME`) with one pane running `bash` in a directory and
/// environment of its own; the server is killed on drop (a failed test too), and so is every
/// process still marked with a session of `home`.
struct Tmux {
    socket: String,
    server_pid: Option<i32>,
    home: PathBuf,
    _cwd: tempfile::TempDir,
}

impl Tmux {
    fn start(home: &Home, cols: u16, rows: u16) -> Tmux {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let socket =
            format!("stockade-it-{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::SeqCst));
        let cwd = tempfile::Builder::new().prefix("stockade-pane-").tempdir().unwrap();
        let mut tmux = Tmux { socket, server_pid: None, home: home.path().to_owned(), _cwd: cwd };
        let (w, h) = (cols.to_string(), rows.to_string());
        let cwd = tmux._cwd.path().to_str().unwrap().to_owned();
        let started = tmux
            .command(&["-f", "/dev/null", "new-session", "-d", "-x", &w, "-y", &h, "-c", &cwd])
            .args(["bash", "--norc", "--noprofile"])
            // Not this test's environment: the pane is a user's shell elsewhere.
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", &cwd)
            .env("TERM", "xterm-256color")
            .env("PS1", "$ ")
            .env("STOCKADE_HOME", home.path())
            .output()
            .unwrap_or_else(|e| {
                panic!("tmux is needed for this test (tests/cli/install-deps.sh installs it): {e}")
            });
        assert!(started.status.success(), "tmux did not start: {}", text(&started.stderr));
        let pid = tmux.tmux(&["display-message", "-p", "#{pid}"]);
        tmux.server_pid = pid.trim().parse().ok();
        eventually(PATIENCE, "the prompt", || (tmux.screen().trim() == "$").then_some(()));
        tmux
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new("tmux");
        c.arg("-L").arg(&self.socket).args(args);
        c
    }

    /// Runs a tmux command; its stdout.
    fn tmux(&self, args: &[&str]) -> String {
        let out = self.command(args).output().unwrap();
        assert!(out.status.success(), "tmux {args:?}: {}", text(&out.stderr));
        text(&out.stdout)
    }

    /// Types `line` and Enter.
    fn type_line(&self, line: &str) {
        self.tmux(&["send-keys", "-l", line]);
        self.tmux(&["send-keys", "Enter"]);
    }

    /// The pane as shown, one row a line.
    fn screen(&self) -> String {
        self.tmux(&["capture-pane", "-p"])
    }

    /// The pane's text with wrapped rows joined and the colours as escape sequences.
    fn lines(&self, escapes: bool) -> String {
        let mut args = vec!["capture-pane", "-p", "-J"];
        if escapes {
            args.push("-e");
        }
        self.tmux(&args)
    }

    /// Waits (bounded) until the pane shows `needle`; the screen then.
    fn wait_for(&self, needle: &str) -> String {
        eventually(PATIENCE, needle, || {
            let screen = self.lines(false);
            screen.contains(needle).then_some(screen)
        })
    }

    /// Clears the pane (and waits until it is).
    fn clear(&self) {
        self.type_line("clear");
        eventually(PATIENCE, "a clear pane", || (self.screen().trim() == "$").then_some(()));
    }

    /// Clears the pane and runs `line` between markers; the joined lines it printed, once done.
    fn output_of(&self, line: &str, escapes: bool) -> String {
        self.clear();
        // Quoted apart, so the typed line does not show the markers.
        self.type_line(&format!("echo BEG''IN; {line}; echo E''ND=$?"));
        self.wait_for("END=");
        let all = self.lines(escapes);
        let missing = || panic!("the markers around {line:?} are not both on the screen: {all}");
        let start = all.rfind("BEGIN\n").unwrap_or_else(missing) + "BEGIN\n".len();
        let end = all[start..].find("END=").unwrap_or_else(missing) + start;
        all[start..end].to_owned()
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.command(&["kill-server"]).output();
        if let Some(pid) = self.server_pid {
            // SAFETY: kill(2) of the tmux server this test started (gone already, normally).
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        for spool in spools(&self.home) {
            procs::kill_marked(&procs::session_marker(spool.to_str().unwrap()));
        }
    }
}

/// The spool files of every session of `home` (foreground ones included).
fn spools(home: &Path) -> Vec<PathBuf> {
    let instances = std::fs::read_dir(home.join("spool")).into_iter().flatten().flatten();
    instances
        .flat_map(|i| std::fs::read_dir(i.path()).into_iter().flatten().flatten())
        .map(|s| s.path().join("output.log"))
        .filter(|p| p.to_str().is_some_and(|s| s.contains("/sh-")))
        .collect()
}

fn bin() -> String {
    stockade_bin().to_str().unwrap().to_owned()
}

const LIVE: &str = r#"python3 -c "import sys,time; print(1); time.sleep(2)""#;

/// Types a run of [`LIVE`] (with `extra` before the command, `after` behind it) and how long
/// it took until the pane showed the line `1`, and whether the summary was there already.
fn time_to_first_line(tmux: &Tmux, extra: &str, after: &str) -> (Duration, bool) {
    tmux.clear();
    let line = format!("{} run {extra} '{LIVE}'{after}; echo r''c=$?", bin());
    tmux.type_line(&line);
    let typed = Instant::now();
    let (at, summary) = loop {
        // Rows as shown: a typed line that fills the row exactly would be joined with the next.
        let screen = tmux.screen();
        let at = typed.elapsed();
        if screen.lines().any(|l| l.trim_end() == "1") {
            break (at, screen.contains("Exit code"));
        }
        assert!(at < PATIENCE, "{extra}{after}: no line 1 on the screen: {screen}");
        std::thread::sleep(Duration::from_millis(20));
    };
    let screen = tmux.wait_for("rc=");
    assert!(screen.contains("rc=0"), "{screen}");
    (at, summary)
}

#[test]
fn a_foreground_run_on_a_terminal_streams_line_by_line_and_takes_input() {
    let home = Home::new();
    let tmux = Tmux::start(&home, 120, 40);
    // On a terminal: the command's output is a terminal, so `1` shows while it sleeps.
    let (at, summary) = time_to_first_line(&tmux, "", "");
    assert!(!summary && at <= Duration::from_millis(1500), "1 after {at:?}, summary: {summary}");
    let screen = tmux.lines(false);
    assert!(screen.contains("Exit code: 0\nWall time: "), "{screen}");
    assert!(screen.contains("Session: sh-"), "{screen}");
    // `--no-pty` and a piped stdout: a pipe, so python keeps `1` until it exits (after 2 s).
    for (extra, after) in [("--no-pty", ""), ("", " | cat")] {
        let (at, _) = time_to_first_line(&tmux, extra, after);
        assert!(at >= Duration::from_millis(1900), "{extra}{after}: 1 after {at:?}");
    }
    // Typed input reaches the command; its exit status is the client's, with the summary.
    let runs = spools(home.path()).len();
    tmux.clear();
    tmux.type_line(&format!("{} run 'read x; echo got-$x; exit 3'; echo E''ND=$?", bin()));
    eventually(PATIENCE, "the run to start", || (spools(home.path()).len() > runs).then_some(()));
    tmux.type_line("hello");
    let screen = tmux.wait_for("END=");
    assert!(screen.contains("got-hello"), "{screen}");
    assert!(screen.contains("Exit code: 3\n"), "{screen}");
    assert!(screen.contains("END=3"), "{screen}");
}

#[test]
fn ctrl_c_stops_a_shell_loop_of_terminal_runs_and_restores_the_terminal() {
    let home = Home::new();
    let tmux = Tmux::start(&home, 120, 40);
    let bin = bin();
    tmux.type_line(&format!("for i in 1 2 3; do {bin} run 'sleep 30'; done; echo d''one=$?"));
    let spool = eventually(PATIENCE, "the first run to start", || {
        spools(home.path()).into_iter().find(|s| s.with_file_name("session.json").exists())
    });
    let marker = procs::session_marker(spool.to_str().unwrap());
    eventually(PATIENCE, "sleep 30 to run", || {
        (!procs::marked_processes(&marker).is_empty()).then_some(())
    });
    tmux.tmux(&["send-keys", "C-c"]);
    // The command got Ctrl-C from its terminal and died of it (not killed by the client).
    let screen = tmux.wait_for("killed by signal SIGINT");
    assert!(screen.contains("Exit code: 130"), "{screen}");
    eventually(PATIENCE, "the prompt", || {
        tmux.lines(false).trim_end().ends_with("\n$").then_some(())
    });
    assert!(!tmux.lines(false).contains("done="), "the loop went on: {screen}");
    tmux.type_line("st=$?");
    let status = tmux.output_of("echo status=$st; stty -a", false);
    let status = status.replace('\n', " ");
    assert!(status.contains("status=130"), "{status}");
    let modes: Vec<&str> = status.split_whitespace().collect();
    for mode in ["icanon", "echo", "isig", "icrnl", "opost"] {
        assert!(modes.contains(&mode), "the terminal is left raw ({mode}): {status}");
    }
    assert!(procs::marked_processes(&marker).is_empty(), "the tree is gone");
    assert_eq!(spools(home.path()).len(), 1, "a second run was started after Ctrl-C");
}

/// Three running sessions with long commands.
fn long_sessions(home: &Home) -> Vec<String> {
    (0..3)
        .map(|i| {
            let command = format!("sleep 60; echo {i}{}", "-long-argument".repeat(12));
            home.run_bg(&command)["id"].as_str().unwrap().to_owned()
        })
        .collect()
}

#[test]
fn ps_keeps_one_line_per_session_and_whole_ids_in_narrow_and_unsized_terminals() {
    let home = Home::new();
    let ids = long_sessions(&home);
    let tmux = Tmux::start(&home, 40, 30);
    let narrow = tmux.output_of(&format!("{} ps", bin()), false);
    let rows: Vec<&str> = narrow.lines().collect();
    assert_eq!(rows.len(), 4, "a header and one line per session:\n{narrow}");
    assert!(rows[0].starts_with("ID") && rows[0].ends_with("COMMAND"), "{narrow}");
    for (row, id) in rows[1..].iter().zip(&ids) {
        assert!(row.starts_with(&format!("{id} ")), "{id} whole: {narrow}");
        assert!(row.chars().count() <= 40 && row.ends_with('…'), "{row:?}");
    }
    // A terminal that reports 0 columns: no limit (the lines wrap on the screen, not in `ps`).
    let zero = tmux.output_of(&format!("stty cols 0; {} ps", bin()), false);
    let rows: Vec<&str> = zero.lines().collect();
    assert_eq!(rows.len(), 4, "{zero}");
    assert!(rows[0].contains("ID") && rows[0].contains("LINES  STARTED"), "{zero}");
    for (row, id) in rows[1..].iter().zip(&ids) {
        assert!(row.starts_with(&format!("{id} ")) && row.contains("sleep 60; echo"), "{row}");
    }
    for id in &ids {
        home.ok(&["kill", id]);
    }
}

#[test]
fn logs_show_colour_on_a_terminal_and_exact_bytes_with_raw() {
    let home = Home::new();
    let id = home.run_bg(r"printf '\033[31mred\033[0m \033[2Jx\n'; sleep 0.2")["id"]
        .as_str()
        .unwrap()
        .to_owned();
    home.wait_finished(&id);
    let tmux = Tmux::start(&home, 120, 30);
    let shown = tmux.output_of(&format!("{} logs {id}", bin()), true);
    assert!(shown.contains("\x1b[31mred"), "the colour is shown: {shown:?}");
    assert!(shown.contains(r"\x1b[2Jx"), "other controls stay escaped: {shown:?}");
    let never = tmux.output_of(&format!("{} logs --color never {id}", bin()), true);
    assert!(!never.contains("\x1b[31m") && never.contains(r"\x1b[31mred"), "{never:?}");
    let read = tmux.output_of(&format!("{} read {id}", bin()), true);
    assert!(read.contains("\x1b[31mred"), "read shows the colour too: {read:?}");
    // Piped: the exact bytes with --raw, escaped text without.
    let raw = home.run(&["logs", "--raw", &id]);
    assert_eq!(raw.stdout, b"\x1b[31mred\x1b[0m \x1b[2Jx\n");
    let piped = home.ok(&["logs", &id]);
    assert_eq!(piped, "\\x1b[31mred\\x1b[0m \\x1b[2Jx\n");
    let always = home.ok(&["logs", "--color", "always", &id]);
    assert_eq!(always, "\x1b[31mred\x1b[0m \\x1b[2Jx\n");
}

#[test]
fn every_run_and_restart_answer_names_its_session_and_q_prints_the_id_alone() {
    let home = Home::new();
    let quiet = home.run(&["run", "--bg", "-q", "true"]);
    assert!(quiet.status.success(), "{}", text(&quiet.stderr));
    let id = text(&quiet.stdout);
    let number = id.strip_prefix("sh-").and_then(|n| n.strip_suffix('\n'));
    assert!(number.is_some_and(|n| n.parse::<u32>().is_ok()), "exactly sh-N\\n: {id:?}");
    let id = id.trim_end().to_owned();
    home.wait_finished(&id);

    let foreground = home.ok(&["run", "echo hi"]);
    assert!(foreground.starts_with("Exit code: 0\nWall time: "), "{foreground}");
    assert!(foreground.contains("\nSession: sh-"), "{foreground}");
    let waited = home.ok(&["run", "--bg", "--yield-ms", "5000", "true"]);
    assert!(waited.starts_with("Exit code: 0\n") && waited.contains("\nSession: sh-"), "{waited}");
    let running = home.ok(&["run", "--bg", "sleep 30"]);
    let running_id = running.lines().next().unwrap().rsplit(' ').next().unwrap().to_owned();
    assert!(running.starts_with("Process running with session ID sh-"), "{running}");
    home.session(&running_id);

    let restarted = home.run(&["restart", "-q", &id]);
    let new_id = text(&restarted.stdout);
    assert!(new_id.starts_with("sh-") && new_id.ends_with('\n'), "{new_id:?}");
    assert_eq!(new_id.lines().count(), 1, "{new_id:?}");
    home.wait_finished(new_id.trim_end());
    let answer = home.ok(&["restart", &id]);
    assert!(answer.contains("sh-"), "the restart answer names its session: {answer}");
    let killed = home.ok(&["kill", &running_id]);
    assert!(killed.contains(&running_id), "{killed}");
}

#[test]
fn sigterm_to_a_terminal_run_ends_its_tree_and_restores_the_terminal() {
    let home = Home::new();
    let tmux = Tmux::start(&home, 120, 40);
    let shell: u32 = tmux.tmux(&["display-message", "-p", "#{pane_pid}"]).trim().parse().unwrap();
    tmux.type_line(&format!("{} run 'sleep 30'", bin()));
    let spool = eventually(PATIENCE, "the run to start", || {
        spools(home.path()).into_iter().find(|s| s.with_file_name("session.json").exists())
    });
    let marker = procs::session_marker(spool.to_str().unwrap());
    eventually(PATIENCE, "sleep 30 to run", || {
        (!procs::marked_processes(&marker).is_empty()).then_some(())
    });
    // The client: the pane shell's child (a pid, never a name).
    let children = format!("/proc/{shell}/task/{shell}/children");
    let client: i32 = std::fs::read_to_string(children).unwrap().trim().parse().unwrap();
    // SAFETY: kill(2) of the client this test's pane started.
    unsafe { libc::kill(client, libc::SIGTERM) };
    eventually(PATIENCE, "the prompt", || {
        tmux.lines(false).trim_end().ends_with("\n$").then_some(())
    });
    tmux.type_line("st=$?");
    let status = tmux.output_of("echo status=$st; stty -a", false).replace('\n', " ");
    assert!(status.contains("status=143"), "{status}");
    let modes: Vec<&str> = status.split_whitespace().collect();
    for mode in ["icanon", "echo", "isig"] {
        assert!(modes.contains(&mode), "the terminal is left raw ({mode}): {status}");
    }
    assert!(procs::marked_processes(&marker).is_empty(), "the tree is gone");
}
