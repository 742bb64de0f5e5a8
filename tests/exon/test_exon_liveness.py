"""Peer liveness: a peer that holds messages of ours and stays silent for ``peer_timeout_s`` is
reported once (PeerUnreachable), and again reachable when heard (PeerReachable); nothing is
dropped by the signal. ``abandon(peer)`` reports every message it held (OutcomeUnknown, or
NotDelivered when it never wholly left) and never sends one again, even when the peer comes
back. A closing node gives up a silent peer instead of waiting for ever.
(docs/exon-wire.md, "Peer liveness".)"""

from __future__ import annotations

import math
from collections import Counter
from random import Random

import pytest

from a3m.errors import UsageError
from a3m.exon import (
    Delivered,
    ExonConfig,
    ExonProtocol,
    NotDelivered,
    OutcomeUnknown,
    PeerReachable,
    PeerUnreachable,
    ReceiptReady,
    wire,
)
from a3m.exon.events import Event

from .pair import Pair

CFG = ExonConfig(secure=False, peer_timeout_s=6.0)  # rto_max_s 2.0


class Cut:
    """A filter for Pair: while ``on``, nothing crosses (a partition, or a crashed peer)."""

    def __init__(self) -> None:
        self.on = False

    def __call__(self, data: bytes, src: str, dst: str) -> bool:
        return not self.on


def cut_pair(config: ExonConfig = CFG) -> tuple[Pair, Cut]:
    p = Pair("a", "b", config=config)
    cut = Cut()
    p.filter = cut
    return p, cut


def of(p: Pair, node: str, kind: type[Event]) -> list[Event]:
    return [e for e in p.events[node] if isinstance(e, kind)]


def test_reported_once_after_the_timeout_with_a_token_in_flight_then_reachable() -> None:
    p, cut = cut_pair()
    a = p.nodes["a"]
    a.send("b", b"first", p.now)
    p.transfer()
    p.advance(30.0)  # a long idle time: silence before a send does not count
    cut.on = True
    t0 = p.now
    a.send("b", b"second", p.now)
    p.transfer()
    p.advance(5.9)
    assert of(p, "a", PeerUnreachable) == []
    p.advance(0.2)
    ev = of(p, "a", PeerUnreachable)
    assert len(ev) == 1 and isinstance(ev[0], PeerUnreachable)
    assert ev[0].peer == "b" and 5.999 < ev[0].silent_s < 6.01
    assert a.unreachable_peers() == ["b"] and a.stats.peers_unreachable == 1
    out = a.stats.datagrams_out
    p.advance(60.0)
    assert len(of(p, "a", PeerUnreachable)) == 1  # once
    assert a.in_flight() == 1 and a.stats.datagrams_out > out + 20  # it goes on asking
    assert of(p, "b", PeerUnreachable) == []  # b waits on nothing of a's
    cut.on = False
    p.advance(3.0)
    assert of(p, "a", PeerReachable) == [PeerReachable("b")]
    assert a.unreachable_peers() == [] and a.stats.peers_reachable == 1
    assert p.delivered("b") == [("a", b"first"), ("a", b"second")]  # exactly once
    assert a.in_flight() == 0 and p.now - t0 > 60


def test_waiting_for_slots_counts_as_waiting() -> None:
    """A first message to a node that never answers waits for slots (REQSLOTS): reported."""
    p, cut = cut_pair()
    cut.on = True
    p.nodes["a"].send("b", b"hello", p.now)
    p.transfer()
    p.advance(6.5)
    assert [e.peer for e in of(p, "a", PeerUnreachable)] == ["b"]  # type: ignore[attr-defined]


def test_an_idle_peer_is_never_reported() -> None:
    p, cut = cut_pair()
    p.nodes["a"].send("b", b"x", p.now)
    p.nodes["b"].send("a", b"y", p.now)
    p.transfer()
    cut.on = True  # both keep records a while (envelopes, live slots, probes), wait on nothing
    p.advance(300.0)
    assert of(p, "a", PeerUnreachable) == [] and of(p, "b", PeerUnreachable) == []


def test_a_live_peer_under_heavy_loss_is_never_reported() -> None:
    """30 % of the datagrams lost either way, a message a second for two minutes: a waiting
    record hears an ACK now and then. (Back-off stops at peer_timeout_s / 8, so a live peer
    gets eight transmissions to answer: a false report needs eight lost rounds in a row,
    0.51 ** 8 = 0.46 % per silent stretch at this loss; this seed has none.)"""
    p = Pair("a", "b", config=CFG)
    rng = Random(4)
    p.filter = lambda data, src, dst: rng.random() >= 0.3
    a = p.nodes["a"]
    for i in range(120):
        a.send("b", b"m%d" % i, p.now)
        p.advance(1.0)
    p.advance(30.0)
    assert of(p, "a", PeerUnreachable) == [] and a.stats.retransmits > 20
    assert Counter(m for _, m in p.delivered("b")) == Counter(b"m%d" % i for i in range(120))
    assert p.nodes["a"]._backoff_cap == 0.75


def test_a_slow_reader_is_never_reported() -> None:
    """b's application reads nothing for two minutes: its buffer fills and it defers the
    grants a's queued messages wait for. It answers each deferred request with a probe, so a
    hears it is alive (before, a heard nothing at all and reported it)."""
    cfg = ExonConfig(secure=False, peer_timeout_s=6.0, slots_ahead=4, max_live_slots=8, recv_buffer_bytes=1000)
    p = Pair("a", "b", config=cfg)
    b = p.nodes["b"]
    p.not_reading.add("b")
    a = p.nodes["a"]
    for i in range(100):
        a.send("b", b"%03d" % i + b"." * 97, p.now)
    p.transfer()
    p.advance(120.0)
    assert 10 <= len(p.delivered("b")) < 100 and a.in_flight() > 0
    assert b.stats.grants_deferred > 0
    assert of(p, "a", PeerUnreachable) == []
    p.not_reading.discard("b")
    b.consumed(b.buffered_bytes)
    for _ in range(30):
        p.advance(1.0)
        b.consumed(b.buffered_bytes)
    assert Counter(m[:3] for _, m in p.delivered("b")) == Counter(b"%03d" % i for i in range(100))


def test_zero_means_never() -> None:
    p, cut = cut_pair(ExonConfig(secure=False, peer_timeout_s=0))
    cut.on = True
    p.nodes["a"].send("b", b"x", p.now)
    p.transfer()
    p.advance(300.0)
    assert of(p, "a", PeerUnreachable) == [] and p.nodes["a"].in_flight() == 1


@pytest.mark.parametrize("value", [-1.0, 0.5, 1.99, math.nan])
def test_config_rejects_a_timeout_below_rto_max(value: float) -> None:
    with pytest.raises(UsageError, match="peer_timeout_s"):
        ExonConfig(secure=False, peer_timeout_s=value)


def test_config_accepts_zero_and_long_timeouts() -> None:
    for value in (0.0, 2.0, 15.0, math.inf):
        assert ExonConfig(secure=False, peer_timeout_s=value).peer_timeout_s == value


def test_reported_again_after_being_heard_and_silent_again() -> None:
    p, cut = cut_pair()
    a = p.nodes["a"]
    cut.on = True
    a.send("b", b"1", p.now)
    p.advance(7.0)
    cut.on = False
    p.advance(3.0)
    cut.on = True
    a.send("b", b"2", p.now)
    p.advance(7.0)
    kinds = [type(e).__name__ for e in p.events["a"]
             if isinstance(e, (PeerUnreachable, PeerReachable))]
    assert kinds == ["PeerUnreachable", "PeerReachable", "PeerUnreachable"]


# ---------------------------------------------------------------------------- abandon


def test_abandon_reports_each_message_once_and_never_sends_it_again() -> None:
    """In flight -> OutcomeUnknown; queued without a slot, or fragmented with fragments never
    sent -> NotDelivered (and indeed never delivered, even after the partition heals); the
    window is free again; later messages go on fresh slots, exactly once."""
    cfg = ExonConfig(secure=False, peer_timeout_s=6.0, slots_ahead=4, max_live_slots=8,
                     max_datagram_size=1400)
    p, cut = cut_pair(cfg)
    a = p.nodes["a"]
    a.send("b", b"warm", p.now)
    p.transfer()
    p.advance(0.5)
    cut.on = True
    big = bytes(range(256)) * 40  # 10 KiB: about eight fragments
    rids = [a.send("b", b"small%d" % i, p.now, receipt=True) for i in range(3)]
    rid_big = a.send("b", big, p.now, receipt=True)
    rids += [a.send("b", b"late%d" % i, p.now, receipt=True) for i in range(3)]
    p.transfer()
    p.advance(7.0)
    assert [e.peer for e in of(p, "a", PeerUnreachable)] == ["b"]  # type: ignore[attr-defined]
    pending = a.in_flight()
    sent_before = a.stats.tokens_sent
    n = a.abandon("b", p.now)
    p.collect()
    unknown = of(p, "a", OutcomeUnknown)
    undelivered = of(p, "a", NotDelivered)
    assert n == 7 == len(unknown) + len(undelivered) and pending > 7
    assert {e.payload for e in unknown} == {b"small%d" % i for i in range(3)}
    assert {e.payload for e in undelivered} == {big} | {b"late%d" % i for i in range(3)}
    assert {e.receipt_id for e in unknown + undelivered} == set(rids) | {rid_big}  # type: ignore[attr-defined]
    assert a.in_flight() == 0 and a.record_counts()[0] == 0 and a.stats.peers_abandoned == 1
    assert a.stats.not_delivered == 4 and a.stats.outcome_unknown == 3
    assert a.abandon("b", p.now) == 0
    # The partition heals: nothing abandoned is sent again; b drops what it granted us.
    retransmits = a.stats.retransmits
    cut.on = False
    p.advance(30.0)
    assert a.stats.retransmits == retransmits and a.stats.tokens_sent == sent_before
    assert p.delivered("b") == [("a", b"warm")]
    assert of(p, "a", ReceiptReady) == []
    assert p.nodes["b"].record_counts() == (0, 0)  # its record (and partial message) went
    # Later messages go on fresh slots, exactly once.
    for i in range(5):
        a.send("b", b"again%d" % i, p.now)
    p.advance(5.0)
    assert [m for _, m in p.delivered("b")] == [b"warm"] + [b"again%d" % i for i in range(5)]


def test_a_partial_message_given_up_is_forgotten_by_the_receiver() -> None:
    """Only the first fragment of a message reached b before a gave it up: b's partial
    reassembly can never complete; when it learns a's l it forgets it (and its record)."""
    cfg = ExonConfig(secure=False, peer_timeout_s=6.0, slots_ahead=4, max_live_slots=8)
    p = Pair("a", "b", config=cfg)
    a, b = p.nodes["a"], p.nodes["b"]
    a.send("b", b"warm", p.now)
    p.transfer()
    p.advance(0.5)

    def first_fragment_only(data: bytes, src: str, dst: str) -> bool:
        return src == "a" and any(f[0] == wire.TOKEN and f[5] > 1 and f[4] == 0
                                  for f in wire.decode_datagram(data)[2])

    p.filter = first_fragment_only
    big = bytes(range(256)) * 40
    a.send("b", big, p.now)
    p.advance(7.0)
    rr = b._rr["a"]
    assert len(rr.reasm) == 1
    a.abandon("b", p.now)
    p.collect()
    assert [e.payload for e in of(p, "a", NotDelivered)] == [big]  # type: ignore[attr-defined]
    p.filter = None
    p.advance(120.0)
    assert b.record_counts() == (0, 0) and not rr.reasm
    assert p.delivered("b") == [("a", b"warm")]


def token_datagrams(p: Pair, payload: bytes) -> list[bytes]:
    out = []
    for src, _, data in p.wire_log:
        if src == "a":
            for f in wire.decode_datagram(data)[2]:
                if f[0] == wire.TOKEN and f[3] == payload:
                    out.append(data)
    return out


@pytest.mark.parametrize("release_first", [False, True])
def test_a_copy_of_an_abandoned_token_still_in_the_network(release_first: bool) -> None:
    """A token reported OutcomeUnknown may still arrive (a delayed copy): delivered at most
    once if it beats the release of its slot, ACKed without delivery if it comes after."""
    p, cut = cut_pair()
    a, b = p.nodes["a"], p.nodes["b"]
    a.send("b", b"warm", p.now)
    p.transfer()
    cut.on = True
    a.send("b", b"m", p.now)
    p.advance(7.0)
    copies = token_datagrams(p, b"m")
    assert copies
    a.abandon("b", p.now)
    p.collect()
    assert [e.payload for e in of(p, "a", OutcomeUnknown)] == [b"m"]  # type: ignore[attr-defined]
    if release_first:
        cut.on = False
        p.transfer()  # the release reaches b
    for data in copies:
        b.receive_datagram(data, "a", p.now)
    cut.on = False
    p.advance(10.0)
    got = [m for _, m in p.delivered("b")]
    assert got == ([b"warm"] if release_first else [b"warm", b"m"])
    assert b.record_counts()[1] == 0


def test_a_closing_node_gives_up_a_silent_peer() -> None:
    """Before, close waited for ever for a peer that never answered (timeout None)."""
    p, cut = cut_pair()
    a = p.nodes["a"]
    a.send("b", b"warm", p.now)
    p.transfer()
    cut.on = True
    a.send("b", b"lost", p.now)
    p.transfer()
    p.advance(1.0)
    a.close(p.now)
    p.advance(4.0)
    assert not a.is_closed()  # still waiting for an answer
    p.advance(2.0)
    assert a.is_closed() and a.stats.peers_abandoned == 1
    assert [e.payload for e in of(p, "a", OutcomeUnknown)] == [b"lost"]  # type: ignore[attr-defined]


def test_close_gives_up_at_once_a_peer_already_reported() -> None:
    p, cut = cut_pair()
    a = p.nodes["a"]
    cut.on = True
    a.send("b", b"lost", p.now)
    p.advance(7.0)
    assert a.unreachable_peers() == ["b"]
    a.close(p.now)
    assert a.is_closed()
    p.collect()
    assert [e.payload for e in of(p, "a", NotDelivered)] == [b"lost"]  # type: ignore[attr-defined]


def test_close_does_not_wait_for_the_revocation_of_an_unreachable_sender() -> None:
    """b sent to a (a holds a receive record for it) and then went silent while a waited on
    it: a's close gives up b's revocation at once (not after close_revoke_timeout_s); a token
    b sends later on its old envelopes gets VOID: reported by b, never lost silently."""
    p, cut = cut_pair(ExonConfig(secure=False, peer_timeout_s=6.0, idle_release_s=60.0))  # b keeps them
    a, b = p.nodes["a"], p.nodes["b"]
    b.send("a", b"from b", p.now)
    a.send("b", b"from a", p.now)
    p.transfer()
    cut.on = True
    a.send("b", b"lost", p.now)
    p.advance(7.0)
    assert a.unreachable_peers() == ["b"] and a.record_counts() == (1, 1)
    a.close(p.now)
    assert a.is_closed() and a.stats.revocations_abandoned == 1
    cut.on = False
    b.send("a", b"late", p.now)  # on an envelope of the record a gave up
    p.advance(3.0)
    assert [m for _, m in p.delivered("a")] == [b"from b"]
    assert [e.payload for e in of(p, "b", OutcomeUnknown)] == [b"late"]  # type: ignore[attr-defined]


def test_close_with_a_silent_peer_and_no_timeout_waits_as_before() -> None:
    p, cut = cut_pair(ExonConfig(secure=False, peer_timeout_s=0))
    a = p.nodes["a"]
    cut.on = True
    a.send("b", b"x", p.now)
    a.close(p.now)
    p.advance(120.0)
    assert not a.is_closed() and a.in_flight() == 1


def test_events_are_plain_values() -> None:
    assert PeerUnreachable("b", 6.0) == PeerUnreachable("b", 6.0)
    assert NotDelivered("b", b"x", None) != OutcomeUnknown("b", b"x", None)
    assert isinstance(ExonProtocol("z", ExonConfig(secure=False)).unreachable_peers(), list)
    assert Delivered("a", b"") == Delivered("a", b"")
