//! The daemon's own memory: RSS and peak RSS from `/proc/self/status` (read by
//! `stockade-procfs`), and, with the `jemalloc` feature, jemalloc as the process's global
//! allocator and its byte count.

/// The global allocator this build uses: `"jemalloc"` (as shipped) or `"system"`.
pub const ALLOCATOR: &str = if cfg!(feature = "jemalloc") { "jemalloc" } else { "system" };

/// jemalloc returns freed memory to the OS promptly and reports `stats.allocated` for the
/// daemon's `stats` method.
#[cfg(feature = "jemalloc")]
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's options, read once at start-up. A background thread returns freed pages to the OS
/// within about a second, so transient buffers (a 1 MiB read answer, base64, JSON) do not linger
/// in the daemon's RSS; two arenas per CPU is plenty for a daemon that mostly waits, and one
/// background thread purges them all (jemalloc would start one per arena: stacks an idle daemon
/// does not need). `#[used]` keeps it in the binary, where it overrides jemalloc's weak default.
#[cfg(feature = "jemalloc")]
#[used]
#[unsafe(export_name = "_rjem_malloc_conf")]
static MALLOC_CONF: MallocConf = MallocConf(
    c"background_thread:true,max_background_threads:1,dirty_decay_ms:0,muzzy_decay_ms:0,narenas:4"
        .as_ptr(),
);

/// A C string pointer jemalloc reads at start-up.
#[cfg(feature = "jemalloc")]
#[repr(transparent)]
struct MallocConf(*const std::ffi::c_char);

// SAFETY: the pointer is to a `'static` C string literal that is never written.
#[cfg(feature = "jemalloc")]
unsafe impl Sync for MallocConf {}

/// `VmRSS` and `VmHWM` in bytes (0 where unreadable).
pub(crate) fn rss() -> (u64, u64) {
    stockade_procfs::rss_and_peak(None).unwrap_or((0, 0))
}

/// jemalloc's `stats.allocated` after advancing its epoch (0 if the control interface fails,
/// or without jemalloc).
pub(crate) fn allocated() -> u64 {
    #[cfg(feature = "jemalloc")]
    {
        use tikv_jemalloc_ctl::{epoch, stats};
        if epoch::advance().is_err() {
            return 0;
        }
        stats::allocated::read().map_or(0, |b| b as u64)
    }
    #[cfg(not(feature = "jemalloc"))]
    0
}
