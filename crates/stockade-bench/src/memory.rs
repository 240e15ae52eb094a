//! Memory: what the daemon holds, as figures a README table can carry. Each case runs in a fresh
//! daemon (started as users start it) and reads its peak RSS (`VmHWM`) from `/proc`:
//!
//! * `idle` — an idle daemon's RSS and what it is made of (anonymous, file-backed, shared
//!   pages; file-backed pages by mapping; threads), one second after its socket opened and again
//!   after it has been idle a while (once its start-up trim has run, see `docs/architecture.md`),
//!   the daemon running from a copy of the binary so it shares no page with the harness;
//! * `output` — `sessions` × `bytes` printed with nobody reading (pipe or file capture), then
//!   every byte read back by cursor (raw, byte-exact), then all sessions forgotten: peak RSS
//!   before and after the read-back, and processes left;
//! * `live` — `sessions` commands that each print `bytes` and keep running: peak RSS while they
//!   all live, then each killed, and the processes left;
//! * `slope` — `output` at several session counts: the least-squares slope of peak RSS per extra
//!   session.
//!
//! Processes left are counted zombie-aware (an unreaped zombie is dead) over every process
//! whose process group is a session's.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use stockade_client::{Client, raw_bytes};
use stockade_proto::rpc::{KillParams, ListParams, ReadParams, RunParams, method};
use stockade_proto::{Capture, ReadMode, SessionState};

use crate::daemon::Daemon;
use crate::{BenchError, MIB, Result, mib};

/// Bytes asked per read-back call (the daemon clamps raw reads to its own bound).
const READ_BACK_CHUNK: usize = 1 << 20;

/// One figure.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MemoryFigure {
    /// `idle`, `output-pipe`, `output-file`, `live`, `slope`.
    pub case: String,
    /// Sessions in the case.
    pub sessions: usize,
    /// Bytes each session printed.
    pub bytes: u64,
    /// The daemon's peak RSS, MiB (for `slope`: at the largest count).
    pub peak_rss_mib: f64,
    /// `output`: peak RSS after reading every byte back, MiB.
    pub after_read_mib: Option<f64>,
    /// `output`: every byte read back was the byte printed.
    pub read_back_exact: Option<bool>,
    /// Processes of the sessions left after the case ended them.
    pub processes_left: Option<usize>,
    /// `slope`: KiB of peak RSS per extra session.
    pub slope_kib_per_session: Option<f64>,
    /// `idle`: anonymous / file-backed / shared RSS in KiB, and threads.
    pub idle_parts: Option<IdleParts>,
    /// Seconds the case took.
    pub seconds: f64,
}

/// What an idle daemon's RSS is made of.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct IdleParts {
    /// `RssAnon`, KiB: heap, stacks, runtime.
    pub anon_kib: u64,
    /// `RssFile`, KiB: the binary's and libraries' pages in use.
    pub file_kib: u64,
    /// `RssShmem`, KiB.
    pub shmem_kib: u64,
    /// Threads.
    pub threads: u64,
    /// Seconds the daemon had been idle (since its first answer) when this was read.
    #[serde(default)]
    pub idle_seconds: f64,
    /// File-backed RSS by mapped file (the daemon's executable first), largest first.
    #[serde(default)]
    pub by_mapping: Vec<MappingRss>,
}

/// Resident KiB of one mapped file.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MappingRss {
    /// The file's name (`stockade`, `libc.so.6`, …).
    pub name: String,
    /// `Rss` summed over its mappings, KiB.
    pub kib: u64,
}

impl MemoryFigure {
    /// The one line printed for this figure.
    pub fn line(&self) -> String {
        let size = crate::human(self.bytes);
        match self.case.as_str() {
            "idle" => {
                let p = self.idle_parts.clone().unwrap_or_default();
                let by: Vec<String> = p
                    .by_mapping
                    .iter()
                    .filter(|m| m.kib >= 64)
                    .map(|m| format!("{} {:.1}", m.name, m.kib as f64 / 1024.0))
                    .collect();
                format!(
                    "idle daemon after {:.0} s: RSS {:.1} MiB = {:.1} MiB anonymous + {:.1} MiB file-backed + {:.1} MiB shared; {} threads; file-backed by mapping (MiB): {}",
                    p.idle_seconds,
                    self.peak_rss_mib,
                    p.anon_kib as f64 / 1024.0,
                    p.file_kib as f64 / 1024.0,
                    p.shmem_kib as f64 / 1024.0,
                    p.threads,
                    by.join(", ")
                )
            }
            "live" => format!(
                "{} live sessions × {size} printed: daemon peak RSS {:.1} MiB; all killed, {} processes left ({:.0}s)",
                self.sessions,
                self.peak_rss_mib,
                self.processes_left.unwrap_or(0),
                self.seconds
            ),
            "slope" => format!(
                "growth up to {} sessions × {size}: peak RSS {:.1} MiB at the largest; slope {:.1} KiB per extra session",
                self.sessions,
                self.peak_rss_mib,
                self.slope_kib_per_session.unwrap_or(0.0)
            ),
            _ => format!(
                "{} × {size}, nobody reading ({}): daemon peak RSS {:.1} MiB; after reading every byte back by cursor {:.1} MiB ({}); {} processes left",
                self.sessions,
                self.case.trim_start_matches("output-"),
                self.peak_rss_mib,
                self.after_read_mib.unwrap_or(0.0),
                if self.read_back_exact == Some(true) { "byte-exact" } else { "NOT exact" },
                self.processes_left.unwrap_or(0)
            ),
        }
    }
}

/// Where a case runs.
#[derive(Debug, Clone)]
pub struct MemoryConfig {
    /// The `stockade` binary.
    pub exe: PathBuf,
    /// Where temporary homes go.
    pub work_dir: PathBuf,
}

fn home(cfg: &MemoryConfig, name: &str) -> Result<tempfile::TempDir> {
    std::fs::create_dir_all(&cfg.work_dir)
        .map_err(|e| BenchError::path("create", &cfg.work_dir, e))?;
    tempfile::Builder::new()
        .prefix(&format!("stockade-mem-{name}-"))
        .tempdir_in(&cfg.work_dir)
        .map_err(|e| BenchError::path("create a temporary directory in", &cfg.work_dir, e))
}

fn peak_mib(pid: u32) -> f64 {
    stockade_procfs::rss_and_peak(Some(pid)).map_or(0.0, |(_, p)| mib(p))
}

fn status_field(pid: u32, name: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| stockade_procfs::status_kib(&s, name))
        .unwrap_or(0)
}

/// An idle daemon, one second after its first answer and again once it has been idle
/// `long` (two figures, in that order).
pub fn idle(cfg: &MemoryConfig, long: Duration) -> Result<Vec<MemoryFigure>> {
    let t = Instant::now();
    let tmp = home(cfg, "idle")?;
    // The daemon runs from its own copy of the binary: pages this harness maps too (it runs
    // the same file) are shared, so the daemon's trim would leave them and the figure would
    // count the harness's start-up.
    let exe = tmp.path().join("stockade");
    std::fs::copy(&cfg.exe, &exe).map_err(|e| BenchError::path("copy", &cfg.exe, e))?;
    // Written back before it runs: the kernel can only drop clean pages at once.
    std::fs::File::open(&exe)
        .and_then(|f| f.sync_all())
        .map_err(|e| BenchError::path("write back", &exe, e))?;
    let mut daemon = Daemon::start(&exe, &tmp.path().join("home"))?;
    // One call, as a client would make, then quiet.
    daemon.client()?.call::<method::List>(ListParams::default())?;
    let quiet = Instant::now();
    let pid = daemon.pid();
    let mut figures = Vec::new();
    for at in [Duration::from_secs(1), long.max(Duration::from_secs(1))] {
        std::thread::sleep(at.saturating_sub(quiet.elapsed()));
        let idle_seconds = quiet.elapsed().as_secs_f64();
        figures.push(MemoryFigure {
            case: "idle".into(),
            peak_rss_mib: status_field(pid, "VmRSS:") as f64 / 1024.0,
            idle_parts: Some(idle_parts(pid, idle_seconds)),
            seconds: t.elapsed().as_secs_f64(),
            ..MemoryFigure::default()
        });
    }
    daemon.shutdown();
    Ok(figures)
}

/// What `pid`'s resident memory is made of now.
fn idle_parts(pid: u32, idle_seconds: f64) -> IdleParts {
    use stockade_procfs::smaps;
    let threads = status_field(pid, "Threads:");
    let maps = smaps::read_smaps(Some(pid)).unwrap_or_default();
    let exe = smaps::exe_id(Some(pid));
    let mut by_mapping: Vec<MappingRss> = Vec::new();
    for m in maps.iter().filter(|m| m.inode != 0) {
        let name =
            m.path.rsplit('/').next().unwrap_or(m.path.as_str()).trim_end_matches(" (deleted)");
        let name = if exe == Some((m.dev, m.inode)) {
            format!("{name} (binary)")
        } else {
            name.to_owned()
        };
        match by_mapping.iter_mut().find(|b| b.name == name) {
            Some(b) => b.kib += m.rss_kib,
            None => by_mapping.push(MappingRss { name, kib: m.rss_kib }),
        }
    }
    by_mapping.sort_by_key(|m| std::cmp::Reverse(m.kib));
    IdleParts {
        anon_kib: status_field(pid, "RssAnon:"),
        file_kib: status_field(pid, "RssFile:"),
        shmem_kib: status_field(pid, "RssShmem:"),
        threads,
        idle_seconds,
        by_mapping,
    }
}

/// The command a session runs: `bytes` of a repeating pattern whose offsets can be checked.
fn print_command(bytes: u64) -> String {
    format!("yes 0123456789abcdef | head -c {bytes}")
}

/// Byte `i` of what [`print_command`] prints.
fn expected_byte(i: u64) -> u8 {
    const LINE: &[u8] = b"0123456789abcdef\n";
    LINE[(i % LINE.len() as u64) as usize]
}

/// Processes (not zombies) whose process group is one of `groups`.
fn processes_left(groups: &HashSet<u32>) -> usize {
    let Ok(dir) = std::fs::read_dir("/proc") else { return 0 };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()))
        .filter_map(stockade_procfs::read_stat)
        .filter(|s| groups.contains(&s.pgrp) && !s.is_zombie())
        .count()
}

fn wait_ended(client: &mut Client, ids: &[String], limit: Duration) -> Result<()> {
    let start = Instant::now();
    loop {
        let list = client.call::<method::List>(ListParams::default())?;
        let ours: Vec<_> = list.sessions.iter().filter(|s| ids.contains(&s.id)).collect();
        if ours.len() == ids.len() && ours.iter().all(|s| s.state.is_terminal()) {
            if let Some(bad) = ours.iter().find(|s| s.state != (SessionState::Exited { code: 0 })) {
                return Err(BenchError::msg(format!("{} ended {}", bad.id, bad.state.name())));
            }
            return Ok(());
        }
        if start.elapsed() > limit {
            return Err(BenchError::msg(format!(
                "sessions still running after {}s",
                limit.as_secs()
            )));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `sessions` × `bytes`, nobody reading, then every byte read back by cursor.
pub fn output(
    cfg: &MemoryConfig,
    capture: Capture,
    sessions: usize,
    bytes: u64,
) -> Result<MemoryFigure> {
    let t = Instant::now();
    let name = if capture == Capture::File { "output-file" } else { "output-pipe" };
    let tmp = home(cfg, name)?;
    let mut daemon = Daemon::start(&cfg.exe, &tmp.path().join("home"))?;
    let mut client = daemon.client()?;
    let mut ids = Vec::new();
    let mut groups = HashSet::new();
    for _ in 0..sessions {
        let res = client.call::<method::Run>(RunParams {
            command: print_command(bytes),
            background: true,
            yield_ms: Some(0),
            max_bytes: Some(256),
            capture,
            disk_cap: Some(bytes + MIB),
            ..RunParams::default()
        })?;
        daemon.track_session(res.pid);
        groups.insert(res.pid);
        ids.push(res.id);
    }
    wait_ended(&mut client, &ids, Duration::from_secs(120 + bytes / MIB * sessions as u64))?;
    let peak = peak_mib(daemon.pid());
    let mut exact = true;
    for id in &ids {
        let mut after = 0u64;
        while after < bytes {
            let r = client.call::<method::Read>(ReadParams {
                id: id.clone(),
                after: Some(after),
                max_bytes: Some(READ_BACK_CHUNK),
                mode: Some(ReadMode::Delta),
                raw: true,
                ..ReadParams::default()
            })?;
            let chunk = raw_bytes(&r)?.unwrap_or_default();
            if chunk.is_empty() {
                exact = false;
                break;
            }
            exact &= chunk.iter().enumerate().all(|(i, &b)| b == expected_byte(after + i as u64));
            after += chunk.len() as u64;
        }
    }
    let after_read = peak_mib(daemon.pid());
    daemon.shutdown();
    Ok(MemoryFigure {
        case: name.into(),
        sessions,
        bytes,
        peak_rss_mib: peak,
        after_read_mib: Some(after_read),
        read_back_exact: Some(exact),
        processes_left: Some(processes_left(&groups)),
        seconds: t.elapsed().as_secs_f64(),
        ..MemoryFigure::default()
    })
}

/// `sessions` commands that each print `bytes` and stay running; then each killed.
pub fn live(cfg: &MemoryConfig, sessions: usize, bytes: u64) -> Result<MemoryFigure> {
    let t = Instant::now();
    let tmp = home(cfg, "live")?;
    let marks = tmp.path().join("printed");
    std::fs::create_dir_all(&marks).map_err(|e| BenchError::path("create", &marks, e))?;
    let mut daemon = Daemon::start(&cfg.exe, &tmp.path().join("home"))?;
    let mut client = daemon.client()?;
    let mut ids = Vec::new();
    let mut groups = HashSet::new();
    let marks_q = crate::runner::shell_quote(&marks.display().to_string());
    for _ in 0..sessions {
        // Prints, leaves a mark (so readiness needs no per-session call), then lives on.
        let command = format!("{}; : > {marks_q}/$$; exec sleep 3600", print_command(bytes));
        let res = client.call::<method::Run>(RunParams {
            command,
            background: true,
            yield_ms: Some(0),
            max_bytes: Some(256),
            ..RunParams::default()
        })?;
        daemon.track_session(res.pid);
        groups.insert(res.pid);
        ids.push(res.id);
    }
    let limit = Duration::from_secs(120 + sessions as u64 / 4);
    let all_printed = crate::proc::wait_until(limit, Duration::from_millis(200), || {
        std::fs::read_dir(&marks).map(|d| d.count()).unwrap_or(0) >= sessions
    });
    if !all_printed {
        daemon.shutdown();
        return Err(BenchError::msg(format!(
            "not every live session printed its {bytes} bytes within {}s",
            limit.as_secs()
        )));
    }
    let peak = peak_mib(daemon.pid());
    for id in &ids {
        client.call::<method::Kill>(KillParams { id: id.clone(), ..KillParams::default() })?;
    }
    let left = processes_left(&groups);
    daemon.shutdown();
    Ok(MemoryFigure {
        case: "live".into(),
        sessions,
        bytes,
        peak_rss_mib: peak,
        processes_left: Some(left),
        seconds: t.elapsed().as_secs_f64(),
        ..MemoryFigure::default()
    })
}

/// Least-squares slope of `y` over `x`.
pub fn slope(points: &[(f64, f64)]) -> f64 {
    let n = points.len() as f64;
    if n < 2.0 {
        return 0.0;
    }
    let (sx, sy) = points.iter().fold((0.0, 0.0), |(a, b), (x, y)| (a + x, b + y));
    let (mx, my) = (sx / n, sy / n);
    let (num, den) = points
        .iter()
        .fold((0.0, 0.0), |(a, b), (x, y)| (a + (x - mx) * (y - my), b + (x - mx) * (x - mx)));
    if den == 0.0 { 0.0 } else { num / den }
}

/// `output` (pipe) at each count of `counts`: the slope of peak RSS per extra session.
pub fn growth_slope(cfg: &MemoryConfig, counts: &[usize], bytes: u64) -> Result<MemoryFigure> {
    let t = Instant::now();
    let mut points = Vec::new();
    let mut last = MemoryFigure::default();
    for &n in counts {
        last = output(cfg, Capture::Pipe, n, bytes)?;
        points.push((n as f64, last.peak_rss_mib * 1024.0));
    }
    Ok(MemoryFigure {
        case: "slope".into(),
        sessions: counts.iter().copied().max().unwrap_or(0),
        bytes,
        peak_rss_mib: last.peak_rss_mib,
        slope_kib_per_session: Some(slope(&points)),
        seconds: t.elapsed().as_secs_f64(),
        ..MemoryFigure::default()
    })
}

/// Appends `figure` to `out/memory.jsonl`.
pub fn record(out: &Path, figure: &MemoryFigure) -> Result<()> {
    use std::io::Write;
    std::fs::create_dir_all(out).map_err(|e| BenchError::path("create", out, e))?;
    let path = out.join("memory.jsonl");
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .map_err(|e| BenchError::path("open", &path, e))?;
    writeln!(f, "{}", serde_json::to_string(figure)?)
        .map_err(|e| BenchError::path("write", &path, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slope_of_a_line_is_its_gradient() {
        let pts: Vec<(f64, f64)> = (1..=5).map(|x| (x as f64, 3.0 * x as f64 + 7.0)).collect();
        assert!((slope(&pts) - 3.0).abs() < 1e-9);
        assert_eq!(slope(&[(1.0, 2.0)]), 0.0);
    }

    #[test]
    fn expected_bytes_follow_the_printed_pattern() {
        assert_eq!(expected_byte(0), b'0');
        assert_eq!(expected_byte(16), b'\n');
        assert_eq!(expected_byte(17), b'0');
    }
}
