"""The socket patterns between whole nodes (Exon + core) on the deterministic simulator, under
loss, duplication, reordering and delay: REQ/REP, PUB/SUB, DEALER/ROUTER, BUS,
SURVEYOR/RESPONDENT and PAIR each deliver exactly what their pattern promises, exactly once.

Each test runs three fault cases, each with its own default seed; with ``A3M_SIM_SEED=<n>``
every case runs on seed ``n`` (the seed a failure names: replay it with ``-k <test id>``).
Applications run in virtual time through each host's ``app`` callback (called whenever the
host wakes), with the sockets' non-blocking calls.
"""

from __future__ import annotations

import dataclasses
from collections import Counter, deque
from collections.abc import Callable
from random import Random
from typing import Any

import pytest

from a3m.core import link as L
from a3m.core.socket_core import SocketCore
from a3m.errors import LinkError, SocketNotLinked, Timeout, UsageError
from a3m.exon import ExonConfig
from a3m.testing.sim import LinkModel, Network, seed_from_env
from a3m.testing.sim_node import NodeHost

from .conftest import SIMULATED

CFG = ExonConfig(idle_release_s=0.5, probe_interval_s=1.0, probe_interval_max_s=4.0)
App = Callable[[NodeHost, float], None]

# (name, default seed, fault model)
CASES = [
    ("l20-d10-r30", 101, LinkModel(loss=0.2, dup=0.1, reorder=0.3)),
    ("l35-r50", 202, LinkModel(loss=0.35, reorder=0.5)),
    ("l05-d40-r80", 303, LinkModel(loss=0.05, dup=0.4, reorder=0.8, jitter_s=0.004)),
]
IDS = [c[0] for c in CASES]


def network(case: tuple[str, int, LinkModel], offset: int) -> Network:
    """The case's network; each test offsets the seed so tests do not share a fault trace."""
    _, seed, model = case
    return Network(seed_from_env(seed + offset), model)


def cluster(net: Network, *names: str, config: ExonConfig = CFG,
            **host: Any) -> dict[str, NodeHost]:
    """Hosts on ``net`` that all know each other's address (``host``: NodeHost's options)."""
    rng = Random(net.seed)
    out = {n: NodeHost(n, rng, config, **host) for n in names}
    for n, h in out.items():
        net.add(n, h)
    for a in names:
        for b in names:
            if a != b:
                out[a].proto.associate(b, net.address[b])
    return out


def start(net: Network, hosts: dict[str, NodeHost]) -> None:
    for n in hosts:
        net.flush(n)


def count(net: Network, messages: int) -> None:
    """Record the run for the suite's summary, after checking the faults did happen."""
    model = net.default
    st = net.stats
    assert (st.lost > 0) == (model.loss > 0) and (st.duplicated > 0) == (model.dup > 0)
    assert (st.reordered > 0) == (model.reorder > 0)
    SIMULATED["messages"] += messages
    SIMULATED["runs"] += 1


def linked_to(sock: SocketCore, n: int) -> bool:
    return len(sock.established_links()) >= n


# ---------------------------------------------------------------------------- REQ / REP


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_reqrep_every_request_answered_once_in_order(case: tuple[str, int, LinkModel]) -> None:
    """Two REQs, each linked to two REPs: many round trips; every request is served by one REP
    exactly once, and each REQ gets its replies in order, each once."""
    net = network(case, 1)
    h = cluster(net, "c0", "c1", "s0", "s1")
    reps = {s: h[s].core.create("REP", "rep") for s in ("s0", "s1")}
    reqs = {c: h[c].core.create("REQ", "req") for c in ("c0", "c1")}
    rounds = 800
    served: Counter[bytes] = Counter()
    replies: dict[str, list[bytes]] = {c: [] for c in reqs}
    waiting = {c: False for c in reqs}

    def client(name: str) -> App:
        req = reqs[name]

        def app(host: NodeHost, now: float) -> None:
            while True:
                if waiting[name]:
                    got = req.try_recv()
                    if got is None:
                        return
                    replies[name].append(got.payload)
                    waiting[name] = False
                i = len(replies[name])
                if i >= rounds or not linked_to(req, 2):
                    return
                if not req.try_send(b"%s:%d" % (name.encode(), i)):
                    return
                waiting[name] = True
        return app

    def server(name: str) -> App:
        rep = reps[name]
        owed: list[bytes] = []

        def app(host: NodeHost, now: float) -> None:
            while True:
                if not owed:
                    got = rep.try_recv()
                    if got is None:
                        return
                    served[got.payload] += 1
                    owed.append(b"re " + got.payload)
                if not rep.try_send(owed[0]):
                    return  # no credit: the reply waits, the REP takes nothing new meanwhile
                owed.pop()
        return app

    for c in reqs:
        h[c].app = client(c)
        for s in reps:
            reqs[c].link((s, "rep"), 0.0)
    for s in reps:
        h[s].app = server(s)
    start(net, h)
    net.run_until(lambda: all(len(r) >= rounds for r in replies.values()), max_time=3600,
                  what="reqrep round trips")
    for c in reqs:
        assert replies[c] == [b"re %s:%d" % (c.encode(), i) for i in range(rounds)]
    assert sorted(served) == sorted(b"%s:%d" % (c.encode(), i) for c in reqs
                                    for i in range(rounds))
    assert set(served.values()) == {1}
    assert all(reps[s].stats["received"] > rounds // 4 for s in reps)  # both REPs took load
    assert all(s.violations == 0 for s in (*reps.values(), *reqs.values()))
    count(net, 4 * rounds)


def test_rep_reply_to_a_req_that_went_away_is_a_link_error() -> None:
    net = network(CASES[0], 7)
    h = cluster(net, "c", "s")
    rep = h["s"].core.create("REP", "rep")
    req = h["c"].core.create("REQ", "req")
    req.link(("s", "rep"), 0.0)
    start(net, h)
    net.run_until(lambda: req.is_linked() and rep.is_linked(), max_time=60, what="link")
    assert req.try_send(b"q")
    net.flush("c")
    got: list[bytes] = []
    h["s"].app = lambda host, now: got.extend(
        [r.payload] if not got and (r := rep.try_recv()) is not None else [])
    net.run_until(lambda: bool(got), max_time=60, what="request")
    req.close(net.now)
    net.flush("c")
    net.run_until(lambda: not rep.links, max_time=net.now + 120, what="unlink")
    with pytest.raises(LinkError, match="went away"):
        rep.try_send(b"answer")


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_req_whose_rep_node_restarted_gets_a_link_error_then_links_again(
        case: tuple[str, int, LinkModel]) -> None:
    """The REP's node crashes after taking a request and comes back (same id and address,
    its clock continued, a new REP): the REQ's keepalive PING reaches the new node, which
    has no such link, and the REQ's recv raises LinkError instead of waiting for ever; the
    REQ links again by itself and the next request is answered."""
    net = network(case, 9)
    h = cluster(net, "c", "s")
    rep = h["s"].core.create("REP", "rep")
    req = h["c"].core.create("REQ", "req", keepalive_s=2.0)
    req.link(("s", "rep"), 0.0)
    start(net, h)
    net.run_until(lambda: req.is_linked() and rep.is_linked(), max_time=60, what="link")
    assert req.try_send(b"q")
    net.flush("c")
    net.run_until(lambda: rep.try_recv() is not None, max_time=60, what="request")
    crashed_at = net.now
    again = NodeHost("s", Random(net.seed + 1), CFG, clock_store=h["s"].clock_store)
    again.proto.associate("c", net.address["c"])
    new_rep = again.core.create("REP", "rep")
    net.replace_host("s", again)  # the crash and the restart: no UNLINK was ever sent
    failed: list[LinkError] = []
    answers: list[bytes] = []

    def client(host: NodeHost, now: float) -> None:
        if not failed:
            try:
                assert req.try_recv() is None
            except LinkError as exc:
                failed.append(exc)
        elif not answers and req.is_linked() and req.writable:
            if req.try_send(b"again"):
                answers.append(b"")
        elif answers == [b""] and (r := req.try_recv()) is not None:
            answers[0] = r.payload

    def server(host: NodeHost, now: float) -> None:
        r = new_rep.try_recv()
        if r is not None:
            assert new_rep.try_send(b"re " + r.payload)

    h["c"].app = client
    again.app = server
    net.run_until(lambda: bool(failed), max_time=crashed_at + 120, what="LinkError")
    assert "went away" in str(failed[0])
    assert net.now - crashed_at < 60
    net.run_until(lambda: answers == [b"re again"], max_time=net.now + 120, what="relinked")


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_req_whose_rep_node_crashed_gets_a_link_error_not_a_hang(
        case: tuple[str, int, LinkModel]) -> None:
    """SPEC 6: "a REQ whose REP goes away gets a clear error, not a hang". Here the REP's
    node crashes (no UNLINK ever comes) after taking the request and never comes back. The
    REQ's link is quiet, so after keepalive_s (5 s) it PINGs; Exon hears nothing from that
    node for peer_timeout_s (15 s) while the PING waits, reports PeerUnreachable, the host
    ends every link to it (NodeCore.peer_lost) and REQ.recv raises LinkError: within
    1.5 x keepalive_s + peer_timeout_s of the REP's last word (was: never)."""
    net = network(case, 8)
    h = cluster(net, "c", "s")
    rep = h["s"].core.create("REP", "rep")
    req = h["c"].core.create("REQ", "req")
    req.link(("s", "rep"), 0.0)
    start(net, h)
    net.run_until(lambda: req.is_linked() and rep.is_linked(), max_time=60, what="link")
    assert req.try_send(b"q")
    net.flush("c")
    got: list[bytes] = []
    h["s"].app = lambda host, now: got.extend(
        [r.payload] if not got and (r := rep.try_recv()) is not None else [])
    net.run_until(lambda: bool(got), max_time=60, what="request")
    crashed_at = net.now
    net.remove("s")  # the REP's node crashes: no UNLINK, no answer to anything, ever
    failed: list[LinkError] = []

    def client(host: NodeHost, now: float) -> None:
        if not failed:
            try:
                assert req.try_recv() is None
            except LinkError as exc:
                failed.append(exc)

    h["c"].app = client
    net.run_until(lambda: bool(failed), max_time=crashed_at + 600, what="LinkError")
    assert "went away" in str(failed[0])
    opts = req.options.keepalive_s, CFG.peer_timeout_s
    assert net.now - crashed_at <= 1.5 * opts[0] + opts[1] + 1.0
    assert h["c"].bridge.peers_unreachable >= 1 and h["c"].proto.stats.peers_abandoned >= 1
    assert h["c"].proto.unreachable_peers() == ["s"]
    with pytest.raises(UsageError):  # the request is gone with its link: nothing to wait for
        req.try_recv()


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_reqrep_across_a_partition_longer_than_the_peer_timeout(
        case: tuple[str, int, LinkModel]) -> None:
    """A REQ and its REP lose each other for 40 s (> keepalive_s + peer_timeout_s), then the
    partition heals. The REQ's request cut off by it fails with LinkError (not a hang); the
    REQ links again by itself once the REP is back and the requests after it are answered.
    Ledger: every request is served at most once, and each one either answered (once) or
    reported by LinkError; each reply reaches the REQ once, and only for its own request."""
    net = network(case, 10)
    h = cluster(net, "c", "s")
    rep = h["s"].core.create("REP", "rep")
    req = h["c"].core.create("REQ", "req")
    req.link(("s", "rep"), 0.0)
    start(net, h)
    net.run_until(lambda: req.is_linked() and rep.is_linked(), max_time=60, what="link")
    total = 120
    served: Counter[bytes] = Counter()
    outcome: dict[int, str] = {}
    state = {"i": 0, "waiting": False, "cut_at": -1.0, "error_at": -1.0}

    def client(host: NodeHost, now: float) -> None:
        while True:
            if state["waiting"]:
                i = state["i"]
                try:
                    got = req.try_recv()
                except LinkError:
                    outcome[i] = "error"
                    if state["error_at"] < 0:
                        state["error_at"] = now
                else:
                    if got is None:
                        return
                    assert got.payload == b"re %d" % i and i not in outcome
                    outcome[i] = "answered"
                state["waiting"] = False
                state["i"] += 1
            if state["i"] >= total or not req.is_linked() or not req.writable:
                return
            if state["i"] == 40 and state["cut_at"] < 0:
                state["cut_at"] = now
                net.partition({"s"}, now, now + 40.0)
            if not req.try_send(b"%d" % state["i"]):
                return
            state["waiting"] = True

    def server(host: NodeHost, now: float) -> None:
        while (r := rep.try_recv()) is not None:
            served[r.payload] += 1
            rep.try_send(b"re " + r.payload)

    h["c"].app = client
    h["s"].app = server
    net.flush("c")
    net.run_until(lambda: len(outcome) == total, max_time=3600, what="every request resolved")
    errors = sorted(i for i, o in outcome.items() if o == "error")
    assert errors and errors[0] == 40  # the request the partition cut off
    # Its token waits from the cut on: reported after peer_timeout_s, not at the heal.
    assert state["error_at"] - state["cut_at"] <= CFG.peer_timeout_s + 1.0
    assert all(outcome[i] == "answered" for i in range(40))
    assert max(served.values()) == 1  # served at most once, answered or not
    assert all(served[b"%d" % i] == 1 for i, o in outcome.items() if o == "answered")
    assert sum(o == "answered" for o in outcome.values()) >= total - 5
    assert h["c"].bridge.peers_unreachable >= 1 and h["c"].bridge.peers_reachable >= 1
    assert net.stats.partitioned > 0
    count(net, 2 * total)


def test_a_socket_linking_to_a_node_that_is_gone_closes() -> None:
    """A REQ links to a node that is down (its LINK waits in Exon: no refusal, no answer) and
    is then closed: the close ends once the link's handshake had CANCEL_LINKING_S to end (a
    close never waits on a silent peer: issue 40), and within peer_timeout_s Exon reports
    that node unreachable and gives the LINK up (before, the close waited for ever)."""
    net = network(CASES[0], 11)
    h = cluster(net, "c", "s")
    net.remove("s")  # down from the start
    req = h["c"].core.create("REQ", "req")
    req.link(("s", "rep"), 0.0)
    start(net, h)
    net.run_for(3.0)
    assert not req.is_linked() and req.links  # LINKING
    req.close(net.now)
    closed_at = net.now
    net.flush("c")
    net.run_until(lambda: req.is_drained, max_time=closed_at + 120, what="close")
    assert net.now - closed_at <= CFG.peer_timeout_s
    net.run_until(lambda: h["c"].proto.in_flight() == 0, max_time=closed_at + 120,
                  what="the LINK given up")
    assert net.now - closed_at <= CFG.peer_timeout_s + 1.0  # reported to the core


# ---------------------------------------------------------------------------- PUB / SUB


def matches(topic: bytes, subs: tuple[bytes, ...]) -> bool:
    return any(topic.startswith(s) for s in subs)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_pubsub_each_subscriber_gets_exactly_its_matches_once(
        case: tuple[str, int, LinkModel]) -> None:
    """Three SUBs with different and overlapping prefixes (one reading slowly with a small
    capacity): each receives exactly the messages its subscriptions match, once each (even
    when several prefixes match), in publishing order; none is dropped."""
    net = network(case, 2)
    h = cluster(net, "pub", "s1", "s2", "s3")
    pub = h["pub"].core.create("PUB", "feed")
    subs_of = {"s1": (b"a",), "s2": (b"a", b"ab", b"c"), "s3": (b"", b"b")}
    subs = {}
    for name, prefixes in subs_of.items():
        sock = h[name].core.create("SUB", "feed", capacity=16 if name == "s3" else 256)
        for p in prefixes:
            sock.subscribe(p)
        subs[name] = sock
    topics = [b"a", b"ab", b"abc", b"b", b"ba", b"c", b"d", b""]
    n = 6000
    sent = [0]
    got: dict[str, list[tuple[bytes | None, bytes]]] = {s: [] for s in subs}

    def publisher(host: NodeHost, now: float) -> None:
        if not linked_to(pub, len(subs)):
            return  # a SUB receives only what is published once it is linked
        while sent[0] < n:
            i = sent[0]
            if not pub.try_send(b"%d" % i, topic=topics[i % len(topics)]):
                return  # the slowest matching subscriber sets the pace
            sent[0] += 1

    def subscriber(name: str) -> App:
        sock = subs[name]
        per_wake = 3 if name == "s3" else 1 << 30  # s3 reads slowly

        def app(host: NodeHost, now: float) -> None:
            for _ in range(per_wake):
                r = sock.try_recv()
                if r is None:
                    return
                got[name].append((r.topic, r.payload))
        return app

    h["pub"].app = publisher
    for name, sock in subs.items():
        h[name].app = subscriber(name)
        sock.link(("pub", "feed"), 0.0)
    start(net, h)
    expected = {name: [(topics[i % len(topics)], b"%d" % i) for i in range(n)
                       if matches(topics[i % len(topics)], prefixes)]
                for name, prefixes in subs_of.items()}
    net.run_until(lambda: sent[0] >= n and all(len(got[s]) >= len(expected[s]) for s in subs),
                  max_time=3600, what="pubsub")
    net.run_for(2.0)  # anything extra (a duplicate) would arrive now
    for name in subs:
        h[name].app(h[name], net.now)
    for name in subs:
        assert got[name] == expected[name], name
    assert len(expected["s3"]) == n and 0 < len(expected["s1"]) < len(expected["s2"]) < n
    count(net, sum(len(v) for v in expected.values()))


# ---------------------------------------------------------------------------- DEALER / ROUTER


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_router_replies_reach_the_right_dealer_once(case: tuple[str, int, LinkModel]) -> None:
    """Three DEALERs send requests without waiting; the ROUTER answers each to its routing id:
    every dealer gets exactly the answers to its own requests, once, in order."""
    net = network(case, 3)
    names = ["d0", "d1", "d2"]
    h = cluster(net, "router", *names)
    router = h["router"].core.create("ROUTER", "r", capacity=32)
    dealers = {d: h[d].core.create("DEALER", "d", capacity=32) for d in names}
    m = 3000
    sent = dict.fromkeys(names, 0)
    got: dict[str, list[bytes]] = {d: [] for d in names}
    pending: deque[tuple[tuple[str, str], bytes]] = deque()
    unknown_route: list[str] = []

    def dealer(name: str) -> App:
        sock = dealers[name]

        def app(host: NodeHost, now: float) -> None:
            while sent[name] < m and sock.try_send(b"%s/%d" % (name.encode(), sent[name])):
                sent[name] += 1
            while (r := sock.try_recv()) is not None:
                got[name].append(r.payload)
        return app

    def serve(host: NodeHost, now: float) -> None:
        while True:
            while pending:
                to, body = pending[0]
                if not router.try_send(body, to=to):
                    return  # that dealer has no credit: answers wait, in order
                pending.popleft()
            r = router.try_recv()
            if r is None:
                return
            pending.append((r.source, b"re " + r.payload))
            if not unknown_route:
                try:
                    router.try_send(b"x", to=("ghost", "d"))
                except SocketNotLinked as exc:
                    unknown_route.append(str(exc))

    h["router"].app = serve
    for d in names:
        h[d].app = dealer(d)
        dealers[d].link(("router", "r"), 0.0)
    start(net, h)
    net.run_until(lambda: all(len(got[d]) >= m for d in names), max_time=3600,
                  what="dealer/router")
    net.run_for(2.0)
    for d in names:
        h[d].app(h[d], net.now)
        assert got[d] == [b"re %s/%d" % (d.encode(), i) for i in range(m)], d
    assert unknown_route and "no route" in unknown_route[0]
    assert router.stats["received"] == len(names) * m
    count(net, 2 * len(names) * m)


# ---------------------------------------------------------------------------- BUS


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_bus_every_peer_hears_every_message_once(case: tuple[str, int, LinkModel]) -> None:
    """Four BUS sockets in a full mesh each send: every other peer hears each message exactly
    once, in the sender's order; nobody hears itself."""
    net = network(case, 4)
    names = ["b0", "b1", "b2", "b3"]
    h = cluster(net, *names)
    bus = {b: h[b].core.create("BUS", "bus", capacity=64) for b in names}
    m = 1500
    sent = dict.fromkeys(names, 0)
    heard: dict[str, list[tuple[str, bytes]]] = {b: [] for b in names}

    def peer(name: str) -> App:
        sock = bus[name]

        def app(host: NodeHost, now: float) -> None:
            if linked_to(sock, len(names) - 1):
                while sent[name] < m and sock.try_send(b"%s:%d" % (name.encode(), sent[name])):
                    sent[name] += 1
            while (r := sock.try_recv()) is not None:
                heard[name].append((r.source[0], r.payload))
        return app

    for i, a in enumerate(names):
        h[a].app = peer(a)
        for b in names[i + 1:]:
            bus[a].link((b, "bus"), 0.0)
    start(net, h)
    total = (len(names) - 1) * m
    net.run_until(lambda: all(len(heard[b]) >= total for b in names), max_time=3600, what="bus")
    net.run_for(2.0)
    for b in names:
        h[b].app(h[b], net.now)
        assert len(heard[b]) == total, b
        for src in names:
            mine = [p for s, p in heard[b] if s == src]
            expect = [] if src == b else [b"%s:%d" % (src.encode(), i) for i in range(m)]
            assert mine == expect, (b, src)
    count(net, len(names) * total)


# ---------------------------------------------------------------------------- PAIR


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_pair_one_peer_at_a_time_each_message_once_in_order(
        case: tuple[str, int, LinkModel]) -> None:
    """A PAIR on p0; p1 links first, p2 is refused ("link limit reached", non-fatal) and keeps
    retrying. p0 and p1 exchange messages both ways; then p1 closes its socket, p2 links and
    exchanges the same with p0. Each direction arrives exactly once and in order, and p0's
    messages reach only the peer linked when they were sent."""
    net = network(case, 6)
    h = cluster(net, "p0", "p1", "p2")
    pair = {n: h[n].core.create("PAIR", "p", capacity=32, retry_base_s=0.05, retry_max_s=0.5)
            for n in h}
    m = 600
    sent: dict[str, int] = {"p0>p1": 0, "p0>p2": 0, "p1": 0, "p2": 0}
    heard: dict[str, list[tuple[str, bytes]]] = {n: [] for n in h}
    refused: set[int] = set()  # refusal codes seen by p1 or p2

    def hub(host: NodeHost, now: float) -> None:
        sock = pair["p0"]
        links = sock.established_links()
        if links:
            key = "p0>" + links[0].peer[0]
            while sent[key] < m and sock.try_send(b"%s:%d" % (key.encode(), sent[key])):
                sent[key] += 1
        while (r := sock.try_recv()) is not None:
            heard["p0"].append((r.source[0], r.payload))

    def peer(name: str) -> App:
        sock = pair[name]

        def app(host: NodeHost, now: float) -> None:
            code = sock.refusals.get(("p0", "p"))
            if code is not None:
                refused.add(code)
            if sock.closed:
                return
            if linked_to(sock, 1):
                while sent[name] < m and sock.try_send(b"%s:%d" % (name.encode(), sent[name])):
                    sent[name] += 1
            while (r := sock.try_recv()) is not None:
                heard[name].append((r.source[0], r.payload))
            if name == "p1" and sent["p1"] == m and len(heard["p1"]) == m and refused:
                # graceful: what p1 sent is still delivered; not before p2 was refused (its
                # LINK may come late: its handshake with p0 takes a round trip, or more)
                sock.close(now)
        return app

    h["p0"].app = hub
    for n in ("p1", "p2"):
        h[n].app = peer(n)
    pair["p1"].link(("p0", "p"), 0.0)
    start(net, h)
    net.run_until(lambda: linked_to(pair["p0"], 1), max_time=600, what="p1 linked")
    pair["p2"].link(("p0", "p"), net.now)  # refused while p1 holds the one link
    net.flush("p2")
    net.run_until(lambda: len(heard["p2"]) >= m and len(heard["p0"]) >= 2 * m,
                  max_time=3600, what="pair")
    net.run_for(2.0)
    for n in h:
        h[n].app(h[n], net.now)
    assert L.LINK_LIMIT in refused
    assert heard["p1"] == [("p0", b"p0>p1:%d" % i) for i in range(m)]
    assert heard["p2"] == [("p0", b"p0>p2:%d" % i) for i in range(m)]
    assert heard["p0"] == ([("p1", b"p1:%d" % i) for i in range(m)]
                           + [("p2", b"p2:%d" % i) for i in range(m)])
    count(net, 4 * m)


# ---------------------------------------------------------------------------- SURVEYOR


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_survey_answers_collected_within_the_deadline(case: tuple[str, int, LinkModel]) -> None:
    """A SURVEYOR runs surveys one after another. Three RESPONDENTs answer at once; a fourth
    sits behind a link slower than the deadline. Each survey returns exactly the three prompt
    answers to itself, each once and before its deadline; the late answers, arriving during
    later surveys or after the last one, are never returned.

    The deadline is long against the network's delay because a survey follows an idle period:
    Exon has released its records and re-creates them, and at 35 % loss with retransmission
    back-off a round trip then takes up to ~13 s of virtual time (0.3 s to 1.4 s median).
    The late respondent's answers take 39 s one way: its round trip is beyond the default
    peer_timeout_s (15 s), so the nodes here wait longer before calling a peer unreachable
    (with keepalives on every quiet link the late node's PINGs used to hide that; a quiet
    link now waits on nothing and sends none)."""
    net = network(case, 5)
    fast = ["r0", "r1", "r2"]
    survey_time = 30.0
    h = cluster(net, "sv", *fast, "late",
                config=dataclasses.replace(CFG, peer_timeout_s=4 * survey_time))
    net.set_link("late", "sv", case[2].scaled(delay_s=survey_time * 1.3))
    sv = h["sv"].core.create("SURVEYOR", "sv", survey_time_s=survey_time)
    resp = {r: h[r].core.create("RESPONDENT", "rs") for r in (*fast, "late")}
    surveys = 20
    state = {"i": -1, "open": False}
    answers: list[list[tuple[float, bytes]]] = []
    deadlines: list[float] = []
    heard: dict[str, list[bytes]] = {r: [] for r in resp}

    def surveyor(host: NodeHost, now: float) -> None:
        if not linked_to(sv, len(resp)):
            return
        while True:
            if state["open"]:
                try:
                    r = sv.try_recv()
                except Timeout:
                    state["open"] = False
                    continue
                if r is None:
                    return
                answers[-1].append((now, r.payload))
                continue
            if state["i"] + 1 >= surveys:
                return
            if not sv.try_send(b"%d" % (state["i"] + 1)):
                return
            state["i"] += 1
            state["open"] = True
            answers.append([])
            deadlines.append(now + survey_time)

    def respondent(name: str) -> App:
        sock = resp[name]

        def app(host: NodeHost, now: float) -> None:
            while (r := sock.try_recv()) is not None:
                heard[name].append(r.payload)
                assert sock.try_send(b"%s@%s" % (r.payload, name.encode()))
        return app

    h["sv"].app = surveyor
    for r, sock in resp.items():
        h[r].app = respondent(r)
        sock.link(("sv", "sv"), 0.0)
    start(net, h)
    net.run_until(lambda: state["i"] + 1 >= surveys and not state["open"], max_time=3600,
                  what="surveys")
    assert len(answers) == surveys and len(deadlines) == surveys
    for i, got in enumerate(answers):
        assert sorted(p for _, p in got) == sorted(b"%d@%s" % (i, r.encode()) for r in fast), i
        assert all(t <= deadlines[i] for t, _ in got), i
    # The late respondent's last surveys and answers arrive. Its round trip is 39 s; a
    # prompt lost on the way costs the surveyor a probe timeout of srtt + 4 rttvar, one or
    # more round trips (the path is measured: each ACK says which copy it answers), and an
    # answer may need a slot request first.
    net.run_until(lambda: sv.stats["received"] >= surveys * len(resp)
                  and all(len(heard[r]) >= surveys for r in resp),
                  max_time=net.now + 3600, what="the late answers")
    net.run_for(survey_time)
    for r in resp:
        assert heard[r] == [b"%d" % i for i in range(surveys)], r
    assert sv.stats["received"] == surveys * len(resp)  # every late answer did arrive...
    assert not sv.readable  # ...and was discarded, never returned
    with pytest.raises(UsageError, match="no survey under way"):
        sv.try_recv()
    count(net, surveys * (2 * len(resp)))


def test_survey_read_late_by_a_slow_application() -> None:
    """The application reads a survey's answers only well after its deadline: time goes on
    meanwhile, the prompt answer is returned, and an answer that arrived after the deadline
    is not (today's Surveyor.on_data would also accept it: it checks the survey id, not the
    time, until recv has reported the deadline). With both fixed this takes ~400 steps."""
    net = network(CASES[0], 6)
    h = cluster(net, "sv", "r0", "late")
    survey_time = 10.0
    net.set_link("late", "sv", CASES[0][2].scaled(delay_s=survey_time * 1.5))
    sv = h["sv"].core.create("SURVEYOR", "sv", survey_time_s=survey_time)
    resp = {r: h[r].core.create("RESPONDENT", "rs") for r in ("r0", "late")}
    state: dict[str, float | bool | None] = {"sent_at": None, "done": False}
    got: list[bytes] = []

    def surveyor(host: NodeHost, now: float) -> None:
        sent_at = state["sent_at"]
        if sent_at is None:
            if linked_to(sv, 2) and sv.try_send(b"q"):
                state["sent_at"] = now
                net.at(now + 2 * survey_time, lambda: net.flush("sv"))  # the app's late turn
            return
        assert isinstance(sent_at, float)
        if now < sent_at + 2 * survey_time or state["done"]:
            return
        while True:
            try:
                r = sv.try_recv()
            except Timeout:
                state["done"] = True
                return
            if r is None:
                return
            got.append(r.payload)

    def respondent(name: str) -> App:
        sock = resp[name]

        def app(host: NodeHost, now: float) -> None:
            while sock.try_recv() is not None:
                assert sock.try_send(b"a from " + name.encode())
        return app

    h["sv"].app = surveyor
    for r, sock in resp.items():
        h[r].app = respondent(r)
        sock.link(("sv", "sv"), 0.0)
    start(net, h)
    net.run_until(lambda: bool(state["done"]), max_time=3600, max_steps=50_000,
                  what="slow surveyor")
    assert got == [b"a from r0"]
