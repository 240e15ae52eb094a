//! The names of the daemon's files in a state directory (`$STOCKADE_HOME`), which the daemon
//! creates and its clients look for: one spelling for both sides.

/// The daemon's Unix socket.
pub const SOCKET_FILE: &str = "stockade.sock";
/// The daemon's lock file (an exclusive `flock` for its life, with its pid inside).
pub const LOCK_FILE: &str = "daemon.lock";
/// The log an auto-started daemon writes to.
pub const LOG_FILE: &str = "daemon.log";
