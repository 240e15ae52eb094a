//! Child processes run with a bound: a test that hangs fails (killing its child by pid) instead
//! of hanging the suite.

use std::io::Read;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Bound on stopping a server or a daemon before it is killed.
pub const STOP_TIMEOUT: Duration = Duration::from_secs(15);

/// What a bounded run produced.
pub struct Finished {
    /// How it exited.
    pub status: ExitStatus,
    /// Its standard output, lossily decoded.
    pub stdout: String,
    /// Its standard error, lossily decoded.
    pub stderr: String,
}

impl Finished {
    /// Insists it succeeded, printing both outputs if not.
    pub fn assert_success(&self, what: &str) {
        assert!(
            self.status.success(),
            "{what} failed ({:?})\n--- stdout\n{}\n--- stderr\n{}",
            self.status,
            self.stdout,
            self.stderr
        );
    }
}

fn read_to_end_in_background(pipe: Option<impl Read + Send + 'static>) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    if let Some(mut pipe) = pipe {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = pipe.read_to_end(&mut buf);
            let _ = tx.send(String::from_utf8_lossy(&buf).into_owned());
        });
    }
    rx
}

/// Runs `cmd` to the end, killing it (and failing the test) after `timeout`.
pub fn run_bounded(cmd: &mut Command, timeout: Duration) -> Finished {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
    let out = read_to_end_in_background(child.stdout.take());
    let err = read_to_end_in_background(child.stderr.take());
    let status = wait_bounded(&mut child, timeout);
    let stdout = out.recv_timeout(STOP_TIMEOUT).unwrap_or_default();
    let stderr = err.recv_timeout(STOP_TIMEOUT).unwrap_or_default();
    match status {
        Some(status) => Finished { status, stdout, stderr },
        None => panic!(
            "{cmd:?} did not finish within {timeout:?}; killed\n--- stdout\n{stdout}\n--- stderr\n{stderr}"
        ),
    }
}

/// Waits for `child` up to `timeout`; on overrun kills it (SIGKILL, by its pid) and returns
/// `None`.
pub fn wait_bounded(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return Some(status);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A child stopped on drop, even when the test fails: `SIGTERM` by its pid, then `SIGKILL`
/// after [`STOP_TIMEOUT`], and reaped (a daemon or server the test started itself).
pub struct Reaped(pub Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        if self.0.try_wait().ok().flatten().is_none() {
            // SAFETY: kill(2) on our own child's pid (not yet reaped, so not reused).
            unsafe { libc::kill(self.0.id() as libc::pid_t, libc::SIGTERM) };
            if wait_bounded(&mut self.0, STOP_TIMEOUT).is_none() {
                let _ = self.0.kill();
                let _ = self.0.wait();
            }
        }
    }
}
