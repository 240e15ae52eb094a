//! The `stockade` binary's integration tests, one test binary: one module per topic, each
//! driving the real binary (`stockade_testkit::stockade_bin`) — the CLI, its daemon, crash
//! recovery, schedules, the WebSocket door, the bench harness and MCP clients.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may unwrap

mod agent_exit;
mod agents;
mod agents_new;
mod agents_order;
mod architecture;
mod bench_edges;
mod bench_growth;
mod binary_deps;
mod caller_env;
mod chaos;
mod cli;
mod cli_bad_inputs;
mod cli_docs;
mod cli_errors;
mod cli_interrupt;
mod cli_live;
mod cli_pty;
mod cli_restart;
mod cli_terminal;
mod cli_wait;
mod client_daemon;
mod client_sessions;
mod crash_disk_full;
mod crash_recovery;
mod crash_retention;
mod daemon_lifecycle;
mod daemon_load;
mod disk_full_restart;
mod e2b;
mod grep_bounds;
mod hardening;
mod kill_matrix;
mod list_cost;
mod mcp_agents;
mod mcp_http;
mod mcp_inspector;
mod mcp_liberal;
mod mcp_python;
mod mcp_tls;
mod memory;
mod memory_trim;
mod metrics_addr;
mod natural_end;
mod order;
mod pid1;
mod prepared_dirs;
mod remote_crd;
mod remote_deploy;
mod remote_ns;
mod remote_support;
mod restart;
mod restart_earlier;
mod sandbox_common;
mod sandbox_doors;
mod sandbox_escape;
mod sandbox_kernel;
mod sandbox_stockade;
mod schedule_daemon;
mod security;
mod ws_cli;
mod ws_flood;
