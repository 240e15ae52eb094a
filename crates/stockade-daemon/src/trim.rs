//! The start-up trim (Linux-only): once the daemon has served a few quiet seconds, the pages of
//! its own executable that start-up touched (argument parsing, recovery, TLS set-up) go back to
//! the kernel with `madvise(MADV_PAGEOUT)`.
//!
//! Only read-only, file-backed mappings of the executable are advised, and only those holding no
//! copied-on-write pages: their pages are clean copies of the file, so the kernel drops them
//! without writing anything, and the code that runs again later faults back in from the page
//! cache (or the disk). The contents of memory never change. A kernel without `MADV_PAGEOUT`
//! (before 5.4) or one that refuses it is logged at debug and the daemon goes on. What the trim
//! did is kept for `stats` (see `docs/architecture.md`).

use std::ffi::c_void;
use std::sync::Arc;
use std::time::{Duration, Instant};

use stockade_procfs::smaps;
use stockade_proto::rpc::TrimStats;
use tokio_util::sync::CancellationToken;

use crate::memory;
use crate::state::Shared;

/// How long after start-up (recovery done, socket serving) the trim waits: start-up's own
/// requests (the client that started the daemon, a first `list`) are answered by then.
pub(crate) const TRIM_DELAY: Duration = Duration::from_secs(3);

/// Waits [`TRIM_DELAY`] (or until `stop`), then trims and keeps the result in `shared`.
pub(crate) async fn after_start_up(shared: Arc<Shared>, started: Instant, stop: CancellationToken) {
    tokio::select! {
        () = tokio::time::sleep(TRIM_DELAY) => {}
        () = stop.cancelled() => return,
    }
    let Ok(mut stats) = tokio::task::spawn_blocking(trim_own_executable).await else { return };
    stats.after_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    match &stats.refused {
        Some(why) => tracing::debug!(reason = %why, "start-up trim not done"),
        None => tracing::debug!(
            advised = stats.advised_bytes,
            exe_before = stats.exe_rss_before_bytes,
            exe_after = stats.exe_rss_after_bytes,
            rss_before = stats.rss_before_bytes,
            rss_after = stats.rss_after_bytes,
            "start-up trim: executable pages handed back"
        ),
    }
    let _ = shared.trim.set(stats);
}

/// Advises out this process's read-only mappings of its own executable; never fails.
pub(crate) fn trim_own_executable() -> TrimStats {
    let (rss_before_bytes, _) = memory::rss();
    let mut stats = TrimStats { rss_before_bytes, ..TrimStats::default() };
    let (Some(exe), Some(maps)) = (smaps::exe_id(None), smaps::read_smaps(None)) else {
        stats.refused = Some("cannot read /proc/self/exe or /proc/self/smaps".into());
        return stats;
    };
    let mine: Vec<_> = smaps::exe_mappings(&maps, exe).collect();
    stats.exe_rss_before_bytes = mine.iter().map(|m| m.rss_kib * 1024).sum();
    match page_out(&mine) {
        Ok(advised) => stats.advised_bytes = advised,
        Err(why) => {
            stats.refused = Some(why);
            return stats;
        }
    }
    stats.exe_rss_after_bytes = smaps::exe_rss_kib(None).map_or(0, |k| k * 1024);
    stats.rss_after_bytes = memory::rss().0;
    // Reading smaps again ran the parsing code just handed back; hand it back once more, so
    // the idle daemon keeps only what its periodic tasks run (measured: ~0.6 MiB less).
    let _ = page_out(&mine);
    stats
}

/// `MADV_PAGEOUT` over the read-only mappings among `mine` that hold no copied-on-write page;
/// the bytes advised, or why the kernel refused.
fn page_out(mine: &[&smaps::Mapping]) -> Result<u64, String> {
    let mut advised = 0;
    for m in mine.iter().filter(|m| !m.writable() && m.anonymous_kib == 0 && !m.is_empty()) {
        let Ok(len) = usize::try_from(m.len()) else { continue };
        // SAFETY: the range is a whole mapping of this process, just read from
        // /proc/self/smaps (the executable is never unmapped; were it gone, madvise answers
        // ENOMEM and touches nothing). MADV_PAGEOUT only reclaims pages: read-only file pages
        // without private copies are clean, so their contents are the same when they fault back.
        let r = unsafe {
            rustix::mm::madvise(m.start as *mut c_void, len, rustix::mm::Advice::LinuxPageOut)
        };
        match r {
            Ok(()) => advised += m.len(),
            Err(e) => return Err(format!("madvise(MADV_PAGEOUT) refused: {e}")),
        }
    }
    Ok(advised)
}
