"""Whole A3M nodes (Exon + the core) as hosts of the simulated network.

:class:`NodeHost` is what :class:`a3m.Node` is, minus threads and sockets: an ExonProtocol and a
NodeCore, the core's output pumped into Exon as its windows allow (nothing dropped), Exon's
deliveries fed to the core. An ``app`` callback runs whenever the host wakes, so tests can
send and receive through the sockets in virtual time.

``exchange=True`` lends quiet REQ and REP sockets to the native exchange's table
(``a3m._native.ExchangeTable``, the table an ``a3m.Node`` shares with its engine), as a node
does: Exon's deliveries are offered to it first, and the application's calls go through it
(``NodeHost.exchange_send``, ``NodeHost.exchange_recv``), so a failing seed of the
exchange reproduces on the virtual clock.
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
from a3m.exon.events import Delivered
from a3m.patterns import GroupDirectory, register_builtin
from a3m.testing.sim_exon import sim_engine
from a3m.testing.sim_keys import sim_entropy, sim_key


class NodeHost:
    def __init__(self, name: str, rng: Random, config: ExonConfig | None = None,
                 clock_store: MemoryClockStore | None = None, exchange: bool = False) -> None:
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
        self.lender: Any = None
        if exchange:
            from a3m._dataplane import native
            from a3m.runtime.exchange import Lender

            if native is None:
                raise RuntimeError("the native data plane is not built: no exchange")
            self.lender = Lender(native.ExchangeTable(), self.core, lambda core: True)
            self.core.take_back = self.lender.take_back
            self.exchanged = 0  # messages the exchange took from Exon, and sent

    def want_lent(self, sock: Any) -> None:
        """Lend ``sock`` (a REQ or REP) to the exchange whenever it qualifies."""
        self.lender.want(sock)

    def exchange_send(self, sock: Any, payload: bytes) -> bool:
        """``sock.try_send(payload)`` through the exchange where it is lent (a3m.Node's
        ``send`` of a REQ or REP), else through the core."""
        if self.lender is not None and sock.lent:
            made = self.lender.x.send(sock.tag, payload, self.now, self.proto.can_send)
            if made is not None:
                self.proto.send(made[0], made[1], self.now)
                self.exchanged += 1
                return True
        return bool(sock.try_send(payload))

    def exchange_recv(self, sock: Any) -> bytes | None:
        """``sock.try_recv()``'s payload through the exchange where it is lent, else through
        the core (None: nothing yet)."""
        if self.lender is not None and sock.lent:
            got = self.lender.x.take(sock.tag, self.now, self.proto.srtt, self.proto.can_send)
            if got is None:
                return None
            if got is not False:
                body: bytes = got[0]
                flow = got[1]
                if flow is not None:
                    self.proto.send(flow[0], flow[1], self.now)
                return body
        received = sock.try_recv()
        return None if received is None else bytes(received.payload)

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
        events = deque(self.proto.drain_events())
        if self.lender is not None:
            self._offer(events, now)
        self.bridge.on_events(events, now)
        if self.app is not None:
            self.app(self, now)
        if self.lender is not None and self.lender.waiting:
            self.lender.lend_waiting()
        self.pump(now)
        return self.proto.datagrams_to_send(now)

    def _offer(self, events: deque[Any], now: float) -> None:
        """Exon's deliveries at the front of ``events`` that the exchange takes, taken off
        (consumed, as the bridge does), as a leader's read does; the first it refuses and
        all after it go to the core."""
        table = self.lender.x
        taken = 0
        while events:
            ev = events[0]
            if type(ev) is not Delivered or not table.offer(ev.source, ev.payload, now):
                break
            events.popleft()
            taken += len(ev.payload)
            self.exchanged += 1
        if taken:
            self.proto.consumed(taken)

    def pump(self, now: float) -> None:
        self.bridge.pump(now)
