"""The UDP driver: one I/O thread that feeds a sans-I/O Exon protocol and flushes its output.

The loop is aioquic's, on a thread: wait for the socket, a wake-up or the one timer; drain every
readable datagram; run due timers; hand events to the layer above; send what the protocol has
batched. Application threads call into the protocol under the driver's lock and wake the
thread only when it sleeps, so under load their messages leave in shared datagrams.

An application thread that blocks (``Driver.wait``, used instead of ``cond.wait``) runs the
loop itself while it waits: it becomes the *leader*, selects on the socket and runs the turns,
and the I/O thread parks meanwhile. A reply then wakes the thread that waits for it directly,
instead of the I/O thread, which would in turn wake the waiter through the condition: two
thread hand-offs (and GIL hand-offs) fewer per round trip. The I/O thread is not woken when
the leader leaves (that wake-up per round trip is what made a "co-reader" useless); it comes
back by itself within ``PARK_S`` of the last short leadership, so traffic that arrives while
no application thread waits is still handled promptly.

Measured on this machine (docs/performance.md): a dedicated thread with non-blocking
``recvfrom`` (once ``recvfrom_into``) drained in bursts beats selectors and asyncio loops for
UDP blasts.

After a clean close the driver *lingers* (:meth:`Driver.linger`): the application is done with
it, but the I/O thread and the socket stay until the protocol is finished (``is_finished``,
``ExonConfig.close_linger_rtos``), answering the peers' late frames so that their own close
completes promptly (docs/exon-wire.md, "Closing: the linger"). It runs in the background and
ends early, harmlessly, when the process exits or a new driver of the same node id or port
starts in this process.
"""

from __future__ import annotations

import atexit
import logging
import os
import select
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any, cast

from a3m.errors import Closed
from a3m.exon.engine import Transport
from a3m.exon.events import Event
from a3m.runtime.offload import native_loop, native_read, offload_for, turn_io
from a3m.runtime.poll_choice import PREEMPTED_S, PollChoice

log = logging.getLogger("a3m.runtime")

#: Datagrams drained per wake-up before timers and output get their turn.
DRAIN_BURST = 512
#: Room a read asks for: any UDP datagram. ``recvfrom`` returns the datagram and its source
#: as the tuple the protocol takes (0.45 us a datagram less than ``recvfrom_into`` a buffer,
#: then a copy of its bytes and a tuple of our own).
RECV_BYTES = 65536
#: Socket buffers asked of the kernel (it may grant less).
SOCKET_BUFFER_BYTES = 8 << 20
#: While an application thread leads, the I/O thread looks again this often (seconds): the
#: longest an arrival waits after a short leadership ended with no thread waiting.
PARK_S = 0.002
#: Longest single select of the I/O thread or a leader (seconds).
MAX_SLEEP_S = 1.0
LOOP_LEADER = 3  # run_io's reason: input came while an application thread leads
#: lead_io's reason: lent sockets (a3m.runtime.exchange) took what a leader read, and Python
#: has nothing else to do.
EXCHANGE = 4
#: The I/O thread's next step (``Driver._plan``).
_GO, _PARKED, _STOPPED, _FINISHED = 0, 1, 2, 3
#: While the layer above's output waits for Exon's window (``upper_waits``), a leader polls
#: its socket this long (at most) for the ACK that opens it, before it sleeps (only with
#: busy polling on, ``busy_poll_s`` > 0). A stream blocked on its window waits a receiver's
#: turn, not a request's round trip: 64 KiB messages on a 1500-byte veth went 20-30 % slower
#: when the sender slept on it (docs/performance.md, "UDP segmentation offload").
WINDOW_POLL_S = 0.005

#: ``on_events(events, now)``: ``events`` is the driver's queue of pending events; the handler
#: takes each one with ``events.popleft()`` before handling it, so that when it raises, the
#: events not yet taken stay queued (handled right after, never lost) and only the event being
#: handled is reported (logged and counted in ``event_errors``).
EventHandler = Callable[["deque[Event]", float], None]


#: Drivers lingering after a clean close: a driver started in this process for the same node
#: id or port ends their linger first (one incarnation of an id at a time; the port is free).
_LINGERING: set[Driver] = set()
_LINGERING_LOCK = threading.Lock()


#: At the interpreter's exit a node that lingers after its clean close (its I/O thread is a
#: daemon: it would die with the process) keeps answering its peers until it has heard
#: nothing for EXIT_QUIET_PTOS of its paths' probe timeouts (at least EXIT_QUIET_MIN_S), and
#: EXIT_LINGER_MAX_S at most in all: a peer whose last token's ACK was lost sends it again
#: within its timeout, and its close then completes instead of waiting its own timeout out.
EXIT_QUIET_PTOS = 3
EXIT_QUIET_MIN_S = 0.1
EXIT_LINGER_MAX_S = 2.0


def wait_lingering(max_s: float = EXIT_LINGER_MAX_S) -> float:
    """Wait while a lingering driver of this process still hears its peers (each until it
    has been quiet for its ``linger_quiet_s``), ``max_s`` at most; returns the time waited.
    Called at the interpreter's exit (atexit); a program may call it itself."""
    start = time.monotonic()
    end = start + max_s
    while True:
        with _LINGERING_LOCK:
            found = [d for d in _LINGERING if isinstance(d, Driver) and d.lingering]
        now = time.monotonic()
        if not found or now >= end or all(now - d.linger_heard >= d.linger_quiet_s
                                          for d in found):
            return now - start
        time.sleep(0.01)


atexit.register(wait_lingering)


def end_lingering(node_id: str | None = None, port: int = 0) -> None:
    """Stop at once the lingering drivers of node ``node_id`` or bound to ``port`` (0: by id
    only)."""
    if not _LINGERING:
        return
    with _LINGERING_LOCK:
        found = [d for d in _LINGERING if d.proto.id == node_id or (port and d.port == port)]
    for d in found:
        d.stop()


def _drop_events(events: deque[Event], now: float) -> None:
    events.clear()  # lingering: the application is gone (and a closed node delivers nothing)


_HANDLER_ERROR = ("a3m event handler error (counted; the other events of the batch are still "
                  "handled)")


def protocol_step(proto: Transport, batch: list[tuple[bytes, Any]], events: deque[Event],
                  on_events: EventHandler, on_turn: Callable[[float], None] | None,
                  now: float) -> tuple[int, bool]:
    """A turn's work after its reads, in both drivers: the datagrams read (``batch``, handed
    over whole), the timers, the events, the layer above's turn. Returns the handler errors
    and whether any event came (waiting calls are then notified)."""
    if batch:
        proto.receive_datagrams(batch, now)
    proto.handle_timer(now)
    events.extend(proto.drain_events())
    changed = bool(events)
    errors = 0
    if changed:  # dispatch_events' first round, inline (one call fewer per turn)
        before = len(events)
        try:
            on_events(events, now)
        except Exception:
            if len(events) == before:
                events.popleft()
            errors = 1
            log.exception(_HANDLER_ERROR)
        else:
            events.clear()
        if events:
            errors += dispatch_events(events, on_events, now)
    if on_turn is not None:
        on_turn(now)
    return errors, changed


def wait_steps(wait: Callable[[float], None], done: Callable[[], bool],
               deadline: float | None, step: float) -> bool:
    """``Driver.wait_until``'s loop over a driver's ``wait`` (the asyncio driver's too: its
    worker threads wait the same way)."""
    while not done():
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            return False
        wait(step if left is None else min(left, step))
    return True


def given_up(proto: Any) -> int:
    """Revocations and peers the protocol gave up so far (its counters read afresh: the
    native engine adds its own to ``proto.stats`` when that is read)."""
    st = proto.stats
    return int(st.revocations_abandoned + st.peers_abandoned)


def dispatch_events(events: deque[Event], on_events: EventHandler, now: float) -> int:
    """Hand ``events`` to ``on_events`` until none is left (see :data:`EventHandler`); the
    number of handler errors (each logged; the events not yet taken are still handled). The
    threaded driver and the asyncio one (``a3m.aio.driver``) both use it."""
    errors = 0
    while events:
        before = len(events)
        try:
            on_events(events, now)
        except Exception:
            if len(events) == before:
                events.popleft()  # the handler failed before taking it: no retry loop
            # The event being handled is reported; the rest stay queued and are
            # handled now: a failing handler never silently drops a batch.
            errors += 1
            log.exception(_HANDLER_ERROR)
        else:
            events.clear()  # a handler that read the events without taking them
    return errors


def udp_drops(sock: socket.socket) -> int | None:
    """Datagrams the kernel dropped for ``sock`` (its receive buffer was full), from
    ``/proc/net/udp``; None where that is not available (not Linux)."""
    try:
        inode = os.fstat(sock.fileno()).st_ino
        for table in ("/proc/net/udp", "/proc/net/udp6"):
            with open(table, encoding="ascii") as f:
                next(f)
                for line in f:
                    cols = line.split()
                    if len(cols) > 12 and cols[9] == str(inode):
                        return int(cols[12])
    except (OSError, ValueError, StopIteration):
        return None
    return None


def parse_bind(bind: str | tuple[str, int]) -> tuple[str, int]:
    """``"127.0.0.1:0"`` or ``("127.0.0.1", 0)`` -> ``("127.0.0.1", 0)``."""
    if isinstance(bind, tuple):
        return bind[0], int(bind[1])
    host, sep, port = bind.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"bind address must look like 'host:port', got {bind!r}")
    return host.strip("[]") or "0.0.0.0", int(port)


def _readable(sock: socket.socket) -> Callable[[int], list[tuple[int, int]]]:
    """``poll(0)`` of a poll object for ``sock``'s input: non-empty when a datagram waits."""
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    return poller.poll


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
    """Runs an Exon engine (:class:`~a3m.exon.engine.Transport`) over one UDP socket on a dedicated thread.

    ``lock`` guards the protocol and whatever the event handler touches; ``cond`` (on that lock)
    is notified after every batch of events, so blocked application calls re-check their state.
    """

    def __init__(self, proto: Transport, bind: str | tuple[str, int],
                 on_events: EventHandler, name: str = "a3m-io",
                 upper_timer: Callable[[], float | None] | None = None,
                 on_turn: Callable[[float], None] | None = None,
                 busy_poll_s: float = 0.0,
                 upper_output: Callable[[], bool] | None = None,
                 sock: socket.socket | None = None,
                 upper_waits: Callable[[], bool] | None = None) -> None:
        self.proto = proto
        #: The asyncio driver's waiting coroutines, read inline by the node (``drv._waiters or
        #: drv._leader is not None or drv._futures``: someone to notify): none here.
        self._futures: tuple[()] = ()
        self._upper_timer = upper_timer
        #: The layer above's output waits for Exon's window (a leader then polls for the ACK
        #: longer, ``WINDOW_POLL_S``).
        self._upper_waits = upper_waits
        #: The layer above has output that ``on_turn`` hands to the protocol (when it is due
        #: is in ``upper_timer``); a leader hands it down before it goes.
        self._upper_output = upper_output
        self._on_turn = on_turn
        #: The node's native exchange of REQ and REP (``a3m.runtime.exchange``; None:
        #: none): told of a new socket layer when the driver rebinds.
        self.exchange: Any = None
        self.lock = threading.Lock()
        self._in_native = False  # the I/O thread is in the native loop (see _sleep_until)
        self.cond = threading.Condition(self.lock)
        self._park = threading.Condition(self.lock)  # the I/O thread waits here while parked
        self._on_events = on_events
        self._events: deque[Event] = deque()  # handed to on_events, not yet taken
        self.port = 0
        if sock is None:
            where = parse_bind(bind)
            end_lingering(proto.id, where[1])
            sock = open_udp(where)
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._adopt(sock)  # or the socket of a driver handing over its linger (a3m.aio)
        self._buf = bytearray(65536)  # used under the lock only (by whichever thread turns)
        self._view = memoryview(self._buf)
        #: True while no thread runs a turn: every turn-runner is in select or parked, so an
        #: application thread's output must be sent by that thread (``flush``) or a wake-up.
        self._sleeping = False
        self._io_until = 0.0  # when the I/O thread looks again by itself
        self._lead_until = 0.0  # when the leader looks again by itself
        self._leader: int | None = None  # ident of the application thread leading
        self._lead_seq = 0  # leaderships so far
        self._parked = False
        self._park_notify = False  # the parked I/O thread asks the leader to wake it on exit
        self._waiters = 0  # threads in cond.wait (followers): notify only when there are some
        self._wake_written = False  # a byte may be in the wake pipe: read it on the next turn
        self._busy_poll_s = busy_poll_s
        self._poll_choice = PollChoice(busy_poll_s)  # (the native leader's: the engine's)
        if self._lead_io is not None:
            self.proto.set_busy_poll(busy_poll_s)  # type: ignore[attr-defined]
        self._poll_preempted = False  # the current wait's poll lost the CPU (PollChoice)
        self.poll_hits = 0  # leader waits that a brief poll ended (diagnostics)
        self._running = True
        self._lingering = False  # closed for the application, answering peers (linger)
        #: While lingering: when a datagram last came, and how long a quiet spell lets the
        #: interpreter's exit go on (wait_lingering).
        self.linger_heard = 0.0
        self.linger_quiet_s = EXIT_QUIET_MIN_S
        self._fds_open = True
        self.io_errors = 0
        self.loop_errors = 0
        self.event_errors = 0
        self.leader_turns = 0  # turns run by waiting application threads (diagnostics)
        self.turns = 0  # turns run, by any thread (diagnostics)
        #: A leader's Python waits for the socket (``_wait_for_input``), and how many of them
        #: were for Exon's window (diagnostics).
        self.input_waits = 0
        self.window_waits = 0
        self.loop_reads = 0  # datagrams the native loop read (diagnostics)
        self.lead_reads = 0  # datagrams leaders' native waits read (lead_io; diagnostics)
        #: Leader waits that lent sockets' messages ended without a turn (diagnostics).
        self.lead_exchanges = 0
        self._io_thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._io_thread.start()

    @property
    def address(self) -> tuple[str, int]:
        host, port = self._sock.getsockname()[:2]
        return host, port

    def rx_drops(self) -> int | None:
        """Datagrams the kernel dropped on this socket (:func:`udp_drops`)."""
        return udp_drops(self._sock)

    def wake(self) -> None:
        """Make a turn happen soon (cheap when one is already under way). Call under lock."""
        if self._sleeping:
            self._sleeping = False
            if self._parked and self._leader is None:
                self._park.notify()
            else:
                self._write_wake()

    def _write_wake(self) -> None:
        self._wake_written = True
        try:
            os.write(self._wake_w, b"\0")
        except (BlockingIOError, OSError):
            pass

    def wake_locked(self) -> None:
        """:meth:`wake` from a thread that does not hold the lock (a native exchange's
        send that left output to Python or set an earlier timer)."""
        with self.lock:
            self.wake()

    def notify_all(self) -> None:
        """Under the lock: wake every blocked call (``wait``) so that it re-checks its state;
        a leader in select is woken through the pipe."""
        if self._waiters:
            self.cond.notify_all()
        leader = self._leader
        if leader is not None and leader != threading.get_ident():
            self.wake()

    def wait(self, timeout: float | None = None) -> None:
        """Under the lock, like ``cond.wait(timeout)`` (spurious returns included): block until
        a turn changed something or the timeout passes. The first thread to wait leads: it
        selects on the socket and runs the turn itself; others wait on the condition."""
        if self._leader is not None or not self._running or self._lingering:
            self._waiters += 1
            try:
                self.cond.wait(timeout)
            finally:
                self._waiters -= 1
            return
        proto = self.proto
        now = time.monotonic()
        wait_s = MAX_SLEEP_S if timeout is None else min(max(timeout, 0.0), MAX_SLEEP_S)
        if proto.has_output():
            wait_s = 0.0
        else:
            deadline = proto.next_timer()  # (self._deadline(), inline)
            if self._upper_timer is not None:
                upper = self._upper_timer()
                if upper is not None and (deadline is None or upper < deadline):
                    deadline = upper
            if deadline is not None and deadline - now < wait_s:
                wait_s = max(0.0, deadline - now)
        window = wait_s > 0 and self._upper_waits is not None and self._upper_waits()
        me = threading.get_ident()
        self._leader = me
        lead = self._lead_flag
        if lead is not None:
            lead(True)  # the native loop leaves the socket to us
        self._lead_seq += 1
        self._sleeping = True
        self._lead_until = now + wait_s
        self.leader_turns += 1
        sock = self._sock
        lead_io = self._lead_io
        read = True
        turn = True
        self.lock.release()
        try:
            try:
                if wait_s > 0:
                    try:
                        if lead_io is None:
                            self._wait_for_input(sock, wait_s, window)
                        else:
                            # One native call: the wait (a brief poll first, as the
                            # node's native poll choice says), the reads, opens, Exon's
                            # frames and timers and their output, until Python has work; the
                            # turn then reads only what the loop left (the wait's own
                            # reads: none without sessions).
                            why, reads, _, hit = lead_io(
                                self._io, self._wake_r, now + wait_s,
                                WINDOW_POLL_S if window and self._busy_poll_s else 0.0)
                            read = reads == 0
                            # Lent sockets took what came and Python has nothing else to
                            # do: the callers look at their sockets, no turn is due.
                            turn = why != EXCHANGE
                            self.lead_reads += reads
                            if hit:
                                self.poll_hits += 1
                    except (OSError, ValueError):
                        pass  # the socket was swapped by rebind or closed by stop
                    except Exception:  # (a3m._native.NativePanic): never a silent stall
                        self.loop_errors += 1
                        log.exception("a3m native wait error (counted, loop continues)")
            finally:
                self.lock.acquire()  # once: the turn runs under it (see _turn)
            if not turn:
                self.lead_exchanges += 1
                if self._waiters:  # (what came may be another waiting thread's)
                    self.cond.notify_all()
            elif self._running:
                try:
                    self._turn(self._buf, self._view, leader=True, read=read)
                except Exception:  # an application call must not fail for the loop's errors
                    self.loop_errors += 1
                    log.exception("a3m I/O loop error (counted, loop continues)")
        finally:
            self._leader = None
            if lead is not None:
                lead(False)
            self._sleeping = True  # the I/O thread is parked or in select
            if self._park_notify:
                self._park_notify = False
                self._park.notify()
            if self._running and self._upper_output is not None and self._upper_output() \
                    and self._on_turn is not None:
                self._on_turn(time.monotonic())  # sent by another thread during our turn
            if self._running and proto.has_output():
                self._send_now()  # nobody else may be awake to send it soon

    def wait_until(self, done: Callable[[], bool], deadline: float | None,
                   step: float = 0.05) -> bool:
        """Under the lock: :meth:`wait` in steps of at most ``step`` seconds until ``done()``;
        False when the monotonic ``deadline`` (None: none) passes first."""
        return wait_steps(self.wait, done, deadline, step)

    def _wait_for_input(self, sock: socket.socket, wait_s: float, window: bool = False
                        ) -> None:
        """A leader's wait for the socket, the wake-up pipe or ``wait_s``: either a plain
        ``select``, or first a brief poll of up to ``busy_poll_s`` (see :meth:`_poll`); of up
        to ``WINDOW_POLL_S`` when the layer above's output waits for Exon's ``window``."""
        self.input_waits += 1
        if window:
            self.window_waits += 1
        rlist: list[Any] = [sock, self._wake_r]
        budget = self._busy_poll_s
        if not budget:
            select.select(rlist, [], [], wait_s)
            return
        if window:
            # Not a request waiting for its reply (PollChoice learns those): a stream whose
            # next ACK ends the wait. Polling keeps the sender off the sleep and wake-up it
            # would pay per ACK; sched_yield in the poll gives the CPU to anyone who wants it.
            # A CPU another task wants ends the poll (it would lose a slice at each yield).
            t0 = time.perf_counter()
            poll_s = min(WINDOW_POLL_S, wait_s)
            if not self._poll(rlist, poll_s, t0, yielding=True):
                left = wait_s - (time.perf_counter() - t0)
                if left > 0:
                    select.select(rlist, [], [], left)
            self._poll_preempted = False
            return
        choice = self._poll_choice  # poll or not: learnt from what each way gives
        poll = choice.poll_next()
        t0 = time.perf_counter()
        if (not (poll and self._poll(rlist, min(budget, wait_s), t0))
                and not select.select(rlist, [], [], wait_s)[0]):
            return  # nothing came: the wait says nothing about either way
        choice.record(poll, time.perf_counter() - t0, self._poll_preempted)
        self._poll_preempted = False

    def _poll(self, rlist: list[Any], budget: float, t0: float, yielding: bool = False
              ) -> bool:
        """Poll ``rlist`` for up to ``budget`` seconds (True: input arrived). A thread that
        sleeps in ``select`` takes tens of microseconds to wake (its CPU idles); polling
        skips that when input comes within the budget, for at most the budget in CPU.
        ``yielding``: give up (False) as soon as another task took the CPU from us."""
        end = t0 + budget
        look = self._look  # (rlist's socket and pipe, as a poll object: see _adopt)
        clock = time.perf_counter
        while True:
            if look(0):
                self.poll_hits += 1
                return True
            t = clock()
            if t >= end:
                return False
            os.sched_yield()  # a peer on this CPU runs now (no cost on an otherwise idle CPU)
            if clock() - t > PREEMPTED_S:
                self._poll_preempted = True  # another task had the CPU: see PollChoice
                if yielding:
                    return False

    def _deadline(self) -> float | None:
        deadline = self.proto.next_timer()
        if self._upper_timer is not None:
            upper = self._upper_timer()
            if upper is not None and (deadline is None or upper < deadline):
                deadline = upper
        return deadline

    def _send_now(self) -> None:
        """Under the lock: send what the protocol has, from the calling thread."""
        with self._send_order:  # after what a turn took before us (see _turn)
            out = self._output(time.monotonic())
            if out:
                self.io_errors += self._io.send(out)

    def _sleep_until(self) -> float:
        """Under the lock: when the I/O thread looks again by itself (the native loop's own
        deadline while it runs: it handles Exon's timers itself, 0 while it is awake)."""
        if self._in_native:
            return float(self.proto.loop_until())  # type: ignore[attr-defined]
        return self._io_until

    def _python_until(self, now: float) -> float:
        """Under the lock: the deadline of what only Python handles (the secure layer's and
        the layer above's timers), for the native loop (which handles Exon's)."""
        until = now + MAX_SLEEP_S
        sec = self.proto.secure  # type: ignore[attr-defined]
        if sec is not None:
            t = sec.next_timer()
            if t is not None and t < until:
                until = t
        if self._upper_timer is not None:
            t = self._upper_timer()
            if t is not None and t < until:
                until = t
        return until

    @property
    def turn_under_way(self) -> bool:
        """Under the lock: a thread is in a turn (or sending what it took), and the loop
        comes back for what the layer above has by then (see ``upper_output``)."""
        return not self._sleeping and self._running

    def flush(self) -> None:
        """Under the lock: send what the protocol has now, from the calling thread, when the
        I/O thread sleeps (a lone request leaves at once instead of after a thread hand-off;
        under load the I/O thread is awake and batches instead). Wakes the I/O thread only
        if the protocol now has an earlier deadline than the one it sleeps until: a send
        the pacer held back leaves no output but sets one (its release)."""
        proto = self.proto
        if not self._sleeping:
            return  # a turn is under way: it sends, and sleeps until the next deadline
        if proto.has_output():
            with self._send_order:  # (self._send_now(), inline: a call fewer a message)
                out = self._output(time.monotonic())
                if out:
                    self.io_errors += self._io.send(out)
        # self.wake_by(self._deadline()), inline; the layer above's deadline is asked only
        # when Exon's is not earlier than the sleeper's already. (self._sleep_until(), inline)
        until = float(proto.loop_until()) if self._in_native else self._io_until  # type: ignore[attr-defined]
        if self._leader is not None and self._lead_until < until:
            until = self._lead_until
        t = proto.next_timer()
        if t is None or t >= until:
            upper = self._upper_timer
            t = None if upper is None else upper()
            if t is None or t >= until:
                return
        self.wake()

    def wake_by(self, t: float) -> None:
        """Under the lock: make sure a turn happens by ``t`` (wakes the I/O thread, or the
        leader, only if it sleeps past it)."""
        if not self._sleeping:
            return
        until = self._sleep_until()
        if self._leader is not None and self._lead_until < until:
            until = self._lead_until
        if t < until:
            self.wake()

    def _adopt(self, sock: socket.socket) -> None:
        """Under the lock (or before the I/O thread starts): make ``sock`` the driver's
        socket, with what goes with it (its poll object, the port)."""
        self._sock = sock
        self._readable = _readable(sock)
        self._io = offload_for(sock)  # GSO sends, GRO reads where the kernel has them
        #: Held from taking the protocol's output until it is sent, so that output leaves in
        #: the order it was made although it is sent outside ``lock``: the native socket
        #: layer's own where there is one (the native loop takes and sends under it too).
        self._send_order = getattr(self._io, "send_order", None) or threading.Lock()
        self._wire()
        #: ``poll(0)`` of the socket and the wake-up pipe: the busy poll's look (0.9 us here
        #: against 3.7 for a ``select`` of the two).
        poller = select.poll()
        poller.register(sock, select.POLLIN)
        poller.register(self._wake_r, select.POLLIN)
        self._look = poller.poll
        self.port = sock.getsockname()[1]

    def _wire(self) -> None:
        """Choose, once per protocol and socket layer, how a turn reads and takes output."""
        #: The native engine's GIL-free loop over the native socket (None: ``select``).
        self._native_loop = native_loop(self.proto, self._io)
        #: A turn's reads and output (see ``turn_io``).
        self._fused, self._native_recv, self._output = turn_io(self.proto, self._io)
        #: Tells the native loop that an application thread leads (None: no native loop).
        self._lead_flag: Callable[[bool], None] | None = (
            None if self._native_loop is None else self.proto.set_leader)  # type: ignore[attr-defined]
        #: A leader's wait in one native call (``lead_io``), beside the native loop; its
        #: poll choice is the engine's (the Python twin's, natively).
        self._lead_io: Callable[..., tuple[int, int, float, bool]] | None = (
            None if self._native_loop is None or self._fused is None
            else self.proto.lead_io)  # type: ignore[attr-defined]
        if self.exchange is not None:
            self.exchange.set_io(self._io)

    def rebind(self, bind: str | tuple[str, int]) -> None:
        """Move to another local address; peers learn it from our next datagrams."""
        where = parse_bind(bind)
        end_lingering(None, where[1])
        new = open_udp(where)
        with self.lock:
            old = self._sock
            self._adopt(new)
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
        """Stop the thread and close the socket (idempotent; ends a linger at once; when a
        linger is ending by itself, returns once its socket is closed)."""
        with self.lock:
            if self._running:
                self._running = False
                self._lingering = False
                self._sleeping = False
                self._write_wake()  # a leader in select
                self._park.notify_all()
        if threading.current_thread() is not self._io_thread:
            self._io_thread.join(timeout=5)
        end = time.monotonic() + 5
        while self._leader is not None and time.monotonic() < end:  # it leaves after a turn
            time.sleep(0.001)
        self._close_fds()

    def close_protocol(self, deadline: float | None,
                       pump: Callable[[float], None] | None = None,
                       pending: Callable[[], bool] | None = None) -> bool:
        """Close the protocol (``proto.close``) and drive it until ``is_closed()`` and nothing
        is ``pending`` above it (``pump`` moves that into the protocol), or until the
        monotonic ``deadline``; then linger (clean close) or stop. Returns True when the close
        completed without giving anything up (a revocation or a silent peer abandoned)."""
        proto = self.proto
        clean = True
        with self.lock:
            abandoned = given_up(proto)
            # What the layer above sent before the close goes into the protocol first: once
            # closing, the protocol refuses sends (what is left above it then goes nowhere).
            while pump is not None and pending is not None and self.running:
                pump(time.monotonic())
                left = None if deadline is None else deadline - time.monotonic()
                if not pending() or (left is not None and left <= 0):
                    break
                self.wake()
                self.wait(0.05 if left is None else min(left, 0.05))
            proto.close(time.monotonic())
            self.wake()
            while not proto.is_closed() or (pending is not None and pending()):
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    clean = False
                    break
                self.wait(0.05 if left is None else min(left, 0.05))
                if pump is not None:
                    pump(time.monotonic())
                self.wake()
            closed = proto.is_closed()
            clean = clean and given_up(proto) == abandoned
            if not closed:  # let the release frames leave (a linger sends them itself)
                end = time.monotonic() + 0.05
                while proto.has_output() and time.monotonic() < end:
                    self.wake()
                    self.wait(0.005)
        if closed:
            self.linger()
        else:
            self.stop()
        return clean

    def linger(self) -> None:
        """After a clean close (``proto.is_closed()``): the application is done (``running``
        is False, no application thread leads any more), but the I/O thread keeps the socket
        and answers the peers until ``proto.is_finished()``, then closes it by itself. The
        caller does not wait; :meth:`stop` ends the linger at once."""
        with _LINGERING_LOCK:
            _LINGERING.add(self)
        with self.lock:
            if self._running:
                self.linger_heard = time.monotonic()
                self.linger_quiet_s = max(EXIT_QUIET_MIN_S,
                                          EXIT_QUIET_PTOS * self.proto.max_peer_pto())
                self._lingering = True
                self._on_events = _drop_events
                self._on_turn = None
                self._upper_timer = None
                self._upper_output = None
                self.wake()
                return
        with _LINGERING_LOCK:
            _LINGERING.discard(self)

    @property
    def lingering(self) -> bool:
        """Closed for the application, still answering the peers (see :meth:`linger`)."""
        return self._lingering

    def _close_fds(self) -> None:
        with self.lock:
            if not self._fds_open:
                return
            self._fds_open = False
        with _LINGERING_LOCK:
            _LINGERING.discard(self)
        self._sock.close()
        os.close(self._wake_r)
        os.close(self._wake_w)

    @property
    def running(self) -> bool:
        """Open for the application (False once stopped, and while lingering)."""
        return self._running and not self._lingering

    def check_open(self) -> None:
        if not self.running:
            raise Closed("closed")

    # ------------------------------------------------------------------ the I/O thread

    def _plan(self, park_seq: int) -> tuple[int, int, float, Any, float]:
        """Under the lock, the I/O thread's next step: park while a leader runs the loop
        (``_PARKED``), stop (``_STOPPED``, ``_FINISHED``: the linger is over) or go on
        (``_GO``: wait up to ``timeout``, in the native ``loop`` until ``until`` when there
        is one, then turn). Returns (what, park_seq, timeout, loop, until)."""
        if not self._running:
            return _STOPPED, park_seq, 0.0, None, 0.0
        if self._leader is not None:
            # An application thread runs the loop: step aside. A leadership that outlasts
            # one park is a long wait: then sleep until it ends (it wakes us).
            long_wait = park_seq == self._lead_seq
            park_seq = self._lead_seq
            self._parked = True
            self._park_notify = long_wait
            self._sleeping = True
            park_s = MAX_SLEEP_S if long_wait else PARK_S
            self._io_until = time.monotonic() + park_s
            self._park.wait(park_s)
            self._parked = False
            self._park_notify = False
            return _PARKED, park_seq, 0.0, None, 0.0
        proto = self.proto
        if self._lingering and proto.is_finished():
            self._running = self._lingering = False
            return _FINISHED, -1, 0.0, None, 0.0  # (no leader: none since the linger began)
        deadline = self._deadline()
        if proto.has_output():
            timeout = 0.0
        elif deadline is None:
            timeout = MAX_SLEEP_S
        else:
            timeout = min(max(0.0, deadline - time.monotonic()), MAX_SLEEP_S)
        self._sleeping = True
        now = time.monotonic()
        self._io_until = now + timeout
        loop = self._native_loop if not self._lingering else None
        until = 0.0
        if loop is not None and timeout > 0:
            until = self._python_until(now)
            self._in_native = True
        return _GO, -1, timeout, loop, until

    def _run(self) -> None:
        proto = self.proto
        buf, view = self._buf, self._view
        park_seq = -1
        finished = False
        while True:
            with self.lock:
                what, park_seq, timeout, loop, until = self._plan(park_seq)
                io, sock = self._io, self._sock
            if what == _PARKED:
                continue
            if what != _GO:
                finished = what == _FINISHED
                break
            if loop is not None and timeout > 0:
                why = -1
                try:
                    # (the interpreter's lock released inside)
                    why, reads, _ = loop(io, self._wake_r, until)
                    self.loop_reads += reads
                except (OSError, ValueError):
                    pass  # the socket was swapped by rebind or closed by stop
                except Exception:  # (a3m._native.NativePanic): never a silent stall
                    self.loop_errors += 1
                    log.exception("a3m native I/O loop error (counted, loop continues)")
                finally:
                    self._in_native = False
                self.io_errors += proto.take_io_errors()  # type: ignore[attr-defined]
                if self._leader is not None:
                    if why != LOOP_LEADER:
                        # What the loop left for Python (datagrams it read, messages for the
                        # layer above, a deadline) is the leader's to handle, and the leader
                        # may wait on a socket the loop has already read: wake it.
                        self._write_wake()
                    continue
            elif timeout > 0:
                try:
                    waited: list[Any] = [sock, self._wake_r]
                    select.select(waited, [], [], timeout)
                except (OSError, ValueError):
                    pass  # the socket was swapped by rebind or closed by stop
                if self._leader is not None:
                    continue  # a leader selects on the same socket and runs the turn
            try:
                self._turn(buf, view)
            except Exception:  # never let the I/O thread die silently
                self.loop_errors += 1
                log.exception("a3m I/O loop error (counted, loop continues)")
        if finished:
            self._close_fds()

    def _turn(self, buf: bytearray, view: memoryview, leader: bool = False,
              read: bool = True) -> None:
        """One turn: read, hand over, send. The I/O thread's takes the lock for the protocol's
        part and sends without it; a ``leader``'s runs under the lock its caller (``wait``)
        holds, the sends included: the lock is taken once per wait, not twice. Not ``read``:
        the native wait read the socket already (only what it left is taken)."""
        proto = self.proto
        self.turns += 1
        if self._wake_written:
            self._wake_written = False
            try:
                os.read(self._wake_r, 4096)
            except (BlockingIOError, OSError):
                pass
        if not leader:
            self.lock.acquire()
        try:
            self._sleeping = False
            sock = self._sock  # read under the lock: rebind may have swapped it
            io = self._io
            fused: Any = self._fused
            native_recv: Callable[[int], list[tuple[bytes, Any]]] | None = self._native_recv
            # The native data plane's read (none: the Python twin's loop below); the batch is
            # handed over whole (live sessions go first); a fused read goes into the engine
            # and reads the time after its reads (see below)
            if fused is not None:  # (native_read's first case, inline: a call fewer a turn)
                batch: list[tuple[bytes, Any]] = []
                fused_now = None
                try:
                    # (typed: a tuple unpacked without an iterator)
                    got, fused_now = cast("tuple[int, float]", fused(io, DRAIN_BURST if read else 0))
                except OSError:
                    got = 0
                    self.io_errors += 1
                native_recv = None
            else:
                batch, got, fused_now, errors = native_read(fused, native_recv, io, DRAIN_BURST)
                self.io_errors += errors
            if native_recv is None and fused is None:  # the Python twin's reads
                readable = self._readable
                recv = sock.recvfrom
                coalesced = io.reader(buf) if io.gro else None
                for i in range(DRAIN_BURST):
                    if i == 1 and leader and not readable(0):
                        # A leader, after one datagram, looks before reading again: a read
                        # that finds nothing costs a system call and a raised exception (1.8
                        # us against 0.5), on the critical path of a request or a reply. The
                        # I/O thread reads on until a read fails (its turns are not on that
                        # path).
                        break
                    try:
                        if coalesced is None:
                            batch.append(recv(RECV_BYTES))
                        else:
                            batch.extend(coalesced())
                            if len(batch) >= DRAIN_BURST:
                                break
                    except (BlockingIOError, InterruptedError):
                        break
                    except OSError:
                        self.io_errors += 1  # e.g. ICMP port unreachable surfacing
                        break
            # The time is read after the reads: each read lets another thread take the
            # interpreter (up to its 5 ms switch interval), so a time read before them can be
            # milliseconds older than the ACKs read; RTT samples then came out shorter than
            # the path's (2.6 ms on a 10 ms path, measured), and the congestion window, sized
            # from the least RTT, shrank round after round. A later time only lengthens one.
            now = time.monotonic() if fused_now is None else fused_now
            if (batch or got) and self._lingering:
                self.linger_heard = now  # a peer still speaks: the exit waits (wait_lingering)
            errors, changed = protocol_step(proto, batch, self._events, self._on_events,
                                            self._on_turn, now)
            self.event_errors += errors
            # (a leader's own turn has no one else to wake unless threads wait on the cond)
            if changed and (self._waiters or (not leader and self._leader is not None)):
                self.notify_all()
            # The order lock is taken before the output and kept until it is sent: output
            # leaves in the order it was made. An application thread's _send_now (or the
            # native loop) could otherwise overtake this send loop (it releases the
            # interpreter at each call), and the peer saw reordering: spurious fast
            # retransmissions, 0.4-2 % of a 1500-byte stream's datagrams.
            order = self._send_order
            out = None
            order.acquire()
            try:
                out = self._output(now)
            finally:
                if not out:
                    order.release()
        finally:
            if not leader:
                self.lock.release()
        if out:
            try:
                # a full kernel buffer or an ICMP error surfacing: counted, the timers resend
                self.io_errors += io.send(out)
            finally:
                order.release()
