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
#: Bound on the views' convergence after the last change. At 35 % loss each way a new node
#: costs a secure handshake (an attempt succeeds with p ~ 0.42), then the directory link and
#: the DISH link: over seeds 1-80 the slowest converged 7.3 s after the last change once the
#: handshake and Exon's first probes kept the initial timeout before any RTT sample (34 s
#: with the interval doubling from the first resend; NOTES.md); without loss, a few path
#: delays.
CONVERGE_S = 8.0


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
    # The views once changes stop: when they first all hold it is recorded.
    expect = {"all": {("d0", "in"), ("d1", "in"), ("d3", "in"), ("d4", "in"), ("d5", "in")},
              "one": {("d0", "in"), ("d1", "in"), ("d3", "in")}}
    converged_at: list[float] = []

    def converged() -> bool:
        return all(view(rsock[r], g) == expect[g] for r in radios for g in expect)

    def watch() -> None:
        if converged():
            converged_at.append(net.now)
        elif net.now < last_change + 120:
            net.at(net.now + 0.01, watch)

    net.at(last_change, watch)

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

    # Convergence: the views are the DISHes in each group now, and were within the bound.
    net.run_until(converged, max_time=max(net.now, last_change) + 120, what="views converged")
    net.run_until(lambda: bool(converged_at), max_time=net.now + 1, what="watched")
    assert converged_at[0] - last_change <= CONVERGE_S, (converged_at[0], net.seed)
    # Once converged, a send reaches every member of each group: 10 more per RADIO and group.
    tail: list[bytes] = []
    for r in radios:
        for group, strategy in (("all", ALL), ("one", ONE)):
            for i in range(PER_RADIO, PER_RADIO + 10):
                payload = b"%s|%s|%d" % (r.encode(), group.encode(), i)
                assert rsock[r].try_send(payload, group=group, strategy=strategy)
                sent_to[payload] = expect[group]
                tail.append(payload)
        net.flush(r)
    net.run_until(lambda: all(len(got[p]) >= (5 if b"|all|" in p else 1) for p in tail),
                  max_time=net.now + 60, what="sends after convergence delivered")
    net.run_for(1.0)
    for p in tail:
        if b"|all|" in p:
            assert sorted(got[p]) == ["d0", "d1", "d3", "d4", "d5"], p
        else:
            assert len(got[p]) == 1 and got[p][0] in ("d0", "d1", "d3"), p
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


def test_one_fails_over_when_a_member_node_crashes_and_never_delivers_twice() -> None:
    """ONE to three members; one member's node crashes mid-stream (no UNLINK, nothing ever
    again). The RADIO keeps sending: the dead member has no credit left soon and is skipped,
    then its link ends (peer_timeout_s) and it leaves the view. No message arrives twice; each
    one that never arrived had gone to the dead member (the strategy, plugged in through
    ``Radio.strategies`` as a user's would be, records where each went)."""
    from a3m.patterns.groups import Radio, _send_one

    chosen: dict[bytes, tuple[str, str]] = {}

    def tracked(radio: Radio, members: list, framed: bytes) -> bool:  # type: ignore[type-arg]
        before = {lk.peer: lk.next_seq for lk in members}
        if not _send_one(radio, members, framed):
            return False
        chosen[framed[2 + framed[1]:]] = next(lk.peer for lk in members
                                                if lk.next_seq != before[lk.peer])
        return True

    class TrackedRadio(Radio):
        strategies = {**Radio.strategies, "TRACKED": tracked}

    _, seed, model = CASES[0]
    net = network(CASES[0], 23)
    rng = Random(net.seed)
    names = ["r", "a", "b", "c"]
    h = hosts(net, names, rng)
    for d in "abc":
        know(h, net, "r", d)
        h[d].proto.associate("r", net.address["r"])
        h[d].core.create("DISH", "in").join("work")  # type: ignore[attr-defined]
    radio = h["r"].core.create(TrackedRadio, "out", strategy="TRACKED")
    got: Counter[bytes] = Counter()
    sent: list[bytes] = []
    total = 3000

    started = [False]

    members = radio.members  # type: ignore[attr-defined]

    def sender(host: NodeHost, now: float) -> None:
        started[0] = started[0] or len(members("work")) == 3
        while started[0] and len(sent) < total and members("work"):
            payload = b"%d" % len(sent)
            if not radio.try_send(payload, group="work"):
                return
            sent.append(payload)

    def member(host: NodeHost, now: float) -> None:
        sock = host.core.sockets["in"]
        while (msg := sock.try_recv()) is not None:
            got[msg.payload] += 1

    h["r"].app = sender
    for d in "abc":
        h[d].app = member
    for n in h:
        net.flush(n)
    net.run_until(lambda: len(sent) >= 500, max_time=60, what="stream under way")
    net.remove("b")  # b's node crashes
    crashed_at = net.now
    net.run_until(lambda: len(sent) == total and sum(got.values()) + sum(
        1 for p in sent if chosen[p] == ("b", "in") and not got[p]) >= total,
        max_time=crashed_at + 120, what="every message delivered or gone with b")
    net.run_until(lambda: ("b", "in") not in radio.members("work"),  # type: ignore[attr-defined]
                  max_time=crashed_at + 60, what="b out of the view")
    net.run_for(1.0)
    assert max(got.values()) == 1
    missing = [p for p in sent if not got[p]]
    assert all(chosen[p] == ("b", "in") for p in missing)
    assert sum(1 for p in sent if chosen[p] != ("b", "in")) + sum(
        1 for p in sent if chosen[p] == ("b", "in") and got[p]) == sum(got.values())
    after = [p for p in sent[-500:]]  # long after the crash: only the living members
    assert all(chosen[p] != ("b", "in") for p in after)
    # b's link ended: its messages in flight were of unknown outcome (members_lost) or b was
    # given up as unreachable (peer_timeout_s).
    assert radio.stats["members_lost"] + h["r"].bridge.peers_unreachable >= 1
    assert any(chosen[p] == ("b", "in") for p in sent[:500])
