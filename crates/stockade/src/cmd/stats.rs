//! `stockade stats`: the daemon's memory and output accounting.

use std::process::ExitCode;

use clap::Args;
use stockade_proto::rpc::{NoParams, method};

use crate::global::Global;
use crate::out;

/// `stockade stats`.
#[derive(Debug, Args)]
pub struct StatsArgs {
    /// Print the accounting as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn stats(global: &Global, args: StatsArgs) -> anyhow::Result<ExitCode> {
    let s = global.connect()?.call::<method::Stats>(NoParams {})?;
    if args.json {
        out::print_json(&s)?;
        return Ok(ExitCode::SUCCESS);
    }
    let sessions = if s.sessions.is_empty() {
        "none".to_owned()
    } else {
        s.sessions.iter().map(|(state, n)| format!("{n} {state}")).collect::<Vec<_>>().join(", ")
    };
    out::print(&format!(
        "memory:    {} resident (peak {}), {} allocated\n\
         hot tails: {}\n\
         output:    {} printed, {} spooled on disk, {} dropped\n\
         sessions:  {sessions}\n\
         scans:     {} full /proc scans since the daemon started\n",
        out::bytes(s.rss_bytes),
        out::bytes(s.peak_rss_bytes),
        out::bytes(s.allocated_bytes),
        out::bytes(s.hot_tail_bytes),
        out::bytes(s.output_bytes),
        out::bytes(s.spooled_bytes),
        out::bytes(s.dropped_bytes),
        s.process_scans,
    ))?;
    if let Some(why) = &s.drain_stalled {
        out::print(&format!("drain:     STOPPED: {why}\n"))?;
    } else if s.drain_stalls > 0 {
        out::print(&format!("drain:     moving (found stopped {} times)\n", s.drain_stalls))?;
    }
    match &s.trim {
        Some(t) if t.refused.is_none() => out::print(&format!(
            "trim:      {} of the executable handed back after {:.1}s ({} -> {} resident)\n",
            out::bytes(t.exe_rss_before_bytes.saturating_sub(t.exe_rss_after_bytes)),
            t.after_ms as f64 / 1000.0,
            out::bytes(t.rss_before_bytes),
            out::bytes(t.rss_after_bytes),
        ))?,
        Some(t) => out::print(&format!(
            "trim:      not done ({})\n",
            t.refused.as_deref().unwrap_or_default()
        ))?,
        None => {
            out::print("trim:      not yet (runs once the daemon has been idle a few seconds)\n")?
        }
    }
    Ok(ExitCode::SUCCESS)
}
