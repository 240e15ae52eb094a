//! The engine's integration tests, one binary (one link step): one module per topic. The
//! process and PTY tests share `process_common` (markers, containment modes, a kill-on-drop
//! guard) and `pty_common` (a session driven as the session layer drives it); `/proc` scans come
//! from `stockade-testkit`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may unwrap

mod process_common;
mod pty_common;

mod output_grep;
mod output_log;
mod output_memory;
mod process_adopt;
mod process_concurrency;
mod process_honesty;
mod process_pipe_eof;
mod process_shapes;
mod pty_interactive;
mod pty_memory;
mod pty_screen;
mod pty_stdin_pipe;
mod session_lifecycle;
