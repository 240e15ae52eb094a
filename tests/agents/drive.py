#!/usr/bin/env python3
"""Drive one real coding agent (Codex CLI, Claude Code or opencode) through Stockade's MCP server
with a scripted stand-in model (standin.py) on loopback, and record what the agent hands back.

The agent is configured from README.md's own snippet for it (the fenced block under its name in
"Use from an agent (MCP)"), so the tests prove the snippet users copy; the only additions are
the stand-in model's provider settings. Each run gets its own HOME and config directories under
--out, so Stockade's state directory is --out/home/.local/state/stockade; nothing is read from
the network and no credential is used.

Writes --out/record.jsonl (standin.py's record) and prints one JSON line: the agent's exit status,
the stand-in's port, and the files it wrote. Exit 0 unless the driver itself failed.

Usage: drive.py --agent codex|claude|claude-new|opencode|gemini|gemini-http|qwen|agents-sdk
                --scenario basic|poll|terminal|… --out DIR [--timeout S]
Needs: target/agents-node, target/agents-node-claude-new and target/agents-venv
(tests/agents/install-deps.sh), `stockade` on PATH.
"""

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
BIN = os.path.join(ROOT, "target", "agents-node", "node_modules", ".bin")
# Claude Code's newest release, Gemini CLI and Qwen Code.
BIN_NEW = os.path.join(ROOT, "target", "agents-node-claude-new", "node_modules", ".bin")
VENV_PYTHON = os.path.join(ROOT, "target", "agents-venv", "bin", "python")
PROMPT = "Follow the test script."
STOCKADE_TOOLS = ["exec_command", "write_stdin", "read_output", "grep_output", "kill_session", "list_sessions"]


def readme_snippet(agent):
    """The fenced block that follows the agent's bold heading in README.md."""
    heading = {"codex": "**Codex**", "claude": "**Claude Code**", "opencode": "**opencode**",
               "gemini": "**Gemini CLI**"}[agent]
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        text = f.read()
    start = text.index(heading)
    m = re.compile(r"```(\w+)\n(.*?)```", re.S).search(text, start)
    if not m:
        raise SystemExit(f"README.md has no fenced block after {heading}")
    return m.group(2)


def setup_codex(out, port, env):
    home = os.path.join(out, "codex-home")
    os.makedirs(home, exist_ok=True)
    config = readme_snippet("codex") + f"""
# The stand-in model (tests only).
model = "{CODEX_MODEL}"
model_provider = "standin"

[model_providers.standin]
name = "stand-in"
base_url = "http://127.0.0.1:{port}/v1"
wire_api = "responses"
env_key = "STANDIN_API_KEY"
request_max_retries = 0
stream_max_retries = 0
"""
    for feature in CODEX_FEATURES:
        # Under the README's `[features]` table.
        config = config.replace("[features]\n", f"[features]\n{feature} = true\n", 1)
    # Top-level keys must come before any table: move them up.
    top = [l for l in config.splitlines() if re.match(r"^(model|model_provider) = ", l)]
    rest = [l for l in config.splitlines() if l not in top]
    with open(os.path.join(home, "config.toml"), "w", encoding="utf-8") as f:
        f.write("\n".join(top + rest) + "\n")
    env.update(CODEX_HOME=home, STANDIN_API_KEY="stand-in-no-key")
    return [os.path.join(BIN, "codex"), "exec", "--skip-git-repo-check", "--json", PROMPT]


def setup_claude_new(out, port, env):
    argv = setup_claude(out, port, env)
    argv[0] = os.path.join(BIN_NEW, "claude")
    # Its debug log: where it says whether it had to SIGKILL the MCP server.
    return argv + ["--debug-file", os.path.join(out, "claude-debug.log")]


def gemini_settings(out, servers, auth):
    return {
        "mcpServers": servers,
        "security": {"auth": {"selectedType": auth}, "folderTrust": {"enabled": False}},
        "general": {"disableAutoUpdate": True, "disableUpdateNag": True},
        "privacy": {"usageStatisticsEnabled": False},
        "telemetry": {"enabled": False},
    }


def write_settings(out, folder, settings):
    d = os.path.join(out, "home", folder)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "settings.json"), "w", encoding="utf-8") as f:
        json.dump(settings, f, indent=2)


def setup_gemini(out, port, env, servers=None):
    servers = servers or json.loads(readme_snippet("gemini"))["mcpServers"]
    write_settings(out, ".gemini", gemini_settings(out, servers, "gemini-api-key"))
    env.update(GEMINI_API_KEY="stand-in-no-key", GOOGLE_GEMINI_BASE_URL=f"http://127.0.0.1:{port}",
               GEMINI_CLI_NO_RELAUNCH="1", GEMINI_CLI_TRUST_WORKSPACE="true")
    return [os.path.join(BIN_NEW, "gemini"), "-p", PROMPT, "--yolo", "-m", "gemini-2.5-flash"] + (["--debug"] if os.environ.get("STANDIN_DEBUG") else [])


def setup_gemini_http(out, port, env):
    """Gemini CLI with `stockade mcp --http` (started here, bearer token) instead of stdio."""
    token = "stand-in-token-0123456789abcdef"
    server_env = dict(env)
    server = subprocess.Popen(["stockade", "mcp", "--http", "127.0.0.1:0", "--token", token],
                              env=server_env, cwd=os.path.join(out, "work"), stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    STARTED.append(server)
    url = None
    deadline = time.monotonic() + 20
    while url is None and time.monotonic() < deadline:
        line = server.stderr.readline().decode(errors="replace")
        if not line:
            break
        m = re.search(r"(http://\S+/mcp)", line)
        url = m.group(1) if m else None
    if url is None:
        raise SystemExit("stockade mcp --http did not say where it listens")
    servers = {"stockade": {"httpUrl": url, "headers": {"Authorization": f"Bearer {token}"}}}
    return setup_gemini(out, port, env, servers)


def setup_qwen(out, port, env):
    servers = json.loads(readme_snippet("gemini"))["mcpServers"]
    write_settings(out, ".qwen", gemini_settings(out, servers, "openai"))
    env.update(OPENAI_API_KEY="stand-in-no-key", OPENAI_BASE_URL=f"http://127.0.0.1:{port}/v1",
               OPENAI_MODEL="stand-in", QWEN_CODE_NO_RELAUNCH="1")
    return [os.path.join(BIN_NEW, "qwen"), "-p", PROMPT, "--yolo", "--auth-type", "openai", "-m", "stand-in"]


def setup_agents_sdk(out, port, env):
    return [VENV_PYTHON, os.path.join(HERE, "agents_sdk.py"), "--port", str(port), "--prompt", PROMPT]


def setup_claude(out, port, env):
    path = os.path.join(out, "work", ".mcp.json")
    with open(path, "w", encoding="utf-8") as f:
        f.write(readme_snippet("claude"))
    env.update(
        ANTHROPIC_BASE_URL=f"http://127.0.0.1:{port}",
        ANTHROPIC_API_KEY="stand-in-no-key",
        CLAUDE_CONFIG_DIR=os.path.join(out, "claude-config"),
        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
        DISABLE_AUTOUPDATER="1",
        DISABLE_TELEMETRY="1",
    )
    allowed = ",".join(f"mcp__stockade__{t}" for t in STOCKADE_TOOLS)
    return [os.path.join(BIN, "claude"), "-p", PROMPT, "--output-format", "stream-json", "--verbose",
            "--model", "claude-stand-in", "--mcp-config", path, "--strict-mcp-config",
            "--allowedTools", allowed]


def setup_opencode(out, port, env):
    config = json.loads(readme_snippet("opencode"))
    config["provider"] = {
        "standin": {
            "npm": "@ai-sdk/openai-compatible",
            "name": "stand-in",
            "options": {"baseURL": f"http://127.0.0.1:{port}/v1", "apiKey": "stand-in-no-key"},
            "models": {"stand-in": {"name": "stand-in", "tool_call": True}},
        }
    }
    config["model"] = "standin/stand-in"
    config["small_model"] = "standin/stand-in"
    config["autoupdate"] = False
    config["share"] = "disabled"
    with open(os.path.join(out, "work", "opencode.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2)
    env.update(OPENCODE_DISABLE_MODELS_FETCH="1", OPENCODE_DISABLE_AUTOUPDATE="1",
               OPENCODE_DISABLE_DEFAULT_PLUGINS="1", OPENCODE_DISABLE_LSP_DOWNLOAD="1")
    return [os.path.join(BIN, "opencode"), "run", "-m", "standin/stand-in", PROMPT]


# Set from the command line (main).
CODEX_MODEL = "stand-in"
CODEX_FEATURES = []

SETUP = {"codex": setup_codex, "claude": setup_claude, "opencode": setup_opencode,
         "claude-new": setup_claude_new, "gemini": setup_gemini, "gemini-http": setup_gemini_http,
         "qwen": setup_qwen, "agents-sdk": setup_agents_sdk}
# Servers a setup started (gemini-http's `stockade mcp --http`), stopped at the end.
STARTED = []


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--agent", choices=sorted(SETUP), required=True)
    p.add_argument("--scenario", default="basic")
    p.add_argument("--out", required=True)
    p.add_argument("--timeout", type=float, default=90)
    p.add_argument("--dump", action="store_true", help="keep every request the agent sent")
    p.add_argument("--codex-model", default="stand-in",
                   help="the model name Codex is configured with (a known name changes its tools)")
    p.add_argument("--codex-feature", action="append", default=[],
                   help="a Codex feature to switch on (e.g. code_mode); repeatable")
    a = p.parse_args()
    global CODEX_MODEL, CODEX_FEATURES
    CODEX_MODEL, CODEX_FEATURES = a.codex_model, a.codex_feature
    out = os.path.abspath(a.out)
    for d in ("home/.local/state", "work", "xdg/config", "xdg/data", "xdg/cache"):
        os.makedirs(os.path.join(out, d), exist_ok=True)
    record = os.path.join(out, "record.jsonl")
    open(record, "w").close()
    port_file = os.path.join(out, "standin.port")
    if os.path.exists(port_file):
        os.remove(port_file)
    standin = subprocess.Popen([sys.executable, os.path.join(HERE, "standin.py"), "--scenario", a.scenario,
                                "--record", record, "--port-file", port_file]
                               + (["--dump", os.path.join(out, "requests.jsonl")] if a.dump else []),
                               start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        while not os.path.exists(port_file):
            if time.monotonic() > deadline or standin.poll() is not None:
                raise SystemExit("the stand-in model did not start")
            time.sleep(0.05)
        with open(port_file) as f:
            port = int(f.read())
        env = {k: v for k, v in os.environ.items()
               if k in ("PATH", "LANG", "LC_ALL", "TERM", "CI")}
        env.update(
            HOME=os.path.join(out, "home"),
            XDG_CONFIG_HOME=os.path.join(out, "xdg/config"),
            XDG_DATA_HOME=os.path.join(out, "xdg/data"),
            # Where `stockade` keeps its state when nobody says (Codex passes its MCP servers
            # HOME but not XDG_*): out/home/.local/state/stockade either way.
            XDG_STATE_HOME=os.path.join(out, "home/.local/state"),
            XDG_CACHE_HOME=os.path.join(out, "xdg/cache"),
            NO_PROXY="127.0.0.1,localhost", no_proxy="127.0.0.1,localhost",
        )
        argv = SETUP[a.agent](out, port, env)
        started = time.monotonic()
        with open(os.path.join(out, "agent.stdout"), "wb") as so, open(os.path.join(out, "agent.stderr"), "wb") as se:
            agent = subprocess.Popen(argv, cwd=os.path.join(out, "work"), env=env, stdin=subprocess.DEVNULL,
                                     stdout=so, stderr=se, start_new_session=True)
            try:
                status = agent.wait(timeout=a.timeout)
            except subprocess.TimeoutExpired:
                status = "timeout"
            finally:
                # The agent's own process group (its MCP server and anything else it started that
                # stayed in it); Stockade's daemon is in a session of its own and is not touched.
                try:
                    os.killpg(agent.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                agent.wait()
        print(json.dumps({"agent": a.agent, "status": status, "seconds": round(time.monotonic() - started, 2),
                          "record": record, "port": port}))
    finally:
        for server in STARTED:
            try:
                os.killpg(server.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            server.wait()
        os.killpg(standin.pid, signal.SIGKILL)
        standin.wait()


if __name__ == "__main__":
    main()
