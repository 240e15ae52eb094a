#!/usr/bin/env bash
# Installs the three coding agents the agent tests drive (crates/stockade-mcp/tests/it/agents.rs):
# the Codex CLI, Claude Code and opencode, pinned, from the npm registry, into target/agents-node.
# Called by scripts/test. Idempotent: once the pinned versions are in place this only checks a
# stamp. Network: the npm registry only. The agents are never given a network model or a
# credential: the tests point them at scripted stand-in models on loopback (tests/agents/standin.py).
set -euo pipefail
cd "$(dirname "$0")/../.."

CODEX_VERSION=0.169.0
CLAUDE_VERSION=2.1.197
OPENCODE_VERSION=1.18.33

die() {
    echo "scripts/test: $*" >&2
    exit 1
}

command -v node >/dev/null ||
    die "node is missing; install Node.js >= 20 with npm (https://nodejs.org, or apt-get install nodejs npm)"
command -v npm >/dev/null || die "npm is missing; install it with Node.js (apt-get install npm)"
command -v python3 >/dev/null ||
    die "python3 is missing; the stand-in models need Python >= 3.10 (apt-get install python3)"

dir=target/agents-node
stamp="$dir/.installed-$CODEX_VERSION-$CLAUDE_VERSION-$OPENCODE_VERSION"
if [[ ! -f $stamp ]]; then
    echo "scripts/test: installing Codex $CODEX_VERSION, Claude Code $CLAUDE_VERSION and opencode $OPENCODE_VERSION into $dir" >&2
    mkdir -p "$dir"
    npm install --prefix "$dir" --no-audit --no-fund --loglevel=error \
        "@openai/codex@$CODEX_VERSION" \
        "@anthropic-ai/claude-code@$CLAUDE_VERSION" \
        "opencode-ai@$OPENCODE_VERSION" ||
        die "npm could not install the agents (is the npm registry reachable?)"
    touch "$stamp"
fi
