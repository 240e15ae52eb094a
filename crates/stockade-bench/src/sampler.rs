//! The sampler: every 100 ms, one row of the engine's memory and output accounting, appended to
//! a JSONL file as it is taken (so a crash keeps what was sampled) and returned at the end.

use std::io::{BufWriter, Write};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use stockade_proto::rpc::{NoParams, StatsResult, method};

use crate::proc::now_ms;
use crate::{BenchError, Result};

/// The sampling period.
pub const PERIOD: Duration = Duration::from_millis(100);

/// One sample of the engine. Fields the engine cannot report (a peer has no `stats`) are absent.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// Wall clock, ms since the Unix epoch.
    pub unix_ms: u64,
    /// ms since the barrier was released (negative before).
    pub t_ms: i64,
    /// Whether the engine process was alive.
    pub alive: bool,
    /// VmRSS of the engine process.
    pub rss_bytes: u64,
    /// VmHWM (peak RSS) of the engine process.
    pub peak_rss_bytes: u64,
    /// Allocator bytes (`stats.allocated_bytes`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocated_bytes: Option<u64>,
    /// Bytes held in hot tails.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hot_tail_bytes: Option<u64>,
    /// Bytes in spool files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spooled_bytes: Option<u64>,
    /// Bytes dropped at a disk cap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dropped_bytes: Option<u64>,
    /// Bytes printed by all commands (from `stats`, or a peer's progress file).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_bytes: Option<u64>,
    /// Sessions still running.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sessions_running: Option<u64>,
}

/// Where the engine-side numbers of a sample come from.
pub enum Source {
    /// A Stockade daemon: `stats` over its socket.
    Daemon(stockade_client::Client),
    /// A peer: only a progress file with the total output bytes it has received, if it writes one.
    Peer(std::path::PathBuf),
}

impl Source {
    fn fill(&mut self, s: &mut Sample) {
        match self {
            Source::Daemon(client) => {
                let stats: Option<StatsResult> = client.call::<method::Stats>(NoParams {}).ok();
                if let Some(st) = stats {
                    s.allocated_bytes = Some(st.allocated_bytes);
                    s.hot_tail_bytes = Some(st.hot_tail_bytes);
                    s.spooled_bytes = Some(st.spooled_bytes);
                    s.dropped_bytes = Some(st.dropped_bytes);
                    s.output_bytes = Some(st.output_bytes);
                    s.sessions_running = Some(st.sessions.get("running").copied().unwrap_or(0));
                }
            }
            Source::Peer(progress) => {
                s.output_bytes = std::fs::read_to_string(progress)
                    .ok()
                    .and_then(|t| t.trim().parse::<u64>().ok());
            }
        }
    }
}

/// A sampler running on its own thread.
pub struct Sampler {
    stop: Arc<AtomicBool>,
    release: Arc<std::sync::atomic::AtomicU64>,
    out: std::path::PathBuf,
    handle: Option<JoinHandle<Vec<Sample>>>,
}

impl Sampler {
    /// Start sampling process `pid` into `out` (JSONL, created).
    pub fn start(pid: u32, mut source: Source, out: &Path) -> Result<Sampler> {
        if let Some(dir) = out.parent() {
            std::fs::create_dir_all(dir).map_err(|e| BenchError::path("create", dir, e))?;
        }
        let file = std::fs::File::create(out).map_err(|e| BenchError::path("create", out, e))?;
        let stop = Arc::new(AtomicBool::new(false));
        let release = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let (stop2, release2) = (stop.clone(), release.clone());
        let handle = std::thread::Builder::new()
            .name("bench-sampler".into())
            .spawn(move || {
                let mut w = BufWriter::new(file);
                let mut rows = Vec::new();
                let start = Instant::now();
                let mut tick: u32 = 0;
                let first = now_ms();
                loop {
                    let mut s = Sample { unix_ms: now_ms(), ..Sample::default() };
                    if let Some((rss, peak)) = stockade_procfs::rss_and_peak(Some(pid)) {
                        s.alive = true;
                        s.rss_bytes = rss;
                        s.peak_rss_bytes = peak;
                        source.fill(&mut s);
                    }
                    // Until the release, time counts from the first sample; `finish` rebases it.
                    let rel = release2.load(Ordering::SeqCst);
                    s.t_ms = signed_ms(s.unix_ms, if rel == 0 { first } else { rel });
                    if let Ok(line) = serde_json::to_string(&s) {
                        let _ = writeln!(w, "{line}");
                        let _ = w.flush();
                    }
                    rows.push(s);
                    if stop2.load(Ordering::SeqCst) {
                        break;
                    }
                    tick += 1;
                    let next = PERIOD * tick;
                    let elapsed = start.elapsed();
                    if next > elapsed {
                        std::thread::sleep(next - elapsed);
                    } else {
                        // Late (the engine was slow to answer): skip to the next slot.
                        tick =
                            u32::try_from(elapsed.as_millis() / PERIOD.as_millis()).unwrap_or(tick);
                    }
                }
                rows
            })
            .map_err(|e| BenchError::io("start the sampler thread", e))?;
        Ok(Sampler { stop, release, out: out.to_path_buf(), handle: Some(handle) })
    }

    /// Mark the moment the barrier was released (time zero of the run).
    pub fn mark_release(&self) {
        self.release.store(now_ms(), Ordering::SeqCst);
    }

    /// Stop sampling and return every row, with `t_ms` counted from the release (negative
    /// before it); the JSONL file is rewritten the same way.
    pub fn finish(mut self) -> Vec<Sample> {
        self.stop.store(true, Ordering::SeqCst);
        let mut rows = self.handle.take().and_then(|h| h.join().ok()).unwrap_or_default();
        let rel = self.release.load(Ordering::SeqCst);
        let zero = if rel == 0 { rows.first().map_or(0, |r| r.unix_ms) } else { rel };
        for r in &mut rows {
            r.t_ms = signed_ms(r.unix_ms, zero);
        }
        let _ = write_samples(&self.out, &rows);
        rows
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

fn signed_ms(t: u64, zero: u64) -> i64 {
    i64::try_from(t).unwrap_or(i64::MAX) - i64::try_from(zero).unwrap_or(i64::MAX)
}

/// Write samples as JSONL.
pub fn write_samples(path: &Path, rows: &[Sample]) -> Result<()> {
    let mut text = String::new();
    for r in rows {
        text.push_str(&serde_json::to_string(r)?);
        text.push('\n');
    }
    std::fs::write(path, text).map_err(|e| BenchError::path("write", path, e))
}

/// Read a JSONL file of samples (rows that do not parse are skipped).
pub fn read_samples(path: &Path) -> Result<Vec<Sample>> {
    let text = std::fs::read_to_string(path).map_err(|e| BenchError::path("read", path, e))?;
    Ok(text.lines().filter_map(|l| serde_json::from_str(l).ok()).collect())
}
