"""Every socket pattern with many application threads, over real UDP, through the blocking API.

Several nodes in one process, each socket used from threads of its own (and some sockets shared
by several threads), with small ``capacity`` values so that senders really wait for credits
while receivers run. Each test checks what its pattern promises: every message delivered
exactly once, to the right socket, in order per sender thread and link where the contract
says so. Every blocking call has a timeout and every thread is joined with a deadline; a
thread's exception fails the test (``Crew``).
"""

from __future__ import annotations

import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator

import pytest

import a3m

JOIN_S = 60.0  # a deadline for a whole crew of threads: only reached when something hangs
OP_S = 20.0  # the timeout of a single blocking call that should succeed
Cluster = Callable[[int], list[a3m.Node]]


class Crew:
    """Threads whose exceptions are collected and re-raised by :meth:`join`."""

    def __init__(self) -> None:
        self.threads: list[threading.Thread] = []
        self.errors: list[BaseException] = []
        self.stop = threading.Event()

    def start(self, fn: Callable[..., None], *args: object, name: str = "") -> None:
        def run() -> None:
            try:
                fn(*args)
            except BaseException as exc:  # re-raised in join
                self.errors.append(exc)
                self.stop.set()

        t = threading.Thread(target=run, name=name or getattr(fn, "__name__", "worker"),
                             daemon=True)
        self.threads.append(t)
        t.start()

    def join(self, timeout: float = JOIN_S) -> None:
        deadline = time.monotonic() + timeout
        for t in self.threads:
            t.join(max(0.0, deadline - time.monotonic()))
        if self.errors:
            raise self.errors[0]
        alive = [t.name for t in self.threads if t.is_alive()]
        assert not alive, f"threads still running after {timeout} s: {alive}"


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    """``cluster(n)``: n nodes that all know each other's address (closed after the test)."""
    made: list[a3m.Node] = []

    def make(n: int) -> list[a3m.Node]:
        out = [a3m.Node(f"t{i}") for i in range(n)]
        made.extend(out)
        for x in out:
            for y in out:
                if x is not y:
                    x.associate(y.id, y.address)
        return out

    yield make
    for x in made:
        x.close(timeout=5)


def wait_links(sock: a3m.Socket, n: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while len(sock.links) < n:
        assert time.monotonic() < deadline, f"{sock} has {sock.links}, wants {n} links"
        sock.wait_linked(timeout=0.2)


def increasing_per_sender(items: list[tuple[int, int]]) -> dict[int, list[int]]:
    """(sender, index) pairs in arrival order -> each sender's indexes in arrival order."""
    out: dict[int, list[int]] = defaultdict(list)
    for k, i in items:
        out[k].append(i)
    return out


# ---------------------------------------------------------------------------- REQ / REP


def test_req_threads_against_two_rep_nodes_each_request_answered_once(cluster: Cluster) -> None:
    """Four threads, each owning a REQ on one node, against four REPs on two nodes served by
    one thread each: every request is answered exactly once, by the REP that received it,
    and each answer goes back to the thread that asked."""
    nodes = cluster(3)
    client, s1, s2 = nodes
    reps = [s.socket(a3m.REP, f"rep{j}") for s in (s1, s2) for j in range(2)]
    reqs = [client.socket(a3m.REQ, f"req{k}") for k in range(4)]
    for req in reqs:
        for rep in reps:
            req.link(rep.id)
    for req in reqs:
        for rep in reps:
            assert req.wait_linked(rep.id, timeout=10)
    per = 100
    served: list[tuple[a3m.SocketId, a3m.SocketId, bytes]] = []  # (rep, requester, request)
    lock = threading.Lock()
    servers, clients = Crew(), Crew()

    def serve(rep: a3m.Socket) -> None:
        while not servers.stop.is_set():
            try:
                m = rep.recv_msg(timeout=0.2)
            except a3m.Timeout:
                continue
            with lock:
                served.append((rep.id, m.source, m.payload))
            rep.send(b"%s|%s" % (str(rep.id).encode(), m.payload), timeout=OP_S)

    answered: dict[bytes, bytes] = {}

    def ask(k: int) -> None:
        req = reqs[k]
        for i in range(per):
            q = b"%d:%d" % (k, i)
            req.send(q, timeout=OP_S)
            with pytest.raises(a3m.UsageError, match="outstanding"):
                req.send(b"again", timeout=OP_S)  # misuse from the owning thread
            m = req.recv_msg(timeout=OP_S)
            who, _, body = m.payload.partition(b"|")
            assert body == q
            assert who == str(m.source).encode()  # the REP that answered is the source
            with lock:
                answered[q] = who

    for rep in reps:
        servers.start(serve, rep, name=f"serve-{rep.id.node}-{rep.id.tag}")
    for k in range(len(reqs)):
        clients.start(ask, k, name=f"ask-{k}")
    try:
        clients.join()
    finally:
        servers.stop.set()
        servers.join()
    want = {b"%d:%d" % (k, i) for k in range(len(reqs)) for i in range(per)}
    counts = Counter(q for _, _, q in served)
    assert set(counts) == want and set(counts.values()) == {1}  # each exactly once
    for rep_id, source, q in served:
        assert answered[q] == str(rep_id).encode()
        assert source == reqs[int(q.split(b":")[0])].id
    by_node = Counter(rep_id.node for rep_id, _, _ in served)
    assert set(by_node) == {s1.id, s2.id}  # round robin reached both REP nodes


# ---------------------------------------------------------------------------- PUSH / PULL


def test_threads_sharing_one_push_to_pulls_on_three_nodes(cluster: Cluster) -> None:
    """Four threads share one PUSH; three PULL nodes with small capacities (the pushers wait
    for credits), two read by one thread each, one read by two threads: every message is
    delivered once overall, and on each single-reader PULL each sender thread's messages
    arrive in the order that thread sent them (FIFO per link)."""
    nodes = cluster(4)
    src, *workers = nodes
    push = src.socket(a3m.PUSH, "out")
    pulls = [w.socket(a3m.PULL, "in", capacity=8) for w in workers]
    for p in pulls:
        push.link(p.id)
    for p in pulls:
        assert push.wait_linked(p.id, timeout=10)
    senders, per = 4, 300
    total = senders * per
    got: dict[a3m.SocketId, list[tuple[int, int]]] = {p.id: [] for p in pulls}
    taken = [0]
    lock = threading.Lock()
    crew = Crew()

    def produce(k: int) -> None:
        for i in range(per):
            push.send(b"%d:%d" % (k, i), timeout=OP_S)

    def consume(pull: a3m.Socket) -> None:
        while not crew.stop.is_set():
            with lock:
                if taken[0] >= total:
                    return
            try:
                m = pull.recv(timeout=0.2)
            except a3m.Timeout:
                continue
            k, i = (int(x) for x in m.split(b":"))
            with lock:
                got[pull.id].append((k, i))
                taken[0] += 1

    for pull in pulls[:2]:
        crew.start(consume, pull, name=f"pull-{pull.id.node}")
    crew.start(consume, pulls[2], name="pull-shared-a")
    crew.start(consume, pulls[2], name="pull-shared-b")
    for k in range(senders):
        crew.start(produce, k, name=f"push-{k}")
    crew.join()
    everything = Counter(x for items in got.values() for x in items)
    assert set(everything) == {(k, i) for k in range(senders) for i in range(per)}
    assert set(everything.values()) == {1}
    for pull in pulls[:2]:
        assert got[pull.id], "round robin over links with credits reached every PULL"
        for k, idx in increasing_per_sender(got[pull.id]).items():
            assert idx == sorted(idx), f"sender thread {k} out of order on {pull.id}"
    with pytest.raises(a3m.Timeout):
        pulls[0].recv(timeout=0.2)


# ---------------------------------------------------------------------------- PAIR


def test_pair_sender_and_receiver_threads_on_both_sides(cluster: Cluster) -> None:
    """Each PAIR end has a thread sending and another receiving at the same time (capacity 8
    both ways): each direction arrives complete and in order."""
    nodes = cluster(2)
    a, b = nodes
    pa = a.socket(a3m.PAIR, "p", capacity=8)
    pb = b.socket(a3m.PAIR, "p", capacity=8)
    pa.link(pb.id)
    assert pa.wait_linked(timeout=10) and pb.wait_linked(timeout=10)
    n = 1000
    got: dict[str, list[bytes]] = {"a": [], "b": []}
    crew = Crew()

    def send(sock: a3m.Socket, name: str) -> None:
        for i in range(n):
            sock.send(b"%s%d" % (name.encode(), i), timeout=OP_S)

    def recv(sock: a3m.Socket, into: list[bytes]) -> None:
        for _ in range(n):
            into.append(sock.recv(timeout=OP_S))

    crew.start(send, pa, "a")
    crew.start(send, pb, "b")
    crew.start(recv, pa, got["a"])
    crew.start(recv, pb, got["b"])
    crew.join()
    assert got["b"] == [b"a%d" % i for i in range(n)]
    assert got["a"] == [b"b%d" % i for i in range(n)]


# ---------------------------------------------------------------------------- PUB / SUB


def test_pub_from_several_threads_subs_in_threads(cluster: Cluster) -> None:
    """Three threads publish on one PUB (topics per thread); three SUBs on two nodes, each read
    by its own thread, with overlapping and catch-all subscriptions and capacity 8 (the
    slowest subscriber sets the pace). Each SUB gets exactly the messages of its topics, once
    each, and each publisher thread's messages in its order."""
    nodes = cluster(3)
    pn, sa, sb = nodes
    pub = pn.socket(a3m.PUB, "feed")
    topics = [b"news.sport", b"news.weather", b"ads"]
    subs = {
        "news": sa.socket(a3m.SUB, "news", capacity=8),
        "mixed": sb.socket(a3m.SUB, "mixed", capacity=8),
        "all": sb.socket(a3m.SUB, "all", capacity=8),
    }
    subs["news"].subscribe(b"news.")
    subs["news"].subscribe(b"news.sport")  # overlaps b"news.": still one copy
    subs["mixed"].subscribe(b"ads")
    subs["mixed"].subscribe("news.weather")
    subs["all"].subscribe(b"")
    wants = {"news": {0, 1}, "mixed": {1, 2}, "all": {0, 1, 2}}  # publisher threads
    for s in subs.values():
        s.link(pub.id)
    for s in subs.values():
        assert s.wait_linked(timeout=10)
    wait_links(pub, len(subs))
    per = 200
    got: dict[str, list[a3m.ReceivedMessage]] = {name: [] for name in subs}
    crew = Crew()

    def publish(k: int) -> None:
        for i in range(per):
            pub.send(b"%d:%d" % (k, i), topic=topics[k], timeout=OP_S)

    def read(name: str) -> None:
        for _ in range(per * len(wants[name])):
            got[name].append(subs[name].recv_msg(timeout=OP_S))

    for name in subs:
        crew.start(read, name, name=f"sub-{name}")
    for k in range(len(topics)):
        crew.start(publish, k, name=f"pub-{k}")
    crew.join()
    for name, msgs in got.items():
        pairs = []
        for m in msgs:
            k, i = (int(x) for x in m.payload.split(b":"))
            assert m.topic == topics[k] and m.source == pub.id
            pairs.append((k, i))
        per_sender = increasing_per_sender(pairs)
        assert set(per_sender) == wants[name]
        for k in wants[name]:
            assert per_sender[k] == list(range(per)), f"{name}: publisher {k}"
        with pytest.raises(a3m.Timeout):  # nothing more: one copy each
            subs[name].recv(timeout=0.2)


# ---------------------------------------------------------------------------- DEALER / ROUTER


def test_dealer_router_concurrent_clients_each_reply_to_its_sender(cluster: Cluster) -> None:
    """A ROUTER served by two threads; six DEALERs on three nodes, each with a sending thread
    and a receiving thread at once (capacities 16): each DEALER gets exactly the replies to
    its own requests, once each."""
    nodes = cluster(4)
    broker, *clients = nodes
    router = broker.socket(a3m.ROUTER, "jobs", capacity=16)
    dealers = [c.socket(a3m.DEALER, f"d{j}", capacity=16) for c in clients for j in range(2)]
    for d in dealers:
        d.link(router.id)
    for d in dealers:
        assert d.wait_linked(timeout=10)
    wait_links(router, len(dealers))
    per = 150
    routed: Counter[tuple[a3m.SocketId, bytes]] = Counter()
    lock = threading.Lock()
    servers, crew = Crew(), Crew()
    replies: dict[a3m.SocketId, list[bytes]] = {d.id: [] for d in dealers}

    def serve() -> None:
        while not servers.stop.is_set():
            try:
                m = router.recv_msg(timeout=0.2)
            except a3m.Timeout:
                continue
            with lock:
                routed[(m.source, m.payload)] += 1
            router.send(b"re:" + m.payload, to=m.source, timeout=OP_S)

    def send(d: a3m.Socket) -> None:
        for i in range(per):
            d.send(b"%s:%d" % (str(d.id).encode(), i), timeout=OP_S)

    def recv(d: a3m.Socket) -> None:
        for _ in range(per):
            replies[d.id].append(d.recv(timeout=OP_S))

    servers.start(serve, name="router-a")
    servers.start(serve, name="router-b")
    for d in dealers:
        crew.start(send, d, name=f"send-{d.id}")
        crew.start(recv, d, name=f"recv-{d.id}")
    try:
        crew.join()
    finally:
        servers.stop.set()
        servers.join()
    assert set(routed.values()) == {1} and len(routed) == per * len(dealers)
    for src, payload in routed:  # the routing id is the DEALER that sent it
        assert payload.startswith(str(src).encode() + b":")
    for d in dealers:
        want = [b"re:%s:%d" % (str(d.id).encode(), i) for i in range(per)]
        assert sorted(replies[d.id]) == sorted(want)  # two server threads: any order
    with pytest.raises(a3m.Timeout):
        dealers[0].recv(timeout=0.2)


# ---------------------------------------------------------------------------- SURVEYOR


def test_surveyor_with_respondents_in_threads(cluster: Cluster) -> None:
    """Four RESPONDENTs on three nodes, each answering in its own thread; fifteen surveys in a
    row each collect exactly one answer from every respondent, all to that survey. Then a
    short survey: what arrives before the deadline is each answer at most once, the deadline
    raises Timeout, and a recv after it is a UsageError (no survey under way)."""
    nodes = cluster(4)
    ctl, *others = nodes
    sv = ctl.socket(a3m.SURVEYOR, "sv", survey_time_s=30.0)
    rs = [others[0].socket(a3m.RESPONDENT, "ra"), others[0].socket(a3m.RESPONDENT, "rb"),
          others[1].socket(a3m.RESPONDENT, "ra"), others[2].socket(a3m.RESPONDENT, "ra")]
    for r in rs:
        r.link(sv.id)
    for r in rs:
        assert r.wait_linked(timeout=10)
    wait_links(sv, len(rs))
    crew = Crew()

    def respond(r: a3m.Socket) -> None:
        while not crew.stop.is_set():
            try:
                q = r.recv(timeout=0.2)
            except a3m.Timeout:
                continue
            r.send(b"%s|%s" % (str(r.id).encode(), q), timeout=OP_S)

    for r in rs:
        crew.start(respond, r, name=f"respond-{r.id}")
    try:
        everyone = sorted(str(r.id).encode() for r in rs)
        for rnd in range(15):
            q = b"round %d" % rnd
            sv.send(q, timeout=OP_S)
            answers = [sv.recv_msg(timeout=OP_S) for _ in rs]
            who = sorted(m.payload.partition(b"|")[0] for m in answers)
            assert who == everyone, f"round {rnd}"
            assert {m.payload.partition(b"|")[2] for m in answers} == {q}
            assert all(str(m.source).encode() == m.payload.partition(b"|")[0]
                       for m in answers)
        sv.set_option("survey_time_s", 0.5)
        sv.send(b"last", timeout=OP_S)
        late: list[bytes] = []
        with pytest.raises(a3m.Timeout, match="deadline"):
            for _ in range(len(rs) + 1):
                late.append(sv.recv(timeout=OP_S))
        assert len(late) == len(set(late)) <= len(rs)
        assert all(x.endswith(b"|last") for x in late)
        with pytest.raises(a3m.UsageError, match="no survey"):
            sv.recv(timeout=1)
    finally:
        crew.stop.set()
        crew.join()


# ---------------------------------------------------------------------------- BUS


def test_bus_each_node_thread_sends_and_receives_with_a_poller(cluster: Cluster) -> None:
    """A full BUS mesh of three nodes (capacity 8); on each node one thread both sends and
    receives, driven by a Poller (POLLOUT while it has messages left, POLLIN always): all
    senders block on credits at times, none deadlocks, and every node hears each other node's
    messages exactly once, in that sender's order."""
    nodes = cluster(3)
    buses = [n.socket(a3m.BUS, "bus", capacity=8) for n in nodes]
    for i, b in enumerate(buses):
        for other in buses[i + 1:]:
            b.link(other.id)
    for b in buses:
        wait_links(b, len(buses) - 1)
    per = 300
    heard: dict[int, list[tuple[int, int]]] = {i: [] for i in range(len(buses))}
    crew = Crew()

    def run(me: int) -> None:
        bus = buses[me]
        poller = a3m.Poller()
        poller.register(bus, a3m.POLLIN | a3m.POLLOUT)
        sent = 0
        expect = per * (len(buses) - 1)
        deadline = time.monotonic() + JOIN_S
        while sent < per or len(heard[me]) < expect:
            assert time.monotonic() < deadline, f"bus {me}: sent {sent}, heard {len(heard[me])}"
            assert not crew.stop.is_set()
            for _, ev in poller.poll(timeout=1.0):
                if ev & a3m.POLLIN:
                    m = bus.recv_msg(timeout=0)
                    k, i = (int(x) for x in m.payload.split(b":"))
                    assert m.source == buses[k].id
                    heard[me].append((k, i))
                if ev & a3m.POLLOUT and sent < per:
                    try:
                        bus.send(b"%d:%d" % (me, sent), timeout=0)
                    except a3m.WouldBlock:
                        continue
                    sent += 1
                    if sent == per:
                        poller.register(bus, a3m.POLLIN)

    for i in range(len(buses)):
        crew.start(run, i, name=f"bus-{i}")
    crew.join()
    for me, items in heard.items():
        per_sender = increasing_per_sender(items)
        assert set(per_sender) == set(range(len(buses))) - {me}  # never its own messages
        for k, idx in per_sender.items():
            assert idx == list(range(per)), f"bus {me} from {k}"


# ---------------------------------------------------------------------------- closing under a thread


def test_a_thread_waiting_on_a_socket_another_thread_closes_gets_closed(
        cluster: Cluster) -> None:
    """A thread blocked in recv (REQ awaiting its reply, REP, PULL, a SURVEYOR mid-survey) or
    in send (PUSH with no link) gets Closed when another thread closes that socket; a REQ
    closed with its request unanswered is not told that its REP "went away"."""
    a, b = cluster(2)
    rep = b.socket(a3m.REP, "rep")
    req = a.socket(a3m.REQ, "req")
    req.link(rep.id)
    assert req.wait_linked(timeout=10)
    req.send(b"q", timeout=OP_S)
    assert rep.recv(timeout=OP_S) == b"q"
    sv = a.socket(a3m.SURVEYOR, "sv", survey_time_s=30.0)
    sv.send(b"anyone?", timeout=OP_S)
    push = a.socket(a3m.PUSH, "push")
    idle_rep = b.socket(a3m.REP, "idle-rep")
    pull = a.socket(a3m.PULL, "pull")
    waits: list[tuple[a3m.Socket, Callable[[], object]]] = [
        (req, lambda: req.recv(timeout=OP_S)),
        (idle_rep, lambda: idle_rep.recv(timeout=OP_S)),
        (pull, lambda: pull.recv(timeout=OP_S)),
        (sv, lambda: sv.recv(timeout=OP_S)),
        (push, lambda: push.send(b"x", timeout=OP_S)),
    ]
    for sock, op in waits:
        outcome: list[BaseException] = []
        started = threading.Event()

        def wait(op: Callable[[], object] = op, outcome: list[BaseException] = outcome,
                 started: threading.Event = started) -> None:
            started.set()
            try:
                op()
            except BaseException as exc:  # the outcome is checked below
                outcome.append(exc)

        t = threading.Thread(target=wait, daemon=True)
        t.start()
        assert started.wait(5)
        time.sleep(0.1)  # let it block (if it has not yet, it finds the socket closed)
        assert sock.close(timeout=5)
        t.join(OP_S + 5)
        assert not t.is_alive()
        assert len(outcome) == 1 and isinstance(outcome[0], a3m.Closed), (sock, outcome)


def test_req_sends_again_after_its_rep_went_away_and_a_poller_spans_nodes(
        cluster: Cluster) -> None:
    """One thread polls the REPs of two nodes with one Poller and serves whichever has a
    request; when the REP holding a request closes, the REQ's recv raises LinkError and its
    next request goes to the REP left."""
    client, s1, s2 = cluster(3)
    reps = [s.socket(a3m.REP, "rep") for s in (s1, s2)]
    req = client.socket(a3m.REQ, "req")
    for r in reps:
        req.link(r.id)
    for r in reps:
        assert req.wait_linked(r.id, timeout=10)
    poller = a3m.Poller()
    for r in reps:
        poller.register(r, a3m.POLLIN)
    req.send(b"first", timeout=OP_S)
    ready = poller.poll(timeout=OP_S)
    assert len(ready) == 1 and ready[0][1] == a3m.POLLIN
    holder = ready[0][0]
    assert holder.recv(timeout=0) == b"first"
    assert holder.close(timeout=5)
    with pytest.raises(a3m.LinkError, match="went away"):
        req.recv(timeout=OP_S)
    poller.unregister(holder)
    crew = Crew()

    def serve(n: int) -> None:
        for _ in range(n):
            (sock, ev), = poller.poll(timeout=OP_S)
            sock.send(b"re:" + sock.recv(timeout=0), timeout=OP_S)

    crew.start(serve, 5)
    for i in range(5):
        req.send(b"again %d" % i, timeout=OP_S)
        assert req.recv(timeout=OP_S) == b"re:again %d" % i
    crew.join()
