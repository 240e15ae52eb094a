//! Signals by name and number: what `kill` may send and how an ended session's signal is named.
//! The numbers are the host's (from `libc`); the names are the conventional `SIG…` ones.

use std::fmt;
use std::str::FromStr;

/// One of the host's standard signals (real-time signals are not named here).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Signal(i32);

/// Every standard signal, by number and name.
const TABLE: [(i32, &str); 31] = [
    (libc::SIGHUP, "SIGHUP"),
    (libc::SIGINT, "SIGINT"),
    (libc::SIGQUIT, "SIGQUIT"),
    (libc::SIGILL, "SIGILL"),
    (libc::SIGTRAP, "SIGTRAP"),
    (libc::SIGABRT, "SIGABRT"),
    (libc::SIGBUS, "SIGBUS"),
    (libc::SIGFPE, "SIGFPE"),
    (libc::SIGKILL, "SIGKILL"),
    (libc::SIGUSR1, "SIGUSR1"),
    (libc::SIGSEGV, "SIGSEGV"),
    (libc::SIGUSR2, "SIGUSR2"),
    (libc::SIGPIPE, "SIGPIPE"),
    (libc::SIGALRM, "SIGALRM"),
    (libc::SIGTERM, "SIGTERM"),
    (libc::SIGSTKFLT, "SIGSTKFLT"),
    (libc::SIGCHLD, "SIGCHLD"),
    (libc::SIGCONT, "SIGCONT"),
    (libc::SIGSTOP, "SIGSTOP"),
    (libc::SIGTSTP, "SIGTSTP"),
    (libc::SIGTTIN, "SIGTTIN"),
    (libc::SIGTTOU, "SIGTTOU"),
    (libc::SIGURG, "SIGURG"),
    (libc::SIGXCPU, "SIGXCPU"),
    (libc::SIGXFSZ, "SIGXFSZ"),
    (libc::SIGVTALRM, "SIGVTALRM"),
    (libc::SIGPROF, "SIGPROF"),
    (libc::SIGWINCH, "SIGWINCH"),
    (libc::SIGIO, "SIGIO"),
    (libc::SIGPWR, "SIGPWR"),
    (libc::SIGSYS, "SIGSYS"),
];

impl Signal {
    /// Hang-up.
    pub const SIGHUP: Signal = Signal(libc::SIGHUP);
    /// Interrupt (Ctrl-C).
    pub const SIGINT: Signal = Signal(libc::SIGINT);
    /// Kill (cannot be caught).
    pub const SIGKILL: Signal = Signal(libc::SIGKILL);
    /// Terminate (the polite default).
    pub const SIGTERM: Signal = Signal(libc::SIGTERM);
    /// Continue a stopped process.
    pub const SIGCONT: Signal = Signal(libc::SIGCONT);
    /// Stop (cannot be caught).
    pub const SIGSTOP: Signal = Signal(libc::SIGSTOP);

    /// The signal's number on this host.
    pub fn number(self) -> i32 {
        self.0
    }

    /// Its `SIG…` name.
    pub fn as_str(self) -> &'static str {
        TABLE.iter().find(|(n, _)| *n == self.0).map_or("SIGUNKNOWN", |(_, name)| name)
    }

    /// `SIGTERM`-style name of a signal number, or `signal N` for one without a name.
    pub fn name_of(number: i32) -> String {
        Signal::try_from(number).map_or_else(|_| format!("signal {number}"), |s| s.as_str().into())
    }
}

impl fmt::Display for Signal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A number or name that is not a standard signal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownSignal;

impl fmt::Display for UnknownSignal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("not a standard signal")
    }
}

impl std::error::Error for UnknownSignal {}

impl TryFrom<i32> for Signal {
    type Error = UnknownSignal;

    fn try_from(number: i32) -> Result<Signal, UnknownSignal> {
        TABLE.iter().find(|(n, _)| *n == number).map(|(n, _)| Signal(*n)).ok_or(UnknownSignal)
    }
}

impl FromStr for Signal {
    type Err = UnknownSignal;

    /// The exact `SIG…` name (`SIGTERM`).
    fn from_str(name: &str) -> Result<Signal, UnknownSignal> {
        TABLE.iter().find(|(_, n)| *n == name).map(|(n, _)| Signal(*n)).ok_or(UnknownSignal)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn names_and_numbers_round_trip() {
        for (n, name) in TABLE {
            let s = Signal::try_from(n).unwrap();
            assert_eq!(s.as_str(), name);
            assert_eq!(name.parse::<Signal>().unwrap(), s);
            assert_eq!(s.number(), n);
        }
        assert_eq!(Signal::name_of(15), "SIGTERM");
        assert_eq!(Signal::name_of(64), "signal 64");
        assert!(Signal::try_from(0).is_err());
        assert!("TERM".parse::<Signal>().is_err());
    }
}
