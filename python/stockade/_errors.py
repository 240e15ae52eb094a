"""Exceptions: each carries the daemon's (or the binary's) one-sentence message."""

from __future__ import annotations

from typing import Any, Optional


class StockadeError(Exception):
    """An error from Stockade; ``message`` is the daemon's sentence, ``code`` its JSON-RPC code."""

    #: The key of a start that got no answer (``TimeoutExpired``, ``ConnectionLost``): start
    #: again with it to get that start's session, never a second copy. None otherwise.
    idempotency_key: Optional[str] = None

    def __init__(self, message: str, code: Optional[int] = None, data: Any = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.data = data


class InvalidParams(StockadeError):
    """The daemon refused the parameters (-32602)."""


class NoSuchSession(StockadeError):
    """No session with that id (-32001)."""


class LimitReached(StockadeError):
    """A daemon limit would be exceeded (-32002)."""


class SpawnFailed(StockadeError):
    """The command could not start (-32003)."""


class NotSupported(StockadeError):
    """The session does not accept this (-32004): write without input, resize without a PTY."""


class InputFailed(StockadeError):
    """``write`` did not get all its bytes to the command (-32007); ``data`` says how far it got."""


class DaemonUnavailable(StockadeError):
    """The daemon could not be started or reached."""


class ConnectionLost(StockadeError):
    """The connection to the daemon closed before the answer came."""


class TimeoutExpired(StockadeError):
    """A wait or a run's ``timeout`` passed; ``result`` holds what there was, when known."""

    def __init__(self, message: str, result: Any = None) -> None:
        super().__init__(message)
        self.result = result


class CommandFailed(StockadeError):
    """``run(check=True)`` of a command that did not exit 0; ``result`` is its RunResult."""

    def __init__(self, message: str, result: Any) -> None:
        super().__init__(message)
        self.result = result


_BY_CODE = {
    -32602: InvalidParams,
    -32001: NoSuchSession,
    -32002: LimitReached,
    -32003: SpawnFailed,
    -32004: NotSupported,
    -32007: InputFailed,
}


def from_rpc(error: Any) -> StockadeError:
    """The exception for a JSON-RPC ``error`` object."""
    if not isinstance(error, dict):
        return StockadeError(f"the daemon answered a malformed error: {error!r}")
    code = error.get("code")
    message = str(error.get("message", "the daemon answered an error without a message"))
    cls = _BY_CODE.get(code, StockadeError) if isinstance(code, int) else StockadeError
    return cls(message, code if isinstance(code, int) else None, error.get("data"))
