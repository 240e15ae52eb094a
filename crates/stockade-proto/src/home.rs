//! The names of the daemon's files in a state directory (`$STOCKADE_HOME`), which the daemon
//! creates and its clients look for: one spelling for both sides.

/// The daemon's Unix socket.
pub const SOCKET_FILE: &str = "stockade.sock";
/// The daemon's lock file (an exclusive `flock` for its life, with its pid inside).
pub const LOCK_FILE: &str = "daemon.lock";
/// The log an auto-started daemon writes to.
pub const LOG_FILE: &str = "daemon.log";

/// The daemon's heartbeat: while its runtime runs, the daemon stamps this file's modification
/// time every [`HEARTBEAT_EVERY_MS`]; it holds the daemon's pid. A client whose answer is late,
/// whose daemon's pid (from [`LOCK_FILE`]) is the one in this file and whose stamp is older than
/// [`HEARTBEAT_STALE_MS`] (the process neither stopped nor gone) calls the daemon hung.
pub const HEARTBEAT_FILE: &str = "daemon.beat";
/// How often the daemon stamps [`HEARTBEAT_FILE`].
pub const HEARTBEAT_EVERY_MS: u64 = 250;
/// How old the stamp may be before a client that waits for an answer calls the daemon hung.
pub const HEARTBEAT_STALE_MS: u64 = 1500;
