"""Whole A3M nodes (Exon + the core) as hosts of the simulated network.

:class:`NodeHost` is what :class:`a3m.Node` is, minus threads and sockets: an ExonProtocol and a
NodeCore, the core's output pumped into Exon as its windows allow (nothing dropped), Exon's
deliveries fed to the core. An ``app`` callback runs whenever the host wakes, so tests can
send and receive through the sockets in virtual time.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from random import Random
from typing import Any

from a3m.core.node_core import NodeCore
from a3m.core.transport import ExonBridge
from a3m.exon import ExonConfig, MemoryClockStore
from a3m.exon.engine import new_protocol
from a3m.patterns import GroupDirectory, register_builtin
from a3m.testing.sim_exon import sim_engine
from a3m.testing.sim_keys import sim_entropy, sim_key


class NodeHost:
    def __init__(self, name: str, rng: Random, config: ExonConfig | None = None,
                 clock_store: MemoryClockStore | None = None) -> None:
        """``clock_store``: a restarted host passes its predecessor's (the clock file)."""
        self.name = name
        config = config or ExonConfig()
        self.clock_store = clock_store or MemoryClockStore(rng.randrange(1 << 40))
        self.proto = new_protocol(name, config, Random(rng.random()), self.clock_store,
                                  key=sim_key(name), entropy=sim_entropy(rng),
                                  engine=sim_engine())
        self.core = NodeCore(name, Random(rng.random()),
                             max_message_size=config.max_message_size)
        register_builtin(self.core)
        GroupDirectory.of(self.core)  # as a3m.Node: RADIOs find this node's DISHes
        self.bridge = ExonBridge(self.core, self.proto)  # as a3m.Node: the same glue
        self.app: Callable[[NodeHost, float], None] | None = None
        self.now = 0.0

    def receive_datagram(self, data: bytes, addr: Any, now: float) -> None:
        self.proto.receive_datagram(data, addr, now)

    def next_timer(self) -> float | None:
        times = [t for t in (self.proto.next_timer(), self.core.next_timer()) if t is not None]
        return min(times) if times else None

    def handle_timer(self, now: float) -> None:
        self.proto.handle_timer(now)
        t = self.core.next_timer()
        if t is not None and t <= now:
            self.core.handle_timer(now)

    def datagrams_to_send(self, now: float) -> list[tuple[bytes, Any]]:
        self.now = now
        self.core.now = now
        self.bridge.on_events(deque(self.proto.drain_events()), now)
        if self.app is not None:
            self.app(self, now)
        self.pump(now)
        return self.proto.datagrams_to_send(now)

    def pump(self, now: float) -> None:
        self.bridge.pump(now)
