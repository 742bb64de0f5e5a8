"""Credit flow control per link, counted on delivery to the application (SPEC 5, seed 002).

The receiver grants an absolute **edge**: the sender may send DATA while its count of DATA sent
stays below it. The edge is ``delivered + capacity``, so at most ``capacity`` messages wait in
the link's queue whatever the sender does. Edges travel in FLOW messages, numbered because Exon
does not keep order (a stale FLOW is ignored). Credits are returned in batches: a FLOW goes out
once the edge can move by ``batch`` or more.

Lowering the capacity below what the peer already holds (seed 003's "loan") is immediate for
new grants: the new edge may be lower than an edge already granted; the sender adopts it when
the FLOW arrives, and what it sent in between, up to the highest edge ever granted, is accepted
(that margin is the loan). A peer that sends beyond the highest edge ever granted is violating
the protocol: :meth:`RecvCredits.on_arrival` says so and the link is closed.

The capacity tunes itself, as Linux tunes TCP's receive buffer (dynamic right-sizing): a link
can move at most ``capacity`` messages per round trip, so when the application took more than
half the capacity within one round trip to the peer (the transport's smoothed RTT), the window
is what holds the stream back: the capacity doubles, up to ``limit`` messages, paying for the
growth in bytes (the link's mean message size) out of a :class:`CreditBudget` shared by the
node's links and given back when the link ends. On a LAN (sub-millisecond round trips) it never
grows; on a long path it settles near twice the bandwidth-delay product, and the memory a node
can be made to hold stays bounded by its budget.
"""

from __future__ import annotations

from collections.abc import Callable


class SendCredits:
    """The sending side's view: how many DATA messages it may still send."""

    __slots__ = ("edge", "sent", "flow_seq")

    def __init__(self, initial: int) -> None:
        self.edge = initial
        self.sent = 0
        self.flow_seq = 0

    @property
    def available(self) -> int:
        return self.edge - self.sent

    def spend(self) -> None:
        self.sent += 1

    def on_flow(self, flow_seq: int, edge: int) -> bool:
        """Apply a FLOW; returns True when it was newer (and the edge moved)."""
        if flow_seq <= self.flow_seq:
            return False
        self.flow_seq = flow_seq
        self.edge = edge
        return True


class CreditBudget:
    """Bytes of buffer the links of one node may take, in all, by growing their capacity
    beyond what their sockets set (:class:`RecvCredits`)."""

    __slots__ = ("total", "left")

    def __init__(self, total: int) -> None:
        self.total = total
        self.left = total

    def take(self, nbytes: int) -> bool:
        if nbytes > self.left:
            return False
        self.left -= nbytes
        return True

    def give(self, nbytes: int) -> None:
        self.left = min(self.total, self.left + nbytes)


class RecvCredits:
    """The receiving side: capacity, what arrived, what the application took, the edges."""

    __slots__ = ("_capacity", "received", "delivered", "edge", "max_edge", "flow_seq",
                 "batch_fraction", "batch", "limit", "budget", "held", "arrived_bytes",
                 "rtt_of", "round_end", "round_start_delivered")

    def __init__(self, capacity: int, batch_fraction: float = 0.25, limit: int = 0,
                 budget: CreditBudget | None = None,
                 rtt_of: Callable[[], float | None] | None = None) -> None:
        if capacity < 1:
            raise ValueError("capacity must be >= 1")
        self.batch_fraction = batch_fraction
        self.capacity = capacity
        #: Most the capacity may grow to by itself (<= capacity: fixed).
        self.limit = limit
        self.budget = budget
        self.held = 0  # bytes taken from the budget for growth
        self.arrived_bytes = 0
        #: The round trip to the peer (None: unknown); deliveries are counted per round trip.
        self.rtt_of = rtt_of
        self.round_end = 0.0
        self.round_start_delivered = 0
        self.received = 0
        self.delivered = 0
        self.edge = capacity  # granted in the handshake
        self.max_edge = capacity
        self.flow_seq = 0

    @property
    def capacity(self) -> int:
        return self._capacity

    @capacity.setter
    def capacity(self, value: int) -> None:
        self._capacity = value
        #: Credits returned per FLOW: a fraction of the capacity.
        self.batch = max(1, int(value * self.batch_fraction))

    @property
    def queued(self) -> int:
        """Arrived and not yet delivered to the application."""
        return self.received - self.delivered

    @property
    def loan(self) -> int:
        """How far the peer may still go beyond the current capacity (granted earlier)."""
        return max(0, self.max_edge - (self.delivered + self.capacity))

    def on_arrival(self, nbytes: int = 0, count: int = 1) -> bool:
        """``count`` DATA messages of ``nbytes`` in all arrived; False means the peer spent
        credits it never had."""
        self.received += count
        self.arrived_bytes += nbytes
        return self.received <= self.max_edge

    def on_delivered(self, now: float = 0.0, count: int = 1) -> tuple[int, int] | None:
        """The application took ``count`` messages at ``now``; returns a FLOW
        ``(flow_seq, edge)`` when due."""
        self.delivered += count
        if now >= self.round_end and self.limit > self._capacity:
            self._end_round(now)
        target = self.delivered + self._capacity
        if target - self.edge >= self.batch:
            return self._grant(target)
        return None

    def _end_round(self, now: float) -> None:
        """A round trip's worth of deliveries is counted: grow if they filled half the
        window, and start the next round."""
        rtt = self.rtt_of() if self.rtt_of is not None else None
        if rtt is None:
            self.round_end = now + 1.0  # no measure yet: look again later
            self.round_start_delivered = self.delivered
            return
        if 4 * (self.delivered - self.round_start_delivered) > self._capacity:
            self._grow()
        self.round_start_delivered = self.delivered
        self.round_end = now + max(rtt, 0.001)

    def _grow(self) -> None:
        """Double the capacity (up to ``limit``) if the budget pays for it."""
        new = min(self.limit, self._capacity * 2)
        mean = self.arrived_bytes // self.received if self.received else 1
        cost = (new - self._capacity) * max(mean, 1)
        if self.budget is None or self.budget.take(cost):
            self.held += cost
            self.capacity = new

    def release(self) -> None:
        """The link ended: what its growth took from the budget goes back."""
        if self.held and self.budget is not None:
            self.budget.give(self.held)
        self.held = 0

    def set_capacity(self, capacity: int) -> tuple[int, int] | None:
        """Change the capacity at run time (lower or higher); returns the FLOW to send. An
        explicit capacity ends what the link grew by itself (it may grow again from there)."""
        if capacity < 0:
            raise ValueError("capacity must be >= 0")
        self.release()
        self.capacity = capacity
        target = self.delivered + capacity
        if target == self.edge:
            return None
        return self._grant(target)

    def _grant(self, edge: int) -> tuple[int, int]:
        self.edge = edge
        if edge > self.max_edge:
            self.max_edge = edge
        self.flow_seq += 1
        return self.flow_seq, edge
