#!/usr/bin/env bash
# Installs the coding agents the agent tests drive (crates/stockade/tests/it/agents*.rs): the
# Codex CLI, Claude Code (two releases: the one the first tests were written against and the
# newest, which speaks MCP 2026-07-28), opencode, Gemini CLI and Qwen Code, pinned, from the npm
# registry, into target/agents-node (the newer Claude Code into target/agents-node-claude-new);
# and the OpenAI Agents SDK, pinned, from PyPI, into target/agents-venv.
# Called by scripts/test. Idempotent: once the pinned versions are in place this only checks a
# stamp. Network: the npm registry only. The agents are never given a network model or a
# credential: the tests point them at scripted stand-in models on loopback (tests/agents/standin.py).
set -euo pipefail
cd "$(dirname "$0")/../.."

CODEX_VERSION=0.169.0
CLAUDE_VERSION=2.1.197
OPENCODE_VERSION=1.18.33
CLAUDE_NEW_VERSION=2.1.332
GEMINI_VERSION=0.61.0
QWEN_VERSION=0.24.4
AGENTS_SDK_VERSION=0.24.0

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

dir=target/agents-node-claude-new
stamp="$dir/.installed-$CLAUDE_NEW_VERSION-$GEMINI_VERSION-$QWEN_VERSION"
if [[ ! -f $stamp ]]; then
    echo "scripts/test: installing Claude Code $CLAUDE_NEW_VERSION, Gemini CLI $GEMINI_VERSION and Qwen Code $QWEN_VERSION into $dir" >&2
    mkdir -p "$dir"
    npm install --prefix "$dir" --no-audit --no-fund --loglevel=error \
        "@anthropic-ai/claude-code@$CLAUDE_NEW_VERSION" \
        "@google/gemini-cli@$GEMINI_VERSION" \
        "@qwen-code/qwen-code@$QWEN_VERSION" ||
        die "npm could not install the newer agents (is the npm registry reachable?)"
    touch "$stamp"
fi

venv=target/agents-venv
stamp="$venv/.installed-$AGENTS_SDK_VERSION"
if [[ ! -f $stamp ]]; then
    echo "scripts/test: installing the OpenAI Agents SDK $AGENTS_SDK_VERSION into $venv" >&2
    python3 -m venv "$venv" || die "python3 cannot make a venv (apt-get install python3-venv)"
    "$venv/bin/pip" install --quiet --disable-pip-version-check "openai-agents==$AGENTS_SDK_VERSION" ||
        die "pip could not install openai-agents (is PyPI reachable?)"
    touch "$stamp"
fi
