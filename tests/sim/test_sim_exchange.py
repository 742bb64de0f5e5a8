"""REQ and REP through the native exchange on the deterministic simulator (``NodeHost(...,
exchange=True)``: Exon's deliveries offered to the lent sockets' table first, the
applications' calls through it), under loss, duplication and reordering: the same round trips
as through the core alone, each answered once and in order, and the same links, credits and
counters at the end. A failing seed names the case (``A3M_SIM_SEED=<n>`` replays it).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from a3m._dataplane import native
from a3m.exon import ExonConfig
from a3m.testing.sim import LinkModel, Network, seed_from_env
from a3m.testing.sim_node import NodeHost

from .conftest import SIMULATED
from .test_sim_patterns import cluster

pytestmark = pytest.mark.skipif(native is None or not hasattr(native, "ExchangeTable"),
                                reason="the native data plane is not built")

CFG = ExonConfig(idle_release_s=0.5, probe_interval_s=1.0, probe_interval_max_s=4.0)
CASES = [
    ("quiet", 11, LinkModel()),
    ("l20-d10-r30", 101, LinkModel(loss=0.2, dup=0.1, reorder=0.3)),
    ("l05-d40-r80", 303, LinkModel(loss=0.05, dup=0.4, reorder=0.8, jitter_s=0.004)),
]
IDS = [c[0] for c in CASES]
#: Credits small enough for a FLOW every two messages each way, a fixed capacity (its
#: growth follows the round trips measured, which the two runs need not share).
SOCKET = {"capacity": 8, "capacity_max": 0}


def _run(case: tuple[str, int, LinkModel], exchange: bool, rounds: int = 400
         ) -> tuple[dict[str, list[bytes]], Counter[bytes], dict[str, Any], int]:
    _, seed, model = case
    net = Network(seed_from_env(seed), model)
    names = ("c0", "c1", "s0")
    h = cluster(net, *names, config=CFG, exchange=exchange)
    rep = h["s0"].core.create("REP", "rep", **SOCKET)
    reqs = {c: h[c].core.create("REQ", "req", **SOCKET) for c in ("c0", "c1")}
    if exchange:
        h["s0"].want_lent(rep)
        for c, req in reqs.items():
            h[c].want_lent(req)
    replies: dict[str, list[bytes]] = {c: [] for c in reqs}
    served: Counter[bytes] = Counter()
    waiting = {c: False for c in reqs}

    def client(name: str) -> Callable[[NodeHost, float], None]:
        req = reqs[name]

        def app(host: NodeHost, now: float) -> None:
            while True:
                if waiting[name]:
                    got = host.exchange_recv(req)
                    if got is None:
                        return
                    replies[name].append(got)
                    waiting[name] = False
                i = len(replies[name])
                if i >= rounds or not req.established_links():
                    return
                if not host.exchange_send(req, b"%s:%d" % (name.encode(), i)):
                    return
                waiting[name] = True
        return app

    owed: list[bytes] = []

    def server(host: NodeHost, now: float) -> None:
        while True:
            if not owed:
                got = host.exchange_recv(rep)
                if got is None:
                    return
                served[got] += 1
                owed.append(b"re " + got)
            if not host.exchange_send(rep, owed[0]):
                return
            owed.pop()

    for c, req in reqs.items():
        h[c].app = client(c)
        req.link(("s0", "rep"), 0.0)
    h["s0"].app = server
    for n in names:
        net.flush(n)
    net.run_until(lambda: all(len(r) >= rounds for r in replies.values()), max_time=3600,
                  what="round trips")
    net.run_for(5.0)  # the last FLOWs and ACKs settle
    state: dict[str, Any] = {}
    exchanged = 0
    for name, sock in (("s0", rep), ("c0", reqs["c0"]), ("c1", reqs["c1"])):
        host = h[name]
        if host.lender is not None:
            host.lender.take_all_back()
            exchanged += host.exchanged
        for lk in sorted(sock.links.values(), key=lambda lk: lk.peer):
            r, s = lk.recv, lk.send
            state[f"{name}->{lk.peer}"] = (
                lk.state, lk.expected_seq, lk.next_seq, lk.data_in, lk.processed,
                r.received, r.delivered, r.edge, r.max_edge, r.flow_seq, r.arrived_bytes,
                s.edge, s.sent, s.flow_seq)
        state[f"{name}.stats"] = dict(sock.stats)
        state[f"{name}.violations"] = sock.violations
    SIMULATED["messages"] += 2 * rounds
    SIMULATED["runs"] += 1
    return replies, served, state, exchanged


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_the_same_round_trips_and_links_as_the_core(case: tuple[str, int, LinkModel]) -> None:
    rounds = 400
    replies, served, state, exchanged = _run(case, True, rounds)
    replies_core, served_core, state_core, _ = _run(case, False, rounds)
    for c in ("c0", "c1"):
        want = [b"re %s:%d" % (c.encode(), i) for i in range(rounds)]
        assert replies[c] == want and replies_core[c] == want
    assert set(served.values()) == {1} and served == served_core
    assert state == state_core
    # the exchange carried a good part of it (the rest went through the core: gaps, FLOWs
    # Exon could not take, what came while a socket was back in the core)
    assert exchanged > rounds
