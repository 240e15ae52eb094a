#!/usr/bin/env python3
"""A scripted stand-in for a model, on loopback, for driving real coding agents in tests.

It speaks the four APIs the agents call (streaming SSE each, or one JSON answer when asked):
  * OpenAI Responses API  (POST /v1/responses)          - the Codex CLI
  * Anthropic Messages API (POST /v1/messages, .../count_tokens, HEAD /) - Claude Code
  * OpenAI Chat Completions (POST /v1/chat/completions) - opencode, Qwen Code, the Agents SDK
  * Gemini API (POST /v1beta/models/M:streamGenerateContent, :generateContent, :countTokens)
                                                         - Gemini CLI

Whatever the agent sends, the stand-in answers with the next step of a fixed script of calls to
Stockade's MCP tools, finding each tool under whatever name the agent gives it (it looks for a
tool whose name ends with the Stockade tool's name and mentions "stockade"). Arguments it cannot
know in advance (the session id, the cursor to read on from) are taken from the text the agent
handed back for the previous call, as a model would.

It records exactly what the agent hands back for every tool call (the whole tool-result payload
as the agent sent it, and the text a model reads from it) into a JSON-lines file, plus every
count_tokens request. Stdlib only; no network beyond the loopback socket it listens on.

Usage: standin.py --scenario basic|poll|codemode|grep|build|retry|seqhttp|terminal|order|order20|toolsearch --record FILE --port-file FILE
"""

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LOCK = threading.Lock()
ARGS = None


def record(entry):
    with LOCK, open(ARGS.record, "a", encoding="utf-8") as f:
        f.write(json.dumps(entry) + "\n")


# ---------------------------------------------------------------- the script


def last_id(text):
    """The session id the previous answer named (first `session_id=sh-N` or `ID sh-N`)."""
    m = re.search(r"session_id=(sh-\d+)", text) or re.search(r"\b(sh-\d+)\b", text)
    return m.group(1) if m else "sh-1"


def last_after(text):
    m = re.search(r"after=(\d+)", text)
    return int(m.group(1)) if m else 0


def basic_step(results):
    """exec (seq) -> cursor read -> grep -> PTY start -> PTY write -> kill -> background -> done."""
    n = len(results)
    prev = results[-1] if results else ""
    if n == 0:
        return ("exec_command", {"cmd": "seq 1 100000"})
    if n == 1:
        return ("read_output", {"session_id": last_id(prev), "after": last_after(prev)})
    if n == 2:
        first = results[0]
        return ("grep_output", {"session_id": last_id(first), "pattern": "^99999$"})
    if n == 3:
        return (
            "exec_command",
            {
                "cmd": "printf 'name? '; read line; echo \"got:$line\"; sleep 600",
                "tty": True,
                "yield_time_ms": 500,
            },
        )
    if n == 4:
        return ("write_stdin", {"session_id": last_id(prev), "chars": "hello\n", "yield_time_ms": 1000})
    if n == 5:
        return ("kill_session", {"session_id": last_id(results[3])})
    if n == 6:
        return (
            "exec_command",
            {"cmd": "echo survivor-started; sleep 600", "background": True, "source": "agent-survivor"},
        )
    return None


# A build log: 20 MiB of compiler-like lines over a few seconds (24 crates of 12,000 lines, a
# pause between crates), a warning per crate and an error at the end.
POLL_CMD = (
    "i=0; while [ $i -lt 24 ]; do i=$((i+1)); "
    "seq 1 12000 | sed \"s|.*|   Compiling crate-$i-& v0.1.0 (/src/crates/crate-$i/module_&.rs) ok|\"; "
    "echo \"warning: unused variable in crate-$i\"; sleep 0.25; done; "
    "echo 'error[E0308]: mismatched types'; exit 101"
)


def poll_step(results):
    """Start the build in the background, poll it (read_output with wait_ms) until it has
    ended, then grep the whole log for what matters."""
    n = len(results)
    if n == 0:
        return ("exec_command", {"cmd": POLL_CMD, "background": True, "yield_time_ms": 1000})
    prev = results[-1]
    sid = last_id(results[0])
    if re.search(r"\d+ matching lines? in sh-", prev):
        return None
    if "Exit code: " in prev:  # (Codex puts its own "Output:" right before it)
        return ("grep_output", {"session_id": sid, "pattern": "^(error|warning)", "max_matches": 50})
    if n > 500:
        return None
    return ("read_output", {"session_id": sid, "wait_ms": 10000})


# Codex's code mode (its `exec` tool: JavaScript in a V8 isolate that calls the MCP tools as
# `tools.mcp__stockade__…`): programs that run `seq 1 100000` through Stockade and hand the
# result back with `text(...)`, as a model writing code would: the whole result object, then
# its text content.
CODE_MODE_PROGRAMS = [
    'const r = await tools.mcp__stockade__exec_command({cmd: "seq 1 100000"});\ntext(r);\n',
    'const r = await tools.mcp__stockade__exec_command({cmd: "seq 1 100000"});\n'
    'text(r.content.map((c) => c.text).join(""));\n',
]


def codemode_step(results):
    if len(results) < len(CODE_MODE_PROGRAMS):
        return ("@exec", CODE_MODE_PROGRAMS[len(results)])
    return None


# A build of 3,000 lines, with 200 warnings among them and an error at the end.
BUILD_CMD = (
    "for i in $(seq 1 3000); do echo \"   Compiling unit $i of the workspace (src/unit_$i.rs)\"; "
    "[ $((i % 15)) -eq 0 ] && echo \"warning: unit $i: unused variable \\`x_$i\\`\"; done; "
    "echo 'error: build failed: 200 warnings treated as errors' >&2; exit 1"
)


def build_step(results):
    """exec of the 3,000-line build -> read its start from the notice's cursor -> done."""
    n = len(results)
    if n == 0:
        return ("exec_command", {"cmd": BUILD_CMD, "yield_time_ms": 30000})
    if n == 1:
        return ("read_output", {"session_id": last_id(results[0]), "after": 0})
    return None


def grep_step(results):
    """The build, then grep_output of its 200 warnings, then page on if the answer says how."""
    n = len(results)
    if n == 0:
        return ("exec_command", {"cmd": BUILD_CMD, "yield_time_ms": 30000})
    if n == 1:
        return ("grep_output", {"session_id": last_id(results[0]), "pattern": "^warning"})
    prev = results[-1]
    m = re.search(r"not shown: .*?read_output after=(\d+)", prev)
    if m and n == 2:
        return ("grep_output_after", int(m.group(1)))
    # Paging the log on from there, as each page's cursor line says, to its end.
    m = re.search(r"Cursor: next_cursor=(\d+) of total_bytes=(\d+)", prev)
    if n > 2 and m and int(m.group(1)) < int(m.group(2)) and n < 40:
        return ("grep_output_after", int(m.group(1)))
    return None


# A build that takes 8 s, asked for with a wait longer than the Agents SDK's 5 s timeout: the
# call times out in the SDK and the model, given no session id, asks again.
RETRY_CMD = "for i in 1 2 3 4 5 6 7 8; do echo step $i; sleep 1; done; echo RETRY-BUILD-DONE"


def retry_step(results):
    n = len(results)
    if n == 0 or (n == 1 and "sh-" not in results[0]):
        return ("exec_command", {"cmd": RETRY_CMD, "yield_time_ms": 4000 if n else 8000})
    if n > 8 or "RETRY-BUILD-DONE" in results[-1]:
        return None
    return ("read_output", {"session_id": last_id(results[-1]), "yield_time_ms": 4000})


def seqhttp_step(results):
    """Gemini CLI's own way: every call carries `wait_for_previous`."""
    if not results:
        return ("exec_command", {"cmd": "seq 1 100000", "wait_for_previous": True})
    return None


# What a terminal would have shown: both streams in write order, a build whose error (on stderr)
# is its last line, hostile bytes rendered, and a Python REPL stepped through on a terminal.
ALTERNATING_CMD = (
    "i=0; while [ $i -lt 1000 ]; do echo \"out $i\"; i=$((i+1)); "
    "echo \"err $i\" >&2; i=$((i+1)); done"
)
TERMINAL_BUILD_CMD = (
    "i=1; while [ $i -le 3000 ]; do echo \"compiling unit $i\"; i=$((i+1)); done; "
    "echo 'error: build failed' >&2; exit 1"
)
HOSTILE_CMD = (
    "head -c 1048576 /dev/zero | tr '\\0' 'x'; echo; "
    "printf '\\033[31mred\\033[0m plain\\n'; "
    "for p in 10 50 100; do printf '\\rprogress %s%%' $p; done; printf '\\n'; "
    "printf 'nul:\\000: bell:\\007:\\n'; printf 'bad:\\377\\376:\\n'; echo hostile-done"
)
REPL_STEPS = ["1+1\n", "print('hi')\n", "x = 6 * 7; x\n"]


def terminal_step(results):
    n = len(results)
    if n == 0:
        return ("exec_command", {"cmd": ALTERNATING_CMD, "yield_time_ms": 10000})
    if n == 1:
        return ("exec_command", {"cmd": TERMINAL_BUILD_CMD, "yield_time_ms": 10000})
    if n == 2:
        return ("exec_command", {"cmd": HOSTILE_CMD, "yield_time_ms": 10000})
    if n == 3:
        return ("exec_command", {"cmd": "python3 -i -q", "tty": True, "yield_time_ms": 10000,
                                 "until": "^>>> $"})
    if n < 4 + len(REPL_STEPS):
        return ("write_stdin", {"session_id": last_id(results[3]), "chars": REPL_STEPS[n - 4],
                                "yield_time_ms": 5000})
    if n == 4 + len(REPL_STEPS):
        return ("kill_session", {"session_id": last_id(results[3])})
    return None


# The order workloads, repeated in one conversation: 1,000 alternating stdout/stderr lines, then
# a 3,000-line build whose error is on stderr, with the daemon this agent's `stockade mcp` talks
# to SIGSTOPped for 2 s in the middle of it (the build touches a marker file halfway and pauses;
# a thread here stops the daemon when the marker appears, so the build's second half and its
# error are written while nobody reads). Each rep's commands name the rep, so the tests can find
# its sessions. `order` is one rep, `order20` twenty.
def order_alternating_cmd(rep):
    return f"REP={rep}; " + ALTERNATING_CMD


def order_build_cmd(rep):
    mark = os.path.join(os.path.dirname(os.path.abspath(ARGS.record)), f"order-mark-{rep}")
    return (f"REP={rep}; i=1; while [ $i -le 3000 ]; do echo \"compiling unit $i\"; "
            f"if [ $i = 1500 ]; then touch '{mark}'; sleep 0.3; fi; i=$((i+1)); done; "
            "echo 'error: build failed' >&2; exit 1")


STOPPERS = set()


def daemon_pid():
    """The pid of the daemon of this run's state directory, as `stockade daemon status` says."""
    out = os.path.dirname(os.path.abspath(ARGS.record))
    env = dict(os.environ, STOCKADE_HOME=os.path.join(out, "home", ".local", "state", "stockade"))
    status = subprocess.run(["stockade", "daemon", "status", "--json"], env=env,
                            capture_output=True, timeout=30)
    return json.loads(status.stdout or b"{}").get("pid")


def stop_daemon_at_mark(rep):
    """Once the rep's build has touched its marker, SIGSTOP the daemon for 2 s (recorded)."""
    with LOCK:
        if rep in STOPPERS:
            return
        STOPPERS.add(rep)
    mark = os.path.join(os.path.dirname(os.path.abspath(ARGS.record)), f"order-mark-{rep}")

    def run():
        pid = daemon_pid()
        deadline = time.monotonic() + 120
        while pid and not os.path.exists(mark) and time.monotonic() < deadline:
            time.sleep(0.005)
        if not pid or not os.path.exists(mark):
            record({"kind": "stop_missed", "rep": rep, "pid": pid})
            return
        started = time.monotonic()
        os.kill(pid, signal.SIGSTOP)
        try:
            time.sleep(2)
        finally:
            os.kill(pid, signal.SIGCONT)
        record({"kind": "stopped", "rep": rep, "pid": pid, "seconds": round(time.monotonic() - started, 3)})

    threading.Thread(target=run, daemon=True).start()


def order_step(results, reps):
    n = len(results)
    if n >= 2 * reps:
        return None
    rep = n // 2
    if n % 2 == 0:
        return ("exec_command", {"cmd": order_alternating_cmd(rep), "yield_time_ms": 20000})
    stop_daemon_at_mark(rep)
    return ("exec_command", {"cmd": order_build_cmd(rep), "yield_time_ms": 20000})


SCENARIOS = {"basic": basic_step, "poll": poll_step, "codemode": codemode_step,
             "build": build_step, "grep": grep_step, "retry": retry_step, "seqhttp": seqhttp_step,
             "terminal": terminal_step, "order": lambda r: order_step(r, 1),
             "order20": lambda r: order_step(r, 20), "toolsearch": lambda r: None}

SHORT_NAMES = ("exec_command", "write_stdin", "read_output", "grep_output", "kill_session", "list_sessions")


def find_tool(names, short):
    for name in names:
        if name.endswith(short) and "stockade" in name:
            return name
    # Agents that give MCP tools their own names (Gemini CLI, Qwen Code, the Agents SDK).
    for name in names:
        if name == short:
            return name
    return None


def offers_stockade(names):
    return any("stockade" in n or n in SHORT_NAMES for n in names)


# ---------------------------------------------------------------- reading a request


def text_of(content):
    """The text a model reads from a tool-result payload: a string as is; content parts joined."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict):
                parts.append(part.get("text") or part.get("output") or "")
            else:
                parts.append(str(part))
        return "".join(parts)
    return json.dumps(content)


NAMESPACED = {}


def tool_names(tools):
    """Every tool name in a request's tool list. Codex nests an MCP server's tools in a namespace
    (`mcp__stockade` holding `exec_command`, …): those are named `mcp__stockade__exec_command`
    here and remembered, so the call can name the namespace and the tool apart."""
    out = []

    def walk(t, ns):
        if isinstance(t, dict):
            if isinstance(t.get("functionDeclarations"), list):  # the Gemini API
                walk(t["functionDeclarations"], ns)
                return
            name = t.get("name") or (t.get("function") or {}).get("name")
            if t.get("type") == "namespace" and isinstance(t.get("tools"), list):
                for sub in t["tools"]:
                    walk(sub, name)
                return
            if isinstance(name, str):
                if ns:
                    full = f"{ns}__{name}"
                    NAMESPACED[full] = (ns, name)
                    out.append(full)
                else:
                    out.append(name)
        elif isinstance(t, list):
            for sub in t:
                walk(sub, ns)

    walk(tools or [], None)
    return out


def results_responses(body):
    """(call_id, payload) of every tool output in a Responses API request, in order."""
    out = []
    for item in body.get("input") or []:
        if isinstance(item, dict) and item.get("type") in ("function_call_output", "custom_tool_call_output"):
            out.append((item.get("call_id"), item.get("output")))
    return out


def results_anthropic(body):
    out = []
    for msg in body.get("messages") or []:
        content = msg.get("content")
        if isinstance(content, list):
            for block in content:
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    out.append((block.get("tool_use_id"), block.get("content")))
    return out


def results_chat(body):
    out = []
    for msg in body.get("messages") or []:
        if msg.get("role") == "tool":
            out.append((msg.get("tool_call_id"), msg.get("content")))
    return out


SEEN = set()

# Deferred tools (Qwen Code's tool_search/tool_call, Claude Code's ToolSearch): the words a model
# would search with for each tool, the call ids of those searches, and the names they found.
SEARCH_WORDS = {"exec_command": "run shell command", "read_output": "read command output",
                "grep_output": "search command output", "write_stdin": "send input to running command",
                "kill_session": "kill running command", "list_sessions": "list shell sessions"}
SEARCHES = {}
FOUND = {}
# The `toolsearch` scenario: only searches, each with the words a model would use for a tool it
# has not seen yet, each recorded with what the agent's own search ranked first.
TOOLSEARCH_QUERIES = [
    ("send input to a running process", "write_stdin"),
    ("type into an interactive prompt", "write_stdin"),
    ("answer a REPL prompt", "write_stdin"),
    ("stop a running command", "kill_session"),
    ("cancel a running job", "kill_session"),
    ("terminate a process", "kill_session"),
    ("run a shell command", "exec_command"),
    ("read the output of a command", "read_output"),
    ("search command output", "grep_output"),
    ("list running sessions", "list_sessions"),
]
QUERIES = {}


def search_key(call_id):
    """A call id as the script made it, without the prefix an API adds."""
    for prefix in ("toolu_", "fc_"):
        if isinstance(call_id, str) and call_id.startswith(prefix):
            return call_id[len(prefix):]
    return call_id


def search_tool(names):
    for name in names:
        if name.lower().replace("_", "") == "toolsearch":
            return name
    return None


def next_action(api, body, results):
    names = tool_names(body.get("tools"))
    for call_id, payload in results:
        short = SEARCHES.get(search_key(call_id))
        query = QUERIES.get(search_key(call_id), SEARCH_WORDS.get(short))
        if short and (short not in FOUND or ARGS.scenario == "toolsearch") and search_key(call_id) not in SEEN:
            SEEN.add(search_key(call_id))
            text = text_of(payload)
            # The tools the search returned, best first: Claude Code's tool references,
            # declarations as JSON (Qwen Code), or bare names.
            refs = [p.get("tool_name") for p in payload if isinstance(p, dict) and p.get("tool_name")] \
                if isinstance(payload, list) else []
            ranked = refs or re.findall(r'"name"\s*:\s*"([^"]+)"', text) \
                or re.findall(r"\b(\S*" + short + r")\b", text)
            FOUND[short] = next((n for n in ranked if n.endswith(short)), None)
            record({"kind": "search", "wanted": short, "query": query, "ranked": ranked,
                    "found": FOUND[short], "first_try": bool(ranked) and ranked[0].endswith(short)})
    results = [(c, p) for c, p in results if search_key(c) not in SEARCHES]
    texts = [text_of(p) for _, p in results]
    for i, (call_id, payload) in enumerate(results):
        key = (api, call_id)
        with LOCK:
            new = key not in SEEN
            SEEN.add(key)
        if new:
            record({"kind": "tool_result", "api": api, "index": i, "call_id": call_id,
                    "payload": payload, "text": texts[i], "t": time.monotonic()})
    if not offers_stockade(names) and not search_tool(names):
        return None, "ok"
    with LOCK:
        first = "tools" not in SEEN
        SEEN.add("tools")
    if first:
        record({"kind": "tools", "api": api, "names": names})
    if ARGS.scenario == "toolsearch":
        searcher = search_tool(names)
        if searcher is None:
            record({"kind": "missing_tool", "api": api, "wanted": "ToolSearch", "names": names})
            return None, "done"
        if len(SEARCHES) >= len(TOOLSEARCH_QUERIES):
            return None, "done"
        query, short = TOOLSEARCH_QUERIES[len(SEARCHES)]
        call_id = f"search_{len(SEARCHES)}"
        SEARCHES[call_id], QUERIES[call_id] = short, query
        return (searcher, {"query": query}, call_id), None
    step = SCENARIOS[ARGS.scenario](texts)
    if step is None:
        return None, "done"
    short, args = step
    if short == "grep_output_after":
        # Paging on as the notice said: read the log from the offset it named.
        short, args = "read_output", {"session_id": last_id(texts[0]), "after": args, "max_lines": 400}
    # "@exec": Codex's own code-mode tool (a custom tool taking source text), offered only with
    # its code_mode feature.
    name = short[1:] if short.startswith("@") and short[1:] in names else find_tool(names, short)
    searcher = search_tool(names)
    if name is None and searcher and short not in FOUND:
        # Deferred: search for it first, with the words a model would use.
        call_id = f"search_{len(SEARCHES)}"
        SEARCHES[call_id] = short
        return (searcher, {"query": SEARCH_WORDS[short]}, call_id), None
    if name is None and FOUND.get(short) and "tool_call" in names:
        record({"kind": "call", "api": api, "index": len(results), "tool": FOUND[short], "arguments": args})
        return ("tool_call", {"name": FOUND[short], "arguments": args}, f"call_{len(results)}"), None
    if name is None and FOUND.get(short):
        name = FOUND[short]
    if name is None:
        record({"kind": "missing_tool", "api": api, "wanted": short, "names": names})
        return None, "done"
    record({"kind": "call", "api": api, "index": len(results), "tool": name, "arguments": args,
            "t": time.monotonic()})
    return (name, args, f"call_{len(results)}"), None


# ---------------------------------------------------------------- answering


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def do_HEAD(self):
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_GET(self):
        body = b"{}"
        if self.path.rstrip("/").endswith("/models"):
            body = json.dumps({"object": "list", "data": [{"id": "stand-in", "object": "model"}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = {}
        path = self.path.split("?")[0]
        if ARGS.dump:
            with LOCK, open(ARGS.dump, "a", encoding="utf-8") as f:
                f.write(json.dumps({"path": path, "body": body}) + "\n")
        if path.endswith("/messages/count_tokens"):
            text = json.dumps(body.get("messages"))
            # Pessimistic: 1 token per 3 bytes of what was sent (the real tokenizer is not here).
            tokens = len(text) // 3 + 1
            record({"kind": "count_tokens", "bytes": len(text), "answered_tokens": tokens})
            return self.json({"input_tokens": tokens})
        if path.endswith("/responses"):
            return self.openai_responses(body)
        if path.endswith("/messages"):
            return self.anthropic(body)
        if path.endswith("/chat/completions"):
            return self.chat(body)
        if ":countTokens" in path:
            return self.json({"totalTokens": len(raw) // 4 + 1})
        if ":streamGenerateContent" in path or ":generateContent" in path:
            return self.gemini(body, stream=":streamGenerateContent" in path)
        record({"kind": "unknown_path", "path": path})
        self.json({"error": {"message": f"stand-in does not serve {path}"}}, 404)

    def json(self, obj, status=200):
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def sse(self, events):
        """events: list of (event name or None, data object or string)."""
        chunks = []
        for name, data in events:
            s = data if isinstance(data, str) else json.dumps(data)
            chunks.append((f"event: {name}\n" if name else "") + f"data: {s}\n\n")
        data = "".join(chunks).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    # -- OpenAI Responses API (Codex)
    def openai_responses(self, body):
        action, text = next_action("responses", body, results_responses(body))
        rid = f"resp_{len(SEEN)}"
        if action:
            name, args, call_id = action
            item = {"type": "function_call", "id": "fc_" + call_id, "call_id": call_id,
                    "name": name, "arguments": json.dumps(args)}
            if isinstance(args, str):
                item = {"type": "custom_tool_call", "id": "ctc_" + call_id, "call_id": call_id,
                        "name": name, "input": args}
            elif name in NAMESPACED:
                item["namespace"], item["name"] = NAMESPACED[name]
        else:
            item = {"type": "message", "role": "assistant", "id": "msg_" + rid,
                    "content": [{"type": "output_text", "text": text}]}
        usage = {"input_tokens": 0, "input_tokens_details": None, "output_tokens": 0,
                 "output_tokens_details": None, "total_tokens": 0}
        self.sse([
            ("response.created", {"type": "response.created", "response": {"id": rid}}),
            ("response.output_item.done", {"type": "response.output_item.done", "item": item}),
            ("response.completed", {"type": "response.completed", "response": {"id": rid, "usage": usage}}),
        ])

    # -- Anthropic Messages API (Claude Code)
    def anthropic(self, body):
        action, text = next_action("anthropic", body, results_anthropic(body))
        mid = f"msg_{len(SEEN)}"
        model = body.get("model", "stand-in")
        usage = {"input_tokens": 1, "output_tokens": 1}
        if action:
            name, args, call_id = action
            block = {"type": "tool_use", "id": "toolu_" + call_id, "name": name, "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(args)}
            stop = "tool_use"
        else:
            block = {"type": "text", "text": ""}
            delta = {"type": "text_delta", "text": text}
            stop = "end_turn"
        if not body.get("stream"):
            content = [dict(block, input=args) if action else {"type": "text", "text": text}]
            return self.json({"id": mid, "type": "message", "role": "assistant", "model": model,
                              "content": content, "stop_reason": stop, "stop_sequence": None,
                              "usage": usage})
        self.sse([
            ("message_start", {"type": "message_start", "message": {
                "id": mid, "type": "message", "role": "assistant", "model": model, "content": [],
                "stop_reason": None, "stop_sequence": None, "usage": usage}}),
            ("content_block_start", {"type": "content_block_start", "index": 0, "content_block": block}),
            ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}),
            ("content_block_stop", {"type": "content_block_stop", "index": 0}),
            ("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                               "usage": {"output_tokens": 1}}),
            ("message_stop", {"type": "message_stop"}),
        ])

    # -- OpenAI Chat Completions (opencode)
    def chat(self, body):
        action, text = next_action("chat", body, results_chat(body))
        cid = f"chatcmpl_{len(SEEN)}"
        base = {"id": cid, "object": "chat.completion.chunk", "created": 0, "model": body.get("model", "m")}
        if action:
            name, args, call_id = action
            delta = {"role": "assistant", "tool_calls": [{"index": 0, "id": call_id, "type": "function",
                                                          "function": {"name": name, "arguments": json.dumps(args)}}]}
            finish = "tool_calls"
        else:
            delta = {"role": "assistant", "content": text}
            finish = "stop"
        usage = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
        if not body.get("stream"):
            message = {"role": "assistant", "content": delta.get("content"),
                       "tool_calls": delta.get("tool_calls")}
            if action:
                message["tool_calls"][0].pop("index", None)
            return self.json({"id": cid, "object": "chat.completion", "created": 0,
                              "model": body.get("model", "m"), "usage": usage,
                              "choices": [{"index": 0, "message": message, "finish_reason": finish}]})
        self.sse([
            (None, dict(base, choices=[{"index": 0, "delta": delta, "finish_reason": None}])),
            (None, dict(base, choices=[{"index": 0, "delta": {}, "finish_reason": finish}], usage=usage)),
            (None, "[DONE]"),
        ])


    # -- Gemini API (Gemini CLI)
    def gemini(self, body, stream):
        config = body.get("generationConfig") or {}
        if config.get("responseMimeType") == "application/json" or config.get("responseJsonSchema"):
            # The CLI's own side questions (who speaks next, is it looping): never the script.
            text = json.dumps({"reasoning": "the script is done", "next_speaker": "user",
                               "is_stuck": False})
            parts = [{"text": text}]
        else:
            action, text = next_action("gemini", body, results_gemini(body))
            if action:
                name, args, call_id = action
                parts = [{"functionCall": {"name": name, "args": args, "id": call_id}}]
            else:
                parts = [{"text": text}]
        answer = {"candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP",
                                  "index": 0}],
                  "usageMetadata": {"promptTokenCount": 1, "candidatesTokenCount": 1, "totalTokenCount": 2},
                  "modelVersion": "stand-in"}
        if stream:
            return self.sse([(None, answer)])
        return self.json(answer)


def results_gemini(body):
    """(call id, payload) of every function response in a Gemini API request, in order."""
    out = []
    for content in body.get("contents") or []:
        for part in content.get("parts") or []:
            fr = part.get("functionResponse") if isinstance(part, dict) else None
            if fr is not None:
                response = fr.get("response")
                if isinstance(response, dict):
                    response = response.get("output", response.get("content", response))
                out.append((fr.get("id") or f"{fr.get('name')}_{len(out)}", response))
    return out


def main():
    global ARGS
    p = argparse.ArgumentParser()
    p.add_argument("--scenario", choices=sorted(SCENARIOS), default="basic")
    p.add_argument("--record", required=True)
    p.add_argument("--port-file", required=True)
    p.add_argument("--dump", help="also append every request (path and body) to this file")
    ARGS = p.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    with open(ARGS.port_file + ".tmp", "w") as f:
        f.write(str(server.server_address[1]))
    os.replace(ARGS.port_file + ".tmp", ARGS.port_file)
    sys.stdout.flush()
    server.serve_forever()


if __name__ == "__main__":
    main()
