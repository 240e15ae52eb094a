"""The asyncio twin of ``Client``: ``AsyncClient`` and ``AsyncSession``. One connection carries
many requests at once (answers are matched by id), so long waits do not hold up other calls."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import struct
import time
from typing import Any, AsyncIterator, Dict, List, Mapping, Optional, Tuple, Union

from . import _proto as p
from ._binary import ensure_daemon
from ._errors import (
    ConnectionLost,
    DaemonUnavailable,
    InvalidParams,
    StockadeError,
    TimeoutExpired,
    from_rpc,
)
from ._proto import Chunk, GrepLine, RunResult, WaitResult
from ._transport import MAX_ANSWER, handshake_error, read_token, tls_context

_NO_DEADLINE = object()


def _parse(line: Union[str, bytes]) -> Any:
    try:
        return json.loads(line)
    except ValueError:
        return None


class _NotSent(ConnectionLost):
    """The connection was found broken when the request was written: it never reached the
    daemon, so it can be sent again on a new connection."""


class AsyncClient:
    """``Client`` for asyncio: the same arguments and methods, each a coroutine. Connects on
    ``async with`` or ``await connect()`` (or at the first call)."""

    def __init__(
        self,
        home: Optional[Union[str, "os.PathLike[str]"]] = None,
        *,
        remote: Optional[str] = None,
        token_file: Optional[Union[str, "os.PathLike[str]"]] = None,
        ca_file: Optional[Union[str, "os.PathLike[str]"]] = None,
        binary: Optional[str] = None,
        timeout: float = 60.0,
    ) -> None:
        self.timeout = timeout
        self._home = os.fspath(home) if home is not None else None
        self._remote = remote
        self._token_file = token_file
        self._ca_file = os.fspath(ca_file) if ca_file is not None else None
        self._binary = binary
        self._next_id = 0
        self._binary_reads: Optional[bool] = None
        self._pending: Dict[int, "asyncio.Future[Any]"] = {}
        self._send: Any = None
        self._closer: Any = None
        self._reader_task: Optional["asyncio.Task[None]"] = None
        self._lost: Optional[str] = None
        #: Set by ``close``: a closed client does not connect again.
        self._closed = False
        self._connect_lock = asyncio.Lock()

    async def __aenter__(self) -> "AsyncClient":
        await self.connect()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def connect(self) -> None:
        """Connect (starting the local daemon if none runs); idempotent."""
        async with self._connect_lock:
            if self._send is not None:
                return
            if self._remote is not None:
                await self._connect_ws()
            else:
                path = await asyncio.to_thread(ensure_daemon, self._binary, self._home, self.timeout)
                await self._connect_unix(path)

    async def _connect_unix(self, path: str) -> None:
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_unix_connection(path, limit=MAX_ANSWER + 1), self.timeout)
        except (OSError, asyncio.TimeoutError) as e:
            raise DaemonUnavailable(f"cannot connect to the daemon at {path}: {e}") from e
        sock = writer.get_extra_info("socket")
        creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        uid = struct.unpack("3i", creds)[1]
        if uid != os.geteuid():
            writer.close()
            raise DaemonUnavailable(
                f"refusing the daemon at {path}: it runs as uid {uid}, not as this user "
                f"(uid {os.geteuid()}); use a state directory of your own (set STOCKADE_HOME)")

        async def send(line: bytes) -> None:
            writer.write(line + b"\n")
            await writer.drain()

        async def close() -> None:
            writer.close()

        async def answers() -> AsyncIterator[Tuple[Any, Optional[bytes]]]:
            while True:
                line = await reader.readline()
                if not line:
                    return
                answer = _parse(line)
                n = p.binary_len(answer)
                yield answer, (await reader.readexactly(n) if n else b"") if n is not None else None

        self._start(send, close, answers())

    async def _connect_ws(self) -> None:
        from websockets.asyncio.client import connect

        token_path = self._token_file or os.environ.get("STOCKADE_TOKEN_FILE")
        if not token_path:
            raise StockadeError(
                "a remote daemon needs its token: pass token_file= or set STOCKADE_TOKEN_FILE")
        token = read_token(os.fspath(token_path))
        url = str(self._remote)
        ssl_ctx = tls_context(self._ca_file) if url.startswith("wss://") else None
        try:
            ws = await connect(url, ssl=ssl_ctx, additional_headers={"Authorization": f"Bearer {token}"},
                               open_timeout=self.timeout, max_size=MAX_ANSWER, compression=None,
                               ping_interval=None)
        except Exception as e:
            raise handshake_error(url, e) from e

        async def send(line: bytes) -> None:
            await ws.send(line.decode("utf-8"))

        async def close() -> None:
            await ws.close()

        async def answers() -> AsyncIterator[Tuple[Any, Optional[bytes]]]:
            messages = ws.__aiter__()
            try:
                async for message in messages:
                    answer = _parse(message)
                    payload = None
                    if p.binary_len(answer) is not None:
                        # The bytes of a binary read: always one binary message right after.
                        data = await messages.__anext__()
                        payload = data if isinstance(data, bytes) else data.encode("utf-8")
                    yield answer, payload
            except Exception:
                return

        self._start(send, close, answers())

    def _start(self, send: Any, close: Any,
               answers: AsyncIterator[Tuple[Any, Optional[bytes]]]) -> None:
        self._send, self._closer, self._lost = send, close, None
        self._reader_task = asyncio.get_running_loop().create_task(self._read_answers(answers))

    async def _read_answers(self, answers: AsyncIterator[Tuple[Any, Optional[bytes]]]) -> None:
        reason = "the daemon closed the connection (did it stop?)"
        try:
            async for answer, payload in answers:
                if not isinstance(answer, dict):
                    continue
                future = self._pending.pop(answer.get("id"), None)  # type: ignore[arg-type]
                if future is not None and not future.done():
                    future.set_result((answer, payload))
        except Exception as e:  # the connection broke
            reason = f"the connection to the daemon broke: {e}"
        self._lost = reason
        for future in self._pending.values():
            if not future.done():
                future.set_exception(ConnectionLost(reason))
        self._pending.clear()

    async def close(self) -> None:
        """Close the connection (sessions keep running in the daemon)."""
        self._closed = True
        await self._drop()

    async def _drop(self) -> None:
        if self._closer is not None:
            closer, self._closer, self._send = self._closer, None, None
            await closer()
            if self._reader_task is not None:
                self._reader_task.cancel()

    async def call(self, method: str, params: Optional[Mapping[str, Any]] = None, *,
                   timeout: Any = None) -> Any:
        """Send one JSON-RPC request and await its ``result`` (errors raise)."""
        return (await self._exchange(method, params, timeout))[0]

    async def _exchange(self, method: str, params: Optional[Mapping[str, Any]],
                        timeout: Any) -> Tuple[Any, Optional[bytes]]:
        if self._closed:
            raise ConnectionLost("the client is closed")
        params = dict(params or {})
        deadline = None if timeout is _NO_DEADLINE else (
            timeout if timeout is not None else p.call_timeout(self.timeout, params))
        try:
            answer, payload = await self._send_and_wait(method, params, deadline)
        except _NotSent:
            # The daemon went away since the last call (stopped, restarted) and nothing was
            # sent: send it on a new connection, to the daemon started again if need be.
            self._lost = self._lost or "the daemon closed the connection"
            answer, payload = await self._send_and_wait(method, params, deadline)
        if "error" in answer:
            raise from_rpc(answer["error"])
        return answer.get("result"), payload

    async def _send_and_wait(self, method: str, params: Dict[str, Any],
                             deadline: Optional[float]) -> Tuple[Any, Any]:
        if self._lost is not None:
            # The last connection ended: connect again, starting the daemon if none runs, as
            # the CLI and the TypeScript client do.
            await self._drop()
            self._lost = None
            self._binary_reads = None
        if self._send is None:
            await self.connect()
        send: Any = self._send
        self._next_id += 1
        rid = self._next_id
        future: "asyncio.Future[Any]" = asyncio.get_running_loop().create_future()
        self._pending[rid] = future
        line = json.dumps({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        try:
            try:
                await send(line.encode("utf-8"))
            except OSError as e:
                raise _NotSent(f"the connection to the daemon broke: {e}") from e
            answer: Tuple[Any, Any] = await asyncio.wait_for(future, deadline)
        except asyncio.TimeoutError as e:
            raise TimeoutExpired(f"the daemon did not answer {method} within {deadline} s") from e
        except OSError as e:
            raise ConnectionLost(f"the connection to the daemon broke: {e}") from e
        finally:
            self._pending.pop(rid, None)
        return answer

    async def _read(self, sid: str, after: int, max_bytes: Optional[int],
                    wait: Optional[float]) -> Chunk:
        """See ``Client._read``."""
        if self._binary_reads is not False and p.binary_reads_wanted():
            params = p.raw_read_params(sid, after, max_bytes, wait, binary=True)
            try:
                result, payload = await self._exchange("read", params, None)
            except InvalidParams as e:
                if not p.binary_refused(e):
                    raise
                self._binary_reads = False
            else:
                self._binary_reads = True
                return p.chunk(result, payload if payload is not None else b"")
        return p.chunk(await self.call("read", p.raw_read_params(sid, after, max_bytes, wait)))

    async def run(self, command: str, *, cwd: Optional[p.PathArg] = None,
                  env: Optional[Mapping[str, str]] = None, timeout: Optional[float] = None,
                  check: bool = False, shell: Optional[str] = None,
                  max_bytes: Optional[int] = None) -> RunResult:
        """See ``Client.run``."""
        params = p.run_params(command, background=False, cwd=cwd, env=env, timeout=timeout,
                              local=self._remote is None, shell=shell, max_bytes=max_bytes)
        params["idempotency_key"] = p.idempotency_key(None)
        try:
            answer = await self.call("run", params,
                                     timeout=_NO_DEADLINE if timeout is None else None)
        except (asyncio.CancelledError, KeyboardInterrupt):
            # As ``Client.run``: a cancelled run ends its command (shielded: the cancellation
            # that stopped the wait must not stop this too).
            await asyncio.shield(self._terminate(params))
            raise
        return p.check_run(p.run_result(answer, command), check)

    async def _terminate(self, params: Dict[str, Any]) -> None:
        """See ``Client._terminate``."""
        try:
            again = await self.call("run", p.replay_params(params))
            await self.call("kill", {"id": again["id"]})
        except StockadeError:
            pass  # It ended already.

    async def start(self, command: str, *, cwd: Optional[p.PathArg] = None,
                    env: Optional[Mapping[str, str]] = None, pty: Optional[Tuple[int, int]] = None,
                    stdin: bool = False, timeout: Optional[float] = None,
                    until: Optional[str] = None, wait: float = 0.0,
                    idempotency_key: Optional[str] = None) -> "AsyncSession":
        """See ``Client.start``."""
        key = p.idempotency_key(idempotency_key)
        params = p.run_params(command, background=True, cwd=cwd, env=env, timeout=timeout,
                              local=self._remote is None, pty=pty, stdin=stdin, until=until,
                              wait=wait)
        params["idempotency_key"] = key
        try:
            answer = await self.call("run", params)
        except (TimeoutExpired, ConnectionLost) as e:
            raise p.start_unanswered(e, key) from e
        session = AsyncSession(self, str(answer["id"]), answer.get("pid"),
                               p.run_result(answer, command))
        session.idempotency_key = key
        return session

    def session(self, id: str) -> "AsyncSession":
        """The session with this id."""
        return AsyncSession(self, id, None, None)

    async def sessions(self) -> List[Dict[str, Any]]:
        """Every session the daemon keeps (``list``)."""
        return list((await self.call("list", {})).get("sessions", []))

    async def status(self) -> Dict[str, Any]:
        """The daemon's ``status``."""
        return dict(await self.call("status", {}))


class AsyncSession:
    """``Session`` for asyncio: the same methods, each a coroutine; ``lines`` an async iterator."""

    def __init__(self, client: AsyncClient, id: str, pid: Optional[int],
                 started: Optional[RunResult]) -> None:
        self.client = client
        self.id = id
        self.pid = pid
        self.started = started
        #: The idempotency key it was started with (None for ``AsyncClient.session``).
        self.idempotency_key: Optional[str] = None

    def __repr__(self) -> str:
        return f"AsyncSession(id={self.id!r}, pid={self.pid!r})"

    async def read(self, after: int = 0, *, max_bytes: Optional[int] = None,
                   wait: Optional[float] = None) -> Chunk:
        return await self.client._read(self.id, after, max_bytes, wait)

    async def wait(self, until: Optional[str] = None, *, after: int = 0,
                   timeout: Optional[float] = None) -> WaitResult:
        end = None if timeout is None else time.monotonic() + timeout
        cursor = after
        while True:
            left = p.MAX_SLICE_S if end is None else end - time.monotonic()
            if left <= 0:
                raise p.wait_timed_out(self.id, until, timeout)
            answer = await self.client.call("read", p.wait_params(self.id, until, cursor, left))
            outcome = p.wait_outcome(answer)
            if outcome is not None and outcome.ended_by == "exit" and until is not None:
                found = await self.client.call(
                    "grep", p.grep_params(self.id, until, 0, 10_000, False))
                return p.grep_match(found, cursor, outcome)
            if outcome is not None:
                return outcome
            cursor = max(cursor, int(answer.get("next_cursor", cursor)))

    async def write(self, data: Union[str, bytes], *, close_stdin: bool = False) -> None:
        await self.client.call("write", p.write_params(self.id, data, close_stdin))

    async def resize(self, rows: int, cols: int) -> None:
        await self.client.call("resize", {"id": self.id, "rows": int(rows), "cols": int(cols)})

    async def kill(self, signal: str = "SIGTERM", *,
                   grace: Optional[float] = None) -> Dict[str, Any]:
        answer = await self.client.call("kill", p.kill_params(self.id, signal, grace))
        return dict(answer.get("report", {}))

    async def lines(self, after: int = 0) -> AsyncIterator[str]:
        splitter = p.LineSplitter()
        cursor = after
        while True:
            got = await self.read(cursor, wait=30.0)
            for line in splitter.feed(got.data):
                yield line
            cursor = got.next_cursor
            if got.eof:
                for line in splitter.end():
                    yield line
                return

    async def grep(self, pattern: str, *, context: int = 0, max_matches: Optional[int] = None,
                   ignore_case: bool = False) -> List[GrepLine]:
        params = p.grep_params(self.id, pattern, context, max_matches, ignore_case)
        return p.grep_lines(await self.client.call("grep", params))

    async def info(self) -> Dict[str, Any]:
        answer = dict(await self.client.call("read", {"id": self.id, "mode": "tail", "max_bytes": 1}))
        answer.pop("output", None)
        return answer

    async def forget(self) -> None:
        await self.client.call("forget", {"id": self.id})
