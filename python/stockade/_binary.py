"""The bundled ``stockade`` binary: finding it, and having it start the local daemon."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from typing import List, Optional

from ._errors import DaemonUnavailable


def find_binary() -> str:
    """The ``stockade`` executable this package installed (the wheel puts it in the
    environment's scripts directory, beside ``python``), else the one on PATH."""
    candidates: List[str] = []
    scripts = sysconfig.get_path("scripts")
    if scripts:
        candidates.append(os.path.join(scripts, "stockade"))
    user = sysconfig.get_path("scripts", f"{os.name}_user") if os.name == "posix" else None
    if user:
        candidates.append(os.path.join(user, "stockade"))
    candidates.append(os.path.join(os.path.dirname(sys.executable), "stockade"))
    for path in candidates:
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    found = shutil.which("stockade")
    if found:
        return found
    raise DaemonUnavailable(
        "cannot find the stockade binary: install the stockade package with pip "
        "(it carries the binary) or pass binary=PATH"
    )


def ensure_daemon(binary: Optional[str], home: Optional[str], timeout: float) -> str:
    """Start the daemon for ``home`` if none runs (exactly as the CLI does: ``stockade daemon
    start``), and return its socket path."""
    exe = binary or find_binary()
    args = [exe]
    if home is not None:
        args += ["--home", os.fspath(home)]
    args += ["daemon", "start", "--json"]
    try:
        done = subprocess.run(
            args, stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise DaemonUnavailable(f"cannot run {exe} to start the daemon: {e}") from e
    if done.returncode != 0:
        sentence = done.stderr.decode("utf-8", "replace").strip() or f"exit status {done.returncode}"
        raise DaemonUnavailable(sentence.removeprefix("stockade: "))
    try:
        socket_path = json.loads(done.stdout)["socket"]
    except (ValueError, KeyError, TypeError) as e:
        raise DaemonUnavailable(
            f"{exe} daemon start --json printed no socket path ({e}); is it a stockade binary?"
        ) from e
    return str(socket_path)
