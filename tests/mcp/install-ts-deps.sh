#!/usr/bin/env bash
# Installs the agent-side MCP clients of the waiting/cost tests, which nobody in this project
# wrote: the official TypeScript SDK with Ajv (JSON Schema 2020) in target/mcp-ts, and fastmcp
# (PyPI) in its own venv, target/fastmcp-venv. Called by scripts/test. Idempotent: once the
# pinned versions are in place this only checks a stamp. Network: npm registry and PyPI only.
set -euo pipefail
cd "$(dirname "$0")/../.."

TS_SDK_VERSION=1.32.2
AJV_VERSION=8.20.0
FASTMCP_VERSION=2.14.7

die() {
    echo "scripts/test: $*" >&2
    exit 1
}

command -v npm >/dev/null || die "npm is missing; install Node.js >= 20 with npm (apt-get install nodejs npm)"
command -v python3 >/dev/null || die "python3 is missing; install Python >= 3.10 (apt-get install python3 python3-venv)"

ts_dir=target/mcp-ts
ts_stamp="$ts_dir/.installed-sdk-$TS_SDK_VERSION-ajv-$AJV_VERSION"
if [[ ! -f $ts_stamp ]]; then
    echo "scripts/test: installing @modelcontextprotocol/sdk@$TS_SDK_VERSION and ajv@$AJV_VERSION into $ts_dir" >&2
    mkdir -p "$ts_dir"
    npm install --prefix "$ts_dir" --no-audit --no-fund --loglevel=error \
        "@modelcontextprotocol/sdk@$TS_SDK_VERSION" "ajv@$AJV_VERSION" ||
        die "npm could not install the MCP TypeScript SDK (is the npm registry reachable?)"
    touch "$ts_stamp"
fi

venv=target/fastmcp-venv
py_stamp="$venv/.installed-fastmcp-$FASTMCP_VERSION"
if [[ ! -f $py_stamp ]]; then
    echo "scripts/test: installing fastmcp==$FASTMCP_VERSION into $venv" >&2
    python3 -m venv "$venv" ||
        die "cannot create a venv with $(command -v python3); install the venv module (apt-get install python3-venv)"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "fastmcp==$FASTMCP_VERSION" ||
        die "pip could not install fastmcp==$FASTMCP_VERSION (is PyPI reachable?)"
    touch "$py_stamp"
fi
