//! Stockade's experiment harness: the memory-growth experiment against a baseline shell manager,
//! made a command.
//!
//! # The method
//!
//! **start → hold → release → sample → wait → clean up → summarise → plot.**
//!
//! * [`runner`] starts a *fresh* engine for every run: a Stockade daemon (`stockade --home <tmp>
//!   daemon run`, talked to over its socket with `stockade-client`, like any client) or a *peer*, another
//!   engine given as a command ([`peers`]). It launches N background commands held behind a
//!   start barrier (each waits for a file, then prints), starts the sampler, releases them
//!   together, never reads their output, waits until every command is done, and tears everything
//!   down: `shutdown`, then `SIGKILL` by pid / process group as a last resort, never by name.
//! * [`sampler`] samples the engine every 100 ms: RSS and peak RSS from `/proc/<pid>/status`,
//!   and for Stockade the daemon's own accounting from `stats` (allocator bytes, hot tails,
//!   spooled, dropped and output bytes). One JSONL row per sample: the raw data is the primary
//!   artefact, everything else is derived from it.
//! * [`summary`] turns a run's samples into one row (baseline / peak / final RSS and allocator
//!   bytes, output MiB, ΔRSS per output MiB, OOM, exit) and writes Markdown + JSONL tables.
//! * [`plots`] draws the SVGs in one report style from the summary and the raw rows.
//! * [`edges`] runs ten hard cases and says 0/1 with the reason for every 0.
//! * [`speed`] measures draining 1 GiB through the daemon against writing it straight to a file,
//!   and a `run true` round trip against a bare fork+exec+wait.
//! * [`bulk`] reads 1 GiB back through the daemon (Unix socket, `wss://` door) against `cat`.
//! * [`scale`] measures `grep` over a large spool against ripgrep, and `list` with many running
//!   sessions.
//!
//! Every process the harness starts is owned by a guard whose `Drop` ends it (and its process
//! group), so a failed or interrupted run leaves nothing behind.

#![deny(missing_docs)]

pub mod bulk;
pub mod daemon;
mod edge_cases;
pub mod edges;
mod error;
pub mod growth_plots;
pub mod memory;
pub mod meta;
pub mod peers;
pub mod plots;
pub mod proc;
pub mod progress;
pub mod runner;
pub mod sampler;
pub mod scale;
pub mod speed;
pub mod summary;

pub use error::{BenchError, Result};

/// One mebibyte, the unit every table and plot uses.
pub const MIB: u64 = 1024 * 1024;

/// Bytes as MiB, for tables and plots.
pub fn mib(bytes: u64) -> f64 {
    bytes as f64 / MIB as f64
}

/// A size for people: `20MiB`, `1GiB`.
pub fn human(bytes: u64) -> String {
    if bytes >= 1 << 30 && bytes.is_multiple_of(1 << 30) {
        format!("{}GiB", bytes >> 30)
    } else if bytes >= MIB && bytes.is_multiple_of(MIB) {
        format!("{}MiB", bytes / MIB)
    } else if bytes.is_multiple_of(1024) {
        format!("{}KiB", bytes / 1024)
    } else {
        format!("{bytes}B")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_like_people_write_them() {
        assert_eq!(human(20 * MIB), "20MiB");
        assert_eq!(human(1 << 30), "1GiB");
        assert_eq!(human(4096), "4KiB");
    }
}
