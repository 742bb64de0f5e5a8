"""A one-way PUSH -> PULL stream between two simulated nodes, ``a`` and ``b``: what the
stream simulations share (tests/sim/test_sim_long_path.py, test_sim_pacing.py)."""

from __future__ import annotations

from dataclasses import dataclass
from random import Random
from typing import Any

from a3m.exon import ExonConfig
from a3m.testing.sim import Network
from a3m.testing.sim_node import NodeHost

from .conftest import SIMULATED


@dataclass
class Stream:
    hosts: dict[str, NodeHost]
    first_sent: float  # virtual time of the first message taken by the PUSH
    first_got: float  # ... and of the first delivered by the PULL


def push_pull(net: Network, rng: Random, cfg: ExonConfig, n: int,
              **pull_options: Any) -> Stream:
    """Send ``n`` numbered 64-byte messages a -> b over ``net`` (the hosts are added here)
    until all arrived; checks each exactly once, in order."""
    h = {x: NodeHost(x, rng, cfg) for x in ("a", "b")}
    for x in h:
        net.add(x, h[x])
    h["a"].proto.associate("b", net.address["b"])
    h["b"].proto.associate("a", net.address["a"])
    push = h["a"].core.create("PUSH", "src")
    pull = h["b"].core.create("PULL", "sink", **pull_options)
    got: list[bytes] = []
    sent = [0]
    first = [-1.0, -1.0]

    def app_a(host: NodeHost, now: float) -> None:
        while sent[0] < n and push.try_send(b"%063d" % sent[0]):
            if first[0] < 0:
                first[0] = now
            sent[0] += 1

    def app_b(host: NodeHost, now: float) -> None:
        while (r := pull.try_recv()) is not None:
            if first[1] < 0:
                first[1] = now
            got.append(r.payload)

    h["a"].app, h["b"].app = app_a, app_b
    push.link(("b", "sink"), 0.0)
    net.flush("a")
    net.run_until(lambda: len(got) >= n, max_time=120, what="stream")
    assert got == [b"%063d" % i for i in range(n)]  # exactly once, in order
    SIMULATED["messages"] += n
    SIMULATED["runs"] += 1
    return Stream(h, first[0], first[1])
