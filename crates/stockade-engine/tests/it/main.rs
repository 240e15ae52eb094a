//! The engine's integration tests: sessions through [`stockade_engine::Engine`], from start to
//! their end and record. The output log's tests live in `stockade-log` (`tests/it`), the
//! process and PTY tests in `stockade-proc` (`tests/it`); `/proc` scans come from
//! `stockade-testkit`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may unwrap

mod session_lifecycle;
