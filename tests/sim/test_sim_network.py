"""The simulator itself: determinism, faults, partitions, moves, bounds."""

from __future__ import annotations

from typing import Any

import pytest

from a3m.testing.sim import LinkModel, Network, SimulationError, seed_from_env


class Echo:
    """Answers every datagram once; sends ``n`` pings to ``peer`` at start."""

    def __init__(self, peer: str | None = None, n: int = 0) -> None:
        self.peer, self.n = peer, n
        self.out: list[tuple[bytes, Any]] = []
        self.got: list[bytes] = []

    def receive_datagram(self, data: bytes, addr: Any, now: float) -> None:
        self.got.append(data)
        if data.startswith(b"ping"):
            self.out.append((b"pong" + data[4:], addr))

    def datagrams_to_send(self, now: float) -> list[tuple[bytes, Any]]:
        if self.n and self.peer:
            self.out.extend((b"ping%d" % i, self.peer) for i in range(self.n))
            self.n = 0
        out, self.out = self.out, []
        return out

    def next_timer(self) -> float | None:
        return None

    def handle_timer(self, now: float) -> None:
        pass


def run_echo(seed: int, model: LinkModel) -> tuple[list[bytes], Network]:
    net = Network(seed, model)
    b = Echo()
    net.add("b", b)
    a = Echo("b@0", 1000)
    net.add("a", a)
    net.flush("a")
    net.run_for(10)
    return a.got, net


def test_same_seed_same_run() -> None:
    model = LinkModel(loss=0.3, dup=0.2, reorder=0.5)
    got1, net1 = run_echo(5, model)
    got2, net2 = run_echo(5, model)
    assert got1 == got2 and net1.stats == net2.stats
    got3, _ = run_echo(6, model)
    assert got3 != got1


def test_faults_are_applied() -> None:
    got, net = run_echo(1, LinkModel(loss=0.5, dup=0.3, reorder=0.5))
    st = net.stats
    assert 0.4 < st.lost / st.sent < 0.6
    assert st.duplicated > 0 and st.reordered > 0
    pongs = [g for g in got if g.startswith(b"pong")]
    assert pongs != sorted(pongs, key=lambda p: int(p[4:]))  # reordered


def test_lossless_network_delivers_in_order_everything() -> None:
    got, _ = run_echo(2, LinkModel(jitter_s=0.0))
    assert got == [b"pong%d" % i for i in range(1000)]


def test_partition_heals() -> None:
    net = Network(3, LinkModel())
    a, b = Echo(), Echo()
    net.add("a", a)
    net.add("b", b)
    net.partition({"a"}, 0.0, 1.0)
    a.out = [(b"x", "b@0")]
    net.flush("a")
    net.run_for(2)
    assert b.got == [] and net.stats.partitioned == 1
    a.out = [(b"y", "b@0")]
    net.flush("a")
    net.run_for(1)
    assert b.got == [b"y"]


def test_move_loses_datagrams_to_the_old_address() -> None:
    net = Network(4, LinkModel())
    a, b = Echo(), Echo()
    net.add("a", a)
    net.add("b", b)
    assert net.move("b") == "b@1"
    a.out = [(b"old", "b@0"), (b"new", "b@1")]
    net.flush("a")
    net.run_for(1)
    assert b.got == [b"new"] and net.stats.misaddressed == 1


def test_bounds_raise_with_the_seed() -> None:
    net = Network(9, LinkModel())
    net.add("a", Echo())
    with pytest.raises(SimulationError, match="A3M_SIM_SEED=9"):
        net.run_until(lambda: False, max_time=1.0, what="never")


def test_seed_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("A3M_SIM_SEED", raising=False)
    assert seed_from_env(3) == 3
    monkeypatch.setenv("A3M_SIM_SEED", "42")
    assert seed_from_env(3) == 42
