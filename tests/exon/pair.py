"""Join ExonProtocol objects in a test with a tiny lossless (or filtered) transfer helper."""

from __future__ import annotations

from collections.abc import Callable
from random import Random

from a3m.exon import Delivered, ExonConfig, ExonProtocol, MemoryClockStore
from a3m.exon.events import Event

Filter = Callable[[bytes, str, str], bool]  # (datagram, src, dst) -> keep?


class Pair:
    """Two or more protocol objects on a perfect network, driven by hand with a fake clock."""

    def __init__(self, *ids: str, config: ExonConfig | None = None,
                 stores: dict[str, MemoryClockStore] | None = None) -> None:
        self.now = 0.0
        self.stores = stores if stores is not None else {i: MemoryClockStore() for i in ids}
        self.nodes: dict[str, ExonProtocol] = {}
        self.config = config or ExonConfig(secure=False)
        for i in ids:
            self.start(i)
        self.events: dict[str, list[Event]] = {i: [] for i in ids}
        self.filter: Filter | None = None
        self.wire_log: list[tuple[str, str, bytes]] = []
        #: Nodes whose application reads nothing: deliveries are not reported as consumed.
        self.not_reading: set[str] = set()

    def start(self, node_id: str) -> ExonProtocol:
        p = ExonProtocol(node_id, self.config, Random(1), self.stores.setdefault(
            node_id, MemoryClockStore()))
        for other in self.nodes:
            p.associate(other, other)
            self.nodes[other].associate(node_id, node_id)
        self.nodes[node_id] = p
        return p

    def transfer(self, max_rounds: int = 10_000) -> int:
        """Move datagrams until none is left; returns the number moved."""
        moved = 0
        for _ in range(max_rounds):
            batch = []
            for nid, p in self.nodes.items():
                for data, addr in p.datagrams_to_send(self.now):
                    batch.append((nid, addr, data))
            if not batch:
                # Only delayed ACKs left: let the clock run to their deadline (a real network
                # would), so that a transfer ends with everything acknowledged.
                due = [t for p in self.nodes.values() if (t := p.ack_deadline()) is not None]
                if not due:
                    break
                self.now = max(self.now, min(due))
                for p in self.nodes.values():
                    p.handle_timer(self.now)
                continue
            for src, dst, data in batch:
                self.wire_log.append((src, dst, data))
                if self.filter is not None and not self.filter(data, src, dst):
                    continue
                if dst in self.nodes:
                    self.nodes[dst].receive_datagram(data, src, self.now)
                    moved += 1
        self.collect()
        return moved

    def collect(self) -> None:
        for nid, p in self.nodes.items():
            for ev in p.drain_events():
                self.events.setdefault(nid, []).append(ev)
                if isinstance(ev, Delivered) and nid not in self.not_reading:
                    p.consumed(len(ev.payload))

    def advance(self, dt: float) -> None:
        """Move the clock by ``dt``, firing timers in order and transferring after each
        (what was sent before the call leaves first, at the current time)."""
        end = self.now + dt
        self.transfer()
        for _ in range(100_000):
            due = [t for p in self.nodes.values() if (t := p.next_timer()) is not None]
            t = min(due) if due else None
            if t is None or t > end:
                break
            self.now = max(self.now, t)
            for p in self.nodes.values():
                p.handle_timer(self.now)
            self.transfer()
        self.now = end
        self.transfer()

    def delivered(self, nid: str) -> list[tuple[str, bytes]]:
        return [(e.source, e.payload) for e in self.events[nid] if isinstance(e, Delivered)]
