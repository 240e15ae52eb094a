#!/usr/bin/env bash
# Installs the MCP clients the MCP tests drive, which nobody in this project wrote: the official
# Python SDK (in a venv, target/mcp-venv) and the official MCP Inspector (target/mcp-node).
# Called by scripts/test. Idempotent: once a pinned version is in place this only checks a stamp.
# Network: PyPI and the npm registry only.
set -euo pipefail
cd "$(dirname "$0")/../.."

PY_MCP_VERSION=2.3.0
INSPECTOR_VERSION=2.12.0

die() {
    echo "scripts/test: $*" >&2
    exit 1
}

command -v python3 >/dev/null ||
    die "python3 is missing; install Python >= 3.10 with venv support (Debian/Ubuntu: apt-get install python3 python3-venv)"
python3 -c 'import sys; sys.exit(sys.version_info < (3, 10))' ||
    die "python3 is $(python3 -V 2>&1); the MCP Python SDK needs Python >= 3.10"
command -v node >/dev/null ||
    die "node is missing; install Node.js >= 20 with npm (https://nodejs.org, or apt-get install nodejs npm)"
command -v npm >/dev/null || die "npm is missing; install it with Node.js (apt-get install npm)"
node -e 'process.exit(Number(process.versions.node.split(".")[0]) < 20 ? 1 : 0)' ||
    die "node is $(node --version); the MCP Inspector needs Node.js >= 20"

venv=target/mcp-venv
stamp="$venv/.installed-mcp-$PY_MCP_VERSION"
if [[ ! -f $stamp ]]; then
    echo "scripts/test: installing the MCP Python SDK (mcp==$PY_MCP_VERSION) into $venv" >&2
    python3 -m venv "$venv" ||
        die "cannot create a venv with $(command -v python3); install the venv module (Debian/Ubuntu: apt-get install python3-venv)"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "mcp==$PY_MCP_VERSION" ||
        die "pip could not install mcp==$PY_MCP_VERSION (is PyPI reachable?)"
    touch "$stamp"
fi

node_dir=target/mcp-node
nstamp="$node_dir/.installed-inspector-$INSPECTOR_VERSION"
if [[ ! -f $nstamp ]]; then
    echo "scripts/test: installing the MCP Inspector ($INSPECTOR_VERSION) into $node_dir" >&2
    mkdir -p "$node_dir"
    npm install --prefix "$node_dir" --no-audit --no-fund --loglevel=error \
        "@modelcontextprotocol/inspector@$INSPECTOR_VERSION" ||
        die "npm could not install @modelcontextprotocol/inspector@$INSPECTOR_VERSION (is the npm registry reachable?)"
    touch "$nstamp"
fi
