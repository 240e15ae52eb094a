//! A foreground `stockade run` on a terminal prints the output as it comes, as a shell would:
//! driven through a real pseudo-terminal, `a` is on the screen before `b` is printed; then the
//! summary. Piped, the bounded answer comes at the end (tested in `cli`).

use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use stockade_testkit::{Home, PATIENCE, text};

/// Kills the client (our own child, by pid) if the test fails before it exits.
struct Client(Child);

impl Drop for Client {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// A pty pair, both ends close-on-exec (other tests spawn children concurrently).
fn open_pty() -> (OwnedFd, OwnedFd) {
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
    (master, unsafe { OwnedFd::from_raw_fd(slave) })
}

#[test]
fn a_foreground_run_on_a_terminal_streams_a_before_b() {
    let home = Home::new();
    let (master, slave) = open_pty();
    let mut cmd = home.cmd(&["run", "echo a; sleep 1; echo b; exit 3"]);
    cmd.stdout(Stdio::from(slave.try_clone().unwrap()))
        .stderr(Stdio::from(slave.try_clone().unwrap()));
    let mut client = Client(cmd.spawn().unwrap());
    drop(cmd);
    drop(slave); // only the client holds the terminal: the master reads EIO when it exits

    let screen = Arc::new(Mutex::new(Vec::<u8>::new()));
    let reader = {
        let screen = Arc::clone(&screen);
        let mut master = std::fs::File::from(master);
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = master.read(&mut buf) {
                if n == 0 {
                    break;
                }
                screen.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        })
    };
    let shown = || text(&screen.lock().unwrap());

    // The first line is on the screen while the command is still sleeping: `b` is not.
    let deadline = Instant::now() + PATIENCE;
    loop {
        let now = shown();
        if now.contains("a\r\n") {
            assert!(!now.contains("b\r\n"), "a and b came together: {now:?}");
            assert!(!now.contains("Exit code"), "the summary came before the output: {now:?}");
            break;
        }
        assert!(Instant::now() < deadline, "no `a` on the terminal: {now:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(client.0.try_wait().unwrap(), None, "the run is still going when `a` shows");

    let deadline = Instant::now() + PATIENCE;
    let status = loop {
        if let Some(status) = client.0.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "the run did not end: {:?}", shown());
        std::thread::sleep(Duration::from_millis(20));
    };
    let _ = reader.join();
    assert_eq!(status.code(), Some(3));
    let all = shown();
    // The output once (not again in the summary), then the status and where all of it is kept.
    assert_eq!(all.matches("b\r\n").count(), 1, "{all:?}");
    let b = all.find("b\r\n").unwrap();
    let summary = &all[b..];
    assert!(summary.contains("Exit code: 3\r\nWall time: "), "{all:?}");
    assert!(
        summary.contains("[Full output: ") && summary.contains("Read it again: stockade read sh-"),
        "{all:?}"
    );
}
