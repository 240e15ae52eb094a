"""Stockade from Python: run shell commands through the Stockade daemon, read their output by
cursor, wait for lines, type into terminals, and kill whole process trees.

    from stockade import Client

    with Client() as c:                       # the local daemon, started if none runs
        print(c.run("make test").output)      # one answer: the command's bounded output
        s = c.start("npm run dev")            # background session
        s.wait(until="Listening", timeout=30)
        for line in s.lines(): ...

``AsyncClient`` is the asyncio twin. The ``stockade`` CLI comes with this package.
"""

from ._async import AsyncClient, AsyncSession
from ._client import Client, Session
from ._errors import (
    CommandFailed,
    ConnectionLost,
    DaemonUnavailable,
    InputFailed,
    InvalidParams,
    LimitReached,
    NoSuchSession,
    NotSupported,
    SpawnFailed,
    StockadeError,
    TimeoutExpired,
)
from ._proto import Chunk, GrepLine, RunResult, WaitResult

__all__ = [
    "AsyncClient",
    "AsyncSession",
    "Chunk",
    "Client",
    "CommandFailed",
    "ConnectionLost",
    "DaemonUnavailable",
    "GrepLine",
    "InputFailed",
    "InvalidParams",
    "LimitReached",
    "NoSuchSession",
    "NotSupported",
    "RunResult",
    "Session",
    "SpawnFailed",
    "StockadeError",
    "TimeoutExpired",
    "WaitResult",
]
