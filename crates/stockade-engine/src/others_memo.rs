//! What the engine remembers between looks at other owners' sessions (`others`), and the
//! cheap [`Fingerprint`] that says whether a new look would find anything new. The engine holds
//! it; only `others` and `recovery` read or change it.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime};

use stockade_log::SessionDir;
use stockade_procfs::Liveness;

use crate::registry::Owner;
use crate::state_dir::StateDir;

/// A fingerprint holding a folder time younger than this (when taken) is not trusted: the
/// kernel stamps times from a coarse clock, so a change in the same tick would not show.
pub(crate) const SETTLE: Duration = Duration::from_millis(50);
/// What the engine remembers between looks.
#[derive(Debug, Default)]
pub(crate) struct OthersState {
    /// When each running foreign session's log was last opened.
    pub(crate) opened: HashMap<String, Instant>,
    /// Directories the last look found but passed over (no usable record yet).
    pub(crate) passed: Vec<PathBuf>,
    /// When the last look began, and what it depended on then.
    pub(crate) last: Option<(Instant, Fingerprint)>,
}

/// What a look depends on that can change behind this engine's back, read without reading any
/// record: compared equal, a new look would find what the last one found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Fingerprint {
    /// Folder times, spool lengths and owner liveness, in a fixed order.
    pub(crate) facts: Vec<(PathBuf, Option<SystemTime>, u64)>,
    /// Whether every folder time was older than [`SETTLE`] when taken.
    pub(crate) settled: bool,
}

/// A session shown as another owner's running one: where it lives and who owns it.
pub(crate) type Watched = (PathBuf, Option<Owner>);

impl Fingerprint {
    /// Blocking: a `readdir` of the spool root and a few `stat`s and `/proc` reads.
    pub(crate) fn take(
        state_dir: &StateDir,
        own: &str,
        watched: &[Watched],
        passed: &[PathBuf],
    ) -> Self {
        let now = SystemTime::now();
        let mut settled = true;
        let mut facts = Vec::new();
        let mut folder = |dir: PathBuf, extra: u64| {
            let time = std::fs::metadata(&dir).and_then(|m| m.modified()).ok();
            settled &= time.is_some_and(|t| now.duration_since(t).is_ok_and(|age| age >= SETTLE));
            facts.push((dir, time, extra));
        };
        let root = state_dir.spool_root();
        let mut instances: Vec<PathBuf> = std::fs::read_dir(&root)
            .map(|d| d.flatten().filter(|e| e.file_name() != *own).map(|e| e.path()).collect())
            .unwrap_or_default();
        instances.sort();
        folder(root, 0);
        for dir in instances {
            folder(dir, 0);
        }
        for (dir, owner) in watched {
            let spool = std::fs::metadata(SessionDir::new(dir).spool()).map_or(0, |m| m.len());
            let alive = owner.is_some_and(|o| o.liveness() == Liveness::Alive);
            // The spool's length and the owner's liveness in one number: either changing shows.
            folder(dir.clone(), spool << 1 | u64::from(alive));
        }
        for dir in passed {
            folder(dir.clone(), 0);
        }
        Fingerprint { facts, settled }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kernel stamps folder times from a coarse clock: wait a few ticks between changes.
    fn tick() {
        std::thread::sleep(Duration::from_millis(20));
    }

    #[test]
    fn a_fingerprint_changes_with_a_spool_a_record_a_session_or_an_owner_and_only_then() {
        let tmp = tempfile::tempdir().unwrap();
        let state = StateDir::open(tmp.path().join("state")).unwrap();
        let other = state.spool_root().join("run-1-2");
        let session = other.join("sh-1");
        std::fs::create_dir_all(&session).unwrap();
        std::fs::write(session.join("output.log"), b"a").unwrap();
        let watched = vec![(session.clone(), Owner::current())];
        let take = || Fingerprint::take(&state, "daemon-own", &watched, &[]);
        let first = take();
        assert!(!first.settled, "folders changed just now are not trusted");
        assert_eq!(take(), first, "nothing changed");

        std::fs::write(session.join("output.log"), b"ab").unwrap();
        let grown = take();
        assert_ne!(grown, first, "the spool grew");

        tick();
        stockade_log::atomic_write(&session.join("session.json"), b"{}").unwrap();
        let recorded = take();
        assert_ne!(recorded, grown, "a record was written");

        tick();
        std::fs::create_dir(other.join("sh-2")).unwrap();
        let added = take();
        assert_ne!(added, recorded, "a session folder was made");

        // An owner that is gone (no process has this pid: above the kernel's pid limit).
        let dead = vec![(session.clone(), Some(Owner { pid: 1 << 23, start_time: 1 }))];
        assert_ne!(Fingerprint::take(&state, "daemon-own", &dead, &[]), added, "the owner died");

        // This engine's own folder does not count.
        tick();
        std::fs::create_dir_all(state.spool_root().join("daemon-own/sh-3")).unwrap();
        let own_only = take();
        assert_eq!(own_only.facts[1..], added.facts[1..], "only the spool root's time moved");

        std::thread::sleep(SETTLE + Duration::from_millis(20));
        let later = take();
        assert!(later.settled, "older folder times are trusted");
        assert_eq!(later.facts, own_only.facts);
    }
}
