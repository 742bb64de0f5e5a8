"""Closing over real UDP: the node that closes first lingers in the background, so that its
peer's close is prompt and clean too (docs/exon-wire.md, "Closing: the linger")."""

from __future__ import annotations

import socket
import threading
import time

import pytest

import a3m
from a3m.exon import Endpoint
from a3m.runtime import driver
from a3m.testing.relay import FaultRelay

NET = {"loopback_datagram_size": 0}  # through the relay: a network-sized MTU
REVOKE_S = 120.0  # close_revoke_timeout_s of the lossy pairs (see below)


def test_push_pull_through_a_lossy_relay_both_closes_prompt_and_clean() -> None:
    """Two nodes exchange PUSH -> PULL messages through the fault relay (loss 0.3), then the
    sender closes, then the receiver; eight such pairs (in threads, each with its relay).
    Every close is clean and no revocation is abandoned, and every message arrives exactly
    once. (Before the linger, a release or answer lost on the first closer's last step made
    the second close wait close_revoke_timeout_s, then abandon the revocation, in about a
    third of the pairs.) That is counted, not timed: close_revoke_timeout_s is 120 s here,
    so a slow machine's retransmission back-off (a few seconds at this loss rate on a quiet
    one) never reaches it, while a close left waiting for an answer that never comes
    would abandon its revocation there."""
    slow: list[tuple[int, str, float, bool]] = []
    errors: list[BaseException] = []

    def one(rnd: int) -> None:
        snd = a3m.Node(f"snd{rnd}", close_revoke_timeout_s=REVOKE_S, **NET)
        rcv = a3m.Node(f"rcv{rnd}", close_revoke_timeout_s=REVOKE_S, **NET)
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
                push.send(m, timeout=60)
            got = [pull.recv(timeout=60) for _ in sent]
            with pytest.raises(a3m.Timeout):
                pull.recv(timeout=0.3)  # no duplicate
            assert got == sent  # each once, in order
            for name, node in (("snd", snd), ("rcv", rcv)):
                t0 = time.monotonic()
                clean = node.close(timeout=REVOKE_S + 30)
                if not clean:
                    slow.append((rnd, name, round(time.monotonic() - t0, 2), clean))
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
        th.join(2 * REVOKE_S + 120)
    assert not errors, errors
    assert slow == []


def test_the_linger_runs_in_the_background_and_ends_by_itself() -> None:
    """close() returns at is_closed(), before the linger (still on when it returns: no timing
    needed), which then ends by itself. The linger is 5 s so that a machine pausing this
    thread after close() does not see it over already."""
    opts = {"rto_max_s": 0.25, "rto_initial_s": 0.1, "close_linger_rtos": 20.0}  # 20 x 0.25 s
    with a3m.Node("b", **opts) as b:
        a = a3m.Node("a", **opts)
        a.associate("b", b.address)
        pull = b.socket(a3m.PULL, "in")
        push = a.socket(a3m.PUSH, "out")
        push.link(("b", "in"))
        push.send(b"x", timeout=5)
        assert pull.recv(timeout=5) == b"x"
        assert a.close(timeout=30) is True
        drv = a._driver
        assert drv.lingering and not drv.running
        with pytest.raises(a3m.Closed):
            a.socket(a3m.PUSH)
        deadline = time.monotonic() + 60  # generous: the linger is 5 s
        while drv._io_thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not drv._io_thread.is_alive() and not drv.lingering
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
            assert not old.lingering and not old._io_thread.is_alive()
            a2.associate("b", b.address)
            a2.send("b", b"y", timeout=5)
            assert b.recv(timeout=5) == ("a", b"y")
        finally:
            assert a2.close(timeout=5) is True
    finally:
        assert b.close(timeout=5) is True


def test_a_close_whose_revocation_is_never_confirmed_is_not_clean() -> None:
    a = Endpoint("a", close_revoke_timeout_s=0.3)
    b = Endpoint("b")
    a.associate("b", b.address)
    b.associate("a", a.address)
    b.send("a", b"x", timeout=5)  # b holds envelopes of a's record
    assert a.recv(timeout=5) == ("b", b"x")
    b._driver.stop()  # b crashes: it will never confirm a's revocation
    # False by the revocation's own timeout (0.3 s, counted below), not by close's (60 s)
    assert a.close(timeout=60) is False  # a sender never confirmed: not clean
    assert a._proto.stats.revocations_abandoned == 1


def test_a_close_with_messages_past_the_exon_window_delivers_them_all() -> None:
    """A sender closes its node while more is sent than Exon's window holds (a 16-piece
    window, 100 messages of 200 kB queued at once): what waits above Exon (the bridge's outbox) goes
    into Exon before Exon closes, so the close is clean only when every message arrived.
    Before, Exon refused the outbox once closing and the bridge dropped it silently, with a
    clean close on both sides (300 x 1 MiB on loopback lost about a quarter)."""
    rcv = a3m.Node("drain-rcv")
    snd = a3m.Node("drain-snd", window_per_peer=16, window_global=16)
    try:
        snd.associate(rcv.id, rcv.address)
        pull = rcv.socket(a3m.PULL, "in", capacity=1000)
        push = snd.socket(a3m.PUSH, "out")
        push.link((rcv.id, "in"))
        assert push.wait_linked(timeout=60)
        sent = [b"d-%d" % i + b"." * 200_000 for i in range(100)]
        for m in sent:  # one by one: corked, they leave with the node's next output
            push.send(m, timeout=60)
        assert snd.close(timeout=120) is True
        assert snd.stats["dropped_closing"] == 0
        got = []
        while len(got) < len(sent):
            got.append(pull.recv(timeout=60))
        assert sorted(got) == sorted(sent)
        with pytest.raises(a3m.Timeout):
            pull.recv(timeout=0.3)  # no duplicate
    finally:
        snd.close(timeout=1)
        rcv.close(timeout=5)


def _lingering_node(name: str, peer: a3m.Node) -> a3m.Node:
    """A node that sent ``peer`` a message and closed cleanly: it lingers (a long linger, so
    only wait_lingering's own rules end the waits below)."""
    a = a3m.Node(name, rto_max_s=0.25, rto_initial_s=0.1, close_linger_rtos=400.0)
    a.associate(peer.id, peer.address)
    pull = peer.socket(a3m.PULL, name)
    push = a.socket(a3m.PUSH, "out")
    push.link((peer.id, name))
    push.send(b"x", timeout=5)
    assert pull.recv(timeout=5) == b"x"
    assert a.close(timeout=30) is True
    assert a._driver.lingering
    return a


def test_the_exit_wait_ends_once_a_lingering_node_is_quiet() -> None:
    """At the interpreter's exit (atexit), wait_lingering keeps a lingering node's daemon I/O
    thread answering its peers while they still speak; with nobody speaking it ends after
    the node's quiet spell, not at its bound nor at the linger's end (100 s here)."""
    with a3m.Node("b") as b:
        a = _lingering_node("a", b)
        try:
            drv = a._driver
            assert drv.linger_quiet_s >= driver.EXIT_QUIET_MIN_S
            waited = driver.wait_lingering(max_s=60.0)
            assert waited < 60.0  # the quiet spell ended it, well before its bound
            assert drv.lingering  # the linger itself goes on, in the background
        finally:
            driver.end_lingering("a")


def test_the_exit_wait_lasts_while_a_peer_still_speaks() -> None:
    """Datagrams keep coming to the lingering node (a peer sending its last token again, as
    when our ACK was lost): the wait lasts until they stop, then a quiet spell. Counted by
    events: the sender has sent all its datagrams when the wait returns."""
    with a3m.Node("b") as b:
        a = _lingering_node("a2", b)
        try:
            drv = a._driver
            drv.linger_quiet_s = 1.0  # longer than any pause of this machine between sends
            sent = [0]

            def speak() -> None:
                with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                    for _ in range(60):  # 3 s: past a quiet spell from the linger's start
                        s.sendto(b"\x00" * 8, a.address)
                        sent[0] += 1
                        time.sleep(0.05)

            th = threading.Thread(target=speak)
            th.start()
            while not sent[0]:
                time.sleep(0.005)
            driver.wait_lingering(max_s=120.0)
            assert sent[0] == 60  # it waited for the last one (and then the quiet spell)
            th.join()
        finally:
            driver.end_lingering("a2")


def test_the_exit_wait_has_a_bound() -> None:
    with a3m.Node("b") as b:
        a = _lingering_node("a3", b)
        try:
            a._driver.linger_quiet_s = 1e6
            assert driver.wait_lingering(max_s=0.2) >= 0.2
        finally:
            driver.end_lingering("a3")
