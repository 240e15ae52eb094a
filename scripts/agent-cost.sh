#!/usr/bin/env bash
# Measures what an agent pays through `stockade mcp` for a few tasks (calls and text bytes the
# model reads), against a plain "run and return all output" tool, and prints the Markdown table
# docs/usage.md shows under "Agent cost" (its main rows are in README.md's Results). Uses the official MCP TypeScript SDK, installed by
# tests/mcp/install-ts-deps.sh. Takes about a minute.
set -euo pipefail
cd "$(dirname "$0")/.."
tests/mcp/install-ts-deps.sh
cargo build --locked -p stockade
home=$(mktemp -d)
trap 'target/debug/stockade --home "$home" daemon stop >/dev/null 2>&1 || true; rm -rf "$home"' EXIT
node tests/mcp/agents.mjs cost --stockade target/debug/stockade --home "$home" | grep '^|'
