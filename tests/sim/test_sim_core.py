"""The core over Exon under simulated faults: links race and settle, PUSH/PULL is exactly
once and in order, unlink loses nothing, the credits bound what a receiver holds."""

from __future__ import annotations

from random import Random

import pytest

from a3m.core.socket_core import SocketCore
from a3m.exon import ExonConfig
from a3m.testing.sim import LinkModel, Network, seed_from_env
from a3m.testing.sim_node import NodeHost

from .conftest import SIMULATED

# peer_timeout_s: at 40 % loss each way (l40 below) a live peer misses all eight chances the
# default 15 s gives it with probability 0.64^8 = 2.8 % per silent stretch
# (docs/exon-wire.md, "Peer liveness"): the node then ends the link, and what was in flight
# on it without a cookie is gone (seed 5986 of both-link-l40, about one run in 200). These
# tests are about links and exactly-once under faults, not that signal: 60 s gives 30
# chances, 1.5e-6.
CFG = ExonConfig(idle_release_s=0.5, probe_interval_s=1.0, probe_interval_max_s=4.0,
                 peer_timeout_s=60.0)


def hosts(net: Network, *names: str) -> dict[str, NodeHost]:
    out = {}
    rng = Random(net.seed)
    for n in names:
        out[n] = NodeHost(n, rng, CFG)
        net.add(n, out[n])
    for a in names:
        for b in names:
            if a != b:
                out[a].proto.associate(b, net.address[b])
    return out


FAULTS = [LinkModel(loss=0.2, dup=0.1, reorder=0.3), LinkModel(loss=0.4, reorder=0.6),
          LinkModel(dup=0.5, reorder=0.9)]


@pytest.mark.parametrize("model", FAULTS, ids=["l20", "l40", "dup50"])
@pytest.mark.parametrize("order", ["push-first", "pull-first", "both-link"])
def test_link_races_settle_and_pushpull_exactly_once_in_order(model: LinkModel,
                                                              order: str) -> None:
    seed = seed_from_env(hash((order, model.loss)) % 10_000)
    net = Network(seed, model)
    h = hosts(net, "a", "b")
    push = h["a"].core.create("PUSH", "src")
    pull = h["b"].core.create("PULL", "sink", capacity=64)
    n = 5000
    got: list[bytes] = []
    sent = [0]

    def app_a(host: NodeHost, now: float) -> None:
        while sent[0] < n and push.try_send(b"%d" % sent[0]):
            sent[0] += 1

    def app_b(host: NodeHost, now: float) -> None:
        while (r := pull.try_recv()) is not None:
            got.append(r.payload)

    h["a"].app, h["b"].app = app_a, app_b
    if order in ("push-first", "both-link"):
        push.link(("b", "sink"), 0.0)
    if order in ("pull-first", "both-link"):
        pull.link(("a", "src"), 0.0)
    net.flush("a")
    net.flush("b")
    net.run_until(lambda: len(got) >= n, max_time=600, what="pushpull")
    assert got == [b"%d" % i for i in range(n)]
    assert len(push.links) == 1 and len(pull.links) == 1
    push.unlink(("b", "sink"), net.now)
    net.flush("a")
    net.run_until(lambda: not push.links and not pull.links, max_time=net.now + 120,
                  what="unlink")
    SIMULATED["messages"] += n
    SIMULATED["runs"] += 1


def test_unlink_mid_stream_under_loss_loses_nothing() -> None:
    net = Network(seed_from_env(404), LinkModel(loss=0.3, dup=0.1, reorder=0.4))
    h = hosts(net, "a", "b")
    push = h["a"].core.create("PUSH", "src")
    pull = h["b"].core.create("PULL", "sink", capacity=500)
    got: list[bytes] = []

    def reader(host: NodeHost, now: float) -> None:
        while (r := pull.try_recv()) is not None:
            got.append(r.payload)

    h["b"].app = reader
    push.link(("b", "sink"), 0.0)
    net.flush("a")
    net.run_until(lambda: push.is_linked(), max_time=60)
    sent = 0
    while push.try_send(b"%d" % sent):
        sent += 1
    push.unlink(("b", "sink"), net.now)
    net.flush("a")
    net.run_until(lambda: not push.links and not pull.links, max_time=net.now + 300)
    net.flush("b")
    assert got == [b"%d" % i for i in range(sent)] and sent == 500


def test_receiver_memory_bounded_by_links_times_capacity() -> None:
    """Ten pushers flood one puller that never reads: it holds at most links x capacity."""
    net = Network(seed_from_env(505), LinkModel(loss=0.05, reorder=0.2))
    names = [f"p{i}" for i in range(10)]
    h = hosts(net, "sink", *names)
    pull = h["sink"].core.create("PULL", "in", capacity=32)
    pushers: list[SocketCore] = []
    for n in names:
        s = h[n].core.create("PUSH", "out")
        s.link(("sink", "in"), 0.0)
        pushers.append(s)

        def flood(host: NodeHost, now: float, s: SocketCore = s) -> None:
            while s.try_send(b"z" * 100):
                pass
        h[n].app = flood
        net.flush(n)
    net.run_for(30.0)
    held = sum(len(lk.inq) for lk in pull.links.values())
    assert len(pull.links) == 10
    assert held == 10 * 32  # exactly links x capacity: the rest waits at the senders
    assert all(not s.writable for s in pushers)
