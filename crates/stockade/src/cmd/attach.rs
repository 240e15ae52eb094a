//! `stockade attach`: this terminal ↔ a PTY session, until Ctrl-] (detach) or the session ends.
//!
//! Three threads and one loop. The *output* thread long-polls `read` (exact bytes) from the
//! session's cursor and writes them to stdout; the *input* thread reads stdin and sends it with
//! `write`, stopping at the detach key; the *signal* thread `sigwait`s for `SIGWINCH` (the size
//! is forwarded with `resize`) and for `SIGTERM`/`SIGHUP`/`SIGINT`/`SIGQUIT` (which end the
//! attach). The main loop takes their events and decides when to stop.
//!
//! The local terminal is in raw mode only while a [`RawMode`] guard lives: it is restored when
//! the guard drops, on every way out — detach, the session's end, an error (`?`), a signal (they
//! are blocked and waited for, never run as handlers, so the loop returns normally) and a panic
//! (unwinding drops the guard).

use std::io::Write;
use std::os::fd::RawFd;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};

use anyhow::{Context, bail};
use clap::Args;
use stockade_client::{Client, ConnectOptions, raw_bytes};
use stockade_proto::rpc::{
    NoParams, PtySize, ReadParams, Render, ResizeParams, WriteParams, encode_bytes, method,
};
use stockade_proto::{ReadMode, SessionState};

use super::Global;

/// The detach key: Ctrl-] (as telnet and `docker attach` use).
pub const DETACH_KEY: u8 = 0x1d;
/// How long one output long poll waits for new bytes.
const POLL_WAIT_MS: u64 = 500;
/// How often the input thread looks at the stop flag while stdin is quiet.
const INPUT_POLL_MS: i32 = 100;
/// Most bytes of one raw read.
const READ_CHUNK: usize = 256 * 1024;

/// `stockade attach`.
#[derive(Debug, Args)]
pub struct AttachArgs {
    /// The session id (`sh-3`) of a session started with `--pty`.
    pub id: String,
}

/// Why the attach ended.
#[derive(Debug)]
enum Event {
    Detach,
    Ended(SessionState),
    InputClosed,
    Signal(i32),
    Failed(String),
}

pub fn attach(global: &Global, args: AttachArgs) -> anyhow::Result<ExitCode> {
    let id = args.id;
    // SAFETY: isatty(3) on a descriptor number; no memory involved.
    if unsafe { libc::isatty(libc::STDIN_FILENO) } != 1 {
        bail!(
            "attach needs a terminal, and stdin is not one; to type into {id} from a script use `stockade send {id} 'text\\n'`, and `stockade logs -f {id}` to follow it"
        );
    }
    let opts = global.connect_options()?;
    let mut control = Client::connect(&opts)?;
    let list = control.call::<method::List>(NoParams {})?;
    let Some(info) = list.sessions.into_iter().find(|s| s.id == id) else {
        bail!("no session {id}; `stockade ps` lists the sessions");
    };
    if info.state.is_terminal() {
        bail!("{id} has ended ({}); `stockade logs {id}` shows its output", info.state.name());
    }
    if !info.pty {
        bail!(
            "{id} does not run on a terminal; start programs to attach to with `stockade run --pty --bg …`, or type into {id} with `stockade send`"
        );
    }
    if let Some(size) = terminal_size(libc::STDIN_FILENO) {
        resize(&mut control, &id, size)?;
    }
    // What the screen shows now, then everything from there on.
    let screen = control.call::<method::Read>(ReadParams {
        id: id.clone(),
        render: Some(Render::Screen),
        ..ReadParams::default()
    })?;
    let cursor = screen.view.next_cursor;
    eprint!(
        "Attached to {id} ({}). Detach with Ctrl-]; the session keeps running.\r\n",
        info.command
    );

    let signals = BlockedSignals::block()?;
    let raw = RawMode::enter(libc::STDIN_FILENO)?;
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(screen.view.output.replace('\n', "\r\n").as_bytes())?;
    stdout.flush()?;
    drop(stdout);

    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::channel();
    let output = spawn_output(&opts, &id, cursor, &stop, tx.clone())?;
    let input = spawn_input(&opts, &id, &stop, tx.clone())?;
    signals.spawn_waiter(tx)?;

    let ending = loop {
        match rx.recv() {
            Ok(Event::Signal(libc::SIGWINCH)) => {
                if let Some(size) = terminal_size(libc::STDIN_FILENO)
                    && let Err(e) = resize(&mut control, &id, size)
                {
                    break Event::Failed(format!("{e:#}"));
                }
            }
            Ok(event) => break event,
            Err(_) => break Event::Failed("the attach threads stopped".into()),
        }
    };
    stop.store(true, Ordering::SeqCst);
    let _ = input.join();
    let _ = output.join();
    drop(raw); // the terminal is itself again before anything more is printed
    let code = match ending {
        Event::Detach => {
            eprintln!(
                "\nDetached from {id}; it keeps running (`stockade attach {id}` to come back)."
            );
            0
        }
        Event::Ended(state) => {
            eprintln!("\n{id} has ended ({}).", describe(&state));
            stockade_core::answer::exit_status(&state).clamp(0, 255) as u8
        }
        Event::InputClosed => {
            eprintln!("\nstdin closed; detached from {id}, which keeps running.");
            0
        }
        Event::Signal(n) => {
            eprintln!("\nsignal {n}; detached from {id}, which keeps running.");
            128u8.saturating_add(n.clamp(0, 127) as u8)
        }
        Event::Failed(message) => bail!("attach to {id} stopped: {message}"),
    };
    Ok(ExitCode::from(code))
}

fn describe(state: &SessionState) -> String {
    match state {
        SessionState::Exited { code } => format!("exited with code {code}"),
        SessionState::Signaled { signal } => format!("ended by signal {signal}"),
        SessionState::Killed { reason } => format!("killed: {reason}"),
        other => other.name().to_owned(),
    }
}

fn resize(client: &mut Client, id: &str, size: PtySize) -> anyhow::Result<()> {
    let params = ResizeParams { id: id.to_owned(), rows: size.rows, cols: size.cols };
    client.call::<method::Resize>(params)?;
    Ok(())
}

/// The output thread: exact bytes from `cursor` on, to stdout, until the session ends or `stop`.
fn spawn_output(
    opts: &ConnectOptions,
    id: &str,
    mut cursor: u64,
    stop: &Arc<AtomicBool>,
    tx: mpsc::Sender<Event>,
) -> anyhow::Result<std::thread::JoinHandle<()>> {
    let mut client = Client::connect(opts)?;
    let (id, stop) = (id.to_owned(), Arc::clone(stop));
    let mut run = move || -> anyhow::Result<Event> {
        let mut stdout = std::io::stdout();
        while !stop.load(Ordering::SeqCst) {
            let r = client.call::<method::Read>(ReadParams {
                id: id.clone(),
                after: Some(cursor),
                mode: Some(ReadMode::Delta),
                max_bytes: Some(READ_CHUNK),
                wait_ms: Some(POLL_WAIT_MS),
                raw: true,
                ..ReadParams::default()
            })?;
            let bytes = raw_bytes(&r)?.unwrap_or_default();
            if !bytes.is_empty() && !stop.load(Ordering::SeqCst) {
                stdout.write_all(&bytes)?;
                stdout.flush()?;
            }
            cursor = r.view.next_cursor.max(cursor);
            if r.state.is_terminal() && cursor >= r.view.total_bytes {
                return Ok(Event::Ended(r.state));
            }
        }
        Ok(Event::Detach)
    };
    std::thread::Builder::new()
        .name("attach-output".into())
        .spawn(move || {
            let event = run().unwrap_or_else(|e| Event::Failed(format!("{e:#}")));
            let _ = tx.send(event);
        })
        .context("cannot start the output thread")
}

/// The input thread: stdin to the session, until the detach key, end of input or `stop`.
fn spawn_input(
    opts: &ConnectOptions,
    id: &str,
    stop: &Arc<AtomicBool>,
    tx: mpsc::Sender<Event>,
) -> anyhow::Result<std::thread::JoinHandle<()>> {
    let mut client = Client::connect(opts)?;
    let (id, stop) = (id.to_owned(), Arc::clone(stop));
    let mut run = move || -> anyhow::Result<Option<Event>> {
        let mut buf = [0u8; 4096];
        while !stop.load(Ordering::SeqCst) {
            if !readable(libc::STDIN_FILENO, INPUT_POLL_MS)? {
                continue;
            }
            // SAFETY: read(2) into a stack buffer of the length given.
            let n = unsafe { libc::read(libc::STDIN_FILENO, buf.as_mut_ptr().cast(), buf.len()) };
            if n < 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e).context("cannot read the terminal");
            }
            if n == 0 {
                return Ok(Some(Event::InputClosed));
            }
            let (forward, detach) = split_at_detach(&buf[..n as usize]);
            if !forward.is_empty() {
                let params = WriteParams {
                    id: id.clone(),
                    bytes_b64: Some(encode_bytes(forward)),
                    yield_ms: Some(0),
                    max_bytes: Some(1),
                    ..WriteParams::default()
                };
                client.call::<method::Write>(params)?;
            }
            if detach {
                return Ok(Some(Event::Detach));
            }
        }
        Ok(None)
    };
    std::thread::Builder::new()
        .name("attach-input".into())
        .spawn(move || match run() {
            Ok(Some(event)) => {
                let _ = tx.send(event);
            }
            Ok(None) => {}
            Err(e) => {
                let _ = tx.send(Event::Failed(format!("{e:#}")));
            }
        })
        .context("cannot start the input thread")
}

/// The bytes to send before the detach key, and whether the key was typed.
pub fn split_at_detach(chunk: &[u8]) -> (&[u8], bool) {
    match chunk.iter().position(|&b| b == DETACH_KEY) {
        Some(at) => (&chunk[..at], true),
        None => (chunk, false),
    }
}

/// Whether `fd` has input within `timeout_ms`.
fn readable(fd: RawFd, timeout_ms: i32) -> anyhow::Result<bool> {
    let mut pfd = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    // SAFETY: poll(2) on one initialised pollfd.
    let n = unsafe { libc::poll(&mut pfd, 1, timeout_ms) };
    if n < 0 {
        let e = std::io::Error::last_os_error();
        if e.kind() == std::io::ErrorKind::Interrupted {
            return Ok(false);
        }
        return Err(e).context("cannot poll the terminal");
    }
    Ok(n > 0)
}

/// The size of the terminal on `fd`, if it is one with a size.
fn terminal_size(fd: RawFd) -> Option<PtySize> {
    // SAFETY: TIOCGWINSZ fills a winsize we own.
    let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let ok = unsafe { libc::ioctl(fd, libc::TIOCGWINSZ, &mut ws) } == 0;
    (ok && ws.ws_row > 0 && ws.ws_col > 0).then_some(PtySize { rows: ws.ws_row, cols: ws.ws_col })
}

/// The terminal on `fd` in raw mode (no echo, no line editing, no signals from keys, bytes as
/// typed) for as long as this lives; the saved mode is put back on drop.
pub struct RawMode {
    fd: RawFd,
    saved: libc::termios,
}

impl RawMode {
    /// Save the mode of the terminal on `fd` and make it raw.
    pub fn enter(fd: RawFd) -> anyhow::Result<RawMode> {
        // SAFETY: tcgetattr(3) fills a termios we own.
        let mut saved: libc::termios = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        if unsafe { libc::tcgetattr(fd, &mut saved) } != 0 {
            return Err(std::io::Error::last_os_error()).context("cannot read the terminal mode");
        }
        let mut raw = saved;
        // SAFETY: cfmakeraw(3) edits the copy in place.
        unsafe { libc::cfmakeraw(&mut raw) };
        // SAFETY: tcsetattr(3) with an initialised termios.
        if unsafe { libc::tcsetattr(fd, libc::TCSANOW, &raw) } != 0 {
            return Err(std::io::Error::last_os_error()).context("cannot make the terminal raw");
        }
        Ok(RawMode { fd, saved })
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        // SAFETY: tcsetattr(3) with the termios saved at entry.
        unsafe { libc::tcsetattr(self.fd, libc::TCSANOW, &self.saved) };
    }
}

/// The signals attach handles, blocked in every thread (the mask is inherited by threads started
/// after it is set) so that only the waiter thread receives them, as events.
struct BlockedSignals {
    set: libc::sigset_t,
}

const HANDLED: [i32; 5] =
    [libc::SIGWINCH, libc::SIGTERM, libc::SIGHUP, libc::SIGINT, libc::SIGQUIT];

impl BlockedSignals {
    fn block() -> anyhow::Result<BlockedSignals> {
        // SAFETY: signal-set manipulation on a set we own; pthread_sigmask on this thread.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            for s in HANDLED {
                libc::sigaddset(&mut set, s);
            }
            let rc = libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
            if rc != 0 {
                return Err(std::io::Error::from_raw_os_error(rc)).context("cannot block signals");
            }
            Ok(BlockedSignals { set })
        }
    }

    /// A thread that waits for the blocked signals and sends each as an event.
    fn spawn_waiter(self, tx: mpsc::Sender<Event>) -> anyhow::Result<()> {
        std::thread::Builder::new()
            .name("attach-signals".into())
            .spawn(move || {
                loop {
                    let mut sig = 0;
                    // SAFETY: sigwait(3) on the set blocked above.
                    let rc = unsafe { libc::sigwait(&self.set, &mut sig) };
                    if rc != 0 || tx.send(Event::Signal(sig)).is_err() {
                        return;
                    }
                }
            })
            .context("cannot start the signal thread")?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_detach_key_ends_the_input_and_is_never_sent() {
        assert_eq!(split_at_detach(b"ls\r"), (&b"ls\r"[..], false));
        assert_eq!(split_at_detach(b"ab\x1dcd"), (&b"ab"[..], true));
        assert_eq!(split_at_detach(b"\x1d"), (&b""[..], true));
        assert_eq!(split_at_detach(b"\x03\x04"), (&b"\x03\x04"[..], false));
    }

    #[test]
    fn raw_mode_is_restored_when_the_guard_drops() {
        let pair = open_pty();
        let before = mode(pair.1);
        assert_ne!(before.c_lflag & libc::ICANON, 0, "a new terminal is canonical");
        {
            let _raw = RawMode::enter(pair.1).unwrap();
            let during = mode(pair.1);
            assert_eq!(during.c_lflag & (libc::ICANON | libc::ECHO | libc::ISIG), 0);
        }
        let after = mode(pair.1);
        assert_eq!(after.c_lflag, before.c_lflag);
        assert_eq!(after.c_iflag, before.c_iflag);
        assert_eq!(after.c_oflag, before.c_oflag);
        // Also when the scope is left by a panic.
        let fd = pair.1;
        let unwound = std::panic::catch_unwind(|| {
            let _raw = RawMode::enter(fd).unwrap();
            panic!("boom");
        });
        assert!(unwound.is_err());
        assert_eq!(mode(pair.1).c_lflag, before.c_lflag);
        // SAFETY: closing the descriptors this test opened.
        unsafe {
            libc::close(pair.0);
            libc::close(pair.1);
        }
    }

    fn mode(fd: RawFd) -> libc::termios {
        // SAFETY: tcgetattr into a termios we own.
        let mut t: libc::termios = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        assert_eq!(unsafe { libc::tcgetattr(fd, &mut t) }, 0);
        t
    }

    fn open_pty() -> (RawFd, RawFd) {
        let (mut master, mut slave) = (0, 0);
        // SAFETY: openpty(3) fills two descriptors; names and modes are not asked for.
        let rc = unsafe {
            libc::openpty(
                &mut master,
                &mut slave,
                std::ptr::null_mut(),
                std::ptr::null(),
                std::ptr::null(),
            )
        };
        assert_eq!(rc, 0);
        (master, slave)
    }
}
