//! Scale: `grep` over a large spool against ripgrep on the same file, `list` with many
//! running sessions, and starting and ending many sessions (`scale`).
//!
//! * `grep`: one session prints `seq 1 N` (about `bytes` of lines), then `grep` for the anchored
//!   last line (`'^N$'`, the case that used to lose the searcher's fast path) and for the same
//!   digits as a plain literal, each through the daemon and with `rg -n` on the spool file; best
//!   of `rounds` each. The figure is speed relative to `rg` (rg seconds / stockade seconds).
//! * `list`: `sessions` background `sleep` commands stay running; `list` is called `calls` times;
//!   the figures are its median wall time and the daemon CPU per call (`/proc/<pid>/stat`).
//! * `scale`: N background `sleep 1000`s started over 16 connections of the client library at
//!   once (timed); at N running, the daemon CPU of single `kill`s and `list`s; one `kill_many`
//!   of all (what `stockade kill --all` sends), timed to 0 processes; N started again and
//!   `daemon stop` (the `shutdown` call), timed to 0 processes and to the daemon's exit.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use stockade_proto::SessionState;
use stockade_proto::rpc::{
    GrepParams, KillManyParams, KillParams, ListParams, NoParams, RunParams, method,
};

use crate::daemon::Daemon;
use crate::{BenchError, MIB, Result, mib};

/// Goal for grep: at least half of ripgrep's speed on the same file (README.md, "Results").
pub const GREP_GOAL: f64 = 0.5;
/// Goal for list: wall time and daemon CPU per call at 1,000 running sessions, seconds.
pub const LIST_GOAL_S: f64 = 0.2;

/// One grep case's figures.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GrepCase {
    /// The pattern.
    pub pattern: String,
    /// Best seconds through the daemon.
    pub stockade_s: f64,
    /// Best seconds of `rg -n` on the spool.
    pub rg_s: f64,
    /// rg seconds / stockade seconds (speed relative to rg; ≥ the goal is good).
    pub speed_vs_rg: f64,
}

/// `bench grep`'s summary.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GrepSummary {
    /// Spool bytes.
    pub bytes: u64,
    /// The cases.
    pub cases: Vec<GrepCase>,
}

impl GrepSummary {
    /// The lines printed.
    pub fn lines(&self) -> Vec<String> {
        self.cases
            .iter()
            .map(|c| {
                let verdict = if c.speed_vs_rg >= GREP_GOAL { "meets" } else { "misses" };
                format!(
                    "grep {:.0} MiB spool, {:?}: stockade {:.3}s vs rg -n {:.3}s → {:.2}× rg's speed ({verdict} the ≥ {GREP_GOAL}× goal)",
                    mib(self.bytes),
                    c.pattern,
                    c.stockade_s,
                    c.rg_s,
                    c.speed_vs_rg
                )
            })
            .collect()
    }
}

/// Best wall time of `rounds` runs of `f`.
fn best(rounds: usize, mut f: impl FnMut() -> Result<()>) -> Result<f64> {
    let mut best = f64::MAX;
    for _ in 0..rounds.max(1) {
        let t = Instant::now();
        f()?;
        best = best.min(t.elapsed().as_secs_f64());
    }
    Ok(best)
}

/// How many `seq` lines make about `bytes` (lines of 9 digits and a newline at that size).
fn lines_for(bytes: u64) -> u64 {
    (bytes / 9).max(10)
}

/// grep over a spool of about `bytes` against `rg -n` on the same file.
pub fn grep(exe: &Path, out: &Path, work: &Path, bytes: u64, rounds: usize) -> Result<GrepSummary> {
    std::fs::create_dir_all(out).map_err(|e| BenchError::path("create", out, e))?;
    let rg_ok = Command::new("rg").arg("--version").output().is_ok_and(|o| o.status.success());
    if !rg_ok {
        return Err(BenchError::msg(
            "ripgrep (rg) is not installed; install it (Debian/Ubuntu: apt-get install ripgrep) or run tests/grep/install-deps.sh",
        ));
    }
    let tmp = super::speed::tmpdir(work)?;
    let mut daemon = Daemon::start(exe, &tmp.path().join("home"))?;
    let mut client = daemon.client()?;
    let n = lines_for(bytes);
    let run = RunParams {
        command: format!("seq 1 {n}"),
        yield_ms: Some(3_600_000),
        // `seq` prints a little more than `bytes` (9 per line is the floor); the default disk
        // cap (1 GiB) would end the 1 GiB case early.
        disk_cap: Some(bytes + bytes / 4 + 64 * MIB),
        ..RunParams::default()
    };
    let res = client.call::<method::Run>(run)?;
    if res.state != (SessionState::Exited { code: 0 }) {
        return Err(BenchError::msg(format!("`seq 1 {n}` ended {}", res.state.name())));
    }
    let spool = res.view.spool_path.clone();
    let size = std::fs::metadata(&spool).map_err(|e| BenchError::path("stat", &spool, e))?.len();
    let mut cases = Vec::new();
    for pattern in [format!("^{n}$"), format!("{n}")] {
        let params = GrepParams {
            id: res.id.clone(),
            pattern: pattern.clone(),
            max_matches: Some(10),
            timeout_ms: Some(60_000),
            ..GrepParams::default()
        };
        let stockade_s = best(rounds, || {
            let found = client.call::<method::Grep>(params.clone())?;
            if found.matches != 1 {
                return Err(BenchError::msg(format!("grep {pattern:?} found {}", found.matches)));
            }
            Ok(())
        })?;
        let rg_s = best(rounds, || {
            let o = Command::new("rg")
                .args(["-n", &pattern])
                .arg(&spool)
                .output()
                .map_err(|e| BenchError::io("run rg", e))?;
            if !o.status.success() {
                return Err(BenchError::msg(format!("rg {pattern:?} found nothing")));
            }
            Ok(())
        })?;
        cases.push(GrepCase {
            pattern,
            stockade_s,
            rg_s,
            speed_vs_rg: if stockade_s > 0.0 { rg_s / stockade_s } else { 0.0 },
        });
    }
    drop(client);
    daemon.shutdown();
    let summary = GrepSummary { bytes: size, cases };
    append(out, "scale.jsonl", &summary)?;
    Ok(summary)
}

/// `bench list`'s summary.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ListSummary {
    /// Running sessions.
    pub sessions: usize,
    /// `list` calls measured.
    pub calls: usize,
    /// Median wall seconds per call.
    pub median_s: f64,
    /// Daemon CPU seconds per call.
    pub daemon_cpu_s: f64,
    /// Seconds to kill every session (one `kill` each, in turn).
    pub kill_all_s: f64,
}

impl ListSummary {
    /// The line printed.
    pub fn line(&self) -> String {
        let ok = self.median_s <= LIST_GOAL_S && self.daemon_cpu_s <= LIST_GOAL_S;
        let verdict = if ok { "meets" } else { "misses" };
        format!(
            "list with {} running sessions: {:.3}s per call (median of {}), {:.3}s daemon CPU per call ({verdict} the ≤ {LIST_GOAL_S}s goal); killing all, one kill each, took {:.1}s",
            self.sessions, self.median_s, self.calls, self.daemon_cpu_s, self.kill_all_s
        )
    }
}

/// The CPU time (user + system) of `pid` so far.
pub(crate) fn cpu(pid: u32) -> Result<Duration> {
    let path = format!("/proc/{pid}/stat");
    let stat = std::fs::read_to_string(&path).map_err(|e| BenchError::io(path.clone(), e))?;
    let fields: Vec<&str> =
        stat.rfind(')').map(|at| stat[at + 1..].split_whitespace().collect()).unwrap_or_default();
    // utime and stime are fields 14 and 15 of stat(5); `fields` starts at field 3.
    let tick = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok());
    let (Some(user), Some(system)) = (tick(11), tick(12)) else {
        return Err(BenchError::msg(format!("{path} has no CPU times")));
    };
    // SAFETY: sysconf has no preconditions.
    let hz = u64::try_from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) }).unwrap_or(100).max(1);
    Ok(Duration::from_millis((user + system) * 1000 / hz))
}

/// `list` with `sessions` running sessions.
pub fn list(
    exe: &Path,
    out: &Path,
    work: &Path,
    sessions: usize,
    calls: usize,
) -> Result<ListSummary> {
    std::fs::create_dir_all(out).map_err(|e| BenchError::path("create", out, e))?;
    let tmp = super::speed::tmpdir(work)?;
    let mut daemon = Daemon::start(exe, &tmp.path().join("home"))?;
    let mut client = daemon.client()?;
    let mut ids = Vec::new();
    for _ in 0..sessions {
        let run =
            RunParams { command: "sleep 3600".into(), background: true, ..RunParams::default() };
        let res = client.call::<method::Run>(run)?;
        daemon.track_session(res.pid);
        ids.push(res.id);
    }
    // Warm up once, then measure.
    client.call::<method::List>(ListParams::default())?;
    let cpu_before = cpu(daemon.pid())?;
    let mut times = Vec::new();
    for _ in 0..calls.max(1) {
        let t = Instant::now();
        let listed = client.call::<method::List>(ListParams::default())?;
        times.push(t.elapsed().as_secs_f64());
        if listed.sessions.iter().filter(|s| s.processes > 0).count() < sessions {
            return Err(BenchError::msg("list counted fewer running sessions than were started"));
        }
    }
    let daemon_cpu_s =
        cpu(daemon.pid())?.saturating_sub(cpu_before).as_secs_f64() / times.len() as f64;
    times.sort_by(f64::total_cmp);
    let median_s = times[times.len() / 2];
    let t = Instant::now();
    for id in &ids {
        client.call::<method::Kill>(KillParams { id: id.clone(), signal: None, grace_ms: None })?;
    }
    let kill_all_s = t.elapsed().as_secs_f64();
    drop(client);
    daemon.shutdown();
    let summary = ListSummary { sessions, calls: times.len(), median_s, daemon_cpu_s, kill_all_s };
    append(out, "scale.jsonl", &summary)?;
    Ok(summary)
}

/// Goal: starting the sessions, seconds (1,000 background sessions).
pub const START_GOAL_S: f64 = 5.0;
/// Goal: from one `kill` of all (or `daemon stop`) to 0 processes, seconds.
pub const END_GOAL_S: f64 = 2.0;
/// Goal: daemon CPU of one `kill` at 1,000 running, seconds.
pub const KILL_CPU_GOAL_S: f64 = 0.020;
/// Goal: daemon CPU of one `list` at 1,000 running, seconds.
pub const LIST_CPU_GOAL_S: f64 = 0.050;
/// Connections the sessions are started over at once (the client library, one thread each).
const START_CONNECTIONS: usize = 16;
/// Single `kill`s and `list`s measured at N running (CPU is counted in 10 ms ticks).
const SINGLES: usize = 10;
/// How long the ends may take before the bench gives up waiting for 0 processes.
const END_LIMIT: Duration = Duration::from_secs(120);

/// `bench scale`'s figures for one containment mode.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ScaleSummary {
    /// `cgroup` or `process-group`.
    pub containment: String,
    /// Sessions started (each `sleep 1000`).
    pub sessions: usize,
    /// Seconds to start them, in parallel through the client library.
    pub start_s: f64,
    /// Daemon CPU seconds per single `kill` at about `sessions` running.
    pub kill_one_cpu_s: f64,
    /// Daemon CPU seconds per `list` at about `sessions` running.
    pub list_cpu_s: f64,
    /// Seconds from one `kill_many` of all (what `stockade kill --all` sends) to 0 processes.
    pub kill_all_s: f64,
    /// Seconds that call took to answer.
    pub kill_all_call_s: f64,
    /// Seconds to start them again (before `daemon stop`).
    pub restart_s: f64,
    /// Seconds from `daemon stop` (the `shutdown` call) to 0 processes.
    pub stop_zero_s: f64,
    /// Seconds from `daemon stop` to the daemon's exit.
    pub stop_exit_s: f64,
}

impl ScaleSummary {
    /// The lines printed: one per figure, with its goal.
    pub fn lines(&self) -> Vec<String> {
        let v = |ok: bool| if ok { "met" } else { "NOT met" };
        let (n, c) = (self.sessions, &self.containment);
        vec![
            format!(
                "scale ({c}): start {n} background sessions: {:.2}s (goal ≤ {START_GOAL_S}s: {})",
                self.start_s,
                v(self.start_s <= START_GOAL_S)
            ),
            format!(
                "scale ({c}): one kill at {n} running: {:.3}s daemon CPU (goal ≤ {KILL_CPU_GOAL_S}s: {})",
                self.kill_one_cpu_s,
                v(self.kill_one_cpu_s <= KILL_CPU_GOAL_S)
            ),
            format!(
                "scale ({c}): one list at {n} running: {:.3}s daemon CPU (goal ≤ {LIST_CPU_GOAL_S}s: {})",
                self.list_cpu_s,
                v(self.list_cpu_s <= LIST_CPU_GOAL_S)
            ),
            format!(
                "scale ({c}): kill --all of {n}: 0 processes after {:.2}s (call {:.2}s) (goal ≤ {END_GOAL_S}s: {})",
                self.kill_all_s,
                self.kill_all_call_s,
                v(self.kill_all_s <= END_GOAL_S)
            ),
            format!(
                "scale ({c}): daemon stop with {n} running: 0 processes after {:.2}s, daemon exited after {:.2}s (goal ≤ {END_GOAL_S}s to 0: {}); started again in {:.2}s",
                self.stop_zero_s,
                self.stop_exit_s,
                v(self.stop_zero_s <= END_GOAL_S),
                self.restart_s
            ),
        ]
    }
}

/// Starts `n` background `sleep 1000`s over [`START_CONNECTIONS`] connections at once; their
/// ids and root pids (each the pgid of its session).
fn start_many(daemon: &Daemon, n: usize) -> Result<Vec<(String, u32)>> {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let work = || -> Result<Vec<(String, u32)>> {
        let mut client = daemon.client()?;
        let mut done = Vec::new();
        while next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < n {
            let run = RunParams {
                command: "sleep 1000".into(),
                background: true,
                ..RunParams::default()
            };
            let res = client.call::<method::Run>(run)?;
            done.push((res.id, res.pid));
        }
        Ok(done)
    };
    let mut all = Vec::new();
    std::thread::scope(|scope| -> Result<()> {
        let threads: Vec<_> = (0..START_CONNECTIONS).map(|_| scope.spawn(work)).collect();
        for t in threads {
            let done = t.join().map_err(|_| BenchError::msg("a starting thread panicked"))?;
            all.extend(done?);
        }
        Ok(())
    })?;
    Ok(all)
}

/// Seconds from `since` until no process is left in any of the sessions' groups.
fn until_none(started: &[(String, u32)], since: Instant) -> Result<f64> {
    let none = crate::proc::wait_until(END_LIMIT, Duration::from_millis(10), || {
        !started.iter().any(|&(_, pgid)| crate::proc::group_alive(pgid))
    });
    if !none {
        return Err(BenchError::msg(format!(
            "processes of the sessions were still alive {}s after they were ended",
            END_LIMIT.as_secs()
        )));
    }
    Ok(since.elapsed().as_secs_f64())
}

/// Daemon CPU seconds per call of `f`, over `calls` calls.
fn cpu_per_call(pid: u32, calls: usize, mut f: impl FnMut(usize) -> Result<()>) -> Result<f64> {
    settle(pid)?;
    let before = cpu(pid)?;
    for i in 0..calls {
        f(i)?;
    }
    Ok(cpu(pid)?.saturating_sub(before).as_secs_f64() / calls.max(1) as f64)
}

/// Waits (at most 10 s) until the daemon is quiet — at most one clock tick of CPU in 300 ms —
/// so what a call costs is not mixed with work a burst of starts left it (such as temporary
/// directories made ready for the next sessions).
fn settle(pid: u32) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        let before = cpu(pid)?;
        std::thread::sleep(Duration::from_millis(300));
        if cpu(pid)?.saturating_sub(before) <= Duration::from_millis(10) {
            break;
        }
    }
    Ok(())
}

/// `bench scale` in one containment mode (`no_cgroup`: the daemon runs with `--no-cgroup`).
pub fn scale(
    exe: &Path,
    out: &Path,
    work: &Path,
    n: usize,
    no_cgroup: bool,
) -> Result<ScaleSummary> {
    std::fs::create_dir_all(out).map_err(|e| BenchError::path("create", out, e))?;
    let tmp = super::speed::tmpdir(work)?;
    let extra: &[&str] = if no_cgroup { &["--no-cgroup"] } else { &[] };
    let mut daemon = Daemon::start_with(exe, &tmp.path().join("home"), extra)?;
    let mut client = daemon.client()?;
    let containment = client.call::<method::Status>(NoParams {})?.containment;
    let t = Instant::now();
    let started = start_many(&daemon, n)?;
    let start_s = t.elapsed().as_secs_f64();
    for &(_, pid) in &started {
        daemon.track_session(pid);
    }
    client.call::<method::List>(ListParams::default())?;
    let list_cpu_s = cpu_per_call(daemon.pid(), SINGLES, |_| {
        client.call::<method::List>(ListParams::default())?;
        Ok(())
    })?;
    let kill_one_cpu_s = cpu_per_call(daemon.pid(), SINGLES, |i| {
        let id = started[i % started.len().max(1)].0.clone();
        client.call::<method::Kill>(KillParams { id, ..KillParams::default() })?;
        Ok(())
    })?;
    // The call answers once every session is finalised; the processes are watched meanwhile.
    let d = &daemon;
    let (kill_all_s, kill_all_call_s) = std::thread::scope(|scope| -> Result<(f64, f64)> {
        let t = Instant::now();
        let call = scope.spawn(move || -> Result<f64> {
            let all = KillManyParams { all: true, ..KillManyParams::default() };
            d.client()?.call::<method::KillMany>(all)?;
            Ok(t.elapsed().as_secs_f64())
        });
        let zero = until_none(&started, t);
        let call = call.join().map_err(|_| BenchError::msg("the kill thread panicked"))?;
        Ok((zero?, call?))
    })?;

    let t = Instant::now();
    let again = start_many(&daemon, n)?;
    let restart_s = t.elapsed().as_secs_f64();
    for &(_, pid) in &again {
        daemon.track_session(pid);
    }
    let t = Instant::now();
    client.call::<method::Shutdown>(NoParams {})?;
    let stop_zero_s = until_none(&again, t)?;
    crate::proc::wait_until(END_LIMIT, Duration::from_millis(10), || !daemon.is_alive());
    let stop_exit_s = t.elapsed().as_secs_f64();
    drop(client);
    daemon.shutdown();
    let summary = ScaleSummary {
        containment: serde_json::to_value(containment)?.as_str().unwrap_or("unknown").to_owned(),
        sessions: n,
        start_s,
        kill_one_cpu_s,
        list_cpu_s,
        kill_all_s,
        kill_all_call_s,
        restart_s,
        stop_zero_s,
        stop_exit_s,
    };
    append(out, "scale.jsonl", &summary)?;
    Ok(summary)
}

fn append<T: Serialize>(out: &Path, name: &str, row: &T) -> Result<()> {
    use std::io::Write;
    let path = out.join(name);
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .map_err(|e| BenchError::path("open", &path, e))?;
    writeln!(f, "{}", serde_json::to_string(row)?).map_err(|e| BenchError::path("write", &path, e))
}
