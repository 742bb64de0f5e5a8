"""Each defect F1..F9 of the published Java proof of concept (ANCHORS part A), driven by its
exact scenario against our protocol, which must not have it."""

from __future__ import annotations

import tracemalloc
from typing import Any

import pytest

from a3m.errors import WouldBlock
from a3m.exon import ExonConfig, ExonProtocol, MemoryClockStore, OutcomeUnknown, ReceiptReady, wire

from .pair import Pair


def frames_of(data: bytes) -> list[tuple[object, ...]]:
    return wire.decode_datagram(data)[2]


def is_release(data: bytes) -> bool:
    return any(f[0] == wire.REQSLOTS and f[2] == 0 for f in frames_of(data))


def test_f1_lost_release_next_message_delivered_and_receipt_means_delivery() -> None:
    p = Pair("a", "b", stores={"a": MemoryClockStore(10**6), "b": MemoryClockStore(50)})
    a = p.nodes["a"]
    a.send("b", b"m1", p.now)
    p.transfer()
    # Drop the release (REQSLOTS n=0) the idle sender sends when it discards its record.
    dropped = []

    def drop_release(data: bytes, src: str, dst: str) -> bool:
        if src == "a" and is_release(data):
            dropped.append(data)
            return False
        return True

    p.filter = drop_release
    p.advance(p.config.idle_release_s + 0.1)
    assert dropped and a.record_counts()[0] == 0
    assert p.nodes["b"].record_counts()[1] == 1  # the old receive record survives
    p.filter = None
    rid = a.send("b", b"m2", p.now, receipt=True)
    p.transfer()
    assert sorted(m for _, m in p.delivered("b")) == [b"m1", b"m2"]
    assert ReceiptReady(rid) in p.events["a"]  # type: ignore[arg-type]
    # Envelopes are exactly [s, s+n): every token's slot is at or above the first request's s.
    first_s = min(f[1] for s_, _, d in p.wire_log if s_ == "a" for f in frames_of(d)
                  if f[0] == wire.REQSLOTS and f[2] > 0)
    token_slots = [f[1] for s_, _, d in p.wire_log if s_ == "a" for f in frames_of(d)
                   if f[0] == wire.TOKEN]
    assert first_s >= 10**6 and min(token_slots) >= first_s
    # Eventually the receiver's probe cleans its stale record up.
    p.advance(p.config.probe_interval_s * 2 + p.config.idle_release_s * 2)
    assert p.nodes["b"].is_idle() and a.is_idle()


def test_f2_large_payloads_fragment_and_hostile_fragments_are_dropped() -> None:
    p = Pair("a", "b", config=ExonConfig(secure=False, max_message_size=1 << 20))
    payload = bytes(range(256)) * 400  # 100 KiB, far above one datagram
    p.nodes["a"].send("b", payload, p.now)
    p.transfer()
    assert p.delivered("b") == [("a", payload)]
    b = p.nodes["b"]
    hostile = wire.encode_header("evil", "b") + wire.encode_token(0, 0, b"x", (0, 2**31, 2**31))
    b.receive_datagram(hostile, "evil", p.now)  # total above max_message_size
    assert b.stats.malformed == 1


def test_f3_window_enforced_from_the_first_send() -> None:
    p = Pair("a", "b", config=ExonConfig(secure=False, window_per_peer=5, window_global=8))
    a = p.nodes["a"]
    for i in range(5):
        a.send("b", b"%d" % i, p.now)  # the record is created synchronously by the first
    with pytest.raises(WouldBlock):
        a.send("b", b"x", p.now)
    a.send("c", b"c0", p.now)
    a.send("c", b"c1", p.now)
    a.send("c", b"c2", p.now)
    with pytest.raises(WouldBlock):  # global window: 8
        a.send("c", b"c3", p.now)
    assert a.in_flight() == 8
    # Acks never release more than was taken.
    p.transfer()
    for _ in range(3):
        p.transfer()
    assert a.in_flight() == 3  # c has no address: its three wait, b's five were acked


def test_f4_blocked_sender_survives_record_discard() -> None:
    p = Pair("a", "b", config=ExonConfig(secure=False, window_per_peer=3))
    a = p.nodes["a"]
    for i in range(3):
        a.send("b", b"%d" % i, p.now)
    with pytest.raises(WouldBlock):
        a.send("b", b"blocked", p.now)
    p.transfer()
    p.advance(p.config.idle_release_s + 0.1)
    assert a.record_counts()[0] == 0  # the record is gone; admission does not depend on it
    assert a.can_send("b")
    a.send("b", b"blocked", p.now)
    p.transfer()
    assert len(p.delivered("b")) == 4


def test_f5_token_for_a_vanished_record_is_acked_and_sender_goes_idle() -> None:
    stores = {"a": MemoryClockStore(), "b": MemoryClockStore()}
    p = Pair("a", "b", stores=stores)
    a = p.nodes["a"]
    a.send("b", b"once", p.now)

    def drop_acks(data: bytes, src: str, dst: str) -> bool:
        return not (src == "b" and any(f[0] == wire.ACK for f in frames_of(data)))

    p.filter = drop_acks
    p.transfer()
    assert p.delivered("b") == [("a", b"once")]
    assert a.in_flight() == 1
    # b crashes and restarts (its records are gone, its clock persisted): a's retransmission
    # must be resolved, never left retransmitting forever. The new b cannot know whether its
    # earlier incarnation delivered the token: it answers VOID (never a blind ACK), and a
    # reports the message as of unknown outcome (here it was in fact delivered, ACK lost).
    del p.nodes["b"]
    p.start("b")
    p.filter = None
    p.advance(5.0)
    assert a.in_flight() == 0
    assert p.delivered("b") == [("a", b"once")]  # the new b delivered nothing again
    assert p.nodes["b"].stats.voids_sent >= 1
    assert [e for e in p.events["a"] if isinstance(e, OutcomeUnknown)] == [
        OutcomeUnknown("b", b"once", None)]
    p.advance(p.config.idle_release_s + 1)
    assert a.is_idle()


def test_f5_stale_rck_tokens_are_acked() -> None:
    p = Pair("a", "b", stores={"a": MemoryClockStore(), "b": MemoryClockStore(1000)})
    a, b = p.nodes["a"], p.nodes["b"]
    a.send("b", b"x", p.now)
    p.transfer()
    old_r = b._rr["a"].rck
    p.advance(p.config.idle_release_s + 1)  # a releases, b discards the record
    assert b.record_counts() == (0, 0)
    a.send("b", b"y", p.now)  # a new record: old_r is now a stale record of b's incarnation
    p.transfer()
    assert b._rr["a"].rck > old_r
    stale = wire.encode_header("a", "b") + wire.encode_token(123456, old_r, b"old")
    b.receive_datagram(stale, "a", p.now)
    out = b.datagrams_to_send(p.now)
    acks = [f for d, _ in out for f in frames_of(d) if f[0] == wire.ACK]
    assert acks == [(wire.ACK, old_r, ((123456, 1),), None)]
    assert p.delivered("b") == [("a", b"x"), ("a", b"y")]


def test_a_token_for_a_record_above_the_clock_is_never_acked() -> None:
    """An r at or above the node clock was never taken by this node (every r comes from the
    clock): forged, or bound to a later incarnation's record while this one lingers after
    its close. No ACK (it would lose it), no VOID (the record may well be alive): silence."""
    p = Pair("a", "b", stores={"a": MemoryClockStore(), "b": MemoryClockStore(1000)})
    a, b = p.nodes["a"], p.nodes["b"]
    a.send("b", b"x", p.now)
    p.transfer()
    future = b.clock + 5
    stale = wire.encode_header("a", "b") + wire.encode_token(123456, future, b"new")
    before = b.stats.stale_frames
    b.receive_datagram(stale, "a", p.now)
    assert b.datagrams_to_send(p.now) == []
    assert b.stats.stale_frames == before + 1
    assert p.delivered("b") == [("a", b"x")]


def test_f6_karn_a_retransmitted_token_measures_only_its_named_copy() -> None:
    """The first copy is lost; the probe's copy arrives and the ACK says a copy sent again
    arrived (wire version 5), so the round trip is the copy's: a sample, measured from the
    copy (here 0: the pair moves datagrams at once), never from the first copy (which would
    give the probe timeout and more)."""
    p = Pair("a", "b")
    a = p.nodes["a"]
    a.send("b", b"warm", p.now)
    p.transfer()
    srtt = a.path_stats("b")["srtt_s"]
    first = [True]

    def drop_first_token(data: bytes, src: str, dst: str) -> bool:
        if src == "a" and first[0] and any(f[0] == wire.TOKEN for f in frames_of(data)):
            first[0] = False
            return False
        return True

    p.filter = drop_first_token
    a.send("b", b"lost once", p.now)
    p.transfer()
    p.advance(1.0)
    assert [m for _, m in p.delivered("b")] == [b"warm", b"lost once"]
    assert a.stats.retransmits == 1
    acks = [f for src, _, d in p.wire_log if src == "b" for f in frames_of(d)
            if f[0] == wire.ACK]
    (first, count), = acks[-1][2]
    assert acks[-1][3] == ((first + count - 1, 1),)  # the copy arrived on the last slot
    assert a.path_stats("b")["srtt_s"] < srtt  # a sample of 0, from the copy


def _resent_token(p: Pair) -> tuple[int, tuple[Any, ...]]:
    """Warm a's path to b, then lose everything until a's probe has sent a token again;
    returns its slot and entry, at the time of its newest copy."""
    a = p.nodes["a"]
    a.send("b", b"warm", p.now)
    p.transfer()
    p.filter = lambda data, src, dst: False  # everything lost: the probe sends copies
    a.send("b", b"lost", p.now)
    rec = a._sr["b"]
    for _ in range(1000):
        p.advance(0.0001)
        (s, tok), = rec.tokens.items()
        if tok[4] > 1:
            return s, tok
    raise AssertionError("no copy sent")


def test_f6_karn_no_rtt_sample_from_an_ack_that_does_not_name_the_copy() -> None:
    """An ACK that does not say how the token arrived (the receiver no longer holds the
    record) could answer either copy: Karn's rule, no sample (the ACK comes within the
    path's timeout after the newest copy: it may answer that copy at once)."""
    p = Pair("a", "b")
    a = p.nodes["a"]
    s, tok = _resent_token(p)
    srtt = a.path_stats("b")["srtt_s"]
    rec = a._sr["b"]
    assert p.now - tok[3] < rec.path.base_pto()
    ack = wire.encode_header("b", "a") + wire.encode_ack(tok[1], [(s, 1)])
    a.receive_datagram(ack, "b", p.now)
    assert not rec.tokens
    assert a.path_stats("b")["srtt_s"] == srtt  # the ambiguous sample was not taken


def test_an_ack_of_copies_all_older_than_the_timeout_is_a_lower_bound_sample() -> None:
    """The same ACK, later than the path's timeout after the newest copy: whichever copy it
    answers, the round trip is at least that long (a receiver whose queue grew past the
    timeout is otherwise never measured again): a sample of that lower bound."""
    p = Pair("a", "b")
    a = p.nodes["a"]
    s, tok = _resent_token(p)
    srtt = a.path_stats("b")["srtt_s"]
    rec = a._sr["b"]
    late = 4 * rec.path.base_pto()
    ack = wire.encode_header("b", "a") + wire.encode_ack(tok[1], [(s, 1)])
    a.receive_datagram(ack, "b", tok[3] + late)
    assert not rec.tokens
    assert a.path_stats("b")["srtt_s"] > srtt  # the lower bound was taken


def test_f6_rtt_is_per_peer() -> None:
    p = Pair("a", "b", "c")
    a = p.nodes["a"]
    a.send("b", b"x", 0.0)
    a.send("c", b"x", 0.0)
    p.now = 0.004  # b answers after 4 ms
    for d, addr in a.datagrams_to_send(0.0):
        p.nodes[addr].receive_datagram(d, "a", 0.0)
    for d, _ in p.nodes["b"].datagrams_to_send(0.0):
        a.receive_datagram(d, "b", 0.004)
    for d, _ in p.nodes["c"].datagrams_to_send(0.0):
        a.receive_datagram(d, "c", 0.050)
    assert a.path_stats("b")["srtt_s"] == pytest.approx(0.004)
    assert a.path_stats("c")["srtt_s"] == pytest.approx(0.050)


def test_f7_receiver_memory_does_not_grow_with_the_senders_clock() -> None:
    p = Pair("a", "b", stores={"a": MemoryClockStore(10**15), "b": MemoryClockStore()})
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        p.nodes["a"].send("b", b"x", p.now)
        p.transfer()
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    grown = sum(s.size_diff for s in after.compare_to(before, "filename")
                if "a3m/exon" in str(s.traceback))
    assert p.delivered("b") == [("a", b"x")]
    assert grown < 64 * 1024  # the PoC allocated ~24 MiB here


def test_f8_clock_written_ahead_restart_never_accepts_old_tokens() -> None:
    stores = {"a": MemoryClockStore(), "b": MemoryClockStore()}
    p = Pair("a", "b", stores=stores)
    for i in range(100):
        p.nodes["a"].send("b", b"%d" % i, p.now)
    p.transfer()
    old_traffic = [d for s_, _, d in p.wire_log if s_ == "a"]
    used = max(p.nodes["a"]._sr["b"].req_end, p.nodes["b"].clock)
    assert stores["a"].mark >= p.nodes["a"]._sr["b"].req_end  # reserved before use
    assert stores["b"].mark >= p.nodes["b"].clock
    # Both crash (no clean close): restart from the stores.
    p.nodes.clear()
    a2, b2 = p.start("a"), p.start("b")
    assert a2.clock >= used and b2.clock >= stores["b"].mark - p.config.clock_reserve_block
    for d in old_traffic:  # every old datagram replayed to the new b
        b2.receive_datagram(d, "a", p.now)
    b2.datagrams_to_send(p.now)
    assert not [e for e in b2.drain_events()]
    # New traffic still flows exactly once.
    a2.send("b", b"after", p.now)
    p.transfer()
    assert p.delivered("b")[-1:] == [("a", b"after")]
    assert [m for _, m in p.delivered("b")].count(b"after") == 1


def test_f8_sender_restart_with_live_envelopes_at_receiver() -> None:
    stores = {"a": MemoryClockStore(), "b": MemoryClockStore()}
    p = Pair("a", "b", stores=stores)
    p.nodes["a"].send("b", b"before", p.now)
    p.transfer()
    del p.nodes["a"]  # a crashes holding envelopes that b keeps live
    a2 = p.start("a")
    rids = [a2.send("b", b"new%d" % i, p.now, receipt=True) for i in range(10)]
    p.transfer()
    got = [m for _, m in p.delivered("b")]
    assert sorted(got) == sorted([b"before"] + [b"new%d" % i for i in range(10)])
    assert {e.receipt_id for e in p.events["a"] if isinstance(e, ReceiptReady)} >= set(rids)


def test_f9_header_overhead_is_amortised_by_batching() -> None:
    p = Pair("node-" + "x" * 40, "node-" + "y" * 40)
    src, dst = p.nodes
    a = p.nodes[src]
    for _ in range(1000):
        a.send(dst, b"z" * 64, p.now)
    p.transfer()
    assert len(p.delivered(dst)) == 1000
    assert a.stats.bytes_out / 1000 < 64 + wire.TOKEN_OVERHEAD + 8


def test_no_duplicate_under_replay_of_everything() -> None:
    """Replaying every datagram ever sent, in any order, delivers nothing new."""
    p = Pair("a", "b")
    for i in range(50):
        p.nodes["a"].send("b", b"%d" % i, p.now)
    p.transfer()
    log = list(p.wire_log)
    for src, dst, d in reversed(log):
        p.nodes[dst].receive_datagram(d, src, p.now)
    p.transfer()
    assert len(p.delivered("b")) == 50


def test_receiver_that_stops_reading_bounds_memory_and_sender_stalls() -> None:
    cfg = ExonConfig(secure=False, recv_buffer_bytes=10_000, window_per_peer=4096, window_global=4096,
                     slots_ahead=64, max_live_slots=256)
    p = Pair("a", "b", config=cfg)
    b = p.nodes["b"]
    p.collect = lambda: None  # type: ignore[method-assign]  # nobody reads at b
    a = p.nodes["a"]
    sent = 0
    for _i in range(3000):
        try:
            a.send("b", b"y" * 100, p.now)
            sent += 1
        except WouldBlock:
            break
    p.transfer()
    p.advance(20.0)
    assert b.buffered_bytes <= cfg.recv_buffer_bytes + cfg.max_live_slots * 100
    assert a.in_flight() > 0  # stalled, not dropped
    # The application drains: everything arrives, exactly once.
    got = 0
    for _ in range(200):
        for ev in b.drain_events():
            got += 1
            b.consumed(len(ev.payload))  # type: ignore[union-attr]
        p.transfer()
        p.advance(0.5)
        if got == sent:
            break
    assert got == sent
    assert b.stats.delivered == sent


def test_dst_mismatch_and_self_forgery_are_counted() -> None:
    b = ExonProtocol("b", ExonConfig(secure=False))
    b.receive_datagram(wire.encode_header("a", "zz") + wire.encode_slots(1, 1, 1), "x", 0.0)
    b.receive_datagram(wire.encode_header("b", "b") + wire.encode_slots(1, 1, 1), "x", 0.0)
    assert b.stats.wrong_dst == 1 and b.stats.from_self == 1
    assert b.is_idle()
