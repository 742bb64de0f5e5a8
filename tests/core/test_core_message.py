"""The middleware message codec: golden vectors (docs/core-messages.md), round trips, fuzzing."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from a3m.core import message as m
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
    (m.Message(m.ERROR, "sink", "src", 0, 1, code=m.ERR_SOCKET_NOT_FOUND, about=m.DATA),
     "000101010000001b0473696e6b03737263000000000000000000000000000000010102"),
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
