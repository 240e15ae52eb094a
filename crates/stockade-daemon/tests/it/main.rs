//! The daemon's integration tests, one binary: one module per topic, each against in-process
//! daemons (`stockade_testkit::Fixture`) spoken to raw, over the Unix socket or the WebSocket
//! door.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may unwrap

mod daemon_fuzz;
mod daemon_pty;
mod daemon_rpc;
mod daemon_wait;
mod tail_since;
mod ws_door;
