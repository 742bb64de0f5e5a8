"""The native Exon engine (``a3m._native.ExonCore``) against its Python twin, the specification
(``a3m.exon.protocol.ExonProtocol``): the same seeded simulations run once on each, every
datagram each node sends and every event it handles traced, and the two traces must be equal,
byte for byte and in order. A failure names the scenario and seed and shows the first step
where the engines part (replay one with ``A3M_SIM_ENGINE=native`` and ``A3M_SIM_SEED``).

Scenarios: the simulator's faults (loss, duplication, reordering, partitions, address
changes), fragmented messages, a slow reader, crashes and graceful restarts of either side,
peers given up when unreachable, secure sessions and the opt-out, many nodes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from a3m.exon import ExonConfig
from a3m.exon.engine import default_engine
from a3m.testing.sim import LinkModel, Network
from a3m.testing.sim_exon import SIM_ENGINE_ENV, ExonCluster

pytestmark = pytest.mark.skipif(default_engine() != "native",
                                reason="the native engine is not built (or A3M_ENGINE=python)")

FAST = ExonConfig(idle_release_s=0.5, probe_interval_s=1.0, probe_interval_max_s=4.0)
CLEAR = ExonConfig(idle_release_s=0.5, probe_interval_s=1.0, probe_interval_max_s=4.0,
                   secure=False)
LIVE = ExonConfig(idle_release_s=0.5, probe_interval_s=1.0, probe_interval_max_s=4.0,
                  peer_timeout_s=4.0)
SLOW = ExonConfig(idle_release_s=0.5, probe_interval_s=1.0, recv_buffer_bytes=50_000,
                  slots_ahead=64, max_live_slots=256)

Build = Callable[[Network], ExonCluster]


def _sweep(cfg: ExonConfig, per_pair: int, names: list[str], **kw: Any) -> Build:
    def build(net: Network) -> ExonCluster:
        c = ExonCluster(net, names, cfg)
        c.all_to_all(per_pair, **kw)
        return c
    return build


def _fragments(net: Network) -> ExonCluster:
    c = ExonCluster(net, ["a", "b"], FAST)
    c.flow("a", "b", 600, big_every=5, big_size=30_000)
    c.flow("b", "a", 600, big_every=7, big_size=9_000)
    return c


def _partitions(net: Network) -> ExonCluster:
    c = ExonCluster(net, ["a", "b", "c", "d"], FAST)
    c.all_to_all(300)
    net.partition({"a"}, 0.05, 3.0)
    net.partition({"a", "b"}, 4.0, 9.0)
    return c


def _moves(net: Network) -> ExonCluster:
    c = ExonCluster(net, ["src", "dst"], FAST)
    c.flow("src", "dst", 40_000)
    c.flow("dst", "src", 2_000)

    def move(who: str) -> None:  # as tests/sim's address changes: announce, then send
        net.move(who)
        c.apps[who].proto.announce(net.now)
        net.flush(who)

    for t, who in ((0.3, "dst"), (0.4, "src"), (0.5, "dst")):
        net.at(t, lambda who=who: move(who))
    return c


def _slow_reader(net: Network) -> ExonCluster:
    c = ExonCluster(net, ["fast", "slow"], SLOW)
    c.flow("fast", "slow", 3000, size=200)
    slow = c.apps["slow"]
    slow.paused = True
    net.at(3.0, slow.resume)
    return c


def _crashes(net: Network) -> ExonCluster:
    c = ExonCluster(net, ["a", "b"], FAST)
    c.flow("a", "b", 6000)
    c.flow("b", "a", 6000)
    net.at(0.1, lambda: c.crash_restart("b"))
    net.at(0.25, lambda: c.crash_restart("a"))
    return c


def _restarts(net: Network) -> ExonCluster:
    c = ExonCluster(net, ["a", "b", "c"], FAST)
    c.flow("a", "b", 4000, every_s=0.0002)
    c.flow("c", "b", 1000, every_s=0.001, big_every=20, big_size=12_000)
    c.flow("b", "a", 2000)
    plan = [(500, "b", "close"), (1_500, "b", "crash"), (2_500, "a", "crash"),
            (3_500, "b", "close")]

    def step(i: int) -> None:
        if i == len(plan):
            return
        n, who, how = plan[i]

        def act() -> None:
            if how == "crash":
                c.crash_restart(who)
                step(i + 1)
            else:
                c.close_restart(who, then=lambda: step(i + 1))

        c.when_delivered(n, act)

    step(0)
    return c


def _given_up(net: Network) -> ExonCluster:
    c = ExonCluster(net, ["a", "b", "c"], LIVE)
    c.all_to_all(600, every_s=0.02)
    c.flow("c", "a", 60, first=10_000, big_every=10, big_size=12_000)
    for app in c.apps.values():
        app.abandon_unreachable = True
    net.partition({"a"}, 0.5, 8.0)
    return c


SCENARIOS: dict[str, tuple[Build, tuple[float, float, float], list[int]]] = {
    "clean": (_sweep(FAST, 1000, ["a", "b", "c"]), (0.0, 0.0, 0.0), [1]),
    "lossy": (_sweep(FAST, 1000, ["a", "b", "c"]), (0.1, 0.1, 0.3), [2, 3]),
    "heavy": (_sweep(FAST, 500, ["a", "b"]), (0.5, 0.3, 0.5), [4]),
    "reorder": (_sweep(FAST, 1000, ["a", "b"]), (0.0, 0.5, 0.9), [5]),
    "clear": (_sweep(CLEAR, 1000, ["a", "b", "c"]), (0.2, 0.1, 0.2), [6, 7]),
    "many": (_sweep(FAST, 60, [f"n{i}" for i in range(8)]), (0.2, 0.1, 0.3), [8]),
    "fragments": (_fragments, (0.2, 0.1, 0.3), [9]),
    "partitions": (_partitions, (0.1, 0.0, 0.2), [10]),
    "moves": (_moves, (0.1, 0.1, 0.2), [11]),
    "slow-reader": (_slow_reader, (0.1, 0.0, 0.2), [12]),
    "crashes": (_crashes, (0.1, 0.1, 0.2), [13]),
    "restarts": (_restarts, (0.1, 0.1, 0.2), [14]),
    "given-up": (_given_up, (0.1, 0.05, 0.2), [15]),
}


def _trace(monkeypatch: pytest.MonkeyPatch, engine: str, build: Build,
           mix: tuple[float, float, float], seed: int) -> tuple[list[Any], dict[str, int]]:
    monkeypatch.setenv(SIM_ENGINE_ENV, engine)
    loss, dup, reorder = mix
    net = Network(seed, LinkModel(loss=loss, dup=dup, reorder=reorder))
    trace: list[Any] = []
    cluster = build(net)
    cluster.trace = trace
    for app in cluster.apps.values():
        assert type(app.proto).__name__ == ("ExonCore" if engine == "native" else "ExonProtocol")
        app.trace = trace
    cluster.run(max_time=600)
    return trace, cluster.check()


def _show(step: Any) -> str:
    kind, now, node, *rest = step
    what = rest[0].hex()[:96] if isinstance(rest[0], bytes) else str(rest[0])[:160]
    return f"{kind} t={now:.6f} {node}: {what}"


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_both_engines_send_and_report_the_same(monkeypatch: pytest.MonkeyPatch,
                                               name: str) -> None:
    build, mix, seeds = SCENARIOS[name]
    for seed in seeds:
        spec, counts = _trace(monkeypatch, "python", build, mix, seed)
        twin, twin_counts = _trace(monkeypatch, "native", build, mix, seed)
        assert spec, "the scenario did nothing"
        for i, (a, b) in enumerate(zip(spec, twin, strict=False)):
            if a != b:
                context = "\n".join(f"  python {_show(x)}\n  native {_show(y)}"
                                    for x, y in zip(spec[max(0, i - 2):i + 3],
                                                    twin[max(0, i - 2):i + 3], strict=False))
                pytest.fail(f"{name}, seed {seed}: the engines part at step {i} of "
                            f"{len(spec)}:\n{context}")
        assert len(spec) == len(twin), (name, seed, len(spec), len(twin))
        assert counts == twin_counts
