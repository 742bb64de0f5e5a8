"""The native poll choice (``a3m._native.PollChoiceCore``, what a leader's native wait uses)
against its Python twin (runtime/poll_choice.py): the same calls give the same choices and
the same averages, bit for bit."""

from __future__ import annotations

from random import Random

import pytest

from a3m._dataplane import native
from a3m.runtime.poll_choice import PollChoice

pytestmark = pytest.mark.skipif(native is None, reason="the native data plane is not built")


@pytest.mark.parametrize("seed", range(20))
def test_the_native_choice_is_its_twin_s(seed: int) -> None:
    rng = Random(seed)
    budget = rng.choice([50e-6, 200e-6, 1e-3])
    py, rs = PollChoice(budget), native.PollChoiceCore(budget)
    for step in range(2000):
        a, b = py.poll_next(), rs.poll_next()
        assert a == b, (seed, step)
        if rng.random() < 0.9:  # (a wait that timed out records nothing)
            waited = rng.choice([rng.uniform(0, 3 * budget), rng.expovariate(1 / budget)])
            preempted = rng.random() < 0.1
            py.record(a, waited, preempted)
            rs.record(b, waited, preempted)
        assert (py.waits, py.poll_s, py.block_s, py.preempted) == (
            rs.waits, rs.poll_s, rs.block_s, rs.preempted), (seed, step)
