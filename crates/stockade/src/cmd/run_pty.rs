//! A foreground `stockade run` on the caller's terminal, as a shell would run the command: on a
//! pseudo-terminal of its own (so it line-buffers, colours and can ask questions), sized like
//! the caller's and resized with it, with the caller's terminal raw while it runs, so every key
//! reaches the command as typed. Ctrl-C is such a key: the command's terminal turns it into
//! SIGINT for the command, which decides what to do; when the command dies of it, this client
//! then dies of SIGINT too, so a shell loop around it stops.
//!
//! Two helpers and one loop. An *input* thread reads the caller's terminal and hands the bytes
//! to a *writer* task, which types them into the session (a command that reads nothing only
//! delays its own keys); the loop waits for the session's end, `SIGWINCH` (the size is
//! forwarded), and SIGINT/SIGTERM/SIGHUP/SIGQUIT sent to this client (they end the command's
//! tree). The output is copied from the log as for any foreground run.
//!
//! The caller's terminal is raw only while a [`RawMode`] guard lives, and it is dropped before
//! anything else is printed, on every way out: the command's end, an error (`?`), a signal
//! (turned into an event by the loop, never left to its default action) and a panic (unwinding
//! drops the guard).

use std::os::fd::AsFd as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context as _;
use rustix::event::{PollFd, PollFlags, Timespec, poll};
use rustix::io::Errno;
use rustix::stdio::stdin;
use stockade_engine::{Engine, EngineConfig, RunSpec, Session};
use stockade_log::OutputLog;
use stockade_proto::rpc::PtySize;
use stockade_proto::{SessionState, Signal};
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::mpsc;

use super::attach::{RawMode, terminal_size};

/// How often the input thread looks at the stop flag while the terminal is quiet.
const INPUT_POLL: Timespec = Timespec { tv_sec: 0, tv_nsec: 100_000_000 };
/// Most bytes of one read of the terminal.
const INPUT_CHUNK: usize = 4096;
/// Reads of the terminal waiting to be typed into the session, at most.
const INPUT_QUEUE: usize = 16;
/// How long one write waits for a command that does not read its terminal; the keys are then
/// dropped, as a full terminal buffer would.
const INPUT_WAIT: Duration = Duration::from_secs(60);

/// Whether a foreground run gets a terminal: stdin and stdout are this process's terminal and
/// it is the terminal's foreground job (in the background of a shell, raw mode and reading
/// the terminal would stop it).
pub fn on_terminal() -> bool {
    let fd = stdin();
    if !rustix::termios::isatty(fd) || !rustix::termios::isatty(rustix::stdio::stdout()) {
        return false;
    }
    rustix::termios::tcgetpgrp(fd).is_ok_and(|group| group == rustix::process::getpgrp())
}

/// What a run on the caller's terminal ends with: the signal this client should die of once the
/// summary is printed (one it got, or SIGINT when the command died of it: Ctrl-C), the ended
/// session, and whether its output ended with a newline.
pub type Ended = (Option<Signal>, Arc<Session>, bool);

/// Runs `spec` on a terminal sized like the caller's (`fallback` when it tells no size), its
/// output copied to stdout by `stream` (which says whether it ended with a newline).
pub fn run<F, Fut>(
    config: EngineConfig,
    spec: RunSpec,
    fallback: PtySize,
    doors: &stockade_daemon::HomeDoors,
    stream: F,
) -> anyhow::Result<Ended>
where
    F: FnOnce(Arc<OutputLog>) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<bool>> + Send + 'static,
{
    let mut spec = RunSpec { pty: Some(terminal_size(stdin()).unwrap_or(fallback)), ..spec };
    // The command draws for the caller's terminal, not a generic one.
    if let Ok(term) = std::env::var("TERM")
        && !spec.env.iter().any(|(k, _)| k == "TERM")
    {
        spec.env.push(("TERM".into(), term));
    }
    let rt = crate::global::runtime()?;
    let stop = Arc::new(AtomicBool::new(false));
    let (keys, typed) = mpsc::channel(INPUT_QUEUE);
    let mut signals = {
        let _in = rt.enter(); // the signal streams belong to this runtime
        Signals::listen()?
    };
    let raw = RawMode::enter(stdin())?;
    let input = spawn_input(Arc::clone(&stop), keys)?;
    let result = rt.block_on(async {
        let engine = Engine::new(config)?;
        let session = engine.run(spec)?;
        audit_foreground(doors, &session);
        let streamed = tokio::spawn(stream(Arc::clone(session.log())));
        let writer = {
            let (session, mut typed) = (Arc::clone(&session), typed);
            tokio::spawn(async move {
                while let Some(bytes) = typed.recv().await {
                    // Refused (the command ended, or reads nothing): these keys are dropped.
                    let _ = session.write_input(bytes, INPUT_WAIT).await;
                }
            })
        };
        let mut by_signal = None;
        loop {
            tokio::select! {
                _ = session.wait(None) => break,
                sig = signals.next() => match sig {
                    Some(sig) => {
                        let reason = format!("interrupted (the client got {sig})");
                        session.kill(engine.terminate_options(), &reason).await;
                        by_signal = Some(sig);
                        break;
                    }
                    None => {
                        // SIGWINCH: a resize the ended command cannot take is of no matter.
                        if let Some(size) = terminal_size(stdin()) {
                            let _ = session.resize(size);
                        }
                    }
                },
            }
        }
        writer.abort();
        let ended_with_newline = streamed.await??;
        let sigint = Signal::SIGINT.number();
        if by_signal.is_none()
            && matches!(session.state(), SessionState::Signaled { signal } if signal == sigint)
        {
            by_signal = Some(Signal::SIGINT);
        }
        anyhow::Ok((by_signal, session, ended_with_newline))
    });
    stop.store(true, Ordering::SeqCst);
    let _ = input.join();
    drop(raw); // the terminal is the caller's again before the summary is printed
    result
}

/// The signals this client listens for while the command runs.
struct Signals {
    winch: tokio::signal::unix::Signal,
    ending: Vec<(tokio::signal::unix::Signal, Signal)>,
}

impl Signals {
    fn listen() -> anyhow::Result<Signals> {
        let quit = Signal::try_from(nix::libc::SIGQUIT).context("SIGQUIT has no number")?;
        let watch = |kind: SignalKind, name: &str| {
            signal(kind).with_context(|| format!("cannot watch {name}"))
        };
        Ok(Signals {
            winch: watch(SignalKind::window_change(), "SIGWINCH")?,
            ending: vec![
                (watch(SignalKind::interrupt(), "SIGINT")?, Signal::SIGINT),
                (watch(SignalKind::terminate(), "SIGTERM")?, Signal::SIGTERM),
                (watch(SignalKind::hangup(), "SIGHUP")?, Signal::SIGHUP),
                (watch(SignalKind::quit(), "SIGQUIT")?, quit),
            ],
        })
    }

    /// The next signal: `Some` for one that ends the run, `None` for a window change.
    async fn next(&mut self) -> Option<Signal> {
        let ending = first_of(&mut self.ending);
        tokio::select! {
            _ = self.winch.recv() => None,
            sig = ending => Some(sig),
        }
    }
}

/// The first of `streams` to deliver a signal.
async fn first_of(streams: &mut [(tokio::signal::unix::Signal, Signal)]) -> Signal {
    std::future::poll_fn(|cx| {
        for (stream, sig) in streams.iter_mut() {
            if stream.poll_recv(cx).is_ready() {
                return std::task::Poll::Ready(*sig);
            }
        }
        std::task::Poll::Pending
    })
    .await
}

/// The input thread: the caller's terminal to `keys`, until `stop`, the end of input, or the
/// loop no longer taking keys.
fn spawn_input(
    stop: Arc<AtomicBool>,
    keys: mpsc::Sender<Vec<u8>>,
) -> anyhow::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("run-input".into())
        .spawn(move || {
            let mut buf = [0u8; INPUT_CHUNK];
            let fd = stdin();
            while !stop.load(Ordering::SeqCst) {
                let mut fds = [PollFd::new(&fd, PollFlags::IN)];
                match poll(&mut fds, Some(&INPUT_POLL)) {
                    Ok(0) | Err(Errno::INTR) => continue,
                    Ok(_) => {}
                    Err(_) => return,
                }
                let n = match rustix::io::read(fd.as_fd(), &mut buf) {
                    Ok(0) => return, // the terminal hung up
                    Ok(n) => n,
                    Err(Errno::INTR | Errno::AGAIN) => continue,
                    Err(_) => return,
                };
                if keys.blocking_send(buf[..n].to_vec()).is_err() {
                    return;
                }
            }
        })
        .context("cannot start the thread that reads the terminal")
}

/// The audit line of a foreground run, in the home's daemon's audit log when it has one; a line
/// that cannot be written is said on stderr (the run goes on).
pub(super) fn audit_foreground(
    doors: &stockade_daemon::HomeDoors,
    session: &stockade_engine::Session,
) {
    if let Err(e) = doors.audit_foreground(session.id(), session.command()) {
        let _ = std::io::Write::write_fmt(
            &mut std::io::stderr(),
            format_args!(
                "stockade: warning: this run could not be written to the audit log: {e}\n"
            ),
        );
    }
}
