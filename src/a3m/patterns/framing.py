"""Small payload framings shared by patterns: a request/survey id, a topic."""

from __future__ import annotations

import struct

from mypy_extensions import mypyc_attr

from a3m.core.link import Link
from a3m.core.message import DATA_OVERHEAD_MAX
from a3m.core.socket_core import Received, SocketCore

ID = struct.Struct(">I")
TOPIC_LEN = struct.Struct(">H")


def with_id(ident: int, body: bytes) -> bytes:
    return ID.pack(ident & 0xFFFFFFFF) + body


def split_id(payload: bytes) -> tuple[int, bytes] | None:
    if len(payload) < ID.size:
        return None
    return ID.unpack_from(payload)[0], payload[ID.size:]


def with_topic(topic: bytes, body: bytes) -> bytes:
    if len(topic) > 0xFFFF:
        raise ValueError("topic longer than 65535 bytes")
    return TOPIC_LEN.pack(len(topic)) + topic + body


def split_topic(payload: bytes) -> tuple[bytes, bytes] | None:
    if len(payload) < TOPIC_LEN.size:
        return None
    (n,) = TOPIC_LEN.unpack_from(payload)
    if len(payload) < 2 + n:
        return None
    return payload[2:2 + n], payload[2 + n:]


def encode_names(names: set[bytes]) -> bytes:
    """A set of names (topics, groups, tags) as length-prefixed strings, sorted."""
    return b"".join(with_topic(n, b"") for n in sorted(names))


def decode_names(raw: bytes) -> set[bytes]:
    """The inverse of :func:`encode_names` (a truncated tail is ignored)."""
    out: set[bytes] = set()
    while raw:
        got = split_topic(raw)
        if got is None:
            break
        name, raw = got
        out.add(name)
    return out


@mypyc_attr(allow_interpreted_subclasses=True)
class Unwrapping(SocketCore):
    """A receiving pattern whose payloads carry a framing to strip (SUB's topic, DISH's
    group): :meth:`unwrap` turns a payload into what the application gets, or None to skip
    it; queued and orphaned messages both go through it."""

    def unwrap(self, payload: bytes, source: tuple[str, str]) -> Received | None:
        raise NotImplementedError

    def choose_recv(self) -> Received | None:
        while True:
            got = self.next_from_links()
            if got is None:
                return None
            received = self.unwrap(got[1], got[0].peer)
            if received is not None:
                return received
            self.not_taken(got[0])  # skipped: not given to the application

    def orphan(self, received: Received) -> Received | None:
        return self.unwrap(received.payload, received.source)


def send_to_all(sock: SocketCore, links: list[Link], payload: bytes) -> bool:
    """Synchronised fan-out: send to every link in ``links`` or, if one of them has no credit,
    to none (the slowest peer sets the pace: under exactly-once nothing may be dropped)."""
    for lk in links:
        if not lk.can_send:
            return False
    if len(payload) > sock.node.max_message_size - DATA_OVERHEAD_MAX:
        for lk in links:  # all or none: a message too large for one link goes to none
            sock.check_size(lk, payload)
    for lk in links:
        sock.send_on(lk, payload)
    return True
