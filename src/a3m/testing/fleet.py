"""A fleet linking to one collector that takes time to work, on the simulated network
(:func:`fleet_link`): N producer nodes (Exon + core, as ``a3m.Node``) each link a PUSH to one
collector's PULL at the same moment; the collector's work takes virtual time
(:class:`~a3m.testing.sim.HostCpu`: each datagram it reads and sends costs that much, what
arrives while it works waits in a bounded socket queue), so a fleet can outrun it as
thousands of real producers outrun one collector process. What it counts (datagrams each side
sent, retransmissions, the collector's queue drops) does not depend on the machine: the
storm of first exchanges shows in the counts (issue 32; ``bench/fleet_link.py``).
"""

from __future__ import annotations

from random import Random
from typing import Any

from a3m.exon import ExonConfig
from a3m.testing.sim import HostCpu, LinkModel, Network, SimulationError
from a3m.testing.sim_node import NodeHost

COUNTERS = ("datagrams_out", "retransmits", "probe_timeouts", "probe_copies",
            "reqslots_retransmits", "hello_resends", "initiate_resends", "handshakes_started",
            "duplicates", "sealed_dropped", "probes_deferred")


def _sums(net: Network, names: list[str]) -> dict[str, int]:
    hosts: dict[str, Any] = net.hosts
    sums = {k: 0 for k in COUNTERS}
    for name in names:
        st = hosts[name].proto.stats
        for k in COUNTERS:
            sums[k] += getattr(st, k, 0)
    return sums


def fleet_link(peers: int, cpu: HostCpu, until: float = 60.0, seed: int = 1,
               config: ExonConfig | None = None, messages: int = 0,
               settle_s: float = 3.0) -> dict[str, Any]:
    """Run one fleet's link-up (and, with ``messages``, a fan-in: ``settle_s`` after the
    last link, every producer sends that many messages at once, and the collector's
    application takes them as they come); return what it counted."""
    net = Network(seed, LinkModel(delay_s=0.0005, jitter_s=0.0002))
    rng = Random(seed)
    cfg = config or ExonConfig()
    col = NodeHost("collector", rng, cfg)
    net.add("collector", col)
    net.set_cpu("collector", cpu)
    pull = col.core.create("PULL", "in")
    pushes = []
    names = [f"p{i}" for i in range(peers)]
    for name in names:
        h = NodeHost(name, rng, cfg)
        net.add(name, h)
        h.proto.associate("collector", net.address["collector"])
        push = h.core.create("PUSH", "out")
        push.link(("collector", "in"), 0.0)
        pushes.append(push)
        net.flush(name)
    linked_at = None
    try:
        net.run_until(lambda: len(pull.established_links()) == peers
                      and all(p.is_linked() for p in pushes), max_time=until,
                      what="every link")
        linked_at = net.now
    except SimulationError:
        pass
    sums = _sums(net, names)
    cst = col.proto.stats
    out: dict[str, Any] = {
        "peers": peers, "linked": sum(1 for p in pushes if p.is_linked()),
        "collector_links": len(pull.established_links()),
        "linked_at_s": None if linked_at is None else round(linked_at, 3),
        "collector_rx_drops": net.rx_drops["collector"],
        "producers": {k: round(v / peers, 2) for k, v in sums.items()},
        "collector": {k: getattr(cst, k, 0) for k in COUNTERS + (
            "datagrams_in", "handshakes_accepted", "hellos_answered", "handshake_repeats",
            "retries_sent", "unauth_shed", "welcomes_repeated")},
    }
    if messages and linked_at is not None:
        out["fan_in"] = _fan_in(net, col, pull, pushes, names, messages, settle_s, until)
    return out


def _fan_in(net: Network, col: NodeHost, pull: Any, pushes: list[Any], names: list[str],
            messages: int, settle_s: float, until: float) -> dict[str, Any]:
    net.run_for(settle_s)
    got: list[int] = [0]

    def take(host: NodeHost, now: float) -> None:
        got[0] += len(pull.try_recv_many(100_000))

    col.app = take
    before = _sums(net, names)
    c0 = {k: getattr(col.proto.stats, k, 0) for k in ("datagrams_in", "datagrams_out",
                                                       "retransmits", "duplicates")}
    d0 = net.rx_drops["collector"]
    t0 = net.now
    sent = 0
    for push, name in zip(pushes, names, strict=True):
        for i in range(messages):
            sent += bool(push.try_send(b"%d" % i))
        net.flush(name)
    total = len(pushes) * messages
    done_at = None
    try:
        net.run_until(lambda: got[0] >= total, max_time=t0 + until, what="the fan-in")
        done_at = net.now - t0
    except SimulationError:
        pass
    after = _sums(net, names)
    cst = col.proto.stats
    return {
        "sent": sent, "received": got[0],
        "done_s": None if done_at is None else round(done_at, 3),
        "collector_rx_drops": net.rx_drops["collector"] - d0,
        "producers": {k: round((after[k] - before[k]) / len(names), 2) for k in COUNTERS},
        "collector": {k: getattr(cst, k, 0) - v for k, v in c0.items()},
    }
