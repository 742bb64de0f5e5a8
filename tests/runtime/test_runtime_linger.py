"""Closing over real UDP: the node that closes first lingers in the background, so that its
peer's close is prompt and clean too (docs/exon-wire.md, "Closing: the linger")."""

from __future__ import annotations

import threading
import time

import pytest

import a3m
from a3m.exon import Endpoint
from a3m.testing.relay import FaultRelay

NET = {"loopback_datagram_size": 0}  # through the relay: a network-sized MTU


def test_push_pull_through_a_lossy_relay_both_closes_prompt_and_clean() -> None:
    """Two nodes exchange PUSH -> PULL messages through the fault relay (loss 0.3), then the
    sender closes, then the receiver; eight such pairs (in threads, each with its relay).
    Every close returns True well under the 10 s a ``with a3m.Node(...)`` gives it (a few
    seconds at worst: retransmission back-off at this loss rate), and every message arrives
    exactly once. (Before the linger, a release or answer lost on the first closer's last
    step made the second close wait close_revoke_timeout_s = 10 s in about a third of the
    pairs.)"""
    slow: list[tuple[int, str, float, bool]] = []
    errors: list[BaseException] = []

    def one(rnd: int) -> None:
        snd, rcv = a3m.Node(f"snd{rnd}", **NET), a3m.Node(f"rcv{rnd}", **NET)
        relay = FaultRelay({snd.id: snd.address, rcv.id: rcv.address}, loss=0.3, dup=0.1,
                           reorder=0.2, seed=100 + rnd)
        try:
            snd.associate(rcv.id, relay.front(rcv.id))
            rcv.associate(snd.id, relay.front(snd.id))
            pull = rcv.socket(a3m.PULL, "in")
            push = snd.socket(a3m.PUSH, "out")
            push.link((rcv.id, "in"))
            sent = [b"r%d-%d" % (rnd, i) for i in range(20)]
            for m in sent:
                push.send(m, timeout=30)
            got = [pull.recv(timeout=30) for _ in sent]
            with pytest.raises(a3m.Timeout):
                pull.recv(timeout=0.3)  # no duplicate
            assert got == sent  # each once, in order
            for name, node in (("snd", snd), ("rcv", rcv)):
                t0 = time.monotonic()
                clean = node.close(timeout=10)
                took = time.monotonic() - t0
                if not clean or took > 7.0:
                    slow.append((rnd, name, round(took, 2), clean))
            assert snd._proto.stats.revocations_abandoned == 0
            assert rcv._proto.stats.revocations_abandoned == 0
        except BaseException as exc:
            errors.append(exc)
        finally:
            snd.close(timeout=1)
            rcv.close(timeout=1)
            relay.close()

    threads = [threading.Thread(target=one, args=(rnd,)) for rnd in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(120)
    assert not errors, errors
    assert slow == []


def test_the_linger_runs_in_the_background_and_ends_by_itself() -> None:
    opts = {"rto_max_s": 0.25, "rto_initial_s": 0.1}  # linger = 4 x 0.25 s
    with a3m.Node("b", **opts) as b:
        a = a3m.Node("a", **opts)
        a.associate("b", b.address)
        pull = b.socket(a3m.PULL, "in")
        push = a.socket(a3m.PUSH, "out")
        push.link(("b", "in"))
        push.send(b"x", timeout=5)
        assert pull.recv(timeout=5) == b"x"
        t0 = time.monotonic()
        assert a.close(timeout=5) is True
        assert time.monotonic() - t0 < 2.0
        drv = a._driver
        assert drv.lingering and not drv.running
        with pytest.raises(a3m.Closed):
            a.socket(a3m.PUSH)
        deadline = time.monotonic() + 5
        while drv._thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not drv._thread.is_alive() and not drv.lingering
        assert drv._sock.fileno() == -1  # it closed its socket itself
        assert a._proto.is_finished()


def test_a_node_started_again_with_the_same_id_and_port_ends_the_linger() -> None:
    a = Endpoint("a")
    b = Endpoint("b")
    port = a.address[1]
    try:
        a.associate("b", b.address)
        a.send("b", b"x", timeout=5)
        assert b.recv(timeout=5) == ("a", b"x")
        assert a.close(timeout=5) is True
        old = a._driver
        assert old.lingering
        a2 = Endpoint("a", bind=f"127.0.0.1:{port}")  # the port is free at once
        try:
            assert not old.lingering and not old._thread.is_alive()
            a2.associate("b", b.address)
            a2.send("b", b"y", timeout=5)
            assert b.recv(timeout=5) == ("a", b"y")
        finally:
            assert a2.close(timeout=5) is True
    finally:
        assert b.close(timeout=5) is True


def test_an_unclean_close_does_not_linger() -> None:
    a = Endpoint("a", close_revoke_timeout_s=0.3)
    b = Endpoint("b")
    a.associate("b", b.address)
    b.associate("a", a.address)
    b.send("a", b"x", timeout=5)  # b holds envelopes of a's record
    assert a.recv(timeout=5) == ("b", b"x")
    b._driver.stop()  # b crashes: it will never confirm a's revocation
    t0 = time.monotonic()
    assert a.close(timeout=5) is False  # a sender never confirmed: not clean
    assert time.monotonic() - t0 < 2.0
    assert a._proto.stats.revocations_abandoned == 1
