"""The UDP driver on its own: an error in a hook is logged and counted, the loop goes on."""

from __future__ import annotations

import functools
import logging
import threading
import time
from random import Random
from typing import Any

import pytest

from a3m.exon import Delivered, Event, ExonProtocol, MemoryClockStore
from a3m.runtime.driver import Driver, parse_bind


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
