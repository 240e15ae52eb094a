//! Where a local caller stands, for the daemon to run its commands there: its environment (its
//! directory goes as an absolute `cwd` beside it). The daemon was auto-started once, from
//! wherever the first command happened to be; without these a command would inherit that
//! moment's directory and variables, not the caller's `export`, venv or `PATH`. A client of a
//! remote daemon sends neither: that machine's paths and variables are not ours.

use std::collections::BTreeMap;

/// This process's environment as UTF-8 text. A variable whose name or value is not UTF-8 cannot
/// travel in a JSON request: it is left out, and one warning line on stderr names it.
pub fn environment() -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    let mut skipped = Vec::new();
    for (key, value) in std::env::vars_os() {
        match (key.into_string(), value.into_string()) {
            (Ok(key), Ok(value)) => {
                env.insert(key, value);
            }
            (Ok(key), Err(_)) => skipped.push(key),
            (Err(key), _) => skipped.push(key.to_string_lossy().into_owned()),
        }
    }
    if !skipped.is_empty() {
        eprintln!(
            "stockade: warning: not passing on {} (not UTF-8 text); set it with --env KEY=VALUE if the command needs it",
            skipped.join(", ")
        );
    }
    env
}

/// The environment a run from this client starts from: empty with `--env-clear`, the daemon's
/// own for a remote daemon (`None`), else this process's.
pub fn base_env(env_clear: bool, remote: bool) -> Option<BTreeMap<String, String>> {
    if env_clear {
        Some(BTreeMap::new())
    } else if remote {
        None
    } else {
        Some(environment())
    }
}
