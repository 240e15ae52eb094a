//! The session marker: the environment entry every process of a session inherits, by which
//! the fallback containment finds escaped descendants.

use super::MARKER_ENV;

/// Which session a process belongs to: `STOCKADE_SESSION=<instance>:<id>` in its environment.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SessionMarker {
    /// The daemon instance (unique per state directory / test).
    pub instance: String,
    /// The session id (`sh-3`).
    pub id: String,
}

impl SessionMarker {
    /// A marker for session `id` of `instance`.
    pub fn new(instance: impl Into<String>, id: impl Into<String>) -> SessionMarker {
        SessionMarker { instance: instance.into(), id: id.into() }
    }

    /// The value of the environment variable: `<instance>:<id>`.
    pub fn value(&self) -> String {
        format!("{}:{}", self.instance, self.id)
    }

    /// The exact `environ` entry: `STOCKADE_SESSION=<instance>:<id>`.
    pub fn env_entry(&self) -> String {
        format!("{MARKER_ENV}={}", self.value())
    }

    /// Both parts are non-empty and free of NUL, `/` and newlines (and not `.`/`..`), so the
    /// marker is safe as an environment value and as a cgroup directory name.
    pub(crate) fn is_valid(&self) -> bool {
        let ok = |s: &str| !s.is_empty() && !s.contains(['\0', '/', '\n']) && s != "." && s != "..";
        ok(&self.instance) && ok(&self.id)
    }
}
