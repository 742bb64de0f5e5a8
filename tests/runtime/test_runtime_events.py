"""A node's events over real UDP (SPEC 7, ``node.events()``), on both drivers: a receiver
process killed and started again under the same id (the sender hears ``peer_restarted`` at
its first exchange with the new incarnation, with as many messages of unknown outcome as its
cookies say, and links again), a refused key, a refused link, handshakes refused under load,
and the log line each event is. Every wait is for a condition, with a generous bound."""

from __future__ import annotations

import asyncio
import logging
import multiprocessing as mp
import tempfile
import time
from collections import Counter
from typing import Any

import pytest

import a3m
import a3m.aio
from a3m.runtime.events import EVENTS_KEPT, NodeEvent


def _receiver(q: Any, state_dir: str, node_id: str, port: int) -> None:
    """Child process: node ``node_id`` (its key in ``state_dir``) with a PULL ``sink`` that
    takes everything and says so; killed by the test."""
    import os

    os.environ["A3M_STATE_DIR"] = state_dir
    with a3m.Node(node_id, bind=f"127.0.0.1:{port}") as b:
        pull = b.socket(a3m.PULL, "sink")
        q.put(("address", b.address))
        while True:
            q.put(("taken", pull.recv(timeout=300)))


class Child:
    """The receiver process, started and killed and started again on the same port."""

    def __init__(self, node_id: str) -> None:
        self.ctx = mp.get_context("spawn")
        self.state = tempfile.mkdtemp(prefix="a3m-ev-")
        self.node_id = node_id
        self.proc: Any = None
        self.q: Any = None
        self.addr: tuple[str, int] = ("127.0.0.1", 0)

    def start(self) -> tuple[str, int]:
        # A new queue each time: a killed child may have died holding the old one's lock.
        self.q = self.ctx.Queue()
        self.proc = self.ctx.Process(target=_receiver, daemon=True,
                                     args=(self.q, self.state, self.node_id, self.addr[1]))
        self.proc.start()
        kind, addr = self.q.get(timeout=60)
        assert kind == "address"
        self.addr = (str(addr[0]), int(addr[1]))
        return self.addr

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.join(10)


def _check_restart(events: list[NodeEvent], cookies: list[a3m.Cookie], bee: str,
                   sent_at: float) -> NodeEvent:
    """The restart was told once, soon after the first send to the new incarnation, with the
    count of UNKNOWN outcomes the cookies gave; the link ended for it and came back."""
    restarts = [e for e in events if e.kind == "peer_restarted"]
    assert len(restarts) == 1, events
    ev = restarts[0]
    assert ev.peer == a3m.SocketId(bee, "") and ev.socket is None
    by = Counter(c.outcome for c in cookies)
    assert ev.unknown == by[a3m.UNKNOWN], (ev, by)
    assert by[a3m.DELIVERED] + by[a3m.UNKNOWN] + by[a3m.NOT_DELIVERED] == len(cookies)
    # Generous (a loaded machine): the event comes ~0.1-1 s after the first exchange.
    assert ev.time - sent_at < 20.0, ev.time - sent_at
    after = events[events.index(ev) - 1:]
    assert any(e.kind == "unlinked" and e.reason == "peer restarted" for e in events), events
    assert any(e.kind == "linked" for e in after), events
    return ev


def test_a_restarted_receiver_is_heard_and_the_stream_goes_on(
        caplog: pytest.LogCaptureFixture) -> None:
    child = Child("ev-bee")
    addr = child.start()
    try:
        with a3m.Node("ev-ant") as a, caplog.at_level(logging.INFO, logger="a3m.events"):
            a.associate("ev-bee", addr)
            push = a.socket(a3m.PUSH, "src")
            push.link("ev-bee/sink")
            assert push.wait_linked(timeout=30)
            first = next(a.events(timeout=30))
            assert first.kind == "linked"
            assert first.socket == a3m.SocketId("ev-ant", "src")
            assert first.peer == a3m.SocketId("ev-bee", "sink")
            for i in range(10):
                push.send(b"%d" % i, cookie=i, timeout=30)
            assert {push.recv_cookie(timeout=60).outcome for _ in range(10)} == {a3m.DELIVERED}
            child.kill()
            child.start()
            sent_at = time.time()
            for i in range(10, 40):  # the first exchange with the new incarnation
                push.send(b"%d" % i, cookie=i, timeout=30)
            events: list[NodeEvent] = []
            for ev in a.events(timeout=60):
                events.append(ev)
                if ev.kind == "linked":
                    break
            cookies = [push.recv_cookie(timeout=60) for _ in range(30)]
            ev = _check_restart(events, cookies, "ev-bee", sent_at)
            # The log said it: WARNING when messages were left unknown.
            said = [r for r in caplog.records if "peer_restarted ev-bee" in r.getMessage()]
            assert said and said[0].levelno == (logging.WARNING if ev.unknown else logging.INFO)
            # The stream goes on to the new incarnation, on the link made again.
            for i in range(40, 45):
                push.send(b"%d" % i, cookie=i, timeout=30)
            assert {push.recv_cookie(timeout=60).outcome for _ in range(5)} == {a3m.DELIVERED}
            assert a.stats["events"]["peer_restarted"] == 1
    finally:
        child.kill()


def test_a_restarted_receiver_is_heard_in_asyncio() -> None:
    child = Child("ev-bee-aio")
    addr = child.start()

    async def main() -> None:
        async with a3m.aio.Node("ev-ant-aio") as a:
            a.associate("ev-bee-aio", addr)
            push = a.socket(a3m.PUSH, "src")
            push.link("ev-bee-aio/sink")
            assert await push.wait_linked(timeout=30)
            kinds = [ev.kind async for ev in a.events(timeout=0)]
            assert kinds == ["linked"]
            for i in range(10):
                await push.send(b"%d" % i, cookie=i, timeout=30)
            for _ in range(10):
                assert (await push.recv_cookie(timeout=60)).outcome == a3m.DELIVERED
            await asyncio.to_thread(child.kill)
            await asyncio.to_thread(child.start)
            sent_at = time.time()
            for i in range(10, 40):
                await push.send(b"%d" % i, cookie=i, timeout=30)
            events: list[NodeEvent] = []
            async for ev in a.events(timeout=60):
                events.append(ev)
                if ev.kind == "linked":
                    break
            cookies = [await push.recv_cookie(timeout=60) for _ in range(30)]
            _check_restart(events, cookies, "ev-bee-aio", sent_at)
            await push.send(b"after", cookie="after", timeout=30)
            assert (await push.recv_cookie(timeout=60)).outcome == a3m.DELIVERED

    try:
        asyncio.run(main())
    finally:
        child.kill()


@pytest.mark.parametrize("driver", ["threads", "asyncio"])
def test_a_refused_key_and_a_refused_link_are_told(driver: str,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    """A node pinning another key for its peer hears ``key_refused`` (once, a WARNING line);
    a PUSH linking to a PUSH hears ``link_refused`` with the reason, and the PUSH refused
    hears it too (refused here)."""
    wrong = a3m.Node(key=bytes(range(32))).public_key
    assert wrong is not None

    def check(a_events: list[NodeEvent], b_events: list[NodeEvent]) -> None:
        keys = [e for e in a_events if e.kind == "key_refused"]
        assert len(keys) == 1 and keys[0].peer == a3m.SocketId("ev-kb", ""), a_events
        refused = [e for e in a_events if e.kind == "link_refused"]
        assert refused and refused[0].socket == a3m.SocketId("ev-ka2", "out")
        assert refused[0].peer == a3m.SocketId("ev-kb", "out")
        assert refused[0].reason == "incompatible socket types (by the peer)"
        here = [e for e in b_events if e.kind == "link_refused"]
        assert here and here[0].reason == "incompatible socket types (here)"

    def arrange(a: Any, a2: Any, b: Any) -> Any:
        """a pins a wrong key for b; a2 links a PUSH to b's PUSH (refused): a2's socket."""
        b.socket(a3m.PULL, "in")
        b.socket(a3m.PUSH, "out")
        a.associate("ev-kb", b.address, public_key=wrong)
        a2.associate("ev-kb", b.address)
        a.socket(a3m.PUSH, "out").link("ev-kb/in")
        bad = a2.socket(a3m.PUSH, "out")
        bad.link("ev-kb/out")
        return bad

    with caplog.at_level(logging.INFO, logger="a3m.events"):
        if driver == "threads":
            with a3m.Node("ev-ka") as a, a3m.Node("ev-ka2") as a2, a3m.Node("ev-kb") as b:
                bad = arrange(a, a2, b)
                assert bad.wait_linked(timeout=30) is False
                got: list[NodeEvent] = []
                deadline = time.monotonic() + 60
                while not any(e.kind == "key_refused" for e in got):
                    assert time.monotonic() < deadline
                    got += list(a.events(timeout=1))
                got += list(a2.events(timeout=0))
                check(got, list(b.events(timeout=0)))
        else:
            async def main() -> None:
                async with a3m.aio.Node("ev-ka") as a, a3m.aio.Node("ev-ka2") as a2, \
                        a3m.aio.Node("ev-kb") as b:
                    bad = arrange(a, a2, b)
                    assert await bad.wait_linked(timeout=30) is False
                    got: list[NodeEvent] = []
                    async for ev in a.events(timeout=60):
                        got.append(ev)
                        if ev.kind == "key_refused":
                            break
                    got += [ev async for ev in a2.events(timeout=0)]
                    check(got, [ev async for ev in b.events(timeout=0)])

            asyncio.run(main())
    lines = [r for r in caplog.records if "key_refused ev-kb" in r.getMessage()]
    assert len(lines) == 1 and lines[0].levelno == logging.WARNING
    assert any(r.levelno == logging.INFO and "link_refused" in r.getMessage()
               for r in caplog.records)


def test_unlinked_and_handshakes_refused_under_load() -> None:
    """A peer socket's close ends the link (``unlinked``, on both sides); a node whose
    handshake budget is spent tells ``handshake_refused`` with the counts."""
    with a3m.Node("ev-ua") as a, a3m.Node("ev-ub") as b:
        a.associate("ev-ub", b.address)
        pull = b.socket(a3m.PULL, "in")
        push = a.socket(a3m.PUSH, "out")
        push.link("ev-ub/in")
        assert push.wait_linked(timeout=30)
        push.send(b"x", timeout=30)
        assert pull.recv(timeout=30) == b"x"
        assert pull.close(timeout=30)
        ends: list[NodeEvent] = []
        for ev in a.events(timeout=30):
            ends.append(ev)
            if ev.kind == "unlinked":
                break
        assert [e.kind for e in ends] == ["linked", "unlinked"]
        assert ends[1].reason == "unlinked" and ends[1].peer == a3m.SocketId("ev-ub", "in")
        assert [e.kind for e in b.events(timeout=0)] == ["linked", "unlinked"]
    with a3m.Node("ev-busy", handshake_rate=0.001, retry_rate=0.0) as busy, \
            a3m.Node("ev-knock") as knock:
        knock.associate("ev-busy", busy.address)
        knock.socket(a3m.PUSH, "out").link("ev-busy/in")
        ev = next(busy.events(timeout=60))
        assert ev.kind == "handshake_refused" and ev.peer == a3m.SocketId("", "")
        assert "refused under load" in ev.reason


def test_events_kept_are_bounded_and_the_iterator_ends_at_close() -> None:
    node = a3m.Node("ev-bound")
    try:
        q = node._events
        with node._driver.lock:
            for i in range(EVENTS_KEPT + 10):
                q.add(NodeEvent("linked", a3m.SocketId("x", str(i))))
        assert node.stats["events_dropped"] == 10
        got = list(node.events(timeout=0))
        assert len(got) == EVENTS_KEPT and got[0].peer.tag == "10"
    finally:
        node.close(timeout=10)
    assert list(node.events()) == []  # closed: ends at once, no wait
    with pytest.raises(a3m.UsageError):
        next(node.events(timeout=-1))
