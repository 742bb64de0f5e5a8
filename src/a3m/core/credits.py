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
"""

from __future__ import annotations


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


class RecvCredits:
    """The receiving side: capacity, what arrived, what the application took, the edges."""

    __slots__ = ("_capacity", "received", "delivered", "edge", "max_edge", "flow_seq",
                 "batch_fraction", "batch")

    def __init__(self, capacity: int, batch_fraction: float = 0.25) -> None:
        if capacity < 1:
            raise ValueError("capacity must be >= 1")
        self.batch_fraction = batch_fraction
        self.capacity = capacity
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

    def on_arrival(self) -> bool:
        """A DATA message arrived; False means the peer spent credits it never had."""
        self.received += 1
        return self.received <= self.max_edge

    def on_delivered(self) -> tuple[int, int] | None:
        """The application took one message; returns a FLOW ``(flow_seq, edge)`` when due."""
        self.delivered += 1
        target = self.delivered + self._capacity
        if target - self.edge >= self.batch:
            return self._grant(target)
        return None

    def set_capacity(self, capacity: int) -> tuple[int, int] | None:
        """Change the capacity at run time (lower or higher); returns the FLOW to send."""
        if capacity < 0:
            raise ValueError("capacity must be >= 0")
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
