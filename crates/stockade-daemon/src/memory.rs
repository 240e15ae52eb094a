//! The daemon's own memory: RSS and peak RSS from `/proc/self/status` (read by
//! `stockade-procfs`), allocator bytes from
//! jemalloc (meaningful when jemalloc is the global allocator, as in the `stockade` binary).

/// `VmRSS` and `VmHWM` in bytes (0 where unreadable).
pub(crate) fn rss() -> (u64, u64) {
    stockade_procfs::rss_and_peak(None).unwrap_or((0, 0))
}

/// jemalloc's `stats.allocated` after advancing its epoch (0 if the control interface fails).
pub(crate) fn allocated() -> u64 {
    use tikv_jemalloc_ctl::{epoch, stats};
    if epoch::advance().is_err() {
        return 0;
    }
    stats::allocated::read().map_or(0, |b| b as u64)
}
