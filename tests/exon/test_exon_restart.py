"""A receiver node restarts (same id, clock store continued) while a sender holds envelopes it
granted: gracefully (REVOKE/REVOKED at close) nothing is lost or doubled; after a crash nothing
is lost silently (VOID: every message is delivered once or reported OutcomeUnknown)."""

from __future__ import annotations

from collections import Counter

from a3m.exon import (
    Delivered,
    ExonConfig,
    ExonProtocol,
    MemoryClockStore,
    OutcomeUnknown,
    ReceiptReady,
    wire,
)

from .pair import Pair


def frames_of(data: bytes) -> list[tuple[object, ...]]:
    return wire.decode_datagram(data)[2]


def outcome(p: Pair, sender: str = "a", receiver: str = "b") -> tuple[
        Counter[bytes], list[OutcomeUnknown], set[int]]:
    """(payloads delivered at ``receiver`` with their counts, unknown-outcome events at
    ``sender``, receipt ids acknowledged at ``sender``)."""
    got = Counter(m for src, m in p.delivered(receiver) if src == sender)
    unknown = [e for e in p.events[sender] if isinstance(e, OutcomeUnknown)]
    receipts = {e.receipt_id for e in p.events[sender] if isinstance(e, ReceiptReady)}
    return got, unknown, receipts


def close_and_restart(p: Pair, node: str, max_steps: int = 200) -> ExonProtocol:
    """Close ``node`` gracefully (driving the pair until it is closed), start it again."""
    old = p.nodes[node]
    old.close(p.now)
    for _ in range(max_steps):
        if old.is_closed():
            break
        p.transfer()
        if not old.is_closed():
            p.advance(0.05)
    assert old.is_closed(), "the graceful close did not complete"
    p.collect()
    del p.nodes[node]
    new = p.start(node)
    assert new.boot_clock >= old.clock  # the store continued the clock
    return new


def test_graceful_restart_spare_envelopes_nothing_lost_nothing_doubled() -> None:
    p = Pair("a", "b")
    a = p.nodes["a"]
    for i in range(10):
        a.send("b", b"before%d" % i, p.now)
    p.transfer()
    rec = a._sr["b"]
    assert rec.sck - rec.env_lo > 100  # a holds spare envelopes granted by this b
    close_and_restart(p, "b")
    revoked = a._sr["b"].env_lo == a._sr["b"].sck  # a dropped them at the revocation
    rids = [a.send("b", b"after%d" % i, p.now, receipt=True) for i in range(100)]
    p.transfer()
    p.advance(5.0)
    got, unknown, receipts = outcome(p)
    expected = [b"before%d" % i for i in range(10)] + [b"after%d" % i for i in range(100)]
    assert got == Counter(expected)
    assert unknown == [] and a.stats.outcome_unknown == 0
    assert set(rids) <= receipts
    assert a.in_flight() == 0 and revoked


def test_graceful_close_with_tokens_in_flight_and_more_queued() -> None:
    """b closes while a's tokens are on the way (they are delivered by the closing b) and a
    keeps sending (those wait for b's next incarnation)."""
    p = Pair("a", "b")
    a = p.nodes["a"]
    for i in range(5):
        a.send("b", b"warm%d" % i, p.now)
    p.transfer()
    for i in range(30):
        a.send("b", b"flight%d" % i, p.now)  # not transferred yet
    b = p.nodes["b"]
    b.close(p.now)
    p.transfer()  # a's tokens reach the closing b, b's REVOKE reaches a
    for i in range(30):
        a.send("b", b"queued%d" % i, p.now)
    p.transfer()
    p.advance(0.5)
    assert b.is_closed()
    flight = Counter(m for _, m in p.delivered("b"))
    assert all(flight[b"flight%d" % i] == 1 for i in range(30))  # drained by the closing b
    assert all(flight[b"queued%d" % i] == 0 for i in range(30))  # no grant while closing
    del p.nodes["b"]
    p.start("b")
    p.advance(5.0)
    got, unknown, _ = outcome(p)
    assert got == Counter([b"warm%d" % i for i in range(5)] + [b"flight%d" % i for i in range(30)]
                          + [b"queued%d" % i for i in range(30)])
    assert unknown == []


def test_graceful_restart_cuts_a_fragmented_message_it_is_sent_again_whole() -> None:
    cfg = ExonConfig(secure=False, slots_ahead=16, max_live_slots=16, max_datagram_size=1400)
    p = Pair("a", "b", config=cfg)
    a = p.nodes["a"]
    a.send("b", b"w", p.now)
    p.transfer()
    big = bytes(range(256)) * 200  # 51 200 bytes: ~38 fragments, more than 16 slots
    rid = a.send("b", big, p.now, receipt=True)
    # Hold b's grants back so that the message stays cut at the revocation.
    p.filter = lambda d, s, _d: not (s == "b" and any(
        f[0] == wire.SLOTS and f[3] for f in frames_of(d)))  # type: ignore[index]
    p.transfer()
    assert a._sr["b"].queue and p.nodes["b"]._rr["a"].reasm  # cut: part bound, part queued
    p.filter = None
    close_and_restart(p, "b")
    p.advance(5.0)
    got, unknown, receipts = outcome(p)
    assert got[big] == 1 and got[b"w"] == 1 and len(got) == 2
    assert unknown == [] and rid in receipts
    assert a.stats.resent_whole == 1


def test_crash_restart_spare_envelopes_no_silent_loss() -> None:
    """After a crash the messages a sent on envelopes of the dead incarnation are reported
    (never ACKed blindly: the old code lost them with a receipt); later ones are delivered."""
    p = Pair("a", "b")
    a = p.nodes["a"]
    for i in range(10):
        a.send("b", b"before%d" % i, p.now)
    p.transfer()
    del p.nodes["b"]  # crash: no close
    p.start("b")
    first = [a.send("b", b"first%d" % i, p.now, receipt=True) for i in range(5)]
    p.transfer()
    later = [a.send("b", b"later%d" % i, p.now, receipt=True) for i in range(95)]
    p.transfer()
    p.advance(5.0)
    got, unknown, receipts = outcome(p)
    # Each message sent after the crash: delivered exactly once, or reported, never both.
    for i in range(5):
        assert got[b"first%d" % i] + [u.payload for u in unknown].count(b"first%d" % i) == 1
    for i in range(95):
        assert got[b"later%d" % i] == 1
    assert all(c == 1 for c in got.values())
    reported = {u.receipt_id for u in unknown}
    assert set(first) <= reported | receipts and not reported & receipts
    assert set(later) <= receipts
    assert a.stats.outcome_unknown == len(unknown) and a.in_flight() == 0


def test_crash_restart_tokens_in_flight_each_delivered_once_or_reported() -> None:
    """b crashes with a's tokens in flight, some delivered (ACK lost), some not: none is
    delivered twice, none silently lost, and the ones that never reached the old b are not
    both delivered and reported."""
    p = Pair("a", "b")
    a = p.nodes["a"]
    a.send("b", b"w", p.now)
    p.transfer()
    rids = {a.send("b", b"m%d" % i, p.now, receipt=True): b"m%d" % i for i in range(40)}
    out = a.datagrams_to_send(p.now)
    # The old b gets the first half of a's datagrams (the tokens in them are delivered) and
    # its ACKs are lost; then it crashes.
    for d, _ in out[: len(out) // 2]:
        p.nodes["b"].receive_datagram(d, "a", p.now)
    p.collect()
    delivered_by_old = {m for _, m in p.delivered("b")}
    del p.nodes["b"]
    p.start("b")
    p.advance(5.0)
    got, unknown, receipts = outcome(p)
    reported = {u.receipt_id for u in unknown}
    assert all(c == 1 for c in got.values())
    for rid, m in rids.items():
        assert rid in receipts or rid in reported  # nothing silently lost
        assert not (rid in receipts and rid in reported)
        if m not in delivered_by_old:
            assert got[m] + (rid in reported) == 1
    assert a.in_flight() == 0


def test_crash_restart_cuts_a_fragmented_message_it_is_sent_again_whole() -> None:
    cfg = ExonConfig(secure=False, slots_ahead=16, max_live_slots=16)
    p = Pair("a", "b", config=cfg)
    a = p.nodes["a"]
    big = bytes(range(256)) * 200
    rid = a.send("b", big, p.now, receipt=True)
    grants = [0]

    def first_grant_only(d: bytes, s: str, _d: str) -> bool:
        if s == "b" and any(f[0] == wire.SLOTS and f[3] for f in frames_of(d)):  # type: ignore[index]
            grants[0] += 1
            return grants[0] == 1
        return True

    p.filter = first_grant_only
    p.transfer()  # 16 fragments delivered to the old b's reassembly, the rest unbound
    assert p.nodes["b"]._rr["a"].reasm
    p.filter = None
    del p.nodes["b"]  # crash: the reassembled fragments are gone with it
    p.start("b")
    p.advance(5.0)
    got, unknown, receipts = outcome(p)
    assert got == Counter([big]) and unknown == [] and rid in receipts
    assert a.stats.resent_whole == 1


def test_voids_only_below_the_boot_clock_and_not_acked() -> None:
    store = MemoryClockStore(1000)
    b = ExonProtocol("b", ExonConfig(secure=False), clock_store=store)
    assert b.boot_clock == 1000
    b.associate("a", "a")
    old = wire.encode_header("a", "b") + wire.encode_token(5, 999, b"x") + wire.encode_token(
        6, 999, b"y")
    b.receive_datagram(old, "a", 0.0)
    frames = [f for d, _ in b.datagrams_to_send(0.0) for f in frames_of(d)]
    assert frames == [(wire.VOID, 999)]  # once per datagram, and no ACK
    hdr = wire.encode_header("a", "b")
    b.receive_datagram(hdr + wire.encode_reqslots(5, 1, 5), "a", 0.0)  # record 1000: slot 5
    b.receive_datagram(hdr + wire.encode_reqslots(6, 0, 6), "a", 0.0)  # released: discarded
    assert b.record_counts() == (0, 0)
    b.datagrams_to_send(0.0)
    same = hdr + wire.encode_token(5, 1000, b"x")
    b.receive_datagram(same, "a", 0.0)
    frames = [f for d, _ in b.datagrams_to_send(0.0) for f in frames_of(d)]
    assert frames == [(wire.ACK, 1000, ((5, 1),), None)]  # this incarnation's: released, ACKed
    assert b.drain_events() == [] and b.stats.voids_sent == 1


def test_close_waits_for_revocation_and_a_silent_sender_bounds_it() -> None:
    p = Pair("a", "b")
    p.nodes["a"].send("b", b"x", p.now)
    p.transfer()
    b = p.nodes["b"]
    p.filter = lambda d, s, _d: s != "a"  # a went silent
    b.close(p.now)
    p.advance(3.0)
    assert not b.is_closed() and b.stats.revokes_sent >= 3  # REVOKE retransmitted
    p.filter = None
    p.advance(3.0)
    assert b.is_closed()
    assert isinstance(p.events["b"][0], Delivered)


def test_a_sender_that_never_confirms_is_given_up_then_looks_like_a_crash() -> None:
    p = Pair("a", "b", config=ExonConfig(secure=False, close_revoke_timeout_s=1.0, idle_release_s=5.0))
    a = p.nodes["a"]
    a.send("b", b"x", p.now)
    p.transfer()
    p.filter = lambda d, s, _d: False  # a is cut off
    close_and_restart(p, "b")
    assert p.now < 2.0 and a._sr["b"].env_lo < a._sr["b"].sck  # a never heard the REVOKE
    p.filter = None
    rid = a.send("b", b"y", p.now, receipt=True)
    p.advance(3.0)
    _, unknown, receipts = outcome(p)
    assert [(u.payload, u.receipt_id) for u in unknown] == [(b"y", rid)]
    assert rid not in receipts


def test_a_release_ends_a_revoked_record_when_its_revoked_answer_is_lost() -> None:
    p = Pair("a", "b")
    a, b = p.nodes["a"], p.nodes["b"]
    a.send("b", b"x", p.now)
    p.transfer()
    p.filter = lambda d, s, _d: not (s == "a" and any(
        f[0] == wire.REVOKED for f in frames_of(d)))
    b.close(p.now)
    p.transfer()
    assert not b.is_closed() and a.stats.revokes_received == 1
    p.advance(p.config.idle_release_s + 0.1)  # a goes idle and releases: l >= b's grant end
    assert b.is_closed() and b.stats.revocations_abandoned == 0
