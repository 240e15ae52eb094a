//! The output log's integration tests, one binary (one link step): one module per topic. Every
//! command's output is drained the way the engine drains it, by the shared epoll drain thread
//! ([`stockade_log::Drainer`]).

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may unwrap

use std::os::fd::OwnedFd;
use std::sync::Arc;

use stockade_log::{DrainSummary, Drainer, OutputError, OutputLog};
use stockade_proto::Stream;

mod output_grep;
mod output_log;
mod output_memory;

/// Drains `sources` into `log` on the process's drain thread until end of file on every one.
pub fn drain_to_end(
    log: &Arc<OutputLog>,
    sources: Vec<(Stream, OwnedFd)>,
) -> Result<DrainSummary, OutputError> {
    Drainer::global()?.add(Arc::clone(log), sources)?.join()
}
