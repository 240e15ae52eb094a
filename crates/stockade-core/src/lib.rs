//! Stockade's engine: run shell commands for an agent, keep every byte they print, show a
//! bounded view of it, and make sure nothing they started outlives the moment they are stopped.
//!
//! # The model
//!
//! **spawn → session → output log → terminate.**
//!
//! * [`process`] spawns each command in its own session and process group, with an environment
//!   marker its descendants inherit, inside the strongest containment available (a cgroup v2 per
//!   session on Linux, else process group + child subreaper + a `/proc` marker scan). It owns the
//!   one routine that terminates a tree and *verifies* it is gone.
//! * [`output`] owns a session's output log: the spool file on disk holds every byte in arrival
//!   order; a fixed-size hot tail holds the newest bytes in memory; a cursor is a byte offset into
//!   the log. Memory is O(retained cap) per session, never O(bytes printed). It also renders the
//!   bounded, honest view a model sees (head/tail/middle, UTF-8-safe cuts, the facts of what was
//!   left out) and greps the full spool with bounded memory. [`limits`] is the one bound on a
//!   view, whichever door asked; `Session::view` shapes it for a session (terminal text).
//! * [`session`] ties one process tree to one output log and a state machine whose terminal
//!   states never change; [`Engine`] owns all sessions of one instance.
//!
//! The engine knows nothing of sockets, MCP or the CLI: those doors translate to and from the
//! types in `stockade-proto`.

pub mod output;
pub mod process;

pub mod answer;
mod engine;
pub mod input;
pub mod limits;
mod recovery;
pub mod registry;
mod retention;
mod run_spec;
pub mod session;
pub mod state_dir;
mod view;

pub use engine::{
    Engine, EngineConfig, EngineError, EngineLimits, EngineStats, Forgotten, Started,
};
pub use input::{InputKind, InputRefused};
pub use recovery::{RecoveredSession, RecoveryError, RecoveryReport};
pub use retention::{DEFAULT_RETENTION, SweepReport};
pub use run_spec::RunSpec;
pub use session::{Session, SessionEnd, SessionRecord};
pub use state_dir::{StateDir, StateDirError};
pub use view::ReadPlan;
