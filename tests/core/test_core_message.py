"""The middleware message codec: golden vectors (docs/core-messages.md), round trips, fuzzing."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from a3m.core import message as m
from a3m.core.cookies import CONFIRM, decode_taken, encode_taken, taken_chunks, to_ranges
from a3m.errors import ProtocolViolation

GOLDEN = [
    (m.Message(m.DATA, "src", "sink", 1, 2, seq=7, payload=b"hi"),
     "0001010200000023037372630473696e6b0000000000000001000000000000000200000000000000076869"),
    (m.Message(m.LINK, "src", "sink", 1, 0, meta={"type": "PUSH", "credits": 256,
                                                    "ordered": True}),
     "0001010300000042037372630473696e6b00000000000000010000000000000000000304747970650100"
     "04505553480763726564697473000000000000000100076f7264657265640301"),
    (m.Message(m.LINKACK, "sink", "src", 2, 1, code=0),
     "000101040000001b0473696e6b03737263000000000000000200000000000000010000"),
    (m.Message(m.UNLINK, "src", "sink", 1, 2, goal=5),
     "0001010500000021037372630473696e6b000000000000000100000000000000020000000000000005"),
    (m.Message(m.FLOW, "sink", "src", 2, 1, flow_seq=3, edge=320),
     "00010106000000250473696e6b0373726300000000000000020000000000000001000000030000000000000140"),
    (m.Message(m.PING, "src", "sink", 1, 2),
     "0001010700000019037372630473696e6b00000000000000010000000000000002"),
    (m.Message(m.BATCH, "src", "sink", 1, 2, seq=7,
               payload=m.encode_batch_body([b"hi", b"abc"])),
     "0001010800000032037372630473696e6b00000000000000010000000000000002"
     "00000000000000070000000200000002000000036869616263"),
    (m.Message(m.ERROR, "sink", "src", 0, 1, code=m.ERR_SOCKET_NOT_FOUND, about=m.DATA),
     "000101010000001b0473696e6b03737263000000000000000000000000000000010102"),
    # Cookies: a DATA whose sender asks to be told when it is taken (bit 63 of seq), and the
    # final TAKEN #3 of a link: 1-4 and 7 taken, 5-6 dropped.
    (m.Message(m.DATA, "src", "sink", 1, 2, seq=7 | CONFIRM, payload=b"hi"),
     "0001010200000023037372630473696e6b0000000000000001000000000000000280000000000000076869"),
    (m.Message(m.TAKEN, "sink", "src", 2, 1,
               payload=encode_taken(True, 3, [(1, 4), (7, 7)], [(5, 6)])),
     "00010109000000520473696e6b037372630000000000000002000000000000000101000000030002000100"
     "00000000000001000000000000000400000000000000070000000000000007000000000000000500000000"
     "00000006"),
]


@pytest.mark.parametrize("msg, hexed", GOLDEN, ids=[m.TYPE_NAMES[g[0].type] for g in GOLDEN])
def test_golden_vectors(msg: m.Message, hexed: str) -> None:
    data = m.encode(msg)
    assert data.hex() == hexed
    assert m.decode(data) == msg


def test_fast_data_path_matches_the_generic_encoder() -> None:
    msg = m.Message(m.DATA, "a", "b\u00e9", 9, 10, seq=3, payload=b"xyz")
    fast = m.encode_data(m.encoded_tag("a"), m.encoded_tag("b\u00e9"), 9, 10, 3, b"xyz")
    assert fast == m.encode(msg)
    ctrl = m.encode_data(m.encoded_tag("a"), m.encoded_tag("b"), 1, 2, 4, b"t", 0x41)
    assert m.decode(ctrl).type == 0x41 and m.decode(ctrl).payload == b"t"


def test_linkack_with_metadata_round_trip() -> None:
    msg = m.Message(m.LINKACK, "x", "y", 5, 6, code=0x20,
                    meta={"type": "PAIR", "secret": b"\x00\x01", "n": -3, "ok": False})
    assert m.decode(m.encode(msg)) == msg


@pytest.mark.parametrize("bad", [
    b"", b"\x00\x02\x01\x02\x00\x00\x00\x00",  # version 2
    bytes.fromhex("0001020200000000"),  # protocol 2
    bytes.fromhex(GOLDEN[0][1])[:-1],  # remaining length mismatch
    bytes.fromhex("0001010900000012") + b"\x01a\x01b" + bytes(16),  # unknown type
    bytes.fromhex("0001010200000016") + b"\x00\x01b" + bytes(16),  # empty tag... cut
])
def test_malformed_raise_protocol_violation(bad: bytes) -> None:
    with pytest.raises(ProtocolViolation):
        m.decode(bad)


def test_every_truncation_raises_protocol_violation() -> None:
    for _msg, hexed in GOLDEN:
        data = bytes.fromhex(hexed)
        for cut in range(len(data)):
            with pytest.raises(ProtocolViolation):
                m.decode(data[:cut])


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=200))
def test_fuzz_random_bytes(data: bytes) -> None:
    try:
        m.decode(data)
    except ProtocolViolation:
        pass


@settings(max_examples=500, deadline=None)
@given(st.sampled_from([bytes.fromhex(h) for _, h in GOLDEN]),
       st.lists(st.tuples(st.integers(0, 200), st.integers(0, 255)), max_size=5))
def test_fuzz_mutations(data: bytes, muts: list[tuple[int, int]]) -> None:
    b = bytearray(data)
    for pos, val in muts:
        b[pos % len(b)] = val
    try:
        m.decode(bytes(b))
    except ProtocolViolation:
        pass


def test_batch_fast_encoder_and_split() -> None:
    head = m.data_head(m.encoded_tag("src"), m.encoded_tag("sink"), 1, 2)
    payloads = [b"hi", b"", b"abc" * 100]
    data = m.encode_batch_with_head(head, 7, payloads)
    assert data == m.encode(m.Message(m.BATCH, "src", "sink", 1, 2, seq=7,
                                      payload=m.encode_batch_body(payloads)))
    t, src, dst, src_inc, dst_inc, seq, body = m.decode_sequenced(data)
    assert (t, src, dst, src_inc, dst_inc, seq) == (m.BATCH, "src", "sink", 1, 2, 7)
    assert m.split_batch(body) == payloads


@pytest.mark.parametrize("body", [
    b"", b"\x00\x00\x00",  # no count
    b"\x00\x00\x00\x00",  # count 0
    b"\x00\x00\x00\x02\x00\x00\x00\x01",  # two lengths announced, one there
    b"\xff\xff\xff\xff",  # a count that cannot fit
    b"\x00\x00\x00\x01\x00\x00\x00\x02a",  # a payload cut short
    b"\x00\x00\x00\x01\x00\x00\x00\x01ab",  # a byte no length accounts for
])
def test_malformed_batch_bodies_raise_protocol_violation(body: bytes) -> None:
    with pytest.raises(ProtocolViolation):
        m.split_batch(body)


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=200))
def test_fuzz_batch_bodies(body: bytes) -> None:
    try:
        parts = m.split_batch(body)
    except ProtocolViolation:
        return
    assert m.encode_batch_body(parts) == body  # accepted: exactly what it encodes


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=40), min_size=1, max_size=30),
       st.lists(st.tuples(st.integers(0, 400), st.integers(0, 255)), max_size=4))
def test_fuzz_batch_mutations(payloads: list[bytes], muts: list[tuple[int, int]]) -> None:
    body = bytearray(m.encode_batch_body(payloads))
    for pos, val in muts:
        if pos < len(body):
            body[pos] = val
    try:
        parts = m.split_batch(bytes(body))
    except ProtocolViolation:
        return
    assert m.encode_batch_body(parts) == bytes(body)


@given(st.lists(st.integers(1, 1 << 40), max_size=300), st.lists(st.integers(1, 1 << 40),
                                                                 max_size=300))
def test_taken_reports_round_trip_in_chunks(taken: list[int], dropped: list[int]) -> None:
    got_t: set[int] = set()
    got_d: set[int] = set()
    chunks = taken_chunks(taken, dropped)
    for i, (t, d) in enumerate(chunks):
        final, number, t2, d2 = decode_taken(encode_taken(i == len(chunks) - 1, i + 1, t, d))
        assert (final, number, t2, d2) == (i == len(chunks) - 1, i + 1, t, d)
        for a, b in t2:
            got_t.update(range(a, b + 1))
        for a, b in d2:
            got_d.update(range(a, b + 1))
    assert got_t == set(taken) and got_d == set(dropped)
    assert to_ranges([3, 1, 2, 2, 9]) == [(1, 3), (9, 9)]


@given(st.binary(max_size=120))
def test_fuzz_taken_bodies(body: bytes) -> None:
    try:
        decode_taken(body)
    except ProtocolViolation:
        pass


def test_a_long_report_is_cut_into_takens_of_bounded_size() -> None:
    chunks = taken_chunks(list(range(1, 10_000, 2)), [2, 4])
    assert len(chunks) == 3
    assert all(len(t) + len(d) <= 2048 for t, d in chunks)
    assert sum(len(t) for t, _ in chunks) == 5000 and chunks[-1][1] or chunks[0][1]
