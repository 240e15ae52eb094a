//! `$STOCKADE_HOME/schedules.json`: every schedule and its counters, written whole and atomically
//! (through `stockade_log::atomic_write`: a temporary file, `fsync`, `rename`, `fsync` of the
//! directory), so a crash leaves the old file or the new one, never half of one.
//!
//! A schedule is kept as the protocol's own [`ScheduleInfo`], so the two cannot drift apart.
//! Its `last_fire_ms` is the start of the last tick that started a session (a skipped tick never
//! moves it); its `next_fire_ms` the next tick due (`None` while paused): a session with the
//! schedule's source that started at or after it is the claim of that tick (see the module doc
//! of `schedule`). `active_session` describes the engine now, not the schedule: it is never
//! kept (always `null` on disk, cleared on load).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use stockade_proto::rpc::ScheduleInfo;

/// The file's name in the state directory.
pub(crate) const SCHEDULES_FILE: &str = "schedules.json";
/// The file's layout version.
const STORE_VERSION: u32 = 1;

#[derive(Serialize, Deserialize)]
struct SchedulesFile {
    version: u32,
    schedules: Vec<ScheduleInfo>,
}

/// The schedules file of a state directory.
pub(crate) fn path(home: &Path) -> PathBuf {
    home.join(SCHEDULES_FILE)
}

/// Load the schedules. A missing file is no schedules; a corrupt one is moved aside (to
/// `schedules.json.corrupt-<ms>`) with a warning, so the daemon still starts.
pub(crate) fn load(path: &Path) -> Vec<ScheduleInfo> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Vec::new(),
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "cannot read the schedules; starting with none");
            return Vec::new();
        }
    };
    match serde_json::from_slice::<SchedulesFile>(&bytes) {
        Ok(file) => {
            file.schedules.into_iter().map(|s| ScheduleInfo { active_session: None, ..s }).collect()
        }
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

/// Write the schedules with [`stockade_log::atomic_write`]: the old file or the new one
/// survives a crash, and the new one is durable once this returns `Ok`.
pub(crate) fn save(path: &Path, schedules: &[ScheduleInfo]) -> std::io::Result<()> {
    let schedules =
        schedules.iter().map(|s| ScheduleInfo { active_session: None, ..s.clone() }).collect();
    let file = SchedulesFile { version: STORE_VERSION, schedules };
    let bytes = serde_json::to_vec_pretty(&file).map_err(std::io::Error::other)?;
    stockade_log::atomic_write(path, &bytes)
}

#[cfg(test)]
mod tests {
    use stockade_proto::rpc::{CatchUp, ScheduleRunTemplate};

    use super::*;

    fn sample(name: &str) -> ScheduleInfo {
        ScheduleInfo {
            name: name.into(),
            source: format!("schedule:{name}"),
            every: Some("1s".into()),
            cron: None,
            run: ScheduleRunTemplate { command: "true".into(), ..Default::default() },
            base_env_vars: None,
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
            active_session: None,
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

    #[test]
    fn a_file_written_before_schedules_were_kept_as_schedule_info_still_loads() {
        // What the daemon wrote when it kept its own copy of the fields: `every`/`cron` as
        // `null`, no `active_session`.
        let old = r#"{
  "version": 1,
  "schedules": [
    {
      "name": "a",
      "source": "schedule:a",
      "every": "1s",
      "cron": null,
      "run": { "command": "true", "login": false, "capture": "pipe" },
      "paused": false,
      "catch_up": "once",
      "keep_runs": 3,
      "disk_budget": 1024,
      "created_at_ms": 1,
      "last_fire_ms": null,
      "next_fire_ms": 2,
      "fires": 0,
      "skipped_overlap": 0,
      "missed": 0,
      "failed_fires": 0,
      "last_error": null,
      "last_session": null
    }
  ]
}"#;
        let tmp = tempfile::tempdir().unwrap();
        let p = path(tmp.path());
        std::fs::write(&p, old).unwrap();
        assert_eq!(load(&p), vec![sample("a")]);
    }

    #[test]
    fn the_active_session_is_never_kept() {
        let tmp = tempfile::tempdir().unwrap();
        let p = path(tmp.path());
        let running = ScheduleInfo { active_session: Some("sh-1".into()), ..sample("a") };
        save(&p, &[running]).unwrap();
        assert_eq!(load(&p), vec![sample("a")]);
    }
}
