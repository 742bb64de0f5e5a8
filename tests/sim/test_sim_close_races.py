"""Sends racing the receiver's close (issue 40): a PUSH streams messages with cookies into a
PULL that, at a random moment, closes its socket, unlinks, or closes its whole node, through
loss, duplication and reordering. Every message the PUSH took gets exactly one outcome, a
true one (DELIVERED only if taken, NOT_DELIVERED never if taken), within the close timeout;
the receiver's close ends within it too.

``A3M_SIM_SEED=<n>`` replays one seed; ``A3M_SIM_CLOSE_SEEDS=<n>`` runs n seeds (200 in the
suite; the recorded run took 1 000, docs/testing.md).
"""

from __future__ import annotations

import os
from collections import Counter
from random import Random

import pytest

from a3m.core.cookies import DELIVERED, NOT_DELIVERED, UNKNOWN
from a3m.exon import ExonConfig
from a3m.testing.sim import LinkModel, Network, seed_from_env
from a3m.testing.sim_node import NodeHost

from .conftest import SIMULATED

CFG = ExonConfig(idle_release_s=0.5, probe_interval_s=1.0, probe_interval_max_s=4.0,
                 peer_timeout_s=8.0)
MODELS = [LinkModel(loss=0.1, reorder=0.3), LinkModel(loss=0.2, dup=0.1, reorder=0.5,
                                                      jitter_s=0.003),
          LinkModel(loss=0.02, reorder=0.8, jitter_s=0.001), LinkModel(loss=0.3)]
#: What the receiver does mid-stream.
ENDS = ("close", "unlink", "close-node", "push-unlink")
#: The close timeout the runtime gives a socket by default (``Socket.__exit__``), and a
#: node's (``Node.__exit__``): every outcome must be known by then.
CLOSE_TIMEOUT_S = 10.0
SEEDS = int(os.environ.get("A3M_SIM_CLOSE_SEEDS", "200"))


def run_seed(seed: int) -> Counter[str]:
    rng = Random(seed)
    net = Network(seed, MODELS[seed % len(MODELS)])
    a = NodeHost("a", Random(rng.random()), CFG)
    b = NodeHost("b", Random(rng.random()), CFG)
    net.add("a", a)
    net.add("b", b)
    a.proto.associate("b", net.address["b"])
    b.proto.associate("a", net.address["a"])
    end = ENDS[(seed // len(MODELS)) % len(ENDS)]
    capacity = rng.choice([4, 16, 64])
    push = a.core.create("PUSH", "src", capacity=capacity)
    pull = b.core.create("PULL", "sink", capacity=capacity)
    n = rng.randrange(50, 400)
    sent: list[int] = []
    outcomes: dict[int, list[str]] = {}
    taken: list[int] = []
    pace = rng.randrange(1, 6)
    state = {"closed_at": -1.0, "b_closed": False, "node_closing": False}

    def app_a(host: NodeHost, now: float) -> None:
        while len(sent) < n and push.try_send(b"%d" % len(sent), cookie=len(sent)):
            sent.append(len(sent))
        for c in push.take_cookies(1000):
            outcomes.setdefault(int(c.value), []).append(c.outcome)  # type: ignore[call-overload]

    def app_b(host: NodeHost, now: float) -> None:
        if state["node_closing"] and pull.is_drained and not b.proto.closing:
            b.bridge.pump(now)  # as Node.close: its sockets closed first, what they sent
            b.proto.close(now)  # handed to Exon, then Exon closes
        if state["b_closed"]:
            return
        for _ in range(pace):
            got = pull.try_recv()
            if got is None:
                break
            taken.append(int(got.payload))

    a.app = app_a
    b.app = app_b
    push.link(("b", "sink"), 0.0)
    net.flush("a")
    net.run_until(lambda: bool(push.established_links()), max_time=120, what="link")

    def the_end() -> None:
        state["closed_at"] = net.now
        if end == "close":
            state["b_closed"] = True
            pull.close(net.now)
        elif end == "unlink":
            pull.unlink(("a", "src"), net.now)
        elif end == "close-node":
            state["b_closed"] = state["node_closing"] = True
            pull.close(net.now)
        else:
            push.unlink(("b", "sink"), net.now)
            net.flush("a")
        net.flush("b")

    net.at(net.now + rng.uniform(0.0, 0.6), the_end)
    net.run_until(lambda: state["closed_at"] >= 0, max_time=120, what="the end")
    closed_at = state["closed_at"]

    def settled() -> bool:
        return len(outcomes) >= len(sent) and not push.links

    try:
        net.run_until(settled, max_time=closed_at + CLOSE_TIMEOUT_S + 1.0, what="every outcome")
    except Exception as exc:
        missing = sorted(set(sent) - set(outcomes))
        raise AssertionError(f"seed {seed} ({end}, capacity {capacity}): {exc}; "
                             f"{len(missing)} of {len(sent)} without an outcome "
                             f"(first {missing[:5]}), links {push.links}, "
                             f"jar {push.jar.out}") from exc
    assert net.now <= closed_at + CLOSE_TIMEOUT_S, (seed, end, net.now - closed_at)
    if end == "close":
        net.run_until(lambda: pull.is_drained, max_time=closed_at + CLOSE_TIMEOUT_S,
                      what="the receiver's close")
    net.run_for(3.0)  # nothing more may come
    counts = Counter(taken)
    assert all(c == 1 for c in counts.values()), f"seed {seed}: a message taken twice"
    assert sorted(outcomes) == sent, f"seed {seed}"
    for i, got in outcomes.items():
        assert len(got) == 1, f"seed {seed} ({end}): message {i}: outcomes {got}"
        if got[0] == DELIVERED:
            assert i in counts, f"seed {seed} ({end}): message {i} DELIVERED, never taken"
        elif got[0] == NOT_DELIVERED:
            assert i not in counts, f"seed {seed} ({end}): message {i} NOT_DELIVERED, taken"
        else:
            assert got[0] == UNKNOWN
    SIMULATED["messages"] += len(sent)
    SIMULATED["runs"] += 1
    return Counter(o[0] for o in outcomes.values())


@pytest.mark.parametrize("chunk", range(4))
def test_sends_racing_the_receivers_close_all_resolve(chunk: int) -> None:
    one = os.environ.get("A3M_SIM_SEED")
    if one:
        if chunk == 0:
            run_seed(int(one))
        return
    for seed in range(90000 + chunk, 90000 + SEEDS, 4):
        run_seed(seed_from_env(seed))
