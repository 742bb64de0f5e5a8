"""The asyncio driver: the node's UDP socket on the event loop, no I/O thread.

The loop is aioquic's: the socket's reader callback (``loop.add_reader``) drains every readable
datagram in a burst (``recvfrom`` until it would block, as the threaded driver does), runs
due timers, hands events to the layer above and sends what the protocol batched; the one
protocol timer is a ``loop.call_at`` handle. The sans-I/O cores are called in the loop's
own thread: no thread hand-off and no wake-up pipe on the hot path. A coroutine that waits
(``a3m.aio``) awaits a future that the turn resolves when something changed (``notify_all``).

It keeps :class:`a3m.runtime.driver.Driver`'s interface towards the node (``lock``, ``wake``,
``wake_by``, ``flush``, ``notify_all``, ``wait``...), so :class:`a3m.runtime.node.Node` and
its sockets run on it unchanged (``a3m.aio.node``). The lock stays: it is never contended
while everything runs on the loop, and it lets a worker thread use the blocking API of the
same node (``asyncio.to_thread(sock.sync.recv)``); such a thread waits on the condition, and
what it asks of the loop goes through ``call_soon_threadsafe``. A blocking call made on the
loop's own thread would stall the loop: it raises :class:`~a3m.errors.UsageError` instead.

Closing: :meth:`LoopDriver.close_protocol` is awaited; after a clean close the linger (answer
the peers' late frames until the protocol is finished, docs/exon-wire.md) is handed to a
threaded :class:`~a3m.runtime.driver.Driver` that adopts the socket, so that it outlives the
event loop (``asyncio.run`` returns at once).
"""

from __future__ import annotations

import asyncio
import logging
import os
import select
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from a3m.errors import Closed, UsageError
from a3m.exon.engine import Transport
from a3m.exon.events import Event
from a3m.runtime.driver import (
    DRAIN_BURST,
    MAX_SLEEP_S,
    RECV_BYTES,
    Driver,
    EventHandler,
    _drop_events,
    _readable,
    end_lingering,
    given_up,
    open_udp,
    parse_bind,
    protocol_step,
    udp_drops,
    wait_steps,
)
from a3m.runtime.offload import native_read, offload_for, turn_io
from a3m.runtime.poll_choice import PREEMPTED_S, PollChoice

log = logging.getLogger("a3m.aio")

_INF = float("inf")


def _wake(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


class LoopDriver:
    """Runs an Exon engine (:class:`~a3m.exon.engine.Transport`) over one UDP socket from the running event loop."""

    def __init__(self, proto: Transport, bind: str | tuple[str, int],
                 on_events: EventHandler, name: str = "a3m-aio",
                 upper_timer: Callable[[], float | None] | None = None,
                 on_turn: Callable[[float], None] | None = None,
                 upper_output: Callable[[], bool] | None = None,
                 busy_poll_s: float = 0.0) -> None:
        try:
            self.loop = asyncio.get_running_loop()
        except RuntimeError:
            raise UsageError("an a3m.aio node is created in a coroutine: the running event "
                             "loop drives it") from None
        self.proto = proto
        self.name = name
        self._on_events = on_events
        self._upper_timer = upper_timer
        self._on_turn = on_turn
        self._upper_output = upper_output
        self.lock = threading.Lock()
        self.cond = threading.Condition(self.lock)
        self._tid = threading.get_ident()  # the loop's thread
        self._events: deque[Event] = deque()
        self._buf = bytearray(65536)
        self._view = memoryview(self._buf)
        self._futures: list[asyncio.Future[None]] = []  # coroutines waiting for a change
        self._waiters = 0  # worker threads in cond.wait
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = _INF
        #: The waiting coroutines' safety net (``changed``): armed by a wait without a
        #: shorter timeout of its own when none is, it wakes them all within MAX_SLEEP_S.
        self._net: asyncio.TimerHandle | None = None
        self._soon = False  # a turn is scheduled with call_soon
        self._tail_soon = False  # a turn's end waits for the coroutines it woke (see _turn)
        self.eager_wakes = 0  # turns that ran the coroutines they woke (_run_woken)
        #: No turn is running (the threaded driver's flag, under its name: the node reads it
        #: inline, ``drv._sleeping or not drv._running``).
        self._sleeping = True
        self._running = True
        #: The threaded driver's flag, read inline by the sockets (``not drv._running or
        #: drv._lingering`` is ``not drv.running`` without a call): never set here, the
        #: linger is handed to a threaded driver (see close_protocol).
        self._lingering = False
        #: The threaded driver's leading thread, read inline by the node (``drv._waiters or
        #: drv._leader is not None or drv._futures``: someone to notify): none here.
        self._leader: int | None = None
        self.io_errors = 0
        self.loop_errors = 0
        self.event_errors = 0
        self.turns = 0  # (diagnostics)
        #: The threaded driver that took the linger over after a clean close (see linger).
        self.lingerer: Driver | None = None
        # Busy poll (ExonConfig.busy_poll_s, as the threaded driver's leader): after a request
        # or a reply left, while a coroutine waits and nothing else is ready, look whether any
        # file of the loop is readable for up to the budget before the loop sleeps (an idle
        # CPU takes tens of microseconds to wake). Only on asyncio's selector loops, whose
        # epoll file says "something of the loop is ready" and whose queue says "nothing
        # else to run"; the choice is learnt per driver (PollChoice), as the leader's is.
        self._busy_poll_s = busy_poll_s
        self._poll_choice = PollChoice(busy_poll_s)
        self._loop_ready: Any = getattr(self.loop, "_ready", None)
        self._any_ready: Callable[[int], list[Any]] | None = None
        selector = getattr(self.loop, "_selector", None)
        if busy_poll_s > 0 and self._loop_ready is not None and selector is not None:
            poller = select.poll()
            poller.register(selector.fileno(), select.POLLIN)
            self._any_ready = poller.poll
        self._poll_soon = False
        self._wait_t0 = 0.0  # a wait for input began (perf_counter), 0: none measured
        self._wait_polled = False
        self._wait_preempted = False  # its poll lost the CPU to another task (PollChoice)
        self.poll_hits = 0  # polls that input ended (diagnostics)
        where = parse_bind(bind)
        end_lingering(proto.id, where[1])
        self._sock = open_udp(where)
        self.port = self._sock.getsockname()[1]
        self._readable = _readable(self._sock)
        self._io = offload_for(self._sock)  # GSO sends, GRO reads where the kernel has them
        self._fused, self._native_recv, self._output = turn_io(proto, self._io)
        self.loop.add_reader(self._sock.fileno(), self._on_readable)
        #: A loop that shows neither its selector nor its ready queue (uvloop's): the poll
        #: watches the node's own socket, where the awaited answer comes, and cannot see the
        #: loop's other ready callbacks, which may then wait up to ``busy_poll_s`` (polls
        #: stop where they stop paying off: PollChoice).
        self._own_poll = busy_poll_s > 0 and selector is None
        if self._own_poll:
            self._any_ready = self._readable
        self._arm()

    # ------------------------------------------------------------------ the Driver interface

    @property
    def address(self) -> tuple[str, int]:
        host, port = self._sock.getsockname()[:2]
        return host, port

    def rx_drops(self) -> int | None:
        """Datagrams the kernel dropped on this socket (``runtime.driver.udp_drops``)."""
        return udp_drops(self._sock) if self._running else None

    @property
    def running(self) -> bool:
        return self._running

    @property
    def lingering(self) -> bool:
        return False  # handed to a threaded driver (see close_protocol)

    def check_open(self) -> None:
        if not self._running:
            raise Closed("closed")

    @property
    def turn_under_way(self) -> bool:
        """A turn is running (the node calls in from its handlers): it sends what they add."""
        return not self._sleeping

    def wake(self) -> None:
        """Make a turn happen soon (any thread)."""
        if threading.get_ident() != self._tid:
            self._threadsafe(self._schedule_soon)
        elif self._sleeping:
            self._schedule_soon()

    def wake_by(self, t: float) -> None:
        """Make sure a turn happens by the monotonic time ``t``."""
        if t < self._timer_at:
            if threading.get_ident() != self._tid:
                self._threadsafe(self._arm_at, t)
            else:
                self._arm_at(t)

    def flush(self) -> None:
        """Under the lock, after an application call: send what the protocol has now, from
        the calling thread (a lone request leaves at once); its timer may now be earlier."""
        if not self._sleeping or not self._running:
            return  # the turn sends it and re-arms
        proto = self.proto
        if proto.has_output():
            self._send(self._output(time.monotonic()))
            if self._any_ready is not None and not self._poll_soon \
                    and threading.get_ident() == self._tid:
                self._poll_soon = True  # the answer may come soon: see _poll
                self.loop.call_soon(self._poll)
        t = self._deadline()  # (also without output: a send the pacer held back sets one)
        if t is not None and t < self._timer_at:
            self.wake_by(t)

    def notify_all(self) -> None:
        """Something changed: wake the coroutines (and worker threads) that wait."""
        if self._waiters:
            self.cond.notify_all()
        futs = self._futures
        if futs:
            self._futures = []
            if threading.get_ident() == self._tid:
                for fut in futs:
                    if not fut.done():
                        fut.set_result(None)
            else:
                self._threadsafe(self._wake_all, futs)

    def wait_until(self, done: Callable[[], bool], deadline: float | None,
                   step: float = 0.05) -> bool:
        """``Driver.wait_until``, from a worker thread (:meth:`wait` in steps)."""
        return wait_steps(self.wait, done, deadline, step)

    def wait(self, timeout: float | None = None) -> None:
        """Under the lock, from a worker thread: like ``cond.wait`` (spurious returns
        included). On the loop's thread it would stall the loop: UsageError."""
        if threading.get_ident() == self._tid:
            raise UsageError("a blocking call on the event loop's thread would stall the loop:"
                             " await the a3m.aio call instead")
        self._waiters += 1
        try:
            self.cond.wait(MAX_SLEEP_S if timeout is None else min(timeout, MAX_SLEEP_S))
        finally:
            self._waiters -= 1

    def call(self, fn: Callable[[], Any]) -> Any:
        with self.lock:
            result = fn()
            self.wake()
            return result

    def rebind(self, bind: str | tuple[str, int]) -> None:
        """Move to another local address; peers learn it from our next datagrams."""
        where = parse_bind(bind)
        end_lingering(None, where[1])
        new = open_udp(where)
        with self.lock:
            old = self._sock
            self.loop.remove_reader(old.fileno())
            self._sock = new
            self.port = new.getsockname()[1]
            self._readable = _readable(new)
            self._io = offload_for(new)
            self._fused, self._native_recv, self._output = turn_io(self.proto, self._io)
            self.loop.add_reader(new.fileno(), self._on_readable)
            if self._own_poll:
                self._any_ready = self._readable
            self.proto.announce(time.monotonic())
            self.wake()
        old.close()

    # ------------------------------------------------------------------ coroutines waiting

    async def changed(self, timeout: float | None) -> None:
        """Return at the next change (``notify_all``) or after ``timeout`` seconds, and
        within ``MAX_SLEEP_S`` in any case (the safety net: a missed change costs at most
        that; the waiter looks again, with no turn of the node)."""
        fut = self.loop.create_future()
        self._futures.append(fut)
        handle: asyncio.TimerHandle | None = None
        if timeout is not None and timeout < MAX_SLEEP_S:
            handle = self.loop.call_later(timeout, _wake, fut)
        elif self._net is None:
            # No timer of its own: the driver's safety net wakes every waiter within
            # MAX_SLEEP_S (a round trip's waits arm and cancel no timer: each one costs
            # asyncio a handle and a heap push, and the cancelled handles stay in its heap).
            self._net = self.loop.call_later(MAX_SLEEP_S, self._on_net)
        try:
            await fut
        finally:
            if handle is not None:
                handle.cancel()
            if self._futures and self._futures[-1] is fut:
                self._futures.pop()  # woken by its own timer: not left behind in the list
            elif fut in self._futures:
                self._futures.remove(fut)

    async def until(self, done: Callable[[], bool], deadline: float | None,
                    step: float = 0.05) -> bool:
        """Await ``done()`` (checked under the lock) until the monotonic ``deadline``; False
        when it passes first (``Driver.wait_until`` for coroutines)."""
        while True:
            with self.lock:
                if done():
                    return True
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return False
            await self.changed(step if left is None else min(left, step))

    # ------------------------------------------------------------------ closing

    async def close_protocol(self, deadline: float | None,
                             pump: Callable[[float], None] | None = None,
                             pending: Callable[[], bool] | None = None) -> bool:
        """``Driver.close_protocol`` awaited: close the protocol and drive it until
        ``is_closed()`` and nothing is ``pending`` above it, or until ``deadline``; then
        hand the linger over (clean close) or stop."""
        proto = self.proto
        clean = True
        with self.lock:
            abandoned = given_up(proto)
        # What the layer above sent before the close goes into the protocol first: once
        # closing, the protocol refuses sends (what is left above it then goes nowhere).
        while pump is not None and pending is not None and self._running:
            with self.lock:
                pump(time.monotonic())
                held = pending()
                if held:
                    self.wake()
            if not held:
                break
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                break
            await self.changed(0.05 if left is None else min(left, 0.05))
        with self.lock:
            proto.close(time.monotonic())
            self.wake()
        while True:
            with self.lock:
                if pump is not None:
                    pump(time.monotonic())
                done = proto.is_closed() and not (pending is not None and pending())
                if not done:
                    self.wake()
            if done:
                break
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                clean = False
                break
            await self.changed(0.05 if left is None else min(left, 0.05))
        closed = proto.is_closed()
        clean = clean and given_up(proto) == abandoned
        if not closed:  # let the release frames leave
            end = time.monotonic() + 0.05
            while proto.has_output() and time.monotonic() < end:
                self.wake()
                await self.changed(0.005)
        if closed:
            self.linger()
        else:
            self.stop()
        return clean

    def _detach(self) -> bool:
        """Leave the loop (reader, timer); False when already done."""
        with self.lock:
            if not self._running:
                return False
            self._running = False
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            self._timer_at = _INF
            if self._net is not None:
                self._net.cancel()
                self._net = None
            self._on_turn = None
            self._upper_timer = self._upper_output = None
        try:
            self.loop.remove_reader(self._sock.fileno())
        except (RuntimeError, ValueError, OSError):
            pass  # the loop is closed already
        with self.lock:
            self.notify_all()  # waiting calls see the node closed
        return True

    def linger(self) -> None:
        """After a clean close: a threaded driver takes the socket and the protocol and
        answers the peers until ``proto.is_finished()`` (``Driver.linger``)."""
        if self._detach():
            self.lingerer = Driver(self.proto, self.address, _drop_events,
                                   name=f"{self.name}-linger", sock=self._sock)
            self.lingerer.linger()

    def stop(self) -> None:
        """Leave the loop and close the socket (idempotent)."""
        if threading.get_ident() != self._tid and self._running:
            self._threadsafe(self.stop)
            return
        if self._detach():
            self._sock.close()

    # ------------------------------------------------------------------ the turn

    def _threadsafe(self, fn: Callable[..., None], *args: Any) -> None:
        try:
            self.loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:
            pass  # the loop is closed: nothing runs there any more

    def _on_net(self) -> None:
        """The safety net's timer (see :meth:`changed`): every coroutine waiting then looks
        again (the waits since it was armed too: at most MAX_SLEEP_S each, as it should)."""
        self._net = None
        self._wake_all(self._futures)

    def _wake_all(self, futs: list[asyncio.Future[None]]) -> None:
        for fut in futs:
            if not fut.done():
                fut.set_result(None)

    def _poll(self) -> None:
        """After a request or a reply left: when a coroutine waits for the network and the
        loop has nothing else to run, poll the loop's files for up to ``busy_poll_s``
        (``PollChoice`` may choose to sleep instead). Input for any of them ends it; the
        loop's next select then finds it at once."""
        self._poll_soon = False
        if not self._futures or self._loop_ready or not self._running:
            return
        polled = self._poll_choice.poll_next()
        t0 = time.perf_counter()
        self._wait_t0, self._wait_polled = t0, polled
        any_ready = self._any_ready
        if not polled or any_ready is None:
            return
        end = t0 + self._busy_poll_s
        clock = time.perf_counter
        while True:
            if any_ready(0):
                self.poll_hits += 1
                return
            t = clock()
            if t >= end:
                return
            os.sched_yield()  # a peer on this CPU runs now
            if clock() - t > PREEMPTED_S:
                self._wait_preempted = True  # another task had the CPU: see PollChoice

    def _schedule_soon(self) -> None:
        if not self._soon and self._running:
            self._soon = True
            self.loop.call_soon(self._soon_turn)

    def _soon_turn(self) -> None:
        self._soon = False
        self._turn(False)

    def _on_timer(self) -> None:
        self._timer = None
        self._timer_at = _INF
        now = time.monotonic()
        if not self._waiters and not self.proto.has_output():
            t = self._deadline()
            if t is None or t > now:  # early: the deadline moved later (lazy timer)
                if t is not None:
                    self._arm_at(t)
                return
        self._turn(False)

    def _on_readable(self) -> None:
        self._turn(True)

    def _deadline(self) -> float | None:
        deadline = self.proto.next_timer()
        if self._upper_timer is not None:
            upper = self._upper_timer()
            if upper is not None and (deadline is None or upper < deadline):
                deadline = upper
        return deadline

    def _arm_at(self, t: float) -> None:
        """On the loop's thread: the timer fires by ``t`` (an earlier one stays)."""
        if t >= self._timer_at or not self._running:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = t
        loop = self.loop  # (its clock may not be time.monotonic: uvloop's is not)
        self._timer = loop.call_at(loop.time() + max(0.0, t - time.monotonic()),
                                   self._on_timer)

    def _arm(self) -> None:
        """After a turn: the next one when the protocol or the node needs it (the node's
        periodic work is in its deadline), and within ``MAX_SLEEP_S`` while a worker thread
        waits on the condition (its safety net; a coroutine's is in :meth:`changed`). A node
        with nothing to do has no timer at all: a process holding thousands of idle nodes
        does not wake each of them every second."""
        if self.proto.has_output():
            self._schedule_soon()
            return
        t = self._deadline()
        if self._waiters:
            cap = time.monotonic() + MAX_SLEEP_S
            if t is None or t > cap:
                t = cap
        if t is not None:
            self._arm_at(t)

    def _send(self, out: Any) -> None:
        # a full kernel buffer (the timer retransmits), ICMP errors: counted
        if out:
            self.io_errors += self._io.send(out)

    def _record_wait(self) -> None:
        """The input a measured wait waited for came: tell the poll choice how long."""
        self._poll_choice.record(self._wait_polled, time.perf_counter() - self._wait_t0,
                                 self._wait_preempted)
        self._wait_t0 = 0.0
        self._wait_preempted = False

    def _turn(self, readable: bool) -> None:
        """Read what waits, run timers, handle events, send: one turn, on the loop.
        ``readable``: the reader callback's turn (a datagram waits); other turns look
        before they read, and every turn looks before a second read: a read that finds
        nothing costs a system call and a raised exception."""
        if not self._running:
            return
        proto = self.proto
        self.turns += 1
        with self.lock:
            self._sleeping = False
            try:
                buf = self._buf
                io = self._io
                native_recv = self._native_recv
                fused = self._fused
                # the native data plane's read (none: the Python twin's loop below)
                batch, got, fused_now, errors = native_read(fused, native_recv, io,
                                                            DRAIN_BURST)
                self.io_errors += errors
                if fused is not None:
                    native_recv = None
                if (got or batch) and self._wait_t0:  # the input a measured wait waited for
                    self._record_wait()
                if native_recv is None and fused is None:  # the Python twin's reads
                    recv = self._sock.recvfrom
                    coalesced = io.reader(buf) if io.gro else None
                    look = self._readable
                    for i in range(DRAIN_BURST):
                        if (i == 1 or (i == 0 and not readable)) and not look(0):
                            break
                        try:
                            if coalesced is None:
                                batch.append(recv(RECV_BYTES))  # (the threaded turn's way)
                            else:
                                batch.extend(coalesced())
                        except (BlockingIOError, InterruptedError):
                            break
                        except OSError:
                            self.io_errors += 1  # e.g. ICMP port unreachable surfacing
                            break
                        if i == 0 and self._wait_t0:  # the input a measured wait waited for
                            self._record_wait()
                        if len(batch) >= DRAIN_BURST:
                            break
                # after the reads (the threaded driver says why)
                now = time.monotonic() if fused_now is None else fused_now
                errors, changed = protocol_step(proto, batch, self._events, self._on_events,
                                                self._on_turn, now)
                self.event_errors += errors
                woke = False
                ready_before = 0
                if changed:
                    woke = bool(self._futures)
                    if woke and self._loop_ready is not None:
                        ready_before = len(self._loop_ready)
                    self.notify_all()
                # The coroutines just woken run first (at once on asyncio's own loops,
                # ``_run_woken``; else next, their wake-ups ahead in the loop's queue): the
                # turn's output and timer wait for them (``_tail``), off the path of a request
                # to its reply. What they send takes that output with theirs.
                out = [] if woke else self._output(now)
            except Exception:  # never let an error escape into the event loop
                self.loop_errors += 1
                log.exception("a3m asyncio driver error (counted, loop continues)")
                out = []
                woke = False
            finally:
                self._sleeping = True
            if not woke:
                if out:
                    self._send(out)
                if self._running:
                    self._arm()
                return
            pending = self._tail_soon
            self._tail_soon = True  # (until the tail: the woken see it pending)
        # The lock released (the woken coroutines take it):
        ready = self._loop_ready
        if ready is not None and not ready_before and ready \
                and asyncio.current_task(self.loop) is None:
            try:
                self._run_woken(ready)
            finally:  # (a KeyboardInterrupt or SystemExit a coroutine raised leaves none due)
                self._tail()
        elif not pending:
            self.loop.call_soon(self._tail)

    def _run_woken(self, ready: Any) -> None:
        """On asyncio's own loops, from a turn run by a loop callback (no task current): run
        the wake-ups the turn's ``notify_all`` just queued (``ready`` held nothing before
        them), as the loop's next iteration would run them first, minus that iteration (a
        ``select(0)`` system call and the loop's bookkeeping, on the path of every request
        and reply). A handle a wake-up queues meanwhile waits for the loop, as ever."""
        for _ in range(len(ready)):
            handle = ready.popleft()
            if not handle._cancelled:
                handle._run()
        self.eager_wakes += 1

    def _tail(self) -> None:
        """A turn's end that waited for the coroutines it woke: the output still there (theirs
        went with their own sends), then the next turn's timer."""
        self._tail_soon = False
        if not self._running:
            return
        if self.proto.has_output():
            with self.lock:
                out = self._output(time.monotonic())
            self._send(out)
        self._arm()
