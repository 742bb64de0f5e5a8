"""A fault-injecting UDP relay for tests, the demo and ``a3m chaos``.

Real sockets, seeded faults. For each target node the relay opens a *front* address that
others use instead of the target's own; for each client address and target, a *back* socket
that stands for that client toward that target. Every datagram crossing the relay, either way,
may be lost, duplicated or held back (reordered) according to the probabilities given, and
every one may be held a fixed ``delay_s`` (a path's one-way delay)::

    relay = FaultRelay({"beta": beta.address}, loss=0.2, dup=0.1, reorder=0.2, seed=7)
    alpha.associate("beta", relay.front("beta"))
"""

from __future__ import annotations

import heapq
import os
import random
import select
import socket
import threading
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass

Addr = tuple[str, int]


@dataclass
class RelayStats:
    """What the relay did (datagrams)."""

    received: int = 0
    forwarded: int = 0
    dropped: int = 0
    duplicated: int = 0
    reordered: int = 0

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


class FaultRelay:
    """Forward UDP datagrams between clients and targets with seeded loss, duplication and
    reordering (a held-back datagram waits ``reorder_delay_s`` at most, random), each after
    ``delay_s``."""

    def __init__(self, targets: Mapping[str, Addr], *, loss: float = 0.0, dup: float = 0.0,
                 reorder: float = 0.0, reorder_delay_s: float = 0.02, seed: int = 0,
                 host: str = "127.0.0.1", delay_s: float = 0.0) -> None:
        for name, p in (("loss", loss), ("dup", dup), ("reorder", reorder)):
            if not 0.0 <= p <= 1.0:
                raise ValueError(f"{name} must be a probability, got {p}")
        self.loss, self.dup, self.reorder = loss, dup, reorder
        self.reorder_delay_s = reorder_delay_s
        self.delay_s = delay_s
        self.stats = RelayStats()
        self._rng = random.Random(seed)
        self._host = host
        self._lock = threading.Lock()
        self._fronts: dict[str, socket.socket] = {}
        self._front_target: dict[socket.socket, Addr] = {}
        # (client addr, front) -> back socket: one per client and target, so that replies
        # leave through the front the client used
        self._backs: dict[tuple[Addr, socket.socket], socket.socket] = {}
        self._back_client: dict[socket.socket, tuple[Addr, socket.socket]] = {}
        self._held: list[tuple[float, int, socket.socket, bytes, Addr]] = []
        self._seq = 0
        self._wake_r, self._wake_w = os.pipe()
        self._running = True
        for name, addr in targets.items():
            self.add_target(name, addr)
        self._thread = threading.Thread(target=self._run, name="a3m-relay", daemon=True)
        self._thread.start()

    def _socket(self) -> socket.socket:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8 << 20)
        s.bind((self._host, 0))
        s.setblocking(False)
        return s

    def add_target(self, name: str, addr: Addr) -> Addr:
        """Open a front address for a target; returns it."""
        with self._lock:
            s = self._socket()
            self._fronts[name] = s
            self._front_target[s] = (addr[0], int(addr[1]))
        self._poke()
        return self.front(name)

    def front(self, name: str) -> Addr:
        """The address others should use to reach target ``name`` through the relay."""
        host, port = self._fronts[name].getsockname()[:2]
        return host, port

    def close(self) -> None:
        self._running = False
        self._poke()
        self._thread.join(timeout=5)
        for s in [*self._fronts.values(), *self._backs.values()]:
            s.close()
        os.close(self._wake_r)
        os.close(self._wake_w)

    def __enter__(self) -> FaultRelay:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _poke(self) -> None:
        try:
            os.write(self._wake_w, b"\0")
        except OSError:
            pass

    def _forward(self, out: socket.socket, data: bytes, dst: Addr, now: float) -> None:
        rng, st = self._rng, self.stats
        if rng.random() < self.loss:
            st.dropped += 1
            return
        copies = 2 if rng.random() < self.dup else 1
        if copies == 2:
            st.duplicated += 1
        for _ in range(copies):
            delay = self.delay_s
            if rng.random() < self.reorder:
                st.reordered += 1
                delay += rng.random() * self.reorder_delay_s
            if delay > 0:
                self._seq += 1
                heapq.heappush(self._held, (now + delay, self._seq, out, data, dst))
            else:
                self._send(out, data, dst)

    def _send(self, out: socket.socket, data: bytes, dst: Addr) -> None:
        self.stats.forwarded += 1  # counted first: a fast receiver may look at once
        try:
            out.sendto(data, dst)
        except OSError:
            self.stats.forwarded -= 1
            self.stats.dropped += 1

    def _run(self) -> None:
        while self._running:
            with self._lock:
                socks = [*self._fronts.values(), *self._backs.values()]
            timeout = 0.2
            if self._held:
                timeout = max(0.0, min(timeout, self._held[0][0] - time.monotonic()))
            try:
                readable, _, _ = select.select([*socks, self._wake_r], [], [], timeout)
            except (OSError, ValueError):
                continue
            now = time.monotonic()
            for s in readable:
                if s == self._wake_r:
                    try:
                        os.read(self._wake_r, 4096)
                    except OSError:
                        pass
                    continue
                self._drain(s, now)
            held = self._held
            while held and held[0][0] <= now:
                _, _, out, data, dst = heapq.heappop(held)
                self._send(out, data, dst)

    def _drain(self, s: socket.socket, now: float) -> None:
        for _ in range(256):
            try:
                data, src = s.recvfrom(65536)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            self.stats.received += 1
            target = self._front_target.get(s)
            if target is not None:  # client -> target, via the client's back socket
                back = self._backs.get((src, s))
                if back is None:
                    with self._lock:
                        back = self._backs[(src, s)] = self._socket()
                        self._back_client[back] = (src, s)
                self._forward(back, data, target, now)
            else:  # target -> client, out of the front the client used
                client, front = self._back_client[s]
                self._forward(front, data, client, now)
