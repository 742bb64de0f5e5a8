"""Secure ExonProtocol nodes on a simulated wire that an attacker can tap, replay into, and
forge on: what the secure-association tests use (virtual clock, fixed one-way delay)."""

from __future__ import annotations

import heapq
from collections.abc import Callable
from random import Random

from a3m.exon import Delivered, ExonConfig, ExonProtocol, MemoryClockStore
from a3m.exon.events import Event
from a3m.exon.secure import NodeKey, TrustStore
from a3m.testing.sim_keys import sim_entropy, sim_key


class SecureNet:
    """Nodes named ``a``, ``b``... at addresses ``"a@0"``...; ``tap`` holds every datagram
    sent (src address, dst address, bytes); ``inject`` delivers one from any address."""

    def __init__(self, *ids: str, one_way_s: float = 0.005, config: ExonConfig | None = None,
                 seed: int = 1) -> None:
        self.now = 0.0
        self.one_way_s = one_way_s
        self.config = config or ExonConfig()
        self.rng = Random(seed)
        self.addr: dict[str, str] = {}
        self.nodes: dict[str, ExonProtocol] = {}
        self.stores: dict[str, MemoryClockStore] = {}  # the clock files: kept over restarts
        self.events: dict[str, list[Event]] = {}
        self.delivered: dict[str, list[tuple[str, bytes]]] = {}
        self.tap: list[tuple[str, str, bytes]] = []
        self.drop: Callable[[str, str, bytes], bool] | None = None
        self.received_by: dict[str, list[bytes]] = {}  # address -> datagrams sent to it
        self._wire: list[tuple[float, int, str, str, bytes]] = []
        self._seq = 0
        for i in ids:
            self.start(i)
        for i in ids:
            for j in ids:
                if i != j:
                    self.nodes[i].associate(j, self.addr[j])

    def start(self, node_id: str, key: NodeKey | None = None, trust: TrustStore | None = None,
              config: ExonConfig | None = None) -> ExonProtocol:
        """Start (or restart, with a new incarnation) ``node_id`` at its address."""
        store = self.stores.setdefault(node_id, MemoryClockStore(1))
        p = ExonProtocol(node_id, config or self.config, Random(self.rng.random()), store,
                         key=key or sim_key(node_id), entropy=sim_entropy(self.rng),
                         trust=trust)
        self.addr.setdefault(node_id, f"{node_id}@0")
        self.nodes[node_id] = p
        self.events[node_id] = []
        self.delivered.setdefault(node_id, [])
        return p

    def move(self, node_id: str, new_addr: str) -> None:
        self.addr[node_id] = new_addr
        self.nodes[node_id].announce(self.now)

    def inject(self, data: bytes, src_addr: str, dst: str) -> None:
        """An attacker's datagram, from any address, reaching ``dst`` at once."""
        self.nodes[dst].receive_datagram(data, src_addr, self.now)

    def _owner(self, addr: str) -> str | None:
        for n, a in self.addr.items():
            if a == addr:
                return n
        return None

    def flush(self) -> None:
        for nid, p in self.nodes.items():
            for data, addr in p.datagrams_to_send(self.now):
                src = self.addr[nid]
                self.tap.append((src, str(addr), data))
                self.received_by.setdefault(str(addr), []).append(data)
                if self.drop is not None and self.drop(src, str(addr), data):
                    continue
                self._seq += 1
                heapq.heappush(self._wire, (self.now + self.one_way_s, self._seq, src,
                                            str(addr), data))

    def step(self, until: float) -> bool:
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
            owner = self._owner(dst)
            if owner is not None:
                self.nodes[owner].receive_datagram(data, src, self.now)
        for p in self.nodes.values():
            p.handle_timer(self.now)
        for nid, p in self.nodes.items():
            for ev in p.drain_events():
                if isinstance(ev, Delivered):
                    p.consumed(len(ev.payload))
                    self.delivered[nid].append((ev.source, ev.payload))
                else:
                    self.events[nid].append(ev)
        self.flush()
        return True

    def run(self, duration: float, until: Callable[[], bool] | None = None) -> bool:
        end = self.now + duration
        for _ in range(1_000_000):
            if until is not None and until():
                return True
            if not self.step(end):
                return until is not None and until()
        raise AssertionError("the run did not settle")

    def send(self, src: str, dst: str, payload: bytes) -> None:
        self.nodes[src].send(dst, payload, self.now)
        self.flush()

    def got(self, node_id: str) -> list[bytes]:
        return [p for _, p in self.delivered[node_id]]
