//! The sandbox of a session: Landlock for the filesystem, TCP and scoping, seccomp for what
//! Landlock does not cover, `no_new_privs`, and `RLIMIT_NOFILE`.
//!
//! Everything is built here, in the parent (the daemon is multi-threaded: its child may neither
//! allocate nor lock before `exec`): the Landlock ruleset as a descriptor, the seccomp programs
//! as instruction arrays. The child then makes only raw system calls (`apply_in_child`):
//! `setrlimit`, `prctl(PR_SET_NO_NEW_PRIVS)`, `landlock_restrict_self`, `seccomp`.
//!
//! Fail closed: a policy the kernel cannot enforce is refused ([`SandboxError::Unsupported`]),
//! naming what is missing; it never runs unconfined.
//!
//! Stockade's home (spools, records, the door's token) is kept from the command: Landlock only
//! grants, so read access is granted on every entry of `/` except the one leading to the home,
//! then on every entry of that directory except the next one, and so on down to the home (which
//! gets nothing). A directory on that path can be walked through but not listed, and an entry
//! created in one of them after the spawn is not readable by the command.

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};

use landlock::{
    ABI, Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, PathBeneath, Ruleset,
    RulesetAttr, RulesetCreated, RulesetCreatedAttr, Scope,
};
use stockade_proto::{NetworkMode, Sandbox, SandboxMode};

/// The oldest Landlock ABI a sandbox runs on: 6 scopes signals and abstract Unix sockets (so a
/// sandboxed command cannot signal the daemon or other sessions), and brings with it everything
/// before (refer 2, truncate 3, TCP 4, device ioctl 5).
pub const MIN_LANDLOCK_ABI: i32 = 6;

/// The newest Landlock ABI whose rights this build knows how to grant (newer kernels are used at
/// this level: rights added later are neither handled nor needed).
const MAX_LANDLOCK_ABI: i32 = 7;

/// Devices every sandboxed command may read and write (the terminal, the bit buckets).
const DEVICES: &[&str] =
    &["/dev/null", "/dev/zero", "/dev/full", "/dev/tty", "/dev/pts", "/dev/ptmx"];

/// Namespace flags of `clone`/`unshare`: a new user namespace gives back every capability inside
/// it, the others need privileges a sandboxed root still has.
const CLONE_NEW_FLAGS: [u64; 8] = [
    libc::CLONE_NEWUSER as u64,
    libc::CLONE_NEWNS as u64,
    libc::CLONE_NEWNET as u64,
    libc::CLONE_NEWPID as u64,
    libc::CLONE_NEWIPC as u64,
    libc::CLONE_NEWUTS as u64,
    libc::CLONE_NEWCGROUP as u64,
    0x80, // CLONE_NEWTIME
];

/// Why a sandbox could not be set up. Each message is one sentence saying what to do.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// The kernel lacks what the policy needs.
    #[error(
        "the sandbox cannot be enforced on this host: {0}; run with `--sandbox off` or on a kernel that has it"
    )]
    Unsupported(String),
    /// The policy is not usable as given (a writable root that does not exist, …).
    #[error("{0}")]
    Invalid(String),
    /// Building the ruleset or the filter failed.
    #[error("cannot set up the sandbox: {0}")]
    Setup(String),
}

/// What to confine a command to: the policy, its writable roots resolved (absolute, existing),
/// and the directory no sandboxed command may read or write (Stockade's home).
#[derive(Debug, Clone)]
pub struct SandboxSpec {
    /// The policy.
    pub policy: Sandbox,
    /// Where a `workspace-write` command may write (already including the defaults).
    pub writable_roots: Vec<PathBuf>,
    /// Kept unreadable and unwritable (Stockade's home, the door's token file).
    pub hidden: Vec<PathBuf>,
}

/// A sandbox prepared in the parent, applied by the child with raw system calls only.
#[derive(Debug)]
pub(crate) struct Prepared {
    /// The Landlock ruleset (close-on-exec), when the policy confines.
    ruleset: Option<OwnedFd>,
    /// seccomp programs, installed in order.
    filters: Vec<Vec<seccompiler::sock_filter>>,
    /// `RLIMIT_NOFILE` (soft = hard), when limited.
    pub(crate) nofile: Option<u64>,
    /// `cgroup.procs` of the v1 cgroups the child joins (memory, pids limits).
    pub(crate) procs: Vec<OwnedFd>,
}

/// `struct sock_fprog` (`linux/filter.h`).
#[repr(C)]
struct SockFprog {
    len: libc::c_ushort,
    filter: *const seccompiler::sock_filter,
}

/// The Landlock ABI of this kernel (0: none, or disabled at boot).
pub fn landlock_abi() -> i32 {
    #[cfg(feature = "test-hooks")]
    if std::env::var_os(NO_LANDLOCK_ENV).is_some() {
        return 0;
    }
    // Asked once: a kernel's ABI does not change while it runs.
    static ABI_VERSION: std::sync::OnceLock<i32> = std::sync::OnceLock::new();
    *ABI_VERSION.get_or_init(|| {
        // LANDLOCK_CREATE_RULESET_VERSION: no ruleset, the ABI version as the answer.
        // SAFETY: with this flag the kernel reads no argument.
        let r = unsafe {
            libc::syscall(libc::SYS_landlock_create_ruleset, std::ptr::null::<u8>(), 0usize, 1u32)
        };
        if r < 0 { 0 } else { r as i32 }
    })
}

/// Test hook (feature `test-hooks` only): set, the kernel is taken to have no Landlock, as on
/// a kernel built without it.
#[cfg(feature = "test-hooks")]
pub const NO_LANDLOCK_ENV: &str = "STOCKADE_TEST_NO_LANDLOCK";

/// Whether seccomp filters can be installed here (`PR_GET_SECCOMP` answers).
fn seccomp_available() -> bool {
    static AVAILABLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    // SAFETY: reads this thread's seccomp mode, no pointer.
    *AVAILABLE.get_or_init(|| unsafe { libc::prctl(libc::PR_GET_SECCOMP, 0, 0, 0, 0) >= 0 })
}

/// What this host can enforce, one line per mechanism, for `stockade doctor`.
pub fn capabilities() -> Vec<String> {
    let abi = landlock_abi();
    let landlock = match abi {
        0 => "Landlock: unavailable (sandboxed runs are refused)".to_owned(),
        a if a < MIN_LANDLOCK_ABI => format!(
            "Landlock: ABI {a}, the sandbox needs {MIN_LANDLOCK_ABI} (signal and abstract-socket scoping): sandboxed runs are refused"
        ),
        a => format!(
            "Landlock: ABI {a} (filesystem with refer, truncate and device ioctl; TCP bind/connect; signal and abstract-socket scoping)"
        ),
    };
    let seccomp = if seccomp_available() && cfg!(target_arch = "x86_64") {
        "seccomp: filters available (socket families, ptrace, io_uring, namespaces, mount, bpf, …)"
    } else {
        "seccomp: unavailable (sandboxed runs are refused)"
    };
    let mut lines = vec![landlock, seccomp.to_owned()];
    if seccomp_available() && cfg!(target_arch = "x86_64") {
        lines.extend(calls::own_world_lines());
    }
    lines.push("nofile limit: setrlimit in the child".to_owned());
    lines
}

/// Checks `spec` against the kernel and builds what the child applies.
pub(crate) fn prepare(spec: &SandboxSpec) -> Result<Prepared, SandboxError> {
    let policy = &spec.policy;
    let nofile = policy.nofile;
    if !policy.confines() {
        return Ok(Prepared { ruleset: None, filters: Vec::new(), nofile, procs: Vec::new() });
    }
    let abi = landlock_abi();
    if abi == 0 {
        return Err(SandboxError::Unsupported("the kernel has no Landlock".into()));
    }
    if abi < MIN_LANDLOCK_ABI {
        return Err(SandboxError::Unsupported(format!(
            "the kernel's Landlock ABI is {abi}, signal and abstract-socket scoping need {MIN_LANDLOCK_ABI}"
        )));
    }
    if !cfg!(target_arch = "x86_64") || !seccomp_available() {
        return Err(SandboxError::Unsupported("seccomp filters are not available".into()));
    }
    let abi = abi.min(MAX_LANDLOCK_ABI);
    let listing = readable(&spec.hidden)?;
    let ruleset = match take_prebuilt(spec, abi, &listing) {
        Some(fd) => {
            RULESETS_READY.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            fd
        }
        None => {
            RULESETS_BUILT_ON_SPAWN.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            ruleset(spec, abi_of(abi), &listing)?.0
        }
    };
    let filters = vec![cached_program(policy.network)?];
    Ok(Prepared { ruleset: Some(ruleset), filters, nofile, procs: Vec::new() })
}

/// Sandboxed spawns that found their Landlock ruleset built ahead ([`prebuild`]).
static RULESETS_READY: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
/// Sandboxed spawns that built their ruleset while the run waited.
static RULESETS_BUILT_ON_SPAWN: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Sandboxed spawns of this process so far: (ruleset found built ahead, built on the spawn).
pub fn ruleset_counts() -> (u64, u64) {
    use std::sync::atomic::Ordering::Relaxed;
    (RULESETS_READY.load(Relaxed), RULESETS_BUILT_ON_SPAWN.load(Relaxed))
}

fn abi_of(n: i32) -> ABI {
    match n {
        ..=0 => ABI::Unsupported,
        1 => ABI::V1,
        2 => ABI::V2,
        3 => ABI::V3,
        4 => ABI::V4,
        5 => ABI::V5,
        6 => ABI::V6,
        _ => ABI::V7,
    }
}

fn setup<E: std::fmt::Display>(e: E) -> SandboxError {
    SandboxError::Setup(e.to_string())
}

/// The Landlock ruleset of `spec`, as a descriptor, with what each device and writable root
/// rule was put on ([`Identity`], in [`identities`]' order).
fn ruleset(
    spec: &SandboxSpec,
    abi: ABI,
    listing: &Listing,
) -> Result<(OwnedFd, Vec<Identity>), SandboxError> {
    let mut attr = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessFs::from_all(abi))
        .map_err(setup)?
        .scope(Scope::Signal)
        .map_err(setup)?;
    if spec.policy.network == NetworkMode::None {
        attr = attr
            .handle_access(AccessNet::from_all(abi))
            .map_err(setup)?
            .scope(Scope::AbstractUnixSocket)
            .map_err(setup)?;
    }
    let mut created = attr.create().map_err(setup)?;
    let read = AccessFs::from_read(abi);
    if listing.hidden.is_empty() {
        created = grant(created, Path::new("/"), read)?.0;
    }
    let device = read | AccessFs::WriteFile | AccessFs::IoctlDev;
    let mut on = Vec::new();
    for dev in DEVICES {
        let mut identity = None;
        if Path::new(dev).exists() {
            (created, identity) = grant(created, Path::new(dev), device)?;
        }
        on.push(identity);
    }
    if spec.policy.mode == SandboxMode::WorkspaceWrite {
        for root in &spec.writable_roots {
            let identity;
            (created, identity) = grant(created, root, AccessFs::from_all(abi))?;
            on.push(identity);
        }
    }
    let ruleset = Option::<OwnedFd>::from(created)
        .ok_or_else(|| SandboxError::Unsupported("the kernel refused a Landlock ruleset".into()))?;
    grant_listed(&ruleset, listing, read)?;
    Ok((ruleset, on))
}

/// What a rule was put on: device, inode and file type (`None`: nothing there, or a symlink
/// left out). A ruleset holds the inodes of its rules, so while it lives, an inode number it
/// names is not handed to another file.
type Identity = Option<(u64, u64, u32)>;

fn identity_of(st: &rustix::fs::Stat) -> Identity {
    #[allow(clippy::unnecessary_cast)] // the field types differ between targets
    Some((st.st_dev as u64, st.st_ino as u64, st.st_mode as u32 & libc::S_IFMT))
}

/// What `spec`'s device and writable root paths name now, in the order [`ruleset`] grants
/// them; `None` when one cannot be looked at (the ruleset is then built afresh, which says why).
fn identities(spec: &SandboxSpec) -> Option<Vec<Identity>> {
    let lstat = |p: &Path| -> Option<Identity> {
        let st = match rustix::fs::lstat(p) {
            Ok(st) => st,
            // Nothing there: no rule (as `ruleset` skips a missing device).
            Err(rustix::io::Errno::NOENT) => return Some(None),
            Err(_) => return None,
        };
        // A symlink gets no rule (see `open_path`), dangling or not.
        Some(if st.st_mode & libc::S_IFMT == libc::S_IFLNK { None } else { identity_of(&st) })
    };
    let mut on = Vec::new();
    for dev in DEVICES {
        on.push(lstat(Path::new(dev))?);
    }
    if spec.policy.mode == SandboxMode::WorkspaceWrite {
        for root in &spec.writable_roots {
            on.push(lstat(root)?);
        }
    }
    Some(on)
}

/// A ruleset built ahead of time by [`prebuild`], for the spawn whose paths still name what
/// its rules are on.
struct Prebuilt {
    mode: SandboxMode,
    network: NetworkMode,
    abi: i32,
    listing: std::sync::Arc<Listing>,
    on: Vec<Identity>,
    ruleset: OwnedFd,
}

/// Rulesets built ahead of time, the oldest first; each is used by one spawn at most.
static PREBUILT: std::sync::Mutex<std::collections::VecDeque<Prebuilt>> =
    std::sync::Mutex::new(std::collections::VecDeque::new());

/// Most rulesets kept built ahead (one descriptor each).
pub const MAX_PREBUILT: usize = 32;

fn prebuilt() -> std::sync::MutexGuard<'static, std::collections::VecDeque<Prebuilt>> {
    PREBUILT.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Builds the Landlock ruleset of `spec` now, off the spawn path, for the spawn that asks for
/// the same policy while its hidden paths' listing is unchanged and its device and writable
/// root paths name the same files (`prepare` checks, with a `stat` each): the rules are on
/// those files, so that spawn gets exactly the ruleset it would have built. For a writable
/// root made ahead and moved into place before the spawn (a private temporary directory):
/// a move keeps the file. Nothing is kept for a policy that does not confine or that this
/// kernel cannot enforce (`prepare` says why when a run asks).
pub fn prebuild(spec: &SandboxSpec) -> Result<(), SandboxError> {
    free_retired();
    let abi = landlock_abi();
    if !spec.policy.confines() || abi < MIN_LANDLOCK_ABI {
        return Ok(());
    }
    let abi = abi.min(MAX_LANDLOCK_ABI);
    let listing = readable(&spec.hidden)?;
    let (ruleset, on) = ruleset(spec, abi_of(abi), &listing)?;
    let entry = Prebuilt {
        mode: spec.policy.mode,
        network: spec.policy.network,
        abi,
        listing,
        on,
        ruleset,
    };
    let mut ready = prebuilt();
    if ready.len() >= MAX_PREBUILT {
        ready.pop_front();
    }
    ready.push_back(entry);
    Ok(())
}

/// The ruleset [`prebuild`] made for `spec`, when its files are still the ones named.
fn take_prebuilt(
    spec: &SandboxSpec,
    abi: i32,
    listing: &std::sync::Arc<Listing>,
) -> Option<OwnedFd> {
    // Checked before the lock: a miss costs the stats, and nothing when none is kept.
    if prebuilt().is_empty() {
        return None;
    }
    let on = identities(spec)?;
    let mut ready = prebuilt();
    let at = ready.iter().position(|p| {
        p.mode == spec.policy.mode
            && p.network == spec.policy.network
            && p.abi == abi
            && std::sync::Arc::ptr_eq(&p.listing, listing)
            && p.on == on
    })?;
    ready.remove(at).map(|p| p.ruleset)
}

/// `struct landlock_path_beneath_attr` (`linux/landlock.h`).
#[repr(C, packed)]
struct PathBeneathAttr {
    allowed_access: u64,
    parent_fd: RawFd,
}

/// Grants `read` on every entry `listing` holds, straight on the ruleset's descriptor: one
/// `landlock_add_rule` each, on descriptors opened when the listing was made.
fn grant_listed(
    ruleset: &OwnedFd,
    listing: &Listing,
    read: BitFlags<AccessFs>,
) -> Result<(), SandboxError> {
    for (fd, is_dir) in &listing.entries {
        let access = if *is_dir { read } else { read & file_rights() };
        let attr = PathBeneathAttr { allowed_access: access.bits(), parent_fd: fd.as_raw_fd() };
        // SAFETY: the attribute lives across the call; both descriptors are open.
        let r = unsafe {
            libc::syscall(
                libc::SYS_landlock_add_rule,
                ruleset.as_raw_fd(),
                1u32, // LANDLOCK_RULE_PATH_BENEATH
                &raw const attr,
                0u32,
            )
        };
        if r != 0 {
            return Err(setup(std::io::Error::last_os_error()));
        }
    }
    Ok(())
}

/// Adds a rule granting `access` beneath `path` (only the file rights when it is not a
/// directory). The path is opened without following a last symlink: a rule on a link's target
/// would grant whatever it points to.
fn grant(
    created: RulesetCreated,
    path: &Path,
    access: BitFlags<AccessFs>,
) -> Result<(RulesetCreated, Identity), SandboxError> {
    let (fd, is_dir, identity) = match open_path(path) {
        Ok(Some(opened)) => opened,
        Ok(None) => return Ok((created, None)),
        Err(e) => {
            return Err(SandboxError::Invalid(format!(
                "cannot open {} for the sandbox: {e}",
                path.display()
            )));
        }
    };
    let access = if is_dir { access } else { access & file_rights() };
    Ok((created.add_rule(PathBeneath::new(fd, access)).map_err(setup)?, identity))
}

fn file_rights() -> BitFlags<AccessFs> {
    AccessFs::from_file(ABI::V7)
}

/// `O_PATH` descriptor of `path`, whether it is a directory and what it is, `None` for a
/// symlink (its target, when readable, is covered by the rules on where it lives).
fn open_path(path: &Path) -> std::io::Result<Option<(OwnedFd, bool, Identity)>> {
    use rustix::fs::{Mode, OFlags};
    let fd =
        rustix::fs::open(path, OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty())?;
    let st = rustix::fs::fstat(&fd)?;
    let kind = st.st_mode & libc::S_IFMT;
    if kind == libc::S_IFLNK {
        return Ok(None);
    }
    Ok(Some((fd, kind == libc::S_IFDIR, identity_of(&st))))
}

/// Where read access is granted (see [`readable`]) for one set of hidden paths, opened, and
/// the directories listed to find it as they were then.
#[derive(Debug)]
struct Listing {
    /// The hidden paths (canonical) it was made for; none: `/` is granted whole.
    hidden: Vec<PathBuf>,
    /// Each directory listed, with its [`stamp`] taken before the listing.
    listed: Vec<(PathBuf, Stamp)>,
    /// What read access is granted on (`O_PATH`, close-on-exec), and whether it is a directory.
    entries: Vec<(OwnedFd, bool)>,
}

/// A directory's identity and last change: a new, removed or renamed entry moves its `mtime`.
type Stamp = (u64, u64, i64, i64);

fn stamp(dir: &Path) -> std::io::Result<Stamp> {
    let st = rustix::fs::stat(dir)?;
    #[allow(clippy::unnecessary_cast)] // the field types differ between targets
    Ok((st.st_dev as u64, st.st_ino as u64, st.st_mtime as i64, st.st_mtime_nsec as i64))
}

/// The last listing made, kept while its directories are unchanged (a `stat` each): the hidden
/// paths are the daemon's (its home, the door's token), the same for every spawn, and opening
/// every entry on the way to them again — hundreds in a busy `/tmp` — was most of what a sandbox
/// added to a spawn. Kept only while its descriptors are a small share of the open-file limit
/// ([`HELD_SHARE`]): the rest is budgeted for the sessions.
static LISTING: std::sync::Mutex<Option<std::sync::Arc<Listing>>> = std::sync::Mutex::new(None);

/// A kept listing holds at most 1/`HELD_SHARE` of the soft open-file limit in descriptors.
const HELD_SHARE: u64 = 16;

/// Where read access is granted: `/` whole, or — with paths to hide — every entry along the
/// way from `/` down to each of them except the one leading on (the hidden paths get nothing).
/// Reuses the last listing while its directories are unchanged; an entry made in the same clock
/// tick as the listing may be missed until the directory changes again — denied, never exposed.
fn readable(hidden: &[PathBuf]) -> Result<std::sync::Arc<Listing>, SandboxError> {
    let hidden: Vec<PathBuf> = hidden
        .iter()
        .map(|h| std::fs::canonicalize(h).unwrap_or_else(|_| h.clone()))
        .filter(|h| h.is_absolute() && h.parent().is_some())
        .collect();
    let lock = || LISTING.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(last) = lock().clone()
        && last.hidden == hidden
        && last.listed.iter().all(|(dir, was)| stamp(dir).ok().as_ref() == Some(was))
    {
        return Ok(last);
    }
    let listing = std::sync::Arc::new(list_readable(hidden)?);
    let held = listing.entries.len() as u64;
    *lock() = (held <= crate::fd_budget::nofile_soft() / HELD_SHARE).then(|| listing.clone());
    Ok(listing)
}

/// How many read rules hide `hidden` from a sandboxed command: one per entry beside each
/// directory on the way from `/` to them (Landlock only grants). Every sandboxed spawn copies
/// them, so a home in a busy directory (a `/tmp` of hundreds of entries) costs more than one
/// under `~/.local/state`.
pub fn hiding_rules(hidden: &[PathBuf]) -> Result<usize, SandboxError> {
    let hidden = hidden.iter().map(|h| std::fs::canonicalize(h).unwrap_or_else(|_| h.clone()));
    Ok(list_readable(hidden.filter(|h| h.parent().is_some()).collect())?.entries.len())
}

/// Lists and opens what [`readable`] grants, afresh. Entries are opened without following a
/// last symlink, and symlinks are left out: a rule on a link's target would grant whatever it
/// points to (its target, when readable, is covered by the rules on where it lives).
fn list_readable(hidden: Vec<PathBuf>) -> Result<Listing, SandboxError> {
    use rustix::fs::{Mode, OFlags};
    let mut listed = Vec::new();
    let mut entries = Vec::new();
    let mut dirs = if hidden.is_empty() { Vec::new() } else { vec![PathBuf::from("/")] };
    while let Some(dir) = dirs.pop() {
        let cannot = |e: &dyn std::fmt::Display| {
            SandboxError::Setup(format!(
                "cannot list {} to hide what is beneath: {e}",
                dir.display()
            ))
        };
        // Before the listing: a change while it is read shows at the next spawn.
        let before = stamp(&dir).map_err(|e| cannot(&e))?;
        let dirfd = rustix::fs::open(
            &dir,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| cannot(&e))?;
        for entry in std::fs::read_dir(&dir).map_err(|e| cannot(&e))?.flatten() {
            let path = entry.path();
            if hidden.contains(&path) {
                continue;
            }
            if hidden.iter().any(|h| h.starts_with(&path)) {
                dirs.push(path);
                continue;
            }
            let flags = OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC;
            let fd = match rustix::fs::openat(
                &dirfd,
                entry.file_name().as_os_str(),
                flags,
                Mode::empty(),
            ) {
                Ok(fd) => fd,
                // Gone since it was listed: nothing to grant.
                Err(rustix::io::Errno::NOENT) => continue,
                Err(e) => return Err(cannot(&format!("{}: {e}", path.display()))),
            };
            let kind = rustix::fs::fstat(&fd).map_err(|e| cannot(&e))?.st_mode & libc::S_IFMT;
            if kind != libc::S_IFLNK {
                entries.push((fd, kind == libc::S_IFDIR));
            }
        }
        listed.push((dir, before));
    }
    Ok(Listing { hidden, listed, entries })
}

/// The seccomp program ([`bpf::program`]), written once per network mode (it depends on
/// nothing else).
fn cached_program(network: NetworkMode) -> Result<Vec<seccompiler::sock_filter>, SandboxError> {
    static NONE: std::sync::OnceLock<Vec<seccompiler::sock_filter>> = std::sync::OnceLock::new();
    static ALLOW: std::sync::OnceLock<Vec<seccompiler::sock_filter>> = std::sync::OnceLock::new();
    let cell = if network == NetworkMode::None { &NONE } else { &ALLOW };
    Ok(cell.get_or_init(|| bpf::program(network)).clone())
}

#[path = "sandbox_bpf.rs"]
mod bpf;

#[cfg(test)]
use calls::seccomp_program;

#[path = "sandbox_calls.rs"]
mod calls;

/// What the child needs of a [`Prepared`], as plain values: read in the child without any
/// allocation or lock.
pub(crate) struct ChildSandbox {
    procs: [RawFd; 3],
    ruleset: RawFd,
    programs: [(usize, *const seccompiler::sock_filter); 2],
    nofile: Option<u64>,
}

impl ChildSandbox {
    /// The Landlock ruleset's descriptor (-1: none), for rules on mounts made in the child.
    pub(crate) fn ruleset_fd(&self) -> RawFd {
        self.ruleset
    }
}

// SAFETY: the pointers are into a `Prepared` the spawning frame keeps alive until the child has
// exec'd; they are only read.
unsafe impl Send for ChildSandbox {}
// SAFETY: as above: read-only.
unsafe impl Sync for ChildSandbox {}

/// Rulesets spawns are done with, to be closed off the spawn path: closing the last
/// descriptor of one makes the kernel free every rule (a hundred or more when the home is
/// hidden under a busy directory), and a spawn that waited for it answered later. The next
/// [`prebuild`] (a blocking task) closes them; past [`MAX_RETIRED`], a spawn closes its own.
static RETIRED: std::sync::Mutex<Vec<OwnedFd>> = std::sync::Mutex::new(Vec::new());

/// Most rulesets waiting to be closed (one descriptor each, close-on-exec).
const MAX_RETIRED: usize = 16;

fn retired() -> std::sync::MutexGuard<'static, Vec<OwnedFd>> {
    RETIRED.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Closes the retired rulesets.
fn free_retired() {
    let fds = std::mem::take(&mut *retired());
    drop(fds);
}

impl Drop for Prepared {
    fn drop(&mut self) {
        if let Some(fd) = self.ruleset.take() {
            let mut waiting = retired();
            if waiting.len() < MAX_RETIRED {
                waiting.push(fd);
            }
        }
    }
}

impl Prepared {
    /// The plain values the child reads; `self` must outlive the child's use of them.
    pub(crate) fn for_child(&self) -> ChildSandbox {
        let mut programs = [(0, std::ptr::null()); 2];
        for (slot, f) in programs.iter_mut().zip(&self.filters) {
            *slot = (f.len(), f.as_ptr());
        }
        let mut procs = [-1; 3];
        for (slot, fd) in procs.iter_mut().zip(&self.procs) {
            *slot = fd.as_raw_fd();
        }
        ChildSandbox {
            procs,
            ruleset: self.ruleset.as_ref().map_or(-1, AsRawFd::as_raw_fd),
            programs,
            nofile: self.nofile,
        }
    }
}

/// Applies the sandbox to the calling process. Between fork/clone and exec only: raw system
/// calls, no allocation, no lock. The error is the failing call's errno.
///
/// # Safety
/// The pointers in `sb` must be valid (their [`Prepared`] alive).
pub(crate) unsafe fn apply_in_child(sb: &ChildSandbox) -> Result<(), i32> {
    let errno = || std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EPERM);
    // SAFETY: plain system calls on values prepared by the parent.
    unsafe {
        // Into the limits' cgroups first ("0": the writing process), before anything can fork.
        for &fd in &sb.procs {
            if fd >= 0 && libc::write(fd, b"0".as_ptr().cast(), 1) != 1 {
                return Err(errno());
            }
        }
        if let Some(n) = sb.nofile {
            let lim = libc::rlimit { rlim_cur: n, rlim_max: n };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                return Err(errno());
            }
        }
        if sb.ruleset < 0 && sb.programs[0].0 == 0 {
            return Ok(());
        }
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
            return Err(errno());
        }
        if sb.ruleset >= 0 && libc::syscall(libc::SYS_landlock_restrict_self, sb.ruleset, 0u32) != 0
        {
            return Err(errno());
        }
        for &(len, ptr) in &sb.programs {
            if len == 0 {
                continue;
            }
            let prog = SockFprog { len: len as libc::c_ushort, filter: ptr };
            if libc::syscall(libc::SYS_seccomp, libc::SECCOMP_SET_MODE_FILTER, 0u32, &prog) != 0 {
                return Err(errno());
            }
        }
    }
    Ok(())
}

/// Whether process `pid` runs under seccomp filters this process does not have: a command of a
/// sandboxed session (or something it started) talking to the daemon. Filters are inherited and
/// can never be removed, so no process below a sandbox can pass for free. `None` when `pid` is
/// gone or unreadable.
pub fn confined_below_us(pid: u32) -> Option<bool> {
    let filters = |status: &str| -> Option<u64> {
        status
            .lines()
            .find_map(|l| l.strip_prefix("Seccomp_filters:"))
            .and_then(|v| v.trim().parse().ok())
    };
    let theirs = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let ours = std::fs::read_to_string("/proc/self/status").ok()?;
    Some(filters(&theirs)? > filters(&ours).unwrap_or(0))
}

#[cfg(test)]
#[path = "sandbox_tests.rs"]
mod tests;
