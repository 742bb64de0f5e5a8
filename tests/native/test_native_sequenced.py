"""The native read of a sequenced message (``a3m._native.decode_sequenced``) against
``a3m.core.message.decode_sequenced`` (the specification): the same fields, or the same
``ProtocolViolation`` text, from the same bytes, over every refusal, hypothesis-generated
messages, and random, mutated and cut ones (derandomized: the same examples on every run).
The core reads with the native twin where ``a3m.NATIVE`` (``message.DECODE_SEQUENCED``)."""

from __future__ import annotations

import struct
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from a3m.core import message as m
from a3m.errors import ProtocolViolation

from .twins import native, same_in_both

SETTINGS = settings(max_examples=500, derandomize=True, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])
U64 = (1 << 64) - 1


def decode_both(data: bytes) -> Any:
    return same_in_both(m.decode_sequenced, native.decode_sequenced, data,
                        errors=ProtocolViolation)


def message(src: str = "src", dst: str = "dst", seq: int = 1, payload: bytes = b"xy",
            mtype: int = m.DATA, src_inc: int = 7, dst_inc: int = U64) -> bytes:
    head = m.data_head(m.encoded_tag(src), m.encoded_tag(dst), src_inc, dst_inc)
    return m.encode_with_head(head, seq, payload, mtype)


def with_length(data: bytes) -> bytes:
    """``data`` with its remaining length made right (the fixed header's last field)."""
    return data[:4] + struct.pack(">I", max(0, len(data) - 8)) + data[8:]


def test_the_core_reads_with_the_native_twin() -> None:
    assert m.DECODE_SEQUENCED is native.decode_sequenced


def test_every_field_and_type_reads_back() -> None:
    for mtype in (m.DATA, m.BATCH, m.PATTERN_MIN, 0xFF):
        for src, dst in (("a", "b"), ("réq", "rép"), ("x" * 255, "y" * 255)):
            for seq in (1, 255, 1 << 63 | 5, U64):
                got = decode_both(message(src, dst, seq, b"body", mtype, 0, U64))
                assert got == ("ok", (mtype, src, dst, 0, U64, seq, b"body"))
    assert decode_both(message(payload=b"")) == ("ok", (m.DATA, "src", "dst", 7, U64, 1, b""))


@pytest.mark.parametrize("data", [
    b"", b"\x00", bytes(7),  # shorter than the fixed header
    message()[:8],  # a header whose length says 0 but a type that is sequenced: no tags
    with_length(message()[:9]),  # no destination tag's length
    with_length(message()[:12]),  # the destination tag's length missing
    with_length(message()[:14]),  # the destination tag cut
    with_length(message()[:20]),  # the incarnations cut
    with_length(message()[:-3]),  # the payload cut: a shorter message, read
])
def test_cut_messages(data: bytes) -> None:
    decode_both(data)


def test_each_refusal() -> None:
    good = message()
    assert decode_both(good)[0] == "ok"
    cases = {
        "version": b"\x00\x02" + good[2:],
        "protocol": good[:2] + b"\x02" + good[3:],
        "LINK is not sequenced": good[:3] + bytes([m.LINK]) + good[4:],
        "remaining length": good[:7] + bytes([good[7] + 1]) + good[8:],
        "empty source tag": with_length(good[:8] + b"\x00\x03dst" + good[16:]),
        "empty destination tag": with_length(good[:8] + b"\x03src\x00" + good[16:]),
        "source not UTF-8": good[:9] + b"\xff" + good[10:],
        "destination not UTF-8": good[:13] + b"\xc3" + good[14:],
        "a surrogate": good[:13] + b"\xed\xa0\x80" + good[16:],
        "sequence number 0": message(seq=0),
    }
    texts = set()
    for why, data in cases.items():
        got = decode_both(data)
        assert got[0] == "error", why
        texts.add(got[1][2])
    assert texts == {f"bad middleware message: {t}" for t in (
        "not a well-formed sequenced message", "empty tag", "cut short or not UTF-8",
        "sequence numbers start at 1")}


TAGS = st.text(min_size=1, max_size=12).filter(lambda t: 0 < len(t.encode()) <= 255)


@SETTINGS
@given(TAGS, TAGS, st.integers(1, U64), st.binary(max_size=64),
       st.sampled_from([m.DATA, m.BATCH, m.PATTERN_MIN, 0x7F]),
       st.integers(0, U64), st.integers(0, U64))
def test_hypothesis_messages(src: str, dst: str, seq: int, payload: bytes, mtype: int,
                             src_inc: int, dst_inc: int) -> None:
    data = message(src, dst, seq, payload, mtype, src_inc, dst_inc)
    assert decode_both(data) == ("ok", (mtype, src, dst, src_inc, dst_inc, seq, payload))


@SETTINGS
@given(st.binary(max_size=80))
def test_random_bytes(data: bytes) -> None:
    decode_both(data)
    decode_both(with_length(b"\x00\x01\x01\x02" + data))  # past the fixed header's checks


@SETTINGS
@given(st.data())
def test_mutated_and_cut_messages(draw: st.DataObject) -> None:
    data = bytearray(message(draw.draw(TAGS), draw.draw(TAGS), draw.draw(st.integers(0, 300)),
                             draw.draw(st.binary(max_size=16))))
    for _ in range(draw.draw(st.integers(0, 4))):
        at = draw.draw(st.integers(0, len(data) - 1))
        data[at] = draw.draw(st.integers(0, 255))
    cut = bytes(data[:draw.draw(st.integers(0, len(data)))])
    decode_both(cut)
    decode_both(with_length(cut))
