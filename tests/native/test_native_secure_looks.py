"""The native engine reads the secure layer's queues (its control datagrams, its timers' heap,
its kept WELCOMEs) instead of asking it at every turn whether it has output or a timer: an
idle turn calls none of its methods, and what the engine answers is what asking gives."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from a3m.exon import ExonConfig
from a3m.exon.engine import default_engine, new_protocol
from a3m.exon.secure import packets as p

pytestmark = pytest.mark.skipif(default_engine() != "native",
                                reason="the native engine is not built (or A3M_ENGINE=python)")

_QUEUES = ("_control", "_timers", "_welcomes_order")


class _Asked:
    """A secure layer seen through a proxy that counts the calls a turn may make of it
    (``queues=False``: its queues hidden, so the engine must ask)."""

    ASKED = ("has_output", "next_timer", "handle_timer")

    def __init__(self, sec: Any, queues: bool = True) -> None:
        self._sec = sec
        self._queues = queues
        self.calls: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        if not self._queues and name in _QUEUES:
            raise AttributeError(name)
        value = getattr(self._sec, name)
        if name not in self.ASKED:
            return value

        def counted(*args: Any) -> Any:
            self.calls[name] += 1
            return value(*args)
        return counted


def _turns(core: Any, now: float, n: int = 20) -> tuple[bool, float | None]:
    for _ in range(n):
        core.handle_timer(now)
        core.datagrams_to_send(now)
    return core.has_output(), core.next_timer()


def test_an_idle_turn_asks_the_secure_layer_nothing() -> None:
    core = new_protocol("a", ExonConfig(), engine="native")
    sec = core.secure
    asked = _Asked(sec)
    core.attach_secure(asked)
    assert _turns(core, 1000.0) == (False, None)
    assert sum(asked.calls.values()) == 0
    hidden = _Asked(sec, queues=False)  # (the test sees the calls it counts)
    core.attach_secure(hidden)
    assert _turns(core, 1000.0) == (False, None)
    assert hidden.calls["has_output"] > 0 and hidden.calls["next_timer"] > 0
    assert hidden.calls["handle_timer"] == 20


def test_what_the_engine_reads_is_what_asking_gives() -> None:
    """A handshake under way (its HELLO sent, its resend timer armed) and its resends: the
    output and the next timer are the same whether the engine reads the queues or asks, and
    the secure layer's timer runs at its time, not before."""
    core = new_protocol("a", ExonConfig(), engine="native")
    sec = core.secure
    reads, asks = _Asked(sec), _Asked(sec, queues=False)
    core.attach_secure(reads)
    core.associate("b", ("127.0.0.1", 9))
    now = 1000.0
    core.send("b", b"x", now)
    assert [d[1] for d, _ in core.datagrams_to_send(now)] == [p.HELLO]
    for step in range(4):
        t = core.next_timer()
        core.attach_secure(asks)
        assert (core.next_timer(), core.has_output()) == (t, False), step
        core.attach_secure(reads)
        due = sec.next_timer()  # (the HELLO's resend)
        assert due is not None and t is not None and t <= due, step
        before = reads.calls["handle_timer"]
        core.handle_timer(due - 1e-3)
        assert reads.calls["handle_timer"] == before, step  # not due: not asked
        core.handle_timer(due)
        assert reads.calls["handle_timer"] == before + 1, step
        assert core.has_output(), step
        assert p.HELLO in [d[1] for d, _ in core.datagrams_to_send(due)], step
