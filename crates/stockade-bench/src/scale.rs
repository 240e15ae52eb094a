//! Scale: `grep` over a large spool against ripgrep on the same file, and `list` with many
//! running sessions.
//!
//! * `grep`: one session prints `seq 1 N` (about `bytes` of lines), then `grep` for the anchored
//!   last line (`'^N$'`, the case that used to lose the searcher's fast path) and for the same
//!   digits as a plain literal, each through the daemon and with `rg -n` on the spool file; best
//!   of `rounds` each. The figure is speed relative to `rg` (rg seconds / stockade seconds).
//! * `list`: `sessions` background `sleep` commands stay running; `list` is called `calls` times;
//!   the figures are its median wall time and the daemon CPU per call (`/proc/<pid>/stat`).

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use stockade_proto::SessionState;
use stockade_proto::rpc::{GrepParams, KillParams, ListParams, RunParams, method};

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
fn cpu(pid: u32) -> Result<Duration> {
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
