"""The Exon datagram codec (byte layout in ``docs/exon-wire.md``).

A datagram is a header naming its source and destination nodes, then one or more frames.
All integers are big-endian and fixed width. Decoding raises :class:`WireError` (a
:class:`~a3m.errors.ProtocolViolation`) and nothing else, whatever the input.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from typing import Any, Final

from a3m.errors import ProtocolViolation

#: Version 2 added VOID, REVOKE and REVOKED (receiver restarts, ``docs/exon-wire.md``); a
#: version-1 datagram is refused as malformed (a version-1 node would ACK tokens for records of
#: an earlier incarnation, the loss those frames exist to prevent). Version 3 (loss recovery)
#: added the TOKEN flag RETRANSMIT, the receiver's largest ACK delay in SLOTS, and a copy
#: number in REQSLOTS that SLOTS echoes (an RTT sample even from a retransmitted request).
#: Version 4 (secure associations): the byte after the version is the datagram's type; an
#: Exon datagram in clear is type PLAIN (0), and travels whole inside a secure DATA datagram.
#: Version 5: ACK says how the tokens it acknowledges arrived (first copies, or copies sent
#: again), so a sender no longer takes a first copy's ACK for a later copy's.
VERSION: Final = 5
#: The datagram type of an Exon datagram in clear (the others: ``a3m.exon.secure.packets``).
PLAIN: Final = 0x00

REQSLOTS: Final = 0x01
SLOTS: Final = 0x02
TOKEN: Final = 0x03
ACK: Final = 0x04
#: receiver -> sender: record ``r`` belonged to an earlier incarnation of mine; it is gone.
VOID: Final = 0x05
#: receiver -> sender (closing): record ``r`` grants nothing more; drop its envelopes.
REVOKE: Final = 0x06
#: sender -> receiver: answer to REVOKE ``r``: how many tokens bound to ``r`` I still hold.
REVOKED: Final = 0x07

#: TOKEN flag: the token carries one fragment of a larger message.
FLAG_FRAGMENT: Final = 0x01
#: TOKEN flag: a retransmission (the sender took the first copy for lost): ACK it at once.
FLAG_RETRANSMIT: Final = 0x02
TOKEN_FLAGS: Final = FLAG_FRAGMENT | FLAG_RETRANSMIT

#: ACK flag: the receiver says which copy of each token it acknowledges arrived: the copy
#: ranges that follow the ranges list the slots where a copy sent again (RETRANSMIT) arrived;
#: on every other slot acknowledged, only the first copy did. Without it: not known.
ACK_ARRIVALS: Final = 0x01

MAX_ID_BYTES: Final = 255
U64_MAX: Final = (1 << 64) - 1

REQSLOTS_S: Final = struct.Struct(">BQIQB")  # type, s, n, l, copy (1..255; 0: none)
#: type, s, r, n, largest ACK delay (microseconds), echo of the request's copy (0: none)
SLOTS_S: Final = struct.Struct(">BQQIIB")
TOKEN_S: Final = struct.Struct(">BBQQH")  # type, flags, s, r, payload length
FRAG_S: Final = struct.Struct(">III")  # fragment index, fragment count, message length
#: A fragment's TOKEN and its fragment fields, packed and read at once.
TOKEN_FRAG_S: Final = struct.Struct(">BBQQHIII")
ACK_S: Final = struct.Struct(">BBQH")  # type, flags, r, number of ranges
COUNT_S: Final = struct.Struct(">H")  # (flag ACK_ARRIVALS) number of copy ranges
RANGE_S: Final = struct.Struct(">QI")  # first slot, count
VOID_S: Final = struct.Struct(">BQ")  # type, r
REVOKE_S: Final = struct.Struct(">BQ")  # type, r
REVOKED_S: Final = struct.Struct(">BQI")  # type, r, tokens still held on r

TOKEN_OVERHEAD: Final = TOKEN_S.size
_TOKEN_SIZE: Final = TOKEN_S.size
_TOKEN_FRAG_SIZE: Final = TOKEN_FRAG_S.size
_TOKEN_UNPACK: Final = TOKEN_S.unpack_from
_TOKEN_FRAG_UNPACK: Final = TOKEN_FRAG_S.unpack_from
FRAGMENT_OVERHEAD: Final = TOKEN_S.size + FRAG_S.size
MAX_ACK_RANGES: Final = 0xFFFF

# Decoded frames are plain tuples (cheap on the hot path):
#   (REQSLOTS, s, n, l, copy)
#   (SLOTS, s, r, n, ack_delay_us, echo)
#   (TOKEN, s, r, payload, index, count, total, flags)   # unfragmented: index 0, count 1
#   (ACK, r, ((first, count), ...), copy ranges ((first, count), ...) or None: not known)
#   (VOID, r)
#   (REVOKE, r)
#   (REVOKED, r, held)
Frame = tuple[Any, ...]


class WireError(ProtocolViolation):
    """A datagram that cannot be decoded; ``kind`` is ``"truncated"`` or ``"malformed"``."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(f"{kind} datagram: {detail}")
        self.kind = kind


def encode_id(node_id: str) -> bytes:
    """Encode a node id as it appears in a header: length byte, then UTF-8."""
    raw = node_id.encode("utf-8")
    if not 1 <= len(raw) <= MAX_ID_BYTES:
        raise ValueError(f"node id must be 1..{MAX_ID_BYTES} UTF-8 bytes: {node_id!r}")
    return bytes((len(raw),)) + raw


def encode_header(src: str, dst: str) -> bytes:
    """The datagram header: version, type PLAIN, source id, destination id."""
    return bytes((VERSION, PLAIN)) + encode_id(src) + encode_id(dst)


def encode_reqslots(s: int, n: int, low: int, copy: int = 0) -> bytes:
    """REQSLOTS: ask for ``n`` slots starting at ``s``; slots below ``low`` may be dropped.
    ``copy`` numbers the transmissions of one request (1..255, 0 for none): the SLOTS that
    answers echoes it, so the sender knows which copy it measures the round trip from."""
    return REQSLOTS_S.pack(REQSLOTS, s, n, low, copy)


def encode_slots(s: int, r: int, n: int, ack_delay_us: int = 0, echo: int = 0) -> bytes:
    """SLOTS: slots ``[s, s+n)`` of receive record ``r`` are granted (``n == 0``: a probe);
    ``ack_delay_us``: the longest this receiver delays an ACK (the sender's probe timeout
    allows for it); ``echo``: the copy number of the REQSLOTS answered at once (0: a probe,
    or a grant that waited for buffer space: no round-trip sample)."""
    return SLOTS_S.pack(SLOTS, s, r, n, ack_delay_us, echo)


def encode_token(s: int, r: int, payload: bytes, fragment: tuple[int, int, int] | None = None,
                 retransmit: bool = False) -> bytes:
    """TOKEN: ``payload`` bound to slot ``s`` of receive record ``r``.

    ``fragment`` is ``(index, count, total)`` when the payload is one piece of a larger message;
    ``retransmit`` marks a copy sent again after the first was taken for lost.
    """
    flags = FLAG_RETRANSMIT if retransmit else 0
    if fragment is None:
        return TOKEN_S.pack(TOKEN, flags, s, r, len(payload)) + payload
    return (TOKEN_S.pack(TOKEN, flags | FLAG_FRAGMENT, s, r, len(payload))
            + FRAG_S.pack(*fragment) + payload)


def as_retransmission(frame: bytes) -> bytes:
    """An encoded TOKEN frame with its RETRANSMIT flag set."""
    flags = frame[1]
    if flags & FLAG_RETRANSMIT:
        return frame
    return frame[:1] + bytes((flags | FLAG_RETRANSMIT,)) + frame[2:]


def encode_ack(r: int, ranges: Sequence[tuple[int, int]],
               copies: Sequence[tuple[int, int]] | None = None) -> bytes:
    """ACK: the slots in ``ranges`` (``(first, count)`` pairs) of record ``r`` are consumed.
    ``copies`` (ranges too), when given, says which copies arrived: on those slots a copy sent
    again (RETRANSMIT), on the other slots of ``ranges`` only the first; None: not known."""
    if copies is None:
        parts = [ACK_S.pack(ACK, 0, r, len(ranges))]
    else:
        parts = [ACK_S.pack(ACK, ACK_ARRIVALS, r, len(ranges)), COUNT_S.pack(len(copies))]
    parts.extend(RANGE_S.pack(first, count) for first, count in ranges)
    if copies:
        parts.extend(RANGE_S.pack(first, count) for first, count in copies)
    return b"".join(parts)


def encode_void(r: int) -> bytes:
    """VOID: receive record ``r`` belonged to an earlier incarnation of this node; it is gone,
    and nothing bound to it is delivered or acknowledged any more."""
    return VOID_S.pack(VOID, r)


def encode_revoke(r: int) -> bytes:
    """REVOKE: receive record ``r`` (of a closing node) grants nothing more; the sender drops
    its envelopes of ``r`` and answers with REVOKED."""
    return REVOKE_S.pack(REVOKE, r)


def encode_revoked(r: int, held: int) -> bytes:
    """REVOKED: the answer to REVOKE ``r``: the sender holds ``held`` unacknowledged tokens bound
    to ``r`` (``0``: none, and it never will again; the receiver may forget ``r``)."""
    return REVOKED_S.pack(REVOKED, r, held)


def ack_size(nranges: int, ncopies: int | None = None) -> int:
    """Encoded size of an ACK frame with ``nranges`` ranges (and ``ncopies`` copy ranges)."""
    if ncopies is None:
        return ACK_S.size + RANGE_S.size * nranges
    return ACK_S.size + COUNT_S.size + RANGE_S.size * (nranges + ncopies)


def to_ranges(slots: Iterable[int]) -> list[tuple[int, int]]:
    """Range-encode slot ids: sorted, duplicates merged, as ``(first, count)`` pairs."""
    out: list[tuple[int, int]] = []
    first = prev = -2
    for s in sorted(slots):
        if s == prev + 1:
            prev = s
        elif s != prev:
            if first >= 0:
                out.append((first, prev - first + 1))
            first = prev = s
    if first >= 0:
        out.append((first, prev - first + 1))
    return out


def decode_header(data: bytes | memoryview) -> tuple[bytes, bytes, int]:
    """Return ``(src id bytes, dst id bytes, offset of the first frame)``."""
    n = len(data)
    if n < 4:
        raise WireError("truncated", "shorter than the smallest header")
    if data[0] != VERSION:
        raise WireError("malformed", f"unknown version {data[0]}")
    if data[1] != PLAIN:
        raise WireError("malformed", f"datagram type {data[1]} is not an Exon datagram")
    ls = data[2]
    end_src = 3 + ls
    if n < end_src + 1:
        raise WireError("truncated", "source id cut short")
    ld = data[end_src]
    end_dst = end_src + 1 + ld
    if n < end_dst:
        raise WireError("truncated", "destination id cut short")
    if ls == 0 or ld == 0:
        raise WireError("malformed", "empty node id")
    return bytes(data[3:end_src]), bytes(data[end_src + 1:end_dst]), end_dst


def decode_frames(data: bytes | memoryview, offset: int, max_message_size: int
                  ) -> tuple[list[Frame], WireError | None]:
    """Decode the frames from ``offset`` on.

    Returns the frames decoded before any error, and the error (or None): a datagram whose
    tail is damaged still yields its intact leading frames, each of which stands alone.
    """
    frames: list[Frame] = []
    # Bytes, and typed fields: the compiled build then indexes, slices and compares natively.
    buf = data if isinstance(data, bytes) else bytes(data)
    n = len(buf)
    if offset >= n:
        return frames, WireError("malformed", "no frame")
    flags: int
    s: int
    r: int
    length: int
    index: int
    count: int
    total: int
    k: int
    try:
        while offset < n:
            kind = buf[offset]
            if kind == TOKEN:
                if n - offset >= _TOKEN_FRAG_SIZE and buf[offset + 1] & FLAG_FRAGMENT:
                    _, flags, s, r, length, index, count, total = _TOKEN_FRAG_UNPACK(
                        buf, offset)
                    offset += _TOKEN_FRAG_SIZE
                else:
                    _, flags, s, r, length = _TOKEN_UNPACK(buf, offset)
                    offset += _TOKEN_SIZE
                    if flags & FLAG_FRAGMENT and not flags & ~TOKEN_FLAGS:
                        raise WireError("truncated", "fragment fields cut short")
                    index, count, total = 0, 1, length
                if flags & ~TOKEN_FLAGS:
                    raise WireError("malformed", f"unknown token flags {flags:#x}")
                if flags & FLAG_FRAGMENT and not (
                        index < count and 2 <= count <= total <= max_message_size
                        and length <= total):
                    raise WireError("malformed", "inconsistent fragment fields")
                end = offset + length
                if end > n:
                    raise WireError("truncated", "token payload cut short")
                frames.append((TOKEN, s, r, buf[offset:end], index, count, total, flags))
                offset = end
            elif kind == ACK:
                _, flags, r, k = ACK_S.unpack_from(buf, offset)
                offset += ACK_S.size
                if k == 0:
                    raise WireError("malformed", "ack without ranges")
                if flags & ~ACK_ARRIVALS:
                    raise WireError("malformed", f"unknown ack flags {flags:#x}")
                c = -1
                if flags:
                    (c,) = COUNT_S.unpack_from(buf, offset)
                    offset += COUNT_S.size
                    k += c
                if offset + k * RANGE_S.size > n:
                    raise WireError("truncated", "ack ranges cut short")
                ranges = tuple(RANGE_S.iter_unpack(buf[offset:offset + k * RANGE_S.size]))
                offset += k * RANGE_S.size
                for first, count in ranges:
                    if count == 0 or first + count > U64_MAX:
                        raise WireError("malformed", "empty or overflowing ack range")
                if c < 0:
                    frames.append((ACK, r, ranges, None))
                else:
                    frames.append((ACK, r, ranges[:k - c], ranges[k - c:]))
            elif kind == REQSLOTS:
                _, s, count, low, copy = REQSLOTS_S.unpack_from(buf, offset)
                offset += REQSLOTS_S.size
                if s + count > U64_MAX:
                    raise WireError("malformed", "slot range overflows")
                frames.append((REQSLOTS, s, count, low, copy))
            elif kind == SLOTS:
                _, s, r, count, ack_delay_us, echo = SLOTS_S.unpack_from(buf, offset)
                offset += SLOTS_S.size
                if s + count > U64_MAX:
                    raise WireError("malformed", "slot range overflows")
                frames.append((SLOTS, s, r, count, ack_delay_us, echo))
            elif kind in (VOID, REVOKE):
                _, r = VOID_S.unpack_from(buf, offset)
                offset += VOID_S.size
                frames.append((kind, r))
            elif kind == REVOKED:
                _, r, held = REVOKED_S.unpack_from(buf, offset)
                offset += REVOKED_S.size
                frames.append((REVOKED, r, held))
            else:
                raise WireError("malformed", f"unknown frame type {kind:#x}")
    except struct.error:
        return frames, WireError("truncated", "frame cut short")
    except WireError as exc:
        return frames, exc
    return frames, None


def decode_datagram(data: bytes | memoryview, max_message_size: int = 1 << 32
                    ) -> tuple[str, str, list[Frame]]:
    """Decode a whole datagram strictly (any damage raises :class:`WireError`)."""
    src, dst, offset = decode_header(data)
    try:
        src_id, dst_id = src.decode("utf-8"), dst.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise WireError("malformed", "node id is not UTF-8") from exc
    frames, error = decode_frames(data, offset, max_message_size)
    if error is not None:
        raise error
    return src_id, dst_id, frames
