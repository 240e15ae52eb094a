//! A run's sandbox: the request's policy (or the default), checked against the ceilings (the
//! operator's, and the session a request comes from), with its writable roots resolved — the
//! working directory and a private temporary directory by default — and Stockade's home kept
//! out of reach.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use stockade_proc::SandboxSpec;
use stockade_proto::sandbox::root_covers;
use stockade_proto::{Sandbox, SandboxMode};

use crate::RunSpec;
use crate::error::EngineError;
use crate::slots::Slots;

/// The sandbox settings of an engine.
#[derive(Debug, Clone, Default)]
pub struct SandboxConfig {
    /// The policy of a run that names none.
    pub default: Sandbox,
    /// The most any run may ask for (the default, [`Sandbox::default`], allows everything).
    pub ceiling: Sandbox,
    /// Paths besides the state directory no sandboxed command may read (the door's token).
    pub hidden: Vec<PathBuf>,
}

/// A run's resolved sandbox: the effective policy (its roots all listed), what the process
/// layer enforces, and the private temporary directory (`TMPDIR`).
pub(crate) struct Resolved {
    /// The request as resolved: its own roots (canonical), limits filled in from the default.
    pub request: Sandbox,
    pub policy: Sandbox,
    pub spec: SandboxSpec,
    pub tmpdir: Option<PathBuf>,
}

/// The policy of `spec` under `config`; `None` when it asks for nothing. Refuses in one sentence
/// a policy beyond a ceiling or a writable root that would expose `home`. The private temporary
/// directory is one `slots` made ahead of time when one is ready. `hidden_added` is hidden as
/// the configuration's `hidden` is.
pub(crate) fn resolve(
    config: &SandboxConfig,
    hidden_added: &[PathBuf],
    home: &Path,
    spec: &RunSpec,
    session_dir: &Path,
    slots: Option<&Arc<Slots>>,
) -> Result<Option<Resolved>, EngineError> {
    let mut policy = match &spec.sandbox {
        None => config.default.clone(),
        Some(asked) => asked.clone().with_limits_from(&config.default),
    };
    let invalid = |s: String| Err(EngineError::Invalid(s));
    let home = std::fs::canonicalize(home).unwrap_or_else(|_| home.to_owned());
    let mut explicit = Vec::new();
    for root in &policy.writable_roots {
        if !root.is_absolute() {
            return invalid(format!(
                "the writable root {} is not absolute; give a full path",
                root.display()
            ));
        }
        let real = match std::fs::canonicalize(root) {
            Ok(p) if p.is_dir() => p,
            _ => {
                return invalid(format!(
                    "the writable root {} is not an existing directory; create it or leave it out",
                    root.display()
                ));
            }
        };
        explicit.push(real);
    }
    policy.writable_roots = explicit.clone();
    let cwd = match &spec.cwd {
        Some(c) => std::fs::canonicalize(c).unwrap_or_else(|_| c.clone()),
        None => std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/")),
    };
    for ceiling in std::iter::once(&config.ceiling).chain(&spec.sandbox_ceilings) {
        // A ceiling that lists roots bounds the working directory too; one that lists none
        // allows only the defaults (working directory, private temporary directory).
        let mut asked = policy.clone();
        if !ceiling.writable_roots.is_empty() {
            asked.writable_roots.push(cwd.clone());
        }
        if let Some(why) = asked.exceeds(ceiling) {
            return invalid(format!("{why}, so the run is refused (allowed here: {ceiling})"));
        }
    }
    if !policy.is_active() {
        return Ok(None);
    }
    let mut roots = Vec::new();
    let mut tmpdir = None;
    let mut hidden = vec![home.clone()];
    hidden.extend(config.hidden.iter().chain(hidden_added).cloned());
    if policy.mode == SandboxMode::WorkspaceWrite {
        roots.push(cwd);
        roots.extend(explicit);
        for root in &roots {
            if root_covers(root, &home) {
                return invalid(format!(
                    "the writable root {} contains Stockade's home {}, where a command could rewrite its own records; choose a directory that does not contain it",
                    root.display(),
                    home.display()
                ));
            }
        }
        let tmp = session_dir.join("tmp");
        // The directories made ahead get this run's sandbox built for them (with each as the
        // temporary directory): the next runs like it find their Landlock ruleset ready.
        let template = || {
            let policy = Sandbox { writable_roots: roots.clone(), ..policy.clone() };
            SandboxSpec { policy, writable_roots: roots.clone(), hidden: hidden.clone() }
        };
        let made = match slots {
            Some(slots) if slots.claim_tmp(&tmp, template()) => Ok(()),
            _ => crate::slots::make_tmp(&tmp),
        };
        if let Err(e) = made {
            return Err(EngineError::Resource(format!(
                "cannot make the session's private temporary directory {}: {e}",
                tmp.display()
            )));
        }
        roots.push(tmp.clone());
        tmpdir = Some(tmp);
    }
    let effective = Sandbox { writable_roots: roots.clone(), ..policy.clone() };
    let spec = SandboxSpec { policy: effective.clone(), writable_roots: roots, hidden };
    Ok(Some(Resolved { request: policy, policy: effective, spec, tmpdir }))
}

impl crate::Engine {
    /// The sandbox of the running, sandboxed session process `pid` belongs to, as the kernel
    /// vouches for it: the session's cgroup (which a sandboxed command cannot leave) where there
    /// is one, else the session's root (its keeper, a child subreaper that keeps the session's
    /// orphans below it) among `pid`'s ancestors, each named by pid and start time
    /// ([`stockade_procfs::lineage`]). Never the `STOCKADE_SESSION` marker: a command writes its
    /// own environment, and a forged marker must get nothing. `None`: no running session
    /// accounts for it.
    pub fn sandbox_of_process(&self, pid: u32) -> Option<(String, Sandbox)> {
        // Read once, and only when a session without a cgroup needs it.
        let mut lineage: Option<Option<Vec<(u32, u64)>>> = None;
        let mut found: Option<(usize, String, Sandbox)> = None;
        for session in self.sessions() {
            if session.state().is_terminal() {
                continue;
            }
            let Some(policy) = session.spec().and_then(|s| s.sandbox_in_force.clone()) else {
                continue;
            };
            if !policy.confines() {
                continue;
            }
            let tree = session.tree();
            // How close to `pid` the session's root is (0 for a cgroup member): the nearest
            // wins, should one session's root ever be below another's.
            let depth = match tree.cgroup() {
                Some(dir) => std::fs::read_to_string(dir.join("cgroup.procs"))
                    .ok()
                    .filter(|procs| procs.lines().any(|l| l.trim() == pid.to_string()))
                    .map(|_| 0),
                None => {
                    let chain = lineage.get_or_insert_with(|| stockade_procfs::lineage(pid));
                    let root = (tree.root_pid(), tree.root_start_time());
                    chain.as_ref().and_then(|c| c.iter().position(|&link| link == root))
                }
            };
            if let Some(depth) = depth
                && found.as_ref().is_none_or(|(best, ..)| depth < *best)
            {
                found = Some((depth, session.id().to_owned(), policy));
            }
        }
        found.map(|(_, id, policy)| (id, policy))
    }

    /// Whether session `id` is `ancestor` or was started, directly or through others, by a
    /// command of `ancestor` (see [`RunSpec::parent`]).
    pub fn descends_from(&self, id: &str, ancestor: &str) -> bool {
        let mut id = id.to_owned();
        // Bounded: a chain cannot be longer than the sessions there are, nor loop.
        for _ in 0..=self.sessions().len() {
            if id == ancestor {
                return true;
            }
            let Ok(session) = self.session(&id) else { return false };
            match session.spec().and_then(|s| s.parent.clone()) {
                Some(parent) => id = parent,
                None => return false,
            }
        }
        false
    }
}
