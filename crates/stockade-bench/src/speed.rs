//! Speed: draining output through the daemon against writing it straight to a file, and a
//! `run true` round trip against a bare fork+exec+wait. Both alternate the two sides round by
//! round (so page-cache warm-up favours neither) and write every round as JSONL.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use serde::{Deserialize, Serialize};
use stockade_proto::SessionState;
use stockade_proto::rpc::{CleanupParams, RunParams, method};

use crate::daemon::Daemon;
use crate::{BenchError, MIB, Result, mib};

/// One measured round.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Round {
    /// `drain` or `spawn`.
    pub bench: String,
    /// Round number.
    pub round: usize,
    /// Seconds through the daemon.
    pub stockade_s: f64,
    /// Seconds for the direct equivalent.
    pub direct_s: f64,
    /// Seconds through the daemon under `sandbox: workspace-write, network: none` (spawn only).
    #[serde(default)]
    pub sandboxed_s: f64,
    /// Seconds for `bwrap` with the same confinement running `true` (0: no `bwrap`; spawn only).
    #[serde(default)]
    pub bwrap_s: f64,
}

/// The summary line of a speed bench.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SpeedSummary {
    /// `drain` or `spawn`.
    pub bench: String,
    /// Bytes per drain round (0 for spawn).
    pub bytes: u64,
    /// Rounds.
    pub rounds: usize,
    /// Best (drain) or median (spawn) seconds through the daemon.
    pub stockade_s: f64,
    /// Best (drain) or median (spawn) seconds for the direct equivalent.
    pub direct_s: f64,
    /// stockade / direct.
    pub ratio: f64,
    /// The goal for the ratio (README.md, "Results").
    pub goal: f64,
    /// Daemon peak RSS over the bench, MiB.
    pub daemon_peak_rss_mib: f64,
    /// 90th percentile seconds through the daemon (spawn only).
    #[serde(default)]
    pub stockade_p90_s: f64,
    /// 90th percentile seconds for the direct equivalent (spawn only).
    #[serde(default)]
    pub direct_p90_s: f64,
    /// Median seconds of `run true` under `workspace-write` + `network none` (spawn only).
    #[serde(default)]
    pub sandboxed_s: f64,
    /// sandboxed / unsandboxed `run true` (spawn only).
    #[serde(default)]
    pub sandbox_ratio: f64,
    /// Read rules a sandboxed run of that daemon carries to hide its home: one per entry beside
    /// each directory on the way to it (`stockade_proc::sandbox::hiding_rules`; spawn only).
    #[serde(default)]
    pub read_rules: u64,
    /// Median seconds of [`BWRAP_ARGS`] running `true` (0: `bwrap` is not installed; spawn only).
    #[serde(default)]
    pub bwrap_s: f64,
}

impl SpeedSummary {
    /// The one line printed.
    pub fn line(&self) -> String {
        let verdict = if self.ratio <= self.goal { "meets" } else { "misses" };
        match self.bench.as_str() {
            "drain" => format!(
                "drain {:.0} MiB: stockade pipe {:.3}s ({:.2} GiB/s) vs straight to a file {:.3}s → {:.2}× ({verdict} the ≤ {:.2}× goal); daemon peak RSS {:.1} MiB",
                mib(self.bytes),
                self.stockade_s,
                self.bytes as f64 / self.stockade_s / f64::from(1u32 << 30),
                self.direct_s,
                self.ratio,
                self.goal,
                self.daemon_peak_rss_mib
            ),
            _ => {
                format!(
                    "spawn: `run true` round trip p50 {:.2} ms (p90 {:.2}) vs fork+exec+wait of /bin/sh -c true p50 {:.2} ms (p90 {:.2}) over {} rounds → {:.2}× ({verdict} the ≤ {:.0}× goal); sandboxed (workspace-write, network none) p50 {:.2} ms → {:.2}× unsandboxed ({} the ≤ {:.1}× goal), hiding the daemon's home with {} read rules",
                    self.stockade_s * 1000.0,
                    self.stockade_p90_s * 1000.0,
                    self.direct_s * 1000.0,
                    self.direct_p90_s * 1000.0,
                    self.rounds,
                    self.ratio,
                    self.goal,
                    self.sandboxed_s * 1000.0,
                    self.sandbox_ratio,
                    if self.sandbox_ratio <= SANDBOX_GOAL { "meets" } else { "misses" },
                    SANDBOX_GOAL,
                    self.read_rules
                ) + &if self.bwrap_s > 0.0 {
                    format!(
                        "; bubblewrap with the same confinement p50 {:.2} ms: sandboxed is {:.2}× bubblewrap",
                        self.bwrap_s * 1000.0,
                        self.sandboxed_s / self.bwrap_s
                    )
                } else {
                    "; bubblewrap not installed (no side-by-side row)".to_owned()
                }
            }
        }
    }
}

/// Drain goal: at most 1.25× writing straight to a file (README.md, "Results").
pub const DRAIN_GOAL: f64 = 1.25;
/// Spawn goal: at most 2× a bare fork+exec+wait (README.md, "Results").
pub const SPAWN_GOAL: f64 = 2.0;
/// Sandbox goal: `run true` under `workspace-write` (in namespaces of its own) at most 1.5×
/// unsandboxed, and no slower than bubblewrap's same confinement.
pub const SANDBOX_GOAL: f64 = 1.5;

/// bubblewrap's arguments for the confinement a sandboxed session gets (`WS` is replaced by the
/// workspace), then the command.
pub const BWRAP_ARGS: &[&str] = &[
    "--unshare-all",
    "--ro-bind",
    "/",
    "/",
    "--dev",
    "/dev",
    "--proc",
    "/proc",
    "--bind",
    "WS",
    "WS",
    "--cap-drop",
    "ALL",
];

/// `bwrap`'s path, where it is installed.
fn bwrap() -> Option<PathBuf> {
    ["/usr/bin/bwrap", "/usr/local/bin/bwrap"].iter().map(PathBuf::from).find(|p| p.exists())
}

/// One `bwrap … true` in `ws`, timed; `None` without `bwrap`.
fn bwrap_true(ws: &Path) -> Result<Option<f64>> {
    let Some(bwrap) = bwrap() else { return Ok(None) };
    let args = BWRAP_ARGS
        .iter()
        .map(|a| if *a == "WS" { ws.as_os_str() } else { std::ffi::OsStr::new(a) });
    let t = Instant::now();
    let st = Command::new(bwrap)
        .args(args)
        .arg("true")
        .status()
        .map_err(|e| BenchError::io("run bwrap", e))?;
    let took = t.elapsed().as_secs_f64();
    if !st.success() {
        return Err(BenchError::msg(format!(
            "bwrap … true failed ({st}); check that it may make namespaces here"
        )));
    }
    Ok(Some(took))
}

pub(crate) fn tmpdir(work: &Path) -> Result<tempfile::TempDir> {
    std::fs::create_dir_all(work).map_err(|e| BenchError::path("create", work, e))?;
    tempfile::Builder::new()
        .prefix("stockade-speed-")
        .tempdir_in(work)
        .map_err(|e| BenchError::path("create a temporary directory in", work, e))
}

fn write_jsonl<T: Serialize>(path: &Path, rows: &[T]) -> Result<()> {
    let mut s = String::new();
    for r in rows {
        s.push_str(&serde_json::to_string(r)?);
        s.push('\n');
    }
    std::fs::write(path, s).map_err(|e| BenchError::path("write", path, e))
}

/// `bytes` from `yes` through a daemon session (pipe capture, foreground `run`) against
/// `sh -c 'yes | head -c BYTES > f'`; best of `rounds` each. Writes `out/drain.jsonl`.
pub fn drain_speed(
    exe: &Path,
    out: &Path,
    work: &Path,
    bytes: u64,
    rounds: usize,
) -> Result<SpeedSummary> {
    std::fs::create_dir_all(out).map_err(|e| BenchError::path("create", out, e))?;
    let tmp = tmpdir(work)?;
    let mut daemon = Daemon::start(exe, &tmp.path().join("home"))?;
    let mut client = daemon.client()?;
    let file = tmp.path().join("direct.out");
    let mut rows = Vec::new();
    for round in 0..rounds {
        let t = Instant::now();
        let status = Command::new("/bin/sh")
            .arg("-c")
            .arg(format!(
                "yes | head -c {bytes} > {}",
                crate::runner::shell_quote(&file.display().to_string())
            ))
            .status()
            .map_err(|e| BenchError::io("run the direct writer", e))?;
        let direct = t.elapsed();
        let written = std::fs::metadata(&file).map(|m| m.len()).unwrap_or(0);
        let _ = std::fs::remove_file(&file);
        if !status.success() || written != bytes {
            return Err(BenchError::msg(format!(
                "the direct writer wrote {written} of {bytes} bytes"
            )));
        }
        let params = RunParams {
            command: format!("yes | head -c {bytes}"),
            max_bytes: Some(1024),
            disk_cap: Some(bytes + 64 * MIB),
            ..RunParams::default()
        };
        let t = Instant::now();
        let res = client.call::<method::Run>(params)?;
        let through = t.elapsed();
        daemon.track_session(res.pid);
        if res.state != (SessionState::Exited { code: 0 }) || res.view.total_bytes != bytes {
            return Err(BenchError::msg(format!(
                "the daemon session ended {} with {} of {bytes} bytes",
                res.state.name(),
                res.view.total_bytes
            )));
        }
        // Delete the spool before the next round (keeps the disk and page cache even).
        client.call::<method::Cleanup>(CleanupParams { all: false })?;
        rows.push(Round {
            bench: "drain".into(),
            round,
            stockade_s: through.as_secs_f64(),
            direct_s: direct.as_secs_f64(),
            sandboxed_s: 0.0,
            bwrap_s: 0.0,
        });
    }
    let peak = stockade_procfs::rss_and_peak(Some(daemon.pid())).map_or(0.0, |(_, p)| mib(p));
    drop(client);
    daemon.shutdown();
    let best = |f: fn(&Round) -> f64| rows.iter().map(f).fold(f64::INFINITY, f64::min);
    let (s, d) = (best(|r| r.stockade_s), best(|r| r.direct_s));
    let summary = SpeedSummary {
        bench: "drain".into(),
        bytes,
        rounds,
        stockade_s: s,
        direct_s: d,
        ratio: s / d,
        goal: DRAIN_GOAL,
        daemon_peak_rss_mib: peak,
        ..SpeedSummary::default()
    };
    write_jsonl(&out.join("drain.jsonl"), &rows)?;
    append_summary(out, &summary)?;
    Ok(summary)
}

/// `rounds` round trips of a foreground `run true` through the daemon against fork+exec+wait of
/// `/bin/sh -c true`; medians. Writes `out/spawn.jsonl`.
pub fn spawn(exe: &Path, out: &Path, work: &Path, rounds: usize) -> Result<SpeedSummary> {
    std::fs::create_dir_all(out).map_err(|e| BenchError::path("create", out, e))?;
    let tmp = tmpdir(work)?;
    let home = tmp.path().join("home");
    let mut daemon = Daemon::start(exe, &home)?;
    let read_rules =
        stockade_proc::sandbox::hiding_rules(std::slice::from_ref(&home)).map_or(0, |n| n as u64);
    let mut client = daemon.client()?;
    // Warm up both sides once.
    let _ = Command::new("/bin/sh").args(["-c", "true"]).status();
    let warm = RunParams { command: "true".into(), ..RunParams::default() };
    client.call::<method::Run>(warm.clone())?;
    // The sandboxed run works in a directory of its own (a writable root must not contain the
    // state directory).
    let cwd = tmp.path().join("work");
    std::fs::create_dir_all(&cwd).map_err(|e| BenchError::path("create", &cwd, e))?;
    let policy = stockade_proto::Sandbox {
        mode: stockade_proto::SandboxMode::WorkspaceWrite,
        network: stockade_proto::NetworkMode::None,
        ..stockade_proto::Sandbox::default()
    };
    let sandboxed = RunParams { cwd: Some(cwd.clone()), sandbox: Some(policy), ..warm.clone() };
    client.call::<method::Run>(sandboxed.clone())?;
    let mut rows = Vec::new();
    for round in 0..rounds {
        let t = Instant::now();
        let st = Command::new("/bin/sh")
            .args(["-c", "true"])
            .status()
            .map_err(|e| BenchError::io("run /bin/sh -c true", e))?;
        let direct = t.elapsed();
        if !st.success() {
            return Err(BenchError::msg("/bin/sh -c true failed"));
        }
        let t = Instant::now();
        let res = client.call::<method::Run>(warm.clone())?;
        let through = t.elapsed();
        if res.state != (SessionState::Exited { code: 0 }) {
            return Err(BenchError::msg(format!("`run true` ended {}", res.state.name())));
        }
        let t = Instant::now();
        let res = client.call::<method::Run>(sandboxed.clone())?;
        let confined = t.elapsed();
        if res.state != (SessionState::Exited { code: 0 }) {
            return Err(BenchError::msg(format!(
                "sandboxed `run true` ended {}",
                res.state.name()
            )));
        }
        let bwrap_s = bwrap_true(&cwd)?.unwrap_or(0.0);
        rows.push(Round {
            bench: "spawn".into(),
            round,
            stockade_s: through.as_secs_f64(),
            direct_s: direct.as_secs_f64(),
            sandboxed_s: confined.as_secs_f64(),
            bwrap_s,
        });
        if round % 50 == 49 {
            client.call::<method::Cleanup>(CleanupParams { all: false })?;
        }
    }
    let peak = stockade_procfs::rss_and_peak(Some(daemon.pid())).map_or(0.0, |(_, p)| mib(p));
    drop(client);
    daemon.shutdown();
    let pct = |f: fn(&Round) -> f64, p: usize| {
        let mut v: Vec<f64> = rows.iter().map(f).collect();
        v.sort_by(f64::total_cmp);
        v.get(v.len() * p / 100).copied().unwrap_or(0.0)
    };
    let (s, d) = (pct(|r| r.stockade_s, 50), pct(|r| r.direct_s, 50));
    let summary = SpeedSummary {
        bench: "spawn".into(),
        bytes: 0,
        rounds,
        stockade_s: s,
        direct_s: d,
        ratio: if d > 0.0 { s / d } else { 0.0 },
        goal: SPAWN_GOAL,
        daemon_peak_rss_mib: peak,
        stockade_p90_s: pct(|r| r.stockade_s, 90),
        direct_p90_s: pct(|r| r.direct_s, 90),
        sandboxed_s: pct(|r| r.sandboxed_s, 50),
        sandbox_ratio: if s > 0.0 { pct(|r| r.sandboxed_s, 50) / s } else { 0.0 },
        read_rules,
        bwrap_s: pct(|r| r.bwrap_s, 50),
    };
    write_jsonl(&out.join("spawn.jsonl"), &rows)?;
    append_summary(out, &summary)?;
    Ok(summary)
}

fn append_summary(out: &Path, s: &SpeedSummary) -> Result<()> {
    use std::io::Write;
    let path = out.join("speed.jsonl");
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .map_err(|e| BenchError::path("open", &path, e))?;
    writeln!(f, "{}", serde_json::to_string(s)?).map_err(|e| BenchError::path("write", &path, e))
}

/// Where `bench spawn` puts its daemon's home unless `--home` says: beside the state directory
/// a daemon uses by default (`StateDir::locate`'s parent: `$XDG_STATE_HOME`, else
/// `~/.local/state`, made if missing), so a sandboxed run hides it with as many read rules as a
/// user's daemon does; the system temporary directory when that cannot be used.
pub fn default_spawn_dir() -> PathBuf {
    stockade_engine::StateDir::locate()
        .ok()
        .and_then(|home| Some(home.parent()?.to_path_buf()))
        .filter(|dir| std::fs::create_dir_all(dir).is_ok())
        .unwrap_or_else(std::env::temp_dir)
}

/// Default work directory for temporary state: the system temp dir.
pub fn default_work_dir() -> PathBuf {
    std::env::temp_dir()
}
