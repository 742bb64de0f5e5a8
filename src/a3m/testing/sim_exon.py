"""Exon nodes with applications on the simulated network, and an exactly-once checker.

Each application sends numbered messages to chosen peers through ``ExonProtocol.send``
(backing off on ``WouldBlock`` until an acknowledgement frees the window), drains its events and
consumes what it receives (unless paused: a slow reader). The checker then proves: every message
delivered exactly once, nothing delivered that was not sent, and, in runs where nodes restart,
never a duplicate and never a silent loss: a message is delivered, or reported by its sender as
of unknown outcome (its receiver crashed), or its sender itself crashed with it in hand. A
graceful restart (``close_restart``) must produce no unknown outcome at all. Applications
that give up unreachable peers (``abandon_unreachable``) report messages NotDelivered too:
such a message must never be delivered.
"""

from __future__ import annotations

import os
import struct
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from random import Random
from typing import Any

from a3m.errors import WouldBlock
from a3m.exon import ExonConfig, MemoryClockStore
from a3m.exon.engine import new_protocol
from a3m.exon.events import (
    Delivered,
    NotDelivered,
    OutcomeUnknown,
    PeerReachable,
    PeerUnreachable,
    ReceiptReady,
)
from a3m.testing.sim import Network, SimulationError
from a3m.testing.sim_keys import sim_entropy, sim_key

_MSG = struct.Struct(">HHI")  # sender index, receiver index, sequence number
#: The engine the simulator's nodes run: ``python`` (the specification, the default) or
#: ``native`` (a3m._native's twin, where built).
SIM_ENGINE_ENV = "A3M_SIM_ENGINE"


def sim_engine() -> str:
    """The engine simulated nodes run (``A3M_SIM_ENGINE``; ``python`` unless set)."""
    return os.environ.get(SIM_ENGINE_ENV, "python").strip().lower() or "python"


@dataclass
class Flow:
    """Messages from one node to another: ``total`` to send, with payload sizes."""

    src: str
    dst: str
    total: int
    sent: int = 0
    size: int = 16
    big_every: int = 0  # every n-th message is large (fragmented)
    big_size: int = 20_000
    first: int = 0  # sequence number of the first message (later flows on a pair continue)
    every_s: float = 0.0  # paced: one message per this many seconds (a sender with spare
    # envelopes, not a saturated one), sent in bursts whenever the application wakes
    started: float = -1.0


@dataclass
class Ledger:
    """What was sent and delivered, for the exactly-once check."""

    sent: set[tuple[str, str, int]] = field(default_factory=set)
    delivered: Counter[tuple[str, str, int]] = field(default_factory=Counter)
    phantoms: int = 0
    corrupt: int = 0
    sent_at: dict[tuple[str, str, int], float] = field(default_factory=dict)
    #: Sent and neither delivered nor reported yet (what progress must still resolve); a
    #: sender's crash takes its own messages out (its application is gone with them).
    owed: set[tuple[str, str, int]] = field(default_factory=set)
    #: Reported by their sender as OutcomeUnknown (delivered at most once, maybe not).
    unknown: Counter[tuple[str, str, int]] = field(default_factory=Counter)
    #: Reported by their sender as NotDelivered (given up before they wholly left it).
    not_delivered: Counter[tuple[str, str, int]] = field(default_factory=Counter)

    def duplicates(self) -> int:
        return sum(c - 1 for c in self.delivered.values() if c > 1)

    def lost(self, since: float = -1.0) -> list[tuple[str, str, int]]:
        return sorted(k for k in self.sent
                      if k not in self.delivered and self.sent_at.get(k, 0.0) >= since)


class ExonApp:
    """A host for the simulator: an ExonProtocol plus the application that drives it."""

    def __init__(self, name: str, index: dict[str, int], names: list[str], config: ExonConfig,
                 store: MemoryClockStore, rng: Random, ledger: Ledger) -> None:
        self.name = name
        self.index = index
        self.names = names
        self.proto = new_protocol(name, config, rng, store, key=sim_key(name),
                                  entropy=sim_entropy(rng), engine=sim_engine())
        #: What this node sent and the events it handled, when the cluster traces (the
        #: differential tests compare the engines' traces: tests/native).
        self.trace: list[tuple[Any, ...]] | None = None
        self.flows: list[Flow] = []
        self.ledger = ledger
        self.paused = False
        self.unconsumed = 0
        self.receipts = 0
        self._rng = rng
        self._now = 0.0
        #: Give up a peer reported PeerUnreachable (``ExonProtocol.abandon``), as a3m.Node does.
        self.abandon_unreachable = False
        self.unreachable = 0
        self.reachable = 0

    # Host surface -------------------------------------------------------------------------

    def receive_datagram(self, data: bytes, addr: Any, now: float) -> None:
        self.proto.receive_datagram(data, addr, now)

    def handle_timer(self, now: float) -> None:
        self.proto.handle_timer(now)

    def next_timer(self) -> float | None:
        return self.proto.next_timer()

    def datagrams_to_send(self, now: float) -> list[tuple[bytes, Any]]:
        self._now = now
        self.drain(now)
        self.produce(now)
        out: list[tuple[bytes, Any]] = self.proto.datagrams_to_send(now)
        if self.trace is not None:
            self.trace.extend(("out", now, self.name, d, a) for d, a in out)
        return out

    # Application --------------------------------------------------------------------------

    def drain(self, now: float) -> None:
        events = self.proto.drain_events()
        while events:
            self._handle(events, now)
            events = self.proto.drain_events()  # what abandon() reported

    def _handle(self, events: list[Any], now: float) -> None:
        ledger = self.ledger
        if self.trace is not None:
            self.trace.extend(("ev", now, self.name, repr(ev)) for ev in events)
        for ev in events:
            if isinstance(ev, Delivered):
                p = ev.payload
                if len(p) < _MSG.size:
                    ledger.corrupt += 1
                    continue
                si, di, seq = _MSG.unpack_from(p)
                key = (self.names[si] if si < len(self.names) else "?", self.name, seq)
                if di != self.index[self.name] or key[0] != ev.source or key not in ledger.sent:
                    ledger.phantoms += 1
                elif len(p) != _expected_size(p):
                    ledger.corrupt += 1
                ledger.delivered[key] += 1
                ledger.owed.discard(key)
                if self.paused:
                    self.unconsumed += len(p)
                else:
                    self.proto.consumed(len(p))
            elif isinstance(ev, ReceiptReady):
                self.receipts += 1
            elif isinstance(ev, OutcomeUnknown):
                si, di, seq = _MSG.unpack_from(ev.payload)
                key = (self.names[si], self.names[di], seq)
                if key[0] != self.name or key[1] != ev.destination or key not in ledger.sent:
                    ledger.phantoms += 1
                ledger.unknown[key] += 1
                ledger.owed.discard(key)
            elif isinstance(ev, NotDelivered):
                si, di, seq = _MSG.unpack_from(ev.payload)
                key = (self.names[si], self.names[di], seq)
                if key[0] != self.name or key[1] != ev.destination or key not in ledger.sent:
                    ledger.phantoms += 1
                ledger.not_delivered[key] += 1
                ledger.owed.discard(key)
            elif isinstance(ev, PeerUnreachable):
                self.unreachable += 1
                if self.abandon_unreachable:
                    self.proto.abandon(ev.peer, now)
            elif isinstance(ev, PeerReachable):
                self.reachable += 1

    def resume(self) -> None:
        self.paused = False
        self.proto.consumed(self.unconsumed)
        self.unconsumed = 0

    def produce(self, now: float, burst: int = 64) -> None:
        if self.proto.closing:
            return  # the next incarnation carries on with the flows
        for flow in self.flows:
            n = 0
            limit = burst
            if flow.every_s:
                if flow.started < 0:
                    flow.started = now
                limit = min(burst, int((now - flow.started) / flow.every_s) + 1 - flow.sent)
            while flow.sent < flow.total and n < limit:
                seq = flow.first + flow.sent
                size = flow.size
                if flow.big_every and seq % flow.big_every == flow.big_every - 1:
                    size = flow.big_size
                payload = _payload(self.index[flow.src], self.index[flow.dst], seq, size)
                try:
                    self.proto.send(flow.dst, payload, now, receipt=(seq % 7 == 0))
                except WouldBlock:
                    break
                key = (flow.src, flow.dst, seq)
                self.ledger.sent.add(key)
                self.ledger.sent_at[key] = now
                self.ledger.owed.add(key)
                flow.sent += 1
                n += 1

    def done_sending(self) -> bool:
        return all(f.sent >= f.total for f in self.flows)


def _payload(si: int, di: int, seq: int, size: int) -> bytes:
    size = max(size, _MSG.size + 4)
    head = _MSG.pack(si, di, seq) + struct.pack(">I", size)
    fill = bytes((seq + i) & 0xFF for i in range(min(16, size - len(head))))
    return (head + fill).ljust(size, b"\x5a")


def _expected_size(p: bytes) -> int:
    return int(struct.unpack_from(">I", p, _MSG.size)[0])


class ExonCluster:
    """Several Exon nodes with their applications on one simulated network."""

    def __init__(self, net: Network, names: Iterable[str], config: ExonConfig | None = None,
                 clock_starts: dict[str, int] | None = None) -> None:
        self.net = net
        self.names = list(names)
        self.index = {n: i for i, n in enumerate(self.names)}
        self.config = config or ExonConfig()
        self.ledger = Ledger()
        self.stores = {n: MemoryClockStore((clock_starts or {}).get(n, net.rng.randrange(1 << 40)))
                       for n in self.names}
        self.apps: dict[str, ExonApp] = {}
        #: When set (a list), every node's output and handled events are appended to it.
        self.trace: list[tuple[Any, ...]] | None = None
        for n in self.names:
            self._start(n)
        self.crash_times: list[float] = []
        #: Per node, when it lost its state (crashed, or a graceful close that timed out).
        self.crashes: dict[str, list[float]] = {n: [] for n in self.names}
        self.graceful_restarts = 0

    def _start(self, name: str) -> ExonApp:
        app = ExonApp(name, self.index, self.names, self.config, self.stores[name],
                      Random(self.net.rng.randrange(1 << 30)), self.ledger)
        app.trace = self.trace
        old = self.apps.get(name)
        if old is not None:
            app.flows = old.flows
        self.apps[name] = app
        if name in self.net.hosts:
            self.net.replace_host(name, app)
        else:
            self.net.add(name, app)
        for other in self.names:
            if other != name and other in self.net.address:
                app.proto.associate(other, self.net.address[other])
                if other in self.apps and name in self.net.address:
                    self.apps[other].proto.associate(name, self.net.address[name])
        return app

    def flow(self, src: str, dst: str, total: int, **kw: Any) -> Flow:
        f = Flow(src, dst, total, **kw)
        self.apps[src].flows.append(f)
        return f

    def all_to_all(self, per_pair: int, **kw: Any) -> None:
        for s in self.names:
            for d in self.names:
                if s != d:
                    self.flow(s, d, per_pair, **kw)

    def kick(self) -> None:
        """Let every application produce (at start, and after changes)."""
        for n in self.names:
            self.net.flush(n)

    def tick(self, period: float, until: float) -> None:
        """Wake every application every ``period`` until ``until`` (apps with backlog)."""
        def again() -> None:
            self.kick()
            if self.net.now + period < until:
                self.net.at(self.net.now + period, again)
        self.net.at(self.net.now + period, again)

    def crash_restart(self, name: str) -> None:
        """The node loses all its soft state; its clock survives in its store."""
        self._crashed(name)
        self._start(name)
        self.net.flush(name)

    def _crashed(self, name: str) -> None:
        self.crash_times.append(self.net.now)
        self.crashes[name].append(self.net.now)
        # What the node itself had sent and not seen delivered dies with its application;
        # messages *to* it stay owed: delivered by the next incarnation, or reported.
        led = self.ledger
        led.owed = {k for k in led.owed if k[0] != name}

    def when_delivered(self, count: int, action: Callable[[], None], period: float = 0.002
                       ) -> None:
        """Run ``action`` once ``count`` messages were delivered in all (mid-stream events that
        do not depend on how fast virtual time runs)."""
        def poll() -> None:
            if self.ledger.delivered.total() >= count:
                action()
            else:
                self.net.at(self.net.now + period, poll)
        self.net.at(self.net.now + period, poll)

    def close_restart(self, name: str, timeout: float = 30.0, period: float = 0.01,
                      then: Callable[[], None] | None = None) -> None:
        """Close the node gracefully, keep it running until it is closed, then start its next
        incarnation (same store) and call ``then``. A close that does not finish within
        ``timeout`` counts as a crash."""
        app = self.apps[name]
        app.proto.close(self.net.now)
        self.net.flush(name)
        deadline = self.net.now + timeout

        def poll() -> None:
            if self.apps.get(name) is not app:
                return
            if app.proto.is_closed():
                self.graceful_restarts += 1
                app.drain(self.net.now)
            elif self.net.now < deadline:
                self.net.at(self.net.now + period, poll)
                return
            else:
                self._crashed(name)
            self._start(name)
            self.net.flush(name)
            if then is not None:
                then()

        self.net.at(self.net.now + period, poll)

    def finished(self) -> bool:
        led = self.ledger
        if led.owed or not all(a.done_sending() for a in self.apps.values()):
            return False
        return all(a.proto.in_flight() == 0 for a in self.apps.values())

    def run(self, max_time: float = 3600.0, max_steps: int = 20_000_000) -> None:
        self.kick()
        self.tick(0.05, max_time)
        self.net.run_until(self.finished, max_time, max_steps, what="all messages delivered")

    def check(self) -> dict[str, int]:
        """Assert exactly-once; across restarts: never a duplicate, never a silent loss (each
        message delivered, or reported unknown by its sender, or its sender crashed after
        sending it). Return the counts."""
        led = self.ledger
        seed = self.net.seed
        dups, phantoms = led.duplicates(), led.phantoms
        reported = led.unknown + led.not_delivered
        twice = sum(c - 1 for c in reported.values() if c > 1)
        undelivered_but = [k for k in led.not_delivered if k in led.delivered]
        if dups or phantoms or led.corrupt or twice or undelivered_but:
            raise SimulationError(f"duplicates={dups} phantoms={phantoms} corrupt={led.corrupt}"
                                  f" reported twice={twice} not delivered but delivered="
                                  f"{undelivered_but[:5]} (replay with A3M_SIM_SEED={seed})")
        lost = [k for k in led.lost() if k not in reported
                and not any(t >= led.sent_at[k] for t in self.crashes[k[0]])]
        if lost:
            raise SimulationError(f"{len(lost)} lost silently, e.g. {lost[:5]} "
                                  f"(replay with A3M_SIM_SEED={seed})")
        return {"sent": len(led.sent), "delivered": sum(led.delivered.values()),
                "lost_before_crash": len(led.lost()) if self.crash_times else 0,
                "unknown": len(led.unknown),
                "unknown_delivered": sum(1 for k in led.unknown if k in led.delivered),
                "not_delivered": len(led.not_delivered),
                "unreachable": sum(a.unreachable for a in self.apps.values()),
                "reachable": sum(a.reachable for a in self.apps.values()),
                "graceful_restarts": self.graceful_restarts}

    def quiesce(self, duration: float) -> None:
        """Let timers run with no new traffic (releases, probes, discards)."""
        self.net.run_for(duration)

    def records(self) -> dict[str, tuple[int, int]]:
        return {n: a.proto.record_counts() for n, a in self.apps.items()}
