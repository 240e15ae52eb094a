//! The start of a command, whoever asked: off the async workers (it forks and touches the disk),
//! counted in the spawn metric. The doors reach it through the hall (`hall`, which decides first
//! what the caller may ask); the scheduler, which has no caller, directly.

use std::sync::Arc;

use stockade_engine::{Engine, EngineError, RunSpec, Started};

use crate::metrics::Metrics;

/// Why a door's start failed: refused by the hall or the engine (the caller's mistake, in one
/// sentence), or the start itself broke.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// What the caller may not ask.
    #[error("{0}")]
    Refused(String),
    /// The engine refused or failed the run.
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// The blocking task of the start did not finish.
    #[error("the start failed: {0}")]
    Internal(String),
}

/// Starts `spec` on `engine` off the async workers, counted in the spawn metric: every start of
/// every door and of the scheduler comes through here.
pub(crate) async fn spawn(
    engine: &Arc<Engine>,
    metrics: &Metrics,
    spec: RunSpec,
) -> Result<Started, StartError> {
    let engine = Arc::clone(engine);
    let asked = std::time::Instant::now();
    let started = stockade_engine::blocking::run(move || engine.start(spec))
        .await
        .map_err(|e| StartError::Internal(e.to_string()))?;
    metrics.spawned(asked.elapsed(), started.is_ok());
    Ok(started?)
}
