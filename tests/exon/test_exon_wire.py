"""The Exon datagram codec: golden vectors (also in docs/exon-wire.md), round trips, fuzzing."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from a3m.exon import ExonConfig, ExonProtocol, wire

# Golden vectors: these bytes are the protocol. A change here is a wire-format change.
GOLDEN = {
    "header alpha->beta": (wire.encode_header("alpha", "beta"), "050005616c7068610462657461"),
    "REQSLOTS s=1000 n=64 l=990 copy 2": (
        wire.encode_reqslots(1000, 64, 990, 2), "0100000000000003e80000004000000000000003de02"),
    "SLOTS s=1000 r=7 n=64 ack delay 2000 us echo 2": (
        wire.encode_slots(1000, 7, 64, 2000, 2),
        "0200000000000003e8000000000000000700000040000007d002"),
    "TOKEN s=1000 r=7 'hi'": (
        wire.encode_token(1000, 7, b"hi"), "030000000000000003e8000000000000000700026869"),
    "TOKEN s=1000 r=7 'hi', retransmitted": (
        wire.encode_token(1000, 7, b"hi", retransmit=True),
        "030200000000000003e8000000000000000700026869"),
    "TOKEN fragment 1/3 of 9 bytes": (
        wire.encode_token(1001, 7, b"abc", (1, 3, 9)),
        "030100000000000003e900000000000000070003000000010000000300000009616263"),
    "ACK r=7 [1000..1002] [1005]": (
        wire.encode_ack(7, [(1000, 3), (1005, 1)]),
        "04000000000000000007000200000000000003e80000000300000000000003ed00000001"),
    "ACK r=7 [1000..1002] [1005], a copy sent again arrived on 1001": (
        wire.encode_ack(7, [(1000, 3), (1005, 1)], [(1001, 1)]),
        "040100000000000000070002000100000000000003e80000000300000000000003ed00000001"
        "00000000000003e900000001"),
    "VOID r=7": (wire.encode_void(7), "050000000000000007"),
    "REVOKE r=7": (wire.encode_revoke(7), "060000000000000007"),
    "REVOKED r=7 held=3": (wire.encode_revoked(7, 3), "07000000000000000700000003"),
}

DATAGRAM = bytes.fromhex(
    "050005616c7068610462657461"
    "030000000000000003e8000000000000000700026869"
    "0401000000000000000700010000" "00000000000003e800000002")


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_golden_vectors(name: str) -> None:
    encoded, hexed = GOLDEN[name]
    assert encoded.hex() == hexed


def test_golden_datagram_decodes() -> None:
    src, dst, frames = wire.decode_datagram(DATAGRAM)
    assert (src, dst) == ("alpha", "beta")
    assert frames == [(wire.TOKEN, 1000, 7, b"hi", 0, 1, 2, 0), (wire.ACK, 7, ((1000, 2),), ())]


# The restart frames (VOID, REVOKE, REVOKED) in one datagram, `beta` -> `alpha` (also in the doc).
RESTART_DATAGRAM = bytes.fromhex(
    "0500046265746105616c706861"
    "050000000000000007"
    "060000000000000009"
    "07000000000000000700000000")


def test_golden_restart_datagram_decodes() -> None:
    src, dst, frames = wire.decode_datagram(RESTART_DATAGRAM)
    assert (src, dst) == ("beta", "alpha")
    assert frames == [(wire.VOID, 7), (wire.REVOKE, 9), (wire.REVOKED, 7, 0)]


def test_round_trip_every_frame() -> None:
    frames = [
        wire.encode_reqslots(2**63, 2**32 - 1, 5, 255),
        wire.encode_slots(0, 2**64 - 2, 1, 2**32 - 1, 1),
        wire.encode_token(3, 4, b"payload"),
        wire.encode_token(9, 4, b"xy", (0, 2, 4), retransmit=True),
        wire.encode_ack(4, [(1, 1), (10, 5)], [(11, 2)]),
        wire.encode_ack(4, [(20, 1)]),
        wire.encode_void(2**64 - 1),
        wire.encode_revoke(0),
        wire.encode_revoked(12, 2**32 - 1),
    ]
    data = wire.encode_header("n\u00e9", "m") + b"".join(frames)
    src, dst, out = wire.decode_datagram(data)
    assert (src, dst) == ("n\u00e9", "m")
    assert out == [
        (wire.REQSLOTS, 2**63, 2**32 - 1, 5, 255),
        (wire.SLOTS, 0, 2**64 - 2, 1, 2**32 - 1, 1),
        (wire.TOKEN, 3, 4, b"payload", 0, 1, 7, 0),
        (wire.TOKEN, 9, 4, b"xy", 0, 2, 4, wire.FLAG_FRAGMENT | wire.FLAG_RETRANSMIT),
        (wire.ACK, 4, ((1, 1), (10, 5)), ((11, 2),)),
        (wire.ACK, 4, ((20, 1),), None),
        (wire.VOID, 2**64 - 1),
        (wire.REVOKE, 0),
        (wire.REVOKED, 12, 2**32 - 1),
    ]


def test_to_ranges() -> None:
    assert wire.to_ranges([5, 3, 4, 4, 9, 10, 1]) == [(1, 1), (3, 3), (9, 2)]
    assert wire.to_ranges([]) == []


@pytest.mark.parametrize("cut", [c for c in range(1, len(DATAGRAM)) if c != 35])
def test_every_truncation_is_an_error_not_a_crash(cut: int) -> None:
    """Every cut but the one at the frame boundary (35: header + the whole TOKEN) is an error."""
    data = DATAGRAM[:cut]
    with pytest.raises(wire.WireError):
        wire.decode_datagram(data)


@pytest.mark.parametrize("cut", [c for c in range(1, len(RESTART_DATAGRAM))
                                 if c not in (22, 31)])
def test_every_truncation_of_restart_frames_is_an_error(cut: int) -> None:
    with pytest.raises(wire.WireError):
        wire.decode_datagram(RESTART_DATAGRAM[:cut])


@pytest.mark.parametrize("bad, kind", [
    (b"\x01\x00\x01a\x01b" + wire.encode_slots(1, 1, 1), "malformed"),  # version 1: refused
    (b"\x02\x00\x01a\x01b" + wire.encode_slots(1, 1, 1), "malformed"),  # version 2: refused
    (b"\x03\x00\x01a\x01b" + wire.encode_slots(1, 1, 1), "malformed"),  # version 3: refused
    (b"\x04\x00\x01a\x01b" + wire.encode_slots(1, 1, 1), "malformed"),  # version 4: refused
    (b"\x06\x00\x01a\x01b" + wire.encode_slots(1, 1, 1), "malformed"),  # unknown version
    (b"\x05\x05\x01a\x01b" + wire.encode_slots(1, 1, 1), "malformed"),  # sealed, not PLAIN
    (b"\x01\x00\x00\x01b" + wire.encode_slots(1, 1, 1), "malformed"),  # empty src id
    (wire.encode_header("a", "b") + b"\x09", "malformed"),  # unknown frame type
    (wire.encode_header("a", "b") + b"\x08" + bytes(12), "malformed"),  # the next type
    (wire.encode_header("a", "b"), "malformed"),  # no frame
    (wire.encode_header("a", "b") + bytes.fromhex("040000000000000000070000"), "malformed"),
    (wire.encode_header("a", "b") + bytes.fromhex("0402000000000000000700010000000000000001"
                                                  "00000001"), "malformed"),  # flags
    (wire.encode_header("a", "b") + wire.encode_ack(7, [(1, 1)], [(1, 0)]), "malformed"),
    (wire.encode_header("a", "b") + wire.encode_token(1, 1, b"abc", (3, 3, 9)), "malformed"),
    (wire.encode_header("a", "b") + wire.encode_token(1, 1, b"abc", (0, 3, 2)), "malformed"),
    (wire.encode_header("a", "b") + wire.encode_reqslots(2**64 - 1, 5, 0), "malformed"),
])
def test_malformed_inputs(bad: bytes, kind: str) -> None:
    with pytest.raises(wire.WireError) as info:
        wire.decode_datagram(bad)
    assert info.value.kind == kind


def _feed_is_safe(proto: ExonProtocol, data: bytes) -> None:
    before = proto.stats.datagrams_in
    proto.receive_datagram(data, ("10.0.0.9", 1), 1.0)  # must never raise
    proto.handle_timer(2.0)
    proto.datagrams_to_send(2.0)
    assert proto.stats.datagrams_in == before + 1


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=300))
def test_fuzz_random_bytes_never_raise(data: bytes) -> None:
    with contextlib.suppress(wire.WireError):
        wire.decode_datagram(data)
    _feed_is_safe(ExonProtocol("beta", ExonConfig(secure=False)), data)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, len(DATAGRAM) - 1), st.integers(0, 255)),
                min_size=1, max_size=6),
       st.integers(0, len(DATAGRAM)))
def test_fuzz_mutated_valid_datagrams(mutations: list[tuple[int, int]], cut: int) -> None:
    data = bytearray(DATAGRAM)
    for pos, value in mutations:
        data[pos] = value
    mutated = bytes(data[: max(cut, 1)])
    with contextlib.suppress(wire.WireError):
        wire.decode_datagram(mutated)
    proto = ExonProtocol("beta", ExonConfig(secure=False))
    _feed_is_safe(proto, mutated)
    st_ = proto.stats
    assert st_.delivered + st_.malformed + st_.truncated + st_.wrong_dst + st_.duplicates >= 0


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from([
    wire.encode_reqslots(0, 3, 0), wire.encode_slots(0, 0, 3), wire.encode_slots(5, 0, 0),
    wire.encode_token(0, 0, b"a"), wire.encode_token(1, 0, b"b", (1, 2, 2)),
    wire.encode_token(0, 0, b"b", (0, 2, 2)), wire.encode_ack(0, [(0, 2**32 - 1)]),
    wire.encode_reqslots(0, 0, 2**63), wire.encode_void(0), wire.encode_void(2**64 - 1),
    wire.encode_revoke(0), wire.encode_revoked(0, 0), wire.encode_revoked(0, 5),
]), min_size=1, max_size=12))
def test_fuzz_frame_sequences_keep_state_bounded(frames: list[bytes]) -> None:
    proto = ExonProtocol("beta", ExonConfig(secure=False))
    data = wire.encode_header("alpha", "beta") + b"".join(frames)
    _feed_is_safe(proto, data)
    sends, recvs = proto.record_counts()
    assert sends == 0 and recvs <= 1
    # Delivered only what a granted, live slot allowed: at most one per distinct slot.
    assert proto.stats.delivered <= 2


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from([
    wire.encode_slots(0, 0, 3), wire.encode_slots(0, 1, 3), wire.encode_slots(3, 2, 3),
    wire.encode_void(0), wire.encode_void(1), wire.encode_void(2**64 - 1),
    wire.encode_revoke(0), wire.encode_revoke(1), wire.encode_revoked(0, 0),
    wire.encode_ack(0, [(0, 3)]), wire.encode_ack(1, [(0, 2)]), wire.encode_slots(0, 0, 0),
]), min_size=1, max_size=16))
def test_fuzz_restart_frames_at_a_sender_never_lose_track(frames: list[bytes]) -> None:
    """Hostile VOID/REVOKE/SLOTS/ACK sequences at a node with messages in flight: never a
    crash, and every message stays accounted for (in flight, acknowledged or reported)."""
    from a3m.exon.events import OutcomeUnknown, ReceiptReady

    proto = ExonProtocol("beta", ExonConfig(secure=False))
    rids = [proto.send("alpha", b"m%d" % i, 0.0, receipt=True) for i in range(3)]
    rids.append(proto.send("alpha", b"L" * 5000, 0.0, receipt=True))  # fragmented
    proto.associate("alpha", ("10.0.0.9", 1))
    for f in frames:
        proto.receive_datagram(wire.encode_header("alpha", "beta") + f, ("10.0.0.9", 1), 1.0)
    proto.handle_timer(2.0)
    proto.datagrams_to_send(2.0)
    done = {e.receipt_id for e in proto.drain_events()
            if isinstance(e, (ReceiptReady, OutcomeUnknown))}
    rec = proto._sr.get("alpha")
    pending = set()
    if rec is not None:
        for tok in rec.tokens.values():
            pending.add(tok[2] if isinstance(tok[2], int) else tok[2].rid)
        for item in rec.queue:
            pending.add(item[2] if isinstance(item[2], int) else item[2].rid)
    assert set(rids) <= done | pending
    assert proto.in_flight() == (len(rec.tokens) + len(rec.queue) if rec is not None else 0)
