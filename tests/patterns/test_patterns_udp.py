"""The patterns across nodes over real UDP, through the fault relay, with threads and asyncio."""

from __future__ import annotations

import asyncio
import threading

import pytest

import a3m
import a3m.aio
from a3m.testing.relay import FaultRelay

NET = {"loopback_datagram_size": 0}


RELAYS: list[FaultRelay] = []


@pytest.fixture
def trio_nodes() -> list[a3m.Node]:
    nodes = [a3m.Node(f"n{i}", **NET) for i in range(3)]
    yield nodes  # type: ignore[misc]
    for n in nodes:  # nodes first, while the relay still carries their goodbyes
        n.close(timeout=5)
    while RELAYS:
        RELAYS.pop().close()


def via_relay(nodes: list[a3m.Node], server: a3m.Node, **faults: float) -> FaultRelay:
    relay = FaultRelay({server.id: server.address}, seed=3, **faults)
    RELAYS.append(relay)
    for n in nodes:
        if n is not server:
            n.associate(server.id, relay.front(server.id))
    return relay


def test_reqrep_through_relay_every_request_answered_once(trio_nodes: list[a3m.Node]) -> None:
    server, c1, c2 = trio_nodes
    via_relay(trio_nodes, server, loss=0.2, dup=0.1, reorder=0.2)
    rep = server.socket(a3m.REP, "rep")
    reqs = [c.socket(a3m.REQ, "req") for c in (c1, c2)]
    for r in reqs:
        r.link(rep.id)
        assert r.wait_linked(timeout=10)
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
        assert s.wait_linked(timeout=10)
    assert pub.wait_linked(timeout=10)
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
        assert d.wait_linked(timeout=10)
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
