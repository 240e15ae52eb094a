//! Choosing the containment once at start-up, and saying why.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use serde::Serialize;
use stockade_proto::ContainmentMethod;

use super::cgroup::{self, Cgroup2Mount};

/// Where `/proc/self/mountinfo` is read from to find the cgroup2 hierarchy.
const MOUNTINFO: &str = "/proc/self/mountinfo";
/// Where this process's own cgroup is read from.
const SELF_CGROUP: &str = "/proc/self/cgroup";

static SUBREAPER: AtomicBool = AtomicBool::new(false);

/// Makes this process a child subreaper (`PR_SET_CHILD_SUBREAPER`): orphans of the sessions it
/// spawned reparent to it instead of init, so their zombies can be reaped and nothing of a session
/// drifts out of reach. Process-wide and idempotent.
pub(crate) fn become_subreaper() -> std::io::Result<()> {
    rustix::process::set_child_subreaper(Some(rustix::process::getpid()))?;
    SUBREAPER.store(true, Ordering::Relaxed);
    Ok(())
}

/// Whether [`become_subreaper`] has succeeded in this process.
pub(crate) fn is_subreaper() -> bool {
    SUBREAPER.load(Ordering::Relaxed)
}

/// Whether to contain sessions in cgroups.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum CgroupMode {
    /// Use a cgroup per session if this host allows it, else fall back.
    #[default]
    Auto,
    /// Never use cgroups: process group + subreaper + `/proc` marker scan.
    Off,
    /// Create the per-daemon cgroup (`stockade-<pid>`) under this cgroup directory instead of
    /// under this process's own cgroup (must be inside the cgroup2 mount).
    Parent(PathBuf),
}

/// Start-up choices for containment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainmentConfig {
    /// cgroup use.
    pub cgroup: CgroupMode,
    /// Make this process a child subreaper (recommended; needed to reap escaped orphans).
    pub subreaper: bool,
    /// The executable that runs as each session's keeper (`keeper.rs`), opened once by
    /// [`Containment::detect`] when sessions get no cgroup (or always, with
    /// [`Self::keeper_with_cgroup`]). `None`: the command is executed directly, with no keeper.
    pub keeper: Option<KeeperExe>,
    /// Run keepers even when sessions have a cgroup (which finds and kills their processes
    /// already): off by default.
    pub keeper_with_cgroup: bool,
}

/// Which executable runs as a session's keeper (`keeper.rs`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeeperExe {
    /// The tiny keeper embedded in this crate (a few KiB, static, no libc), executed from a
    /// sealed memfd: only where [`crate::EMBEDDED_KEEPER`] (x86_64 Linux).
    Embedded,
    /// A program whose `main` starts with [`crate::run_if_keeper`], such as the daemon's own
    /// executable, `/proc/self/exe` (the fallback where there is no tiny keeper).
    Path(PathBuf),
}

impl Default for ContainmentConfig {
    fn default() -> Self {
        ContainmentConfig {
            cgroup: CgroupMode::Auto,
            subreaper: true,
            keeper: None,
            keeper_with_cgroup: false,
        }
    }
}

/// What `stockade doctor` shows about containment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ContainmentInfo {
    /// The method every session uses.
    pub method: ContainmentMethod,
    /// The cgroup2 mount point, if one was found.
    pub cgroup_mount: Option<PathBuf>,
    /// The directory session cgroups are created in (cgroup method only).
    pub cgroup_root: Option<PathBuf>,
    /// Why cgroups are not used (fallback method only).
    pub fallback_reason: Option<String>,
    /// Whether this process is a child subreaper.
    pub subreaper: bool,
    /// Why subreaper is off, when it is.
    pub subreaper_error: Option<String>,
}

#[derive(Debug)]
pub(crate) struct CgroupRoot {
    pub mount: Cgroup2Mount,
    /// `<parent>/stockade-<pid>`: session cgroups are created inside.
    pub instance_dir: PathBuf,
}

#[derive(Debug)]
pub(crate) struct ContainmentInner {
    pub cgroup: Option<CgroupRoot>,
    pub info: ContainmentInfo,
    /// The keeper's executable, open (close-on-exec) for `execveat`; `None`: no keeper.
    pub keeper: Option<std::os::fd::OwnedFd>,
}

impl Drop for ContainmentInner {
    fn drop(&mut self) {
        if let Some(root) = &self.cgroup {
            // Succeeds only once every session cgroup is gone; otherwise the dir stays.
            let _ = cgroup::remove(&root.instance_dir);
        }
    }
}

/// The containment chosen for this process's sessions. Cheap to clone; every [`super::ProcessTree`]
/// keeps it alive.
#[derive(Debug, Clone)]
pub struct Containment {
    pub(crate) inner: Arc<ContainmentInner>,
}

impl Containment {
    /// Chooses the strongest containment this host allows. Never fails: a cgroup that cannot be
    /// used degrades to the process-group fallback, and the reason is kept for [`Self::describe`].
    pub fn detect(config: &ContainmentConfig) -> Containment {
        let (subreaper, subreaper_error) = if config.subreaper {
            match become_subreaper() {
                Ok(()) => (true, None),
                Err(e) => (false, Some(format!("PR_SET_CHILD_SUBREAPER failed: {e}"))),
            }
        } else {
            (is_subreaper(), None)
        };
        let (mount, chosen) = match &config.cgroup {
            CgroupMode::Off => (None, Err("cgroup containment is turned off".to_owned())),
            mode => match find_mount() {
                Err(why) => (None, Err(why)),
                Ok(mount) => {
                    let chosen = cgroup_root(&mount, mode);
                    (Some(mount.mount_point.clone()), chosen.map(|dir| (mount, dir)))
                }
            },
        };
        let (cgroup, fallback_reason) = match chosen {
            Ok((mount, instance_dir)) => (Some(CgroupRoot { mount, instance_dir }), None),
            Err(why) => {
                tracing::info!(reason = %why, "cgroup containment unavailable; using process groups");
                (None, Some(why))
            }
        };
        let info = ContainmentInfo {
            method: if cgroup.is_some() {
                ContainmentMethod::Cgroup
            } else {
                ContainmentMethod::ProcessGroup
            },
            cgroup_mount: mount,
            cgroup_root: cgroup.as_ref().map(|c| c.instance_dir.clone()),
            fallback_reason,
            subreaper,
            subreaper_error,
        };
        let keeper = config
            .keeper
            .as_ref()
            .filter(|_| cgroup.is_none() || config.keeper_with_cgroup)
            .and_then(open_keeper);
        Containment { inner: Arc::new(ContainmentInner { cgroup, info, keeper }) }
    }

    /// Whether sessions run under a keeper (see `keeper.rs`).
    pub fn has_keeper(&self) -> bool {
        self.inner.keeper.is_some()
    }

    /// The method every session spawned with this containment uses.
    pub fn method(&self) -> ContainmentMethod {
        self.inner.info.method
    }

    /// What was chosen and why, for `stockade doctor`.
    pub fn describe(&self) -> ContainmentInfo {
        let mut info = self.inner.info.clone();
        info.subreaper = is_subreaper();
        info
    }
}

/// Opens the keeper's executable; `None` (and a warning) when it cannot be: sessions then run
/// without a keeper, as before.
fn open_keeper(exe: &KeeperExe) -> Option<std::os::fd::OwnedFd> {
    use rustix::fs::{Mode, OFlags};
    let opened = match exe {
        KeeperExe::Embedded => crate::keeper::open_embedded(),
        KeeperExe::Path(path) => {
            rustix::fs::open(path, OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty())
                .map_err(Into::into)
        }
    };
    match opened {
        Ok(fd) => Some(fd),
        Err(e) => {
            tracing::warn!(keeper = ?exe, error = %e, "cannot open the session keeper; sessions run without one");
            None
        }
    }
}

pub(crate) fn find_mount() -> Result<Cgroup2Mount, String> {
    let text =
        std::fs::read_to_string(MOUNTINFO).map_err(|e| format!("cannot read {MOUNTINFO}: {e}"))?;
    cgroup::parse_mountinfo(&text).ok_or_else(|| "no cgroup2 hierarchy is mounted".to_owned())
}

/// Picks (and probes) the directory session cgroups go in: `<parent>/stockade-<pid>` (then
/// `stockade-<pid>.<n>` for each further containment in the same process).
fn cgroup_root(mount: &Cgroup2Mount, mode: &CgroupMode) -> Result<PathBuf, String> {
    let parent = match mode {
        CgroupMode::Parent(dir) => {
            if mount.path_of(dir).is_none() {
                return Err(format!(
                    "configured cgroup parent {} is not inside the cgroup2 mount {}",
                    dir.display(),
                    mount.mount_point.display()
                ));
            }
            dir.clone()
        }
        _ => {
            let text = std::fs::read_to_string(SELF_CGROUP)
                .map_err(|e| format!("cannot read {SELF_CGROUP}: {e}"))?;
            let own = cgroup::parse_own_cgroup(&text)
                .ok_or_else(|| format!("{SELF_CGROUP} has no cgroup v2 (`0::`) line"))?;
            mount.dir_of(&own)
        }
    };
    sweep_stale(&parent);
    // One directory per containment, not per process: engines that share a process (tests, an
    // embedded daemon beside a one-shot run) must never remove each other's session cgroups.
    static INSTANCES: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = INSTANCES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let name = instance_cgroup_name(std::process::id(), own_pid_namespace(), n);
    let instance_dir = parent.join(name);
    cgroup::ensure_dir(&instance_dir)
        .map_err(|e| format!("cannot create cgroup {}: {e}", instance_dir.display()))?;
    if let Err(why) = cgroup::probe_placement(&instance_dir) {
        let _ = cgroup::remove(&instance_dir);
        return Err(why);
    }
    Ok(instance_dir)
}

/// The name of an instance cgroup: `stockade-<pid>-<pid namespace>[.<n>]`. The pid namespace
/// (the inode of `/proc/self/ns/pid`) is part of the name because pids are only unique within
/// one: daemons in different PID namespaces (containers, `unshare --pid`) under the same parent
/// cgroup — each of them PID 1, say — must neither share a directory nor take each other's for
/// a dead daemon's.
fn instance_cgroup_name(pid: u32, pid_ns: Option<u64>, n: u32) -> String {
    let base = match pid_ns {
        Some(ns) => format!("stockade-{pid}-{ns}"),
        None => format!("stockade-{pid}"),
    };
    match n {
        0 => base,
        n => format!("{base}.{n}"),
    }
}

/// The inode of this process's PID namespace, if `/proc/self/ns/pid` can be read.
fn own_pid_namespace() -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self/ns/pid").ok().map(|m| m.ino())
}

/// The owner of an instance cgroup, from its name: its pid, and its PID namespace when the name
/// carries one (`stockade-<pid>` from an older daemon does not).
fn instance_cgroup_owner(name: &str) -> Option<(u32, Option<u64>)> {
    let rest = name.strip_prefix("stockade-")?;
    let base = rest.split('.').next()?;
    match base.split_once('-') {
        Some((pid, ns)) => Some((pid.parse().ok()?, Some(ns.parse().ok()?))),
        None => Some((base.parse().ok()?, None)),
    }
}

/// The pid of an instance cgroup's owner if it was in this process's PID namespace — only then
/// does that pid say anything here. `None` for other names and other namespaces' cgroups.
pub fn instance_cgroup_pid(name: &str) -> Option<u32> {
    let (pid, ns) = instance_cgroup_owner(name)?;
    match ns {
        Some(ns) if Some(ns) != own_pid_namespace() => None,
        _ => Some(pid),
    }
}

/// Removes the empty instance cgroups of daemons that are gone (a daemon that exited without
/// dropping its containment leaves one). Only this PID namespace's: another namespace's pid
/// cannot be looked up here. Populated ones are left for crash recovery; `rmdir` refuses them
/// anyway.
fn sweep_stale(parent: &std::path::Path) {
    let Ok(entries) = std::fs::read_dir(parent) else { return };
    for entry in entries.filter_map(Result::ok) {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(instance_cgroup_pid) else {
            continue;
        };
        if pid != std::process::id() && !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            match cgroup::remove_session(&entry.path()) {
                Ok(()) => tracing::info!(cgroup = %entry.path().display(), "removed stale cgroup"),
                // Still populated: a crashed daemon's sessions, which crash recovery terminates.
                Err(e) => {
                    tracing::info!(cgroup = %entry.path().display(), error = %e, "stale cgroup left for recovery")
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{
        instance_cgroup_name, instance_cgroup_owner, instance_cgroup_pid, own_pid_namespace,
    };

    #[test]
    fn instance_cgroup_names_carry_the_owner_pid_and_pid_namespace() {
        assert_eq!(instance_cgroup_owner("stockade-4242"), Some((4242, None)));
        assert_eq!(instance_cgroup_owner("stockade-4242.3"), Some((4242, None)));
        assert_eq!(instance_cgroup_owner("stockade-1-4026532201"), Some((1, Some(4026532201))));
        assert_eq!(instance_cgroup_owner("stockade-1-4026532201.2"), Some((1, Some(4026532201))));
        assert_eq!(instance_cgroup_owner("stockade-x"), None);
        assert_eq!(instance_cgroup_owner("stockade-1-x"), None);
        assert_eq!(instance_cgroup_owner("other-4242"), None);
        for (pid, ns, n) in [(7, Some(9), 0), (7, Some(9), 3), (7, None, 0), (7, None, 2)] {
            assert_eq!(instance_cgroup_owner(&instance_cgroup_name(pid, ns, n)), Some((pid, ns)));
        }
    }

    #[test]
    fn another_pid_namespaces_instance_cgroup_has_no_pid_here() {
        let own = own_pid_namespace().expect("/proc/self/ns/pid is readable");
        let here = instance_cgroup_name(1, Some(own), 0);
        assert_eq!(instance_cgroup_pid(&here), Some(1));
        // PID 1 of another namespace is not this namespace's init: the sweep must leave it.
        let there = instance_cgroup_name(1, Some(own + 1), 0);
        assert_eq!(instance_cgroup_pid(&there), None);
        assert_eq!(instance_cgroup_pid("stockade-4242"), Some(4242));
    }
}
