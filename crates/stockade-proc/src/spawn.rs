//! Spawning a command as the root of a new, contained process tree.

use std::ffi::{OsStr, OsString};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use stockade_proto::rpc::PtySize;

use super::MARKER_ENV;
use super::cgroup;
use super::clone3::{self, Outcome, Plan};
use super::containment::Containment;
use super::limits;
use super::marker::SessionMarker;
use super::pidfd::PidFd;
use super::pty::{self, DEFAULT_TERM, PtyError};
use super::sandbox::{self, Prepared, SandboxError, SandboxSpec};
use super::scan;
use super::tree::ProcessTree;

/// The shell every command string runs in.
const SHELL: &str = "/bin/sh";

/// Stage bytes a child writes to the stage pipe when `pre_exec` fails, so the parent can tell a
/// containment failure from an `exec` failure (both reach it as a bare errno).
const STAGE_SETSID: u8 = 1;
const STAGE_CGROUP: u8 = 2;
const STAGE_CTTY: u8 = 3;
const STAGE_SANDBOX: u8 = 4;
const STAGE_FSIZE: u8 = 5;

/// Where one of the child's standard streams goes.
#[derive(Debug, Default)]
#[non_exhaustive]
pub enum StdioSpec {
    /// `/dev/null`.
    #[default]
    Null,
    /// A new pipe; the parent's end is returned in [`SpawnedTree`] (blocking mode).
    Pipe,
    /// A descriptor the caller owns, e.g. the output log's spool file in `file` capture mode.
    Fd(OwnedFd),
}

impl StdioSpec {
    fn into_stdio(self) -> Stdio {
        match self {
            StdioSpec::Null => Stdio::null(),
            StdioSpec::Pipe => Stdio::piped(),
            StdioSpec::Fd(fd) => Stdio::from(fd),
        }
    }
}

/// What to run and how.
#[derive(Debug)]
pub struct SpawnSpec {
    /// The program (looked up in `PATH` when it has no `/`).
    pub program: OsString,
    /// Its arguments (without `argv[0]`).
    pub args: Vec<OsString>,
    /// Working directory; the daemon's when `None`.
    pub cwd: Option<PathBuf>,
    /// The environment to start from instead of this process's own (`None`: this process's).
    pub base_env: Option<Vec<(OsString, OsString)>>,
    /// Extra environment variables (the marker always wins over an entry with its name).
    pub env: Vec<(OsString, OsString)>,
    /// Standard input.
    pub stdin: StdioSpec,
    /// Standard output.
    pub stdout: StdioSpec,
    /// Standard error.
    pub stderr: StdioSpec,
    /// The session this process tree belongs to.
    pub marker: SessionMarker,
    /// The sandbox to confine it to (none: the user's full rights).
    pub sandbox: Option<SandboxSpec>,
    /// `RLIMIT_FSIZE` (soft and hard) of the tree: no file it writes grows past this many bytes
    /// (a write past it fails with `EFBIG` after `SIGXFSZ`). Set when the command writes its
    /// spool itself, so the disk cap holds in the kernel, not at the next poll.
    pub file_size_limit: Option<u64>,
}

impl SpawnSpec {
    /// `/bin/sh -c <command>` for `marker`, stdio all `/dev/null`.
    pub fn shell(command: impl AsRef<OsStr>, marker: SessionMarker) -> SpawnSpec {
        SpawnSpec {
            program: SHELL.into(),
            args: vec!["-c".into(), command.as_ref().to_owned()],
            cwd: None,
            base_env: None,
            env: Vec::new(),
            stdin: StdioSpec::Null,
            stdout: StdioSpec::Null,
            stderr: StdioSpec::Null,
            marker,
            sandbox: None,
            file_size_limit: None,
        }
    }
}

/// A spawned tree with the parent's ends of its piped stdio.
#[derive(Debug)]
pub struct SpawnedTree {
    /// The tree.
    pub tree: ProcessTree,
    /// Write end of the child's stdin, when [`StdioSpec::Pipe`].
    pub stdin: Option<OwnedFd>,
    /// Read end of the child's stdout, when [`StdioSpec::Pipe`].
    pub stdout: Option<OwnedFd>,
    /// Read end of the child's stderr, when [`StdioSpec::Pipe`].
    pub stderr: Option<OwnedFd>,
    /// The terminal's master side, when spawned with [`spawn_pty`]: read it with the drain as
    /// [`Stream::Pty`](stockade_proto::Stream::Pty); write and resize through a duplicate
    /// ([`try_clone_master`](super::try_clone_master)).
    pub pty_master: Option<OwnedFd>,
}

/// Why a command could not be started. Nothing of it is left running when this is returned.
#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    /// The working directory does not exist or is not a directory.
    #[error("working directory {path}: {reason}")]
    Cwd {
        /// The directory asked for.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// The program could not be executed (not found, not executable, …).
    #[error("cannot execute {program:?}: {source}")]
    Exec {
        /// The program asked for.
        program: OsString,
        /// The OS error.
        source: io::Error,
    },
    /// The session marker is not usable (empty, or contains `/`, NUL or newline).
    #[error("invalid session marker {0:?}")]
    InvalidMarker(String),
    /// The child could not start its own session.
    #[error("setsid in the child failed: {0}")]
    Setsid(io::Error),
    /// The session cgroup could not be created.
    #[error("cannot create cgroup {path}: {source}")]
    CgroupCreate {
        /// The cgroup directory.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// The child could not be placed in its cgroup before exec.
    #[error("cannot place the child in cgroup {path}: {source}")]
    CgroupPlacement {
        /// The cgroup directory.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// A pipe for the spawn could not be created.
    #[error("cannot create a pipe: {0}")]
    Pipe(io::Error),
    /// The child started but no pidfd could be opened for it (it was killed and reaped again).
    #[error("cannot open a pidfd for the child: {0}")]
    Pidfd(String),
    /// The pseudo-terminal could not be opened (or the size is out of range).
    #[error("cannot open a pseudo-terminal: {0}")]
    Pty(#[from] PtyError),
    /// A PTY spawn was given stdio other than [`StdioSpec::Null`]: the terminal is all three.
    #[error("a PTY session's stdin, stdout and stderr are the terminal; the spec set them too")]
    PtyStdio,
    /// The child could not make the terminal its controlling terminal (`TIOCSCTTY`).
    #[error("cannot make the pseudo-terminal the controlling terminal: {0}")]
    ControllingTerminal(io::Error),
    /// The sandbox cannot be enforced or set up; nothing was started.
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
    /// The child could not enter its sandbox (it exited before `exec`).
    #[error("the command could not enter its sandbox: {0}")]
    SandboxApply(io::Error),
    /// The daemon requires namespaces for sandboxed sessions and this host does not give them.
    #[error(
        "this daemon runs sandboxed sessions only in namespaces of their own (--isolation full) and the kernel refused them: {0}; allow unshare/clone namespaces (user namespaces on, a seccomp profile that permits them) or start the daemon without --isolation full"
    )]
    Isolation(String),
    /// The child could not take the file-size limit its spool's disk cap needs.
    #[error("cannot limit the command's file size (RLIMIT_FSIZE) to its disk cap: {0}")]
    FileSizeLimit(io::Error),
}

/// Spawns `spec` as the root of a new process tree: own session and process group, the session
/// marker in its environment, and — with cgroup containment — inside a fresh cgroup before `exec`.
pub fn spawn(spec: SpawnSpec, containment: &Containment) -> Result<SpawnedTree, SpawnError> {
    spawn_with(spec, None, containment)
}

/// Like [`spawn`], on a new pseudo-terminal of `size` (rows × cols; 24 × 80 is the usual
/// default): the terminal is the child's stdin, stdout, stderr and controlling terminal (so
/// Ctrl-C, job control and `SIGWINCH` work), `TERM` is `DEFAULT_TERM` unless `spec.env` sets
/// it, and the master comes back in [`SpawnedTree::pty_master`]. `spec`'s stdio must be
/// [`StdioSpec::Null`] (what [`SpawnSpec::shell`] gives). Containment, marker and termination are
/// exactly those of [`spawn`].
pub fn spawn_pty(
    spec: SpawnSpec,
    size: PtySize,
    containment: &Containment,
) -> Result<SpawnedTree, SpawnError> {
    let null = |s: &StdioSpec| matches!(s, StdioSpec::Null);
    if !(null(&spec.stdin) && null(&spec.stdout) && null(&spec.stderr)) {
        return Err(SpawnError::PtyStdio);
    }
    pty::validate_size(size)?;
    spawn_with(spec, Some(size), containment)
}

fn spawn_with(
    spec: SpawnSpec,
    pty_size: Option<PtySize>,
    containment: &Containment,
) -> Result<SpawnedTree, SpawnError> {
    if !spec.marker.is_valid() {
        return Err(SpawnError::InvalidMarker(spec.marker.value()));
    }
    if let Some(cwd) = &spec.cwd {
        match std::fs::metadata(cwd) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                return Err(SpawnError::Cwd {
                    path: cwd.clone(),
                    reason: "not a directory".into(),
                });
            }
            Err(e) => return Err(SpawnError::Cwd { path: cwd.clone(), reason: e.to_string() }),
        }
    }

    // Checked and built before anything is made: a policy the kernel cannot enforce is refused.
    let mut prepared = spec.sandbox.as_ref().map(sandbox::prepare).transpose()?;
    let cgroup_dir = match &containment.inner.cgroup {
        Some(root) => Some(
            cgroup::create_session_dir(&root.instance_dir, &spec.marker.id).map_err(|source| {
                SpawnError::CgroupCreate { path: root.instance_dir.join(&spec.marker.id), source }
            })?,
        ),
        None => None,
    };
    let limits = match (&spec.sandbox, prepared.as_mut()) {
        (Some(sb), Some(p))
            if sb.policy.memory.is_some()
                || sb.policy.pids.is_some()
                || sb.policy.cpu.is_some() =>
        {
            let name = format!("{}-{}", spec.marker.instance, spec.marker.id);
            let asked = limits::Asked {
                memory: sb.policy.memory,
                pids: sb.policy.pids,
                cpu: sb.policy.cpu,
            };
            match limits::create(asked, cgroup_dir.as_deref(), &name) {
                Ok((group, procs)) => {
                    p.procs = procs;
                    Some(group)
                }
                Err(e) => {
                    if let Some(dir) = &cgroup_dir {
                        let _ = cgroup::remove(dir);
                    }
                    return Err(e.into());
                }
            }
        }
        _ => None,
    };
    let result = spawn_in(spec, pty_size, containment, cgroup_dir.clone(), prepared.as_ref());
    match result {
        Ok(mut spawned) => {
            spawned.tree.limits = limits;
            Ok(spawned)
        }
        Err(e) => {
            if let Some(dir) = &cgroup_dir {
                let _ = cgroup::remove(dir);
            }
            if let Some(l) = &limits {
                l.remove();
            }
            Err(e)
        }
    }
}

fn spawn_in(
    spec: SpawnSpec,
    pty_size: Option<PtySize>,
    containment: &Containment,
    cgroup_dir: Option<PathBuf>,
    prepared: Option<&Prepared>,
) -> Result<SpawnedTree, SpawnError> {
    let pair = pty_size.map(pty::open_pair).transpose()?;
    // A session in namespaces of its own runs under a keeper (its PID 1), cgroup or not.
    let ns_keeper = crate::namespaces::keeper_for(spec.sandbox.as_ref(), &containment.inner.keeper);
    let keeper = match containment.inner.keeper.as_ref().or(ns_keeper.as_ref()) {
        Some(exe) => Some(KeeperPipe::new(exe.as_raw_fd())?),
        None => None,
    };
    let fast = spawn_fast(&spec, pair.as_ref(), cgroup_dir.as_deref(), prepared, keeper.as_ref())?;
    if let Some(started) = fast {
        let FastSpawn { pid, pidfd, ours: [stdin, stdout, stderr], io, namespaces } = started;
        // The child holds the slave now; ours would keep the master from ever reading EOF.
        let pty_master = pair.map(|p| p.master);
        let root = PidFd::from_child(pid, pidfd);
        let status = keeper.map(KeeperPipe::into_read_end);
        let mut tree = ProcessTree::new_spawned(
            root,
            spec.marker,
            cgroup_dir,
            containment.clone(),
            io,
            status,
        );
        tree.own_pid_ns = namespaces;
        return Ok(SpawnedTree { tree, stdin, stdout, stderr, pty_master });
    }
    if crate::namespaces::wanted(spec.sandbox.as_ref()) && crate::namespaces::required() {
        return Err(SpawnError::Isolation(
            "the spawn cannot use clone3 here, and only clone3 makes them".into(),
        ));
    }
    spawn_forked(spec, pair, containment, cgroup_dir, prepared, keeper)
}

/// The status pipe of a spawn under a keeper (see `keeper.rs`): both ends close-on-exec in this
/// process, the write end numbered 3 or above (the child clears its flag before executing the
/// keeper), the read end non-blocking. `exe` is the keeper's open executable.
struct KeeperPipe {
    exe: RawFd,
    read: OwnedFd,
    write: OwnedFd,
}

impl KeeperPipe {
    fn new(exe: RawFd) -> Result<KeeperPipe, SpawnError> {
        let (read, write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
            .map_err(|e| SpawnError::Pipe(e.into()))?;
        rustix::io::ioctl_fionbio(&read, true).map_err(|e| SpawnError::Pipe(e.into()))?;
        let write = clone3::above_stdio(write).map_err(SpawnError::Pipe)?;
        Ok(KeeperPipe { exe, read, write })
    }

    /// This process's end once the keeper holds the other (ours is closed here).
    fn into_read_end(self) -> OwnedFd {
        self.read
    }
}

/// The fork path, where `clone3` is unavailable: `std::process::Command` with a `pre_exec` that
/// does what the `clone3` child does (own session, controlling terminal, cgroup, open-file
/// limit); a pipe tells which step failed.
fn spawn_forked(
    mut spec: SpawnSpec,
    pair: Option<pty::PtyPair>,
    containment: &Containment,
    cgroup_dir: Option<PathBuf>,
    prepared: Option<&Prepared>,
    keeper: Option<KeeperPipe>,
) -> Result<SpawnedTree, SpawnError> {
    let placement = match &cgroup_dir {
        Some(dir) => Some(
            cgroup::open_procs_for_placement(dir)
                .map_err(|source| SpawnError::CgroupPlacement { path: dir.clone(), source })?,
        ),
        None => None,
    };
    let (stage_read, stage_write) = rustix::pipe::pipe_with(
        rustix::pipe::PipeFlags::CLOEXEC | rustix::pipe::PipeFlags::NONBLOCK,
    )
    .map_err(|e| SpawnError::Pipe(e.into()))?;

    let io = given_identities(&spec, pair.as_ref());
    let mut cmd = command(&mut spec, pair.as_ref(), keeper.as_ref())?;
    let controlling_tty = pair.is_some();
    let keeper_status = keeper.as_ref().map(|k| k.write.as_raw_fd());

    let stage_fd = stage_write.as_raw_fd();
    let nofile = child_nofile().map(|(soft, hard)| rustix::process::Rlimit {
        current: Some(soft),
        maximum: (hard != libc::RLIM_INFINITY).then_some(hard),
    });
    let file_size_limit = spec.file_size_limit;
    let procs_fd = placement.as_ref().map(AsRawFd::as_raw_fd);
    let child_sandbox = prepared.map(Prepared::for_child);
    // SAFETY: the closure runs between fork and exec and calls only async-signal-safe functions
    // (setsid, ioctl, write, the sandbox's raw calls) on descriptors and memory that stay valid
    // in the parent until `spawn` returns.
    // std has already dup'ed the stdio onto fds 0-2 when it runs, so fd 0 is the PTY slave.
    unsafe {
        cmd.pre_exec(move || {
            let fail = |stage: u8| {
                let err = io::Error::last_os_error();
                libc::write(stage_fd, (&stage as *const u8).cast(), 1);
                Err(err)
            };
            if set_child_limits(nofile.as_ref(), file_size_limit).is_err() {
                return fail(STAGE_FSIZE);
            }
            if libc::setsid() < 0 {
                return fail(STAGE_SETSID);
            }
            // The new session has no controlling terminal yet: take the slave as ours.
            if controlling_tty && libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
                return fail(STAGE_CTTY);
            }
            if let Some(fd) = procs_fd {
                // "0" moves the writing process itself.
                if libc::write(fd, b"0".as_ptr().cast(), 1) != 1 {
                    return fail(STAGE_CGROUP);
                }
            }
            // Last: nothing after it but exec runs confined.
            if let Some(sb) = &child_sandbox
                && let Err(errno) = sandbox::apply_in_child(sb)
            {
                *libc::__errno_location() = errno;
                return fail(STAGE_SANDBOX);
            }
            // The keeper's copy of the status pipe survives the exec (this table's flag only).
            if let Some(fd) = keeper_status
                && libc::fcntl(fd, libc::F_SETFD, 0) < 0
            {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }

    let spawned = cmd.spawn();
    drop(cmd); // closes the child's ends of pipes and caller-given fds in the parent
    drop(stage_write);
    drop(placement);
    // The child holds the slave now; ours would keep the master from ever reading EOF.
    let pty_master = pair.map(|p| p.master);
    let child = match spawned {
        Ok(child) => child,
        Err(source) => return Err(staged_error(&stage_read, source, cgroup_dir, spec.program)),
    };

    let tail = ForkedTail { marker: spec.marker, cgroup_dir, io, status: keeper };
    let (tree, [stdin, stdout, stderr]) = tail.finish(child, containment)?;
    Ok(SpawnedTree { tree, stdin, stdout, stderr, pty_master })
}

/// What the fork path's tree is made of besides the child.
struct ForkedTail {
    marker: SessionMarker,
    cgroup_dir: Option<PathBuf>,
    /// Identities of the descriptors given so far; our ends of pipes are added.
    io: Vec<(u64, u64)>,
    status: Option<KeeperPipe>,
}

impl ForkedTail {
    /// The tree of the fork path's `child` and our ends of its stdin, stdout and stderr.
    fn finish(
        mut self,
        mut child: std::process::Child,
        containment: &Containment,
    ) -> Result<(ProcessTree, [Option<OwnedFd>; 3]), SpawnError> {
        let pid = child.id();
        // Our unreaped child: its pid cannot be recycled, no identity check needed.
        let pidfd = match PidFd::open_unchecked(pid) {
            Ok(fd) => fd,
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(SpawnError::Pidfd(e.to_string()));
            }
        };
        let stdin = child.stdin.take().map(OwnedFd::from);
        let stdout = child.stdout.take().map(OwnedFd::from);
        let stderr = child.stderr.take().map(OwnedFd::from);
        // The tree reaps the root through its pidfd; `std::process::Child` neither waits nor
        // kills on drop.
        drop(child);
        // Our ends of the pipes are the same pipes as the child's.
        let ours: Vec<_> = [&stdin, &stdout, &stderr].into_iter().flatten().collect();
        add_identities(&mut self.io, &ours);
        let status = self.status.map(KeeperPipe::into_read_end);
        let tree = ProcessTree::new_spawned(
            pidfd,
            self.marker,
            self.cgroup_dir,
            containment.clone(),
            self.io,
            status,
        );
        Ok((tree, [stdin, stdout, stderr]))
    }
}

/// Why the fork path's child did not exec: the step it wrote to the stage pipe, else `exec`.
fn staged_error(
    stage_read: &OwnedFd,
    source: io::Error,
    cgroup_dir: Option<PathBuf>,
    program: OsString,
) -> SpawnError {
    let mut stage = [0u8; 1];
    let staged = rustix::io::read(stage_read, &mut stage).unwrap_or(0) == 1;
    match (staged, stage[0]) {
        (true, STAGE_SETSID) => SpawnError::Setsid(source),
        (true, STAGE_CTTY) => SpawnError::ControllingTerminal(source),
        (true, STAGE_SANDBOX) => SpawnError::SandboxApply(source),
        (true, STAGE_FSIZE) => SpawnError::FileSizeLimit(source),
        (true, STAGE_CGROUP) => {
            SpawnError::CgroupPlacement { path: cgroup_dir.unwrap_or_default(), source }
        }
        _ => SpawnError::Exec { program, source },
    }
}

/// The command of the fork path: program, arguments, directory, environment with the marker,
/// and stdio (the terminal's slave for a PTY session).
fn command(
    spec: &mut SpawnSpec,
    pair: Option<&pty::PtyPair>,
    keeper: Option<&KeeperPipe>,
) -> Result<Command, SpawnError> {
    let mut cmd = match keeper {
        // The keeper runs the program: its path resolved as `execvp` would, then its argv.
        Some(k) => {
            let env = child_env(spec, pair.is_some());
            let path = clone3::resolve(&spec.program, &env)
                .map_err(|source| SpawnError::Exec { program: spec.program.clone(), source })?;
            let mut cmd = Command::new(format!("/proc/self/fd/{}", k.exe));
            cmd.arg0("stockade").arg(crate::keeper::KEEPER_FLAG);
            cmd.arg(k.write.as_raw_fd().to_string()).arg(path).arg(&spec.program);
            cmd
        }
        None => Command::new(&spec.program),
    };
    cmd.args(&spec.args);
    if let Some(cwd) = &spec.cwd {
        cmd.current_dir(cwd);
    }
    if let Some(base) = &spec.base_env {
        cmd.env_clear();
        cmd.envs(base.iter().map(|(k, v)| (k, v)));
    }
    for (k, v) in &spec.env {
        cmd.env(k, v);
    }
    cmd.env(MARKER_ENV, spec.marker.value());
    match pair {
        Some(pair) => {
            if !spec.env.iter().any(|(k, _)| k == "TERM") {
                cmd.env("TERM", DEFAULT_TERM);
            }
            let slave = || pair.slave.try_clone().map(Stdio::from).map_err(SpawnError::Pipe);
            cmd.stdin(slave()?);
            cmd.stdout(slave()?);
            cmd.stderr(slave()?);
        }
        None => {
            let take = |s: &mut StdioSpec| std::mem::replace(s, StdioSpec::Null).into_stdio();
            cmd.stdin(take(&mut spec.stdin));
            cmd.stdout(take(&mut spec.stdout));
            cmd.stderr(take(&mut spec.stderr));
        }
    }
    Ok(cmd)
}

/// The fork path's child's limits, between fork and exec (`setrlimit` is async-signal-safe):
/// the open-file limit best effort (a limit it cannot lower only means the command sees a
/// higher one), the file-size limit not (the disk cap of file capture depends on it).
fn set_child_limits(
    nofile: Option<&rustix::process::Rlimit>,
    file_size_limit: Option<u64>,
) -> rustix::io::Result<()> {
    use rustix::process::{Resource, Rlimit, setrlimit};
    if let Some(lim) = nofile {
        let _ = setrlimit(Resource::Nofile, *lim);
    }
    if let Some(bytes) = file_size_limit {
        setrlimit(Resource::Fsize, Rlimit { current: Some(bytes), maximum: Some(bytes) })?;
    }
    Ok(())
}

/// The open-file limit a command gets (soft, hard): the daemon raised its own, the command gets
/// the user's back. `None` when the daemon did not raise it.
fn child_nofile() -> Option<(u64, u64)> {
    crate::fd_budget::child_nofile_limit().map(|soft| {
        let hard = rustix::process::getrlimit(rustix::process::Resource::Nofile).maximum;
        (soft, hard.unwrap_or(libc::RLIM_INFINITY))
    })
}

/// The identities of the descriptors a spawn gives the child that it did not create itself: the
/// terminal's slave, or the caller's descriptors (a spool).
fn given_identities(spec: &SpawnSpec, pair: Option<&pty::PtyPair>) -> Vec<(u64, u64)> {
    let mut io = Vec::new();
    match pair {
        Some(pair) => add_identities(&mut io, &[&pair.slave]),
        None => {
            let given: Vec<&OwnedFd> = [&spec.stdin, &spec.stdout, &spec.stderr]
                .into_iter()
                .filter_map(|s| match s {
                    StdioSpec::Fd(fd) => Some(fd),
                    _ => None,
                })
                .collect();
            add_identities(&mut io, &given);
        }
    }
    io
}

/// Adds the identities of `fds` worth watching (see [`scan::fd_identity`]) not in `io` yet.
fn add_identities(io: &mut Vec<(u64, u64)>, fds: &[&OwnedFd]) {
    for fd in fds {
        if let Some(id) = scan::fd_identity(fd)
            && !io.contains(&id)
        {
            io.push(id);
        }
    }
}

/// The child's ends, the parent's ends and the child's raw stdio fds (see [`fast_stdio`]).
type FastStdio = (Vec<OwnedFd>, [Option<OwnedFd>; 3], [RawFd; 3]);

/// The child's stdio for the `clone3` spawn, each above fd 2: the ends the child gets (closed
/// here once it has exec'd), the parent's ends of pipes, and the three raw fds the child dups
/// onto 0, 1 and 2.
fn fast_stdio(spec: &SpawnSpec, pair: Option<&pty::PtyPair>) -> Result<FastStdio, SpawnError> {
    let dup = |fd: &OwnedFd| fd.try_clone().and_then(clone3::above_stdio).map_err(SpawnError::Pipe);
    let null = || -> Result<OwnedFd, SpawnError> {
        let f = std::fs::OpenOptions::new().read(true).write(true).open("/dev/null");
        clone3::above_stdio(f.map_err(SpawnError::Pipe)?.into()).map_err(SpawnError::Pipe)
    };
    let pipe = || -> Result<(OwnedFd, OwnedFd), SpawnError> {
        let (r, w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
            .map_err(|e| SpawnError::Pipe(e.into()))?;
        Ok((
            clone3::above_stdio(r).map_err(SpawnError::Pipe)?,
            clone3::above_stdio(w).map_err(SpawnError::Pipe)?,
        ))
    };
    let mut child_ends: Vec<OwnedFd> = Vec::new();
    let mut ours: [Option<OwnedFd>; 3] = [None, None, None];
    let mut raw = [-1; 3];
    match pair {
        Some(pair) => {
            let slave = dup(&pair.slave)?;
            raw = [slave.as_raw_fd(); 3];
            child_ends.push(slave);
        }
        None => {
            for (i, s) in [&spec.stdin, &spec.stdout, &spec.stderr].into_iter().enumerate() {
                let fd = match s {
                    StdioSpec::Null => null()?,
                    StdioSpec::Fd(fd) => dup(fd)?,
                    StdioSpec::Pipe => {
                        let (r, w) = pipe()?;
                        let (child, parent) = if i == 0 { (r, w) } else { (w, r) };
                        ours[i] = Some(parent);
                        child
                    }
                };
                raw[i] = fd.as_raw_fd();
                child_ends.push(fd);
            }
        }
    }
    Ok((child_ends, ours, raw))
}

/// The child's environment: the base (the daemon's unless the request brought one), `TERM` for
/// a terminal unless given, the request's variables, then the session marker (last, so nothing
/// overrides it).
fn child_env(spec: &SpawnSpec, tty: bool) -> Vec<(OsString, OsString)> {
    let mut env: Vec<(OsString, OsString)> = match &spec.base_env {
        Some(base) => base.clone(),
        None => std::env::vars_os().collect(),
    };
    let mut set = |k: OsString, v: OsString| match env.iter_mut().find(|(key, _)| *key == k) {
        Some(slot) => slot.1 = v,
        None => env.push((k, v)),
    };
    if tty && !spec.env.iter().any(|(k, _)| k == "TERM") {
        set("TERM".into(), DEFAULT_TERM.into());
    }
    for (k, v) in &spec.env {
        set(k.clone(), v.clone());
    }
    set(MARKER_ENV.into(), spec.marker.value().into());
    env
}

/// A fast spawn's child: pid, pidfd, the parent's ends of stdin, stdout and stderr, and the
/// identities of the descriptors the child was given (see [`scan::fd_identity`]).
struct FastSpawn {
    pid: u32,
    pidfd: OwnedFd,
    ours: [Option<OwnedFd>; 3],
    io: Vec<(u64, u64)>,
    /// It got its namespaces (its keeper is PID 1 of its own PID namespace).
    namespaces: bool,
}

/// The `clone3` spawn (`process/clone3.rs`); `Ok(None)` where it is unavailable, so the caller
/// forks instead. Same guarantees as the fork path: own session, cgroup before exec, marker,
/// stdio, controlling terminal, signals reset, the user's open-file limit.
fn spawn_fast(
    spec: &SpawnSpec,
    pair: Option<&pty::PtyPair>,
    cgroup_dir: Option<&std::path::Path>,
    prepared: Option<&Prepared>,
    keeper: Option<&KeeperPipe>,
) -> Result<Option<FastSpawn>, SpawnError> {
    if !clone3::may_work() {
        return Ok(None);
    }
    let (child_ends, ours, raw) = fast_stdio(spec, pair)?;
    let env = child_env(spec, pair.is_some());
    let exec_error = |source| SpawnError::Exec { program: spec.program.clone(), source };
    let mut plan = Plan::new(
        &spec.program,
        &spec.args,
        env,
        spec.cwd.as_deref(),
        raw,
        pair.is_some(),
        child_nofile(),
    )
    .map_err(exec_error)?;
    plan.sandbox = prepared.map(Prepared::for_child);
    plan.fsize = spec.file_size_limit;
    if let Some(k) = keeper {
        plan.use_keeper(k.exe, k.write.as_raw_fd());
        plan.attach_namespaces(spec.sandbox.as_ref()).map_err(exec_error)?;
    }
    let cgroup_fd = match cgroup_dir {
        Some(dir) => Some(
            std::fs::File::open(dir)
                .map(OwnedFd::from)
                .map_err(|source| SpawnError::CgroupPlacement { path: dir.to_owned(), source })?,
        ),
        None => None,
    };
    let outcome = clone3::spawn(&plan, cgroup_fd.as_ref());
    let mut io = Vec::new();
    add_identities(&mut io, &child_ends.iter().collect::<Vec<_>>());
    drop(child_ends);
    match outcome {
        Outcome::Unavailable => Ok(None),
        Outcome::Started { pid, pidfd, namespaces } => {
            Ok(Some(FastSpawn { pid, pidfd, ours, io, namespaces }))
        }
        Outcome::NoNamespaces(why) => Err(SpawnError::Isolation(why)),
        Outcome::Refused(source) => Err(match (cgroup_dir, source.raw_os_error()) {
            (Some(dir), Some(libc::EBUSY | libc::EOPNOTSUPP | libc::EACCES | libc::ENOENT)) => {
                SpawnError::CgroupPlacement { path: dir.to_owned(), source }
            }
            _ => exec_error(source),
        }),
        Outcome::Failed { step, error } => Err(match step {
            clone3::STEP_SETSID => SpawnError::Setsid(error),
            clone3::STEP_CTTY => SpawnError::ControllingTerminal(error),
            clone3::STEP_SANDBOX | clone3::STEP_CAPS => SpawnError::SandboxApply(error),
            clone3::STEP_FSIZE => SpawnError::FileSizeLimit(error),
            clone3::STEP_STDIO => SpawnError::Pipe(error),
            clone3::STEP_CWD => SpawnError::Cwd {
                path: spec.cwd.clone().unwrap_or_default(),
                reason: error.to_string(),
            },
            _ => exec_error(error),
        }),
    }
}

#[cfg(test)]
#[path = "spawn_tests.rs"]
mod tests;
