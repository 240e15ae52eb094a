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
. tests/lib/install.sh

CODEX_VERSION=0.169.0
CLAUDE_VERSION=2.1.197
OPENCODE_VERSION=1.18.33
CLAUDE_NEW_VERSION=2.1.332
GEMINI_VERSION=0.61.0
QWEN_VERSION=0.24.4
AGENTS_SDK_VERSION=0.24.0

need_python
need_node
npm_install target/agents-node "target/agents-node/.installed-$CODEX_VERSION-$CLAUDE_VERSION-$OPENCODE_VERSION" \
    "Codex, Claude Code and opencode" \
    "@openai/codex@$CODEX_VERSION" \
    "@anthropic-ai/claude-code@$CLAUDE_VERSION" \
    "opencode-ai@$OPENCODE_VERSION"
npm_install target/agents-node-claude-new \
    "target/agents-node-claude-new/.installed-$CLAUDE_NEW_VERSION-$GEMINI_VERSION-$QWEN_VERSION" \
    "the newest Claude Code, Gemini CLI and Qwen Code" \
    "@anthropic-ai/claude-code@$CLAUDE_NEW_VERSION" \
    "@google/gemini-cli@$GEMINI_VERSION" \
    "@qwen-code/qwen-code@$QWEN_VERSION"
pip_install target/agents-venv "target/agents-venv/.installed-$AGENTS_SDK_VERSION" \
    "the OpenAI Agents SDK" "openai-agents==$AGENTS_SDK_VERSION"
