"""The patterns across nodes over real UDP, through the fault relay, with threads and asyncio."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

import pytest

import a3m
import a3m.aio
from a3m.testing.relay import FaultRelay

# Through the relay: a network-sized MTU. close_revoke_timeout_s long: a clean close is
# counted, not timed (a close left waiting for an answer abandons its revocation, unclean, at
# whatever timeout; a slow machine's retransmission back-off never reaches 120 s).
REVOKE_S = 120.0
NET = {"loopback_datagram_size": 0, "close_revoke_timeout_s": REVOKE_S}


RELAYS: list[FaultRelay] = []


def close_all(nodes: list[a3m.Node]) -> None:
    """Close the nodes one after the other with the faults still on, then the relays:
    every close is clean. (A node closing after another is
    answered by it: the first closers linger, docs/exon-wire.md "Closing: the linger". Before
    that, these closes were calmed: a node whose peer had closed first often waited out its
    whole close timeout.)"""
    unclean = []
    for n in nodes:  # nodes first, while the relay still carries their goodbyes
        t0 = time.monotonic()
        if not n.close(timeout=REVOKE_S + 30):
            proto = n._proto
            left = ({p: (len(r.queue), len(r.tokens)) for p, r in proto._sr.items()},
                    {p: (r.revoking, r.live_count()) for p, r in proto._rr.items()},
                    proto.stats.revocations_abandoned, len(n._bridge.outbox))
            unclean.append((n.id, round(time.monotonic() - t0, 2), left))
    while RELAYS:
        RELAYS.pop().close()
    assert unclean == [], f"closes not clean: {unclean}"


@pytest.fixture
def trio_nodes() -> list[a3m.Node]:
    nodes = [a3m.Node(f"n{i}", **NET) for i in range(3)]
    yield nodes  # type: ignore[misc]
    close_all(nodes)


@pytest.fixture
def quartet_nodes() -> list[a3m.Node]:
    nodes = [a3m.Node(f"q{i}", **NET) for i in range(4)]
    yield nodes  # type: ignore[misc]
    close_all(nodes)


def via_relay(nodes: list[a3m.Node], server: a3m.Node, **faults: float) -> FaultRelay:
    relay = FaultRelay({server.id: server.address}, seed=3, **faults)
    RELAYS.append(relay)
    for n in nodes:
        if n is not server:
            n.associate(server.id, relay.front(server.id))
    return relay


def mesh_via_relay(nodes: list[a3m.Node], **faults: float) -> FaultRelay:
    """One relay in front of every node; each node reaches every other only through it."""
    relay = FaultRelay({n.id: n.address for n in nodes}, seed=4, **faults)
    RELAYS.append(relay)
    for x in nodes:
        for y in nodes:
            if x is not y:
                x.associate(y.id, relay.front(y.id))
    return relay


class Crew:
    """Threads whose exceptions fail the test (re-raised by :meth:`join`)."""

    def __init__(self) -> None:
        self.threads: list[threading.Thread] = []
        self.errors: list[BaseException] = []
        self.stop = threading.Event()

    def start(self, fn: Callable[..., None], *args: object) -> None:
        def run() -> None:
            try:
                fn(*args)
            except BaseException as exc:  # re-raised in join
                self.errors.append(exc)
                self.stop.set()

        t = threading.Thread(target=run, daemon=True)
        self.threads.append(t)
        t.start()

    def join(self, timeout: float = 90.0) -> None:
        deadline = time.monotonic() + timeout
        for t in self.threads:
            t.join(max(0.0, deadline - time.monotonic()))
        if self.errors:
            raise self.errors[0]
        assert not any(t.is_alive() for t in self.threads), "threads still running"


def test_reqrep_through_relay_every_request_answered_once(trio_nodes: list[a3m.Node]) -> None:
    server, c1, c2 = trio_nodes
    via_relay(trio_nodes, server, loss=0.2, dup=0.1, reorder=0.2)
    rep = server.socket(a3m.REP, "rep")
    reqs = [c.socket(a3m.REQ, "req") for c in (c1, c2)]
    for r in reqs:
        r.link(rep.id)
        assert r.wait_linked(timeout=30)
    served: list[bytes] = []

    def serve() -> None:
        for _ in range(2 * 150):
            q = rep.recv(timeout=30)
            served.append(q)
            rep.send(b"re:" + q, timeout=30)

    def client(k: int) -> None:
        for i in range(150):
            reqs[k].send(b"%d-%d" % (k, i), timeout=30)
            assert reqs[k].recv(timeout=30) == b"re:%d-%d" % (k, i)

    threads = [threading.Thread(target=serve)]
    threads += [threading.Thread(target=client, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=90)
    assert sorted(served) == sorted(b"%d-%d" % (k, i) for k in range(2) for i in range(150))


def test_reqrep_misuse_and_peer_going_away(trio_nodes: list[a3m.Node]) -> None:
    server, client, _ = trio_nodes
    client.associate(server.id, server.address)
    rep = server.socket(a3m.REP, "rep")
    req = client.socket(a3m.REQ, "req")
    with pytest.raises(a3m.UsageError, match="no request to reply"):
        rep.send(b"unasked", timeout=1)
    req.link(rep.id)
    assert req.wait_linked(timeout=5)
    req.send(b"q", timeout=5)
    with pytest.raises(a3m.UsageError, match="outstanding"):
        req.send(b"q2", timeout=1)
    assert rep.recv(timeout=5) == b"q"
    rep.close(timeout=5)  # goes away without answering
    with pytest.raises(a3m.LinkError, match="went away"):
        req.recv(timeout=10)


def test_pubsub_through_relay_in_order_each_once(trio_nodes: list[a3m.Node]) -> None:
    pubn, s1n, s2n = trio_nodes
    via_relay(trio_nodes, pubn, loss=0.2, dup=0.1, reorder=0.2)
    pub = pubn.socket(a3m.PUB, "pub")
    s1 = s1n.socket(a3m.SUB, "sub")
    s2 = s2n.socket(a3m.SUB, "sub")
    s1.subscribe(b"a")
    s1.subscribe(b"ab")  # overlapping: still one copy
    s2.subscribe("b")
    for s in (s1, s2):
        s.link(pub.id)
        assert s.wait_linked(timeout=30)
    assert pub.wait_linked(timeout=30)
    while len(pub.links) < 2:
        pub.wait_linked(timeout=1)
    n = 1000
    got1: list[a3m.ReceivedMessage] = []
    got2: list[bytes] = []
    readers = [
        threading.Thread(target=lambda: got1.extend(s1.recv_msg(timeout=60)
                                                    for _ in range(n // 2))),
        threading.Thread(target=lambda: got2.extend(s2.recv(timeout=60)
                                                    for _ in range(n // 2))),
    ]
    for t in readers:
        t.start()
    for i in range(n):  # the slowest subscriber sets the pace
        pub.send(b"%d" % i, topic=(b"ab" if i % 2 else b"b"), timeout=60)
    for t in readers:
        t.join(timeout=90)
    assert [m.payload for m in got1] == [b"%d" % i for i in range(1, n, 2)]
    assert {m.topic for m in got1} == {b"ab"}
    assert got2 == [b"%d" % i for i in range(0, n, 2)]
    with pytest.raises(a3m.Timeout):
        s1.recv(timeout=0.3)


def test_dealer_router_echo_through_relay(trio_nodes: list[a3m.Node]) -> None:
    srv, c1, c2 = trio_nodes
    via_relay(trio_nodes, srv, loss=0.1, reorder=0.2)
    router = srv.socket(a3m.ROUTER, "r")
    dealers = [c.socket(a3m.DEALER, "d") for c in (c1, c2)]
    for d in dealers:
        d.link(router.id)
        assert d.wait_linked(timeout=30)
    for k, d in enumerate(dealers):
        for i in range(100):
            d.send(b"%d:%d" % (k, i), timeout=10)
    for _ in range(200):
        m = router.recv_msg(timeout=30)
        router.send(b"echo " + m.payload, to=m.source, timeout=10)
    for k, d in enumerate(dealers):
        assert [d.recv(timeout=30) for _ in range(100)] == [
            b"echo %d:%d" % (k, i) for i in range(100)]
    with pytest.raises(a3m.SocketNotLinked):
        router.send(b"x", to=a3m.SocketId("ghost", "d"), timeout=1)


def test_survey_and_bus(trio_nodes: list[a3m.Node]) -> None:
    a, b, c = trio_nodes
    for x in trio_nodes:
        for y in trio_nodes:
            if x is not y:
                x.associate(y.id, y.address)
    sv = a.socket(a3m.SURVEYOR, "sv", survey_time_s=1.0)
    rs = [n.socket(a3m.RESPONDENT, "r") for n in (b, c)]
    for r in rs:
        r.link(sv.id)
        assert r.wait_linked(timeout=5)
    while len(sv.links) < 2:
        sv.wait_linked(timeout=1)
    sv.send(b"ping", timeout=5)
    for r in rs:
        assert r.recv(timeout=5) == b"ping"
        r.send(b"pong " + r.id.node.encode(), timeout=5)
    answers = sorted(sv.recv(timeout=5) for _ in range(2))
    assert answers == [b"pong n1", b"pong n2"]
    with pytest.raises(a3m.Timeout):
        sv.recv(timeout=5)  # the deadline ends the survey
    buses = [n.socket(a3m.BUS, "bus") for n in trio_nodes]
    buses[0].link(buses[1].id)
    buses[0].link(buses[2].id)
    buses[1].link(buses[2].id)
    for bsock in buses:
        while len(bsock.links) < 2:
            bsock.wait_linked(timeout=1)
    for i, bsock in enumerate(buses):
        bsock.send(b"hi from %d" % i, timeout=5)
    for i, bsock in enumerate(buses):
        got = sorted(bsock.recv(timeout=5) for _ in range(2))
        assert got == sorted(b"hi from %d" % j for j in range(3) if j != i)


def test_reqrep_with_asyncio() -> None:
    async def main() -> None:
        async with a3m.aio.Node("srv") as srv, a3m.aio.Node("cli") as cli:
            cli.associate("srv", srv.address)
            rep = srv.socket(a3m.REP, "rep")
            req = cli.socket(a3m.REQ, "req")
            req.link(rep.id)
            assert await req.wait_linked(timeout=5)

            async def serve() -> None:
                for _ in range(50):
                    q = await rep.recv(timeout=10)
                    await rep.send(q.upper(), timeout=10)

            async def ask() -> list[bytes]:
                out = []
                for i in range(50):
                    await req.send(b"q%d" % i, timeout=10)
                    out.append(await req.recv(timeout=10))
                return out

            _, answers = await asyncio.gather(serve(), ask())
            assert answers == [b"Q%d" % i for i in range(50)]

    asyncio.run(main())


def test_survey_through_relay_each_respondent_answers_each_survey_once(
        quartet_nodes: list[a3m.Node]) -> None:
    """Three RESPONDENT nodes reach the SURVEYOR only through the relay (loss, duplication,
    reordering), each answering in its own thread: every survey gets exactly one answer from
    each respondent, to that survey, and each survey reaches each respondent once."""
    ctl, *others = quartet_nodes
    relay = via_relay(quartet_nodes, ctl, loss=0.2, dup=0.1, reorder=0.2)
    sv = ctl.socket(a3m.SURVEYOR, "sv", survey_time_s=60.0)
    rs = [n.socket(a3m.RESPONDENT, "r") for n in others]
    for r in rs:
        r.link(sv.id)
    for r in rs:
        assert r.wait_linked(timeout=20)
    while len(sv.links) < len(rs):
        sv.wait_linked(timeout=1)
    heard: dict[a3m.SocketId, list[bytes]] = {r.id: [] for r in rs}
    crew = Crew()

    def respond(r: a3m.Socket) -> None:
        while not crew.stop.is_set():
            try:
                q = r.recv(timeout=0.2)
            except a3m.Timeout:
                continue
            heard[r.id].append(q)
            r.send(b"%s|%s" % (r.id.node.encode(), q), timeout=30)

    for r in rs:
        crew.start(respond, r)
    rounds = 12
    try:
        for rnd in range(rounds):
            q = b"survey %d" % rnd
            sv.send(q, timeout=30)
            answers = sorted(sv.recv(timeout=30) for _ in rs)
            assert answers == sorted(b"%s|%s" % (n.id.encode(), q) for n in others)
    finally:
        crew.stop.set()
        crew.join()
    for r in rs:
        assert heard[r.id] == [b"survey %d" % i for i in range(rounds)]
    assert relay.stats.dropped > 0 and relay.stats.duplicated > 0


def test_bus_full_mesh_through_relay_each_message_once_in_order(
        quartet_nodes: list[a3m.Node]) -> None:
    """Four BUS nodes in a full mesh, every pair only through the relay (loss, duplication,
    reordering); each node sends from one thread and receives in another (capacity 16): each
    node hears every other node's messages exactly once, in that sender's order."""
    relay = mesh_via_relay(quartet_nodes, loss=0.15, dup=0.1, reorder=0.2)
    buses = [n.socket(a3m.BUS, "bus", capacity=16) for n in quartet_nodes]
    for i, b in enumerate(buses):
        for other in buses[i + 1:]:
            b.link(other.id)
    deadline = time.monotonic() + 30
    for b in buses:
        while len(b.links) < len(buses) - 1:
            assert time.monotonic() < deadline, f"{b}: {b.links}"
            b.wait_linked(timeout=0.5)
    per = 150
    heard: dict[int, list[bytes]] = {i: [] for i in range(len(buses))}
    crew = Crew()

    def send(me: int) -> None:
        for i in range(per):
            buses[me].send(b"%d:%d" % (me, i), timeout=30)

    def recv(me: int) -> None:
        for _ in range(per * (len(buses) - 1)):
            heard[me].append(buses[me].recv(timeout=30))

    for i in range(len(buses)):
        crew.start(recv, i)
        crew.start(send, i)
    crew.join()
    for me, got in heard.items():
        for k in range(len(buses)):
            mine = [m for m in got if m.startswith(b"%d:" % k)]
            assert mine == ([] if k == me else [b"%d:%d" % (k, i) for i in range(per)])
    assert relay.stats.dropped > 0 and relay.stats.duplicated > 0


def test_pair_through_relay_a_second_peer_links_once_the_first_goes(
        trio_nodes: list[a3m.Node]) -> None:
    """A PAIR on n0 reached through the relay by PAIRs on n1 and n2: n1 links, n2 is refused
    (link limit, non-fatal) and keeps retrying; both directions exactly once in order with n1;
    once n1's socket closes, n2 links and the same holds with n2."""
    hub, first, second = trio_nodes
    relay = via_relay(trio_nodes, hub, loss=0.2, dup=0.1, reorder=0.2)
    p0 = hub.socket(a3m.PAIR, "p", capacity=16)
    p1 = first.socket(a3m.PAIR, "p", capacity=16)
    p2 = second.socket(a3m.PAIR, "p", capacity=16, retry_base_s=0.05, retry_max_s=0.2)
    p1.link(p0.id)
    assert p1.wait_linked(timeout=20)
    p2.link(p0.id)
    deadline = time.monotonic() + 20
    while p2.refusal(p0.id) is None:  # the refusal crosses the lossy relay too
        assert time.monotonic() < deadline
        assert not p2.wait_linked(timeout=0.1)
    assert p2.refusal(p0.id) == "link limit reached" and not p2.links

    def exchange(peer: a3m.Socket, n: int) -> None:
        got: dict[str, list[bytes]] = {"hub": [], "peer": []}
        crew = Crew()
        crew.start(lambda: [p0.send(b"h%d" % i, timeout=30) for i in range(n)])
        crew.start(lambda: [peer.send(b"p%d" % i, timeout=30) for i in range(n)])
        crew.start(lambda: got["hub"].extend(p0.recv(timeout=30) for _ in range(n)))
        crew.start(lambda: got["peer"].extend(peer.recv(timeout=30) for _ in range(n)))
        crew.join()
        assert got["hub"] == [b"p%d" % i for i in range(n)]
        assert got["peer"] == [b"h%d" % i for i in range(n)]

    exchange(p1, 200)
    assert p1.close(timeout=20)
    assert p2.wait_linked(timeout=20)  # the retry after the first peer went
    assert p0.wait_linked(p2.id, timeout=20)  # the initiator is linked first
    assert p0.links == [p2.id]
    exchange(p2, 200)
    with pytest.raises(a3m.Timeout):
        p0.recv(timeout=0.2)
    assert relay.stats.dropped > 0 and relay.stats.duplicated > 0


def test_forwarder_xsub_xpub_through_the_relay(quartet_nodes: list[a3m.Node]) -> None:
    """PUB -> [XSUB | a3m.proxy | XPUB] -> two SUBs, every hop through the fault relay: the
    subscribers' topics travel upstream (the PUB does not even send a topic nobody wants),
    each SUB gets exactly its topics once, in order, and the slow one (capacity 8, read
    slowly) holds the whole chain back instead of losing anything."""
    pub_node, fwd, n1, n2 = quartet_nodes
    mesh_via_relay(quartet_nodes, loss=0.15, dup=0.1, reorder=0.2)
    pub = pub_node.socket(a3m.PUB, "pub")
    xsub = fwd.socket(a3m.XSUB, "in")
    xpub = fwd.socket(a3m.XPUB, "out")
    fast = n1.socket(a3m.SUB, "sub")
    slow = n2.socket(a3m.SUB, "sub", capacity=8)
    fast.subscribe(b"t.")
    slow.subscribe(b"t.1")
    xsub.link(pub.id)
    for s in (fast, slow):
        s.link(xpub.id)
    assert fast.wait_linked(timeout=30) and slow.wait_linked(timeout=30)
    assert xsub.wait_linked(timeout=30)
    stop = threading.Event()
    forwarded: list[int] = []
    proxy = threading.Thread(target=lambda: forwarded.append(a3m.proxy(xsub, xpub, stop)))
    proxy.start()

    def pub_knows() -> bool:  # the subscriptions reached the PUB through the proxy
        with pub_node._driver.lock:
            links = pub._core.established_links()
            return len(links) == 1 and links[0].attrs.get("subs") == {b"t.", b"t.1"}

    deadline = time.monotonic() + 20
    while not pub_knows() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert pub_knows()
    n = 300
    want = {"fast": [b"%d" % i for i in range(n)],
            "slow": [b"%d" % i for i in range(n) if i % 3 == 1]}
    got: dict[str, list[a3m.ReceivedMessage]] = {"fast": [], "slow": []}
    crew = Crew()

    def read(name: str, sock: a3m.Socket) -> None:
        for _ in want[name]:
            got[name].append(sock.recv_msg(timeout=30))
            if name == "slow":
                time.sleep(0.002)

    crew.start(read, "fast", fast)
    crew.start(read, "slow", slow)
    try:
        for i in range(n):
            pub.send(b"%d" % i, topic=b"t.%d" % (i % 3), timeout=30)
            pub.send(b"x%d" % i, topic=b"other", timeout=30)  # nobody wants it
        crew.join()
    finally:
        stop.set()
        proxy.join(10)
    assert [m.payload for m in got["fast"]] == want["fast"]
    assert [m.payload for m in got["slow"]] == want["slow"]
    assert all(m.topic == b"t.1" for m in got["slow"])
    with pytest.raises(a3m.Timeout):
        fast.recv(timeout=0.3)  # nothing else, no duplicate
    assert forwarded == [n]  # "other" never reached the forwarder
