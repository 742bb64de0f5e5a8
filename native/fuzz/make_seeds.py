"""Seed the fuzz corpora with valid datagrams (and a few damaged ones), made by the Python
twins, the specification: ``.venv/bin/python native/fuzz/make_seeds.py DIR`` writes
``DIR/<target>/<sha1>`` (libFuzzer's naming) for decode_frames, decode_header, aead_open,
split_batch, decode_sequenced and exchange_offer.
The kept corpora (tests/fuzz/corpus/) were seeded so, then fuzzed and minimized
(docs/testing.md, "The native data plane").
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

from a3m.core import message
from a3m.core.message import encode_batch_body
from a3m.exon import wire
from a3m.exon.secure import packets
from a3m.exon.secure.aead import PyCipher

#: The aead_open target's key (native/fuzz/checks.rs, KEY).
KEY = bytes([0x42]) * 32
U64 = (1 << 64) - 1
U32 = (1 << 32) - 1


def datagrams() -> list[bytes]:
    h = wire.encode_header("alpha", "beta")
    frames = [
        wire.encode_reqslots(1000, 64, 990, 2),
        wire.encode_slots(1000, 7, 64, 2000, 2),
        wire.encode_token(1000, 7, b"hi"),
        wire.encode_token(1000, 7, b"hi", retransmit=True),
        wire.encode_token(1001, 7, b"abc", (1, 3, 9)),
        wire.encode_ack(7, [(1000, 3), (1005, 1)]),
        wire.encode_ack(7, [(1000, 2)], []),
        wire.encode_ack(7, [(1000, 3), (1005, 1)], [(1001, 1)]),
        wire.encode_void(7),
        wire.encode_revoke(9),
        wire.encode_revoked(7, 3),
        wire.encode_reqslots(U64 - U32, U32, U64, 255),
        wire.encode_slots(U64 - 1, U64, 1, U32, 255),
        wire.encode_token(U64, U64, b"", (U32 - 1, U32, U32)),
    ]
    out = [h + f for f in frames]
    out.append(h + b"".join(frames))
    out.append(wire.encode_header("n\u00e9", "m" * 255) + frames[2] + frames[7])
    out.append(h + wire.encode_token(3, 4, bytes(range(256)) * 4))
    # damaged: the header's and a frame's errors (the rest the fuzzer finds)
    out += [b"\x05\x00\x01a", b"\x04\x00\x01a\x01b", b"\x05\x05\x01a\x01b", b"\x05\x00\x00\x01b",
            h + b"\x09", h + frames[5][:-1], h + frames[4][:25], h + b"\x04\x01" + bytes(10)]
    return out


def sealed() -> list[bytes]:
    c = PyCipher(KEY)
    plains = [b"", b"\x00", bytes(8), *datagrams()[:6], bytes(range(256)) * 5]
    out = [c.seal(packets.DATA, 9, n, p) for n, p in enumerate(plains)]
    out.append(c.seal(packets.CHALLENGE, U32, U64, bytes(8)))
    out.append(c.seal(packets.RESPONSE, 0, 1 << 63, b"12345678"))
    out.append(out[3][:-1])  # cut in the tag
    out.append(out[3][:13])  # shorter than a header
    return out


def batch_bodies() -> list[bytes]:
    good = [encode_batch_body(ps) for ps in (
        [b"a", b"bc"], [b"", b""], [b"x" * 64] * 20, [bytes(range(256)), b"", b"z"])]
    return good + [b"", b"\x00\x00\x00\x00", b"\xff\xff\xff\xff", good[0][:-1],
                   good[0] + b"!", b"\x00\x00\x00\x02\xff\xff\xff\xff\x00\x00\x00\x0d"]


def sequenced() -> list[bytes]:
    def msg(src: bytes, dst: bytes, seq: int, payload: bytes, mtype: int = message.DATA) -> bytes:
        head = message.data_head(src, dst, 7, U64)
        return message.encode_with_head(head, seq, payload, mtype)

    good = [msg(b"\x03req", b"\x03rep", 1, b"\x00\x00\x00\x01hello"),
            msg(b"\x02n\xc3\xa9", b"\xff" + b"m" * 255, U64, b"", message.BATCH),
            msg(b"\x01a", b"\x01b", 1 << 63 | 9, bytes(range(256)), message.PATTERN_MIN)]
    return good + [b"", good[0][:8], good[0][:14], good[0][:-6], msg(b"\x03req", b"\x03rep", 0, b""),
                   good[0][:9] + b"\xff" + good[0][10:], good[0][:3] + b"\x03" + good[0][4:]]


def exchange() -> list[bytes]:
    """Messages for the lent sockets of ``checks::exchange_table`` (a REP ``rep`` linked to
    ``req`` of nodes n and m, a REQ ``req`` with request 5 outstanding to ``rep``): the next
    request, the reply, FLOWs both ways, and damaged ones."""
    def data(src: bytes, dst: bytes, seq: int, payload: bytes, dst_inc: int = 7) -> bytes:
        return message.encode_with_head(message.data_head(src, dst, 9, dst_inc), seq, payload)

    def flow(src: str, dst: str, flow_seq: int, edge: int, dst_inc: int = 7) -> bytes:
        return message.encode(message.Message(message.FLOW, src, dst, 9, dst_inc,
                                              flow_seq=flow_seq, edge=edge))

    good = [data(b"\x03req", b"\x03rep", 1, b"\x00\x00\x00\x01ask"),
            data(b"\x03rep", b"\x03req", 1, b"\x00\x00\x00\x05answer"),
            flow("req", "rep", 1, 12), flow("rep", "req", 3, U64 >> 1)]
    return good + [data(b"\x03req", b"\x03rep", 2, b"\x00\x00\x00\x01ask"),
                   data(b"\x03rep", b"\x03req", 1, b"\x00\x00\x00\x04no"),
                   data(b"\x03req", b"\x03rep", 1 | 1 << 63, b"\x00\x00\x00\x01c"),
                   data(b"\x03req", b"\x03rep", 1, b"\x00\x01"),
                   flow("req", "rep", 1, 12, dst_inc=8), flow("req", "rep", 1, U64),
                   good[2][:-1], good[2] + b"\x00", good[0][:20]]


def write(root: Path, target: str, items: list[bytes]) -> None:
    d = root / target
    d.mkdir(parents=True, exist_ok=True)
    for item in items:
        (d / hashlib.sha1(item).hexdigest()).write_bytes(item)


if __name__ == "__main__":
    root = Path(sys.argv[1])
    write(root, "decode_frames", datagrams())
    write(root, "decode_header", datagrams())
    write(root, "aead_open", sealed())
    write(root, "split_batch", batch_bodies())
    write(root, "decode_sequenced", sequenced())
    write(root, "exchange_offer", exchange())
