"""The leader's poll-or-sleep choice (a3m.runtime.poll_choice), driven with made-up waits."""

from __future__ import annotations

import os
import time
from random import Random

import pytest

from a3m.exon import ExonProtocol, MemoryClockStore
from a3m.runtime.driver import Driver
from a3m.runtime.poll_choice import EXPLORE, PREEMPTED_S, PollChoice

BUDGET = 200e-6


def _run(choice: PollChoice, waits: int, polled_s: float, slept_s: float, rng: Random,
         pause_every: int = 0, pause_s: float = 0.0) -> int:
    """``waits`` waits where input comes after ``polled_s`` when polling, ``slept_s`` when
    sleeping (a wake-up later), and every ``pause_every``-th wait the peer pauses
    ``pause_s`` first; the number of waits that polled."""
    polls = 0
    for i in range(1, waits + 1):
        poll = choice.poll_next()
        polls += poll
        wait = (polled_s if poll else slept_s) * rng.uniform(0.8, 1.2)
        if pause_every and i % pause_every == 0:
            wait += pause_s
        choice.record(poll, wait)
    return polls


def test_polls_when_polling_answers_sooner() -> None:
    choice = PollChoice(BUDGET)
    polls = _run(choice, 3200, polled_s=60e-6, slept_s=100e-6, rng=Random(1))
    assert polls >= 3200 * (1 - 1 / EXPLORE) - 20


def test_sleeps_when_polling_slows_the_peer() -> None:
    """Where polling takes the CPU the peer needs, input comes clearly later when polling
    (beyond the leeway): sleep."""
    choice = PollChoice(BUDGET)
    polls = _run(choice, 3200, polled_s=150e-6, slept_s=90e-6, rng=Random(2))
    assert polls <= 3200 / EXPLORE + 20


def test_a_peer_pausing_now_and_then_does_not_turn_polling_off() -> None:
    """One wait in 50 lasts 3 ms (the peer collected garbage, was preempted): without the cap
    each such wait lifts the polling average far above the sleeping one, and the leader
    sleeps (paying the wake-up) on many of the waits that polling would have shortened."""
    choice = PollChoice(BUDGET)
    polls = _run(choice, 5000, polled_s=60e-6, slept_s=100e-6, rng=Random(3),
                 pause_every=50, pause_s=3e-3)
    assert polls >= 5000 * (1 - 1 / EXPLORE) - 50


def test_sleeps_when_polling_loses_the_cpu_to_another_task() -> None:
    """A CPU-bound process beside the leader: each polled wait gives the CPU away at a
    sched_yield for a scheduler slice (2 ms here), while a sleeping leader is woken at once.
    Capped, those waits looked like 200 us and polling went on (a REP server's p50 was
    2.1 ms); marked ``preempted``, the leader sleeps but for the exploration."""
    choice = PollChoice(BUDGET)
    polls = 0
    rng = Random(4)
    for _ in range(3200):
        poll = choice.poll_next()
        polls += poll
        if poll:
            choice.record(True, 2.1e-3 * rng.uniform(0.8, 1.2), preempted=True)
        else:
            choice.record(False, 150e-6 * rng.uniform(0.8, 1.2))
    assert polls <= 3200 / EXPLORE + 20


def test_a_poll_preempted_now_and_then_does_not_turn_polling_off() -> None:
    """Another process took the CPU once in 40 polled waits: polling stays."""
    choice = PollChoice(BUDGET)
    polls = 0
    rng = Random(5)
    for i in range(1, 4001):
        poll = choice.poll_next()
        polls += poll
        if poll:
            late = i % 40 == 0
            choice.record(True, (2.1e-3 if late else 60e-6) * rng.uniform(0.8, 1.2), late)
        else:
            choice.record(False, 100e-6 * rng.uniform(0.8, 1.2))
    assert polls >= 4000 * (1 - 1 / EXPLORE) - 60


def test_the_busy_poll_reports_a_yield_that_lost_the_cpu(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Driver._poll: a sched_yield that returns PREEMPTED_S or more later marks the wait."""
    d = Driver(ExonProtocol("t", rng=Random(1), clock_store=MemoryClockStore(1)),
                       "127.0.0.1:0", lambda ev, now: None)
    try:
        d._look = lambda timeout: []  # nothing ever arrives
        clock = [100.0]
        monkeypatch.setattr(time, "perf_counter", lambda: clock[0])
        monkeypatch.setattr(os, "sched_yield", lambda: clock.__setitem__(0, clock[0] + 1e-6))
        assert d._poll([], BUDGET, 100.0) is False
        assert not d._poll_preempted  # yields that came back at once
        monkeypatch.setattr(os, "sched_yield",
                            lambda: clock.__setitem__(0, clock[0] + 2 * PREEMPTED_S))
        clock[0] = 200.0
        assert d._poll([], BUDGET, 200.0) is False
        assert d._poll_preempted
    finally:
        monkeypatch.undo()
        d.stop()
