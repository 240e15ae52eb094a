//! Starting the daemon on demand, like sccache or gpg-agent: spawn `stockade --home H daemon run`
//! detached (its own session, stdin `/dev/null`, stdout/stderr appended to `daemon.log`), then
//! wait, bounded, until the socket accepts.
//!
//! Two clients may race to start it. That is fine: the daemon that does not get the lock on
//! `daemon.lock` exits, and both clients connect to the one that did.

use std::fs::{DirBuilder, OpenOptions};
use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::{ClientError, ConnectOptions, daemon_pid, log_path};

/// How often the socket is tried while the daemon starts.
const POLL_INTERVAL: Duration = Duration::from_millis(20);
/// After our daemon exited (it may have lost the race), how long to keep trying the socket when
/// no live daemon holds the lock.
const LOSER_GRACE: Duration = Duration::from_millis(500);

/// Spawn the daemon and wait until its socket accepts a connection.
pub(crate) fn start_and_connect(
    opts: &ConnectOptions,
    socket: &Path,
) -> Result<UnixStream, ClientError> {
    let log = log_path(&opts.home);
    let fail = |reason: String| ClientError::AutostartFailed { reason, log: log.clone() };

    DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&opts.home)
        .map_err(|e| fail(format!("cannot create {}: {e}", opts.home.display())))?;
    let mut log_file = OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&log)
        .map_err(|e| fail(format!("cannot open the log: {e}")))?;
    let program = match &opts.daemon_program {
        Some(p) => p.clone(),
        None => std::env::current_exe()
            .map_err(|e| fail(format!("cannot find the stockade executable: {e}")))?,
    };
    let _ = writeln!(
        log_file,
        "stockade client (pid {}): starting `{} --home {} daemon run`",
        std::process::id(),
        program.display(),
        opts.home.display()
    );
    let stderr = log_file.try_clone().map_err(|e| fail(format!("cannot open the log: {e}")))?;

    let mut command = Command::new(&program);
    command.arg("--home").arg(&opts.home).arg("daemon").arg("run");
    if let Some(s) = &opts.socket {
        command.arg("--socket").arg(s);
    }
    command
        .stdin(Stdio::null())
        .stdout(Stdio::from(log_file))
        .stderr(Stdio::from(stderr))
        .env_remove("STOCKADE_NO_AUTOSTART");
    // SAFETY: the closure runs between fork and exec and only makes the setsid system call,
    // which is async-signal-safe. Its own session detaches the daemon from our terminal and
    // process group, so a Ctrl-C aimed at this client does not reach it.
    unsafe {
        command.pre_exec(|| {
            rustix::process::setsid().map_err(std::io::Error::from)?;
            Ok(())
        });
    }
    let mut child =
        command.spawn().map_err(|e| fail(format!("cannot run {}: {e}", program.display())))?;

    let deadline = Instant::now() + opts.start_timeout;
    let mut exited: Option<(ExitStatus, Instant)> = None;
    loop {
        match UnixStream::connect(socket) {
            Ok(stream) => {
                if exited.is_none() {
                    reap_in_background(child);
                }
                return Ok(stream);
            }
            Err(e) if !crate::is_not_listening(&e) => {
                return Err(ClientError::Connect { socket: socket.to_path_buf(), source: e });
            }
            Err(_) => {}
        }
        if exited.is_none()
            && let Ok(Some(status)) = child.try_wait()
        {
            exited = Some((status, Instant::now()));
        }
        let now = Instant::now();
        if let Some((status, at)) = exited {
            // Our daemon is gone. If it lost the race, another one holds the lock and will
            // listen soon; otherwise it failed, and waiting longer will not help.
            let other_alive = daemon_pid(&opts.home).is_some_and(crate::pid_alive);
            if !other_alive && now.duration_since(at) >= LOSER_GRACE {
                return Err(fail(format!("the daemon exited ({status}) before it listened")));
            }
        }
        if now >= deadline {
            return Err(fail(format!(
                "the daemon did not listen on {} within {} ms",
                socket.display(),
                opts.start_timeout.as_millis()
            )));
        }
        std::thread::sleep(POLL_INTERVAL);
    }
}

/// Reap the daemon when it eventually exits, so a long-lived client process (an MCP server, a
/// bench harness) never keeps a zombie. A short-lived CLI exits first and the daemon is
/// reparented, which is fine too.
fn reap_in_background(mut child: std::process::Child) {
    let spawned =
        std::thread::Builder::new().name("stockade-daemon-reaper".into()).spawn(move || {
            let _ = child.wait();
        });
    if spawned.is_err() {
        tracing::debug!("could not start the reaper thread; the daemon is reaped at our exit");
    }
}
