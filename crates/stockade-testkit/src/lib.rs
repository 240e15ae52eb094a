//! What Stockade's integration tests share, in one place: a temporary home and its daemon
//! ([`Home`]), a real `stockade daemon run` process ([`DaemonProc`]) or an in-process daemon
//! (`Fixture`, feature `daemon`), a raw JSON-RPC client that can also send malformed bytes
//! ([`Rpc`]), the WebSocket door's client ([`ws`]), `/proc` scans for a session's marker and kills
//! by pid ([`procs`]), a client driven through a pseudo-terminal ([`pty`]), bounded waits
//! ([`eventually`]), bounded child runs ([`child`]) and the MCP clients the `mcp` tests drive
//! ([`mcp`]).
//!
//! Tests never kill by name: only by a pid they started, a pid a daemon they started wrote into
//! its lock file, a process group it created, or a marker in the environment that only their own
//! sessions carry.

#![deny(missing_docs)]
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test kit: a failed step is a failed test

pub mod child;
pub mod daemon;
#[cfg(feature = "daemon")]
pub mod fixture;
pub mod home;
pub mod mcp;
pub mod procs;
pub mod pty;
pub mod rpc;
pub mod wait;
pub mod ws;

pub use daemon::{DaemonProc, owner_token_file};
#[cfg(feature = "daemon")]
pub use fixture::Fixture;
pub use home::Home;
pub use rpc::{Rpc, outcome};
pub use wait::{PATIENCE, eventually};

use std::path::{Path, PathBuf};

/// The `stockade` binary cargo built next to the test binary (`target/<profile>/stockade`; the
/// test runs from `target/<profile>/deps/`). `CARGO_BIN_EXE_stockade` is a compile-time variable
/// of the `stockade` crate's own tests only, so the kit finds it from where the test runs.
pub fn stockade_bin() -> PathBuf {
    built_bin("stockade", "run this test through `cargo test -p stockade`")
}

/// The `stockade-bench` binary beside `stockade` (`stockade bench` runs it). `cargo test
/// --workspace` builds it (the bench crate has tests of its own); for the tests of `stockade`
/// alone, build it first.
pub fn stockade_bench_bin() -> PathBuf {
    built_bin("stockade-bench", "build it first with `cargo build -p stockade-bench`")
}

/// A binary of this workspace in `target/<profile>/`, or a failure that says how to build it.
fn built_bin(name: &str, how: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    let dir = exe.parent().and_then(Path::parent).expect("target/<profile>/deps/<test>");
    let bin = dir.join(name);
    assert!(bin.exists(), "{} is not built: {how}", bin.display());
    bin
}

/// Set by `.ci/run`: a test that cannot run fails instead of skipping.
pub const STRICT_ENV: &str = "STOCKADE_TEST_STRICT";

/// The workspace root (`tests/mcp/` and `target/mcp-*` live there).
pub(crate) fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

/// A test that cannot run on this machine: says why on stderr, and fails under CI (`CI` or
/// [`STRICT_ENV`] set and not `false`/`0`; `.ci/run` sets both), where the machine is set up to
/// run it (root, a usable cgroup v2, tmpfs), so a skip can never pass for a run there.
pub fn cannot_run(why: &str) {
    let set = |k: &str| std::env::var(k).is_ok_and(|v| !v.is_empty() && v != "false" && v != "0");
    let ci = set("CI") || set(STRICT_ENV);
    assert!(!ci, "this test cannot run here ({why}), and CI must run it");
    eprintln!("skipped: {why}");
}

/// Lossy UTF-8 of a command's output.
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Standard base64 (with padding) to bytes, as the daemon's raw reads carry them; panics on bad
/// input.
pub fn base64_decode(text: &str) -> Vec<u8> {
    stockade_proto::rpc::decode_bytes(text).expect("standard base64")
}

/// The names in directory `dir`, sorted (empty when it cannot be read).
pub fn dir_names(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|d| d.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    names.sort();
    names
}
