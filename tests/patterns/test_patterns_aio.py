"""Every socket pattern through ``a3m.aio``, across several nodes over real UDP, with
concurrent tasks; and misuse raising the same errors through the asyncio API as through the
blocking one.

Every await has a timeout and every test runs under ``asyncio.wait_for``: nothing can hang.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest

import a3m
import a3m.aio

OP_S = 20.0  # the timeout of a single await that should succeed
TEST_S = 60.0  # a whole test: only reached when something hangs


def run(main: Callable[[], Awaitable[None]]) -> None:
    async def guarded() -> None:
        await asyncio.wait_for(main(), TEST_S)

    asyncio.run(guarded())


@asynccontextmanager
async def cluster(n: int, **options: Any) -> AsyncIterator[list[a3m.aio.Node]]:
    """n asyncio nodes that all know each other's address, closed at the end."""
    nodes = [a3m.aio.Node(f"a{i}", **options) for i in range(n)]
    try:
        for x in nodes:
            for y in nodes:
                if x is not y:
                    x.associate(y.id, y.address)
        yield nodes
    finally:
        for x in nodes:
            await x.close(timeout=5)


async def links(sock: a3m.aio.Socket, n: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while len(sock.links) < n:
        assert time.monotonic() < deadline, f"{sock} has {sock.links}, wants {n} links"
        if await sock.wait_linked(timeout=0.2):
            await asyncio.sleep(0.01)  # linked to some already: it returns without waiting


async def links_down_to(sock: a3m.aio.Socket, n: int = 0, timeout: float = 30.0) -> None:
    """Until ``sock`` has no more than ``n`` links (it saw its peers go)."""
    deadline = time.monotonic() + timeout
    while len(sock.links) > n:
        assert time.monotonic() < deadline, f"{sock} still has {sock.links}"
        await asyncio.sleep(0.01)


def per_sender(items: list[tuple[int, int]]) -> dict[int, list[int]]:
    out: dict[int, list[int]] = defaultdict(list)
    for k, i in items:
        out[k].append(i)
    return out


def ints(payload: bytes) -> tuple[int, int]:
    k, i = payload.split(b":")
    return int(k), int(i)


# ---------------------------------------------------------------------------- PAIR


def test_aio_pair_both_directions_at_once() -> None:
    async def main() -> None:
        async with cluster(2) as (a, b):
            pa = a.socket(a3m.PAIR, "p", capacity=8)
            pb = b.socket(a3m.PAIR, "p", capacity=8)
            pa.link(pb.id)
            assert await pa.wait_linked(timeout=10) and await pb.wait_linked(timeout=10)
            n = 500

            async def send(sock: a3m.aio.Socket, tag: bytes) -> None:
                for i in range(n):
                    await sock.send(tag + b"%d" % i, timeout=OP_S)

            async def recv(sock: a3m.aio.Socket) -> list[bytes]:
                return [await sock.recv(timeout=OP_S) for _ in range(n)]

            _, _, at_a, at_b = await asyncio.gather(send(pa, b"a"), send(pb, b"b"),
                                                    recv(pa), recv(pb))
            assert at_b == [b"a%d" % i for i in range(n)]
            assert at_a == [b"b%d" % i for i in range(n)]
            # a second PAIR is refused for now (non-fatal: it would link once pa goes)
            third = a.socket(a3m.PAIR, "third")
            third.link(pb.id)
            assert await third.wait_linked(timeout=0.5) is False

    run(main)


# ---------------------------------------------------------------------------- PUSH / PULL


def test_aio_producer_tasks_share_a_push_to_pulls_on_two_nodes() -> None:
    async def main() -> None:
        async with cluster(3) as (src, w1, w2):
            push = src.socket(a3m.PUSH, "out")
            pulls = [w.socket(a3m.PULL, "in", capacity=8) for w in (w1, w2)]
            for p in pulls:
                push.link(p.id)
            for p in pulls:
                assert await push.wait_linked(p.id, timeout=10)
            producers, per = 3, 300
            total = producers * per
            got: dict[a3m.SocketId, list[tuple[int, int]]] = {p.id: [] for p in pulls}

            async def produce(k: int) -> None:
                for i in range(per):
                    await push.send(b"%d:%d" % (k, i), timeout=OP_S)

            async def consume(pull: a3m.aio.Socket) -> None:
                while sum(len(v) for v in got.values()) < total:
                    try:
                        m = await pull.recv_msg(timeout=0.2)
                    except a3m.Timeout:
                        continue
                    assert m.source == push.id
                    got[pull.id].append(ints(m.payload))

            await asyncio.gather(*(produce(k) for k in range(producers)),
                                 *(consume(p) for p in pulls))
            every = Counter(x for v in got.values() for x in v)
            assert set(every) == {(k, i) for k in range(producers) for i in range(per)}
            assert set(every.values()) == {1}
            for p in pulls:
                assert got[p.id]
                for k, idx in per_sender(got[p.id]).items():
                    assert idx == sorted(idx), f"producer {k} out of order on {p.id}"

    run(main)


# ---------------------------------------------------------------------------- REQ / REP


def test_aio_req_tasks_against_rep_tasks_on_two_nodes() -> None:
    async def main() -> None:
        async with cluster(3) as (client, s1, s2):
            reps = [s.socket(a3m.REP, "rep") for s in (s1, s2)]
            reqs = [client.socket(a3m.REQ, f"req{k}") for k in range(3)]
            for req in reqs:
                for rep in reps:
                    req.link(rep.id)
            for req in reqs:
                await links(req, len(reps))
            per = 60
            served: list[tuple[a3m.SocketId, bytes]] = []
            stop = asyncio.Event()

            async def serve(rep: a3m.aio.Socket) -> None:
                while not stop.is_set():
                    try:
                        m = await rep.recv_msg(timeout=0.2)
                    except a3m.Timeout:
                        continue
                    served.append((rep.id, m.payload))
                    await rep.send(m.payload[::-1], timeout=OP_S)

            async def ask(k: int) -> None:
                for i in range(per):
                    q = b"%d:%d" % (k, i)
                    await reqs[k].send(q, timeout=OP_S)
                    assert await reqs[k].recv(timeout=OP_S) == q[::-1]

            servers = [asyncio.create_task(serve(r)) for r in reps]
            try:
                await asyncio.gather(*(ask(k) for k in range(len(reqs))))
            finally:
                stop.set()
                await asyncio.gather(*servers)
            counts = Counter(q for _, q in served)
            assert set(counts) == {b"%d:%d" % (k, i) for k in range(3) for i in range(per)}
            assert set(counts.values()) == {1}
            assert {rid.node for rid, _ in served} == {s1.id, s2.id}

    run(main)


def test_aio_req_waiting_when_its_rep_goes_away_gets_link_error() -> None:
    """A task already waiting in REQ.recv when the REP closes gets LinkError (not a hang, not
    Timeout); a REP whose REQ went away gets LinkError for the reply, then serves on."""
    async def main() -> None:
        async with cluster(2) as (srv, cli):
            rep = srv.socket(a3m.REP, "rep")
            req = cli.socket(a3m.REQ, "req")
            req.link(rep.id)
            assert await req.wait_linked(timeout=10)
            await req.send(b"q", timeout=OP_S)
            waiting = asyncio.create_task(req.recv(timeout=OP_S))
            assert await rep.recv(timeout=OP_S) == b"q"
            await asyncio.sleep(0.05)
            assert not waiting.done()
            assert await rep.close(timeout=5)
            with pytest.raises(a3m.LinkError, match="went away"):
                await waiting
            with pytest.raises(a3m.UsageError, match="no request outstanding"):
                await req.recv(timeout=1)  # the failure was reported once

            rep2 = srv.socket(a3m.REP, "rep2")
            req2 = cli.socket(a3m.REQ, "req2")
            req3 = cli.socket(a3m.REQ, "req3")
            for r in (req2, req3):
                r.link(rep2.id)
                assert await r.wait_linked(timeout=10)
            await req2.send(b"from req2", timeout=OP_S)
            assert await rep2.recv(timeout=OP_S) == b"from req2"
            assert await req2.close(timeout=5)
            await links_down_to(rep2, 1)  # rep2 saw req2 go (req3 stays)
            with pytest.raises(a3m.LinkError, match="requester went away"):
                await rep2.send(b"too late", timeout=OP_S)
            await req3.send(b"from req3", timeout=OP_S)
            assert await rep2.recv(timeout=OP_S) == b"from req3"
            await rep2.send(b"ok", timeout=OP_S)
            assert await req3.recv(timeout=OP_S) == b"ok"

    run(main)


# ---------------------------------------------------------------------------- PUB / SUB


def test_aio_pub_sub_topics_with_publisher_and_subscriber_tasks() -> None:
    async def main() -> None:
        async with cluster(3) as (pn, sa, sb):
            pub = pn.socket(a3m.PUB, "feed")
            s_eur = sa.socket(a3m.SUB, "eur", capacity=8)
            s_eur.subscribe(b"eur.")
            s_eur.subscribe(b"eur.usd")  # overlapping: one copy
            s_usd = sb.socket(a3m.SUB, "usd", capacity=8)
            s_usd.subscribe("usd.")
            s_usd.subscribe("eur.usd")
            for s in (s_eur, s_usd):
                s.link(pub.id)
                assert await s.wait_linked(timeout=10)
            await links(pub, 2)
            topics = [b"eur.usd", b"eur.gbp", b"usd.jpy", b"chf.jpy"]  # nobody wants chf
            per = 150

            async def publish(k: int) -> None:
                for i in range(per):
                    await pub.send(b"%d:%d" % (k, i), topic=topics[k], timeout=OP_S)

            async def read(sub: a3m.aio.Socket, n: int) -> list[a3m.ReceivedMessage]:
                return [await sub.recv_msg(timeout=OP_S) for _ in range(n)]

            results = await asyncio.gather(*(publish(k) for k in range(len(topics))),
                                           read(s_eur, 2 * per), read(s_usd, 2 * per))
            for msgs, wants in ((results[-2], {0, 1}), (results[-1], {0, 2})):
                pairs = []
                for m in msgs:
                    k, i = ints(m.payload)
                    assert m.topic == topics[k] and m.source == pub.id
                    pairs.append((k, i))
                got = per_sender(pairs)
                assert set(got) == wants
                assert all(got[k] == list(range(per)) for k in wants)
            for s in (s_eur, s_usd):
                with pytest.raises(a3m.Timeout):
                    await s.recv(timeout=0.2)
            s_usd.unsubscribe("usd.")
            with pytest.raises(a3m.UsageError, match="not subscribed"):
                s_usd.unsubscribe("usd.")

    run(main)


# ---------------------------------------------------------------------------- DEALER / ROUTER


def test_aio_dealer_router_concurrent_dealer_tasks() -> None:
    async def main() -> None:
        async with cluster(3) as (broker, c1, c2):
            router = broker.socket(a3m.ROUTER, "r", capacity=16)
            dealers = [c.socket(a3m.DEALER, f"d{j}", capacity=16) for c in (c1, c2)
                       for j in range(2)]
            for d in dealers:
                d.link(router.id)
                assert await d.wait_linked(timeout=10)
            await links(router, len(dealers))
            per = 100
            stop = asyncio.Event()

            async def serve() -> None:
                while not stop.is_set():
                    try:
                        m = await router.recv_msg(timeout=0.2)
                    except a3m.Timeout:
                        continue
                    await router.send(b"re:" + m.payload, to=m.source, timeout=OP_S)

            async def send(d: a3m.aio.Socket) -> None:
                for i in range(per):
                    await d.send(b"%s:%d" % (str(d.id).encode(), i), timeout=OP_S)

            async def recv(d: a3m.aio.Socket) -> list[bytes]:
                return [await d.recv(timeout=OP_S) for _ in range(per)]

            server = asyncio.create_task(serve())
            try:
                got = await asyncio.gather(*(recv(d) for d in dealers),
                                           *(send(d) for d in dealers))
            finally:
                stop.set()
                await server
            for d, replies in zip(dealers, got, strict=False):
                # one server task: replies in the order of the requests, per DEALER
                assert replies == [b"re:%s:%d" % (str(d.id).encode(), i) for i in range(per)]
            with pytest.raises(a3m.SocketNotLinked):
                await router.send(b"?", to=("ghost", "d"), timeout=1)
            assert await dealers[0].close(timeout=5)
            await links_down_to(router, len(dealers) - 1)
            with pytest.raises(a3m.SocketNotLinked):  # a route that went away
                await router.send(b"?", to=dealers[0].id, timeout=1)

    run(main)


# ---------------------------------------------------------------------------- SURVEYOR


def test_aio_survey_respondent_tasks_and_the_deadline() -> None:
    async def main() -> None:
        async with cluster(4) as (ctl, *others):
            sv = ctl.socket(a3m.SURVEYOR, "sv", survey_time_s=30.0)
            rs = [n.socket(a3m.RESPONDENT, "r") for n in others]
            for r in rs:
                r.link(sv.id)
                assert await r.wait_linked(timeout=10)
            await links(sv, len(rs))
            stop = asyncio.Event()

            async def respond(r: a3m.aio.Socket) -> None:
                while not stop.is_set():
                    try:
                        q = await r.recv(timeout=0.2)
                    except a3m.Timeout:
                        continue
                    await r.send(b"%s|%s" % (r.id.node.encode(), q), timeout=OP_S)

            tasks = [asyncio.create_task(respond(r)) for r in rs]
            try:
                for rnd in range(10):
                    q = b"round %d" % rnd
                    await sv.send(q, timeout=OP_S)
                    answers = [await sv.recv_msg(timeout=OP_S) for _ in rs]
                    assert sorted(m.payload for m in answers) == sorted(
                        b"%s|%s" % (n.id.encode(), q) for n in others)
                    assert {m.source for m in answers} == {r.id for r in rs}
                sv.set_option("survey_time_s", 0.3)
                await sv.send(b"quick", timeout=OP_S)
                seen: list[bytes] = []
                with pytest.raises(a3m.Timeout, match="deadline"):
                    for _ in range(len(rs) + 1):
                        seen.append(await sv.recv(timeout=OP_S))
                assert len(seen) == len(set(seen)) <= len(rs)
                with pytest.raises(a3m.UsageError, match="no survey"):
                    await sv.recv(timeout=1)
                with pytest.raises(a3m.UsageError, match="survey_time_s"):
                    sv.set_option("survey_time_s", 0)
            finally:
                stop.set()
                await asyncio.gather(*tasks)

    run(main)


# ---------------------------------------------------------------------------- BUS


def test_aio_bus_mesh_sender_and_receiver_tasks_per_node() -> None:
    async def main() -> None:
        async with cluster(3) as nodes:
            buses = [n.socket(a3m.BUS, "bus", capacity=8) for n in nodes]
            for i, b in enumerate(buses):
                for other in buses[i + 1:]:
                    b.link(other.id)
            for b in buses:
                await links(b, len(buses) - 1)
            per = 200

            async def send(me: int) -> None:
                for i in range(per):
                    await buses[me].send(b"%d:%d" % (me, i), timeout=OP_S)

            async def recv(me: int) -> list[tuple[int, int]]:
                out = []
                for _ in range(per * (len(buses) - 1)):
                    m = await buses[me].recv_msg(timeout=OP_S)
                    k, i = ints(m.payload)
                    assert m.source == buses[k].id
                    out.append((k, i))
                return out

            heard = await asyncio.gather(*(recv(i) for i in range(len(buses))),
                                         *(send(i) for i in range(len(buses))))
            for me in range(len(buses)):
                got = per_sender(heard[me])
                assert set(got) == set(range(len(buses))) - {me}
                assert all(v == list(range(per)) for v in got.values())
            for b in buses:
                with pytest.raises(a3m.Timeout):
                    await b.recv(timeout=0.2)

    run(main)


# ---------------------------------------------------------------------------- a socket closing


def test_aio_waiting_recv_gets_closed_when_its_socket_closes() -> None:
    async def main() -> None:
        async with cluster(1) as (a,):
            pull = a.socket(a3m.PULL, "in")
            waiting = asyncio.create_task(pull.recv(timeout=OP_S))
            await asyncio.sleep(0.05)
            assert await pull.close(timeout=5)
            with pytest.raises(a3m.Closed):
                await waiting
            with pytest.raises(a3m.Closed):
                await pull.recv(timeout=1)

    run(main)


def test_aio_req_closed_while_a_task_awaits_its_reply_gets_closed() -> None:
    """Closing one's own REQ is not its REP going away: the waiting task gets Closed."""
    async def main() -> None:
        async with cluster(2) as (srv, cli):
            rep = srv.socket(a3m.REP, "rep")
            req = cli.socket(a3m.REQ, "req")
            req.link(rep.id)
            assert await req.wait_linked(timeout=10)
            await req.send(b"q", timeout=OP_S)
            assert await rep.recv(timeout=OP_S) == b"q"
            waiting = asyncio.create_task(req.recv(timeout=OP_S))
            await asyncio.sleep(0.05)
            assert await req.close(timeout=5)
            with pytest.raises(a3m.Closed):
                await waiting

    run(main)


# ---------------------------------------------------------------------------- misuse, both APIs


class Api:
    """The same calls through the blocking API (in a worker thread, so that the event loop
    stays free) or through a3m.aio."""

    def __init__(self, blocking: bool) -> None:
        self.blocking = blocking

    async def send(self, sock: a3m.aio.Socket, data: Any, timeout: float | None = OP_S,
                   **kw: Any) -> None:
        if self.blocking:
            await asyncio.to_thread(sock.sync.send, data, timeout, **kw)
        else:
            await sock.send(data, timeout=timeout, **kw)

    async def recv(self, sock: a3m.aio.Socket, timeout: float | None = OP_S) -> bytes:
        if self.blocking:
            return await asyncio.to_thread(sock.sync.recv, timeout)
        return await sock.recv(timeout=timeout)


Nodes = list[a3m.aio.Node]


async def pair_of(nodes: Nodes, kind_a: str, kind_b: str) -> tuple[a3m.aio.Socket,
                                                                   a3m.aio.Socket]:
    a = nodes[0].socket(kind_a, "a")
    b = nodes[1].socket(kind_b, "b")
    a.link(b.id)
    assert await a.wait_linked(timeout=10) and await b.wait_linked(timeout=10)
    return a, b


async def req_send_twice(nodes: Nodes, api: Api) -> None:
    req, _ = await pair_of(nodes, a3m.REQ, a3m.REP)
    await api.send(req, b"q")
    await api.send(req, b"q again")


async def req_recv_before_send(nodes: Nodes, api: Api) -> None:
    req, _ = await pair_of(nodes, a3m.REQ, a3m.REP)
    await api.recv(req)


async def rep_send_without_request(nodes: Nodes, api: Api) -> None:
    _, rep = await pair_of(nodes, a3m.REQ, a3m.REP)
    await api.send(rep, b"unasked")


async def rep_recv_before_reply(nodes: Nodes, api: Api) -> None:
    req, rep = await pair_of(nodes, a3m.REQ, a3m.REP)
    await req.send(b"q", timeout=OP_S)
    assert await rep.recv(timeout=OP_S) == b"q"
    await api.recv(rep)


async def rep_reply_to_a_req_that_went_away(nodes: Nodes, api: Api) -> None:
    req, rep = await pair_of(nodes, a3m.REQ, a3m.REP)
    await req.send(b"q", timeout=OP_S)
    assert await rep.recv(timeout=OP_S) == b"q"
    assert await req.close(timeout=5)
    await links_down_to(rep)
    await api.send(rep, b"answer")


async def req_whose_rep_went_away(nodes: Nodes, api: Api) -> None:
    req, rep = await pair_of(nodes, a3m.REQ, a3m.REP)
    await req.send(b"q", timeout=OP_S)
    assert await rep.recv(timeout=OP_S) == b"q"
    assert await rep.close(timeout=5)
    await api.recv(req)


async def sub_send(nodes: Nodes, api: Api) -> None:
    _, sub = await pair_of(nodes, a3m.PUB, a3m.SUB)
    await api.send(sub, b"x")


async def pub_recv(nodes: Nodes, api: Api) -> None:
    pub, _ = await pair_of(nodes, a3m.PUB, a3m.SUB)
    await api.recv(pub)


async def push_recv(nodes: Nodes, api: Api) -> None:
    push, _ = await pair_of(nodes, a3m.PUSH, a3m.PULL)
    await api.recv(push)


async def pull_send(nodes: Nodes, api: Api) -> None:
    _, pull = await pair_of(nodes, a3m.PUSH, a3m.PULL)
    await api.send(pull, b"x")


async def router_send_without_to(nodes: Nodes, api: Api) -> None:
    _, router = await pair_of(nodes, a3m.DEALER, a3m.ROUTER)
    await api.send(router, b"x")


async def router_send_to_an_unknown_route(nodes: Nodes, api: Api) -> None:
    _, router = await pair_of(nodes, a3m.DEALER, a3m.ROUTER)
    await api.send(router, b"x", to=a3m.SocketId("ghost", "a"))


async def router_send_to_a_route_that_went_away(nodes: Nodes, api: Api) -> None:
    dealer, router = await pair_of(nodes, a3m.DEALER, a3m.ROUTER)
    assert await dealer.close(timeout=5)
    await links_down_to(router)
    await api.send(router, b"x", to=dealer.id)


async def router_send_to_a_malformed_route(nodes: Nodes, api: Api) -> None:
    _, router = await pair_of(nodes, a3m.DEALER, a3m.ROUTER)
    await api.send(router, b"x", to=42)


async def surveyor_recv_without_survey(nodes: Nodes, api: Api) -> None:
    sv, _ = await pair_of(nodes, a3m.SURVEYOR, a3m.RESPONDENT)
    await api.recv(sv)


async def surveyor_recv_after_the_deadline_was_reported(nodes: Nodes, api: Api) -> None:
    sv, _ = await pair_of(nodes, a3m.SURVEYOR, a3m.RESPONDENT)
    sv.set_option("survey_time_s", 0.1)
    await sv.send(b"anyone?", timeout=OP_S)
    with pytest.raises(a3m.Timeout, match="deadline"):
        await api.recv(sv)  # nobody answers: the deadline ends the survey
    await api.recv(sv)


async def respondent_send_without_survey(nodes: Nodes, api: Api) -> None:
    _, r = await pair_of(nodes, a3m.SURVEYOR, a3m.RESPONDENT)
    await api.send(r, b"unasked")


async def recv_times_out(nodes: Nodes, api: Api) -> None:
    _, pull = await pair_of(nodes, a3m.PUSH, a3m.PULL)
    await api.recv(pull, timeout=0.1)


async def recv_timeout_zero_would_block(nodes: Nodes, api: Api) -> None:
    _, pull = await pair_of(nodes, a3m.PUSH, a3m.PULL)
    await api.recv(pull, timeout=0)


async def send_timeout_zero_would_block(nodes: Nodes, api: Api) -> None:
    push = nodes[0].socket(a3m.PUSH, "lonely")  # no link: no credit
    await api.send(push, b"x", timeout=0)


async def negative_timeout(nodes: Nodes, api: Api) -> None:
    _, pull = await pair_of(nodes, a3m.PUSH, a3m.PULL)
    await api.recv(pull, timeout=-1)


async def send_not_bytes(nodes: Nodes, api: Api) -> None:
    push, _ = await pair_of(nodes, a3m.PUSH, a3m.PULL)
    await api.send(push, "text")


async def send_too_large(nodes: Nodes, api: Api) -> None:
    push, _ = await pair_of(nodes, a3m.PUSH, a3m.PULL)
    await api.send(push, b"x" * (MAX_SIZE + 1))


async def send_on_a_closed_socket(nodes: Nodes, api: Api) -> None:
    push, _ = await pair_of(nodes, a3m.PUSH, a3m.PULL)
    assert await push.close(timeout=5)
    await api.send(push, b"x")


MAX_SIZE = 1 << 16
MISUSE: list[tuple[Callable[[Nodes, Api], Awaitable[None]], type[Exception], str]] = [
    (req_send_twice, a3m.UsageError, "a request is outstanding"),
    (req_recv_before_send, a3m.UsageError, "no request outstanding"),
    (rep_send_without_request, a3m.UsageError, "no request to reply to"),
    (rep_recv_before_reply, a3m.UsageError, "reply to the last request"),
    (rep_reply_to_a_req_that_went_away, a3m.LinkError, "requester went away"),
    (req_whose_rep_went_away, a3m.LinkError, "went away with the request unanswered"),
    (sub_send, a3m.UsageError, "SUB socket cannot send"),
    (pub_recv, a3m.UsageError, "PUB socket cannot receive"),
    (push_recv, a3m.UsageError, "PUSH socket cannot receive"),
    (pull_send, a3m.UsageError, "PULL socket cannot send"),
    (router_send_without_to, a3m.UsageError, "needs to="),
    (router_send_to_an_unknown_route, a3m.SocketNotLinked, "no route"),
    (router_send_to_a_route_that_went_away, a3m.SocketNotLinked, "no route"),
    (router_send_to_a_malformed_route, a3m.UsageError, "routing id"),
    (surveyor_recv_without_survey, a3m.UsageError, "no survey under way"),
    (surveyor_recv_after_the_deadline_was_reported, a3m.UsageError, "no survey under way"),
    (respondent_send_without_survey, a3m.UsageError, "no survey to answer"),
    (recv_times_out, a3m.Timeout, "timed out"),
    (recv_timeout_zero_would_block, a3m.WouldBlock, "nothing to receive"),
    (send_timeout_zero_would_block, a3m.WouldBlock, "cannot send now"),
    (negative_timeout, a3m.UsageError, "timeout must be >= 0"),
    (send_not_bytes, a3m.UsageError, "bytes"),
    (send_too_large, a3m.MessageTooLarge, "byte"),
    (send_on_a_closed_socket, a3m.Closed, "closed"),
]


@pytest.mark.parametrize(("case", "error", "match"), MISUSE,
                         ids=[c[0].__name__ for c in MISUSE])
def test_misuse_raises_the_same_error_through_both_apis(
        case: Callable[[Nodes, Api], Awaitable[None]], error: type[Exception],
        match: str) -> None:
    seen: dict[bool, tuple[type[BaseException], str]] = {}

    async def main() -> None:
        for blocking in (True, False):
            async with cluster(2, max_message_size=MAX_SIZE) as nodes:
                with pytest.raises(error, match=match) as info:
                    await case(nodes, Api(blocking))
                seen[blocking] = (type(info.value), str(info.value))

    run(main)
    assert seen[True] == seen[False]  # same class, same message
    if error is a3m.Timeout:
        assert issubclass(seen[False][0], TimeoutError)


def test_aio_a_cancelled_recv_loses_nothing_and_a_cancelled_send_sends_nothing() -> None:
    async def main() -> None:
        async with cluster(2) as (x, y):
            pull = y.socket(a3m.PULL, "in", capacity=1)
            push = x.socket(a3m.PUSH, "out")
            push.link(pull.id)
            assert await push.wait_linked(timeout=10)
            waiting = asyncio.create_task(pull.recv(timeout=OP_S))
            await asyncio.sleep(0.05)
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting
            await push.send(b"first", timeout=OP_S)  # takes the one credit
            blocked = asyncio.create_task(push.send(b"never", timeout=OP_S))
            await asyncio.sleep(0.1)
            assert not blocked.done()  # no credit: it waits
            blocked.cancel()
            with pytest.raises(asyncio.CancelledError):
                await blocked
            assert await pull.recv(timeout=OP_S) == b"first"
            with pytest.raises(a3m.Timeout):
                await pull.recv(timeout=0.3)  # the cancelled send did not happen

    run(main)


def test_a_pinned_key_through_the_asyncio_api() -> None:
    async def main() -> None:
        async with a3m.aio.Node("k-src", trust="strict") as src, a3m.aio.Node("k-dst") as dst:
            assert dst.public_key is not None and len(dst.public_key) == 64
            src.associate("k-dst", dst.sync.address, public_key=dst.public_key)
            dst.associate("k-src", src.sync.address)
            pull = dst.socket(a3m.PULL, "in")
            push = src.socket(a3m.PUSH, "out")
            push.link(("k-dst", "in"))
            await push.send(b"pinned", timeout=OP_S)
            assert await pull.recv(timeout=OP_S) == b"pinned"

    run(main)
