"""The native codec (``a3m._native.decode_header`` / ``decode_frames``) against its Python twin
(``a3m.exon.wire``, the specification): the same frames, the same ``WireError`` (class, kind,
words) from the same bytes.

Over the golden vectors of docs/exon-wire.md (read from the document itself), every frame kind
at its edge values, every error the Python codec can give (each detail text of wire.py is
reached: a test fails when one is added there without a case here), every prefix of valid
datagrams, and hypothesis-generated random, mutated and recombined datagrams (derandomized:
the same examples on every run).
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from a3m.exon import wire

from .twins import (
    MAX_MESSAGE,
    REPO,
    datagram_both,
    encode_frame,
    error_key,
    frames_both,
    header_both,
    native,
)

U64 = (1 << 64) - 1
U32 = (1 << 32) - 1
HEADER = wire.encode_header("alpha", "beta")

# ------------------------------------------------------------------ golden vectors (the doc)

DOC = (REPO / "docs" / "exon-wire.md").read_text(encoding="utf-8")


def _inline_vectors() -> list[bytes]:
    """The doc's inline vectors: backquoted hex groups (a header or one frame each)."""
    spans = re.findall(r"`([0-9a-f]{2}(?:[ \n]+[0-9a-f]{2,})+)`", DOC)
    return [bytes.fromhex("".join(s.split())) for s in spans]


def _whole_datagrams() -> list[tuple[bytes, int]]:
    """The doc's whole datagrams ("A whole datagram"): each code block's leading hex groups,
    line by line, with the size the sentence before it gives."""
    section = DOC.split("\n## A whole datagram", 1)[1].split("\n## ", 1)[0]
    out = []
    for size, block in re.findall(r"\((\d+) bytes\):\s*```\n(.*?)```", section, re.S):
        hexed = []
        for line in block.splitlines():
            for tok in line.split():
                if not re.fullmatch(r"(?:[0-9a-f]{2})+", tok):
                    break
                hexed.append(tok)
        out.append((bytes.fromhex("".join(hexed)), int(size)))
    return out


INLINE = _inline_vectors()
WHOLE = _whole_datagrams()


def test_the_doc_still_has_its_vectors() -> None:
    # 12 inline (the header and every frame kind, with flags) and 2 whole datagrams: fewer
    # means the doc changed shape and the tests below would silently check less.
    assert len(INLINE) == 12
    assert [len(d) for d, _ in WHOLE] == [size for _, size in WHOLE] == [61, 44]


@pytest.mark.parametrize("vector", INLINE, ids=[v[:4].hex() for v in INLINE])
def test_golden_inline_vector(vector: bytes) -> None:
    """Read as a header and as frames, both twins agree; each vector is one or the other
    exactly, and a frame encodes back to the vector."""
    head = header_both(vector)
    frames, err = frames_both(vector, 0)
    if head[0] == "ok" and head[1][2] == len(vector):
        return  # the header vector
    assert err is None and len(frames) == 1, (vector.hex(), frames, err)
    assert encode_frame(frames[0]) == vector


@pytest.mark.parametrize("datagram", [d for d, _ in WHOLE], ids=["alpha-beta", "beta-alpha"])
def test_golden_whole_datagram(datagram: bytes) -> None:
    (_, (src, dst, offset)), (frames, err) = datagram_both(datagram)
    assert err is None and {src, dst} == {b"alpha", b"beta"}
    assert datagram[:offset] in (HEADER, wire.encode_header("beta", "alpha"))
    assert b"".join(encode_frame(f) for f in frames) == datagram[offset:]


# ------------------------------------------------------------------ every frame kind

EVERY_FRAME = [
    wire.encode_reqslots(0, 0, 0, 0),
    wire.encode_reqslots(U64 - U32, U32, U64, 255),
    wire.encode_reqslots(2**63, 64, 2**63 - 10, 1),
    wire.encode_slots(0, 0, 0),
    wire.encode_slots(U64 - 1, U64, 1, U32, 255),
    wire.encode_token(0, 0, b""),
    wire.encode_token(U64, U64, b"x" * 300, retransmit=True),
    wire.encode_token(1000, 7, b"abc", (0, 2, 6)),
    wire.encode_token(1001, 7, b"def", (1, 2, 6), retransmit=True),
    wire.encode_token(5, 5, b"", (U32 - 1, U32, U32)),
    wire.encode_ack(0, [(0, 1)]),
    wire.encode_ack(U64, [(U64 - U32, U32), (0, 1)]),
    wire.encode_ack(7, [(1000, 3), (1005, 1)], []),
    wire.encode_ack(7, [(1000, 3), (1005, 1)], [(1001, 1), (1005, 1)]),
    wire.encode_ack(9, [(i * 10, 2) for i in range(100)], [(i * 10, 1) for i in range(50)]),
    wire.encode_void(0),
    wire.encode_void(U64),
    wire.encode_revoke(9),
    wire.encode_revoked(7, 0),
    wire.encode_revoked(U64, U32),
]


@pytest.mark.parametrize("frame", EVERY_FRAME, ids=[f"{f[0]}-{i}" for i, f in
                                                    enumerate(EVERY_FRAME)])
def test_every_frame_kind_alone(frame: bytes) -> None:
    frames, err = frames_both(frame, 0, U32)
    assert err is None and len(frames) == 1
    assert encode_frame(frames[0]) == frame


def test_every_frame_kind_in_one_datagram() -> None:
    data = wire.encode_header("n\u00e9", "m" * 255) + b"".join(EVERY_FRAME)
    _, (frames, err) = datagram_both(data, U32)
    assert err is None and [encode_frame(f) for f in frames] == EVERY_FRAME


def test_the_frame_decoder_reads_from_any_offset() -> None:
    data = HEADER + b"".join(EVERY_FRAME)
    for offset in range(len(data) + 2):
        frames_both(data, offset)


@pytest.mark.parametrize("mms", [0, 1, 5, 6, 7, U32 - 1, U32, U32 + 1, U64])
def test_the_message_size_bound(mms: int) -> None:
    for frame in EVERY_FRAME:
        frames_both(frame, 0, mms)


# ------------------------------------------------------------------ every error

def _token_raw(flags: int, s: int, r: int, length: int, frag: tuple[int, int, int] | None,
               payload: bytes) -> bytes:
    head = wire.TOKEN_S.pack(wire.TOKEN, flags, s, r, length)
    return head + (wire.FRAG_S.pack(*frag) if frag else b"") + payload


def _ack_raw(flags: int, r: int, k: int, c: int | None, ranges: list[tuple[int, int]]) -> bytes:
    out = wire.ACK_S.pack(wire.ACK, flags, r, k)
    if c is not None:
        out += wire.COUNT_S.pack(c)
    return out + b"".join(wire.RANGE_S.pack(f, n) for f, n in ranges)


#: Header damage: (bytes, kind, detail).
HEADER_ERRORS = [
    (b"", "truncated", "shorter than the smallest header"),
    (b"\x05\x00\x01", "truncated", "shorter than the smallest header"),
    (b"\x04\x00\x01a\x01b", "malformed", "unknown version 4"),
    (b"\x00\x00\x01a\x01b", "malformed", "unknown version 0"),
    (b"\xff\x00\x01a\x01b", "malformed", "unknown version 255"),
    (b"\x05\x05\x01a\x01b", "malformed", "datagram type 5 is not an Exon datagram"),
    (b"\x05\xff\x01a\x01b", "malformed", "datagram type 255 is not an Exon datagram"),
    (b"\x05\x00\x05ab", "truncated", "source id cut short"),
    (b"\x05\x00\xff" + b"a" * 254, "truncated", "source id cut short"),
    (b"\x05\x00\x01a\x03b", "truncated", "destination id cut short"),
    (b"\x05\x00\x01a", "truncated", "source id cut short"),
    (b"\x05\x00\x00\x01b", "malformed", "empty node id"),
    (b"\x05\x00\x01a\x00", "malformed", "empty node id"),
    (b"\x05\x00\x00\x00", "malformed", "empty node id"),
    (b"\x05\x00\x00\x05b", "truncated", "destination id cut short"),
]

#: Frame damage, read from offset 0: (bytes, kind, detail).
FRAME_ERRORS = [
    (b"", "malformed", "no frame"),
    # every frame kind one byte short, and the ACK's copy count missing
    *[(f[:-1], "truncated", "frame cut short") for f in (
        wire.encode_reqslots(1, 2, 3), wire.encode_slots(1, 2, 3),
        wire.encode_void(1), wire.encode_revoke(1), wire.encode_revoked(1, 2))],
    (wire.encode_token(1, 2, b"")[:-1], "truncated", "frame cut short"),
    (b"\x03", "truncated", "frame cut short"),
    (b"\x04" + bytes(10), "truncated", "frame cut short"),
    (_ack_raw(1, 7, 1, None, []), "truncated", "frame cut short"),
    (b"\x04\x01" + bytes(8) + b"\x00\x01\x00", "truncated", "frame cut short"),
    # TOKEN
    (_token_raw(1, 1, 2, 3, None, b"abc"), "truncated", "fragment fields cut short"),
    (_token_raw(3, 1, 2, 0, None, b"abcdefghijk"), "truncated", "fragment fields cut short"),
    (_token_raw(4, 1, 2, 0, None, b""), "malformed", "unknown token flags 0x4"),
    (_token_raw(0x80, 1, 2, 0, None, b""), "malformed", "unknown token flags 0x80"),
    (_token_raw(5, 1, 2, 0, None, b""), "malformed", "unknown token flags 0x5"),
    (_token_raw(0xff, 1, 2, 0, (0, 2, 2), b""), "malformed", "unknown token flags 0xff"),
    (_token_raw(1, 1, 2, 3, (3, 3, 9), b"abc"), "malformed", "inconsistent fragment fields"),
    (_token_raw(1, 1, 2, 3, (0, 1, 9), b"abc"), "malformed", "inconsistent fragment fields"),
    (_token_raw(1, 1, 2, 3, (0, 3, 2), b"abc"), "malformed", "inconsistent fragment fields"),
    (_token_raw(1, 1, 2, 9, (0, 3, 8), b"a" * 9), "malformed", "inconsistent fragment fields"),
    (_token_raw(1, 1, 2, 3, (0, 2, MAX_MESSAGE + 1), b"abc"), "malformed",
     "inconsistent fragment fields"),
    (_token_raw(0, 1, 2, 4, None, b"abc"), "truncated", "token payload cut short"),
    (_token_raw(2, 1, 2, 0xffff, None, b""), "truncated", "token payload cut short"),
    (_token_raw(1, 1, 2, 4, (0, 2, 8), b"abc"), "truncated", "token payload cut short"),
    # ACK
    (_ack_raw(0, 7, 0, None, []), "malformed", "ack without ranges"),
    (_ack_raw(1, 7, 0, 1, [(1, 1)]), "malformed", "ack without ranges"),
    (_ack_raw(2, 7, 1, None, [(1, 1)]), "malformed", "unknown ack flags 0x2"),
    (_ack_raw(0xff, 7, 1, None, [(1, 1)]), "malformed", "unknown ack flags 0xff"),
    (_ack_raw(0, 7, 2, None, [(1, 1)]), "truncated", "ack ranges cut short"),
    (_ack_raw(1, 7, 1, 1, [(1, 1)]), "truncated", "ack ranges cut short"),
    (_ack_raw(0, 7, 0xffff, None, []), "truncated", "ack ranges cut short"),
    (_ack_raw(0, 7, 1, None, [(1, 0)]), "malformed", "empty or overflowing ack range"),
    (_ack_raw(0, 7, 1, None, [(U64, 1)]), "malformed", "empty or overflowing ack range"),
    (_ack_raw(0, 7, 2, None, [(1, 1), (U64 - 4, 5)]), "malformed",
     "empty or overflowing ack range"),
    (_ack_raw(1, 7, 1, 1, [(1, 1), (1, 0)]), "malformed", "empty or overflowing ack range"),
    # REQSLOTS and SLOTS
    (wire.encode_reqslots(U64, 1, 0), "malformed", "slot range overflows"),
    (wire.encode_reqslots(U64 - U32 + 1, U32, 0), "malformed", "slot range overflows"),
    (wire.encode_slots(U64, 0, 1), "malformed", "slot range overflows"),
    # unknown types
    (b"\x00", "malformed", "unknown frame type 0x0"),
    (b"\x08" + bytes(12), "malformed", "unknown frame type 0x8"),
    (b"\xff", "malformed", "unknown frame type 0xff"),
]

#: Details of wire.py that the native codec has no twin of (``decode_datagram`` decodes the
#: ids as UTF-8 in Python; the native module decodes headers and frames only).
PYTHON_ONLY_DETAILS = {"node id is not UTF-8"}


@pytest.mark.parametrize("data, kind, detail", HEADER_ERRORS,
                         ids=[f"h{i}" for i in range(len(HEADER_ERRORS))])
def test_header_errors(data: bytes, kind: str, detail: str) -> None:
    result = header_both(data)
    assert result == ("error", (wire.WireError, kind, f"{kind} datagram: {detail}",
                                (f"{kind} datagram: {detail}",)))


@pytest.mark.parametrize("data, kind, detail", FRAME_ERRORS,
                         ids=[f"f{i}" for i in range(len(FRAME_ERRORS))])
def test_frame_errors_alone_and_after_good_frames(data: bytes, kind: str, detail: str) -> None:
    frames, err = frames_both(data, 0)
    assert frames == [] and err is not None
    assert (err.kind, str(err)) == (kind, f"{kind} datagram: {detail}")
    if not data:
        return  # ("no frame": after good frames, the end is no error)
    # The intact frames before the damage come out first, the same in both.
    good = [wire.encode_token(1, 2, b"ok"), wire.encode_ack(2, [(1, 1)], []),
            wire.encode_void(3)]
    frames, err = frames_both(HEADER + b"".join(good) + data, len(HEADER))
    assert [encode_frame(f) for f in frames] == good
    assert err is not None and (err.kind, str(err)) == (kind, f"{kind} datagram: {detail}")


def test_no_frame_past_the_end() -> None:
    for offset in (len(HEADER), len(HEADER) + 1, 1 << 20):
        frames, err = frames_both(HEADER, offset)
        assert frames == [] and err is not None and str(err) == "malformed datagram: no frame"


def _wire_py_details() -> set[tuple[str, str]]:
    """Every ``WireError(kind, detail)`` wire.py raises or returns (an f-string's fields as
    ``{}``), and the one it gives for ``struct.error``."""
    source = (REPO / "src" / "a3m" / "exon" / "wire.py").read_text(encoding="utf-8")
    found = re.findall(r'WireError\("(\w+)",\s*f?"([^"]*)"\)', source)
    return {(kind, re.sub(r"\{[^}]*\}", "{}", detail)) for kind, detail in found}


def test_every_error_of_wire_py_is_reached_through_both() -> None:
    reached: set[tuple[str, str]] = set()
    for data, _, _ in HEADER_ERRORS:
        _, key = header_both(data)
        reached.add((key[1], key[2].split(" datagram: ", 1)[1]))
    for data, _, _ in FRAME_ERRORS:
        _, err = frames_both(data, 0)
        assert err is not None
        reached.add((err.kind, str(err).split(" datagram: ", 1)[1]))
    templates = _wire_py_details()
    assert len(templates) >= 18  # the regexp still reads wire.py
    missing = []
    for kind, template in templates:
        if template in PYTHON_ONLY_DETAILS:
            continue
        pattern = re.compile(re.escape(template).replace(r"\{\}", ".+"))
        if not any(k == kind and pattern.fullmatch(d) for k, d in reached):
            missing.append((kind, template))
    assert not missing, f"errors of wire.py no case here reaches: {missing}"


def test_errors_are_the_python_class() -> None:
    _, err = native.decode_frames(b"\x09", 0, MAX_MESSAGE)
    assert type(err) is wire.WireError and isinstance(err, wire.ProtocolViolation)
    with pytest.raises(wire.WireError) as info:
        native.decode_header(b"")
    assert type(info.value) is wire.WireError and info.value.kind == "truncated"


# ------------------------------------------------------------------ truncations

RICH = (wire.encode_header("alpha", "beta") + b"".join(EVERY_FRAME[:12])
        + wire.encode_ack(7, [(1000, 3), (1005, 1)], [(1001, 1)]) + b"".join(EVERY_FRAME[15:]))
VALID = [d for d, _ in WHOLE] + [RICH, wire.encode_header("a", "b") + wire.encode_token(
    1, 2, b"frag", (1, 3, 100)) + wire.encode_ack(9, [(1, 2)], None)]


@pytest.mark.parametrize("datagram", VALID, ids=[f"v{i}" for i in range(len(VALID))])
def test_every_prefix_of_a_valid_datagram(datagram: bytes) -> None:
    outcomes = set()
    for cut in range(len(datagram) + 1):
        head, rest = datagram_both(datagram[:cut])
        if rest is not None:
            outcomes.add(error_key(rest[1]))
        # and every suffix from a frame boundary read as frames only
        frames_both(datagram[cut:], 0)
    assert None in outcomes and len(outcomes) > 2  # whole, and several kinds of cut


# ------------------------------------------------------------------ hypothesis

DIFFERENTIAL = settings(derandomize=True, database=None, deadline=None,
                        suppress_health_check=[HealthCheck.too_slow])

u64 = st.one_of(st.sampled_from([0, 1, U32, U64 - U32, U64 - 1, U64]),
                st.integers(0, U64))
u32 = st.one_of(st.sampled_from([0, 1, 2, U32 - 1, U32]), st.integers(0, U32))
ranges = st.lists(st.tuples(u64, u32), min_size=0, max_size=4)

frame = st.one_of(
    st.builds(wire.encode_reqslots, u64, u32, u64, st.integers(0, 255)),
    st.builds(wire.encode_slots, u64, u64, u32, u32, st.integers(0, 255)),
    st.builds(wire.encode_token, u64, u64, st.binary(max_size=40),
              st.none() | st.tuples(u32, u32, u32), st.booleans()),
    st.builds(wire.encode_ack, u64, ranges, st.none() | ranges),
    st.builds(wire.encode_void, u64),
    st.builds(wire.encode_revoke, u64),
    st.builds(wire.encode_revoked, u64, u32),
    st.binary(min_size=1, max_size=16),  # junk between frames
)
node_id = st.text(min_size=1, max_size=8).filter(lambda s: len(s.encode()) <= 255)
mms = st.one_of(st.just(MAX_MESSAGE), st.integers(0, U64))


@settings(DIFFERENTIAL, max_examples=600)
@given(st.binary(max_size=300), st.integers(0, 310), mms)
def test_random_bytes(data: bytes, offset: int, max_message_size: int) -> None:
    header_both(data)
    frames_both(data, offset, max_message_size)


@settings(DIFFERENTIAL, max_examples=400)
@given(st.binary(max_size=200))
def test_random_bytes_after_a_valid_header(body: bytes) -> None:
    datagram_both(HEADER + body)


@settings(DIFFERENTIAL, max_examples=500)
@given(node_id, node_id, st.lists(frame, min_size=1, max_size=8), mms)
def test_recombined_frames(src: str, dst: str, frames: list[bytes], max_message_size: int
                           ) -> None:
    datagram_both(wire.encode_header(src, dst) + b"".join(frames), max_message_size)


@settings(DIFFERENTIAL, max_examples=800)
@given(st.sampled_from(VALID + INLINE), st.data())
def test_mutated_valid_datagrams(datagram: bytes, data: Any) -> None:
    n = len(datagram)
    buf = bytearray(datagram)
    for pos, value in data.draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, 255)),
                                         max_size=6)):
        buf[pos] = value
    edit = data.draw(st.sampled_from(["none", "cut", "insert", "delete"]))
    at = data.draw(st.integers(0, n))
    if edit == "cut":
        buf = buf[:at]
    elif edit == "insert":
        buf[at:at] = data.draw(st.binary(min_size=1, max_size=8))
    elif edit == "delete":
        del buf[at:at + data.draw(st.integers(1, 8))]
    mutated = bytes(buf)
    datagram_both(mutated)
    frames_both(mutated, data.draw(st.integers(0, len(mutated) + 1)),
                data.draw(mms))
