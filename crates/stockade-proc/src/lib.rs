//! Stockade's process layer. Process trees: spawn a command inside the strongest containment available, and terminate the
//! whole tree it grows — verifying that nothing of it is left.
//!
//! # What this module owns
//!
//! * **Spawn** ([`spawn`]): every command runs in its own session and process group (`setsid` in
//!   the child), carries the environment marker `STOCKADE_SESSION=<instance>:<id>` (inherited by
//!   every descendant that does not scrub its environment), and — when cgroup containment is on —
//!   is placed in its own cgroup v2 *before* `exec`, so not even its first fork escapes. On
//!   Linux x86_64 one `clone3` does it all (`clone3.rs`: the child shares the daemon's memory
//!   until `exec`, the kernel places it in the cgroup and returns its pidfd); where `clone3` is
//!   refused, a fork with `pre_exec` does the same steps.
//! * **Containment** ([`Containment::detect`]): chosen once at start-up, strongest first.
//!   1. *cgroup v2*: one child cgroup per session under the daemon's own cgroup (or a configured
//!      parent), killed with `cgroup.kill`; nothing can leave it by `setsid` or double-forking.
//!   2. *process group fallback*: the process group, the daemon as child subreaper (orphans
//!      reparent to it, so their zombies can be reaped) and a `/proc` scan for the session marker,
//!      which catches `setsid`/double-fork escapes.
//!
//!   `detect` never fails: it records *why* it chose what it chose ([`Containment::describe`]) for
//!   `stockade doctor`.
//! * **Terminate** ([`ProcessTree::terminate`]): the single routine every path uses (kill,
//!   foreground timeout, disk-cap kill, shutdown, client disconnect). Polite signal to everything
//!   of the session, a grace period that ends as soon as the tree is gone, `SIGKILL` for what is
//!   left, then *verify* until no process of the session remains. "Signal sent" and "terminated"
//!   are different answers ([`stockade_proto::TerminateReport`]); survivors are reported, never
//!   hidden. A root that exited by itself ends through [`ProcessTree::finish_after_exit`]: with
//!   its cgroup already empty and no zombie child to reap, that is the verification (no `/proc`
//!   census); otherwise the same routine.
//! * **Terminals and input** ([`spawn_pty`], [`pty`], [`write_input`]): a PTY session runs on a
//!   pseudo-terminal that is its controlling terminal, through the same spawn path; input to a
//!   stdin pipe or a terminal is written with a deadline, never a blocking `write`.
//!
//! # Identity: a reused pid is never signalled
//!
//! Individual processes are signalled through pidfds ([`PidFd`]): the pidfd is opened first, then
//! the process's identity (pid + start time, captured when it was seen as a member of the
//! session) is re-checked, then the pidfd is confirmed not to have exited. If all three hold, the
//! pidfd names the process that was seen — a recycled pid fails the start-time check. Process-group
//! signals are only sent while the root is unreaped (its pid, hence the pgid, cannot be recycled
//! until then).
//!
//! # Reaping without stealing
//!
//! There is no `waitpid(-1)` in this process (only in a session's keeper, which reaps its own
//! session). The root is reaped through its pidfd; other zombies are reaped only when they are
//! children of this process (reparented to the subreaper) *and* known to belong to the session
//! (seen in its cgroup, process group or marker scan).
//!
//! # The session keeper
//!
//! With a keeper configured ([`ContainmentConfig::keeper`], Linux), the spawned root is a
//! session keeper (`keeper.rs`: the tiny static executable embedded in this crate on x86_64,
//! [`KeeperExe::Embedded`], else a program entered through [`run_if_keeper`]): a child
//! subreaper that runs the command as its child and stays until every process of the session is
//! gone, so orphans of the session land on it, never on this process. The command's end and
//! exit status come from the keeper's status pipe ([`ProcessTree::wait_command`]); the keeper
//! is reaped as the root.

#![deny(missing_docs)]

mod bulk;
mod cgroup;
mod clone3;
mod containment;
pub mod fd_budget;
mod input;
mod keeper;
mod limits;
mod marker;
pub mod namespaces;
mod ns_mount;
mod pidfd;
pub mod pty;
mod reaper;
pub mod sandbox;
mod scan;
mod spawn;
mod terminate;
mod tree;

pub use bulk::{TerminateBatch, terminate_many, terminate_one};
pub use clone3::status as spawn_method;
pub use containment::instance_cgroup_pid;
pub use containment::{CgroupMode, Containment, ContainmentConfig, ContainmentInfo, KeeperExe};
pub use input::write_input_async;
pub use input::{DEFAULT_INPUT_TIMEOUT, InputError, write_input};
pub use keeper::{EMBEDDED_KEEPER, KEEPER_FLAG, run_if_keeper};
pub use limits::{LimitGroup, availability as limit_capabilities};
pub use marker::SessionMarker;
pub use pidfd::{PidFd, PidFdError, RootExit};
pub use pty::{PtyError, try_clone_master};
pub use reaper::reap_zombie_children;
pub use sandbox::{SandboxError, SandboxSpec};
pub use scan::{ProcessCensus, censuses_taken};
pub use spawn::{SpawnError, SpawnSpec, SpawnedTree, StdioSpec, spawn, spawn_pty};
pub use stockade_proto::Signal;
pub use terminate::TerminateOptions;
pub use tree::{AdoptSpec, ProcessTree};

/// Name of the environment variable that marks every process of a session.
pub(crate) const MARKER_ENV: &str = "STOCKADE_SESSION";
