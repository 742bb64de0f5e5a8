"""Two or more ExonProtocol objects joined by a network with a fixed one-way delay, a virtual
clock and a hook that drops chosen datagrams: what loss-recovery tests measure time on."""

from __future__ import annotations

import heapq
from collections.abc import Callable
from random import Random

from a3m.exon import Delivered, ExonConfig, ExonProtocol, ReceiptReady, wire

#: (src, dst, decoded frames, time) -> True to drop the datagram.
DropRule = Callable[[str, str, list[wire.Frame], float], bool]
#: Called on each delivery: (node, source, payload, time); may call ``send`` (a reply).
OnDeliver = Callable[[str, str, bytes, float], None]


class DelayedNet:
    """Nodes on a path with one-way delay ``one_way_s`` (the same both ways)."""

    def __init__(self, *ids: str, one_way_s: float = 0.0001,
                 config: ExonConfig | None = None) -> None:
        self.now = 0.0
        self.one_way_s = one_way_s
        self.nodes = {i: ExonProtocol(i, config or ExonConfig(secure=False), Random(1)) for i in ids}
        for i, p in self.nodes.items():
            for j in ids:
                if j != i:
                    p.associate(j, j)
        self._wire: list[tuple[float, int, str, str, bytes]] = []
        self._seq = 0
        self.drop: DropRule | None = None
        self.on_deliver: OnDeliver | None = None
        self.delivered: list[tuple[float, str, str, bytes]] = []  # (time, node, source, payload)
        self.receipts: dict[int, float] = {}
        self.dropped = 0
        self.datagrams = 0

    def send(self, src: str, dst: str, payload: bytes, receipt: bool = False) -> int | None:
        rid = self.nodes[src].send(dst, payload, self.now, receipt=receipt)
        self._flush()
        return rid

    def _flush(self) -> None:
        for nid, p in self.nodes.items():
            for data, addr in p.datagrams_to_send(self.now):
                self.datagrams += 1
                if self.drop is not None:
                    _, _, frames = wire.decode_datagram(data)
                    if self.drop(nid, str(addr), frames, self.now):
                        self.dropped += 1
                        continue
                self._seq += 1
                heapq.heappush(self._wire, (self.now + self.one_way_s, self._seq, nid,
                                            str(addr), data))

    def _collect(self) -> None:
        for nid, p in self.nodes.items():
            for ev in p.drain_events():
                if isinstance(ev, Delivered):
                    p.consumed(len(ev.payload))
                    self.delivered.append((self.now, nid, ev.source, ev.payload))
                    if self.on_deliver is not None:
                        self.on_deliver(nid, ev.source, ev.payload, self.now)
                elif isinstance(ev, ReceiptReady):
                    self.receipts[ev.receipt_id] = self.now

    def step(self, until: float) -> bool:
        """Advance to the next arrival or timer (not past ``until``); False when none is due."""
        timers = [t for p in self.nodes.values() if (t := p.next_timer()) is not None]
        nxt = min(timers, default=float("inf"))
        if self._wire:
            nxt = min(nxt, self._wire[0][0])
        if nxt > until:
            self.now = until
            return False
        self.now = max(self.now, nxt)
        while self._wire and self._wire[0][0] <= self.now:
            _, _, src, dst, data = heapq.heappop(self._wire)
            self.nodes[dst].receive_datagram(data, src, self.now)
        for p in self.nodes.values():
            p.handle_timer(self.now)
        self._collect()
        self._flush()
        return True

    def run(self, duration: float, until: Callable[[], bool] | None = None) -> bool:
        """Run for at most ``duration`` of virtual time, or until ``until()`` holds (True)."""
        end = self.now + duration
        for _ in range(1_000_000):
            if until is not None and until():
                return True
            if not self.step(end):
                return until is not None and until()
        raise AssertionError("the run did not settle")

    def delivered_at(self, payload: bytes) -> float | None:
        for t, _, _, p in self.delivered:
            if p == payload:
                return t
        return None


def carries_token(payload: bytes) -> Callable[[list[wire.Frame]], bool]:
    """A frame test: the datagram carries a TOKEN whose payload is ``payload``."""
    return lambda frames: any(f[0] == wire.TOKEN and f[3] == payload for f in frames)


def drop_first(test: Callable[[list[wire.Frame]], bool], src: str | None = None,
               times: int = 1) -> DropRule:
    """Drop the first ``times`` datagrams (from ``src``, if given) whose frames pass ``test``."""
    left = [times]

    def rule(s: str, d: str, frames: list[wire.Frame], now: float) -> bool:
        if left[0] > 0 and (src is None or s == src) and test(frames):
            left[0] -= 1
            return True
        return False

    return rule
