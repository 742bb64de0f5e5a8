"""Cookies over real UDP (SPEC 7): what became of each message sent with ``cookie=``.

Through a lossy, duplicating, reordering relay; with the receiver's read-ahead inbox (an
arrival is not a take); with the receiving socket closing with messages unread; and with a
receiver process killed mid-stream and restarted under the same id. Every wait is for a
condition, with a generous bound.
"""

from __future__ import annotations

import multiprocessing as mp
import threading
import time
from collections import Counter
from typing import Any

import pytest

import a3m
from a3m.testing.relay import FaultRelay


def outcomes(sock: a3m.Socket, n: int, timeout: float = 30.0) -> list[a3m.Cookie]:
    return [sock.recv_cookie(timeout=timeout) for _ in range(n)]


def test_only_what_the_application_took_is_delivered_the_rest_not() -> None:
    """The PULL's inbox reads ahead, but an outcome is DELIVERED only once recv returned the
    message; closing the PULL with the rest unread makes them NOT_DELIVERED."""
    with a3m.Node("ck-a") as a, a3m.Node("ck-b") as b:
        a.associate("ck-b", b.address)
        pull = b.socket(a3m.PULL, "sink")
        push = a.socket(a3m.PUSH, "src")
        push.link("ck-b/sink")
        assert push.wait_linked(timeout=10)
        for i in range(100):
            push.send(b"%d" % i, cookie=("job", i), timeout=10)
        plain = [push.send(b"plain", timeout=10)]  # no cookie: no outcome
        taken = [int(pull.recv(timeout=10)) for _ in range(40)]
        first = outcomes(push, 40)
        assert {c.value for c in first} == {("job", i) for i in taken}
        assert {c.outcome for c in first} == {a3m.DELIVERED}
        assert {c.peer for c in first} == {a3m.SocketId("ck-b", "sink")}
        assert push.cookies() == []  # nothing more is known: the rest was not taken
        pull.close(timeout=10)
        rest = outcomes(push, 60)
        assert {c.value for c in rest} == {("job", i) for i in range(100) if i not in taken}
        assert {c.outcome for c in rest} == {a3m.NOT_DELIVERED}
        assert push.cookies() == [] and plain == [None]


def test_outcomes_through_a_lossy_relay_are_exact() -> None:
    with a3m.Node("ckr-b") as b, a3m.Node("ckr-a") as a, FaultRelay(
            {"ckr-b": b.address}, loss=0.2, dup=0.1, reorder=0.3, seed=26) as relay:
        a.associate("ckr-b", relay.front("ckr-b"))
        pull = b.socket(a3m.PULL, "sink")
        push = a.socket(a3m.PUSH, "src")
        push.link("ckr-b/sink")
        assert push.wait_linked(timeout=30)
        n = 500
        got: list[int] = []
        reader = threading.Thread(target=lambda: got.extend(
            int(pull.recv(timeout=60)) for _ in range(n)))
        reader.start()
        assert push.send_many([b"%d" % i for i in range(n)], timeout=120,
                              cookies=list(range(n))) == n
        reader.join(180)
        assert sorted(got) == list(range(n))
        done = outcomes(push, n, timeout=60)
        assert sorted(c.value for c in done) == list(range(n))
        assert {c.outcome for c in done} == {a3m.DELIVERED}


def test_req_rep_both_ways_and_the_poller() -> None:
    with a3m.Node("ckq-a") as a, a3m.Node("ckq-b") as b:
        a.associate("ckq-b", b.address)
        rep = b.socket(a3m.REP, "rep")
        req = a.socket(a3m.REQ, "req")
        req.link("ckq-b/rep")
        assert req.wait_linked(timeout=10)
        poller = a3m.Poller()
        poller.register(req, a3m.POLLCOOKIE)
        assert poller.poll(timeout=0) == []
        req.send(b"question", cookie="q1", timeout=10)
        assert rep.recv(timeout=10) == b"question"
        assert poller.poll(timeout=30) == [(req, a3m.POLLCOOKIE)]
        c = req.recv_cookie(timeout=0)
        assert (c.value, c.outcome, c.peer) == ("q1", a3m.DELIVERED, a3m.SocketId("ckq-b", "rep"))
        rep.send(b"answer", cookie="a1", timeout=10)
        with pytest.raises(a3m.WouldBlock):
            rep.recv_cookie(timeout=0)  # the reply is not taken before req.recv returns it
        assert req.recv(timeout=10) == b"answer"
        c = rep.recv_cookie(timeout=30)
        assert (c.value, c.outcome) == ("a1", a3m.DELIVERED)


def test_pub_gives_one_outcome_per_subscriber() -> None:
    with a3m.Node("ckp-p") as p, a3m.Node("ckp-s") as s:
        p.associate("ckp-s", s.address)
        pub = p.socket(a3m.PUB, "pub")
        subs = [s.socket(a3m.SUB, f"sub{i}") for i in range(3)]
        for sub in subs:
            sub.subscribe(b"")
            pub.link(("ckp-s", sub.id.tag))
        for sub in subs:
            assert pub.wait_linked(("ckp-s", sub.id.tag), timeout=10)
        for sub in subs:
            assert sub.wait_linked(timeout=10)
        pub.send(b"news", topic=b"t", cookie=7, timeout=10)
        for sub in subs[:2]:
            assert sub.recv(timeout=10) == b"news"
        got = outcomes(pub, 2)
        assert sorted(c.peer.tag for c in got) == ["sub0", "sub1"]
        assert {(c.value, c.outcome) for c in got} == {(7, a3m.DELIVERED)}
        subs[2].close(timeout=10)
        (last,) = outcomes(pub, 1)
        assert (last.peer.tag, last.outcome) == ("sub2", a3m.NOT_DELIVERED)


def test_unread_outcomes_are_bounded() -> None:
    with a3m.Node("ckm-a") as a, a3m.Node("ckm-b") as b:
        a.associate("ckm-b", b.address)
        pull = b.socket(a3m.PULL, "sink")
        push = a.socket(a3m.PUSH, "src", max_cookies=5)
        push.link("ckm-b/sink")
        assert push.wait_linked(timeout=10)
        for i in range(5):
            push.send(b"x", cookie=i, timeout=10)
        with pytest.raises(a3m.WouldBlock, match="max_cookies"):
            push.send(b"x", cookie=5, timeout=0)
        push.send(b"no cookie, no bound", timeout=10)
        for _ in range(6):
            pull.recv(timeout=10)
        assert push.recv_cookie(timeout=30).outcome == a3m.DELIVERED  # one read: room again
        push.send(b"x", cookie=5, timeout=30)


@pytest.mark.parametrize("kind, ok, bad", [
    (a3m.PUSH, {}, "cokie"), (a3m.PAIR, {}, "topic"), (a3m.DEALER, {}, "group"),
    (a3m.PUB, {"topic": b"t"}, "group"), (a3m.ROUTER, {"to": None}, "topic"),
    (a3m.RADIO, {"group": "g"}, "topic"), (a3m.BUS, {}, "to"), (a3m.SURVEYOR, {}, "timeout_s"),
    (a3m.REQ, {}, "to"), (a3m.REP, {}, "topic"), (a3m.RESPONDENT, {}, "group"),
    (a3m.XPUB, {"topic": b"t"}, "strategy"), (a3m.XSUB, {}, "topic"),
])
def test_send_refuses_keywords_its_kind_does_not_take(kind: str, ok: dict[str, Any],
                                                      bad: str) -> None:
    with a3m.Node("ckw") as n:
        sock = n.socket(kind, "s")
        with pytest.raises(TypeError, match=repr(bad)):
            sock.send(b"a", timeout=0, **{bad: 1}, **ok)
        with pytest.raises(TypeError, match=repr(bad)):
            sock.send_many([b"a"], timeout=0, **{bad: 1}, **ok)


def _receiver(addr_q: Any, go: Any, state_dir: str, port: int) -> None:
    """Child process: node ``ckk-b`` (its key in ``state_dir``) with a PULL that takes
    messages slowly; it is killed mid-stream."""
    import os
    import time

    os.environ["A3M_STATE_DIR"] = state_dir
    with a3m.Node("ckk-b", bind=f"127.0.0.1:{port}") as b:
        pull = b.socket(a3m.PULL, "sink")
        addr_q.put(("address", b.address))
        taken = 0
        while True:
            pull.recv(timeout=120)
            taken += 1
            addr_q.put(("taken", taken))
            time.sleep(0.02)  # slowly: the kill finds messages unread


def test_a_receiver_killed_mid_stream_and_restarted() -> None:
    """Every message gets one outcome: DELIVERED for those taken (the child reports each
    take), never NOT_DELIVERED for one taken, UNKNOWN where the crash hid the answer; the
    stream then goes on to the restarted receiver."""
    import tempfile

    ctx = mp.get_context("spawn")
    q: Any = ctx.Queue()
    state = tempfile.mkdtemp(prefix="a3m-ck-")
    child = ctx.Process(target=_receiver, args=(q, None, state, 0), daemon=True)
    child.start()
    addr = tuple(q.get(timeout=60)[1])
    try:
        with a3m.Node("ckk-a") as a:
            a.associate("ckk-b", addr)
            push = a.socket(a3m.PUSH, "src", reconnect=True, keepalive_s=0.5,
                            retry_base_s=0.05, retry_max_s=0.5)
            push.link("ckk-b/sink")
            assert push.wait_linked(timeout=30)
            for i in range(200):
                push.send(b"%d" % i, cookie=i, timeout=30)
            taken = 0
            while taken < 50:
                taken = q.get(timeout=60)[1]
            child.kill()
            child.join(10)
            # A new queue: the killed child may have died holding the old one's write lock.
            q = ctx.Queue()
            child = ctx.Process(target=_receiver, args=(q, None, state, addr[1]), daemon=True)
            child.start()
            msg = q.get(timeout=60)
            assert msg[0] == "address" and tuple(msg[1]) == addr
            got: list[a3m.Cookie] = []
            while len(got) < 200:
                got.append(push.recv_cookie(timeout=120))
            by = Counter(c.outcome for c in got)
            assert sorted(c.value for c in got) == list(range(200))
            # The first 50 were taken: DELIVERED, or UNKNOWN if the crash hid their report;
            # never NOT_DELIVERED. The restarted PULL takes what comes after.
            for c in got:
                if c.value < 50:
                    assert c.outcome in (a3m.DELIVERED, a3m.UNKNOWN), c
            assert by[a3m.DELIVERED] >= 1
            for i in range(200, 210):  # the stream goes on to the new incarnation
                push.send(b"%d" % i, cookie=i, timeout=60)
            later = [push.recv_cookie(timeout=120) for _ in range(10)]
            assert {c.outcome for c in later} == {a3m.DELIVERED}
    finally:
        child.kill()
        child.join(10)


def test_the_guide_work_queue_runs() -> None:
    """The cookie guide's work queue (docs/cookies.md), as printed there."""
    import re
    import subprocess
    import sys
    from pathlib import Path

    page = (Path(__file__).parents[2] / "docs" / "cookies.md").read_text()
    code = re.search(r"<!-- example: work queue.*?-->\n```python\n(.*?)```", page, re.S)
    assert code is not None
    done = subprocess.run([sys.executable, "-c", code.group(1)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_a_custom_socket_kind_gets_cookies_through_the_extension_points() -> None:
    """A user's FANOUT (every message to every FANIN, with send_on) and FANIN (the default
    receive hooks): a send with a cookie gives one outcome per FANIN, each DELIVERED once
    that FANIN's application took the message."""
    from a3m.core import SocketCore

    class FanOut(SocketCore):
        kind = "FANOUT"
        peers = frozenset({"FANIN"})
        receives = False

        def pattern_send(self, payload: bytes, **kw: Any) -> bool:
            links = self.established_links()
            if not links or not all(lk.can_send for lk in links):
                return False
            for lk in links:
                self.send_on(lk, payload)
            return True

    class FanIn(SocketCore):
        kind = "FANIN"
        peers = frozenset({"FANOUT"})
        sends = False

    with a3m.Node("ckc-a") as a, a3m.Node("ckc-b") as b:
        for n in (a, b):
            n.register_socket_type("FANOUT", FanOut)
            n.register_socket_type("FANIN", FanIn)
        a.associate("ckc-b", b.address)
        out = a.socket("FANOUT", "out")
        ins = [b.socket("FANIN", f"in{i}") for i in range(2)]
        for s in ins:
            out.link(("ckc-b", s.id.tag))
            assert out.wait_linked(("ckc-b", s.id.tag), timeout=10)
        out.send(b"to all", cookie="fan", timeout=10)
        assert ins[0].recv(timeout=10) == b"to all"
        (first,) = outcomes(out, 1)
        assert (first.peer.tag, first.outcome) == ("in0", a3m.DELIVERED)
        assert out.cookies() == []
        assert ins[1].recv(timeout=10) == b"to all"
        (second,) = outcomes(out, 1)
        assert (second.value, second.peer.tag, second.outcome) == ("fan", "in1", a3m.DELIVERED)


def test_buffered_sends_whose_link_vanished_say_not_delivered() -> None:
    """Sends with a cookie waiting in the socket's send buffer (a stream's, for the I/O
    thread's next turn) when the socket's last link goes (the receiver closed): they never
    left, so they are NOT_DELIVERED (an empty peer), not held for a link that may never
    come; and flush() then has nothing to wait for (issue 40: a Spark sink's flush returned
    False instead of hearing NOT_DELIVERED). A send without a cookie waits for a link."""
    with a3m.Node("sbv-a") as a:
        push = a.socket(a3m.PUSH, "out")
        with a._driver.lock:  # as a stream's send buffer holds them when the link goes
            push._sbuf.open(8)
            assert push._sbuf.offer(b"one", "c1") and push._sbuf.offer(b"two")
            assert push._sbuf.offer(b"three", "c3")
            push._drain(0.0)
        got = push.cookies(10)
        assert [(c.value, c.outcome, c.peer) for c in got] == [
            ("c1", a3m.NOT_DELIVERED, a3m.SocketId("", "")),
            ("c3", a3m.NOT_DELIVERED, a3m.SocketId("", ""))]
        assert push._sbuf.items == [b"two"] and push._sbuf.stalled
        assert a.flush(timeout=0.2) is False  # b"two" waits for a link: not acknowledged
        t0 = time.monotonic()
        assert push.close() is False  # no link will take it: given up at once, and said so
        assert time.monotonic() - t0 < 5.0  # (generous: no wait at all is needed)
