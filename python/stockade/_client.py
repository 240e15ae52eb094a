"""The blocking client: ``Client`` and its ``Session``s."""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Any, Dict, Iterator, List, Mapping, Optional, Tuple, Union

from . import _proto as p
from ._binary import ensure_daemon
from ._errors import ConnectionLost, InvalidParams, StockadeError, TimeoutExpired, from_rpc
from ._proto import Chunk, GrepLine, RunResult, WaitResult
from ._transport import NotSent, Transport, UnixTransport, WsTransport, read_token

#: ``timeout=None`` on a call: no deadline (a foreground run of unbounded length).
_NO_DEADLINE = object()


class Client:
    """A connection to a Stockade daemon.

    ``Client()`` reaches the local daemon of ``home`` (default: ``STOCKADE_HOME``, else the
    CLI's default state directory), starting it if none runs, exactly as the ``stockade`` CLI
    does. ``Client(remote="wss://host:port", token_file=..., ca_file=...)`` reaches a daemon's
    WebSocket door instead. ``timeout`` (seconds) bounds each answer, on top of any wait a call
    asks for. One request at a time per client (calls from several threads take turns); open
    more clients for concurrent long waits.
    """

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
        self._lock = threading.Lock()
        self._next_id = 0
        #: Whether the daemon has the binary read form (None: not asked yet).
        self._binary_reads: Optional[bool] = None
        #: Whether the daemon is this machine's (commands run in the caller's world).
        self._local = remote is None
        #: Set by ``close``: a closed client does not connect again.
        self._closed = False
        self._transport: Optional[Transport]
        if remote is not None:
            token_path = token_file or os.environ.get("STOCKADE_TOKEN_FILE")
            if not token_path:
                raise StockadeError(
                    "a remote daemon needs its token: pass token_file= or set STOCKADE_TOKEN_FILE"
                )
            token = read_token(os.fspath(token_path))
            ca = os.fspath(ca_file) if ca_file is not None else None

            def connect() -> Transport:
                return WsTransport(remote, token, ca, timeout)
        else:
            home_path = os.fspath(home) if home is not None else None

            def connect() -> Transport:
                # A daemon that is gone (stopped, restarted, crashed) is started again, as the
                # CLI would.
                return UnixTransport(ensure_daemon(binary, home_path, timeout), timeout)
        self._connect = connect
        self._transport = connect()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection (sessions keep running in the daemon)."""
        with self._lock:
            self._closed = True
            if self._transport is not None:
                self._transport.close()
                self._transport = None

    def call(self, method: str, params: Optional[Mapping[str, Any]] = None, *,
             timeout: Any = None) -> Any:
        """Send one JSON-RPC request (docs/protocol.md) and return its ``result``; a JSON-RPC
        error raises the matching ``StockadeError``."""
        return self._exchange(method, params, timeout)[0]

    def _exchange(self, method: str, params: Optional[Mapping[str, Any]],
                  timeout: Any) -> Tuple[Any, Optional[bytes]]:
        """The ``result``, and the raw bytes that follow it when it is a binary read."""
        params = dict(params or {})
        if timeout is _NO_DEADLINE:
            deadline: Optional[float] = None
        else:
            deadline = timeout if timeout is not None else p.call_timeout(self.timeout, params)
        with self._lock:
            if self._closed:
                raise ConnectionLost("the client is closed")
            self._next_id += 1
            line = json.dumps({"jsonrpc": "2.0", "id": self._next_id, "method": method,
                               "params": params}).encode("utf-8")
            try:
                answer, payload = self._send_and_wait(line, self._next_id, deadline)
            except NotSent:
                # The daemon went away since the last call (stopped, restarted): nothing was
                # sent, so send it on a new connection (a new daemon may answer), as the CLI
                # and the TypeScript client do.
                answer, payload = self._send_and_wait(line, self._next_id, deadline)
        if "error" in answer:
            raise from_rpc(answer["error"])
        return answer.get("result"), payload

    def _send_and_wait(self, line: bytes, rid: int,
                       deadline: Optional[float]) -> Tuple[Any, Optional[bytes]]:
        """Send one request and wait for its answer, connecting first when the last
        connection was lost. Holds ``_lock``."""
        if self._transport is None:
            self._transport = self._connect()
            self._binary_reads = None
        transport = self._transport
        payload = None
        try:
            transport.send(line, deadline)
            while True:
                answer = json.loads(transport.recv(deadline))
                n = p.binary_len(answer)
                if n is not None:
                    payload = transport.recv_bytes(n, deadline)
                if isinstance(answer, dict) and answer.get("id") == rid:
                    return answer, payload
        except BaseException:
            # The answer may still come (or came in part, at a KeyboardInterrupt): this
            # connection can no longer be trusted. The next call connects again.
            transport.close()
            self._transport = None
            raise

    def _read(self, sid: str, after: int, max_bytes: Optional[int],
              wait: Optional[float]) -> Chunk:
        """A raw read: the binary form (bytes unencoded after the answer) where the daemon has
        it, else base64 in JSON."""
        if self._binary_reads is not False and p.binary_reads_wanted():
            params = p.raw_read_params(sid, after, max_bytes, wait, binary=True)
            try:
                result, payload = self._exchange("read", params, None)
            except InvalidParams as e:
                if not p.binary_refused(e):
                    raise
                self._binary_reads = False
            else:
                self._binary_reads = True
                return p.chunk(result, payload if payload is not None else b"")
        return p.chunk(self.call("read", p.raw_read_params(sid, after, max_bytes, wait)))

    def run(
        self,
        command: str,
        *,
        cwd: Optional[p.PathArg] = None,
        env: Optional[Mapping[str, str]] = None,
        timeout: Optional[float] = None,
        check: bool = False,
        shell: Optional[str] = None,
        max_bytes: Optional[int] = None,
    ) -> RunResult:
        """Run ``command`` (a shell command line) to its end and answer its bounded output.

        Like ``subprocess.run``: the command runs in this process's directory (``cwd``, relative
        to it) and environment (``env`` added on top) when the daemon is local; ``timeout``
        (seconds) terminates the command's whole tree and raises ``TimeoutExpired``;
        ``check=True`` raises ``CommandFailed`` unless it exits 0; a ``KeyboardInterrupt``
        (Ctrl-C) while it runs terminates it, then propagates.
        """
        params = p.run_params(command, background=False, cwd=cwd, env=env, timeout=timeout,
                              local=self._local, shell=shell, max_bytes=max_bytes)
        params["idempotency_key"] = p.idempotency_key(None)
        try:
            answer = self.call("run", params, timeout=_NO_DEADLINE if timeout is None else None)
        except KeyboardInterrupt:
            self._terminate(params)
            raise
        return p.check_run(p.run_result(answer, command), check)

    def _terminate(self, params: Dict[str, Any]) -> None:
        """Terminate the session the run ``params`` started and wait until its tree is gone (the
        daemon also ends a foreground run whose connection closed; this makes sure). The run's
        key finds it: sent again, it answers with the session it started, or starts it if the
        first never arrived, which is then ended as well."""
        try:
            again = self.call("run", p.replay_params(params))
            self.call("kill", {"id": again["id"]})
        except StockadeError:
            pass  # It ended already.

    def start(
        self,
        command: str,
        *,
        cwd: Optional[p.PathArg] = None,
        env: Optional[Mapping[str, str]] = None,
        pty: Optional[Tuple[int, int]] = None,
        stdin: bool = False,
        timeout: Optional[float] = None,
        until: Optional[str] = None,
        wait: float = 0.0,
        idempotency_key: Optional[str] = None,
    ) -> "Session":
        """Start ``command`` in the background and return its ``Session`` at once (or after
        ``wait`` seconds, earlier at a line matching ``until``). ``pty=(rows, cols)`` runs it
        on a terminal; ``stdin=True`` gives it a pipe for ``write``.

        Every start carries an idempotency key (``idempotency_key``, else a fresh one, kept in
        ``Session.idempotency_key``): a start with the key of a session the daemon keeps answers
        that session and starts nothing. When the answer does not come (``TimeoutExpired``,
        ``ConnectionLost``), the error's ``idempotency_key`` is the one to start again with."""
        key = p.idempotency_key(idempotency_key)
        params = p.run_params(command, background=True, cwd=cwd, env=env, timeout=timeout,
                              local=self._local, pty=pty, stdin=stdin, until=until,
                              wait=wait)
        params["idempotency_key"] = key
        try:
            answer = self.call("run", params)
        except (TimeoutExpired, ConnectionLost) as e:
            raise p.start_unanswered(e, key) from e
        session = Session(self, str(answer["id"]), answer.get("pid"), p.run_result(answer, command))
        session.idempotency_key = key
        return session

    def session(self, id: str) -> "Session":
        """The session with this id (``sh-N``), e.g. one the CLI started."""
        return Session(self, id, None, None)

    def sessions(self) -> List[Dict[str, Any]]:
        """Every session the daemon keeps (``list``)."""
        return list(self.call("list", {}).get("sessions", []))

    def status(self) -> Dict[str, Any]:
        """The daemon's ``status``: pid, socket, home, version, containment, sessions."""
        return dict(self.call("status", {}))


class Session:
    """A background session: its output is read by cursor (byte offsets into its spool)."""

    def __init__(self, client: Client, id: str, pid: Optional[int],
                 started: Optional[RunResult]) -> None:
        self.client = client
        self.id = id
        self.pid = pid
        #: The answer of ``start`` (None for ``Client.session``).
        self.started = started
        #: The idempotency key it was started with (None for ``Client.session``).
        self.idempotency_key: Optional[str] = None

    def __repr__(self) -> str:
        return f"Session(id={self.id!r}, pid={self.pid!r})"

    def read(self, after: int = 0, *, max_bytes: Optional[int] = None,
             wait: Optional[float] = None) -> Chunk:
        """The exact bytes after cursor ``after`` (at most 16 MiB a call; 4 MiB from a daemon
        without binary reads). ``wait`` (seconds):
        while none are there yet and the session runs, wait for them up to that long."""
        return self.client._read(self.id, after, max_bytes, wait)

    def wait(self, until: Optional[str] = None, *, after: int = 0,
             timeout: Optional[float] = None) -> WaitResult:
        """Wait until the session ends or, with ``until`` (a regex), until a line after cursor
        ``after`` matches. Raises ``TimeoutExpired`` when ``timeout`` seconds pass first."""
        end = None if timeout is None else time.monotonic() + timeout
        cursor = after
        while True:
            left = p.MAX_SLICE_S if end is None else end - time.monotonic()
            if left <= 0:
                raise p.wait_timed_out(self.id, until, timeout)
            answer = self.client.call("read", p.wait_params(self.id, until, cursor, left))
            outcome = p.wait_outcome(answer)
            if outcome is not None and outcome.ended_by == "exit" and until is not None:
                found = self.client.call(
                    "grep", p.grep_params(self.id, until, 0, 10_000, False))
                return p.grep_match(found, cursor, outcome)
            if outcome is not None:
                return outcome
            cursor = max(cursor, int(answer.get("next_cursor", cursor)))

    def write(self, data: Union[str, bytes], *, close_stdin: bool = False) -> None:
        """Type ``data`` into the session's terminal or stdin pipe (``str``: text, ``\\n`` is
        Enter; ``bytes``: exact bytes); ``close_stdin`` ends its input afterwards."""
        self.client.call("write", p.write_params(self.id, data, close_stdin))

    def resize(self, rows: int, cols: int) -> None:
        """Set the terminal size of a PTY session."""
        self.client.call("resize", {"id": self.id, "rows": int(rows), "cols": int(cols)})

    def kill(self, signal: str = "SIGTERM", *, grace: Optional[float] = None) -> Dict[str, Any]:
        """Terminate the session's whole process tree; answers the daemon's report
        (``terminated``, ``survivors``, ``pids_signalled``, …) once it is verified gone."""
        answer = self.client.call("kill", p.kill_params(self.id, signal, grace))
        return dict(answer.get("report", {}))

    def lines(self, after: int = 0) -> Iterator[str]:
        """Every output line from cursor ``after`` (without its ``\\n``, decoded UTF-8 with
        replacement), following the session until it ends and its last byte is read."""
        splitter = p.LineSplitter()
        cursor = after
        while True:
            got = self.read(cursor, wait=30.0)
            yield from splitter.feed(got.data)
            cursor = got.next_cursor
            if got.eof:
                yield from splitter.end()
                return

    def grep(self, pattern: str, *, context: int = 0, max_matches: Optional[int] = None,
             ignore_case: bool = False) -> List[GrepLine]:
        """Search the session's whole output (a Rust regex, as ripgrep)."""
        params = p.grep_params(self.id, pattern, context, max_matches, ignore_case)
        return p.grep_lines(self.client.call("grep", params))

    def info(self) -> Dict[str, Any]:
        """The session's state now (``state``, ``code``, ``total_bytes``, …)."""
        answer = dict(self.client.call(
            "read", {"id": self.id, "mode": "tail", "max_bytes": 1}))
        answer.pop("output", None)
        return answer

    def forget(self) -> None:
        """Terminate it if running and delete its output and record."""
        self.client.call("forget", {"id": self.id})
