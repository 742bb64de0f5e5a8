"""The native sealing (``a3m._native.Cipher``, ring) against its Python twin
(``a3m.exon.secure.aead.PyCipher``, over ``cryptography``, the specification): the same sealed
bytes for the same key, type, index, counter and plaintext; each opens the other's datagrams;
a forged, truncated or short datagram opens to None in both; a key of the wrong length is
refused by both. The DATA golden vector of docs/exon-wire.md is read from the document.
"""

from __future__ import annotations

import re
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from a3m.exon import wire
from a3m.exon.secure import packets
from a3m.exon.secure.aead import PyCipher

from .twins import REPO, native

U64 = (1 << 64) - 1
U32 = (1 << 32) - 1
HDR = packets.SEALED_HDR.size  # 14
TAG = 16
KEY = bytes(range(32))
SIZES = [0, 1, 1400, 65000]


def pair(key: bytes = KEY) -> tuple[PyCipher, native.Cipher]:
    return PyCipher(key), native.Cipher(key)


def plaintext(n: int, seed: int = 1) -> bytes:
    return bytes((i * 131 + seed * 7) % 251 for i in range(n))


# ------------------------------------------------------------------ the golden vector

DOC = (REPO / "docs" / "exon-wire.md").read_text(encoding="utf-8")


def _golden() -> tuple[bytes, bytes]:
    """k1 and the DATA datagram it seals (index 9, counter 0), from the doc's block."""
    k1 = re.search(r"^k1\s+([0-9a-f]{64})$", DOC, re.M)
    block = re.search(r'^DATA, k1, index 9, counter 0, sealing "05 00 05 alpha 04 beta" \+ '
                      r'TOKEN s=1000 r=7 "hi":\n(.*?)```', DOC, re.M | re.S)
    assert k1 is not None and block is not None, "docs/exon-wire.md lost its DATA vector"
    return bytes.fromhex(k1.group(1)), bytes.fromhex("".join(block.group(1).split()))


GOLDEN_KEY, GOLDEN_DATA = _golden()
GOLDEN_PLAIN = wire.encode_header("alpha", "beta") + wire.encode_token(1000, 7, b"hi")


@pytest.mark.parametrize("which", ["python", "native"])
def test_the_golden_data_datagram(which: str) -> None:
    cipher = pair(GOLDEN_KEY)[which == "native"]
    assert len(GOLDEN_DATA) == len(GOLDEN_PLAIN) + HDR + TAG
    assert cipher.seal(packets.DATA, 9, 0, GOLDEN_PLAIN) == GOLDEN_DATA
    assert cipher.seal_many(9, 0, [GOLDEN_PLAIN]) == [GOLDEN_DATA]
    assert cipher.open(GOLDEN_DATA) == GOLDEN_PLAIN


# ------------------------------------------------------------------ the same bytes

HEADERS = [
    (packets.DATA, 9, 0),
    (packets.DATA, 0, 1),
    (packets.CHALLENGE, U32, U64),
    (packets.RESPONSE, 1 << 31, 1 << 63),
    (0, 0, 0),
    (255, 12345, 0x0102030405060708),
]


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("kind, index, counter", HEADERS)
def test_the_same_sealed_bytes(size: int, kind: int, index: int, counter: int) -> None:
    py, nat = pair()
    plain = plaintext(size, counter & 0xff)
    sealed = py.seal(kind, index, counter, plain)
    assert len(sealed) == size + HDR + TAG
    assert sealed[:HDR] == packets.SEALED_HDR.pack(wire.VERSION, kind, index, counter)
    assert nat.seal(kind, index, counter, plain) == sealed
    # each opens the other's
    assert nat.open(sealed) == plain
    assert py.open(nat.seal(kind, index, counter, plain)) == plain


@pytest.mark.parametrize("counter", [0, 7, U64 - 3])
def test_seal_many_is_a_loop_of_seal(counter: int) -> None:
    py, nat = pair()
    plains = [plaintext(n, n) for n in (0, 1, 1400, 65000)]
    loop = [py.seal(packets.DATA, 42, counter + i, p) for i, p in enumerate(plains)]
    assert py.seal_many(42, counter, plains) == loop
    assert nat.seal_many(42, counter, plains) == loop
    assert [nat.seal(packets.DATA, 42, counter + i, p) for i, p in enumerate(plains)] == loop
    assert py.seal_many(42, counter, []) == nat.seal_many(42, counter, []) == []


def test_the_counter_is_the_nonce() -> None:
    py, nat = pair()
    a, b = (c.seal(packets.DATA, 1, 1, b"same") for c in (py, nat))
    c, d = (c.seal(packets.DATA, 1, 2, b"same") for c in (py, nat))
    assert a == b and c == d and a[HDR:] != c[HDR:]


# ------------------------------------------------------------------ what does not open

def test_every_flipped_bit_is_refused_by_both() -> None:
    """Header (the associated data), body and tag: any bit flipped opens to None."""
    py, nat = pair()
    sealed = py.seal(packets.DATA, 3, 99, plaintext(64))
    for bit in range(len(sealed) * 8):
        forged = bytearray(sealed)
        forged[bit // 8] ^= 1 << (bit % 8)
        assert py.open(bytes(forged)) is None, bit
        assert nat.open(bytes(forged)) is None, bit


@pytest.mark.parametrize("size", [1400, 65000])
def test_flipped_bits_in_large_datagrams(size: int) -> None:
    py, nat = pair()
    sealed = nat.seal(packets.DATA, 3, 99, plaintext(size))
    n = len(sealed)
    for pos in sorted({0, 1, 2, 5, 6, 13, 14, 15, n // 2, n - TAG - 1, n - TAG, n - 1,
                       *range(14, n, 997)}):
        for bit in (0, 7):
            forged = bytearray(sealed)
            forged[pos] ^= 1 << bit
            assert py.open(bytes(forged)) is None and nat.open(bytes(forged)) is None, pos


def test_another_key_opens_nothing() -> None:
    sealed = native.Cipher(KEY).seal(packets.DATA, 1, 1, b"x")
    other = bytes(31) + b"\x01"
    assert PyCipher(other).open(sealed) is None and native.Cipher(other).open(sealed) is None


@pytest.mark.parametrize("size", [0, 1, 100])
def test_truncated_and_extended_datagrams_open_to_none(size: int) -> None:
    py, nat = pair()
    sealed = py.seal(packets.DATA, 5, 5, plaintext(size))
    # every cut that keeps a header (shorter: below, the twins differ)
    for cut in range(HDR, len(sealed)):
        assert py.open(sealed[:cut]) is None, cut
        assert nat.open(sealed[:cut]) is None, cut
    for extra in (b"\x00", b"\x00" * 16, sealed[-16:]):
        assert py.open(sealed + extra) is None and nat.open(sealed + extra) is None


def test_a_header_and_no_tag_opens_to_none() -> None:
    py, nat = pair()
    for n in range(HDR, HDR + TAG):
        data = packets.SEALED_HDR.pack(wire.VERSION, packets.DATA, 1, 1) + bytes(n - HDR)
        assert py.open(data) is None and nat.open(data) is None, n


def test_the_native_cipher_takes_datagrams_shorter_than_a_header() -> None:
    nat = native.Cipher(KEY)
    for n in range(HDR):
        assert nat.open(bytes(n)) is None


def test_the_python_cipher_takes_datagrams_shorter_than_a_header() -> None:
    py = PyCipher(KEY)
    for n in range(HDR):
        assert py.open(bytes(n)) is None


# ------------------------------------------------------------------ refused arguments

@pytest.mark.parametrize("n", [0, 1, 16, 31, 33, 64])
def test_a_key_of_the_wrong_length_is_refused_by_both(n: int) -> None:
    with pytest.raises(ValueError):
        PyCipher(bytes(n))
    with pytest.raises(ValueError):
        native.Cipher(bytes(n))


@pytest.mark.parametrize("kind, index, counter", [
    (256, 1, 1), (-1, 1, 1), (5, U32 + 1, 1), (5, -1, 1), (5, 1, U64 + 1), (5, 1, -1)])
def test_header_fields_out_of_range_are_refused_by_both(kind: int, index: int, counter: int
                                                         ) -> None:
    # (not the same class: struct.error in Python, OverflowError from the native argument
    # conversion; both refuse before sealing anything)
    py, nat = pair()
    with pytest.raises(struct.error):
        py.seal(kind, index, counter, b"x")
    with pytest.raises(OverflowError):
        nat.seal(kind, index, counter, b"x")


def test_seal_many_past_the_last_counter_is_refused_by_both() -> None:
    py, nat = pair()
    with pytest.raises(struct.error):
        py.seal_many(1, U64, [b"a", b"b"])
    with pytest.raises((OverflowError, ValueError)):
        nat.seal_many(1, U64, [b"a", b"b"])


# ------------------------------------------------------------------ hypothesis

@settings(derandomize=True, database=None, deadline=None, max_examples=300,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(min_size=32, max_size=32), st.integers(0, 255), st.integers(0, U32),
       st.integers(0, U64), st.binary(max_size=2000), st.integers(0, 4000))
def test_random_sealing(key: bytes, kind: int, index: int, counter: int, plain: bytes,
                        flip: int) -> None:
    py, nat = pair(key)
    sealed = py.seal(kind, index, counter, plain)
    assert nat.seal(kind, index, counter, plain) == sealed
    assert py.open(sealed) == plain and nat.open(sealed) == plain
    forged = bytearray(sealed)
    forged[flip % len(sealed)] ^= 1 << (flip % 8)
    assert py.open(bytes(forged)) is None and nat.open(bytes(forged)) is None


@settings(derandomize=True, database=None, deadline=None, max_examples=300)
@given(st.binary(min_size=HDR, max_size=200))
def test_random_datagrams_open_to_none_in_both(data: bytes) -> None:
    py, nat = pair()
    assert py.open(data) is None and nat.open(data) is None
