"""REQ and REP's native exchange (``a3m.runtime.exchange``, ``native/src/exchange.rs``)
against the Python core, its twin: the same traffic with the exchange and without it leaves
the same links, credits, counters and pattern state; every case the exchange leaves to the
core (a FLOW due, a cookie, a misuse, a timeout, a peer gone, a descriptor watched, two
links) behaves as without it."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import a3m
from a3m._dataplane import native
from a3m.core import message as m
from a3m.errors import LinkError, ProtocolViolation, Timeout, UsageError, WouldBlock

pytestmark = pytest.mark.skipif(native is None or not hasattr(native, "Exchange"),
                                reason="the native data plane is not built")

#: Small credits: a FLOW every two messages each way, so the exchange hands the socket back
#: to the core (and lends it again) over and over.
SMALL = {"capacity": 8, "capacity_max": 0}


def _until(cond: Callable[[], bool], timeout: float = 10.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.005)
    return cond()


@contextmanager
def _pair(monkeypatch: pytest.MonkeyPatch, exchange: bool, clients: int = 1,
          **options: Any) -> Iterator[tuple[Any, Any, list[Any], list[Any]]]:
    monkeypatch.setenv("A3M_NATIVE_EXCHANGE", "1" if exchange else "0")
    with a3m.Node("srv", busy_poll_s=0, seed=1) as srv:
        nodes = [a3m.Node(f"cli{i}", busy_poll_s=0, seed=2 + i) for i in range(clients)]
        try:
            rep = srv.socket(a3m.REP, "rep", **options)
            reqs = []
            for node in nodes:
                node.associate("srv", srv.address)
                req = node.socket(a3m.REQ, "req", **options)
                req.link("srv/rep")
                assert req.wait_linked(timeout=10)
                reqs.append(req)
            yield srv, rep, nodes, reqs
        finally:
            for node in nodes:
                node.close(timeout=5)


def _serve(rep: Any, n: int) -> threading.Thread:
    def run() -> None:
        for _ in range(n):
            rep.send(b"re:" + rep.recv())
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def _round_trips(rep: Any, req: Any, n: int) -> None:
    """``n`` round trips, each answered in order (the REP served from its own thread)."""
    server = _serve(rep, n)
    for i in range(n):
        req.send(b"%d" % i)
        assert req.recv(timeout=10) == b"re:%d" % i
    server.join(10)
    assert not server.is_alive()


def _link_state(node: Any, sock: Any) -> tuple[Any, ...]:
    """Under the node's lock, with every lent socket taken back: the socket's one link as
    the core holds it (times aside), its counters and its pattern's state."""
    with node._driver.lock:
        if node._lender is not None:
            node._lender.take_all_back()
        core = sock._core
        (link,) = core.links.values()
        r, s = link.recv, link.send
        pat = (len(core._requests), core._owed is None) if core.kind == "REP" else (
            core._outstanding is None, core._reply is None, core._next_id)
        return (link.expected_seq, link.next_seq, link.data_in, link.processed,
                r.received, r.delivered, r.edge, r.max_edge, r.flow_seq, r.capacity,
                r.arrived_bytes, s.edge, s.sent, s.flow_seq, dict(core.stats), pat)


def _run(monkeypatch: pytest.MonkeyPatch, exchange: bool, n: int) -> tuple[Any, ...]:
    with _pair(monkeypatch, exchange, **SMALL) as (srv, rep, (cli,), (req,)):
        server = _serve(rep, n)
        for i in range(n):
            req.send(b"q%d" % i)
            assert req.recv() == b"re:q%d" % i
        server.join(10)
        assert not server.is_alive()
        # the last FLOWs may still be on their way: settle on the credits granted
        assert _until(lambda: _link_state(cli, req)[11] == _link_state(srv, rep)[6]
                      and _link_state(srv, rep)[11] == _link_state(cli, req)[6])
        used = (None if srv._lender is None else
                (srv._lender.lends, srv._lender.take_backs, srv._driver.lead_exchanges,
                 cli._lender.lends, cli._lender.take_backs, cli._driver.lead_exchanges))
        return _link_state(srv, rep), _link_state(cli, req), used


def test_the_same_links_and_counters_as_the_core(monkeypatch: pytest.MonkeyPatch) -> None:
    n = 300
    srv_x, cli_x, used = _run(monkeypatch, True, n)
    srv_p, cli_p, none = _run(monkeypatch, False, n)
    assert none is None  # (no exchange made)
    assert srv_x == srv_p
    assert cli_x == cli_p
    assert srv_x[4:6] == (n, n) and srv_x[14] == {"sent": n, "received": n, "delivered": n}
    # the exchange carried round trips both ways, and gave the sockets back to the core
    # (for the FLOWs) and took them again (how often each depends on which thread read
    # what: counted, not compared)
    assert all(k > 0 for k in used)


def test_growing_capacity_stays_with_the_core(monkeypatch: pytest.MonkeyPatch) -> None:
    """A link whose capacity tunes itself: the exchange ends its rounds, the core grows it."""
    n = 400
    with _pair(monkeypatch, True, capacity=4, capacity_max=64) as (srv, rep, _, (req,)):
        _round_trips(rep, req, n)
        assert srv._driver.lead_exchanges > 0


def test_misuse_is_reported_as_without_it(monkeypatch: pytest.MonkeyPatch) -> None:
    with _pair(monkeypatch, True) as (srv, rep, _, (req,)):
        _round_trips(rep, req, 3)
        assert _until(lambda: srv._lender.x.lent("rep"))
        with pytest.raises(UsageError, match="no request to reply to"):
            rep.send(b"nothing asked")
        with pytest.raises(UsageError, match="no request outstanding"):
            req.recv()
        req.send(b"one")
        with pytest.raises(UsageError, match="outstanding"):
            req.send(b"two")
        assert rep.recv() == b"one"
        with pytest.raises(UsageError, match="reply to the last request"):
            rep.recv()
        rep.send(b"answer")
        assert req.recv() == b"answer"


def test_timeouts(monkeypatch: pytest.MonkeyPatch) -> None:
    with _pair(monkeypatch, True) as (srv, rep, _, (req,)):
        _round_trips(rep, req, 2)
        with pytest.raises(WouldBlock):
            rep.recv(timeout=0)
        with pytest.raises(Timeout):
            rep.recv(timeout=0.05)
        req.send(b"late")
        assert rep.recv(timeout=10) == b"late"
        rep.send(b"ok", timeout=10)
        assert req.recv(timeout=10) == b"ok"


def test_cookies_go_through_the_core(monkeypatch: pytest.MonkeyPatch) -> None:
    with _pair(monkeypatch, True) as (srv, rep, (cli,), (req,)):
        server = _serve(rep, 40)
        for i in range(20):
            req.send(b"%d" % i, cookie=("c", i) if i % 5 == 0 else None)
            assert req.recv() == b"re:%d" % i
        outcomes = [req.recv_cookie(timeout=10) for _ in range(4)]
        assert sorted(c.value for c in outcomes) == [("c", i) for i in (0, 5, 10, 15)]
        assert {c.outcome for c in outcomes} == {a3m.DELIVERED}
        for i in range(20, 40):
            req.send(b"%d" % i)
            assert req.recv() == b"re:%d" % i
        server.join(10)
        assert cli._driver.lead_exchanges > 0


def test_one_rep_answers_each_requester(monkeypatch: pytest.MonkeyPatch) -> None:
    n = 200
    with _pair(monkeypatch, True, clients=2) as (srv, rep, nodes, reqs):
        server = _serve(rep, 2 * n)
        errors: list[BaseException] = []

        def client(k: int) -> None:
            try:
                for i in range(n):
                    reqs[k].send(b"%d/%d" % (k, i))
                    assert reqs[k].recv() == b"re:%d/%d" % (k, i)
            except BaseException as exc:  # (reported below)
                errors.append(exc)

        threads = [threading.Thread(target=client, args=(k,)) for k in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        server.join(10)
        assert not errors
        assert srv._driver.lead_exchanges > 0


def test_a_peer_gone_with_the_request_unanswered(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("A3M_NATIVE_EXCHANGE", "1")
    with a3m.Node("cli", busy_poll_s=0) as cli:
        srv = a3m.Node("srv", busy_poll_s=0)
        rep = srv.socket(a3m.REP, "rep")
        cli.associate("srv", srv.address)
        req = cli.socket(a3m.REQ, "req")
        req.link("srv/rep")
        assert req.wait_linked(timeout=10)
        _round_trips(rep, req, 3)
        assert _until(lambda: cli._lender.x.lent("req"))
        req.send(b"never answered")
        assert rep.recv(timeout=10) == b"never answered"
        srv.close(timeout=5)
        with pytest.raises(LinkError, match="went away"):
            req.recv(timeout=10)


def test_a_watched_descriptor_keeps_the_socket_in_the_core(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import select

    with _pair(monkeypatch, True) as (srv, rep, _, (req,)):
        fd = rep.fileno()
        for i in range(20):
            req.send(b"%d" % i)
            for _ in range(100):  # (edge-triggered: wake, then ask, as its docstring says)
                if rep.poll(0) & a3m.POLLIN:
                    break
                assert select.select([fd], [], [], 10)[0] == [fd]
            else:
                pytest.fail("the descriptor never told of the request")
            rep.send(b"re:" + rep.recv())
            assert req.recv() == b"re:%d" % i
        assert not srv._lender.x.lent("rep")


def test_close_takes_every_socket_back(monkeypatch: pytest.MonkeyPatch) -> None:
    with _pair(monkeypatch, True) as (srv, rep, (cli,), (req,)):
        _round_trips(rep, req, 5)
        assert _until(lambda: cli._lender.x.lent("req"))
        x = cli._lender.x
        req.close()
        assert not x.lent("req")
        assert cli.close(timeout=5)
        assert x.tags() == []


def test_off_by_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("A3M_NATIVE_EXCHANGE", "0")
    with a3m.Node("n", busy_poll_s=0) as node:
        assert node._lender is None
        assert type(node.socket(a3m.REP)) is a3m.Socket


def flow_both(data: bytes) -> None:
    """``decode_flow`` (what the exchange reads a FLOW with) against the core's ``decode``:
    the same fields where the core reads a FLOW (its edge within 2^63 - 1), else None."""
    try:
        msg = m.decode(data)
    except ProtocolViolation:
        msg = None
    want = None
    if msg is not None and msg.type == m.FLOW and msg.edge < 1 << 63:
        want = (msg.src_tag, msg.dst_tag, msg.src_inc, msg.dst_inc, msg.flow_seq, msg.edge)
    assert native.decode_flow(data) == want


_tags = st.text(min_size=1, max_size=6).filter(lambda t: len(t.encode()) <= 255)
_u64 = st.integers(0, (1 << 64) - 1)


@settings(max_examples=300, deadline=None)
@given(_tags, _tags, _u64, _u64, st.integers(0, (1 << 32) - 1), _u64,
       st.lists(st.tuples(st.integers(0, 40), st.integers(0, 255)), max_size=3),
       st.integers(0, 40))
def test_flows_read_the_same_as_the_core(src: str, dst: str, src_inc: int, dst_inc: int,
                                          flow_seq: int, edge: int,
                                          flips: list[tuple[int, int]], cut: int) -> None:
    data = m.encode(m.Message(m.FLOW, src, dst, src_inc, dst_inc, flow_seq=flow_seq,
                              edge=edge))
    flow_both(data)
    bad = bytearray(data)
    for at, byte in flips:
        if at < len(bad):
            bad[at] = byte
    flow_both(bytes(bad))
    flow_both(data[:max(0, len(data) - cut)])
    flow_both(data + bytes(cut % 3))


def test_beside_a_stream_on_the_same_nodes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Round trips through the exchange while another thread streams batches between the
    same nodes (turns that send many datagrams under the send order, outside the
    interpreter's lock): both finish, exact."""
    n, batches, size = 300, 120, 64
    with _pair(monkeypatch, True) as (srv, rep, (cli,), (req,)):
        pull = srv.socket(a3m.PULL, "pull")
        push = cli.socket(a3m.PUSH, "push")
        push.link("srv/pull")
        assert push.wait_linked(timeout=10)
        server = _serve(rep, n)
        got: list[bytes] = []

        def drain() -> None:
            while len(got) < batches * size:
                got.extend(pull.recv_many(size, timeout=20))

        def stream() -> None:
            for b in range(batches):
                push.send_many([b"%d.%d" % (b, i) for i in range(size)], timeout=20)

        threads = [threading.Thread(target=drain, daemon=True),
                   threading.Thread(target=stream, daemon=True)]
        for t in threads:
            t.start()
        for i in range(n):
            req.send(b"%d" % i)
            assert req.recv(timeout=20) == b"re:%d" % i
        for t in threads:
            t.join(60)
        server.join(10)
        assert not any(t.is_alive() for t in threads) and not server.is_alive()
        assert got == [b"%d.%d" % (b, i) for b in range(batches) for i in range(size)]
        assert cli._driver.lead_exchanges > 0


def test_a_receive_that_waits_while_another_thread_leads(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Another thread of the client's node leads (it waits on a PULL), so the REQ's receives
    wait in the Python ``recv`` under the node's lock, and the leader's reads hand them the
    replies: each take returns a credit, and every other one sends a FLOW, whose timer comes
    before the leader's deadline, so the driver is woken from under the lock (it must not
    take it again)."""
    n = 100
    with _pair(monkeypatch, True, **SMALL) as (srv, rep, (cli,), (req,)):
        pull = cli.socket(a3m.PULL, "idle")
        stop = threading.Event()

        def lead() -> None:
            while not stop.is_set():
                try:
                    pull.recv(timeout=0.5)
                except Timeout:
                    pass

        leader = threading.Thread(target=lead, daemon=True)
        leader.start()
        assert _until(lambda: cli._driver._leader is not None)
        server = _serve(rep, n)
        done: list[int] = []

        def client() -> None:
            for i in range(n):
                req.send(b"%d" % i)
                assert req.recv(timeout=20) == b"re:%d" % i
                done.append(i)

        worker = threading.Thread(target=client, daemon=True)
        worker.start()
        worker.join(60)
        stop.set()
        leader.join(10)
        server.join(10)
        assert len(done) == n, f"the client stopped after {len(done)} round trips"


def test_a_rep_owing_a_reply_to_a_requester_gone_is_not_lent(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A REP owes a reply on a link that ended (its requester's node closed) and has another
    link still: it stays in the core, whose send says LinkError, then goes on natively."""
    with _pair(monkeypatch, True, clients=2) as (srv, rep, (gone, stays), (req0, req1)):
        req0.send(b"q")
        assert rep.recv(timeout=10) == b"q"
        gone.close(timeout=5)
        assert _until(lambda: len(rep.links) == 1)
        with srv._driver.lock:
            core = rep._core
            assert srv._lender.lendable(core) is None
        with pytest.raises(LinkError, match="went away"):
            rep.send(b"late")
        _round_trips(rep, req1, 3)
        assert _until(lambda: srv._lender.x.lent("rep"))
