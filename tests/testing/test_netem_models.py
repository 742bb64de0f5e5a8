"""The emulator's loss models, counted packet by packet on the forwarder's own rule
(``_Direction.admit``) with a seeded generator and made-up arrival times: no root, no
devices, no wall clock."""

from __future__ import annotations

import random

import pytest

from a3m.testing.netem import MODELS, Impairment, _Direction, model_path

N = 200_000


def feed(imp: Impairment, n: int = N, gap_s: float = 0.0, size: int = 1200, seed: int = 7
         ) -> tuple[_Direction, list[list[float]]]:
    """``n`` packets of ``size`` bytes arriving ``gap_s`` apart: the direction and, per
    packet, when each copy leaves (empty: dropped)."""
    d = _Direction(imp, out_fd=-1, rng=random.Random(seed))
    pkt = b"x" * size
    return d, [d.admit(pkt, i * gap_s) for i in range(n)]


def bursts(fates: list[list[float]]) -> list[int]:
    """The lengths of the runs of consecutive dropped packets."""
    runs, run = [], 0
    for copies in fates:
        if copies:
            if run:
                runs.append(run)
            run = 0
        else:
            run += 1
    return runs + ([run] if run else [])


@pytest.mark.parametrize("burst_len", [1.0, 3.0, 8.0])
def test_gilbert_elliott_loses_the_asked_share_in_bursts_of_the_asked_length(
        burst_len: float) -> None:
    ab, ba = model_path("burst", 0.05, burst_len=burst_len)
    assert ab == ba and ab.loss == 0
    d, fates = feed(ab)
    lost = sum(not f for f in fates)
    assert lost == d.counts["burst_lost"]
    # bursts are correlated, so the share varies more than independent loss would:
    # N / burst_len / 0.95 independent bursts, each ~burst_len long
    assert 0.045 < lost / N < 0.055
    runs = bursts(fates)
    assert burst_len * 0.9 < sum(runs) / len(runs) < burst_len * 1.1
    if burst_len > 1:
        # random loss at 5 % has runs of mean 1 / 0.95: these are really bursts
        assert max(runs) > 3 * burst_len


def test_random_loss_comes_alone_not_in_bursts() -> None:
    ab, _ = model_path("random", 0.05)
    d, fates = feed(ab)
    assert abs(d.counts["lost"] / N - 0.05) < 4 * (0.05 * 0.95 / N) ** 0.5
    runs = bursts(fates)
    assert sum(runs) / len(runs) < 1.1


@pytest.mark.parametrize("model, lossy_ab, lossy_ba", [
    ("data", True, False), ("ack", False, True), ("random", True, True),
])
def test_one_way_models_lose_only_that_way(model: str, lossy_ab: bool, lossy_ba: bool
                                           ) -> None:
    ab, ba = model_path(model, 0.05, delay_ms=5)
    for imp, lossy in ((ab, lossy_ab), (ba, lossy_ba)):
        d, fates = feed(imp, n=20_000)
        lost = sum(not f for f in fates)
        if lossy:
            assert 800 < lost < 1200  # 5 % of 20 000, within ~4.5 sigma
        else:
            assert lost == 0
        assert all(f == [pytest.approx(0.005)] for f in fates if f)  # delay only


def test_a_shallow_queue_drops_what_does_not_fit_and_never_delays_more_than_it_holds(
) -> None:
    ab, _ = model_path("queue", 0.0, rate_mbit=10, queue_ms=2)
    assert ab.rate_mbit == 10 and ab.queue_ms == 2
    # 1200 B takes 0.96 ms at 10 Mbit/s; offered every 0.5 ms, about half cannot be carried
    d, fates = feed(ab, n=10_000, gap_s=0.0005)
    left = [(i, f[0]) for i, f in enumerate(fates) if f]
    assert d.counts["queue_drops"] == 10_000 - len(left)
    assert 4500 < d.counts["queue_drops"] < 5500
    for i, t in left:  # queued at most 2 ms, plus its own transmission
        assert t - i * 0.0005 <= 0.002 + 0.00096 + 1e-9
    # back to back at the link's rate: it carries one every 0.96 ms, in order
    gaps = [b - a for (_, a), (_, b) in zip(left, left[1:], strict=False)]
    assert min(gaps) == pytest.approx(0.00096)
    # offered below the rate, nothing is dropped however long it runs
    d, fates = feed(ab, n=10_000, gap_s=0.001)
    assert d.counts["queue_drops"] == 0 and all(fates)


def test_the_queue_model_defaults_to_a_100_mbit_rate_and_keeps_its_random_loss() -> None:
    ab, ba = model_path("queue", 0.05)
    assert ab == ba and ab.rate_mbit == 100 and ab.loss == 0.05


def test_jitter_reorders_packets_sent_closer_than_its_spread() -> None:
    ab, _ = model_path("jitter", 0.0, delay_ms=5, jitter_ms=1)
    _, fates = feed(ab, n=10_000, gap_s=0.0001)  # 0.1 ms apart, spread 2 ms
    leave = [f[0] for f in fates]
    assert all(0.004 - 1e-9 <= t - i * 0.0001 <= 0.006 + 1e-9 for i, t in enumerate(leave))
    overtaken = sum(1 for a, b in zip(leave, leave[1:], strict=False) if b < a)
    assert overtaken > 3000  # about half of neighbours swap at this spacing
    # packets further apart than the spread keep their order
    _, fates = feed(ab, n=2_000, gap_s=0.0021)
    leave = [f[0] for f in fates]
    assert leave == sorted(leave)


def test_every_model_at_zero_loss_loses_nothing_but_what_its_queue_drops() -> None:
    for model in MODELS:
        for imp in model_path(model, 0.0, delay_ms=1):
            d, fates = feed(imp, n=5_000, gap_s=0.001)
            assert all(fates), model
            assert d.counts["lost"] == d.counts["burst_lost"] == 0


@pytest.mark.parametrize("args", [("nosuch", 0.05), ("random", 1.0), ("random", -0.1)])
def test_bad_models_are_refused(args: tuple[str, float]) -> None:
    with pytest.raises(ValueError):
        model_path(*args)
