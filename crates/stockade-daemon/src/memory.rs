//! The daemon's own memory: RSS and peak RSS from `/proc/self/status`, allocator bytes from
//! jemalloc (meaningful when jemalloc is the global allocator, as in the `stockade` binary).

/// `VmRSS` and `VmHWM` in bytes (0 where unreadable).
pub(crate) fn rss() -> (u64, u64) {
    let Ok(status) = std::fs::read_to_string("/proc/self/status") else { return (0, 0) };
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map_or(0, |kib| kib * 1024)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// jemalloc's `stats.allocated` after advancing its epoch (0 if the control interface fails).
pub(crate) fn allocated() -> u64 {
    use tikv_jemalloc_ctl::{epoch, stats};
    if epoch::advance().is_err() {
        return 0;
    }
    stats::allocated::read().map_or(0, |b| b as u64)
}
