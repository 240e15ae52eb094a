//! The `stockade` binary: a thin door onto the engine. `main → run → ExitCode`; errors are
//! printed as one plain sentence with what to do, and a closed stdout (`stockade read … | head`)
//! is success, not an error.

mod cli;
mod cmd;
mod out;

use std::process::ExitCode;

use clap::Parser;

/// jemalloc returns freed memory to the OS promptly and reports `stats.allocated` for the
/// daemon's `stats` method.
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's options, read once at start-up. A background thread returns freed pages to the OS
/// within about a second, so transient buffers (a 1 MiB read answer, base64, JSON) do not linger
/// in the daemon's RSS; two arenas per CPU is plenty for a daemon that mostly waits.
#[unsafe(export_name = "_rjem_malloc_conf")]
static MALLOC_CONF: MallocConf =
    MallocConf(c"background_thread:true,dirty_decay_ms:0,muzzy_decay_ms:0,narenas:4".as_ptr());

/// A C string pointer jemalloc reads at start-up.
#[repr(transparent)]
struct MallocConf(*const std::ffi::c_char);

// SAFETY: the pointer is to a `'static` C string literal that is never written.
unsafe impl Sync for MallocConf {}

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("STOCKADE_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    match cmd::dispatch(cli) {
        Ok(code) => code,
        Err(e) if out::is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("stockade: {}", out::error_text(&e));
            ExitCode::from(2)
        }
    }
}
