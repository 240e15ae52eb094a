//! Driving a CLI client through a real pseudo-terminal (Linux): the pair ([`Pty`]), everything
//! the client writes to it ([`Screen`]) and the client itself, killed by pid if the test fails
//! before it exits ([`PtyClient`]).

use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::{Child, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::{PATIENCE, child, text};

/// A pseudo-terminal pair: the master is the test's side, the slave the client's terminal.
pub struct Pty {
    /// The test's side: read what the client shows, write what a user types.
    pub master: OwnedFd,
    /// The client's terminal.
    pub slave: OwnedFd,
}

impl Pty {
    /// A new pair, both ends close-on-exec from the start: other tests of the same binary spawn
    /// children (and daemons that outlive them) concurrently, and one that inherited the slave
    /// would keep the master from ever reading EIO. A client gets the slave through its stdio
    /// only ([`Pty::stdio`]).
    pub fn open() -> Pty {
        let flags = libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC;
        // SAFETY: open(2) of the pty multiplexer with a NUL-terminated path.
        let master = unsafe { libc::open(c"/dev/ptmx".as_ptr(), flags) };
        assert!(master >= 0, "open /dev/ptmx: {}", std::io::Error::last_os_error());
        // SAFETY: open just gave us this descriptor; nobody else owns it.
        let master = unsafe { OwnedFd::from_raw_fd(master) };
        let mut name = [0 as libc::c_char; 128];
        // SAFETY: grantpt, unlockpt and ptsname_r on the master we own, into a buffer of our size.
        unsafe {
            assert_eq!(libc::grantpt(master.as_raw_fd()), 0, "grantpt");
            assert_eq!(libc::unlockpt(master.as_raw_fd()), 0, "unlockpt");
            assert_eq!(libc::ptsname_r(master.as_raw_fd(), name.as_mut_ptr(), name.len()), 0);
        }
        // SAFETY: open(2) of the slave ptsname_r just named (NUL-terminated).
        let slave = unsafe { libc::open(name.as_ptr(), flags) };
        assert!(slave >= 0, "open the pty slave: {}", std::io::Error::last_os_error());
        // SAFETY: as above.
        Pty { master, slave: unsafe { OwnedFd::from_raw_fd(slave) } }
    }

    /// A new pair whose terminal is `rows` × `cols`.
    pub fn with_size(rows: u16, cols: u16) -> Pty {
        let pty = Pty::open();
        pty.set_size(rows, cols);
        pty
    }

    /// Resize the terminal (as a terminal window does: the client's foreground process group
    /// gets `SIGWINCH` when the terminal is its controlling one).
    pub fn set_size(&self, rows: u16, cols: u16) {
        let ws = libc::winsize { ws_row: rows, ws_col: cols, ws_xpixel: 0, ws_ypixel: 0 };
        // SAFETY: TIOCSWINSZ on our master with an initialised winsize.
        assert_eq!(unsafe { libc::ioctl(self.master.as_raw_fd(), libc::TIOCSWINSZ, &ws) }, 0);
    }

    /// The slave as one of a client's stdio streams.
    pub fn stdio(&self) -> Stdio {
        Stdio::from(self.slave.try_clone().unwrap())
    }

    /// The terminal's modes as the client sees them.
    pub fn termios(&self) -> libc::termios {
        // SAFETY: tcgetattr into a termios we own.
        let mut t: libc::termios = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        assert_eq!(unsafe { libc::tcgetattr(self.slave.as_raw_fd(), &mut t) }, 0);
        t
    }

    /// Waits until the client has put its terminal in raw mode (no `ICANON`).
    pub fn wait_raw(&self) {
        let deadline = Instant::now() + PATIENCE;
        while self.termios().c_lflag & libc::ICANON != 0 {
            assert!(Instant::now() < deadline, "the terminal never became raw");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Types `keys` as a user would.
    pub fn type_keys(&self, keys: &[u8]) {
        let mut master = std::fs::File::from(self.master.try_clone().unwrap());
        master.write_all(keys).unwrap();
    }

    /// Starts reading everything the client writes to its terminal.
    pub fn screen(&self) -> Screen {
        Screen::read(self.master.try_clone().unwrap())
    }
}

/// Everything written to a terminal, gathered by a thread that reads the master until it fails
/// (EIO once nobody holds the slave).
pub struct Screen {
    bytes: Arc<Mutex<Vec<u8>>>,
    reader: Option<JoinHandle<()>>,
}

impl Screen {
    /// Reads `master` on a thread of its own.
    pub fn read(master: OwnedFd) -> Screen {
        let bytes = Arc::new(Mutex::new(Vec::new()));
        let reader = {
            let bytes = Arc::clone(&bytes);
            let mut master = std::fs::File::from(master);
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(n) = master.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    bytes.lock().unwrap().extend_from_slice(&buf[..n]);
                }
            })
        };
        Screen { bytes, reader: Some(reader) }
    }

    /// What was shown so far, lossily decoded.
    pub fn text(&self) -> String {
        text(&self.bytes.lock().unwrap())
    }

    /// Waits until the screen shows `needle`; fails with what it shows after [`PATIENCE`].
    pub fn wait_for(&self, needle: &str) {
        let deadline = Instant::now() + PATIENCE;
        while !self.text().contains(needle) {
            assert!(Instant::now() < deadline, "no {needle:?} on the terminal: {:?}", self.text());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits for the reader to end (every copy of the slave must be closed first: the client
    /// gone, the test's [`Pty::slave`] dropped), then returns all that was shown.
    pub fn finish(mut self) -> String {
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
        self.text()
    }
}

/// A client on a terminal: our own child, killed by pid if the test fails before it exits.
pub struct PtyClient(pub Child);

impl PtyClient {
    /// Waits up to [`PATIENCE`] for the client to exit; on overrun kills it and fails, saying
    /// `what` and what `screen` shows.
    pub fn wait_exit(&mut self, screen: &Screen, what: &str) -> ExitStatus {
        child::wait_bounded(&mut self.0, PATIENCE)
            .unwrap_or_else(|| panic!("{what} did not end; killed: {:?}", screen.text()))
    }
}

impl Drop for PtyClient {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}
