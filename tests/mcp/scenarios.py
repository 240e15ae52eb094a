"""MCP scenarios against `stockade mcp`, driven with the official MCP Python SDK (`mcp`).

Run by crates/stockade/tests/it/mcp_python.rs with the venv scripts/test installs:

    target/mcp-venv/bin/python tests/mcp/scenarios.py SCENARIO --stockade BIN --home DIR
    target/mcp-venv/bin/python tests/mcp/scenarios.py SCENARIO --url URL --token T

Each scenario asserts what an agent relies on and prints `ok SCENARIO` on success; any failure
is a traceback and exit status 1. Every wait is bounded.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from typing import Any

import anyio
import httpx2
from mcp import ClientSession, MCPError, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

SCENARIO_TIMEOUT_S = 120
TOOLS = ["exec_command", "write_stdin", "read_output", "grep_output", "kill_session", "list_sessions"]
BIG = 20 * 1024 * 1024  # `yes X | head -c 20971520`


@contextlib.asynccontextmanager
async def connect(args: argparse.Namespace):
    """An initialized ClientSession over stdio (spawning `stockade mcp`) or streamable HTTP."""
    if args.url:
        headers = {"Authorization": f"Bearer {args.token}"} if args.token else {}
        http = httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0, read=300.0))
        async with http, streamable_http_client(args.url, http_client=http) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                yield session
    else:
        params = StdioServerParameters(
            command=args.stockade, args=["--home", args.home, "mcp", "--structured", *args.mcp_arg]
        )
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                yield session


def text_of(result: Any) -> str:
    assert result.content, f"no content: {result}"
    assert result.content[0].type == "text", result.content[0]
    return result.content[0].text


async def call(session: ClientSession, tool: str, arguments: dict[str, Any]) -> tuple[str, dict]:
    """Call a tool that must succeed; return its text and structured content."""
    result = await session.call_tool(tool, arguments)
    text = text_of(result)
    assert not result.is_error, f"{tool}({arguments}) failed: {text}"
    assert isinstance(result.structured_content, dict), f"{tool}: no structuredContent"
    return text, result.structured_content


async def call_error(session: ClientSession, tool: str, arguments: dict[str, Any]) -> str:
    """Call a tool that must answer with a tool error (isError); return its sentence."""
    result = await session.call_tool(tool, arguments)
    text = text_of(result)
    assert result.is_error, f"{tool}({arguments}) should have failed: {text}"
    return text


async def basic(session: ClientSession) -> None:
    listed = await session.list_tools()
    names = [t.name for t in listed.tools]
    assert names == TOOLS, names
    for tool in listed.tools:
        assert tool.description and len(tool.description) > 100, tool.name
        assert tool.output_schema and tool.output_schema.get("type") == "object", tool.name
        assert tool.input_schema.get("type") == "object", tool.name
    exec_tool = next(t for t in listed.tools if t.name == "exec_command")
    assert "head" in exec_tool.description and "read_output" in exec_tool.description
    assert exec_tool.input_schema["required"] == ["cmd"]

    text, out = await call(session, "exec_command", {"cmd": "echo hello from mcp"})
    assert text.startswith("Exit code: 0\nWall time: "), text
    assert text.endswith("Output:\nhello from mcp\n"), text
    assert out["state"] == "exited" and out["code"] == 0, out
    assert out["output"] == "hello from mcp\n" and out["total_bytes"] == 15, out

    # A failing command is an answer, not a tool error.
    text, out = await call(session, "exec_command", {"cmd": "echo oops >&2; exit 3"})
    assert text.startswith("Exit code: 3\n"), text
    assert "oops" in text

    # Still running after yield_time_ms: a session to follow, then kill.
    text, out = await call(session, "exec_command", {"cmd": "sleep 60", "yield_time_ms": 200})
    sid = out["id"]
    assert text.startswith(f"Process running with session ID {sid}\n"), text
    assert out["state"] == "running", out
    text, listed_sessions = await call(session, "list_sessions", {})
    assert any(s["id"] == sid and s["state"] == "running" for s in listed_sessions["sessions"])
    assert sid in text
    text, killed = await call(session, "kill_session", {"session_id": sid})
    assert killed["report"]["terminated"] is True and killed["report"]["survivors"] == [], killed
    assert killed["state"] == "killed", killed
    assert "none left" in text, text

    # Tool errors the model can act on.
    msg = await call_error(session, "read_output", {"session_id": "sh-999"})
    assert "list_sessions" in msg, msg
    msg = await call_error(session, "grep_output", {"session_id": sid, "pattern": "("})
    assert "regex" in msg.lower(), msg
    # An argument the tool does not take is ignored and named, not refused (agents add their own).
    result = await session.call_tool("exec_command", {"cmd": "true", "no_such_arg": 1})
    msg = text_of(result)
    assert not result.is_error and "does not take no_such_arg; ignored" in msg, msg

    # An unknown tool is a protocol error.
    try:
        await session.call_tool("no_such_tool", {})
    except MCPError as e:
        assert "no_such_tool" in str(e), e
    else:
        raise AssertionError("calling an unknown tool should be a JSON-RPC error")


def strip_notices(text: str) -> str:
    return "".join(l for l in text.splitlines(keepends=True) if not l.startswith("[…"))


async def big(session: ClientSession) -> None:
    text, out = await call(
        session,
        "exec_command",
        {"cmd": f"yes X | head -c {BIG}", "background": True, "yield_time_ms": 0},
    )
    sid = out["id"]
    assert text.startswith(f"Process running with session ID {sid}") or text.startswith(
        "Exit code: 0"
    ), text

    # Page through everything by cursor: nothing lost, nothing repeated.
    cursor, covered, xs, pages = 0, 0, 0, 0
    while True:
        pages += 1
        assert pages < 200, "reading 20 MiB by cursor should take ~80 pages of 256 KiB"
        text, r = await call(
            session,
            "read_output",
            {
                "session_id": sid,
                "after": cursor,
                "max_output_tokens": 65_536,
                "max_lines": 1_000_000,
                "wait_ms": 5_000,
            },
        )
        assert r["start_cursor"] == cursor, (r["start_cursor"], cursor)
        assert r["next_cursor"] >= cursor, r
        body = strip_notices(r["output"])
        assert set(body) <= {"X", "\n"}, body[:200]
        xs += body.count("X")
        covered += r["next_cursor"] - cursor
        cursor = r["next_cursor"]
        if r["state"] != "running" and cursor == r["total_bytes"]:
            break
    assert r["state"] == "exited" and r["code"] == 0, r
    assert r["total_bytes"] == BIG, r["total_bytes"]
    assert r["total_lines"] == BIG // 2, r["total_lines"]
    assert covered == BIG, covered
    assert xs == BIG // 2, xs
    assert f"session ID {sid}" not in text  # finished: the status line is the exit code

    # The tail is bounded and says how to get the rest (without `mode`, a read continues where
    # this connection's last answer ended).
    text, r = await call(session, "read_output", {"session_id": sid, "mode": "tail"})
    assert len(text) < 64 * 1024, len(text)
    assert r["truncated"] is True
    assert f"read_output session_id={sid}" in text, text[-400:]

    text, r = await call(session, "read_output", {"session_id": sid, "mode": "head", "max_output_tokens": 4})
    assert r["output"].startswith("X\n"), r["output"]

    # grep streams the whole log from disk.
    text, g = await call(
        session, "grep_output", {"session_id": sid, "pattern": "^X$", "max_matches": 5}
    )
    assert g["matches"] == 5 and g["truncated"] is True, g
    assert [l["line_number"] for l in g["lines"]] == [1, 2, 3, 4, 5], g["lines"]
    assert [l["offset"] for l in g["lines"]] == [0, 2, 4, 6, 8], g["lines"]
    assert "1:0:X" in text, text
    text, g = await call(session, "grep_output", {"session_id": sid, "pattern": "Y"})
    assert g["matches"] == 0 and g["truncated"] is False, g


async def pty(session: ClientSession) -> None:
    text, out = await call(
        session,
        "exec_command",
        {"cmd": "python3 -i -q", "tty": True, "yield_time_ms": 1000},
    )
    sid = out["id"]
    assert text.startswith(f"Process running with session ID {sid}"), text
    text, w = await call(
        session, "write_stdin", {"session_id": sid, "chars": "print(6*7)\n", "yield_time_ms": 1000}
    )
    seen = w["output"]
    cursor = w["next_cursor"]
    with anyio.fail_after(20):
        while "42" not in seen:
            _, r = await call(
                session, "read_output", {"session_id": sid, "after": cursor, "wait_ms": 1000}
            )
            seen += r["output"]
            cursor = r["next_cursor"]
    text, killed = await call(session, "kill_session", {"session_id": sid})
    assert killed["report"]["terminated"] is True, killed


async def restart_start(session: ClientSession) -> None:
    _, out = await call(
        session,
        "exec_command",
        {"cmd": "echo started; sleep 120", "background": True, "source": "restart-test"},
    )
    assert out["state"] == "running", out
    print(f"session {out['id']}")


async def restart_check(session: ClientSession) -> None:
    _, listed = await call(session, "list_sessions", {})
    running = [s for s in listed["sessions"] if s["source"] == "restart-test"]
    assert len(running) == 1 and running[0]["state"] == "running", listed
    sid = running[0]["id"]
    text, r = await call(session, "read_output", {"session_id": sid, "after": 0, "wait_ms": 2000})
    assert r["output"].startswith("started\n"), r
    # The same source does not start a second copy.
    _, again = await call(
        session,
        "exec_command",
        {"cmd": "echo started; sleep 120", "background": True, "source": "restart-test"},
    )
    assert again["id"] == sid and again["deduplicated"] is True, again
    _, killed = await call(session, "kill_session", {"session_id": sid})
    assert killed["report"]["terminated"] is True, killed


SCENARIOS = {
    "basic": basic,
    "big": big,
    "pty": pty,
    "restart-start": restart_start,
    "restart-check": restart_check,
}


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("scenario", choices=sorted(SCENARIOS))
    parser.add_argument("--stockade", help="the stockade binary (stdio transport)")
    parser.add_argument("--home", help="--home for `stockade mcp` (stdio transport)")
    parser.add_argument("--mcp-arg", action="append", default=[], help="extra `stockade mcp` argument")
    parser.add_argument("--url", help="streamable HTTP endpoint, e.g. http://127.0.0.1:8765/mcp")
    parser.add_argument("--token", help="bearer token for --url")
    args = parser.parse_args()
    if not args.url and not (args.stockade and args.home):
        parser.error("give --url, or --stockade and --home")
    with anyio.fail_after(SCENARIO_TIMEOUT_S):
        async with connect(args) as session:
            await SCENARIOS[args.scenario](session)
    print(f"ok {args.scenario}")


if __name__ == "__main__":
    anyio.run(main)
    sys.exit(0)
