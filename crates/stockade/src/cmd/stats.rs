//! `stockade stats`: the daemon's memory and output accounting.

use std::process::ExitCode;

use stockade_proto::rpc::{NoParams, method};

use super::Global;
use crate::cli::StatsArgs;
use crate::out;

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
         sessions:  {sessions}\n         /proc scans: {} since the daemon started\n",
        out::bytes(s.rss_bytes),
        out::bytes(s.peak_rss_bytes),
        out::bytes(s.allocated_bytes),
        out::bytes(s.hot_tail_bytes),
        out::bytes(s.output_bytes),
        out::bytes(s.spooled_bytes),
        out::bytes(s.dropped_bytes),
        s.process_scans,
    ))?;
    Ok(ExitCode::SUCCESS)
}
