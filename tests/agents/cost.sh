#!/usr/bin/env bash
# What it costs each agent's model to follow a 20 MiB build to its end through Stockade: the
# stand-in model starts a build-log-like command in the background (tests/agents/standin.py,
# POLL_CMD), polls it with read_output wait_ms until it has ended, then greps the log. Prints,
# per agent, the calls made and the bytes of text the agent handed its model (the table of
# docs/usage.md, "What your agent's model sees, in detail"). Needs tests/agents/install-deps.sh and a built `stockade` (cargo build).
# Usage: tests/agents/cost.sh [codex|claude|opencode ...]
set -euo pipefail
cd "$(dirname "$0")/../.."
agents=("$@")
[[ ${#agents[@]} -gt 0 ]] || agents=(codex claude opencode)
bin="$PWD/target/debug"
[[ -x $bin/stockade ]] || { echo "cost.sh: build stockade first (cargo build -p stockade)" >&2; exit 1; }
work=$(mktemp -d)
trap 'for d in "$work"/*/home/.local/state/stockade; do [[ -d $d ]] && "$bin/stockade" --home "$d" --no-autostart daemon stop >/dev/null 2>&1 || true; done; rm -rf "$work"' EXIT
echo "| agent | calls | text bytes to the model | largest answer | answers cut by the agent |"
echo "| --- | ---: | ---: | ---: | --- |"
for a in "${agents[@]}"; do
    PATH="$bin:$PATH" python3 tests/agents/drive.py --agent "$a" --scenario poll --out "$work/$a" --timeout 300 >/dev/null
    python3 - "$a" "$work/$a/record.jsonl" <<'PY'
import json, sys
agent, path = sys.argv[1], sys.argv[2]
texts = [json.loads(l)["text"] for l in open(path) if json.loads(l)["kind"] == "tool_result"]
cut = sum(any(m in t for m in ("tokens truncated", "lines truncated", "output was truncated", "MAX_MCP_OUTPUT")) for t in texts)
print(f"| {agent} | {len(texts)} | {sum(len(t.encode()) for t in texts):,} | {max((len(t.encode()) for t in texts), default=0):,} | {cut} |")
PY
done
