"""The receive window tunes itself (docs/credits.md): a link whose application took more than
half its capacity within one round trip grows, within a per-link limit and the node's budget;
a slow reader or a short path keeps the capacity its socket set."""

from __future__ import annotations

from a3m.core.credits import CreditBudget, RecvCredits


class Stream:
    """Round trips of a window-limited stream into ``c``: each round trip the peer spends
    every credit it knows of (the edge granted a round trip earlier); the application reads
    each message as it arrives, but lets ``backlog`` of them wait."""

    def __init__(self, c: RecvCredits, rtt: float = 0.01) -> None:
        self.c, self.rtt, self.now = c, rtt, 0.0
        c.rtt_of = lambda: rtt

    def run(self, rounds: int, backlog: int = 0, size: int = 64) -> None:
        c = self.c
        for _ in range(rounds):
            sent = c.edge - c.received
            for i in range(sent):
                assert c.on_arrival(size)
                if c.received - c.delivered > backlog:
                    c.on_delivered(self.now + self.rtt * i / sent)
            self.now += self.rtt


def test_a_window_limited_stream_grows_the_capacity() -> None:
    c = RecvCredits(256, limit=4096, budget=CreditBudget(1 << 30))
    Stream(c).run(12)
    assert c.capacity == 4096  # doubled round after round, then capped at the limit
    assert c.held == (4096 - 256) * 64


def test_a_slow_reader_keeps_the_capacity_it_set() -> None:
    c = RecvCredits(256, limit=4096, budget=CreditBudget(1 << 30))
    s = Stream(c)
    s.run(1, backlog=250)
    for _ in range(20):  # then it reads 50 messages per round trip only
        s.now += s.rtt
        for _ in range(50):
            c.on_delivered(s.now)
    assert c.capacity == 256 and c.held == 0


def test_no_round_trip_measure_no_growth() -> None:
    c = RecvCredits(256, limit=4096, budget=CreditBudget(1 << 30))
    s = Stream(c)
    c.rtt_of = lambda: None
    s.run(12)
    assert c.capacity == 256


def test_growth_is_paid_from_the_node_budget_and_given_back() -> None:
    budget = CreditBudget(100_000)
    a = RecvCredits(256, limit=1 << 20, budget=budget)
    b = RecvCredits(256, limit=1 << 20, budget=budget)
    sa, sb = Stream(a), Stream(b)
    sa.run(12, size=100)
    sb.run(12, size=100)
    assert a.held + b.held <= 100_000 and budget.left >= 0
    assert a.capacity > 256 and a.capacity * 100 <= 100_000 + 256 * 100
    grown = a.capacity
    a.release()  # the link ended
    assert budget.left == 100_000 - b.held
    sb.run(4, size=100)
    assert b.capacity >= grown  # the freed budget lets the other link grow


def test_no_limit_no_growth_and_an_explicit_capacity_ends_the_growth() -> None:
    fixed = RecvCredits(64)
    Stream(fixed).run(10)
    assert fixed.capacity == 64
    budget = CreditBudget(1 << 20)
    c = RecvCredits(64, limit=1024, budget=budget)
    Stream(c).run(10)
    assert c.capacity == 1024
    c.set_capacity(32)
    assert c.capacity == 32 and c.held == 0 and budget.left == 1 << 20
