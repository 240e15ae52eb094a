//! A sandboxed session's memory, pids and cpu limits, with the cgroup controllers the host has:
//! the session's own cgroup v2 where the controllers are delegated to it, else a cgroup per
//! session in the v1 `memory`, `pids` and `cpu` hierarchies (hybrid hosts mount them under
//! `/sys/fs/cgroup/`),
//! next to the daemon's own. The child joins the v1 groups by writing `0` to their
//! `cgroup.procs` before `exec` (raw `write`s on descriptors opened here). Where neither can be
//! written the run is refused: a limit is never silently dropped.

use std::io;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use crate::sandbox::SandboxError;

/// The cgroups enforcing one session's limits.
#[derive(Debug)]
pub struct LimitGroup {
    /// v1 directories made for the session (removed with it).
    made: Vec<PathBuf>,
    /// Where `memory` is accounted: (directory, v2?).
    memory: Option<(PathBuf, bool)>,
    /// Where `pids` is accounted.
    pids: Option<PathBuf>,
    /// The memory limit, bytes.
    memory_limit: Option<u64>,
    /// The counters as they were when the v1 cgroups were removed: (OOM kills, refused forks).
    last: std::sync::Mutex<Option<(u64, u64)>>,
}

/// The limits a session asks for.
pub(crate) struct Asked {
    pub memory: Option<u64>,
    pub pids: Option<u64>,
    /// Percent of one CPU.
    pub cpu: Option<u64>,
}

/// The CFS period the CPU quota is given in (100 ms, the kernel's default).
const CPU_PERIOD_US: u64 = 100_000;

/// Sets up the `memory`/`pids`/`cpu` limits of session `name`: in its v2 cgroup `v2_dir` when
/// the controllers are there, else in new v1 cgroups. Returns the group and the `cgroup.procs`
/// descriptors the child writes itself into.
pub(crate) fn create(
    asked: Asked,
    v2_dir: Option<&Path>,
    name: &str,
) -> Result<(LimitGroup, Vec<OwnedFd>), SandboxError> {
    let Asked { memory, pids, cpu } = asked;
    let mut group = LimitGroup {
        made: Vec::new(),
        memory: None,
        pids: None,
        memory_limit: memory,
        last: std::sync::Mutex::new(None),
    };
    let mut procs = Vec::new();
    let result = (|| {
        let v2 = v2_dir.map(|d| (d, controllers(d)));
        if let Some(limit) = memory {
            match v2 {
                Some((dir, ref c)) if c.iter().any(|x| x == "memory") => {
                    write(dir, "memory.max", limit)?;
                    let _ = write(dir, "memory.swap.max", 0);
                    group.memory = Some((dir.to_owned(), true));
                }
                _ => {
                    let dir = v1_group("memory", name)?;
                    group.made.push(dir.clone());
                    write(&dir, "memory.limit_in_bytes", limit)?;
                    if dir.join("memory.memsw.limit_in_bytes").exists() {
                        // Swap is memory too: without this the limit only moves pages to swap.
                        write(&dir, "memory.memsw.limit_in_bytes", limit)?;
                    }
                    procs.push(open_procs(&dir)?);
                    group.memory = Some((dir, false));
                }
            }
        }
        if let Some(percent) = cpu {
            let quota = (percent * CPU_PERIOD_US / 100).max(1000);
            match v2 {
                Some((dir, ref c)) if c.iter().any(|x| x == "cpu") => {
                    std::fs::write(dir.join("cpu.max"), format!("{quota} {CPU_PERIOD_US}"))?;
                }
                _ => {
                    let dir = v1_group("cpu", name)?;
                    group.made.push(dir.clone());
                    write(&dir, "cpu.cfs_period_us", CPU_PERIOD_US)?;
                    write(&dir, "cpu.cfs_quota_us", quota)?;
                    procs.push(open_procs(&dir)?);
                }
            }
        }
        if let Some(max) = pids {
            match v2 {
                Some((dir, ref c)) if c.iter().any(|x| x == "pids") => {
                    write(dir, "pids.max", max)?;
                    group.pids = Some(dir.to_owned());
                }
                _ => {
                    let dir = v1_group("pids", name)?;
                    group.made.push(dir.clone());
                    write(&dir, "pids.max", max)?;
                    procs.push(open_procs(&dir)?);
                    group.pids = Some(dir);
                }
            }
        }
        Ok::<_, io::Error>(())
    })();
    match result {
        Ok(()) => Ok((group, procs)),
        Err(e) => {
            group.remove();
            Err(SandboxError::Unsupported(format!(
                "memory, pids and cpu limits need a cgroup controller this user may write (cgroup v2 delegated, or v1 under /sys/fs/cgroup): {e}"
            )))
        }
    }
}

/// The controllers a v2 cgroup may use.
fn controllers(dir: &Path) -> Vec<String> {
    std::fs::read_to_string(dir.join("cgroup.controllers"))
        .map(|s| s.split_whitespace().map(str::to_owned).collect())
        .unwrap_or_default()
}

fn write(dir: &Path, file: &str, value: u64) -> io::Result<()> {
    std::fs::write(dir.join(file), value.to_string())
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", dir.join(file).display())))
}

fn open_procs(dir: &Path) -> io::Result<OwnedFd> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let f = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_CLOEXEC)
        .open(dir.join("cgroup.procs"))?;
    Ok(f.into())
}

/// A new v1 cgroup of `controller` for `name`, beside this process's own.
fn v1_group(controller: &str, name: &str) -> io::Result<PathBuf> {
    let mount = v1_mount(controller).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::NotFound,
            format!("no cgroup v1 `{controller}` hierarchy is mounted"),
        )
    })?;
    let own = std::fs::read_to_string("/proc/self/cgroup")?
        .lines()
        .find_map(|l| {
            let mut parts = l.splitn(3, ':');
            let (_, list, path) = (parts.next()?, parts.next()?, parts.next()?);
            list.split(',').any(|c| c == controller).then(|| path.to_owned())
        })
        .unwrap_or_else(|| "/".into());
    let dir = mount.join(own.trim_start_matches('/')).join(format!("stockade-{name}"));
    match std::fs::create_dir(&dir) {
        Ok(()) => Ok(dir),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(dir),
        Err(e) => Err(io::Error::new(e.kind(), format!("{}: {e}", dir.display()))),
    }
}

/// Where the v1 hierarchy with `controller` is mounted.
fn v1_mount(controller: &str) -> Option<PathBuf> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    info.lines().find_map(|l| {
        let (pre, post) = l.split_once(" - ")?;
        let mut post = post.split_whitespace();
        let (fstype, _, opts) = (post.next()?, post.next()?, post.next()?);
        (fstype == "cgroup" && opts.split(',').any(|o| o == controller))
            .then(|| pre.split_whitespace().nth(4).map(PathBuf::from))
            .flatten()
    })
}

/// The value of `key` in a flat-keyed cgroup file (`oom_kill 1`).
fn keyed(path: &Path, key: &str) -> u64 {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|s| s.lines().find_map(|l| l.strip_prefix(key)?.trim().parse().ok()))
        .unwrap_or(0)
}

impl LimitGroup {
    /// The memory limit, when the kernel's OOM killer ended a process of the session for it.
    pub fn memory_limit_hit(&self) -> Option<u64> {
        (self.counters().0 > 0).then_some(self.memory_limit).flatten()
    }

    /// Whether it enforces a pids limit.
    pub fn has_pids_limit(&self) -> bool {
        self.pids.is_some()
    }

    /// How many forks the pids limit refused.
    pub fn pids_limit_hits(&self) -> u64 {
        self.counters().1
    }

    /// (OOM kills, refused forks): read from the cgroups, or as kept when they were removed.
    fn counters(&self) -> (u64, u64) {
        if let Some(last) = *self.last.lock().unwrap_or_else(std::sync::PoisonError::into_inner) {
            return last;
        }
        let oom = self.memory.as_ref().map_or(0, |(dir, v2)| {
            let file = if *v2 { "memory.events" } else { "memory.oom_control" };
            keyed(&dir.join(file), "oom_kill ")
        });
        let forks = self.pids.as_ref().map_or(0, |dir| keyed(&dir.join("pids.events"), "max "));
        (oom, forks)
    }

    /// Removes the v1 cgroups made for the session (empty once its processes are gone), keeping
    /// their counters for the session's record.
    pub fn remove(&self) {
        let counters = self.counters();
        *self.last.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(counters);
        for dir in &self.made {
            if let Err(e) = std::fs::remove_dir(dir) {
                tracing::debug!(cgroup = %dir.display(), error = %e, "limit cgroup not removed yet");
            }
        }
    }
}

/// Which controllers can enforce `memory` and `pids` limits for this user, in one line each,
/// for `stockade doctor`.
pub fn availability() -> Vec<String> {
    ["memory", "pids", "cpu"]
        .iter()
        .map(|c| {
            let v1 = v1_mount(c).and_then(|m| {
                let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
                let path = own.lines().find_map(|l| {
                    let mut parts = l.splitn(3, ':');
                    let (_, list, path) = (parts.next()?, parts.next()?, parts.next()?);
                    list.split(',').any(|x| x == *c).then(|| path.to_owned())
                })?;
                let dir = m.join(path.trim_start_matches('/'));
                rustix::fs::access(&dir, rustix::fs::Access::WRITE_OK).ok().map(|()| dir)
            });
            match v1 {
                Some(dir) => format!("{c} limit: cgroup v1, a group per session under {}", dir.display()),
                None => format!(
                    "{c} limit: through the session's cgroup v2 where the controller is delegated, else refused (no writable v1 `{c}` hierarchy)"
                ),
            }
        })
        .collect()
}
