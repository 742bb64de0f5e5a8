"""Socket groups (RADIO / DISH) between whole nodes on the deterministic simulator: DISHes join
and leave, one closes, a node comes later, a partition cuts some members off, under loss,
duplication and reordering. Checked for every message:

- ALL: each member of the RADIO's view at send time gets it exactly once, nobody else gets it,
  and each member gets one RADIO's messages in the order they were sent;
- ONE: exactly one member of the view at send time gets it;
- the views converge: once changes stop, each RADIO's view of a group is exactly the DISHes
  in it, within a bounded time.

Replay a failing case with ``A3M_SIM_SEED=<seed>``.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from random import Random

import pytest

from a3m.core.socket_core import SocketCore
from a3m.patterns.groups import ALL, ONE
from a3m.testing.sim import LinkModel, Network
from a3m.testing.sim_node import NodeHost

from .test_sim_patterns import CASES, CFG, IDS, count, network

PER_RADIO = 600  # messages per RADIO and group
PACE_S = 0.01  # one message per RADIO and group every 10 ms from t=0.5 (until t=6.5)
CONVERGE_S = 8.0  # bound on the view's convergence after the last change (retry_max_s 5 s)


def hosts(net: Network, names: list[str], rng: Random) -> dict[str, NodeHost]:
    out = {n: NodeHost(n, rng, CFG) for n in names}
    for n, h in out.items():
        net.add(n, h)
    return out


def know(h: dict[str, NodeHost], net: Network, a: str, b: str) -> None:
    """``a`` learns of ``b`` as Node.associate would tell it."""
    h[a].proto.associate(b, net.address[b])
    h[a].core.node_known(b)


def view(radio: SocketCore, group: str) -> set[tuple[str, str]]:
    return set(radio.members(group))  # type: ignore[attr-defined]


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_groups_all_and_one_exactly_once_through_joins_leaves_and_a_partition(
        case: tuple[str, int, LinkModel]) -> None:
    net = network(case, 17)
    rng = Random(net.seed)
    radios = ["r0", "r1"]
    dishes = ["d0", "d1", "d2", "d3", "d4"]
    late = "d5"  # a node the RADIOs learn of mid-run
    h = hosts(net, radios + dishes + [late], rng)
    for r in radios:
        for d in dishes:
            know(h, net, r, d)
    for d in dishes + [late]:
        for r in radios:
            h[d].proto.associate(r, net.address[r])
    dsock = {d: h[d].core.create("DISH", "in") for d in dishes + [late]}
    for d in ("d0", "d1", "d2", "d3"):
        dsock[d].join("all")  # type: ignore[attr-defined]
    for d in ("d0", "d1", "d2"):
        dsock[d].join("one")  # type: ignore[attr-defined]
    rsock = {r: h[r].core.create("RADIO", "out") for r in radios}

    # What each send's view was, and what arrived.
    sent_to: dict[bytes, set[tuple[str, str]]] = {}
    got: dict[bytes, list[str]] = defaultdict(list)
    order: dict[tuple[str, str], list[int]] = defaultdict(list)  # (radio, dish) -> ALL seqs
    sent = Counter[tuple[str, str]]()

    def radio_app(name: str):  # noqa: ANN202
        sock = rsock[name]

        def app(host: NodeHost, now: float) -> None:
            for group, strategy in (("all", ALL), ("one", ONE)):
                paced = min(PER_RADIO, int((now - 0.5) / PACE_S) + 1)  # spread over the run
                while sent[(name, group)] < paced:
                    members = view(sock, group)
                    if not members:
                        break
                    i = sent[(name, group)]
                    payload = b"%s|%s|%d" % (name.encode(), group.encode(), i)
                    if not sock.try_send(payload, group=group, strategy=strategy):
                        break
                    sent_to[payload] = members
                    sent[(name, group)] += 1
        return app

    def dish_app(name: str):  # noqa: ANN202
        def app(host: NodeHost, now: float) -> None:
            sock = host.core.sockets.get("in")
            while sock is not None:
                msg = sock.try_recv()
                if msg is None:
                    return
                got[msg.payload].append(name)
                r, group, i = msg.payload.split(b"|")
                assert msg.topic == group and msg.attrs == {"group": group.decode()}
                if group == b"all":
                    order[(r.decode(), name)].append(int(i))
        return app

    for r in radios:
        h[r].app = radio_app(r)
    for d in dishes + [late]:
        h[d].app = dish_app(d)

    def act(name: str, fn) -> None:  # noqa: ANN001
        def run() -> None:
            fn()
            net.flush(name)
        return run

    net.at(1.0, act("d4", lambda: dsock["d4"].join("all")))  # type: ignore[attr-defined]
    net.at(1.5, act("d1", lambda: dsock["d1"].leave("all")))  # type: ignore[attr-defined]
    net.at(2.0, act("d2", lambda: dsock["d2"].close(net.now)))  # a member closes
    net.at(2.5, act("d5", lambda: dsock[late].join("all")))  # type: ignore[attr-defined]
    for r in radios:
        net.at(2.5, act(r, lambda r=r: know(h, net, r, late)))
    net.at(3.0, act("d3", lambda: dsock["d3"].join("one")))  # type: ignore[attr-defined]
    net.partition({"d0", "d4"}, 3.0, 5.0)
    net.at(4.0, act("d1", lambda: dsock["d1"].join("all")))  # type: ignore[attr-defined]
    last_change = 4.0
    for n in h:
        net.flush(n)

    def tick() -> None:  # wakes the RADIOs to send at their pace
        for r in radios:
            net.flush(r)
        if net.now < 0.5 + PER_RADIO * PACE_S:
            net.at(net.now + PACE_S, tick)

    net.at(0.5, tick)

    total = PER_RADIO * len(radios) * 2
    net.run_until(lambda: sum(sent.values()) == total and all(
        sent_to[p] and len(got[p]) >= (len(sent_to[p]) if p.split(b"|")[1] == b"all" else 1)
        for p in sent_to), max_time=120.0, what="every group message delivered")
    net.run_for(1.0)  # a duplicate would show now

    for payload, members in sent_to.items():
        receivers = got[payload]
        if payload.split(b"|")[1] == b"all":
            assert sorted(receivers) == sorted(d for d, _ in members), payload
        else:
            assert len(receivers) == 1 and (receivers[0], "in") in members, payload
    assert not set(got) - set(sent_to)
    for key, seqs in order.items():
        assert seqs == sorted(seqs), f"{key}: out of order"

    # Convergence: the views are the DISHes in each group now.
    expect = {"all": {("d0", "in"), ("d1", "in"), ("d3", "in"), ("d4", "in"), ("d5", "in")},
              "one": {("d0", "in"), ("d1", "in"), ("d3", "in")}}
    net.run_until(lambda: all(view(rsock[r], g) == expect[g] for r in radios for g in expect),
                  max_time=max(net.now, last_change) + CONVERGE_S, what="views converged")
    # Each member received some messages after joining (the view reached it).
    assert all(any(d in got[p] for p in got) for d in ("d0", "d3", "d4", "d5"))
    count(net, sum(len(v) for v in got.values()))


def test_groups_view_converges_after_a_change_within_a_bound() -> None:
    """Without faults: a join reaches a RADIO's view in about one round trip, and a new node's
    DISH within a few (the directory link, then the DISH link)."""
    net = Network(5, LinkModel(delay_s=0.01))
    rng = Random(5)
    h = hosts(net, ["r", "a", "b"], rng)
    know(h, net, "r", "a")
    h["a"].proto.associate("r", net.address["r"])
    radio = h["r"].core.create("RADIO", "out")
    dish = h["a"].core.create("DISH", "in")
    for n in h:
        net.flush(n)
    net.run_for(0.5)
    assert view(radio, "g") == set()
    t0 = net.now
    dish.join("g")  # type: ignore[attr-defined]
    net.flush("a")
    net.run_until(lambda: view(radio, "g") == {("a", "in")}, max_time=t0 + 1.0, what="join")
    assert net.now - t0 <= 0.03  # one way: 10 ms plus processing
    # A node learnt later, whose DISH already joined.
    dish_b = h["b"].core.create("DISH", "in")
    dish_b.join("g")  # type: ignore[attr-defined]
    h["b"].proto.associate("r", net.address["r"])
    t1 = net.now
    know(h, net, "r", "b")
    net.flush("r")
    net.run_until(lambda: view(radio, "g") == {("a", "in"), ("b", "in")},
                  max_time=t1 + 2.0, what="new node")
    assert net.now - t1 <= 1.0  # the secure handshake, the directory link, the DISH link
    t2 = net.now
    dish.leave("g")  # type: ignore[attr-defined]
    net.flush("a")
    net.run_until(lambda: view(radio, "g") == {("b", "in")}, max_time=t2 + 1.0, what="leave")
