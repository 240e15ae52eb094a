"""One connection to the daemon: a JSON line out, a JSON line back, over the Unix socket or the
WebSocket door (``ws://``/``wss://``, bearer token), blocking, with a deadline per answer."""

from __future__ import annotations

import os
import socket
import ssl
import stat
import struct
from typing import Optional

from ._errors import ConnectionLost, DaemonUnavailable, TimeoutExpired

#: Largest answer read (bytes); a raw read of 4 MiB is 5.6 MiB of base64.
MAX_ANSWER = 64 * 1024 * 1024


def read_token(token_file: str) -> str:
    """The token in ``token_file``, by the daemon's rules: a private regular file."""
    try:
        fd = os.open(token_file, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as e:
        raise DaemonUnavailable(f"cannot read the token file {token_file}: {e.strerror}") from e
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise DaemonUnavailable(f"the token file {token_file} is not a regular file")
        if st.st_mode & 0o077:
            raise DaemonUnavailable(
                f"the token file {token_file} can be read by others "
                f"(mode {stat.S_IMODE(st.st_mode):04o}); make it private with `chmod 600 {token_file}`"
            )
        with os.fdopen(fd, "rb", closefd=False) as f:
            token = f.read(4097).decode("utf-8", "replace").strip()
    finally:
        os.close(fd)
    if not token:
        raise DaemonUnavailable(f"the token file {token_file} is empty")
    return token


def tls_context(ca_file: Optional[str]) -> ssl.SSLContext:
    try:
        return ssl.create_default_context(cafile=ca_file)
    except (OSError, ssl.SSLError) as e:
        raise DaemonUnavailable(f"cannot load the CA file {ca_file}: {e}") from e


def handshake_error(url: str, e: Exception) -> DaemonUnavailable:
    response = getattr(e, "response", None)
    if response is not None:
        body = bytes(getattr(response, "body", b"") or b"").decode("utf-8", "replace").strip()
        status = getattr(response, "status_code", "?")
        return DaemonUnavailable(f"the daemon at {url} refused the connection (HTTP {status}): {body}")
    return DaemonUnavailable(f"cannot reach the daemon at {url}: {e}")


class NotSent(ConnectionLost):
    """The connection was found broken before any byte of the request left: nothing reached
    the daemon, so the request can be sent again on a new connection."""


class Transport:
    """A blocking connection; ``exchange`` is never called by two threads at once."""

    def send(self, line: bytes, timeout: Optional[float]) -> None:
        raise NotImplementedError

    def recv(self, timeout: Optional[float]) -> bytes:
        raise NotImplementedError

    def recv_bytes(self, n: int, timeout: Optional[float]) -> bytes:
        """The ``n`` raw bytes that follow a binary read's answer."""
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


class UnixTransport(Transport):
    def __init__(self, path: str, timeout: float) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(timeout)
            sock.connect(path)
            # Only our own user's daemon may read what we send and answer it.
            creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
            _pid, uid, _gid = struct.unpack("3i", creds)
            if uid != os.geteuid():
                raise DaemonUnavailable(
                    f"refusing the daemon at {path}: it runs as uid {uid}, not as this user "
                    f"(uid {os.geteuid()}); use a state directory of your own (set STOCKADE_HOME)"
                )
        except OSError as e:
            sock.close()
            raise DaemonUnavailable(f"cannot connect to the daemon at {path}: {e}") from e
        except DaemonUnavailable:
            sock.close()
            raise
        self._sock = sock
        self._file = sock.makefile("rb")

    def send(self, line: bytes, timeout: Optional[float]) -> None:
        self._sock.settimeout(timeout)
        data = line + b"\n"
        try:
            # The first send says whether the daemon is still there (a daemon that stopped
            # closed its end: EPIPE) before anything of the request was taken.
            n = self._sock.send(data)
        except socket.timeout as e:
            raise TimeoutExpired("the daemon did not take the request in time") from e
        except OSError as e:
            raise NotSent(f"the connection to the daemon broke: {e}") from e
        try:
            self._sock.sendall(data[n:])
        except socket.timeout as e:
            raise TimeoutExpired("the daemon did not take the request in time") from e
        except OSError as e:
            raise ConnectionLost(f"the connection to the daemon broke: {e}") from e

    def recv(self, timeout: Optional[float]) -> bytes:
        self._sock.settimeout(timeout)
        try:
            line = self._file.readline(MAX_ANSWER + 1)
        except socket.timeout as e:
            raise TimeoutExpired("the daemon did not answer in time") from e
        except OSError as e:
            raise ConnectionLost(f"the connection to the daemon broke: {e}") from e
        if not line:
            raise ConnectionLost("the daemon closed the connection (did it stop?)")
        if len(line) > MAX_ANSWER:
            raise ConnectionLost(f"the daemon's answer is over {MAX_ANSWER} bytes")
        return line

    def recv_bytes(self, n: int, timeout: Optional[float]) -> bytes:
        self._sock.settimeout(timeout)
        try:
            data = self._file.read(n) if n else b""
        except socket.timeout as e:
            raise TimeoutExpired("the daemon did not send the bytes of a read in time") from e
        except OSError as e:
            raise ConnectionLost(f"the connection to the daemon broke: {e}") from e
        if len(data) != n:
            raise ConnectionLost(f"the daemon closed the connection {len(data)} bytes into {n}")
        return data

    def close(self) -> None:
        try:
            self._file.close()
        finally:
            self._sock.close()


class WsTransport(Transport):
    def __init__(self, url: str, token: str, ca_file: Optional[str], timeout: float) -> None:
        try:
            from websockets.sync.client import connect
        except ImportError as e:  # pragma: no cover - a dependency of the package
            raise DaemonUnavailable("a remote daemon needs the websockets package") from e
        ssl_ctx = tls_context(ca_file) if url.startswith("wss://") else None
        try:
            self._ws = connect(
                url,
                ssl=ssl_ctx,
                additional_headers={"Authorization": f"Bearer {token}"},
                open_timeout=timeout,
                max_size=MAX_ANSWER,
                compression=None,
                ping_interval=None,
            )
        except Exception as e:  # websockets raises its own and OSError types
            raise handshake_error(url, e) from e

    def send(self, line: bytes, timeout: Optional[float]) -> None:
        try:
            self._ws.send(line.decode("utf-8"))
        except Exception as e:
            raise ConnectionLost(f"the connection to the daemon broke: {e}") from e

    def recv(self, timeout: Optional[float]) -> bytes:
        try:
            message = self._ws.recv(timeout=timeout)
        except TimeoutError as e:
            raise TimeoutExpired("the daemon did not answer in time") from e
        except Exception as e:
            raise ConnectionLost(f"the connection to the daemon broke: {e}") from e
        return message.encode("utf-8") if isinstance(message, str) else bytes(message)

    def recv_bytes(self, n: int, timeout: Optional[float]) -> bytes:
        try:
            message = self._ws.recv(timeout=timeout)
        except TimeoutError as e:
            raise TimeoutExpired("the daemon did not send the bytes of a read in time") from e
        except Exception as e:
            raise ConnectionLost(f"the connection to the daemon broke: {e}") from e
        if isinstance(message, str) or len(message) != n:
            raise ConnectionLost(f"the daemon sent no binary message of {n} bytes after a read")
        return bytes(message)

    def close(self) -> None:
        self._ws.close()
