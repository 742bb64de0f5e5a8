"""The UDP driver on its own: an error in a hook is logged and counted, the loop goes on."""

from __future__ import annotations

import functools
import logging
import threading
import time
from random import Random
from typing import Any

import pytest

from a3m.exon import Delivered, Event, ExonConfig, ExonProtocol, MemoryClockStore
from a3m.runtime.driver import Driver, parse_bind
from a3m.runtime.offload import UdpOffload


class Collector:
    def __init__(self) -> None:
        self.got: list[bytes] = []
        self.arrived = threading.Event()

    def __call__(self, events: list[Event], now: float) -> None:
        self.got.extend(ev.payload for ev in events if isinstance(ev, Delivered))
        self.arrived.set()


def test_an_error_in_a_hook_is_counted_and_the_loop_lives_on(
        caplog: pytest.LogCaptureFixture) -> None:
    failures = {"left": 3}

    def flaky_turn(now: float) -> None:
        if failures["left"] > 0:
            failures["left"] -= 1
            raise RuntimeError("hook failed")

    rx_events = Collector()
    tx = Driver(ExonProtocol("tx", rng=Random(1), clock_store=MemoryClockStore(1)),
                "127.0.0.1:0", lambda ev, now: None, on_turn=flaky_turn)
    rx = Driver(ExonProtocol("rx", rng=Random(2), clock_store=MemoryClockStore(1)),
                "127.0.0.1:0", rx_events)
    try:
        with caplog.at_level(logging.ERROR, logger="a3m.runtime"):
            tx.call(lambda: tx.proto.associate("rx", rx.address))
            for i in range(200):
                tx.call(functools.partial(tx.proto.send, "rx", b"%d" % i, time.monotonic()))
            deadline = time.monotonic() + 10
            while len(rx_events.got) < 200 and time.monotonic() < deadline:
                time.sleep(0.01)
        assert sorted(rx_events.got) == sorted(b"%d" % i for i in range(200))
        assert tx.loop_errors == 3 and rx.loop_errors == 0
        assert sum("hook failed" in r.getMessage() or r.exc_info is not None
                   for r in caplog.records) == 3
        assert tx.running
    finally:
        tx.stop()
        rx.stop()
    assert not tx.running
    tx.stop()  # idempotent


def test_a_failing_event_handler_loses_no_other_event_of_its_batch(
        caplog: pytest.LogCaptureFixture) -> None:
    """The events of one drained batch after the one whose handling raised are still handled
    (their Exon slots are already acknowledged: dropping them would lose them for good)."""
    got: list[bytes] = []
    done = threading.Event()

    def fragile(events: Any, now: float) -> None:
        while events:
            ev = events.popleft()
            if isinstance(ev, Delivered):
                if ev.payload == b"boom":
                    raise RuntimeError("handler failed")
                got.append(ev.payload)
                if ev.payload == b"last":
                    done.set()

    tx = Driver(ExonProtocol("tx", rng=Random(1), clock_store=MemoryClockStore(1)),
                "127.0.0.1:0", lambda ev, now: None)
    rx = Driver(ExonProtocol("rx", rng=Random(2), clock_store=MemoryClockStore(1)),
                "127.0.0.1:0", fragile)
    payloads = [b"a", b"b", b"boom", b"c", b"d", b"last"]
    try:
        with caplog.at_level(logging.ERROR, logger="a3m.runtime"):
            tx.call(lambda: tx.proto.associate("rx", rx.address))

            def send_all() -> None:  # one call: the six tokens share one datagram
                for p in payloads:
                    tx.proto.send("rx", p, time.monotonic())

            tx.call(send_all)
            assert done.wait(10)
        assert got == [b"a", b"b", b"c", b"d", b"last"]
        assert rx.event_errors == 1 and rx.loop_errors == 0
        assert any("handler failed" in str(r.exc_info) for r in caplog.records)
        assert rx.running
    finally:
        tx.stop()
        rx.stop()


def test_parse_bind() -> None:
    assert parse_bind("127.0.0.1:0") == ("127.0.0.1", 0)
    assert parse_bind(("127.0.0.2", 7000)) == ("127.0.0.2", 7000)
    assert parse_bind("[::1]:5000") == ("::1", 5000)
    assert parse_bind(":9000") == ("0.0.0.0", 9000)
    for bad in ("localhost", "127.0.0.1:x", ""):
        with pytest.raises(ValueError):
            parse_bind(bad)


class _SlowReads:
    """A socket whose every read takes 5 ms of a fake clock (another thread held the
    interpreter meanwhile), three datagrams, then nothing."""

    def __init__(self, clock: list[float]) -> None:
        self.clock = clock
        self.left = 3

    def recvfrom(self, size: int) -> tuple[bytes, tuple[str, int]]:
        self.clock[0] += 0.005
        if not self.left:
            raise BlockingIOError
        self.left -= 1
        return b"junk", ("127.0.0.1", 9)

    def sendto(self, data: bytes, addr: Any) -> int:
        return len(data)


class _Recorder:
    def __init__(self) -> None:
        self.batches: list[tuple[int, float]] = []

    def receive_datagrams(self, batch: list[tuple[bytes, Any]], now: float) -> None:
        self.batches.append((len(batch), now))

    def handle_timer(self, now: float) -> None:
        pass

    def drain_events(self) -> list[Event]:
        return []

    def datagrams_to_send(self, now: float) -> list[tuple[bytes, Any]]:
        return []


def test_datagrams_read_in_a_turn_are_handled_at_the_time_after_the_reads(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Each read lets another thread run; a time taken before the reads could be
    milliseconds older than the ACKs read, and RTT samples came out shorter than the path's
    (the congestion window, sized from the least RTT, then shrank). The turn hands the batch
    over with the time read after the last read."""
    d = Driver(ExonProtocol("t", rng=Random(1), clock_store=MemoryClockStore(1)),
               "127.0.0.1:0", lambda ev, now: None)
    d.stop()
    clock = [100.0]
    monkeypatch.setattr("a3m.runtime.driver.time.monotonic", lambda: clock[0])
    rec = _Recorder()
    d.proto = rec  # type: ignore[assignment]
    d._sock = _SlowReads(clock)  # type: ignore[assignment]
    d._io = UdpOffload(d._sock, gso=False, gro=False)  # one datagram per read, as the fake
    d._readable = lambda timeout: True
    d._wire()  # (the turn's reads and output chosen for the swapped protocol and socket)
    d._turn(d._buf, d._view)
    # 4 reads (the last finds nothing): 20 ms after the turn began
    assert len(rec.batches) == 1 and rec.batches[0][0] == 3
    assert rec.batches[0][1] == pytest.approx(100.020)


class _CountingLock:
    """A lock that counts the acquisitions made by one thread (the test's)."""

    def __init__(self, real: Any, thread: int) -> None:
        self._lock = real()
        self._thread = thread
        self.count = 0

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        got = self._lock.acquire(blocking, timeout)
        if got and threading.get_ident() == self._thread:
            self.count += 1
        return bool(got)

    def release(self) -> None:
        self._lock.release()

    def locked(self) -> bool:
        return bool(self._lock.locked())

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def test_a_leader_takes_the_lock_once_per_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    """A waiting thread that leads runs its turn under the lock it holds for the wait (its
    sends too): one acquisition per wait, where releasing it for the turn and taking it back
    after made two. Counted on the REQ's thread: each send and each receive take it once,
    each leader's wait once more."""
    import a3m

    with a3m.Node("srv") as srv:
        rep = srv.socket(a3m.REP, "rep")
        real = threading.Lock
        lock_box: list[_CountingLock] = []

        def make() -> _CountingLock:
            lock = _CountingLock(real, threading.get_ident())
            lock_box.append(lock)
            return lock

        monkeypatch.setattr(threading, "Lock", make)
        try:
            cli = a3m.Node("cli", busy_poll_s=0)
        finally:
            monkeypatch.setattr(threading, "Lock", real)
        with cli:
            drv = cli._driver
            lock = drv.lock
            assert isinstance(lock, _CountingLock)
            cli.associate("srv", srv.address)
            req = cli.socket(a3m.REQ, "req")
            req.link(("srv", "rep"))
            assert req.wait_linked(timeout=5)
            stop = threading.Event()

            def serve() -> None:
                while not stop.is_set():
                    try:
                        rep.send(rep.recv(timeout=0.1), timeout=5)
                    except a3m.Timeout:
                        pass

            server = threading.Thread(target=serve, daemon=True)
            server.start()
            n = 100
            with drv.lock:
                before, turns = lock.count, drv.leader_turns
            for i in range(n):
                req.send(b"%d" % i, timeout=5)
                assert req.recv(timeout=5) == b"%d" % i
            with drv.lock:
                taken, waits = lock.count - before - 1, drv.leader_turns - turns
            stop.set()
            server.join(5)
        assert waits >= 1
        assert 2 * n <= taken <= 2 * n + waits, (taken, waits)


def test_close_moves_what_waits_above_the_window_into_the_protocol_first() -> None:
    """A layer above Exon (the bridge's outbox) holds more than Exon's window takes when the
    node closes: ``close_protocol`` moves all of it in before ``proto.close`` (which refuses
    sends from then on), so a clean close delivers every message. Before, the close came
    first and the waiting messages met ``Closed``, dropped with the close still clean."""
    from collections import deque

    from a3m.errors import Closed, WouldBlock

    rx_events = Collector()
    small = ExonConfig(window_per_peer=4, window_global=4)
    tx = Driver(ExonProtocol("tx", small, rng=Random(1), clock_store=MemoryClockStore(1)),
                "127.0.0.1:0", lambda ev, now: None)
    rx = Driver(ExonProtocol("rx", rng=Random(2), clock_store=MemoryClockStore(1)),
                "127.0.0.1:0", rx_events)
    above = deque(b"m-%d" % i for i in range(200))
    dropped = []

    def pump(now: float) -> None:  # as ExonBridge.pump: the window's share, in order
        while above:
            try:
                tx.proto.send("rx", above[0], now)
            except WouldBlock:
                return
            except Closed:
                dropped.extend(above)
                above.clear()
                return
            above.popleft()

    try:
        tx.call(lambda: tx.proto.associate("rx", rx.address))
        tx.call(lambda: pump(time.monotonic()))
        assert len(above) > 150  # most of it waits above the window
        assert tx.close_protocol(time.monotonic() + 60, pump, lambda: bool(above)) is True
        assert not dropped
        deadline = time.monotonic() + 30
        while len(rx_events.got) < 200 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert sorted(rx_events.got) == sorted(b"m-%d" % i for i in range(200))
    finally:
        tx.stop()
        rx.stop()


def _paced_pair(delay_s: float) -> tuple[Any, Any, Any, Collector]:
    """tx -> rx through a relay holding each datagram ``delay_s`` (a path Exon paces), the
    path measured by a first message; (relay, tx, rx, rx's collector)."""
    from a3m.testing.relay import FaultRelay

    rx_events = Collector()
    cfg = ExonConfig(secure=False)
    tx = Driver(ExonProtocol("tx", cfg, rng=Random(1), clock_store=MemoryClockStore(1)),
                "127.0.0.1:0", lambda ev, now: None)
    rx = Driver(ExonProtocol("rx", cfg, rng=Random(2), clock_store=MemoryClockStore(1)),
                "127.0.0.1:0", rx_events)
    relay = FaultRelay({"rx": rx.address}, delay_s=delay_s)
    tx.call(lambda: tx.proto.associate("rx", relay.front("rx")))
    tx.call(lambda: tx.proto.send("rx", b"first", time.monotonic()))
    assert rx_events.arrived.wait(30)
    return relay, tx, rx, rx_events


def test_a_send_the_pacer_holds_back_wakes_the_sleeping_io_thread_by_its_release() -> None:
    """An application thread's send that the pacer holds back produces no output but an
    earlier deadline (its release): ``flush`` must wake the I/O thread sleeping past it.
    Before, ``flush`` looked at the deadline only after sending something, and the held
    tokens waited for the I/O thread's own time (the record's idle release, 1 s later)."""
    relay, tx, rx, rx_events = _paced_pair(0.005)
    try:
        deadline = time.monotonic() + 30
        path = None
        while time.monotonic() < deadline:  # the record's first exchange done, the thread idle
            with tx.lock:
                path = tx.proto._paths.get("rx")
                rec = tx.proto._sr.get("rx")
                if (path is not None and path.pacing_rate > 0 and rec is not None
                        and not rec.tokens and tx._sleeping and tx._leader is None
                        and tx._io_until > time.monotonic() + 0.3):
                    now = time.monotonic()
                    path.paced(10 * 1400, now)  # the bucket in debt: the next sends wait
                    tx.proto.send("rx", b"held-1", now)  # held; it asks for slots
                    tx._send_now()  # (the slot request: as flush would, without its look)
                    tx.proto.send("rx", b"held", now)
                    assert len(rec.queue) == 2 and not tx.proto.has_output()  # nothing to send
                    t = tx.proto.next_timer()
                    assert t is not None and t < tx._io_until  # released before it wakes
                    tx.flush()
                    assert not tx._sleeping  # woken
                    break
            time.sleep(0.01)
        else:
            raise AssertionError(f"the paced path never went idle: {path and path.snapshot()}")
        deadline = time.monotonic() + 30
        while b"held" not in rx_events.got and time.monotonic() < deadline:
            time.sleep(0.005)
        assert b"held" in rx_events.got
    finally:
        tx.stop()
        rx.stop()
        relay.close()
