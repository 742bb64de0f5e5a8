"""64 independent requests in flight DEALER -> ROUTER on a simulated 10 ms path with 5 % loss
each way, per-link order on and off (README, "Ordered or not"). The server spends 150 us of
virtual time a request, so requests and replies spread over the round trip in many datagrams
as on a real host (with no CPU cost the 64 travel as one BATCH and every loss is a tail loss).

What it holds: exactly once and, when ordered, in order; a gap costs one recovery: losses are
found by later acknowledgements (fast retransmissions), not by a probe timeout per window,
and few retransmissions were needless. What order costs is left to the benchmark (`a3m bench
rpc`): a lost message holds every later one of its link for about a round trip."""

from __future__ import annotations

from random import Random

import pytest

from a3m.exon import ExonConfig
from a3m.testing.sim import LinkModel, Network
from a3m.testing.sim_node import NodeHost

from .conftest import SIMULATED

SERVICE_S = 150e-6
N = 5_000
IN_FLIGHT = 64


class BusyHost(NodeHost):
    """A host whose application also wakes at ``wake`` (its CPU is busy until then)."""

    wake: float | None = None

    def next_timer(self) -> float | None:
        t = super().next_timer()
        if self.wake is not None:
            t = self.wake if t is None else min(t, self.wake)
        return t

    def handle_timer(self, now: float) -> None:
        if self.wake is not None and self.wake <= now:
            self.wake = None
        super().handle_timer(now)


@pytest.mark.parametrize("ordered", [True, False], ids=["ordered", "unordered"])
def test_a_gap_costs_one_recovery_not_a_probe_timeout(ordered: bool) -> None:
    net = Network(11, LinkModel(loss=0.05, delay_s=0.005, jitter_s=0.0))
    rng = Random(11)
    cfg = ExonConfig(loopback_datagram_size=0)
    a, b = NodeHost("a", rng, cfg), BusyHost("b", rng, cfg)
    net.add("a", a)
    net.add("b", b)
    a.proto.associate("b", net.address["b"])
    b.proto.associate("a", net.address["a"])
    dealer = a.core.create("DEALER", "d", ordered=ordered)
    router = b.core.create("ROUTER", "r", ordered=ordered)
    sent, got = [0], []
    busy = [0.0]

    def client(host: NodeHost, now: float) -> None:
        while (m := dealer.try_recv()) is not None:
            got.append(int(m.payload))
        while sent[0] < N and sent[0] - len(got) < IN_FLIGHT:
            if not dealer.try_send(b"%08d" % sent[0]):
                break
            sent[0] += 1

    def server(host: NodeHost, now: float) -> None:
        while now >= busy[0] and (m := router.try_recv()) is not None:
            assert router.try_send(m.payload, to=m.source)
            busy[0] = max(busy[0], now) + SERVICE_S
        b.wake = busy[0] if busy[0] > now else None

    a.app, b.app = client, server
    dealer.link(("b", "r"), 0.0)
    net.flush("a")
    net.run_until(lambda: len(got) >= N, max_time=600, what="rpc")
    assert sorted(got) == list(range(N))  # exactly once
    if ordered:
        assert got == list(range(N))  # and in order
    else:
        assert got != list(range(N))  # replies overtook a lost one
    retransmits = probes = duplicates = 0
    for host in (a, b):
        st = host.proto.stats
        retransmits += st.retransmits
        probes += st.probe_timeouts
        duplicates += st.duplicates
    assert net.stats.lost > 200  # ~5 % of some 10 000 datagrams
    assert retransmits >= 0.9 * net.stats.lost * 0.5  # (a lost pure ACK needs none)
    assert probes < 0.05 * retransmits, (probes, retransmits)
    assert duplicates < 0.1 * net.stats.lost, (duplicates, net.stats.lost)
    SIMULATED["messages"] += 2 * N
    SIMULATED["runs"] += 1
