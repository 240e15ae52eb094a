//! The process layer's integration tests, one binary (one link step): one module per topic —
//! spawning and containing process trees, adopting them, terminating them honestly, and PTY
//! sessions. The process and PTY tests share `process_common` (markers, containment modes, a
//! kill-on-drop guard) and `pty_common` (a session driven as the session layer drives it, its
//! output drained by `stockade_log`'s shared drain thread); `/proc` scans come from
//! `stockade-testkit`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may unwrap

mod process_common;
mod pty_common;

mod process_adopt;
mod process_concurrency;
mod process_honesty;
mod process_pipe_eof;
mod process_shapes;
mod pty_interactive;
mod pty_memory;
mod pty_screen;
mod pty_stdin_pipe;
