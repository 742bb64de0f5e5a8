"""Whether a waiting thread polls its socket briefly before it sleeps (:class:`PollChoice`).

A thread that sleeps in ``select`` takes tens of microseconds to wake (its CPU idles); one that
polls for up to ``busy_poll_s`` skips that when input comes within the budget. Polling on the
CPU the peer needs would slow the peer instead, so the choice is learnt from what each way
gives: the time until input arrived, averaged per way; polling is taken unless sleeping's
average is clearly shorter (:data:`POLL_LEEWAY`), except one wait in :data:`EXPLORE` that tries
the other way to follow changes.
"""

from __future__ import annotations

#: One wait in this many goes the way the averages do not prefer.
EXPLORE = 32
#: The averages' weight of a new wait.
WEIGHT = 0.125
#: Polling goes on while its average wait is within this factor of sleeping's. How long a
#: wait lasts is mostly how long the peer takes, the same either way, and the wake-up polling
#: saves is a small part of it: a REP server's averages were 86-99 us polling against 91-92
#: sleeping (`bench/rr_polls.py`), while a wait that slept cost the round trip 30-60 us more.
POLL_LEEWAY = 1.25
#: A wait counts for at most this many budgets: how long a wait lasts is mostly how long the
#: peer takes to answer, and one long pause of the peer (a collection, a preemption) must not
#: outweigh the many waits that polling shortened (it did, before the cap: a REP server slept
#: in select for one wait in six while polling answered every wait it was given).
CAP_BUDGETS = 1.0
#: A ``sched_yield`` of the busy poll that returns this much later (seconds) gave the CPU to
#: another runnable task for a scheduler slice (2-3 ms here): polling competes with it for
#: the CPU, where a sleeping thread would have been woken at once (a sleeper preempts a
#: task that spins). With a CPU-bound process beside a REP server, its polled waits cost
#: 2.1 ms each (p50) against 0.45 ms sleeping, and the cap hid it.
PREEMPTED_S = 0.001
#: Polling stops while more than this share of the polled waits (their average) lost the
#: CPU so: one now and then (another process ran once) leaves polling on, a task that
#: competes for the CPU all the time turns it off until explorations find the CPU free.
PREEMPTED_SHARE = 0.25


class PollChoice:
    """The poll-or-sleep choice of one driver's waits (not thread-safe: one leader at a time)."""

    __slots__ = ("budget", "waits", "poll_s", "block_s", "preempted")

    def __init__(self, budget: float) -> None:
        self.budget = budget
        self.waits = 0
        self.poll_s = 0.0  # average wait until input when polling first
        self.block_s = 0.0  # ... when sleeping in select at once
        self.preempted = 0.0  # average share of polled waits that lost the CPU

    def poll_next(self) -> bool:
        """Whether the next wait polls first."""
        self.waits += 1
        prefer = (self.poll_s <= self.block_s * POLL_LEEWAY
                  and self.preempted <= PREEMPTED_SHARE)
        return prefer != (self.waits % EXPLORE == 0)

    def record(self, polled: bool, waited_s: float, preempted: bool = False) -> None:
        """A wait that ended with input after ``waited_s`` seconds (a wait that timed out
        says nothing about either way and is not recorded). ``preempted``: the poll lost the
        CPU to another task (:data:`PREEMPTED_S`)."""
        waited_s = min(waited_s, CAP_BUDGETS * self.budget)
        if polled:
            self.preempted += ((1.0 if preempted else 0.0) - self.preempted) * WEIGHT
            self.poll_s += (waited_s - self.poll_s) * WEIGHT
        else:
            self.block_s += (waited_s - self.block_s) * WEIGHT
