//! Starting the daemon on demand, like sccache or gpg-agent: spawn `stockade --home H daemon run`
//! detached (its own session, stdin `/dev/null`, stdout/stderr appended to `daemon.log`), then
//! wait, bounded, until the socket accepts.
//!
//! Detached means nobody's descendant: the daemon is started through a double fork, so its parent
//! is init (or the nearest subreaper), never this client. An agent that ends its MCP server by
//! signalling the server's whole process tree (opencode does) therefore never reaches the daemon
//! and the sessions it runs. The intermediate process hands the daemon's pid back through a pipe
//! and exits at once; the client then watches that pid (a zombie counts as dead, so a daemon that
//! died before it listened is noticed even where init never reaps).
//!
//! Two clients may race to start it. That is fine: the daemon that does not get the lock on
//! `daemon.lock` exits, and both clients connect to the one that did.

use std::fs::{DirBuilder, File, OpenOptions};
use std::io::{Read as _, Write as _};
use std::os::fd::AsRawFd as _;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
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
    let log_file = prepare(opts, &log)?;
    let program = match &opts.daemon_program {
        Some(p) => p.clone(),
        None => std::env::current_exe()
            .map_err(|e| fail(format!("cannot find the stockade executable: {e}")))?,
    };
    let daemon = spawn_detached(opts, &program, log_file, &log)?;
    wait_for_socket(opts, socket, daemon, &log)
}

/// Make the state directory (0700, ours) and open the daemon's log (0600, appended, never
/// through a symlink).
fn prepare(opts: &ConnectOptions, log: &Path) -> Result<File, ClientError> {
    let unprepared = |reason: String| ClientError::AutostartUnprepared { reason };
    DirBuilder::new().recursive(true).mode(0o700).create(&opts.home).map_err(|e| {
        unprepared(format!("cannot create the state directory {}: {e}", opts.home.display()))
    })?;
    crate::peer::check_home(&opts.home)?;
    OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(log)
        .map_err(|e| unprepared(format!("cannot open its log {}: {e}", log.display())))
}

/// Run `program --home H daemon run` through a double fork, its output appended to `log_file`;
/// the daemon's pid.
fn spawn_detached(
    opts: &ConnectOptions,
    program: &Path,
    mut log_file: File,
    log: &Path,
) -> Result<u32, ClientError> {
    let fail = |reason: String| ClientError::AutostartFailed { reason, log: log.to_path_buf() };
    let _ = writeln!(
        log_file,
        "stockade client (pid {}): starting `{} --home {} daemon run`",
        std::process::id(),
        program.display(),
        opts.home.display()
    );
    let stderr = log_file.try_clone().map_err(|e| ClientError::AutostartUnprepared {
        reason: format!("cannot open its log {}: {e}", log.display()),
    })?;

    let mut command = Command::new(program);
    command.arg("--home").arg(&opts.home).arg("daemon").arg("run");
    if let Some(s) = &opts.socket {
        command.arg("--socket").arg(s);
    }
    command
        .stdin(Stdio::null())
        .stdout(Stdio::from(log_file))
        .stderr(Stdio::from(stderr))
        .env_remove("STOCKADE_NO_AUTOSTART");
    let (pid_read, pid_write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
        .map_err(|e| fail(format!("cannot make a pipe: {}", std::io::Error::from(e))))?;
    let pid_fd = pid_write.as_raw_fd();
    // SAFETY: the closure runs between fork and exec and only makes async-signal-safe calls
    // (setsid, fork, write, _exit) on integers and a stack buffer. Its own session detaches the
    // daemon from our terminal and process group (a Ctrl-C aimed at this client does not reach
    // it); the second fork makes it nobody's descendant: the intermediate writes the daemon's pid
    // and exits, and the daemon (the second child) goes on to exec.
    unsafe {
        command.pre_exec(move || {
            rustix::process::setsid().map_err(std::io::Error::from)?;
            match libc::fork() {
                -1 => Err(std::io::Error::last_os_error()),
                0 => Ok(()),
                pid => {
                    let bytes = pid.to_ne_bytes();
                    libc::write(pid_fd, bytes.as_ptr().cast(), bytes.len());
                    libc::_exit(0)
                }
            }
        });
    }
    let spawned = command.spawn();
    // Our copy of the write end must go, or the read below would wait for ever.
    drop(pid_write);
    let mut intermediate =
        spawned.map_err(|e| fail(format!("cannot run {}: {e}", program.display())))?;
    // The intermediate exits as soon as it has forked: reap it now, so no zombie is left.
    let _ = intermediate.wait();
    let mut raw = [0u8; 4];
    File::from(pid_read)
        .read_exact(&mut raw)
        .map_err(|e| fail(format!("cannot detach the daemon: {e}")))?;
    u32::try_from(i32::from_ne_bytes(raw))
        .map_err(|_| fail("cannot detach the daemon: the fork reported no pid".to_owned()))
}

/// Try the socket until it accepts, the start timeout passes, or the daemon we started is gone
/// with no other daemon holding the lock.
fn wait_for_socket(
    opts: &ConnectOptions,
    socket: &Path,
    daemon: u32,
    log: &Path,
) -> Result<UnixStream, ClientError> {
    let fail = |reason: String| ClientError::AutostartFailed { reason, log: log.to_path_buf() };
    let daemon_started = stockade_procfs::start_time(daemon);
    let deadline = Instant::now() + opts.start_timeout;
    let mut exited: Option<Instant> = None;
    loop {
        match UnixStream::connect(socket) {
            Ok(stream) => return Ok(stream),
            Err(e) if !crate::is_not_listening(&e) => {
                return Err(ClientError::Connect { socket: socket.to_path_buf(), source: e });
            }
            Err(_) => {}
        }
        if exited.is_none() && !stockade_procfs::liveness(daemon, daemon_started).is_alive() {
            exited = Some(Instant::now());
        }
        let now = Instant::now();
        if let Some(at) = exited {
            // Our daemon is gone. If it lost the race, another one holds the lock and will
            // listen soon; otherwise it failed, and waiting longer will not help.
            let other_alive = daemon_pid(&opts.home).is_some_and(crate::pid_alive);
            if !other_alive && now.duration_since(at) >= LOSER_GRACE {
                return Err(fail(format!("the daemon (pid {daemon}) exited before it listened")));
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
