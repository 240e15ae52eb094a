#!/usr/bin/env bash
# Installs the MCP clients the MCP tests drive, which nobody in this project wrote: the official
# Python SDK (in a venv, target/mcp-venv) and the official MCP Inspector (target/mcp-node).
# Called by scripts/test. Idempotent: once a pinned version is in place this only checks a stamp.
# Network: PyPI and the npm registry only.
set -euo pipefail
cd "$(dirname "$0")/../.."
. tests/lib/install.sh

PY_MCP_VERSION=2.3.0
INSPECTOR_VERSION=2.12.0

need_python
need_node
pip_install target/mcp-venv "target/mcp-venv/.installed-mcp-$PY_MCP_VERSION" \
    "the MCP Python SDK" "mcp==$PY_MCP_VERSION"
npm_install target/mcp-node "target/mcp-node/.installed-inspector-$INSPECTOR_VERSION" \
    "the MCP Inspector" "@modelcontextprotocol/inspector@$INSPECTOR_VERSION"
