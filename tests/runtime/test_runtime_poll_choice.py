"""The leader's poll-or-sleep choice (a3m.runtime.poll_choice), driven with made-up waits."""

from __future__ import annotations

from random import Random

from a3m.runtime.poll_choice import EXPLORE, PollChoice

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
