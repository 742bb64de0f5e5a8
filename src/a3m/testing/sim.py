"""A deterministic network simulator for sans-I/O hosts, with a virtual clock.

One ``random.Random(seed)`` drives every choice and a heap of ``(time, sequence, event)`` orders
every event, so a seed replays exactly. Hosts are any objects with the Exon driving surface::

    receive_datagram(data, addr, now)   datagrams_to_send(now) -> [(bytes, addr)]
    next_timer() -> float | None        handle_timer(now)

Addresses are strings (``"alpha@1"``); a host can move to a new address mid-run. The network
model (per direction, or a default) has loss, duplication, reordering (extra random delay),
base delay and jitter, a bottleneck (a rate and a tail-drop queue of so many seconds of
transmission, as the TUN emulator's ``a3m.testing.netem``), a bounded in-flight queue, and
partitions that heal at a given time. A host may be given a :class:`HostCpu`: then its work
takes virtual time (per datagram read and sent), what arrives while it is busy waits in a
bounded socket queue, and what finds the queue full is dropped, as a kernel drops what a busy
process does not read in time.

Replay a failing seed with the environment variable ``A3M_SIM_SEED``.
"""

from __future__ import annotations

import heapq
import os
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from random import Random
from typing import Any, Protocol


class Host(Protocol):
    def receive_datagram(self, data: bytes, addr: Any, now: float) -> None: ...
    def datagrams_to_send(self, now: float) -> list[tuple[bytes, Any]]: ...
    def next_timer(self) -> float | None: ...
    def handle_timer(self, now: float) -> None: ...


@dataclass(frozen=True)
class LinkModel:
    """Faults on datagrams travelling one way between two hosts (or everywhere, as default)."""

    loss: float = 0.0
    dup: float = 0.0
    reorder: float = 0.0  # probability that a datagram gets an extra random delay
    reorder_delay_s: float = 0.05
    delay_s: float = 0.001
    jitter_s: float = 0.0005
    #: A bottleneck: datagrams leave one after the other at this many bytes per second (0:
    #: none), after waiting in a queue that holds ``queue_s`` of transmission; a datagram that
    #: finds it full is dropped (counted ``queue_drops``).
    rate_bytes_s: float = 0.0
    queue_s: float = 0.0

    def scaled(self, **changes: float) -> LinkModel:
        return replace(self, **changes)


@dataclass(frozen=True)
class HostCpu:
    """What a host's work costs in virtual time: each datagram it reads ``rx_s``, each it sends
    ``tx_s``; datagrams that arrive while it is busy wait in its socket queue, at most
    ``queue`` of them (beyond, dropped: ``Network.rx_drops``), and its timers wait too."""

    rx_s: float
    tx_s: float = 0.0
    queue: int = 1000


@dataclass
class SimStats:
    sent: int = 0
    delivered: int = 0
    lost: int = 0
    duplicated: int = 0
    reordered: int = 0
    partitioned: int = 0
    misaddressed: int = 0
    overflow: int = 0
    queue_drops: int = 0
    timers: int = 0
    steps: int = 0


class SimulationError(AssertionError):
    """A run hit its bounds or broke an invariant; the message names the seed to replay."""


def seed_from_env(default: int) -> int:
    """The seed to use: ``A3M_SIM_SEED`` when set (replaying a failure), else ``default``."""
    value = os.environ.get("A3M_SIM_SEED")
    return int(value) if value else default


@dataclass
class _Partition:
    group: frozenset[str]
    start: float
    end: float


@dataclass(order=True)
class _Event:
    time: float
    seq: int
    kind: str = field(compare=False)
    payload: Any = field(compare=False)


class Network:
    """Carries datagrams between named hosts in virtual time."""

    def __init__(self, seed: int, default: LinkModel | None = None, max_in_flight: int = 200_000,
                 log: Callable[[str], None] | None = None) -> None:
        self.seed = seed
        self.rng = Random(seed)
        self.now = 0.0
        self.default = default or LinkModel()
        self.links: dict[tuple[str, str], LinkModel] = {}
        self.hosts: dict[str, Host] = {}
        self.address: dict[str, str] = {}  # host name -> current address
        self._by_addr: dict[str, str] = {}  # address -> host name
        self._moves: dict[str, int] = {}
        self._queue: list[_Event] = []
        self._seq = 0
        self._timer_at: dict[str, float] = {}
        self._link_free: dict[tuple[str, str], float] = {}  # a bottleneck's next idle time
        self._partitions: list[_Partition] = []
        self.max_in_flight = max_in_flight
        self.in_flight = 0
        self.stats = SimStats()
        self._log = log
        #: Hosts whose work takes time (``set_cpu``): their model, when each is busy until,
        #: their socket queues, and what each queue dropped.
        self.cpus: dict[str, HostCpu] = {}
        self._busy_until: dict[str, float] = {}
        self._rxq: dict[str, deque[tuple[Any, str, Any, bytes]]] = {}
        self.rx_drops: dict[str, int] = {}
        #: Datagrams each host sent (every host, counted at ``flush``).
        self.sent_by: dict[str, int] = {}

    # ------------------------------------------------------------------ topology

    def add(self, name: str, host: Host) -> str:
        """Attach a host; returns its address."""
        addr = f"{name}@0"
        self.hosts[name] = host
        self.address[name] = addr
        self._by_addr[addr] = name
        self._moves[name] = 0
        self._rearm(name)
        return addr

    def remove(self, name: str) -> None:
        """Detach a host (a crash): datagrams to it are lost from now on."""
        self.hosts.pop(name, None)
        addr = self.address.pop(name, None)
        if addr is not None:
            self._by_addr.pop(addr, None)
        self._timer_at.pop(name, None)

    def replace_host(self, name: str, host: Host) -> None:
        """A restarted host at the same address."""
        self.hosts[name] = host
        self.address.setdefault(name, f"{name}@{self._moves.get(name, 0)}")
        self._by_addr[self.address[name]] = name
        self._rearm(name)

    def move(self, name: str) -> str:
        """Give a host a new address; datagrams to the old one are lost from now on."""
        old = self.address[name]
        self._by_addr.pop(old, None)
        self._moves[name] += 1
        new = f"{name}@{self._moves[name]}"
        self.address[name] = new
        self._by_addr[new] = name
        self.log(f"{name} moves {old} -> {new}")
        return new

    def set_cpu(self, name: str, cpu: HostCpu) -> None:
        """Make ``name``'s work take virtual time from now on (see :class:`HostCpu`)."""
        self.cpus[name] = cpu
        self._busy_until.setdefault(name, self.now)
        self._rxq.setdefault(name, deque())
        self.rx_drops.setdefault(name, 0)

    def set_link(self, src: str, dst: str, model: LinkModel) -> None:
        self.links[(src, dst)] = model

    def partition(self, group: set[str], start: float, end: float) -> None:
        """Between ``start`` and ``end`` nothing crosses between ``group`` and the others."""
        self._partitions.append(_Partition(frozenset(group), start, end))

    def log(self, msg: str) -> None:
        if self._log is not None:
            self._log(f"[t={self.now:.6f} seed={self.seed}] {msg}")

    # ------------------------------------------------------------------ running

    def _push(self, t: float, kind: str, payload: Any) -> None:
        self._seq += 1
        heapq.heappush(self._queue, _Event(t, self._seq, kind, payload))

    def _rearm(self, name: str) -> None:
        host = self.hosts.get(name)
        if host is None:
            return
        t = host.next_timer()
        if t is None:
            self._timer_at.pop(name, None)
            return
        t = max(t, self.now)
        if self._timer_at.get(name) != t:
            self._timer_at[name] = t
            self._push(t, "timer", (name, t))

    def _cut(self, a: str, b: str, t: float) -> bool:
        for p in self._partitions:
            if p.start <= t < p.end and ((a in p.group) != (b in p.group)):
                return True
        return False

    def flush(self, name: str) -> None:
        """Collect a host's output and schedule its arrivals; re-arm its timer."""
        host = self.hosts.get(name)
        if host is None:
            return
        rng, st = self.rng, self.stats
        out = host.datagrams_to_send(self.now)
        if out:
            self.sent_by[name] = self.sent_by.get(name, 0) + len(out)
            cpu = self.cpus.get(name)
            if cpu is not None:
                self._busy_until[name] = max(self._busy_until[name], self.now) + cpu.tx_s * len(out)
        for data, addr in out:
            st.sent += 1
            dst = self._by_addr.get(addr) if isinstance(addr, str) else None
            model = self.links.get((name, dst or ""), self.default)
            if rng.random() < model.loss:
                st.lost += 1
                continue
            base = model.delay_s
            if model.rate_bytes_s:
                key = (name, dst or "")
                start = max(self.now, self._link_free.get(key, 0.0))
                if start - self.now > model.queue_s:
                    st.queue_drops += 1
                    continue
                free = start + len(data) / model.rate_bytes_s
                self._link_free[key] = free
                base += free - self.now  # queued, then transmitted
            copies = 2 if rng.random() < model.dup else 1
            st.duplicated += copies - 1
            for _ in range(copies):
                if self.in_flight >= self.max_in_flight:
                    st.overflow += 1
                    continue
                delay = base + rng.random() * model.jitter_s
                if rng.random() < model.reorder:
                    st.reordered += 1
                    delay += rng.random() * model.reorder_delay_s
                self.in_flight += 1
                self._push(self.now + delay, "dgram", (self.address.get(name), name, addr, data))
        self._rearm(name)

    def step(self) -> bool:
        """Process the next event; False when nothing is left."""
        if not self._queue:
            return False
        ev = heapq.heappop(self._queue)
        self.now = max(self.now, ev.time)
        self.stats.steps += 1
        if ev.kind == "timer":
            name, t = ev.payload
            if self._timer_at.get(name) != t or name not in self.hosts:
                return True
            busy = self._busy_until.get(name, 0.0)
            if busy > self.now:
                self._push(busy, "timer", (name, t))  # it is working: the timer waits
                return True
            del self._timer_at[name]
            self.stats.timers += 1
            self.hosts[name].handle_timer(self.now)
            self.flush(name)
        elif ev.kind == "dgram":
            self.in_flight -= 1
            src_addr, src_name, dst_addr, data = ev.payload
            dst = self._by_addr.get(dst_addr)
            if dst is None:
                self.stats.misaddressed += 1
                return True
            if self._cut(src_name, dst, self.now):
                self.stats.partitioned += 1
                return True
            self.stats.delivered += 1
            if dst in self.cpus:
                self._queued(dst, ev.payload)
                return True
            self.hosts[dst].receive_datagram(data, src_addr, self.now)
            self.flush(dst)
        elif ev.kind == "serve":
            self._serve(ev.payload)
        else:  # "call": a scheduled action
            ev.payload()
        return True

    def _queued(self, name: str, dgram: tuple[Any, str, Any, bytes]) -> None:
        """A datagram reached a host with a CPU model: into its socket queue (or dropped)."""
        q = self._rxq[name]
        if len(q) >= self.cpus[name].queue:
            self.rx_drops[name] += 1
            return
        q.append(dgram)
        if len(q) == 1:
            self._push(max(self.now, self._busy_until[name]), "serve", name)

    def _serve(self, name: str) -> None:
        """The host reads the datagram at the head of its queue (its work takes rx_s)."""
        q = self._rxq.get(name)
        host = self.hosts.get(name)
        if not q or host is None:
            return
        busy = self._busy_until[name]
        if busy > self.now:
            self._push(busy, "serve", name)
            return
        src_addr, _, _, data = q.popleft()
        self._busy_until[name] = self.now + self.cpus[name].rx_s
        host.receive_datagram(data, src_addr, self.now)
        self.flush(name)
        if q:
            self._push(self._busy_until[name], "serve", name)

    def at(self, t: float, action: Callable[[], None]) -> None:
        """Run ``action`` at virtual time ``t``."""
        self._push(t, "call", action)

    def run_until(self, predicate: Callable[[], bool], max_time: float,
                  max_steps: int = 10_000_000, what: str = "condition") -> None:
        """Step until ``predicate()`` holds; raise :class:`SimulationError` past the bounds."""
        start_steps = self.stats.steps
        while not predicate():
            if self.stats.steps - start_steps > max_steps:
                raise SimulationError(f"{what}: step bound hit at t={self.now:.3f} "
                                      f"(replay with A3M_SIM_SEED={self.seed})")
            if not self.step():
                raise SimulationError(f"{what}: the network went quiet at t={self.now:.3f} "
                                      f"(replay with A3M_SIM_SEED={self.seed})")
            if self.now > max_time:
                raise SimulationError(f"{what}: not reached by t={max_time} "
                                      f"(replay with A3M_SIM_SEED={self.seed})")

    def run_for(self, duration: float) -> None:
        """Advance virtual time by ``duration``, processing everything due."""
        end = self.now + duration
        while self._queue and self._queue[0].time <= end:
            self.step()
        self.now = max(self.now, end)
