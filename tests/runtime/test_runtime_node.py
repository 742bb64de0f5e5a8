"""a3m.Node and its sockets over real UDP: the SPEC example, PUSH/PULL through the fault relay,
many sockets, many threads, flood bounds, an overspending peer, a custom socket kind, Poller."""

from __future__ import annotations

import select
import threading
import time
from collections import Counter
from types import SimpleNamespace
from typing import Any

import pytest

import a3m
from a3m.core import link as L
from a3m.core.socket_core import SocketCore
from a3m.patterns.pipeline import Pull
from a3m.testing.relay import FaultRelay

NET = {"loopback_datagram_size": 0}  # through the relay: a network-sized MTU


def test_spec_example() -> None:
    with a3m.Node("alpha", bind="127.0.0.1:0") as alpha, \
            a3m.Node("beta", bind="127.0.0.1:0") as beta:
        alpha.associate("beta", beta.address)
        pull = beta.socket(a3m.PULL, "sink")
        push = alpha.socket(a3m.PUSH, "source")
        push.link(("beta", "sink"))
        assert push.wait_linked(timeout=5)
        push.send(b"hello", timeout=5)
        assert pull.recv(timeout=5) == b"hello"
        push.send(b"again", timeout=5)
        msg = pull.recv_msg(timeout=5)
        assert msg.payload == b"again" and msg.source == a3m.SocketId("alpha", "source")
        assert push.links == [a3m.SocketId("beta", "sink")]


def test_pushpull_20000_through_fault_relay_exactly_once_in_order() -> None:
    with a3m.Node("alpha", **NET) as alpha, a3m.Node("beta", **NET) as beta, \
            FaultRelay({"beta": beta.address}, loss=0.2, dup=0.1, reorder=0.2, seed=11) as relay:
        alpha.associate("beta", relay.front("beta"))
        pull = beta.socket(a3m.PULL, "sink", capacity=512)
        push = alpha.socket(a3m.PUSH, "source")
        push.link(a3m.SocketId("beta", "sink"))
        assert push.wait_linked(timeout=10)
        n = 20_000
        got: list[bytes] = []
        th = threading.Thread(target=lambda: got.extend(pull.recv(timeout=60) for _ in range(n)))
        th.start()
        for i in range(n):
            push.send(b"%d" % i, timeout=60)
        th.join(timeout=120)
        assert got == [b"%d" % i for i in range(n)]
        # (sends in a tight loop share datagrams, as BATCHes: a few hundred datagrams in all)
        assert relay.stats.dropped > 40 and relay.stats.duplicated > 10
        with pytest.raises(a3m.Timeout):
            pull.recv(timeout=0.3)


def test_ten_push_ten_pull_totals_exact() -> None:
    """Four nodes; the pushers reach the pullers' nodes only through the fault relay."""
    nodes = [a3m.Node(f"n{i}", **NET) for i in range(4)]
    relay = FaultRelay({"n0": nodes[0].address, "n1": nodes[1].address}, loss=0.1, dup=0.05,
                       reorder=0.1, seed=5)
    try:
        for a in nodes[2:]:
            a.associate("n0", relay.front("n0"))
            a.associate("n1", relay.front("n1"))
        pulls = [nodes[i % 2].socket(a3m.PULL, f"pull{i}") for i in range(10)]
        pushes = [nodes[2 + i % 2].socket(a3m.PUSH, f"push{i}") for i in range(10)]
        for p in pushes:
            for q in pulls:
                p.link(q.id)
        for p in pushes:
            for q in pulls:
                assert p.wait_linked(q.id, timeout=30)
        per = 500

        def produce(k: int) -> None:
            for i in range(per):
                pushes[k].send(b"%d:%d" % (k, i), timeout=30)

        counts: Counter[bytes] = Counter()
        lock = threading.Lock()

        def consume(q: a3m.Socket, stop: threading.Event) -> None:
            while not stop.is_set():
                try:
                    m = q.recv(timeout=0.2)
                except a3m.Timeout:
                    continue
                with lock:
                    counts[m] += 1

        stop = threading.Event()
        readers = [threading.Thread(target=consume, args=(q, stop)) for q in pulls]
        writers = [threading.Thread(target=produce, args=(k,)) for k in range(10)]
        for t in readers + writers:
            t.start()
        for t in writers:
            t.join(timeout=60)
        deadline = time.monotonic() + 30
        while sum(counts.values()) < 10 * per and time.monotonic() < deadline:
            time.sleep(0.05)
        stop.set()
        for t in readers:
            t.join(timeout=5)
        assert sum(counts.values()) == 10 * per
        assert set(counts) == {b"%d:%d" % (k, i) for k in range(10) for i in range(per)}
        assert max(counts.values()) == 1
        assert relay.stats.dropped > 0
    finally:
        for nd in nodes:
            nd.close(timeout=5)
        relay.close()


def test_many_threads_on_one_socket() -> None:
    with a3m.Node("a") as na, a3m.Node("b") as nb:
        na.associate("b", nb.address)
        pull = nb.socket(a3m.PULL, "in", capacity=64)
        push = na.socket(a3m.PUSH, "out")
        push.link("b/in")
        assert push.wait_linked(timeout=5)
        got: list[bytes] = []
        lock = threading.Lock()

        def rx() -> None:
            for _ in range(2000):
                m = pull.recv(timeout=30)
                with lock:
                    got.append(m)

        def tx(k: int) -> None:
            for i in range(1000):
                push.send(b"%d-%d" % (k, i), timeout=30)

        ts = [threading.Thread(target=rx) for _ in range(2)]
        ts += [threading.Thread(target=tx, args=(k,)) for k in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(timeout=60)
        assert sorted(got) == sorted(b"%d-%d" % (k, i) for k in range(4) for i in range(1000))
        # per-link FIFO: each sender thread's messages arrive in its own order
        for k in range(4):
            mine = [int(g.split(b"-")[1]) for g in got if g.startswith(b"%d-" % k)]
            assert sorted(mine) == list(range(1000))


class Cheater(SocketCore):
    """A PUSH that ignores its credits (a hostile peer), built from the public hooks."""

    kind = "PUSH"
    peers = frozenset({"PULL"})
    receives = False

    def pattern_send(self, payload: bytes, **kw: object) -> bool:
        links = self.established_links()
        if not links:
            return False
        self.send_on(links[0], payload)  # no credit check
        return True


def test_flood_is_bounded_and_an_overspender_is_unlinked() -> None:
    with a3m.Node("sink") as ns, a3m.Node("honest") as nh, a3m.Node("evil") as ne:
        for n in (nh, ne):
            n.associate("sink", ns.address)
        pull = ns.socket(a3m.PULL, "in", capacity=16)
        honest = [nh.socket(a3m.PUSH, f"h{i}") for i in range(5)]
        for h in honest:
            h.link("sink/in")
            assert h.wait_linked(timeout=5)
        for h in honest:  # nobody reads at the sink: each link's credits, then no more
            for _ in range(16):
                h.send(b"x" * 1000, timeout=30)
            with pytest.raises(a3m.Timeout):
                h.send(b"x" * 1000, timeout=0.3)

        def held() -> int:
            with ns._driver.lock:
                return sum(len(lk.inq) for lk in pull._core.links.values())

        deadline = time.monotonic() + 30  # generous: they are on their way
        while held() < 5 * 16 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert held() == 5 * 16  # links x capacity, whatever the senders try
        ne.register_socket_type("CHEATER", Cheater)
        evil = ne.socket("CHEATER", "e")
        evil.link("sink/in")
        assert evil.wait_linked(timeout=5)
        for _ in range(40):  # 16 credits: the 17th is overspent and the sink unlinks it
            try:
                evil.send(b"y" * 1000, timeout=1)
            except a3m.Timeout:
                break  # already unlinked: nothing left to send on (it raced the sends)
        deadline = time.monotonic() + 30  # generous: a working sink is far quicker
        while pull._core.violations == 0 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert pull._core.violations == 1
        assert a3m.SocketId("evil", "e") not in pull.links
        assert len(pull.links) == 5


class Tap(SocketCore):
    """A user's custom socket kind: a PULL that only links with holders of a shared secret
    and counts bytes, using only the public extension points."""

    kind = "PULL"
    peers = frozenset({"PUSH"})
    sends = False

    def __init__(self, *args: object, **kw: object) -> None:
        super().__init__(*args, **kw)  # type: ignore[arg-type]
        self.bytes_seen = 0

    def check_link(self, peer: tuple[str, str], meta: dict[str, object]) -> int:
        return L.OK if meta.get("secret") == "open sesame" else L.REFUSED

    def on_data(self, link: object, payload: bytes) -> None:
        self.bytes_seen += len(payload)
        super().on_data(link, payload)  # type: ignore[arg-type]


class SecretPush(SocketCore):
    kind = "PUSH"
    peers = frozenset({"PULL"})
    receives = False

    def link_metadata(self) -> dict[str, object]:  # type: ignore[override]
        return {"secret": "open sesame"}


def test_custom_socket_kind_with_public_extension_points() -> None:
    with a3m.Node("a") as na, a3m.Node("b") as nb:
        na.associate("b", nb.address)
        nb.register_socket_type("TAP", Tap)
        na.register_socket_type("SECRET_PUSH", SecretPush)
        tap = nb.socket("TAP", "tap")
        good = na.socket("SECRET_PUSH", "good")
        bad = na.socket(a3m.PUSH, "bad")
        good.link("b/tap")
        bad.link("b/tap")
        assert good.wait_linked(timeout=5)
        assert not bad.wait_linked(timeout=5)  # fatal refusal: False, not a hang
        assert bad.refusal("b/tap") == L.REASONS[L.REFUSED]
        good.send(b"12345", timeout=5)
        assert tap.recv(timeout=5) == b"12345"
        assert tap._core.bytes_seen == 5  # type: ignore[attr-defined]


class FragilePull(Pull):
    """A PULL whose application hook fails on one message."""

    def on_data(self, link: L.Link, payload: bytes) -> None:
        if payload == b"boom":
            raise RuntimeError("on_data failed")
        super().on_data(link, payload)


def test_a_failing_hook_does_not_lose_the_rest_of_its_batch() -> None:
    """Messages that arrive in the same turn as one whose handling raised are still delivered
    (before the fix the whole batch after it was dropped, though Exon had acknowledged it)."""
    with a3m.Node("a") as na, a3m.Node("b") as nb:
        na.associate("b", nb.address)
        nb.register_socket_type("FRAGILE", FragilePull)
        pull = nb.socket("FRAGILE", "sink")
        push = na.socket(a3m.PUSH, "source")
        push.link("b/sink")
        assert push.wait_linked(timeout=5)
        with nb._driver.lock:  # b handles nothing until all have arrived: one batch
            for p in (b"1", b"2", b"boom", b"3", b"4"):
                push.send(p, timeout=5)
            time.sleep(0.2)
        assert [pull.recv(timeout=5) for _ in range(4)] == [b"1", b"2", b"3", b"4"]
        assert nb.stats["event_errors"] == 1


def test_a_message_too_large_is_refused_and_the_node_goes_on() -> None:
    """Refused by send before it reaches the node's outbox (found: it stayed at the head of the
    outbox, every I/O turn raised again, later sends failed and close raised)."""
    with a3m.Node("a", max_message_size=1 << 20) as na, a3m.Node("b") as nb:
        na.associate("b", nb.address)
        pull = nb.socket(a3m.PULL, "sink")
        push = na.socket(a3m.PUSH, "source")
        push.link("b/sink")
        assert push.wait_linked(timeout=5)
        with pytest.raises(a3m.MessageTooLarge):
            push.send(b"x" * ((1 << 20) + 1), timeout=5)
        push.send(b"y" * 60_000, timeout=5)
        push.send(b"after", timeout=5)
        assert pull.recv(timeout=5) == b"y" * 60_000
        assert pull.recv(timeout=5) == b"after"
        assert na.stats["loop_errors"] == 0 and na.stats["outbox"] == 0
        assert na.close(timeout=5)


def test_incompatible_peer_wait_linked_false_and_poller() -> None:
    with a3m.Node("a") as na, a3m.Node("b") as nb:
        na.associate("b", nb.address)
        nb.socket(a3m.PUSH, "wrong")
        push = na.socket(a3m.PUSH, "p")
        push.link("b/wrong")
        assert push.wait_linked("b/wrong", timeout=5) is False
        with pytest.raises(a3m.LinkRefused):
            push.send(b"x", timeout=1)
        pull = nb.socket(a3m.PULL, "in")
        push2 = na.socket(a3m.PUSH, "p2")
        poller = a3m.Poller()
        poller.register(pull, a3m.POLLIN)
        poller.register(push2, a3m.POLLOUT)
        assert poller.poll(timeout=0.1) == []
        push2.link("b/in")
        ready = poller.poll(timeout=5)
        assert ready == [(push2, a3m.POLLOUT)]
        push2.send(b"ping", timeout=5)
        deadline = time.monotonic() + 30  # generous: a working pair is far quicker
        while time.monotonic() < deadline:
            ready = dict(poller.poll(timeout=1))
            if pull in ready:
                break
        assert ready[pull] == a3m.POLLIN
        assert pull.recv(timeout=0) == b"ping"


def test_pair_both_ways_and_close_delivers_in_flight() -> None:
    with a3m.Node("a") as na, a3m.Node("b") as nb:
        na.associate("b", nb.address)
        pa = na.socket(a3m.PAIR, "p")
        pb = nb.socket(a3m.PAIR, "p")
        pa.link("b/p")
        assert pa.wait_linked(timeout=5) and pb.wait_linked(timeout=5)
        pa.send(b"to b", timeout=5)
        pb.send(b"to a", timeout=5)
        assert pb.recv(timeout=5) == b"to b" and pa.recv(timeout=5) == b"to a"
        third = nb.socket(a3m.PAIR, "q")
        third.link("b/p")  # same node: the handshake never leaves it
        assert not third.wait_linked(timeout=0.5)  # a PAIR takes one peer only (non-fatal)
        for i in range(100):
            pa.send(b"%d" % i, timeout=5)
        assert pa.close(timeout=10)  # unlinks after everything in flight was delivered
        assert [pb.recv(timeout=5) for _ in range(100)] == [b"%d" % i for i in range(100)]
        assert third.wait_linked(timeout=10)  # pb's slot is free again: the retry succeeds
        assert pa.get_option("capacity") == 256
        with pytest.raises(a3m.Closed):
            pa.send(b"late")


def _req_rep_round_trips(n: int, **options: float) -> tuple[a3m.Node, a3m.Node]:
    server, client = a3m.Node("srv", **options), a3m.Node("cli", **options)
    client.associate("srv", server.address)
    rep = server.socket(a3m.REP, "rep")
    req = client.socket(a3m.REQ, "req")
    req.link("srv/rep")
    assert req.wait_linked(timeout=5)

    def serve() -> None:
        for _ in range(n):
            rep.send(rep.recv(timeout=10), timeout=10)

    t = threading.Thread(target=serve)
    t.start()
    for i in range(n):
        req.send(b"%d" % i, timeout=10)
        assert req.recv(timeout=10) == b"%d" % i
    t.join()
    return server, client


def test_busy_poll_is_used_for_round_trips_and_can_be_turned_off() -> None:
    """A waiting thread polls briefly before it sleeps (replies within the budget skip a
    thread wake-up); busy_poll_s=0 never polls; out-of-range values are refused."""
    server, client = _req_rep_round_trips(300)
    try:
        assert client._driver.poll_hits + server._driver.poll_hits > 0
    finally:
        server.close(timeout=5)
        client.close(timeout=5)
    server, client = _req_rep_round_trips(50, busy_poll_s=0)
    try:
        assert client._driver.poll_hits == server._driver.poll_hits == 0
    finally:
        server.close(timeout=5)
        client.close(timeout=5)
    with pytest.raises(a3m.UsageError, match="busy_poll_s"):
        a3m.Node("x", busy_poll_s=0.5)


def test_an_idle_wait_does_not_spin(monkeypatch: pytest.MonkeyPatch) -> None:
    """Polling is bounded per wait: a thread waiting for a message that does not come makes
    a few waits (each up to one second) and polls a few hundred times in each (the budget is
    200 us). Counted, not timed: a spinning wait would make tens of thousands of looks in
    these 1.5 s, and a slower machine only makes fewer."""
    from a3m.runtime import driver

    looks = [0]
    real = select.select

    def counted(*args: Any) -> Any:
        if args[3] == 0:
            looks[0] += 1
        return real(*args)

    monkeypatch.setattr(driver, "select", SimpleNamespace(select=counted, poll=select.poll,
                                                          POLLIN=select.POLLIN))
    with a3m.Node("idle") as node:
        pull = node.socket(a3m.PULL, "sink")
        turns = node._driver.leader_turns
        looks[0] = 0
        with pytest.raises(a3m.Timeout):
            pull.recv(timeout=1.5)
        turns = node._driver.leader_turns - turns
        assert 1 <= turns <= 20, turns
        assert looks[0] <= 2000 * turns, (looks[0], turns)


def test_a_socket_id_prints_as_the_name_calls_accept() -> None:
    sid = a3m.SocketId("beta", "sink")
    assert str(sid) == "beta/sink" and f"{sid}" == "beta/sink"
    assert repr(sid) == "SocketId(node='beta', tag='sink')"
    assert a3m.SocketId.of(str(sid)) == sid
    assert str(a3m.SocketId("a/b", "c")) == "a/b/c" and a3m.SocketId.of("a/b/c") == ("a/b", "c")
