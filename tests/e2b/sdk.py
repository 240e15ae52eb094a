"""Drives `stockade daemon run --e2b` with E2B's unmodified Python SDK in debug mode (which
talks to http://localhost:49983), as the e2b tests run it: inside a private network and PID
namespace, so nothing else holds the port and everything started here dies with it.

Usage: sdk.py STOCKADE_BIN [SCENARIO...]. Starts the daemon (its own home, working directory
and environment), runs each scenario, prints one `ok NAME facts` line per scenario that held,
and stops the daemon. A scenario that fails raises: the exit status is non-zero.

`client-start` and `client-connect PID` are the two halves of the reconnect scenario, each a
separate process (a client restart)."""

import hashlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

os.environ["E2B_DEBUG"] = "true"

from e2b import Sandbox  # noqa: E402
from e2b.sandbox.commands.command_handle import PtySize  # noqa: E402

MIB = 1024 * 1024


def sandbox():
    token = os.environ["STOCKADE_E2B_TOKEN"]
    # Debug mode sends no access token; a platform hands the SDK one with the sandbox, and the
    # SDK then builds the sandbox as here (its `create` does the same with the API's answer).
    from e2b.connection_config import ConnectionConfig
    from e2b.envd.versions import ENVD_DEBUG_FALLBACK

    headers = {"E2b-Sandbox-Id": "debug", "E2b-Sandbox-Port": "49983", "X-Access-Token": token}
    return Sandbox(
        sandbox_id="debug",
        sandbox_domain=None,
        envd_version=ENVD_DEBUG_FALLBACK,
        envd_access_token=token,
        traffic_access_token=None,
        connection_config=ConnectionConfig(extra_sandbox_headers=headers),
    )


def echo(sb, ctx):
    r = sb.commands.run("echo hello; echo oops >&2")
    assert (r.stdout, r.stderr, r.exit_code) == ("hello\n", "oops\n", 0), r
    r = sb.commands.run("cd /tmp && pwd && echo $GREETING", envs={"GREETING": "hi"}, cwd="/")
    assert r.stdout == "/tmp\nhi\n", r
    try:
        sb.commands.run("exit 7")
        raise AssertionError("exit 7 did not raise")
    except Exception as e:  # CommandExitException
        assert getattr(e, "exit_code", None) == 7, e
    print("ok echo", flush=True)


def big_output(sb, ctx):
    """100 MiB through on_stdout: every byte equals the spool's."""
    digest, size = hashlib.sha256(), [0]

    def on_stdout(s):
        b = s.encode()
        digest.update(b)
        size[0] += len(b)

    # 100 MiB of numbered lines: every line differs, so a lost or repeated piece shows.
    cmd = "seq -f '%015g' 1 6553600"
    r = sb.commands.run(cmd, on_stdout=on_stdout, timeout=600)
    assert r.exit_code == 0, r
    assert size[0] == 100 * MIB, size[0]
    spools = [
        os.path.join(d, "output.log")
        for d, _, files in os.walk(os.path.join(ctx["home"], "spool"))
        if "output.log" in files and os.path.getsize(os.path.join(d, "output.log")) == size[0]
    ]
    assert len(spools) == 1, spools
    spool = hashlib.sha256()
    with open(spools[0], "rb") as f:
        for block in iter(lambda: f.read(MIB), b""):
            spool.update(block)
    assert spool.hexdigest() == digest.hexdigest()
    print(f"ok big_output bytes={size[0]} sha256={digest.hexdigest()[:16]}", flush=True)


def reconnect(sb, ctx):
    """A background command, its client gone; a new client process connects and misses
    nothing."""
    me = [sys.executable, __file__, ctx["bin"]]
    pid = subprocess.run(me + ["client-start"], check=True, capture_output=True, text=True)
    pid = int(pid.stdout.strip())
    out = subprocess.run(me + ["client-connect", str(pid)], check=True, capture_output=True, text=True)
    lines = out.stdout.splitlines()
    assert lines == [f"line{i}" for i in range(1, 101)], lines[:5]
    print(f"ok reconnect lines={len(lines)}", flush=True)


def client_start():
    sb = sandbox()
    h = sb.commands.run("for i in $(seq 1 100); do echo line$i; sleep 0.01; done", background=True)
    print(h.pid, flush=True)
    h.disconnect()


def client_connect(pid):
    sb = sandbox()
    h = sb.commands.connect(pid)
    r = h.wait()
    sys.stdout.write(r.stdout)


def stdin(sb, ctx):
    h = sb.commands.run("cat", background=True, stdin=True)
    sb.commands.send_stdin(h.pid, "first\n")
    sb.commands.send_stdin(h.pid, "second\n")
    sb.commands.close_stdin(h.pid)
    r = h.wait()
    assert r.stdout == "first\nsecond\n", r
    print("ok stdin", flush=True)


def pty(sb, ctx):
    seen = bytearray()
    h = sb.pty.create(PtySize(rows=24, cols=80))
    t = threading.Thread(target=lambda: h.wait(on_pty=seen.extend), daemon=True)
    t.start()

    def until(text):
        deadline = time.time() + 10
        while text.encode() not in seen:
            assert time.time() < deadline, (text, bytes(seen[-500:]))
            time.sleep(0.05)

    sb.pty.send_stdin(h.pid, b"stty size\n")
    until("24 80")
    sb.pty.resize(h.pid, PtySize(rows=40, cols=100))
    sb.pty.send_stdin(h.pid, b"stty size\n")
    until("40 100")
    sb.pty.send_stdin(h.pid, b"exit\n")
    t.join(10)
    assert not t.is_alive()
    print("ok pty sizes=24x80,40x100", flush=True)


def census(marker):
    """Processes of this namespace whose command line holds `marker`."""
    n = 0
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                with open(f"/proc/{p}/cmdline", "rb") as f:
                    n += marker.encode() in f.read()
            except OSError:
                pass
    return n


def kill(sb, ctx):
    marker = "317.25"
    cmd = f"setsid sleep {marker} & setsid sh -c 'sleep {marker}' & sleep {marker}"
    h = sb.commands.run(cmd, background=True)
    deadline = time.time() + 10
    while census(marker) < 3:
        assert time.time() < deadline, census(marker)
        time.sleep(0.05)
    assert sb.commands.kill(h.pid)
    deadline = time.time() + 5
    while census(marker) and time.time() < deadline:
        time.sleep(0.05)
    left = census(marker)
    assert left == 0, left
    assert not sb.commands.kill(h.pid)  # gone: as envd, False
    print(f"ok kill left={left}", flush=True)


def timeout(sb, ctx):
    """A command and a PTY past their `timeout`: the SDK raises its timeout, and the command's
    whole tree is gone within 1 s of it (envd ends the process at the deadline)."""
    from e2b.exceptions import TimeoutException

    facts = []
    for kind in ("command", "pty"):
        marker = "291.5" if kind == "command" else "292.5"
        started = time.time()
        try:
            if kind == "command":
                sb.commands.run(f"setsid sleep {marker} & sleep {marker}", timeout=2)
            else:
                h = sb.pty.create(PtySize(rows=24, cols=80), timeout=2)
                sb.pty.send_stdin(h.pid, f"sleep {marker}\n".encode())
                h.wait()
            raise AssertionError(f"the {kind} ran past its timeout")
        except TimeoutException:
            raised = time.time() - started
        assert 1.5 < raised < 10, raised
        deadline = time.time() + 1
        while census(marker) and time.time() < deadline:
            time.sleep(0.05)
        assert census(marker) == 0, (kind, census(marker))
        facts.append(f"{kind}_raised_after={raised:.1f}s")
    print(f"ok timeout {' '.join(facts)} left=0", flush=True)


def signed(sb, ctx):
    """The SDK's signed download and upload URLs, fetched with no token (as a browser would):
    accepted with and without an expiration; an expired or altered one refused."""
    import httpx
    from e2b.sandbox.signature import get_signature

    path, data = os.path.join(ctx["scratch"], "signed.txt"), "signed bytes\n"
    sb.files.write(path, data)
    for url in (sb.download_url(path), sb.download_url(path, use_signature_expiration=60)):
        r = httpx.get(url)
        assert (r.status_code, r.text) == (200, data), (url, r.status_code, r.text)
    up = os.path.join(ctx["scratch"], "signed-up.txt")
    for url in (sb.upload_url(up), sb.upload_url(up, use_signature_expiration=60)):
        r = httpx.post(url, files={"file": ("signed-up.txt", b"uploaded\n")})
        assert r.status_code == 200, (r.status_code, r.text)
        assert sb.files.read(up) == "uploaded\n"
    token = os.environ["STOCKADE_E2B_TOKEN"]
    old = get_signature(path, "read", None, token, -5)
    expired = sb._file_url(path, None, old["signature"], old["expiration"])
    altered = sb.download_url(path).replace("signed.txt", "signed-up.txt")
    for url in (expired, altered):
        r = httpx.get(url)
        assert r.status_code == 401, (url, r.status_code, r.text)
    print("ok signed download=2 upload=2 refused=2", flush=True)


def environment(sb, ctx):
    """A command's environment is envd's: none of the daemon's own variables; `/init`'s
    `envVars` (as a platform sets them) under the request's `envs`."""
    import httpx

    r = sb.commands.run("env")
    names = {line.split("=", 1)[0] for line in r.stdout.splitlines() if "=" in line}
    leaked = names & {"STOCKADE_HOME", "DAEMON_ONLY_VAR"}
    assert not leaked, (leaked, r.stdout)
    assert {"PATH", "HOME", "USER"} <= names, names
    headers = {"X-Access-Token": os.environ["STOCKADE_E2B_TOKEN"]}
    url = sb.envd_api_url.rstrip("/") + "/init"
    r = httpx.post(url, json={"envVars": {"FROM_INIT": "init", "OTHER": "x"}}, headers=headers)
    assert r.status_code == 204, (r.status_code, r.text)
    r = sb.commands.run("echo $FROM_INIT $OTHER")
    assert r.stdout == "init x\n", r
    r = sb.commands.run("echo $FROM_INIT", envs={"FROM_INIT": "request"})
    assert r.stdout == "request\n", r
    print(f"ok env names={len(names)} leaked=0 init=honoured", flush=True)


def refusals(sb, ctx):
    """What the door does not store is refused in a sentence, never dropped: `metadata`; no file
    is left behind."""
    path = os.path.join(ctx["scratch"], "refused.txt")
    for kwargs, words in (({"metadata": {"owner": "me"}}, "metadata"),):
        try:
            sb.files.write(path, "data\n", **kwargs)
            raise AssertionError(f"{kwargs} was accepted")
        except Exception as e:  # InvalidArgumentException / SandboxException
            assert words in str(e), (kwargs, e)
        assert not os.path.exists(path), kwargs
    print("ok refusals metadata=refused", flush=True)


def gzip_files(sb, ctx):
    """`write(gzip=True)` is stored decoded; `read` with and without `gzip` gives it back, and a
    download asking for gzip is sent gzip-encoded."""
    import httpx

    path, data = os.path.join(ctx["scratch"], "gz.txt"), "compressible " * 10000
    sb.files.write(path, data, gzip=True)
    with open(path) as f:
        assert f.read() == data, "stored decoded"
    assert sb.files.read(path) == data
    assert sb.files.read(path, gzip=True) == data
    headers = {"X-Access-Token": os.environ["STOCKADE_E2B_TOKEN"], "Accept-Encoding": "gzip"}
    r = httpx.get(sb.envd_api_url.rstrip("/") + "/files", params={"path": path}, headers=headers)
    assert r.headers.get("content-encoding") == "gzip", r.headers
    assert r.text == data
    print(f"ok gzip bytes={len(data)} stored=decoded download=gzip", flush=True)


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith("VmRSS:"))


def upload_memory(sb, ctx):
    """A 200 MiB file through the SDK's default (multipart) upload goes to disk as it arrives:
    the daemon's RSS, sampled throughout, stays within 16 MiB of where it started."""
    src = os.path.join(ctx["scratch"], "big-src.bin")
    digest = hashlib.sha256()
    with open(src, "wb") as f:
        for i in range(200):
            block = hashlib.sha256(str(i).encode()).digest() * (MIB // 32)
            digest.update(block)
            f.write(block)
    pid, base, peak, done = ctx["daemon"], rss_kib(ctx["daemon"]), [0], threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], rss_kib(pid))
            time.sleep(0.01)

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    dest = os.path.join(ctx["scratch"], "big-dest.bin")
    try:
        with open(src, "rb") as f:
            sb.files.write(dest, f, request_timeout=600)
    finally:
        done.set()
        t.join()
    stored = hashlib.sha256()
    with open(dest, "rb") as f:
        for block in iter(lambda: f.read(MIB), b""):
            stored.update(block)
    assert stored.hexdigest() == digest.hexdigest()
    grew = (peak[0] - base) // 1024
    os.remove(src)
    os.remove(dest)
    print(f"ok upload_memory bytes={200 * MIB} rss_base_mib={base // 1024} rss_grew_mib={grew}", flush=True)
    assert grew <= 16, (base, peak[0])


def listing(sb, ctx):
    h = sb.commands.run("sleep 30", background=True)
    procs = sb.commands.list()
    mine = [p for p in procs if p.pid == h.pid]
    assert len(mine) == 1, procs
    assert mine[0].cmd == "/bin/bash" and mine[0].args[-1] == "sleep 30", mine
    sb.commands.kill(h.pid)
    assert all(p.pid != h.pid for p in sb.commands.list())
    print(f"ok list processes={len(procs)}", flush=True)


def files(sb, ctx):
    d = os.path.join(ctx["scratch"], "files")
    sb.files.write(f"{d}/a.txt", "hello")
    sb.files.write(f"{d}/b.bin", b"\x00\xffbytes")
    assert sb.files.read(f"{d}/a.txt") == "hello"
    assert bytes(sb.files.read(f"{d}/b.bin", format="bytes")) == b"\x00\xffbytes"
    names = sorted(e.name for e in sb.files.list(d))
    assert names == ["a.txt", "b.bin"], names
    assert sb.files.exists(f"{d}/a.txt")
    sb.files.remove(f"{d}/a.txt")
    assert not sb.files.exists(f"{d}/a.txt")
    sb.files.make_dir(f"{d}/sub")
    sb.files.rename(f"{d}/b.bin", f"{d}/sub/c.bin")
    assert [e.name for e in sb.files.list(f"{d}/sub")] == ["c.bin"]
    print("ok files", flush=True)


def user(sb, ctx):
    """As root, a command run as `nobody` is nobody's (uid, HOME, USER; cwd their home, or /
    when it is not a directory), a file written as nobody is nobody's, and a user with no
    account is refused with a sentence."""
    import pwd

    nobody = pwd.getpwnam("nobody")
    r = sb.commands.run("id -un; id -u; echo $HOME $USER; pwd", user="nobody")
    home = nobody.pw_dir if os.path.isdir(nobody.pw_dir) else "/"
    want = f"nobody\n{nobody.pw_uid}\n{nobody.pw_dir} nobody\n{home}\n"
    assert r.stdout == want, (r.stdout, want)
    f = os.path.join(ctx["scratch"], "owned", "by-nobody.txt")
    sb.files.write(f, "mine", user="nobody")
    owners = {os.stat(p).st_uid for p in (f, os.path.dirname(f))}
    assert owners == {nobody.pw_uid}, owners
    try:
        sb.commands.run("true", user="no-such-user-e2b")
        raise AssertionError("an unknown user was not refused")
    except Exception as e:
        assert "user no-such-user-e2b does not exist" in str(e), e
    print(f"ok user uid={nobody.pw_uid}", flush=True)


def fd_count(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def watch(sb, ctx):
    """files.watch_dir sees a file created, written, renamed, chmod'ed and removed (each by
    name and type); after 20 watch/stop cycles the daemon holds no more descriptors than
    before, within a few."""
    d = os.path.join(ctx["scratch"], "watched")
    os.makedirs(d)
    h = sb.files.watch_dir(d)
    sb.files.write(f"{d}/new.txt", "one")
    sb.commands.run(f"echo more >> {d}/new.txt && chmod 600 {d}/new.txt")
    sb.files.rename(f"{d}/new.txt", f"{d}/moved.txt")
    sb.files.remove(f"{d}/moved.txt")
    want = {
        ("new.txt", "create"), ("new.txt", "write"), ("new.txt", "chmod"),
        ("new.txt", "rename"), ("moved.txt", "create"), ("moved.txt", "remove"),
    }
    seen, deadline = set(), time.time() + 10
    while not want <= seen:
        assert time.time() < deadline, (want - seen, seen)
        seen |= {(e.name, e.type.value) for e in h.get_new_events()}
        time.sleep(0.05)
    h.stop()
    pid = ctx["daemon"]
    before = fd_count(pid)
    for _ in range(20):
        sb.files.watch_dir(d).stop()
    deadline = time.time() + 5
    while fd_count(pid) > before + 3 and time.time() < deadline:
        time.sleep(0.05)
    after = fd_count(pid)
    assert after <= before + 3, (before, after)
    print(f"ok watch events={len(seen)} fds_before={before} fds_after={after}", flush=True)


def watch_mkdir(sb, ctx):
    """20 runs of `mkdir -p a/b/c` under a recursive watch: every directory is seen created
    (the door adds a new directory's watch, then reports what appeared in it meanwhile)."""
    for run in range(20):
        d = os.path.join(ctx["scratch"], f"deep{run}")
        os.makedirs(d)
        h = sb.files.watch_dir(d, recursive=True)
        sb.commands.run(f"mkdir -p {d}/a/b/c && touch {d}/a/b/c/f")
        want = {"a", "a/b", "a/b/c", "a/b/c/f"}
        seen, deadline = set(), time.time() + 10
        while not want <= seen:
            assert time.time() < deadline, (run, want - seen, seen)
            seen |= {e.name for e in h.get_new_events() if e.type.value == "create"}
            time.sleep(0.02)
        h.stop()
    print("ok watch_mkdir runs=20 missed=0", flush=True)


def peak_rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith("VmHWM:"))


def memory(bin_path):
    """32 commands x 20 MiB streamed at once to 32 clients: the daemon's peak RSS through the
    E2B door against the same through the JSON-RPC door (32 `stockade run`), each on a fresh
    daemon."""
    n, cmd = 32, "seq -f '%015g' 1 1310720"  # 20 MiB each
    peaks = {}
    for door in ("jsonrpc", "e2b"):
        with tempfile.TemporaryDirectory() as home:
            d = start_daemon(bin_path, home)
            try:
                got = [0] * n
                if door == "jsonrpc":
                    env = {"PATH": os.environ["PATH"], "STOCKADE_HOME": home}

                    def one(i):
                        # Started in the background, then every byte read back by cursor.
                        run = [bin_path, "run", "--background", "--json", cmd]
                        started = subprocess.run(run, env=env, capture_output=True, check=True)
                        sid = json.loads(started.stdout)["id"]
                        logs = [bin_path, "logs", "-f", "--raw", sid]
                        got[i] = len(subprocess.run(logs, env=env, capture_output=True).stdout)
                else:
                    def one(i):
                        def on_stdout(s):
                            got[i] += len(s)
                        sandbox().commands.run(cmd, on_stdout=on_stdout, timeout=600)
                threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
                assert all(g == 20 * MIB for g in got), got
                peaks[door] = peak_rss_kib(d.pid)
            finally:
                d.send_signal(signal.SIGTERM)
                d.wait(20)
    ratio = peaks["e2b"] / peaks["jsonrpc"]
    print(f"ok memory jsonrpc_peak_kib={peaks['jsonrpc']} e2b_peak_kib={peaks['e2b']} ratio={ratio:.2f}", flush=True)
    assert ratio <= 2.0, peaks


SCENARIOS = {
    "echo": echo,
    "big_output": big_output,
    "reconnect": reconnect,
    "stdin": stdin,
    "pty": pty,
    "kill": kill,
    "list": listing,
    "files": files,
    "watch": watch,
    "user": user,
    "timeout": timeout,
    "signed": signed,
    "env": environment,
    "refusals": refusals,
    "gzip": gzip_files,
    "upload_memory": upload_memory,
    "watch_mkdir": watch_mkdir,
}


def start_daemon(bin_path, home):
    """`stockade daemon run --e2b` from another directory, with another environment."""
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "STOCKADE_HOME": home, "HOME": home}
    # A variable of the daemon's own, which no command may see (the env scenario).
    env["DAEMON_ONLY_VAR"] = "leak"
    # The TLS set-up (tls-ns.sh) runs the daemon in its own network namespace, on its address.
    wrap = os.environ.get("STOCKADE_E2B_WRAP", "").split()
    door = os.environ.get("STOCKADE_E2B_ARGS", "--e2b").split()
    d = subprocess.Popen(
        wrap + [bin_path, "daemon", "run"] + door,
        cwd=home,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.time() + 30
    for line in d.stderr:
        if "listening on" in line:
            if "--token-file" not in door:
                # The door always has a token: without --token-file, the one it made in its home.
                with open(os.path.join(home, "e2b-token")) as f:
                    os.environ["STOCKADE_E2B_TOKEN"] = f.read().strip()
            return d
        assert time.time() < deadline, "the daemon did not start"
    raise AssertionError(f"the daemon exited: {d.wait()}")


def main():
    bin_path, names = sys.argv[1], sys.argv[2:]
    if names[:1] == ["client-start"]:
        return client_start()
    if names[:1] == ["client-connect"]:
        return client_connect(int(names[1]))
    if names[:1] == ["memory"]:
        return memory(bin_path)
    with tempfile.TemporaryDirectory() as home, tempfile.TemporaryDirectory() as scratch:
        d = start_daemon(bin_path, home)
        try:
            sb = sandbox()
            ctx = {"home": home, "scratch": scratch, "bin": bin_path, "daemon": d.pid}
            for name in names or SCENARIOS:
                SCENARIOS[name](sb, ctx)
        finally:
            d.send_signal(signal.SIGTERM)
            d.wait(20)


if __name__ == "__main__":
    main()
