//! The kill-shape matrix: every process shape that has ever escaped a session (plain, pipeline,
//! nested `timeout`, `&`+wait, `setsid`, double fork, `nohup`, trap TERM, pipe holder, `env -i
//! setsid`, python setsid + double fork + empty environment, perl `setpgrp`, a setsid storm,
//! re-fork on TERM, a detached daemon that leaves no trace of the session but being an orphan,
//! and four shapes orphaned at once: a `setsid env -i` double fork, a double fork with closed
//! stdio, `(setsid sleep &)` and `nohup … & disown`), each on a pipe and on a PTY, ended by
//! `kill`, by its timeout and by its own normal exit, through a real daemon with cgroup
//! containment, without one (where session keepers are the default), and without either
//! (`--no-cgroup --session-keeper=never`). With keepers nothing may be left (every orphan lands on its session's keeper) and no report
//! may say "not terminated"; with a cgroup anything left must be named (`survivors` /
//! `unattributed`, `terminated: false`), no report may say "not terminated" naming nothing and
//! none may name another case's process; with neither, anything left must be named somewhere
//! (an orphan with no trace of its session is `unattributed` in every report).
//!
//! What is left is found independently of the code under test: every process of a case carries a
//! number unique to the case in its command line (`sleep 41.23450007`), which survives `env -i`
//! and `setsid`. All cases of a mode run at once, so the whole matrix takes seconds; the tally is
//! printed (`--nocapture`) for `docs/reliability.md`.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering::Relaxed;
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use stockade_testkit::procs::{KillCarrying, carrying, pid_alive};
use stockade_testkit::{DaemonProc, PATIENCE, Rpc, cannot_run, eventually};

/// Shapes: `(name, fragment)`. A fragment starts its processes and returns (everything long-lived
/// is backgrounded); `T` is replaced by the case's unique sleep length.
const SHAPES: &[(&str, &str)] = &[
    ("plain", "sleep {T} &"),
    ("pipeline", "sleep {T} | cat | cat &"),
    ("nested timeout", "timeout 60 sh -c 'timeout 50 sleep {T}' &"),
    ("& + wait", "(sleep {T} & sleep {T} & wait) &"),
    ("setsid", "setsid sleep {T} &"),
    ("double fork", "(sh -c 'sleep {T} &' &)"),
    ("nohup", "nohup sleep {T} >/dev/null 2>&1 &"),
    ("trap TERM", "sh -c 'trap \"\" TERM; while :; do sleep 0.2; done' trap-{T} &"),
    ("pipe holder", "(exec sleep {T}) 2>&1 &"),
    ("env -i setsid", "env -i setsid sleep {T} &"),
    (
        "python setsid+double fork+empty env",
        "/usr/bin/python3 -c 'import os,sys\nos.setsid()\nif os.fork()==0:\n  if os.fork()==0:\n    os.execve(\"/bin/sleep\",[\"sleep\",sys.argv[1]],{})\n  os._exit(0)\nos.wait()' {T}",
    ),
    ("perl setpgrp", "perl -e 'setpgrp(0,0); exec \"sleep\", $ARGV[0]' {T} &"),
    ("setsid storm", "for i in 1 2 3 4 5 6; do setsid sleep {T} & env -i setsid sleep {T} & done"),
    (
        "detached (env -i setsid, stdio closed)",
        "env -i setsid sh -c 'exec sleep {T}' </dev/null >/dev/null 2>&1 &",
    ),
    (
        "re-fork on TERM",
        "sh -c 'trap \"env -i setsid sleep {T} & exit 0\" TERM; while :; do sleep 0.2; done' refork-{T} &",
    ),
    // Orphaned at once: the middle process exits before anything can see its child, so the
    // child has no trace of the session but who it was reparented to.
    (
        "orphaned at once: setsid env -i double fork",
        "(setsid env -i /bin/sh -c 'sleep {T} & exec sleep {T}' </dev/null >/dev/null 2>&1 &)",
    ),
    ("orphaned at once: closed stdio", "(sh -c 'sleep {T} <&- >&- 2>&- &' &)"),
    ("orphaned at once: setsid", "(setsid sleep {T} &)"),
    ("orphaned at once: nohup & disown", "bash -c 'nohup sleep {T} >/dev/null 2>&1 & disown'"),
];

/// How each case ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Ending {
    Kill,
    Timeout,
    Exit,
}

const ENDINGS: [Ending; 3] = [Ending::Kill, Ending::Timeout, Ending::Exit];

/// One case's outcome.
#[derive(Debug)]
struct Outcome {
    shape: &'static str,
    /// The case's token.
    token: String,
    ending: Ending,
    pty: bool,
    /// Live processes of the case after its ending.
    left: Vec<u32>,
    /// The report (kill's, or the run's `cleanup`; `None` when nothing was left to clean).
    report: Option<Value>,
}

impl Outcome {
    /// Named: the report says not terminated and lists every process left.
    fn named(&self) -> bool {
        let Some(r) = &self.report else { return false };
        let listed = self.listed();
        r["terminated"] == false && self.left.iter().all(|p| listed.contains(&u64::from(*p)))
    }

    /// The pids the report names as left (`survivors` and `unattributed`).
    fn listed(&self) -> Vec<u64> {
        let Some(r) = &self.report else { return Vec::new() };
        ["survivors", "unattributed"]
            .iter()
            .flat_map(|key| r[*key].as_array().into_iter().flatten().filter_map(Value::as_u64))
            .collect()
    }

    /// Whether the report says "not terminated".
    fn alarmed(&self) -> bool {
        self.report.as_ref().is_some_and(|r| r["terminated"] == false)
    }

    /// Pids the report names that another case made (a report must name only its own).
    fn foreign(&self, owners: &HashMap<u32, String>) -> Vec<u64> {
        let mine = |pid: &u64| {
            u32::try_from(*pid).ok().and_then(|p| owners.get(&p)).is_none_or(|t| *t == self.token)
        };
        self.listed().into_iter().filter(|p| !mine(p)).collect()
    }
}

/// Runs one case against `daemon` and returns what was left.
fn run_case(
    daemon: &DaemonProc,
    shape: &'static str,
    fragment: &str,
    ending: Ending,
    pty: bool,
    token: String,
    seen: &Mutex<HashMap<u32, String>>,
) -> Outcome {
    let body = fragment.replace("{T}", &token);
    let command = match ending {
        // The root stays until it is killed or times out.
        Ending::Kill | Ending::Timeout => format!("{body}\nexec sleep {token}"),
        // The root exits by itself once the shape has formed.
        Ending::Exit => format!("{body}\nsleep 1.5\nexit 0"),
    };
    let mut params = json!({"command": command, "yield_ms": 0});
    if pty {
        params["pty"] = json!({"rows": 24, "cols": 80});
    }
    let mut rpc = daemon.client();
    let seen_alive = || seen.lock().unwrap().values().any(|t| *t == token);
    let report = end_case(&mut rpc, shape, ending, params, seen_alive);
    // What terminate killed is gone by now; give the kernel a moment for anything just killed.
    let deadline = Instant::now() + Duration::from_secs(3);
    let mut left = carrying(&token);
    while !left.is_empty() && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(50));
        left = carrying(&token);
    }
    // A case whose processes never appeared proves nothing.
    let formed = !left.is_empty() || seen.lock().unwrap().values().any(|t| *t == token);
    assert!(formed, "{shape} / {ending:?} / pty {pty}: its processes never appeared");
    Outcome { shape, token, ending, pty, left, report }
}

/// Ends a case as `ending` says; the terminate report, if the daemon gave one. A kill comes once
/// the shape has formed: the root ran its whole body and the watcher has seen the case alive.
fn end_case(
    rpc: &mut Rpc,
    shape: &str,
    ending: Ending,
    mut params: Value,
    seen_alive: impl Fn() -> bool,
) -> Option<Value> {
    match ending {
        Ending::Kill => {
            params["background"] = json!(true);
            let command = params["command"].as_str().unwrap_or_default().to_owned();
            let token = command.rsplit(' ').next().unwrap_or_default();
            let run = rpc.ok("run", params);
            let root = u32::try_from(run["pid"].as_u64().expect("a run's pid")).unwrap();
            eventually(PATIENCE, &format!("{shape}: the shape to form"), || {
                (body_done(root, token) && seen_alive()).then_some(())
            });
            let killed = rpc.ok("kill", json!({"id": run["id"]}));
            Some(killed["report"].clone())
        }
        Ending::Timeout | Ending::Exit => {
            if ending == Ending::Timeout {
                params["timeout_ms"] = json!(1200);
            }
            // A foreground run answers when the session ends (or after `yield_ms`).
            params["yield_ms"] = json!(30_000);
            let run = rpc.ok("run", params);
            assert!(run["state"] != "running", "{shape}: the run ended: {run}");
            (!run["cleanup"].is_null()).then(|| run["cleanup"].clone())
        }
    }
}

/// Whether a case's root has run its whole body (every `&` of the shape has forked): it has
/// executed its last line, `exec sleep <token>`. The root is `root` itself or, where the session
/// keeper is the session's root, the keeper's child.
fn body_done(root: u32, token: &str) -> bool {
    let last_line = format!("sleep\0{token}\0");
    carrying(token).into_iter().any(|pid| {
        let is_last =
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c == last_line.as_bytes());
        is_last && (pid == root || parent(pid) == Some(root))
    })
}

/// A process's parent pid (`/proc/<pid>/stat` field 4, after the parenthesised name).
fn parent(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(") ")?.1.split(' ').nth(1)?.parse().ok()
}

/// Runs the whole matrix against one daemon, all cases at once; returns the outcomes and the
/// case of every process seen (pid → token).
fn matrix(daemon: &DaemonProc, mode: u32, run: u32) -> (Vec<Outcome>, HashMap<u32, String>) {
    let prefix = format!("4{mode}.{run:04}");
    let seen = Mutex::new(HashMap::new());
    let done = AtomicBool::new(false);
    let outcomes = thread::scope(|scope| {
        // One watcher records every case token it ever sees alive: proof each case formed.
        scope.spawn(|| {
            while !done.load(Relaxed) {
                let found = tokens_alive(&prefix);
                seen.lock().unwrap().extend(found);
                thread::sleep(Duration::from_millis(20));
            }
        });
        let mut handles = Vec::new();
        let mut case = 0u32;
        for &(shape, fragment) in SHAPES {
            for ending in ENDINGS {
                for pty in [false, true] {
                    case += 1;
                    // Unique per mode, run and case: `4<mode>.<run:4><case:4>`.
                    let token = format!("{prefix}{case:04}");
                    let seen = &seen;
                    handles.push(scope.spawn(move || {
                        run_case(daemon, shape, fragment, ending, pty, token, seen)
                    }));
                }
            }
        }
        let outcomes = handles.into_iter().map(|h| h.join()).collect::<Vec<_>>();
        done.store(true, Relaxed);
        outcomes.into_iter().map(|o| o.expect("a case panicked")).collect()
    });
    (outcomes, seen.into_inner().unwrap())
}

/// The case tokens (arguments starting with `prefix`, up to a `-` prefix like `trap-`) in the
/// command lines of live processes, with their pids.
fn tokens_alive(prefix: &str) -> Vec<(u32, String)> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    let mut found = Vec::new();
    for pid in dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok()) {
        let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else { continue };
        for arg in cmdline.split(|b| *b == 0) {
            let arg = String::from_utf8_lossy(arg);
            let arg = arg.rsplit('-').next().unwrap_or_default();
            if arg.starts_with(prefix) && arg.len() == prefix.len() + 4 && pid_alive(pid) {
                found.push((pid, arg.to_owned()));
            }
        }
    }
    found
}

/// How strictly a mode is judged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Strictness {
    /// Nothing may be left, and no report may say "not terminated" (without a cgroup: every
    /// process of a session stays under its keeper, so every one is found and killed).
    NothingLeft,
    /// Anything left must be named; no report may say "not terminated" with nothing of its
    /// own to name (a false alarm).
    LeftNamed,
    /// Anything left must be named, in its own report or in another's `unattributed` (without
    /// a cgroup or a keeper, an orphan on the daemon carries no trace of its session: it is
    /// named in every report taken while it is alive).
    NamedSomewhere,
}

/// Prints the tally for `docs/reliability.md` and fails on any case where something was left
/// that the strictness does not allow, or whose report names another case's process.
fn judge(mode: &str, outcomes: &[Outcome], owners: &HashMap<u32, String>, strict: Strictness) {
    let mut tally: BTreeMap<(Ending, bool), (usize, usize, usize)> = BTreeMap::new();
    let mut bad = Vec::new();
    for o in outcomes {
        let t = tally.entry((o.ending, o.pty)).or_default();
        t.0 += 1;
        let foreign = o.foreign(owners);
        let why = if !foreign.is_empty() && strict != Strictness::NamedSomewhere {
            Some(format!("names other cases' processes {foreign:?}"))
        } else if strict == Strictness::NothingLeft && !o.left.is_empty() {
            Some("processes left".to_owned())
        } else if strict == Strictness::NothingLeft && o.alarmed() {
            Some("the report says not terminated".to_owned())
        } else if !o.left.is_empty() && !o.named() {
            Some("processes left that the report did not name".to_owned())
        } else if o.alarmed() && o.listed().is_empty() {
            Some("false alarm: not terminated, nothing named".to_owned())
        } else {
            None
        };
        match why {
            Some(why) => bad.push(format!(
                "{} / {:?} / pty {}: {why}: left {:?}, report {}",
                o.shape,
                o.ending,
                o.pty,
                o.left,
                o.report.as_ref().map_or("none".to_owned(), Value::to_string)
            )),
            None if o.left.is_empty() => t.1 += 1,
            None => t.2 += 1,
        }
    }
    eprintln!("kill matrix, {mode}: ending | stdio | cases | 0 left | left and named");
    for ((ending, pty), (n, zero, named)) in &tally {
        let stdio = if *pty { "pty" } else { "pipe" };
        eprintln!("kill matrix, {mode}: {ending:?} | {stdio} | {n} | {zero} | {named}");
    }
    for o in outcomes.iter().filter(|o| !o.left.is_empty() && o.named()) {
        eprintln!(
            "kill matrix, {mode}: named: {} / {:?} / pty {}: {:?}",
            o.shape, o.ending, o.pty, o.left
        );
    }
    assert!(bad.is_empty(), "{mode}: {} bad cases:\n{}", bad.len(), bad.join("\n"));
}

fn run_id() -> u32 {
    std::process::id() % 10_000
}

#[test]
fn every_shape_is_gone_with_session_keepers_without_cgroup() {
    let run = run_id();
    let _cleanup = KillCarrying(format!("41.{run:04}"));
    // Keepers are the default where sessions get no cgroup.
    let daemon = DaemonProc::start(&["--no-cgroup"]);
    let status = daemon.client().ok("status", json!({}));
    assert_eq!(status["containment"], "process-group", "{status}");
    assert_eq!(status["session_keeper"], true, "{status}");
    let (outcomes, owners) = matrix(&daemon, 1, run);
    judge("no cgroup, session keepers", &outcomes, &owners, Strictness::NothingLeft);
}

#[test]
fn every_shape_is_gone_or_named_without_cgroup() {
    let run = run_id();
    let _cleanup = KillCarrying(format!("43.{run:04}"));
    let daemon = DaemonProc::start(&["--no-cgroup", "--session-keeper=never"]);
    let status = daemon.client().ok("status", json!({}));
    assert_eq!(status["containment"], "process-group", "{status}");
    assert_eq!(status["session_keeper"], false, "{status}");
    let (outcomes, owners) = matrix(&daemon, 3, run);
    judge("no cgroup", &outcomes, &owners, Strictness::NamedSomewhere);
}

#[test]
fn every_shape_is_gone_or_named_with_cgroup() {
    let run = run_id();
    let _cleanup = KillCarrying(format!("42.{run:04}"));
    let daemon = DaemonProc::start(&[]);
    let status = daemon.client().ok("status", json!({}));
    if status["containment"] != "cgroup" {
        cannot_run(&format!("no usable cgroup v2 here: {status}"));
        return;
    }
    let (outcomes, owners) = matrix(&daemon, 2, run);
    judge("cgroup", &outcomes, &owners, Strictness::LeftNamed);
}
