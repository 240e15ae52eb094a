"""What the packaging test asks of the installed `stockade` package, through its public API only:
run a command, read 100 MiB back by cursor byte-exact, wait with `until`, write to a PTY, kill a
tree with nothing left, start again with an idempotency key — with the blocking client and the
asyncio twin.

    python checks.py local                        # the local daemon (auto-started)
    python checks.py remote URL TOKEN_FILE CA_FILE
"""

import asyncio
import hashlib
import os
import sys
import time

import stockade

MIB = 1024 * 1024
BIG = 100 * MIB


def connect(kind, args):
    if kind == "local":
        return stockade.Client()
    url, token, ca = args
    return stockade.Client(remote=url, token_file=token, ca_file=ca)


def check_run(c):
    r = c.run("echo hi; echo err >&2; exit 3")
    assert (r.returncode, r.output, r.state) == (3, "hi\nerr\n", "exited"), r
    try:
        c.run("exit 4", check=True)
        raise AssertionError("check=True did not raise")
    except stockade.CommandFailed as e:
        assert e.result.returncode == 4, e
    try:
        c.session("sh-999999").read()
        raise AssertionError("no error for an unknown session")
    except stockade.NoSuchSession as e:
        assert "sh-999999" in e.message and e.code == -32001, (e.code, e.message)


def check_bytes(c, blob):
    s = c.start(f"cat {blob}")
    digest, cursor, t0 = hashlib.sha256(), 0, time.monotonic()
    while True:
        got = s.read(cursor, wait=10)
        digest.update(got.data)
        cursor = got.next_cursor
        if got.eof:
            break
    took = time.monotonic() - t0
    with open(blob, "rb") as f:
        want = hashlib.sha256(f.read()).hexdigest()
    assert cursor == BIG, cursor
    assert digest.hexdigest() == want, "the bytes read back differ from the file"
    print(f"  read {cursor} bytes back by cursor, byte-exact, in {took:.1f} s")
    lines = list(c.start("seq 1 5000").lines())
    assert lines == [str(i) for i in range(1, 5001)], lines[:3]
    matches = s.grep("^x$")  # binary noise rarely holds such a line: any answer is fine
    assert isinstance(matches, list)


def check_wait(c):
    s = c.start("sleep 0.3; echo ready; sleep 60")
    w = s.wait(until="^ready$", timeout=20)
    assert (w.ended_by, w.matched, w.state) == ("match", "ready", "running"), w
    try:
        s.wait(timeout=0.5)
        raise AssertionError("wait(timeout) did not raise")
    except stockade.TimeoutExpired:
        pass
    rep = s.kill()
    assert rep["terminated"] and not rep["survivors"], rep
    end = s.wait(timeout=10)
    assert end.ended_by == "exit" and end.state == "killed", end
    # A line printed before the wait began, by a session that has ended since, still matches.
    done = c.start("echo done-line")
    done.wait(timeout=10)
    late = done.wait(until="^done-line$", timeout=10)
    assert (late.ended_by, late.matched, late.cursor) == ("match", "done-line", 10), late


def check_pty(c):
    s = c.start("test -t 0 && echo on-a-tty; read x; echo got:$x", pty=(24, 80))
    s.resize(30, 100)
    s.wait(until="on-a-tty", timeout=20)
    s.write("typed\n")
    w = s.wait(until="^got:typed", timeout=20)
    assert w.ended_by == "match", w
    assert s.wait(timeout=20).returncode == 0


def gone(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def check_kill(c):
    s = c.start("sleep 300 & echo $!; (sleep 300 & echo $!); sh -c 'sleep 300 & echo $!; wait' & wait")
    pids, cursor = [], 0
    deadline = time.monotonic() + 20
    while len(pids) < 3 and time.monotonic() < deadline:
        got = s.read(cursor, wait=5)
        cursor = got.next_cursor
        pids += [int(x) for x in got.data.split()]
    assert len(pids) == 3, pids
    rep = s.kill()
    left = [p for p in pids if not gone(p)]
    assert rep["terminated"] and rep["survivors"] == [] and left == [], (rep, left)
    print(f"  killed a tree of {len(rep['pids_signalled'])} signalled pids: 0 left")


def keyed(c, key):
    return c.call("list", {"idempotency_key": key})["sessions"]


def check_keys(c):
    # A start again with the key of a kept session answers that session and starts nothing.
    key = "checks-" + os.urandom(8).hex()
    first = c.start("sleep 300", idempotency_key=key)
    again = c.start("sleep 300", idempotency_key=key)
    assert (again.id, again.idempotency_key) == (first.id, key), (first, again)
    assert [s["id"] for s in keyed(c, key)] == [first.id], keyed(c, key)
    # Without one, each start carries a fresh key of its own, found by `list`.
    a, b = c.start("true"), c.start("true")
    assert a.id != b.id and a.idempotency_key != b.idempotency_key, (a, b)
    for s in (a, b):
        assert [x["id"] for x in keyed(c, s.idempotency_key)] == [s.id], s
    try:
        c.start("true", idempotency_key="")
        raise AssertionError("an empty key was sent")
    except ValueError:
        pass
    rep = first.kill()
    assert rep["terminated"] and not rep["survivors"], rep


def check_unanswered_start(c):
    """A start the daemon does not answer in time (stopped): the error names the key, and a
    start again with it once the daemon is back gets the session that ran, and no second one."""
    import signal

    pid = c.status()["pid"]
    with stockade.Client(timeout=1.0) as impatient:
        impatient.status()
        os.kill(pid, signal.SIGSTOP)
        try:
            impatient.start("echo ran-once")
            raise AssertionError("a stopped daemon answered")
        except stockade.TimeoutExpired as e:
            key = e.idempotency_key
            assert f"stockade ps --key {key}" in e.message, e.message
        finally:
            os.kill(pid, signal.SIGCONT)
    again = c.start("echo ran-once", idempotency_key=key)
    assert again.wait(timeout=20).returncode == 0
    assert [s["id"] for s in keyed(c, key)] == [again.id], keyed(c, key)
    assert again.read().data == b"ran-once\n", again.read()


async def check_async(kind, args):
    if kind == "local":
        client = stockade.AsyncClient()
    else:
        url, token, ca = args
        client = stockade.AsyncClient(remote=url, token_file=token, ca_file=ca)
    async with client as c:
        slow = await c.start("sleep 0.5; echo late; sleep 60")
        # Two waits at once on one connection: answers are matched by id.
        fast = await c.start("echo early")
        w_slow, w_fast = await asyncio.gather(
            slow.wait(until="late", timeout=20), fast.wait(timeout=20))
        assert w_slow.ended_by == "match" and w_fast.returncode == 0, (w_slow, w_fast)
        assert [line async for line in fast.lines()] == ["early"]
        rep = await slow.kill()
        assert rep["terminated"] and not rep["survivors"], rep
        r = await c.run("printf abc")
        assert r.output == "abc", r
        key = "checks-async-" + os.urandom(8).hex()
        one = await c.start("echo once", idempotency_key=key)
        two = await c.start("echo once", idempotency_key=key)
        assert (two.id, two.idempotency_key) == (one.id, key), (one, two)


def main():
    kind, args = sys.argv[1], sys.argv[2:]
    blob = os.environ["STOCKADE_CHECK_BLOB"]
    with connect(kind, args) as c:
        check_run(c)
        check_bytes(c, blob)
        check_wait(c)
        check_pty(c)
        check_kill(c)
        check_keys(c)
        if kind == "local":
            check_unanswered_start(c)
    asyncio.run(check_async(kind, args))
    print(f"  {kind}: run, 100 MiB by cursor, until, PTY, kill tree, idempotency keys, asyncio: ok")


if __name__ == "__main__":
    main()
