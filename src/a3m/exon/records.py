"""Soft state: one send record and one receive record per peer and direction.

Records are plain slotted objects; :mod:`a3m.exon.protocol` owns every rule that changes them.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Final

from a3m.exon.recovery import PathRecovery

INF: Final = float("inf")

#: A queued piece: (payload, fragment (index, count, total) or None, receipt meta). A fragment's
#: payload is ``b""`` in the queue: it is cut from its :class:`Message` when bound to a slot.
#: The meta is the receipt id (or None) of a whole message, or the :class:`Message` of a fragment.
QueueItem = tuple[bytes, "tuple[int, int, int] | None", Any]
#: An unacknowledged token: (encoded frame, rck, receipt meta, last sent at, transmissions,
#: transmission sequence of the last copy: see :mod:`a3m.exon.recovery`).
Token = tuple[bytes, int, Any, float, int, int]


class Message:
    """A message sent in fragments: the sender keeps it whole until every fragment is acked.

    Its fragments take consecutive slots of one receive record (``r``, set when the first is
    bound). If that record ends (a receiver restart) before every fragment was bound, the
    receiver cannot have delivered the message; the sender then sends it again, whole, on fresh
    slots (a new record has no reassembly state to join).
    """

    __slots__ = ("data", "chunk", "count", "remaining", "bound", "rid", "r")

    def __init__(self, data: bytes, chunk: int, count: int, rid: int | None) -> None:
        self.data = data
        self.chunk = chunk
        self.count = count
        self.remaining = count  # fragments not acknowledged yet
        self.bound = 0  # fragments bound to a slot so far
        self.rid = rid
        self.r = -1  # the receive record its fragments are bound to

    def pieces(self) -> list[QueueItem]:
        total = len(self.data)
        return [(b"", (i, self.count, total), self) for i in range(self.count)]


class SendRecord:
    """The sending half-connection to one peer.

    Envelopes (granted, unused slots) are the interval ``[env_lo, sck)``; tokens are kept in
    slot order (insertion order of the dict), so the first key is the lowest one in use.
    """

    __slots__ = (
        "peer", "sck", "rck", "env_lo", "queue", "tokens",
        "req_out", "req_sent_at", "req_tx", "req_times", "req_end", "path", "last_sent", "loss_time",
        "idle_since", "timer_at", "alive", "max_single",
        "closed_r", "void_floor", "revoked", "heard_at", "silent", "first_tx", "held_probes",
        "probe_slot",
    )

    def __init__(self, peer: str, start: int, path: PathRecovery, now: float) -> None:
        self.peer = peer
        self.sck = start
        self.rck = -1  # no grant yet (a receiver's clock, hence an rck, may start at 0)
        self.env_lo = start
        self.queue: deque[QueueItem] = deque()
        self.tokens: dict[int, Token] = {}
        self.req_out = False
        self.req_sent_at = 0.0
        self.req_tx = 0
        #: When each copy of the outstanding REQSLOTS left (index: copy number - 1, the first
        #: 255): a SLOTS names the copy it answers, so any copy's answer is an RTT sample.
        self.req_times: list[float] = []
        self.req_end = start
        #: RTT, probe timeout and congestion window of the path to the peer (outlives us).
        self.path = path
        self.last_sent = now  # the last token or REQSLOTS sent (the probe timeout runs from it)
        self.loss_time = INF  # when a token becomes lost by the time threshold
        self.idle_since: float | None = now
        self.timer_at = INF
        self.alive = True
        self.max_single = 0  # largest unfragmented payload (set by the protocol)
        self.closed_r = -1  # records <= this one were revoked or voided: their SLOTS are stale
        self.void_floor = -1  # records <= this one are known gone (VOID handled)
        self.revoked = -1  # a revoked record whose final REVOKED(r, 0) we still owe
        # Peer liveness (docs/exon-wire.md, "Peer liveness"): the later of the last datagram
        # heard from the peer and the moment this record began waiting on it (tokens or a
        # queue); ``silent``: PeerUnreachable was reported for it and it was not heard since.
        self.heard_at = now
        self.silent = False
        #: Tokens sent more than once: slot -> (sent at, transmission sequence) of the first
        #: copy, which the ACK may name as the one that arrived, and whether the first copy
        #: was declared lost (else a probe sent it again) (``a3m.exon.sender``).
        self.first_tx: dict[int, tuple[float, int, bool]] = {}
        #: Probe timeouts that expired while a handshake held what we sent (nothing left).
        self.held_probes = 0
        #: The slot of the node's first-exchange pace this record's next probe waits for
        #: (0: none reserved; ``a3m.exon.pacer``).
        self.probe_slot = 0.0

    @property
    def pending(self) -> int:
        """Pieces queued or unacknowledged (what the windows count)."""
        return len(self.queue) + len(self.tokens)

    def lowest_in_use(self) -> int:
        """The ``l`` of REQSLOTS: no slot below it will ever be used by this record."""
        if self.tokens:
            return next(iter(self.tokens))
        return self.env_lo


class Reassembly:
    """Fragments of one message, keyed by fragment index (memory grows only with arrivals)."""

    __slots__ = ("count", "total", "size", "parts")

    def __init__(self, count: int, total: int) -> None:
        self.count = count
        self.total = total
        self.size = 0
        self.parts: dict[int, bytes] = {}


class RecvRecord:
    """The receiving half-connection from one peer.

    Live slots are ``[low, sck)`` minus ``dead`` (consumed slots above ``low``): an interval and
    a small set, so a peer with a huge clock costs nothing (never a bitmap based at 0).
    """

    __slots__ = (
        "peer", "rck", "sck", "low", "dead", "reasm", "last_active", "probe_iv",
        "deferred", "timer_at", "alive", "revoking", "revoke_due", "first",
        "high", "copies",
    )

    def __init__(self, peer: str, rck: int, start: int, now: float, probe_iv: float) -> None:
        self.peer = peer
        self.rck = rck
        self.sck = start
        self.low = start
        self.dead: set[int] = set()
        self.reasm: dict[int, Reassembly] = {}
        self.last_active = now
        self.probe_iv = probe_iv
        self.deferred: tuple[int, int] | None = None
        self.timer_at = INF
        self.alive = True
        self.revoking = False  # the node is closing: REVOKE sent, waiting for REVOKED(r, 0)
        self.revoke_due = INF
        #: The first slot of this record's grants: ACKs repeat nothing below it.
        self.first = start
        self.high = start  # one past the highest slot a token arrived on
        #: Slots where a copy sent again (flagged RETRANSMIT) arrived, for ACKs to say so
        #: (docs/exon-wire.md, ACK); forgotten below the span ACKs repeat.
        self.copies: set[int] = set()

    def is_live(self, s: int) -> bool:
        """Whether slot ``s`` is granted and not yet consumed."""
        return self.low <= s < self.sck and s not in self.dead

    def live_count(self) -> int:
        return self.sck - self.low - len(self.dead)

    def consume(self, s: int) -> None:
        """Mark live slot ``s`` consumed."""
        if s == self.low:
            low = s + 1
            dead = self.dead
            if dead:
                while low in dead:
                    dead.remove(low)
                    low += 1
            self.low = low
        else:
            self.dead.add(s)

    def drop_below(self, bound: int) -> None:
        """Forget every live slot below ``bound`` (the sender's ``l``)."""
        bound = min(bound, self.sck)
        if bound <= self.low:
            return
        self.low = bound
        if self.dead:
            self.dead = {x for x in self.dead if x >= bound}
            self.consume_prefix()

    def consume_prefix(self) -> None:
        low, dead = self.low, self.dead
        while low in dead:
            dead.remove(low)
            low += 1
        self.low = low
