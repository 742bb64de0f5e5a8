"""The middleware message format (SPEC 3, seed 000), byte layout in ``docs/core-messages.md``.

Fixed header: version (u16), protocol (u8), type (u8), remaining length (u32). The socket
protocol (0x01) adds an extended header: source tag, destination tag (u8 length + UTF-8 each),
the source link incarnation and the destination link incarnation (u64 each; 0 = not known yet).
Decoding raises :class:`~a3m.errors.ProtocolViolation` and nothing else.
"""

from __future__ import annotations

import struct
import sys
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Final

from a3m._dataplane import native as _native
from a3m.core.cookies import decode_taken
from a3m.errors import ProtocolViolation

VERSION: Final = 1
PROTO_SOCKET: Final = 0x01

ERROR: Final = 0x01
DATA: Final = 0x02
LINK: Final = 0x03
LINKACK: Final = 0x04
UNLINK: Final = 0x05
FLOW: Final = 0x06
#: Keepalive on a quiet established link (no body): a peer that no longer has the link answers
#: ERROR "socket not linked", so a link whose peer node restarted is found out.
PING: Final = 0x07
#: Several DATA messages in one: the sequence numbers ``seq .. seq + count - 1`` and ``count``
#: credits, in that order (a peer that says ``batch`` in its LINK metadata takes them).
BATCH: Final = 0x08
#: What the application took of the messages sent with a cookie (body: a3m.core.cookies):
#: from the receiving side of a link to the sending side, also after the link ended.
TAKEN: Final = 0x09
#: Types from 0x40 up belong to socket patterns (e.g. SUBSCRIBE); they are sequenced with DATA
#: but do not use credits (a small separate allowance bounds them).
PATTERN_MIN: Final = 0x40
#: The types numbered in a link's sequence (DATA, BATCH and the patterns' control types).
SEQUENCED: Final = frozenset({DATA, BATCH, *range(PATTERN_MIN, 256)})
TYPE_NAMES: Final = {ERROR: "ERROR", DATA: "DATA", LINK: "LINK", LINKACK: "LINKACK",
                     UNLINK: "UNLINK", FLOW: "FLOW", PING: "PING",
              BATCH: "BATCH", TAKEN: "TAKEN"}

FIXED = struct.Struct(">HBBI")
INCS = struct.Struct(">QQ")
SEQ = struct.Struct(">Q")
_FIXED_PACK = FIXED.pack
_SEQ_PACK = SEQ.pack
ACK_HEAD = struct.Struct(">BB")
FLOW_BODY = struct.Struct(">IQ")
ERROR_HEAD = struct.Struct(">BB")
U16 = struct.Struct(">H")
I64 = struct.Struct(">q")
U32 = struct.Struct(">I")
_U32_PACK = U32.pack
_U32_ARRAY = array("I").itemsize == 4  # (the lengths of a BATCH go through an array of them)
_SWAP = sys.byteorder == "little"

# Error codes (seed 000), carried by ERROR messages.
ERR_SOCKET_NOT_FOUND: Final = 0x01
ERR_SOCKET_NOT_LINKED: Final = 0x02
ERR_PROTOCOL: Final = 0x03  # the peer broke the protocol (e.g. spent credits it did not have)

MetaValue = int | str | bytes | bool
Metadata = dict[str, MetaValue]
_META_INT, _META_STR, _META_BYTES, _META_BOOL = 0, 1, 2, 3


@dataclass(slots=True)
class Message:
    """A decoded socket-protocol message. ``body`` fields depend on ``type``."""

    type: int
    src_tag: str
    dst_tag: str
    src_inc: int = 0
    dst_inc: int = 0
    seq: int = 0  # DATA and pattern types
    payload: bytes = b""  # DATA and pattern types; ERROR text (UTF-8)
    code: int = 0  # LINKACK decision, ERROR code
    meta: Metadata | None = None  # LINK (always), LINKACK (when not sent before)
    goal: int = 0  # UNLINK: the last sequence number sent on the link
    flow_seq: int = 0  # FLOW: orders FLOW messages (Exon does not)
    edge: int = 0  # FLOW: the peer may send DATA while its DATA count stays below this
    about: int = 0  # ERROR: the type of the message that caused it
    extra: dict[str, object] = field(default_factory=dict, compare=False)  # derived, cached


def _tag(tag: str) -> bytes:
    raw = tag.encode("utf-8")
    if not 1 <= len(raw) <= 255:
        raise ValueError(f"socket tag must be 1..255 UTF-8 bytes: {tag!r}")
    return bytes((len(raw),)) + raw


def encode_meta(meta: Metadata) -> bytes:
    """Typed key/values: count u16, then key (u8 length + UTF-8), type u8, value."""
    parts = [U16.pack(len(meta))]
    for key, value in meta.items():
        parts.append(_tag(key))
        if isinstance(value, bool):
            parts.append(bytes((_META_BOOL, int(value))))
        elif isinstance(value, int):
            parts.append(bytes((_META_INT,)) + I64.pack(value))
        elif isinstance(value, str):
            raw = value.encode("utf-8")
            parts.append(bytes((_META_STR,)) + U16.pack(len(raw)) + raw)
        elif isinstance(value, bytes):
            parts.append(bytes((_META_BYTES,)) + U16.pack(len(value)) + value)
        else:
            raise TypeError(f"metadata value for {key!r} must be int, str, bytes or bool")
    return b"".join(parts)


def encode(msg: Message) -> bytes:
    """Encode a socket-protocol message."""
    t = msg.type
    if t in SEQUENCED:
        body = SEQ.pack(msg.seq) + msg.payload  # BATCH: payload from encode_batch_body
    elif t == LINK:
        body = encode_meta(msg.meta or {})
    elif t == LINKACK:
        has_meta = msg.meta is not None
        body = ACK_HEAD.pack(msg.code, int(has_meta))
        if msg.meta is not None:
            body += encode_meta(msg.meta)
    elif t == UNLINK:
        body = SEQ.pack(msg.goal)
    elif t == FLOW:
        body = FLOW_BODY.pack(msg.flow_seq, msg.edge)
    elif t == ERROR:
        body = ERROR_HEAD.pack(msg.code, msg.about) + msg.payload
    elif t == PING:
        body = b""
    elif t == TAKEN:
        body = msg.payload  # encode_taken
    else:
        raise ValueError(f"unknown message type {t:#x}")
    ext = _tag(msg.src_tag) + _tag(msg.dst_tag) + INCS.pack(msg.src_inc, msg.dst_inc)
    rest = ext + body
    return FIXED.pack(VERSION, PROTO_SOCKET, t, len(rest)) + rest


def encode_control_with_head(head: bytes, mtype: int, body: bytes) -> bytes:
    """A message of a link's that has no sequence number (TAKEN) from its link's
    :func:`data_head` (its extended header is the same)."""
    return b"".join((_FIXED_PACK(VERSION, PROTO_SOCKET, mtype, len(head) + len(body)), head,
                     body))


def encode_data(src_tag: bytes, dst_tag: bytes, src_inc: int, dst_inc: int, seq: int,
                payload: bytes, mtype: int = DATA) -> bytes:
    """Fast path for DATA: ``src_tag``/``dst_tag`` already encoded by :func:`encoded_tag`."""
    return encode_with_head(data_head(src_tag, dst_tag, src_inc, dst_inc), seq, payload, mtype)


def data_head(src_tag: bytes, dst_tag: bytes, src_inc: int, dst_inc: int) -> bytes:
    """The extended header of a link's sequenced messages (the same for all of them)."""
    return src_tag + dst_tag + INCS.pack(src_inc, dst_inc)


def encode_with_head(head: bytes, seq: int, payload: bytes, mtype: int = DATA) -> bytes:
    """A sequenced message from its link's :func:`data_head` (the per-message hot path)."""
    return b"".join((_FIXED_PACK(VERSION, PROTO_SOCKET, mtype, len(head) + 8 + len(payload)),
                     head, _SEQ_PACK(seq), payload))


def encode_batch_with_head(head: bytes, seq: int, payloads: list[bytes],
                           lens: array[int] | None = None, total: int = -1) -> bytes:
    """A BATCH of ``payloads`` (sequence numbers ``seq`` on) from its link's :func:`data_head`:
    after the sequence number, count u32, ``count`` lengths u32, the payloads back to back.
    ``lens``: their :func:`batch_lengths` when the caller has them (consumed); ``total``:
    their sum when the caller has it."""
    parts, total = _batch_parts(payloads, lens, total)
    parts[0] = _FIXED_PACK(VERSION, PROTO_SOCKET, BATCH, len(head) + 12 + 4 * len(payloads)
                           + total)
    parts[1] = head
    parts[2] = _SEQ_PACK(seq)
    return b"".join(parts)


def encode_batch_body(payloads: list[bytes]) -> bytes:
    """A BATCH body after its sequence number (as :func:`encode_batch_with_head` lays it)."""
    return b"".join(_batch_parts(payloads)[0])


def batch_lengths(payloads: list[bytes]) -> array[int] | None:
    """The payloads' lengths, as the array of u32s a BATCH body is made from (None where this
    platform has no 4-byte array type)."""
    return array("I", map(len, payloads)) if _U32_ARRAY else None


def _batch_parts(payloads: list[bytes], lens: array[int] | None = None, total: int = -1
                 ) -> tuple[list[bytes], int]:
    """The pieces of a BATCH body after three empty slots (for a header): count, lengths
    (big-endian u32s), payloads; and the payloads' total size (``total`` when given, >= 0).
    ``lens``: their :func:`batch_lengths`, byte-swapped in place here."""
    n = len(payloads)
    if lens is None and _U32_ARRAY:
        lens = array("I", map(len, payloads))
    if lens is not None:
        if total < 0:
            total = sum(lens)
        if _SWAP:
            lens.byteswap()
        parts = [b"", b"", b"", _U32_PACK(n), lens.tobytes()]
    else:
        sizes = list(map(len, payloads))
        total = sum(sizes)
        parts = [b"", b"", b"", _U32_PACK(n), struct.pack(f">{n}I", *sizes)]
    parts += payloads
    return parts, total


def batch_runs(head: bytes, seq: int, payloads: list[bytes], limit: int) -> list[bytes]:
    """The messages that carry ``payloads`` (two or more) numbered from ``seq`` on a link of
    ``head`` (:func:`data_head`): BATCHes of the longest runs whose payload bytes, 4 more a
    message, stay within ``limit``; a run of one (a message above the limit) as DATA. ``seq``
    may carry the cookie bit (every run then does)."""
    n = len(payloads)
    lens = batch_lengths(payloads)  # (the BATCH body is made from them too)
    sizes = lens if lens is not None else list(map(len, payloads))
    ends = list(accumulate(sizes, initial=0))  # ends[i]: bytes of the first i (in C)
    if ends[n] + 4 * n <= limit:
        return [encode_batch_with_head(head, seq, payloads, lens, ends[n])]
    out: list[bytes] = []
    start = 0
    while start < n:
        # The longest run from ``start`` within the limit at 4 more bytes a message (at
        # least one message): a binary search over the running totals.
        lo, hi, base = start + 1, n, ends[start] + 4 * start
        while lo < hi:
            mid = (lo + hi + 1) >> 1
            if ends[mid] + 4 * mid - base <= limit:
                lo = mid
            else:
                hi = mid - 1
        if lo == start + 1:
            out.append(encode_with_head(head, seq + start, payloads[start]))
        else:
            out.append(encode_batch_with_head(
                head, seq + start, payloads[start:lo],
                None if lens is None else lens[start:lo], ends[lo] - ends[start]))
        start = lo
    return out


def split_batch(body: bytes) -> list[bytes]:
    """The payloads of a BATCH body (after its sequence number); raises
    :class:`ProtocolViolation` unless the lengths account for every byte exactly."""
    size = len(body)
    if size < 4:
        raise _bad("BATCH cut short")
    # (typed: the compiled build adds the offsets as machine integers and slices the bytes
    # directly, without a slice object per message)
    n: int = U32.unpack_from(body, 0)[0]
    off: int = 4 + 4 * n
    if n == 0 or off > size:
        raise _bad("BATCH count does not fit")
    lens: tuple[int, ...] = struct.unpack_from(f">{n}I", body, 4)
    if off + sum(lens) != size:
        raise _bad("BATCH lengths do not match its size")
    out: list[bytes] = []
    for length in lens:
        end = off + length
        out.append(body[off:end])
        off = end
    return out


#: What the core runs: ``a3m._native``'s twins where ``a3m.NATIVE`` (the same messages and
#: payloads from the same inputs, the same refusals: tests/native/test_native_batch.py), else
#: the two above, the specification. One call per BATCH either way.
BATCH_RUNS: Final[Callable[[bytes, int, list[bytes], int], list[bytes]]] = (
    batch_runs if _native is None else _native.batch_runs)
SPLIT_BATCH: Final[Callable[[bytes], list[bytes]]] = (
    split_batch if _native is None else _native.split_batch)


def batch_payload_bytes(body_size: int, count: int) -> int:
    """The payloads' total size in a BATCH body of ``body_size`` bytes that
    :func:`split_batch` split into ``count`` payloads (it checked that they fill it)."""
    return body_size - 4 - 4 * count


#: Bytes a DATA message adds to its payload at most: the fixed header, two tags of the longest
#: length, incarnations and seq, plus room for a pattern's framing (a request id, say).
DATA_OVERHEAD_MAX = FIXED.size + 2 * 256 + INCS.size + SEQ.size + 64


def data_size(src_tag: bytes, dst_tag: bytes, payload: bytes) -> int:
    """The encoded size of :func:`encode_data` for these tags and payload."""
    return FIXED.size + len(src_tag) + len(dst_tag) + INCS.size + SEQ.size + len(payload)


def encoded_tag(tag: str) -> bytes:
    """A tag as it appears in the extended header (length byte + UTF-8)."""
    return _tag(tag)


_TAGS: dict[bytes, str] = {}
_DATA_TAIL = struct.Struct(">QQQ")  # src_inc, dst_inc, seq


def decode_sequenced(data: bytes) -> tuple[int, str, str, int, int, int, bytes]:
    """Fast path for DATA, BATCH and pattern messages: ``(type, src_tag, dst_tag, src_inc,
    dst_inc, seq, payload)`` (BATCH: its body, for :func:`split_batch`); raises
    :class:`ProtocolViolation` like :func:`decode`."""
    try:
        version, proto, t, remaining = FIXED.unpack_from(data, 0)
        if (version != VERSION or proto != PROTO_SOCKET or remaining != len(data) - 8
                or t not in SEQUENCED):
            raise _bad("not a well-formed sequenced message")
        ls = data[8]
        end_src = 9 + ls
        ld = data[end_src]
        end_dst = end_src + 1 + ld
        if not ls or not ld:
            raise _bad("empty tag")
        raw_src, raw_dst = data[9:end_src], data[end_src + 1:end_dst]
        src = _TAGS.get(raw_src)
        if src is None:
            src = _cache_tag(raw_src)
        dst = _TAGS.get(raw_dst)
        if dst is None:
            dst = _cache_tag(raw_dst)
        src_inc, dst_inc, seq = _DATA_TAIL.unpack_from(data, end_dst)
        if seq == 0:
            raise _bad("sequence numbers start at 1")
        return t, src, dst, src_inc, dst_inc, seq, data[end_dst + 24:]
    except (IndexError, struct.error, UnicodeDecodeError) as exc:
        raise _bad("cut short or not UTF-8") from exc


#: What the core runs (``NodeCore._dispatch``): ``a3m._native``'s twin where ``a3m.NATIVE``
#: (the same fields, or the same refusal, from the same bytes:
#: tests/native/test_native_sequenced.py), else the function above, the specification.
DECODE_SEQUENCED: Final[Callable[[bytes], tuple[int, str, str, int, int, int, bytes]]] = (
    decode_sequenced if _native is None else _native.decode_sequenced)


def _cache_tag(raw: bytes) -> str:
    tag = raw.decode("utf-8")  # (strict: what decodes encodes back to ``raw``)
    if len(_TAGS) > 4096:
        _TAGS.clear()
    _TAGS[raw] = tag
    return tag


def _bad(detail: str) -> ProtocolViolation:
    return ProtocolViolation(f"bad middleware message: {detail}")


def decode_meta(data: bytes, offset: int) -> tuple[Metadata, int]:
    try:
        (count,) = U16.unpack_from(data, offset)
        offset += 2
        meta: Metadata = {}
        for _ in range(count):
            klen = data[offset]
            key = data[offset + 1:offset + 1 + klen].decode("utf-8")
            offset += 1 + klen
            if not key or len(key.encode("utf-8")) != klen:
                raise _bad("metadata key cut short")
            kind = data[offset]
            offset += 1
            if kind == _META_BOOL:
                meta[key] = bool(data[offset])
                offset += 1
            elif kind == _META_INT:
                (meta[key],) = I64.unpack_from(data, offset)
                offset += 8
            elif kind in (_META_STR, _META_BYTES):
                (n,) = U16.unpack_from(data, offset)
                raw = data[offset + 2:offset + 2 + n]
                if len(raw) != n:
                    raise _bad("metadata value cut short")
                meta[key] = raw.decode("utf-8") if kind == _META_STR else bytes(raw)
                offset += 2 + n
            else:
                raise _bad(f"unknown metadata type {kind}")
        return meta, offset
    except (IndexError, struct.error, UnicodeDecodeError) as exc:
        raise _bad("metadata cut short or not UTF-8") from exc


def decode(data: bytes) -> Message:
    """Decode one middleware message; raises :class:`ProtocolViolation` on any damage."""
    try:
        version, proto, t, remaining = FIXED.unpack_from(data, 0)
    except struct.error as exc:
        raise _bad("shorter than the fixed header") from exc
    if version != VERSION:
        raise _bad(f"unknown version {version}")
    if proto != PROTO_SOCKET:
        raise _bad(f"unknown protocol {proto:#x}")
    if remaining != len(data) - FIXED.size:
        raise _bad("remaining length does not match")
    try:
        off = FIXED.size
        ls = data[off]
        src = data[off + 1:off + 1 + ls].decode("utf-8")
        off += 1 + ls
        ld = data[off]
        dst = data[off + 1:off + 1 + ld].decode("utf-8")
        off += 1 + ld
        if not ls or not ld or len(src.encode()) != ls or len(dst.encode()) != ld:
            raise _bad("empty or cut tag")
        src_inc, dst_inc = INCS.unpack_from(data, off)
        off += INCS.size
        msg = Message(t, src, dst, src_inc, dst_inc)
        if t in SEQUENCED:
            (msg.seq,) = SEQ.unpack_from(data, off)
            msg.payload = data[off + 8:]
            if msg.seq == 0:
                raise _bad("sequence numbers start at 1")
        elif t == LINK:
            msg.meta, off = decode_meta(data, off)
            if off != len(data):
                raise _bad("trailing bytes after LINK metadata")
        elif t == LINKACK:
            msg.code, has_meta = ACK_HEAD.unpack_from(data, off)
            off += ACK_HEAD.size
            if has_meta > 1:
                raise _bad("bad LINKACK flags")
            if has_meta:
                msg.meta, off = decode_meta(data, off)
            if off != len(data):
                raise _bad("trailing bytes after LINKACK")
        elif t == UNLINK:
            (msg.goal,) = SEQ.unpack_from(data, off)
            if off + 8 != len(data):
                raise _bad("bad UNLINK length")
        elif t == FLOW:
            msg.flow_seq, msg.edge = FLOW_BODY.unpack_from(data, off)
            if off + FLOW_BODY.size != len(data):
                raise _bad("bad FLOW length")
        elif t == ERROR:
            msg.code, msg.about = ERROR_HEAD.unpack_from(data, off)
            msg.payload = data[off + 2:]
            msg.payload.decode("utf-8")
        elif t == PING:
            if off != len(data):
                raise _bad("bad PING length")
        elif t == TAKEN:
            msg.payload = data[off:]
            msg.extra["taken"] = decode_taken(msg.payload)  # (raises on damage)
        else:
            raise _bad(f"unknown message type {t:#x}")
        return msg
    except (IndexError, struct.error, UnicodeDecodeError) as exc:
        raise _bad("cut short or not UTF-8") from exc
