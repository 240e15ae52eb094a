#!/usr/bin/env bash
# Installs the agent-side MCP clients of the waiting/cost tests, which nobody in this project
# wrote: the official TypeScript SDK with Ajv (JSON Schema 2020) in target/mcp-ts, and fastmcp
# (PyPI) in its own venv, target/fastmcp-venv. Called by scripts/test. Idempotent: once the
# pinned versions are in place this only checks a stamp. Network: npm registry and PyPI only.
set -euo pipefail
cd "$(dirname "$0")/../.."
. tests/lib/install.sh

TS_SDK_VERSION=1.32.2
AJV_VERSION=8.20.0
FASTMCP_VERSION=2.14.7

need_python
need_node
npm_install target/mcp-ts "target/mcp-ts/.installed-sdk-$TS_SDK_VERSION-ajv-$AJV_VERSION" \
    "the MCP TypeScript SDK and Ajv" "@modelcontextprotocol/sdk@$TS_SDK_VERSION" "ajv@$AJV_VERSION"
pip_install target/fastmcp-venv "target/fastmcp-venv/.installed-fastmcp-$FASTMCP_VERSION" \
    "fastmcp" "fastmcp==$FASTMCP_VERSION"
