"""The UDP driver: one I/O thread that feeds a sans-I/O Exon protocol and flushes its output.

The loop is aioquic's, on a thread: wait for the socket, a wake-up or the one timer; drain every
readable datagram; run due timers; hand events to the layer above; send what the protocol has
batched. Application threads call into the protocol under the driver's lock and wake the
thread only when it sleeps, so under load their messages leave in shared datagrams.

Measured on this machine (docs/performance.md): a dedicated thread with non-blocking
``recvfrom_into`` drained in bursts beats selectors and asyncio loops for UDP blasts.
"""

from __future__ import annotations

import logging
import os
import select
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from a3m.errors import Closed
from a3m.exon.events import Event
from a3m.exon.protocol import ExonProtocol

log = logging.getLogger("a3m.runtime")

#: Datagrams drained per wake-up before timers and output get their turn.
DRAIN_BURST = 512
#: Socket buffers asked of the kernel (it may grant less).
SOCKET_BUFFER_BYTES = 8 << 20

EventHandler = Callable[[list[Event], float], None]


def parse_bind(bind: str | tuple[str, int]) -> tuple[str, int]:
    """``"127.0.0.1:0"`` or ``("127.0.0.1", 0)`` -> ``("127.0.0.1", 0)``."""
    if isinstance(bind, tuple):
        return bind[0], int(bind[1])
    host, sep, port = bind.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"bind address must look like 'host:port', got {bind!r}")
    return host.strip("[]") or "0.0.0.0", int(port)


def open_udp(bind: tuple[str, int]) -> socket.socket:
    family = socket.AF_INET6 if ":" in bind[0] else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_DGRAM)
    for opt in (socket.SO_RCVBUF, socket.SO_SNDBUF):
        try:
            sock.setsockopt(socket.SOL_SOCKET, opt, SOCKET_BUFFER_BYTES)
        except OSError:
            pass
    sock.bind(bind)
    sock.setblocking(False)
    return sock


class Driver:
    """Runs an :class:`ExonProtocol` over one UDP socket on a dedicated thread.

    ``lock`` guards the protocol and whatever the event handler touches; ``cond`` (on that lock)
    is notified after every batch of events, so blocked application calls re-check their state.
    """

    def __init__(self, proto: ExonProtocol, bind: str | tuple[str, int],
                 on_events: EventHandler, name: str = "a3m-io",
                 upper_timer: Callable[[], float | None] | None = None,
                 on_turn: Callable[[float], None] | None = None) -> None:
        self.proto = proto
        self._upper_timer = upper_timer
        self._on_turn = on_turn
        self.lock = threading.Lock()
        self.cond = threading.Condition(self.lock)
        self._on_events = on_events
        self._sock = open_udp(parse_bind(bind))
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._sleeping = False
        self._sleep_until = 0.0
        self._running = True
        self.io_errors = 0
        self.loop_errors = 0
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    @property
    def address(self) -> tuple[str, int]:
        host, port = self._sock.getsockname()[:2]
        return host, port

    def wake(self) -> None:
        """Make the I/O thread flush soon (cheap when it is already busy). Call under lock."""
        if self._sleeping:
            self._sleeping = False
            try:
                os.write(self._wake_w, b"\0")
            except BlockingIOError:
                pass

    def flush(self) -> None:
        """Under the lock: send what the protocol has now, from the calling thread, when the
        I/O thread sleeps (a lone request leaves at once instead of after a thread hand-off;
        under load the I/O thread is awake and batches instead). Wakes the I/O thread only
        if the protocol now has an earlier deadline than the one it sleeps until."""
        if not self._sleeping:
            return
        proto = self.proto
        now = time.monotonic()
        sock = self._sock
        for data, addr in proto.datagrams_to_send(now):
            try:
                sock.sendto(data, addr)
            except OSError:
                self.io_errors += 1
        deadline = proto.next_timer()
        if self._upper_timer is not None:
            upper = self._upper_timer()
            if upper is not None and (deadline is None or upper < deadline):
                deadline = upper
        if deadline is not None and deadline < self._sleep_until:
            self.wake()

    def rebind(self, bind: str | tuple[str, int]) -> None:
        """Move to another local address; peers learn it from our next datagrams."""
        new = open_udp(parse_bind(bind))
        with self.lock:
            old, self._sock = self._sock, new
            self.proto.announce(time.monotonic())
            self.wake()
        old.close()

    def call(self, fn: Callable[[], Any]) -> Any:
        """Run ``fn`` under the lock, then wake the I/O thread to flush what it queued."""
        with self.lock:
            result = fn()
            self.wake()
            return result

    def stop(self) -> None:
        """Stop the thread and close the socket (idempotent)."""
        with self.lock:
            if not self._running:
                return
            self._running = False
            self._sleeping = True
            self.wake()
        self._thread.join(timeout=5)
        self._sock.close()
        os.close(self._wake_r)
        os.close(self._wake_w)

    @property
    def running(self) -> bool:
        return self._running

    def check_open(self) -> None:
        if not self._running:
            raise Closed("closed")

    # ------------------------------------------------------------------ the I/O thread

    def _run(self) -> None:
        proto = self.proto
        buf = bytearray(65536)
        view = memoryview(buf)
        while True:
            with self.lock:
                if not self._running:
                    break
                deadline = proto.next_timer()
                if self._upper_timer is not None:
                    upper = self._upper_timer()
                    if upper is not None and (deadline is None or upper < deadline):
                        deadline = upper
                if proto.has_output():
                    timeout = 0.0
                elif deadline is None:
                    timeout = 1.0
                else:
                    timeout = max(0.0, deadline - time.monotonic())
                self._sleeping = True
                self._sleep_until = time.monotonic() + min(timeout, 1.0)
                sock = self._sock
            if timeout > 0:
                try:
                    select.select([sock, self._wake_r], [], [], min(timeout, 1.0))
                except (OSError, ValueError):
                    pass  # the socket was swapped by rebind or closed by stop
            try:
                self._turn(buf, view)
            except Exception:  # never let the I/O thread die silently
                self.loop_errors += 1
                log.exception("a3m I/O loop error (counted, loop continues)")

    def _turn(self, buf: bytearray, view: memoryview) -> None:
        proto = self.proto
        try:
            os.read(self._wake_r, 4096)
        except (BlockingIOError, OSError):
            pass
        with self.lock:
            self._sleeping = False
            sock = self._sock  # read under the lock: rebind may have swapped it
            now = time.monotonic()
            recv = sock.recvfrom_into
            feed = proto.receive_datagram
            for _ in range(DRAIN_BURST):
                try:
                    n, addr = recv(buf)
                except (BlockingIOError, InterruptedError):
                    break
                except OSError:
                    self.io_errors += 1  # e.g. ICMP port unreachable surfacing as an error
                    break
                feed(bytes(view[:n]), addr, now)
            proto.handle_timer(now)
            events = proto.drain_events()
            if events:
                self._on_events(events, now)
            if self._on_turn is not None:
                self._on_turn(now)
            if events:
                self.cond.notify_all()
            out = proto.datagrams_to_send(now)
        send = sock.sendto
        for data, addr in out:
            try:
                send(data, addr)
            except BlockingIOError:
                self.io_errors += 1  # the kernel buffer is full: the timer retransmits
            except OSError:
                self.io_errors += 1
