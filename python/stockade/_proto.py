"""What the sync and asyncio clients share: the answers as typed values, and the request
parameters of docs/protocol.md built from the clients' keyword arguments."""

from __future__ import annotations

import base64
import os
import uuid
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Tuple, Union

from ._errors import CommandFailed, ConnectionLost, StockadeError, TimeoutExpired

#: The daemon clamps a long poll to 300 s; longer waits are made of slices this long.
MAX_SLICE_S = 300.0
#: Largest raw read the daemon answers in one call in base64.
RAW_CHUNK = 4 * 1024 * 1024
#: Largest raw read asked for in the binary form (the bytes follow the answer unencoded).
BINARY_CHUNK = 16 * 1024 * 1024
#: Terminal states (everything but ``running``).
RUNNING = "running"


@dataclass(frozen=True)
class RunResult:
    """The answer of ``run`` (a foreground command) or the state of a started session."""

    id: str
    command: str
    state: str
    #: The exit code; ``-N`` when ended by signal N (as ``subprocess``); None otherwise.
    returncode: Optional[int]
    #: The daemon's bounded view of the output (stdout and stderr merged), the tail by default.
    output: str
    truncated: bool
    #: What the view left out (``omitted_bytes``, ``after``, …) when ``truncated``.
    notice: Optional[Dict[str, Any]]
    next_cursor: int
    total_bytes: int
    spool_path: Optional[str]
    #: The whole answer of the daemon.
    raw: Dict[str, Any] = field(repr=False)


@dataclass(frozen=True)
class Chunk:
    """Exact bytes of the output from a cursor (``Session.read``)."""

    data: bytes
    next_cursor: int
    state: str
    total_bytes: int
    #: The session has ended and every byte up to ``total_bytes`` has been read.
    eof: bool


@dataclass(frozen=True)
class WaitResult:
    """How ``Session.wait`` ended: the session's state, and the line that matched ``until``."""

    state: str
    returncode: Optional[int]
    #: ``"exit"`` (the session ended) or ``"match"`` (a line matched ``until``).
    ended_by: str
    matched: Optional[str]
    #: The cursor just after the matched line (read on from there), else the end.
    cursor: int


@dataclass(frozen=True)
class GrepLine:
    """One line of a ``grep`` answer: a match or a context line."""

    line_number: int
    offset: int
    text: str
    is_match: bool


def returncode(answer: Mapping[str, Any]) -> Optional[int]:
    state = answer.get("state")
    if state == "exited":
        return int(answer.get("code", 0))
    if state == "signaled":
        return -int(answer.get("signal", 0))
    return None


def run_result(answer: Dict[str, Any], command: str) -> RunResult:
    return RunResult(
        id=str(answer.get("id", "")),
        command=command,
        state=str(answer.get("state", "")),
        returncode=returncode(answer),
        output=str(answer.get("output", "")),
        truncated=bool(answer.get("truncated", False)),
        notice=answer.get("notice"),
        next_cursor=int(answer.get("next_cursor", 0)),
        total_bytes=int(answer.get("total_bytes", 0)),
        spool_path=answer.get("spool_path"),
        raw=answer,
    )


def check_run(result: RunResult, check: bool) -> RunResult:
    """``subprocess.run`` semantics: a timed-out run raises, ``check`` raises on failure."""
    if result.state == "timed_out":
        raise TimeoutExpired(
            f"{result.command!r} ({result.id}) timed out and was terminated", result
        )
    if check and result.returncode != 0:
        how = (
            f"exited with status {result.returncode}"
            if result.state == "exited"
            else f"ended {result.state}"
            + (f" ({result.raw.get('reason')})" if result.raw.get("reason") else "")
        )
        raise CommandFailed(f"{result.command!r} ({result.id}) {how}", result)
    return result


def ms(seconds: Optional[float]) -> Optional[int]:
    return None if seconds is None else max(0, int(round(seconds * 1000)))


PathArg = Union[str, "os.PathLike[str]"]


def _need(ok: bool, what: str, value: Any) -> None:
    """Raise a ``TypeError`` naming the argument when ``ok`` is false."""
    if not ok:
        raise TypeError(f"{what}, not {type(value).__name__} {value!r}")


def check_args(command: Any, cwd: Any, env: Any, timeout: Any, shell: Any = None,
               max_bytes: Any = None) -> None:
    """The arguments every start shares, checked with a sentence naming the wrong one."""
    _need(isinstance(command, str), "command must be a str (a shell command line)", command)
    _need(cwd is None or isinstance(cwd, (str, os.PathLike)),
          "cwd must be a str or os.PathLike (a directory)", cwd)
    _need(env is None or isinstance(env, Mapping), "env must be a mapping of str to str", env)
    if env is not None:
        for k, v in env.items():
            if not isinstance(k, str) or not isinstance(v, str):
                raise TypeError(f"env must map str to str, not {type(k).__name__} {k!r} to "
                                f"{type(v).__name__} {v!r}")
    _need(timeout is None or (isinstance(timeout, (int, float)) and not isinstance(timeout, bool)),
          "timeout must be a number of seconds or None", timeout)
    if timeout is not None and timeout <= 0:
        raise ValueError(f"timeout must be a positive number of seconds, not {timeout!r}")
    _need(shell is None or isinstance(shell, str), "shell must be a str (a path) or None", shell)
    _need(max_bytes is None or (isinstance(max_bytes, int) and not isinstance(max_bytes, bool)),
          "max_bytes must be an int or None", max_bytes)
    if max_bytes is not None and max_bytes <= 0:
        raise ValueError(f"max_bytes must be a positive number of bytes, not {max_bytes!r}")


def caller_cwd(cwd: Optional[PathArg]) -> str:
    """Where a local command runs: ``cwd`` resolved against this process's directory (as
    ``subprocess`` does), else this process's directory."""
    here = os.getcwd()
    return here if cwd is None else os.path.join(here, os.fspath(cwd))


def run_params(
    command: str,
    *,
    background: bool,
    cwd: Optional[PathArg],
    env: Optional[Mapping[str, str]],
    timeout: Optional[float],
    local: bool,
    shell: Optional[str] = None,
    max_bytes: Optional[int] = None,
    pty: Optional[Tuple[int, int]] = None,
    stdin: bool = False,
    until: Optional[str] = None,
    wait: Optional[float] = None,
) -> Dict[str, Any]:
    """A ``run`` request. A local daemon runs the command in this process's directory and
    environment (``env`` on top), as ``subprocess`` and the CLI do; a remote one in its own."""
    check_args(command, cwd, env, timeout, shell, max_bytes)
    params: Dict[str, Any] = {"command": command}
    if background:
        params["background"] = True
    if local:
        params["cwd"] = caller_cwd(cwd)
        params["base_env"] = dict(os.environ)
    elif cwd is not None:
        params["cwd"] = os.fspath(cwd)
    if env is not None:
        params["env"] = {str(k): str(v) for k, v in env.items()}
    if timeout is not None:
        params["timeout_ms"] = ms(timeout)
    if shell is not None:
        params["shell"] = shell
    if max_bytes is not None:
        params["max_bytes"] = max_bytes
    if pty is not None:
        rows, cols = pty
        params["pty"] = {"rows": int(rows), "cols": int(cols)}
    if stdin:
        params["stdin"] = "pipe"
    if until is not None:
        params["until"] = until
    if wait:
        params["yield_ms"] = ms(min(wait, MAX_SLICE_S))
    return params


def replay_params(params: Mapping[str, Any]) -> Dict[str, Any]:
    """The ``run`` that gets the session ``params`` (with their idempotency key) started, at
    once: the daemon answers a key it keeps with that session."""
    again = dict(params)
    again["background"] = True
    again.pop("yield_ms", None)
    return again


def wait_timed_out(sid: str, until: Optional[str], timeout: Optional[float]) -> TimeoutExpired:
    """``Session.wait`` ran out of time."""
    if until:
        return TimeoutExpired(f"{sid} printed no line matching {until!r} within {timeout} s")
    return TimeoutExpired(f"{sid} did not end within {timeout} s")


def idempotency_key(given: Optional[str]) -> str:
    """The key a background start carries: the caller's, else a fresh one. The daemon answers a
    run with the key of a session it keeps with that session, starting nothing."""
    if given is None:
        return "py-" + uuid.uuid4().hex
    if not isinstance(given, str) or not 1 <= len(given) <= 128 or not all(
            " " <= ch <= "~" for ch in given):
        raise ValueError("idempotency_key must be 1 to 128 printable ASCII characters")
    return given


def start_unanswered(error: StockadeError, key: str) -> StockadeError:
    """``error`` (a timeout or a lost connection during a start), saying that the command may
    have started and how to find it; ``idempotency_key`` is set on it."""
    message = (f"{error.message}; the command may have started: see `stockade ps --key {key}`, "
               f"or call start again with idempotency_key={key!r} to get its session")
    if isinstance(error, TimeoutExpired):
        out: StockadeError = TimeoutExpired(message, error.result)
    elif isinstance(error, ConnectionLost):
        out = ConnectionLost(message)
    else:
        return error
    out.idempotency_key = key
    return out


def raw_read_params(
    sid: str, after: int, max_bytes: Optional[int], wait: Optional[float], binary: bool = False
) -> Dict[str, Any]:
    params: Dict[str, Any] = {
        "id": sid,
        "after": int(after),
        "raw": True,
        "max_bytes": int(max_bytes) if max_bytes is not None else (
            BINARY_CHUNK if binary else RAW_CHUNK),
    }
    if binary:
        params["encoding"] = "binary"
    if wait:
        params["wait_ms"] = ms(min(wait, MAX_SLICE_S))
    return params


def binary_reads_wanted() -> bool:
    """Whether to ask for the binary read form (``STOCKADE_NO_BINARY_READ=1`` forces JSON)."""
    return os.environ.get("STOCKADE_NO_BINARY_READ", "") in ("", "0")


def binary_refused(error: Exception) -> bool:
    """A daemon without the binary read form refuses the unknown field: read in base64."""
    return getattr(error, "code", None) == -32602 and "unknown field `encoding`" in str(error)


def chunk(answer: Mapping[str, Any], payload: Optional[bytes] = None) -> Chunk:
    if payload is not None:
        data = payload
    else:
        b64 = answer.get("bytes_b64") or ""
        data = base64.b64decode(b64) if b64 else b""
    state = str(answer.get("state", ""))
    next_cursor = int(answer.get("next_cursor", 0))
    total = int(answer.get("total_bytes", next_cursor))
    return Chunk(data, next_cursor, state, total, state != RUNNING and next_cursor >= total)


def binary_len(answer: Any) -> Optional[int]:
    """How many raw bytes follow this answer (a binary read), or None."""
    result = answer.get("result") if isinstance(answer, dict) else None
    n = result.get("binary_len") if isinstance(result, dict) else None
    return n if isinstance(n, int) and n >= 0 else None


def wait_params(sid: str, until: Optional[str], after: int, slice_s: float) -> Dict[str, Any]:
    """One slice of a wait: a ``tail`` view (never full) of one byte, collecting until the end,
    a line matching ``until``, or the slice's end."""
    params: Dict[str, Any] = {
        "id": sid,
        "after": int(after),
        "mode": "tail",
        "max_bytes": 1,
        "wait_ms": ms(min(slice_s, MAX_SLICE_S)),
        "collect": True,
    }
    if until is not None:
        params["until"] = until
    return params


def wait_outcome(answer: Mapping[str, Any]) -> Optional[WaitResult]:
    """The result of a wait slice, or None when it only passed its window."""
    state = str(answer.get("state", ""))
    report = answer.get("wait") or {}
    matched = report.get("matched")
    if matched:
        return WaitResult(
            state, returncode(answer), "match", str(matched.get("line", "")),
            int(matched.get("cursor", 0)),
        )
    if state != RUNNING:
        return WaitResult(state, returncode(answer), "exit", None, int(answer.get("next_cursor", 0)))
    return None


def grep_match(answer: Mapping[str, Any], after: int, ended: WaitResult) -> WaitResult:
    """A wait that found the session already ended: the daemon answers at once without looking
    for ``until``, so the first matching line (from a ``grep`` of the spool) that ends after the
    cursor is the match, if there is one."""
    for line in answer.get("lines", []):
        if not line.get("is_match"):
            continue
        start = int(line.get("offset", 0))
        end = start + len(str(line.get("text", "")).encode("utf-8")) + 1
        if end > after:
            return WaitResult(ended.state, ended.returncode, "match", str(line.get("text", "")), end)
    return ended


def write_params(sid: str, data: Union[str, bytes], close_stdin: bool) -> Dict[str, Any]:
    params: Dict[str, Any] = {"id": sid, "yield_ms": 0}
    if isinstance(data, str):
        params["chars"] = data
    else:
        params["bytes_b64"] = base64.b64encode(bytes(data)).decode("ascii")
    if close_stdin:
        params["close_stdin"] = True
    return params


def kill_params(sid: str, signal: str, grace: Optional[float]) -> Dict[str, Any]:
    params: Dict[str, Any] = {"id": sid, "signal": str(signal)}
    if grace is not None:
        params["grace_ms"] = ms(grace)
    return params


def grep_params(
    sid: str, pattern: str, context: int, max_matches: Optional[int], ignore_case: bool
) -> Dict[str, Any]:
    params: Dict[str, Any] = {"id": sid, "pattern": pattern}
    if context:
        params["context"] = int(context)
    if max_matches is not None:
        params["max_matches"] = int(max_matches)
    if ignore_case:
        params["ignore_case"] = True
    return params


def grep_lines(answer: Mapping[str, Any]) -> List[GrepLine]:
    return [
        GrepLine(
            int(line.get("line_number", 0)),
            int(line.get("offset", 0)),
            str(line.get("text", "")),
            bool(line.get("is_match", False)),
        )
        for line in answer.get("lines", [])
    ]


def call_timeout(base: float, params: Mapping[str, Any]) -> float:
    """The deadline of one answer: the client's timeout plus any wait the call asks for."""
    extra = max(
        int(params.get("wait_ms") or 0),
        int(params.get("yield_ms") or 0),
        int(params.get("grace_ms") or 0),
        int(params.get("timeout_ms") or 0) if not params.get("background") else 0,
    )
    return base + extra / 1000.0


class LineSplitter:
    """Cuts a byte stream into lines (without ``\\n``), decoded UTF-8 with replacement."""

    def __init__(self) -> None:
        self._pending = b""

    def feed(self, data: bytes) -> List[str]:
        buf = self._pending + data
        parts = buf.split(b"\n")
        self._pending = parts.pop()
        return [p.decode("utf-8", "replace") for p in parts]

    def end(self) -> List[str]:
        rest, self._pending = self._pending, b""
        return [rest.decode("utf-8", "replace")] if rest else []
