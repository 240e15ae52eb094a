//! The client's integration tests, one binary: one module per topic.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may unwrap

mod fake_daemon;
