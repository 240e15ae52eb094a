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
use std::os::fd::BorrowedFd;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};

use anyhow::{Context, bail};
use clap::Args;
use nix::sys::signal::{SigSet, SigmaskHow, Signal, pthread_sigmask};
use rustix::event::{PollFd, PollFlags, Timespec, poll};
use rustix::io::Errno;
use rustix::stdio::stdin;
use rustix::termios::{OptionalActions, Termios, isatty, tcgetattr, tcgetwinsize, tcsetattr};
use stockade_client::{Client, ConnectOptions, raw_bytes};
use stockade_proto::rpc::{
    ListParams, PtySize, ReadParams, Render, ResizeParams, WriteParams, encode_bytes, method,
};
use stockade_proto::{ReadMode, SessionState};

use crate::global::Global;

/// The detach key: Ctrl-] (as telnet and `docker attach` use).
pub const DETACH_KEY: u8 = 0x1d;
/// How long one output long poll waits for new bytes.
const POLL_WAIT_MS: u64 = 500;
/// How often the input thread looks at the stop flag while stdin is quiet.
const INPUT_POLL: Timespec = Timespec { tv_sec: 0, tv_nsec: 100_000_000 };
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
    Signal(Signal),
    Failed(String),
}

pub fn attach(global: &Global, args: AttachArgs) -> anyhow::Result<ExitCode> {
    let id = args.id;
    if !isatty(stdin()) {
        bail!(
            "attach needs a terminal, and stdin is not one; to type into {id} from a script use `stockade send {id} 'text\\n'`, and `stockade logs -f {id}` to follow it"
        );
    }
    let opts = global.connect_options()?;
    let mut control = Client::connect(&opts)?;
    let list = control.call::<method::List>(ListParams::default())?;
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
    if let Some(size) = terminal_size(stdin()) {
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
    let raw = RawMode::enter(stdin())?;
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
            Ok(Event::Signal(Signal::SIGWINCH)) => {
                if let Some(size) = terminal_size(stdin())
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
            stockade_log::answer::exit_status(&state).clamp(0, 255) as u8
        }
        Event::InputClosed => {
            eprintln!("\nstdin closed; detached from {id}, which keeps running.");
            0
        }
        Event::Signal(sig) => {
            let n = sig as i32;
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

/// How long attach keeps trying to reconnect after losing the daemon.
const RECONNECT_PATIENCE: std::time::Duration = std::time::Duration::from_secs(60);

/// The output thread: exact bytes from `cursor` on, to stdout, until the session ends or `stop`.
fn spawn_output(
    opts: &ConnectOptions,
    id: &str,
    mut cursor: u64,
    stop: &Arc<AtomicBool>,
    tx: mpsc::Sender<Event>,
) -> anyhow::Result<std::thread::JoinHandle<()>> {
    let mut client = Client::connect(opts)?;
    let (id, stop, opts) = (id.to_owned(), Arc::clone(stop), opts.clone());
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
            });
            let r = match r {
                // Resume from the cursor on a new connection: no byte lost or shown twice.
                Err(e) if e.is_connection_lost() => {
                    client = stockade_client::reconnect(&opts, RECONNECT_PATIENCE)?;
                    continue;
                }
                other => other?,
            };
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
    let (id, stop, opts) = (id.to_owned(), Arc::clone(stop), opts.clone());
    let mut run = move || -> anyhow::Result<Option<Event>> {
        let mut buf = [0u8; 4096];
        while !stop.load(Ordering::SeqCst) {
            if !readable(stdin(), &INPUT_POLL)? {
                continue;
            }
            let n = match rustix::io::read(stdin(), &mut buf) {
                Ok(n) => n,
                Err(Errno::INTR) => continue,
                Err(e) => return Err(std::io::Error::from(e)).context("cannot read the terminal"),
            };
            if n == 0 {
                return Ok(Some(Event::InputClosed));
            }
            let (forward, detach) = split_at_detach(&buf[..n]);
            if !forward.is_empty() {
                let params = WriteParams {
                    id: id.clone(),
                    bytes_b64: Some(encode_bytes(forward)),
                    yield_ms: Some(0),
                    max_bytes: Some(1),
                    ..WriteParams::default()
                };
                match client.call::<method::Write>(params) {
                    // Whether those keys arrived is unknown; they are not sent twice.
                    Err(e) if e.is_connection_lost() => {
                        client = stockade_client::reconnect(&opts, RECONNECT_PATIENCE)?;
                    }
                    other => drop(other?),
                }
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

/// Whether `fd` has input within `timeout`.
fn readable(fd: BorrowedFd<'_>, timeout: &Timespec) -> anyhow::Result<bool> {
    let mut fds = [PollFd::new(&fd, PollFlags::IN)];
    match poll(&mut fds, Some(timeout)) {
        Ok(n) => Ok(n > 0),
        Err(Errno::INTR) => Ok(false),
        Err(e) => Err(std::io::Error::from(e)).context("cannot poll the terminal"),
    }
}

/// The size of the terminal on `fd`, if it is one with a size.
pub(crate) fn terminal_size(fd: BorrowedFd<'_>) -> Option<PtySize> {
    let ws = tcgetwinsize(fd).ok()?;
    (ws.ws_row > 0 && ws.ws_col > 0).then_some(PtySize { rows: ws.ws_row, cols: ws.ws_col })
}

/// The terminal on `fd` in raw mode (no echo, no line editing, no signals from keys, bytes as
/// typed) for as long as this lives; the saved mode is put back on drop.
pub struct RawMode<'fd> {
    fd: BorrowedFd<'fd>,
    saved: Termios,
}

impl<'fd> RawMode<'fd> {
    /// Save the mode of the terminal on `fd` and make it raw.
    pub fn enter(fd: BorrowedFd<'fd>) -> anyhow::Result<RawMode<'fd>> {
        let saved =
            tcgetattr(fd).map_err(std::io::Error::from).context("cannot read the terminal mode")?;
        let mut raw = saved.clone();
        raw.make_raw();
        tcsetattr(fd, OptionalActions::Now, &raw)
            .map_err(std::io::Error::from)
            .context("cannot make the terminal raw")?;
        Ok(RawMode { fd, saved })
    }
}

impl Drop for RawMode<'_> {
    fn drop(&mut self) {
        // Nothing to do on failure: the terminal is gone or no longer ours.
        let _ = tcsetattr(self.fd, OptionalActions::Now, &self.saved);
    }
}

/// The signals attach handles, blocked in every thread (the mask is inherited by threads started
/// after it is set) so that only the waiter thread receives them, as events.
struct BlockedSignals {
    set: SigSet,
}

const HANDLED: [Signal; 5] =
    [Signal::SIGWINCH, Signal::SIGTERM, Signal::SIGHUP, Signal::SIGINT, Signal::SIGQUIT];

impl BlockedSignals {
    fn block() -> anyhow::Result<BlockedSignals> {
        let mut set = SigSet::empty();
        for s in HANDLED {
            set.add(s);
        }
        pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&set), None)
            .map_err(std::io::Error::from)
            .context("cannot block signals")?;
        Ok(BlockedSignals { set })
    }

    /// A thread that waits for the blocked signals and sends each as an event.
    fn spawn_waiter(self, tx: mpsc::Sender<Event>) -> anyhow::Result<()> {
        std::thread::Builder::new()
            .name("attach-signals".into())
            .spawn(move || {
                while let Ok(sig) = self.set.wait() {
                    if tx.send(Event::Signal(sig)).is_err() {
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
    use std::os::fd::AsFd;

    use rustix::termios::LocalModes;

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
        let pty = nix::pty::openpty(None, None).unwrap();
        let fd = pty.slave.as_fd();
        let before = tcgetattr(fd).unwrap();
        let lflag = |t: &Termios| t.local_modes;
        assert!(lflag(&before).contains(LocalModes::ICANON), "a new terminal is canonical");
        {
            let _raw = RawMode::enter(fd).unwrap();
            let during = tcgetattr(fd).unwrap();
            assert!(
                !lflag(&during)
                    .intersects(LocalModes::ICANON | LocalModes::ECHO | LocalModes::ISIG)
            );
        }
        let after = tcgetattr(fd).unwrap();
        assert_eq!(after.local_modes, before.local_modes);
        assert_eq!(after.input_modes, before.input_modes);
        assert_eq!(after.output_modes, before.output_modes);
        // Also when the scope is left by a panic.
        let unwound = std::panic::catch_unwind(|| {
            let _raw = RawMode::enter(fd).unwrap();
            panic!("boom");
        });
        assert!(unwound.is_err());
        assert_eq!(tcgetattr(fd).unwrap().local_modes, before.local_modes);
    }
}
