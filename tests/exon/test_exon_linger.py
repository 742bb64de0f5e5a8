"""Closing: the node that closes first lingers (docs/exon-wire.md, "Closing: the linger").

A host stops driving a closed protocol once it has nothing left to send or to time
(``is_closed()``, no output, ``next_timer() is None``: what ``is_finished()`` says). Before the
linger that was the moment of ``is_closed()``, so a frame of the closing node lost on its last
step (a release, an answer to the peer's REVOKE, an ACK) left the peer waiting out its own
close timeout. These tests model that host and drop exactly those frames.
"""

from __future__ import annotations

from a3m.exon import Delivered, ExonConfig, OutcomeUnknown, ReceiptReady, wire

from .pair import Pair


def frames_of(data: bytes) -> list[tuple[object, ...]]:
    return wire.decode_datagram(data)[2]


def is_release(data: bytes) -> bool:
    return any(f[0] == wire.REQSLOTS and f[2] == 0 for f in frames_of(data))


def host_done(p: Pair, node: str) -> bool:
    """The runtime's rule: a closed protocol with nothing to send and no timer is dropped."""
    proto = p.nodes[node]
    return proto.is_closed() and not proto.has_output() and proto.next_timer() is None


def run(p: Pair, seconds: float, stop: str | None = None, step: float = 0.01) -> None:
    """Advance ``seconds`` in small steps; drop node ``stop`` once its host is done with it."""
    for _ in range(round(seconds / step)):
        p.advance(step)
        if stop is not None and stop in p.nodes and host_done(p, stop):
            del p.nodes[stop]


def two_way(p: Pair) -> None:
    """a and b each send to the other: each holds envelopes of the other's receive record."""
    for i in range(5):
        p.nodes["a"].send("b", b"a%d" % i, p.now)
        p.nodes["b"].send("a", b"b%d" % i, p.now)
    p.transfer()
    assert p.nodes["b"].record_counts() == (1, 1)


def test_lost_releases_of_the_first_closer_do_not_make_the_peer_close_wait() -> None:
    """a closes first and every release it sends while closing is lost: b's receive record
    for a keeps live slots. a lingers and sends its releases again; b then closes at once
    (before: b's REVOKE met a closed port, b waited close_revoke_timeout_s = 10 s)."""
    p = Pair("a", "b")
    two_way(p)
    a, b = p.nodes["a"], p.nodes["b"]
    p.filter = lambda d, s, _d: not (s == "a" and is_release(d) and not a.is_closed())
    a.close(p.now)
    run(p, 1.0, stop="a")
    assert a.is_closed()
    assert p.now < 1.5
    closing_at = p.now
    b.close(p.now)
    run(p, 2.0, stop="a")
    assert b.is_closed(), "b's close waits for a node that closed before it"
    assert b.stats.revocations_abandoned == 0
    assert sorted(m for _, m in p.delivered("b")) == [b"a%d" % i for i in range(5)]
    assert sorted(m for _, m in p.delivered("a")) == [b"b%d" % i for i in range(5)]
    assert p.now - closing_at < 3.0


def test_a_lingering_node_answers_the_revoke_of_a_peer_that_closes_later() -> None:
    """Every release of a is lost, linger re-sends included, until b closes: b's REVOKE to
    the lingering a is answered (a release at a's clock), so b's close completes in a round
    trip, not after close_revoke_timeout_s."""
    p = Pair("a", "b")
    two_way(p)
    a, b = p.nodes["a"], p.nodes["b"]
    p.filter = lambda d, s, _d: not (s == "a" and is_release(d) and not b.closing)
    a.close(p.now)
    run(p, 2.0, stop="a")
    assert a.is_closed() and b._rr.get("a") is not None  # b still holds a's record
    start = p.now
    b.close(p.now)
    run(p, 1.0, stop="a")
    assert b.is_closed() and b.stats.revocations_abandoned == 0
    assert p.now - start <= 1.0
    assert a.stats.linger_answers >= 1


def test_the_last_ack_of_the_first_closer_is_lost_the_peer_still_closes() -> None:
    """b's token to a is delivered but every ACK of it is lost until a has closed. a's record
    for b ends meanwhile (no live slot left: one slot per grant here, and a probe finds it
    empty), so a's close does not wait for b. Then b closes: its token is still unacknowledged.
    The lingering a ACKs the retransmission (its slot was consumed: delivered), and b's close
    completes (before: b retransmitted into a closed port, for ever)."""
    cfg = ExonConfig(secure=False, slots_ahead=1, max_live_slots=1)
    p = Pair("a", "b", config=cfg)
    a, b = p.nodes["a"], p.nodes["b"]
    a.send("b", b"ping", p.now)
    p.transfer()
    p.filter = lambda d, s, _d: not (s == "a" and any(f[0] == wire.ACK for f in frames_of(d)))
    b.send("a", b"last", p.now)
    run(p, cfg.probe_interval_s + 1.0)
    assert p.delivered("a") == [("b", b"last")] and b.in_flight() == 1
    assert a.record_counts()[1] == 0  # a's record for b is gone (its one slot consumed)
    a.close(p.now)
    run(p, 0.5, stop="a")
    assert a.is_closed()
    p.filter = None
    b.close(p.now)
    run(p, 3.0, stop="a")
    assert b.is_closed(), "b still waits for the ACK of a token a delivered"
    assert p.delivered("a") == [("b", b"last")]  # once
    assert a.stats.linger_answers >= 1


def test_the_linger_ends_by_itself() -> None:
    cfg = ExonConfig(secure=False)
    p = Pair("a", "b", config=cfg)
    two_way(p)
    a = p.nodes["a"]
    a.close(p.now)
    run(p, 1.0)
    assert a.is_closed() and not a.is_finished()
    run(p, cfg.close_linger_s)
    assert a.is_finished() and a.next_timer() is None


def test_no_linger_when_configured_off() -> None:
    p = Pair("a", "b", config=ExonConfig(secure=False, close_linger_rtos=0))
    two_way(p)
    a = p.nodes["a"]
    a.close(p.now)
    run(p, 1.0)
    assert a.is_closed() and a.is_finished()


def test_a_token_for_an_abandoned_revocation_gets_void_never_an_ack() -> None:
    """b holds a token bound to a's record and cannot reach a (partition) while a closes: a
    gives up waiting for b's REVOKED (close_revoke_timeout_s) and discards the record with the
    slot still live. When b's retransmission then arrives (a still closing, or lingering), an
    ACK would be a silent loss (the token was never delivered, and never will be): a answers
    VOID and b reports the message as of unknown outcome."""
    p = Pair("a", "b", config=ExonConfig(secure=False, close_revoke_timeout_s=1.0))
    a, b = p.nodes["a"], p.nodes["b"]
    b.send("a", b"warm", p.now)  # b takes envelopes of a's record
    a.send("b", b"ping", p.now)
    p.transfer()
    a.send("b", b"keeps a closing", p.now)
    p.filter = lambda d, s, _d: s != "b"  # b -> a cut: b's REVOKED and tokens, its ACKs
    rid = b.send("a", b"late", p.now, receipt=True)
    a.close(p.now)
    run(p, 1.5)
    assert a.stats.revocations_abandoned == 1 and not a.is_closed()  # a's token unacked
    p.filter = None
    run(p, 3.0)
    assert a.is_closed()
    assert [m for _, m in p.delivered("a")] == [b"warm"]
    assert [m for _, m in p.delivered("b")] == [b"ping", b"keeps a closing"]
    assert [(e.payload, e.receipt_id) for e in p.events["b"]
            if isinstance(e, OutcomeUnknown)] == [(b"late", rid)]
    assert rid not in {e.receipt_id for e in p.events["b"] if isinstance(e, ReceiptReady)}
    assert b.in_flight() == 0 and a.stats.voids_sent >= 1


def test_a_lingering_node_delivers_nothing_and_acks_only_its_own_records() -> None:
    """After is_closed() no receive record is left and none is created: nothing can be
    delivered any more; a duplicate of a token bound to one of our records is ACKed (its slot
    was consumed or released), one bound to an r we never took gets no answer."""
    p = Pair("a", "b")
    two_way(p)
    a = p.nodes["a"]
    old_r = p.nodes["b"]._sr["a"].rck
    a.close(p.now)
    run(p, 1.0)
    assert a.is_closed() and not a.is_finished()
    hdr = wire.encode_header("b", "a")
    a.receive_datagram(hdr + wire.encode_reqslots(10**15, 4, 10**15), "b", p.now)
    a.receive_datagram(hdr + wire.encode_token(10**15, old_r, b"dup"), "b", p.now)
    a.receive_datagram(hdr + wire.encode_token(10**15 + 1, a.clock + 1, b"not ours"), "b",
                       p.now)
    frames = [f for d, _ in a.datagrams_to_send(p.now) for f in frames_of(d)]
    assert frames == [(wire.ACK, old_r, ((10**15, 1),), None)]
    assert a.record_counts() == (0, 0)
    assert not [e for e in a.drain_events() if isinstance(e, Delivered)]
