"""Cookies: the sending application learns what became of each message (seeds 000 and 003).

A send may carry a cookie, any object; it stays on the sending node. Only one bit travels: a
DATA or BATCH whose sequence number has :data:`CONFIRM` set asks the receiving side to say
when its application takes the message. The receiving link keeps the processing index of
each such message and, when the application takes messages from the link (the core's
:meth:`~a3m.core.socket_core.SocketCore.delivered_from`, which also returns credits) or a
pattern drops one (``dropped_from``), it reports their sequence numbers in a TAKEN message
(range-encoded, at the node's next output). When the link ends there, a final TAKEN lists
what will never be taken. The sending socket turns each report into one outcome per message:

- :data:`DELIVERED`: the peer socket's application took it (``recv`` returned it);
- :data:`NOT_DELIVERED`: it surely never will be (it never left, or the peer socket dropped
  it, closed or unlinked with it unread);
- :data:`UNKNOWN`: the link ended without a final word (the peer's node crashed, restarted or
  was given up) after the message may have been taken.

Byte layout: ``docs/core-messages.md`` (TAKEN); the rules: ``docs/patterns.md`` ("Cookies").
"""

from __future__ import annotations

import struct
from collections import deque
from typing import Final

from a3m.errors import ProtocolViolation
from a3m.ids import SocketId

DELIVERED: Final = "delivered"
UNKNOWN: Final = "unknown"
NOT_DELIVERED: Final = "not delivered"

#: Bit 63 of a DATA's (or a BATCH's first) sequence number: confirm when taken.
CONFIRM: Final = 1 << 63
SEQ_MASK: Final = CONFIRM - 1
#: A flagged message in a link's reorder buffer: its type plus this (internal, never sent).
FLAGGED: Final = 0x100

#: TAKEN body: flags u8, number u32 (of this TAKEN on the link, from 1; the final one's is
#: the count of TAKENs sent), ranges taken u16, ranges dropped u16, then the ranges.
TAKEN_HEAD = struct.Struct(">BIHH")
RANGE = struct.Struct(">QQ")
FINAL: Final = 0x01
#: Ranges in one TAKEN (both kinds); more go in another TAKEN.
MAX_RANGES: Final = 2048

_MISSING: Final = object()

PeerId = tuple[str, str]
Range = tuple[int, int]
#: A decoded TAKEN: (final, number, taken ranges, dropped ranges).
TakenReport = tuple[bool, int, list[Range], list[Range]]
_NOBODY: Final = SocketId("", "")


class Cookie:
    """What became of a message sent with ``cookie=``: ``value`` is that object, ``peer``
    the socket it went to (an empty SocketId if it never reached a link), ``outcome`` one of
    :data:`DELIVERED`, :data:`NOT_DELIVERED`, :data:`UNKNOWN` (``a3m.Cookie``)."""

    __slots__ = ("value", "peer", "outcome")

    def __init__(self, value: object, peer: SocketId, outcome: str) -> None:
        self.value = value
        self.peer = peer
        self.outcome = outcome

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Cookie) and self.outcome == other.outcome
                and self.peer == other.peer and self.value == other.value)

    def __hash__(self) -> int:
        return hash((self.peer, self.outcome))

    def __repr__(self) -> str:
        return f"Cookie(value={self.value!r}, peer={self.peer!r}, outcome={self.outcome!r})"


def to_ranges(seqs: list[int]) -> list[Range]:
    """Sequence numbers as inclusive ``(first, last)`` ranges, sorted and merged."""
    out: list[Range] = []
    for s in sorted(seqs):
        if out and s <= out[-1][1] + 1:
            if s > out[-1][1]:
                out[-1] = (out[-1][0], s)
        else:
            out.append((s, s))
    return out


def encode_taken(final: bool, number: int, taken: list[Range], dropped: list[Range]) -> bytes:
    parts = [TAKEN_HEAD.pack(FINAL if final else 0, number, len(taken), len(dropped))]
    parts += [RANGE.pack(a, b) for a, b in taken]
    parts += [RANGE.pack(a, b) for a, b in dropped]
    return b"".join(parts)


def decode_taken(body: bytes) -> TakenReport:
    """``(final, number, taken, dropped)``; raises :class:`ProtocolViolation` on damage."""
    try:
        flags, number, nt, nd = TAKEN_HEAD.unpack_from(body, 0)
    except struct.error as exc:
        raise ProtocolViolation("bad middleware message: TAKEN cut short") from exc
    if flags & ~FINAL or number == 0 or len(body) != TAKEN_HEAD.size + RANGE.size * (nt + nd):
        raise ProtocolViolation("bad middleware message: bad TAKEN")
    got = [RANGE.unpack_from(body, TAKEN_HEAD.size + RANGE.size * i) for i in range(nt + nd)]
    for a, b in got:
        if not 0 < a <= b <= SEQ_MASK:
            raise ProtocolViolation("bad middleware message: bad TAKEN range")
    return bool(flags & FINAL), number, got[:nt], got[nt:]


def taken_chunks(taken: list[int], dropped: list[int]) -> list[tuple[list[Range], list[Range]]]:
    """The reports as range lists, cut into TAKEN-sized chunks (at least one, maybe empty)."""
    t, d = to_ranges(taken), to_ranges(dropped)
    chunks = []
    while True:
        nt = min(len(t), MAX_RANGES)
        nd = min(len(d), MAX_RANGES - nt)
        chunks.append((t[:nt], d[:nd]))
        t, d = t[nt:], d[nd:]
        if not t and not d:
            return chunks


class Outstanding:
    """The cookies of one link (by the sender's incarnation of it) awaiting their outcome."""

    __slots__ = ("peer", "cookies", "seen", "final", "ended")

    def __init__(self, peer: PeerId) -> None:
        self.peer = SocketId(peer[0], peer[1])
        self.cookies: dict[int, object] = {}
        self.seen = 0  # TAKEN messages received
        self.final = 0  # the final TAKEN's number (0: not received)
        self.ended = False  # the link ended here gracefully: the final word is awaited


class CookieJar:
    """A socket's cookies: those awaiting an outcome, by link, and the outcomes not yet read.

    ``held`` counts both; a send with a cookie waits while it is at ``limit``."""

    __slots__ = ("out", "ready", "held", "limit", "unknown_given")

    def __init__(self, limit: int) -> None:
        self.out: dict[tuple[PeerId, int], Outstanding] = {}
        self.ready: deque[Cookie] = deque()
        self.held = 0
        self.limit = limit
        #: Outcomes given UNKNOWN so far (a node's events count those a restart left).
        self.unknown_given = 0

    @property
    def full(self) -> bool:
        return self.held >= self.limit

    def add(self, peer: PeerId, inc: int, seq: int, cookie: object) -> None:
        entry = self.out.get((peer, inc))
        if entry is None:
            entry = self.out[(peer, inc)] = Outstanding(peer)
        entry.cookies[seq] = cookie
        self.held += 1

    def add_run(self, peer: PeerId, inc: int, seq: int, cookies: list[object]) -> int:
        """Cookies of the messages numbered from ``seq`` (None: that one has none); returns
        how many were recorded."""
        entry = self.out.get((peer, inc))
        if entry is None:
            entry = self.out[(peer, inc)] = Outstanding(peer)
        got = entry.cookies
        n = 0
        for cookie in cookies:
            if cookie is not None:
                got[seq] = cookie
                n += 1
            seq += 1
        self.held += n
        return n

    def unsent(self, cookie: object) -> None:
        """A message given up before any link took it: NOT_DELIVERED, to no peer."""
        self.ready.append(Cookie(cookie, _NOBODY, NOT_DELIVERED))
        self.held += 1

    def outstanding(self, peer: PeerId, inc: int) -> bool:
        return (peer, inc) in self.out

    def awaiting(self, peer: PeerId, inc: int) -> bool:
        """Whether cookies of link ``(peer, inc)`` still wait for their outcome."""
        entry = self.out.get((peer, inc))
        return entry is not None and bool(entry.cookies)

    def take(self, max_items: int) -> list[Cookie]:
        ready = self.ready
        out: list[Cookie]
        if len(ready) <= max_items:
            out = list(ready)
            ready.clear()
            self.held -= len(out)
            return out
        out = []
        while ready and len(out) < max_items:
            out.append(ready.popleft())
        self.held -= len(out)
        return out

    def _settle(self, peer: PeerId, entry: Outstanding, seq: int, outcome: str) -> None:
        cookie = entry.cookies.pop(seq, _MISSING)
        if cookie is not _MISSING:
            self.ready.append(Cookie(cookie, entry.peer, outcome))
            if outcome == UNKNOWN:
                self.unknown_given += 1

    def _settle_ranges(self, peer: PeerId, entry: Outstanding, ranges: list[Range],
                       outcome: str) -> None:
        for a, b in ranges:
            if b - a >= len(entry.cookies):  # a wide range: walk the cookies instead
                for s in [s for s in entry.cookies if a <= s <= b]:
                    self._settle(peer, entry, s, outcome)
            else:
                for s in range(a, b + 1):
                    self._settle(peer, entry, s, outcome)

    def on_taken(self, peer: PeerId, inc: int, final: bool, number: int, taken: list[Range],
                 dropped: list[Range]) -> None:
        """A TAKEN from the peer's side of link ``(peer, inc)`` (ignored once settled)."""
        entry = self.out.get((peer, inc))
        if entry is None:
            return
        self._settle_ranges(peer, entry, taken, DELIVERED)
        self._settle_ranges(peer, entry, dropped, NOT_DELIVERED)
        if not entry.cookies:
            entry.cookies = {}  # (a dict keeps the table of its largest size)
        entry.seen += 1
        if final:
            entry.final = number
        self._maybe_done(peer, inc, entry)

    def _maybe_done(self, peer: PeerId, inc: int, entry: Outstanding) -> None:
        if entry.final and entry.seen >= entry.final:
            # Every report is in. What none named was never processed there, which a
            # graceful end rules out: it is UNKNOWN, the safe word, should one be missing.
            self._settle_all(peer, entry, UNKNOWN)
            del self.out[(peer, inc)]
        elif entry.ended and not entry.cookies:
            del self.out[(peer, inc)]

    def _settle_all(self, peer: PeerId, entry: Outstanding, outcome: str) -> None:
        for s in sorted(entry.cookies):
            self._settle(peer, entry, s, outcome)

    def link_ended(self, peer: PeerId, inc: int, never_left: list[int], graceful: bool) -> None:
        """This side's link ended: what never left it is NOT_DELIVERED; after a graceful
        unlink the rest waits for the peer's final TAKEN, otherwise it is UNKNOWN."""
        entry = self.out.get((peer, inc))
        if entry is None:
            return
        for s in never_left:
            self._settle(peer, entry, s, NOT_DELIVERED)
        if graceful:
            entry.ended = True
            self._maybe_done(peer, inc, entry)
            return
        self._settle_all(peer, entry, UNKNOWN)
        del self.out[(peer, inc)]

    def forgotten(self, peer: PeerId, inc: int) -> None:
        """The peer answered "not linked" for link ``(peer, inc)``, which ended here
        gracefully: its final word will never come; what it holds is UNKNOWN."""
        entry = self.out.get((peer, inc))
        if entry is not None and entry.ended:
            self._settle_all(peer, entry, UNKNOWN)
            del self.out[(peer, inc)]

    def not_delivered(self, peer: PeerId, inc: int, seqs: list[int]) -> None:
        """The transport gave these messages up before they wholly left."""
        entry = self.out.get((peer, inc))
        if entry is not None:
            for s in seqs:
                self._settle(peer, entry, s, NOT_DELIVERED)

    def node_lost(self, node_id: str) -> None:
        """``node_id`` is gone (crashed, restarted, or given up): links of it that ended here
        gracefully will never get their final word: what they hold is UNKNOWN."""
        for key in [k for k, e in self.out.items() if k[0][0] == node_id and e.ended]:
            self._settle_all(key[0], self.out[key], UNKNOWN)
            del self.out[key]

    def abandon(self) -> None:
        """The socket is gone for good: everything still awaited is UNKNOWN."""
        for (peer, _inc), entry in list(self.out.items()):
            self._settle_all(peer, entry, UNKNOWN)
        self.out.clear()

__all__ = ["Cookie", "DELIVERED", "UNKNOWN", "NOT_DELIVERED", "CONFIRM", "SEQ_MASK", "CookieJar",
           "encode_taken", "decode_taken", "taken_chunks", "to_ranges"]
