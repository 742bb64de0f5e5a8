"""The native replay window (``a3m._native.ReplayWindow``) against its Python twin
(``a3m.exon.secure.replay.ReplayWindow``): the same answers to ``fresh`` and the same ``top``
and ring after every ``accept``, over seeded sequences of counters a session meets (in order,
reordered, repeated, far jumps, too old, around 0 and 2**64 - 1)."""

from __future__ import annotations

from random import Random

import pytest

from a3m.exon.secure.replay import WINDOW, ReplayWindow

native = pytest.importorskip("a3m._native")
U64 = (1 << 64) - 1


def _counters(rng: Random, n: int) -> list[int]:
    base = rng.choice([0, 1 << 20, U64 - 100_000])
    out, c = [], base
    for _ in range(n):
        step = rng.choice([1, 1, 1, 2, -3, -50, -WINDOW, -WINDOW - 1, 7 * WINDOW, 0, 600])
        c = min(U64, max(0, c + step))
        out.append(c)
    return out


@pytest.mark.parametrize("seed", range(40))
def test_both_windows_answer_and_remember_the_same(seed: int) -> None:
    rng = Random(seed)
    py, nat = ReplayWindow(), native.ReplayWindow()
    for c in _counters(rng, 2000):
        fresh = py.fresh(c)
        assert nat.fresh(c) == fresh, (seed, c)
        if fresh and rng.random() < 0.9:  # (a forged datagram is checked, not accepted)
            py.accept(c)
            nat.accept(c)
        assert nat.top == py.top
        assert nat.ring == bytes(py.ring)


def test_the_last_counter_and_the_first() -> None:
    py, nat = ReplayWindow(), native.ReplayWindow()
    for c in (0, U64, U64 - 1, U64 - WINDOW, U64 - WINDOW + 1):
        assert nat.fresh(c) == py.fresh(c)
        if py.fresh(c):
            py.accept(c)
            nat.accept(c)
        assert (nat.top, nat.ring) == (py.top, bytes(py.ring))
