//! `$STOCKADE_HOME/schedules.json`: every schedule and its counters, written whole and atomically
//! (through `stockade_core::atomic_write`: a temporary file, `fsync`, `rename`, `fsync` of the
//! directory), so a crash leaves the old file or the new one, never half of one.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use stockade_proto::rpc::{CatchUp, ScheduleInfo, ScheduleRunTemplate};

/// The file's name in the state directory.
pub(crate) const SCHEDULES_FILE: &str = "schedules.json";
/// The file's layout version.
const STORE_VERSION: u32 = 1;

/// One schedule as persisted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Schedule {
    pub name: String,
    pub source: String,
    #[serde(default)]
    pub every: Option<String>,
    #[serde(default)]
    pub cron: Option<String>,
    pub run: ScheduleRunTemplate,
    #[serde(default)]
    pub paused: bool,
    #[serde(default)]
    pub catch_up: CatchUp,
    pub keep_runs: usize,
    pub disk_budget: u64,
    pub created_at_ms: u64,
    /// Start of the last tick that started a session (a skipped tick never moves it).
    #[serde(default)]
    pub last_fire_ms: Option<u64>,
    /// The next tick due; `None` while paused. A session with this schedule's source that
    /// started at or after it is the claim of that tick (see the module doc of `schedule`).
    #[serde(default)]
    pub next_fire_ms: Option<u64>,
    #[serde(default)]
    pub fires: u64,
    #[serde(default)]
    pub skipped_overlap: u64,
    #[serde(default)]
    pub missed: u64,
    #[serde(default)]
    pub failed_fires: u64,
    #[serde(default)]
    pub last_error: Option<String>,
    #[serde(default)]
    pub last_session: Option<String>,
}

impl Schedule {
    /// As the protocol shows it, with the session running now (if any).
    pub(crate) fn info(&self, active_session: Option<String>) -> ScheduleInfo {
        ScheduleInfo {
            name: self.name.clone(),
            source: self.source.clone(),
            every: self.every.clone(),
            cron: self.cron.clone(),
            run: self.run.clone(),
            paused: self.paused,
            catch_up: self.catch_up,
            keep_runs: self.keep_runs,
            disk_budget: self.disk_budget,
            created_at_ms: self.created_at_ms,
            last_fire_ms: self.last_fire_ms,
            next_fire_ms: self.next_fire_ms,
            fires: self.fires,
            skipped_overlap: self.skipped_overlap,
            missed: self.missed,
            failed_fires: self.failed_fires,
            last_error: self.last_error.clone(),
            last_session: self.last_session.clone(),
            active_session,
        }
    }
}

#[derive(Serialize, Deserialize)]
struct SchedulesFile {
    version: u32,
    schedules: Vec<Schedule>,
}

/// The schedules file of a state directory.
pub(crate) fn path(home: &Path) -> PathBuf {
    home.join(SCHEDULES_FILE)
}

/// Load the schedules. A missing file is no schedules; a corrupt one is moved aside (to
/// `schedules.json.corrupt-<ms>`) with a warning, so the daemon still starts.
pub(crate) fn load(path: &Path) -> Vec<Schedule> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Vec::new(),
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "cannot read the schedules; starting with none");
            return Vec::new();
        }
    };
    match serde_json::from_slice::<SchedulesFile>(&bytes) {
        Ok(file) => file.schedules,
        Err(e) => {
            let aside = path.with_extension(format!("json.corrupt-{}", super::timing::now_ms()));
            let moved = std::fs::rename(path, &aside);
            tracing::warn!(
                path = %path.display(),
                aside = %aside.display(),
                moved = moved.is_ok(),
                error = %e,
                "the schedules file is corrupt; it was moved aside and the daemon starts with no schedules"
            );
            Vec::new()
        }
    }
}

/// Write the schedules with [`stockade_core::atomic_write`]: the old file or the new one
/// survives a crash, and the new one is durable once this returns `Ok`.
pub(crate) fn save(path: &Path, schedules: &[Schedule]) -> std::io::Result<()> {
    let file = SchedulesFile { version: STORE_VERSION, schedules: schedules.to_vec() };
    let bytes = serde_json::to_vec_pretty(&file).map_err(std::io::Error::other)?;
    stockade_core::atomic_write(path, &bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(name: &str) -> Schedule {
        Schedule {
            name: name.into(),
            source: format!("schedule:{name}"),
            every: Some("1s".into()),
            cron: None,
            run: ScheduleRunTemplate { command: "true".into(), ..Default::default() },
            paused: false,
            catch_up: CatchUp::Once,
            keep_runs: 3,
            disk_budget: 1024,
            created_at_ms: 1,
            last_fire_ms: None,
            next_fire_ms: Some(2),
            fires: 0,
            skipped_overlap: 0,
            missed: 0,
            failed_fires: 0,
            last_error: None,
            last_session: None,
        }
    }

    #[test]
    fn saved_schedules_load_back_and_a_corrupt_file_is_moved_aside() {
        let tmp = tempfile::tempdir().unwrap();
        let p = path(tmp.path());
        assert!(load(&p).is_empty());
        save(&p, &[sample("a"), sample("b")]).unwrap();
        assert_eq!(load(&p), vec![sample("a"), sample("b")]);
        assert!(!p.with_extension("json.tmp").exists());
        std::fs::write(&p, b"{not json").unwrap();
        assert!(load(&p).is_empty());
        assert!(!p.exists(), "moved aside");
        let aside = std::fs::read_dir(tmp.path())
            .unwrap()
            .flatten()
            .any(|e| e.file_name().to_string_lossy().starts_with("schedules.json.corrupt-"));
        assert!(aside);
    }
}
