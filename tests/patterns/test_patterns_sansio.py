"""Every socket pattern, sans-I/O (node cores joined by a reordering pipe): semantics, misuse
errors, and the compatibility matrix enforced at link time."""

from __future__ import annotations

import itertools

import pytest

from a3m.core import link as L
from a3m.core.socket_core import SocketCore
from a3m.errors import LinkError, MessageTooLarge, SocketNotLinked, Timeout, UsageError
from a3m.patterns import BUILTIN
from core.pipe import Pipe

COMPATIBLE = {frozenset(p) for p in [("PAIR",), ("PUSH", "PULL"), ("REQ", "REP"), ("PUB", "SUB"),
                                     ("PUB", "XSUB"), ("XPUB", "SUB"), ("XPUB", "XSUB"),
                                     ("DEALER", "ROUTER"), ("DEALER",), ("ROUTER",),
                                     ("SURVEYOR", "RESPONDENT"), ("BUS",), ("RADIO", "DISH")]}


def recv_all(sock: SocketCore) -> list[bytes]:
    out = []
    while (r := sock.try_recv()) is not None:
        out.append(r.payload)
    return out


@pytest.mark.parametrize("a,b", list(itertools.product(sorted(BUILTIN), repeat=2)))
def test_compatibility_matrix(a: str, b: str) -> None:
    p = Pipe("x", "y")
    sa = p.nodes["x"].create(a, "s")
    sb = p.nodes["y"].create(b, "s")
    sa.link(("y", "s"), p.now)
    p.run()
    if frozenset((a, b)) in COMPATIBLE:
        assert sa.is_linked(("y", "s")) and sb.is_linked(("x", "s"))
    else:
        assert not sa.links and sa.fatal_refusal(("y", "s")) == L.INCOMPATIBLE
        assert not sb.links


def linked(p: Pipe, kind_a: str, kind_b: str, **opts: object) -> tuple[SocketCore, SocketCore]:
    a = p.nodes["a"].create(kind_a, "a", **opts)
    b = p.nodes["b"].create(kind_b, "b", **opts)
    a.link(("b", "b"), p.now)
    p.run()
    assert a.is_linked(("b", "b"))
    return a, b


def test_req_rep_alternation_and_misuse() -> None:
    p = Pipe("a", "b", reorder=True)
    req, rep = linked(p, "REQ", "REP")
    with pytest.raises(UsageError, match="no request outstanding"):
        req.try_recv()
    with pytest.raises(UsageError, match="no request to reply"):
        rep.try_send(b"unasked")
    for i in range(20):
        assert req.try_send(b"q%d" % i)
        with pytest.raises(UsageError, match="outstanding"):
            req.try_send(b"again")
        p.run()
        got = rep.try_recv()
        assert got is not None and got.payload == b"q%d" % i
        with pytest.raises(UsageError, match="reply to the last request"):
            rep.try_recv()
        assert rep.try_send(b"a%d" % i)
        p.run()
        reply = req.try_recv()
        assert reply is not None and reply.payload == b"a%d" % i


def test_rep_answers_several_requesters_in_order() -> None:
    p = Pipe("a", "b", "c")
    rep = p.nodes["b"].create("REP", "rep")
    reqs = [p.nodes[n].create("REQ", "req") for n in ("a", "c")]
    for r in reqs:
        r.link(("b", "rep"), p.now)
    p.run()
    for i, r in enumerate(reqs):
        r.try_send(b"from %d" % i)
    p.run()
    seen = []
    while (got := rep.try_recv()) is not None:
        seen.append(got.source)
        rep.try_send(b"re " + got.payload)
    p.run()
    assert sorted(seen) == [("a", "req"), ("c", "req")]
    assert [r.try_recv().payload for r in reqs] == [b"re from 0", b"re from 1"]  # type: ignore[union-attr]


def test_req_whose_rep_goes_away_gets_an_error_not_a_hang() -> None:
    p = Pipe("a", "b")
    req, rep = linked(p, "REQ", "REP")
    req.try_send(b"q")
    p.run()
    rep.close(p.now)  # the REP socket closes with the request unanswered
    p.run()
    with pytest.raises(LinkError, match="went away"):
        req.try_recv()


def rep_owing_a_vanished_req() -> tuple[Pipe, SocketCore, SocketCore]:
    """A REP that took a request from a REQ that then closed; another REQ is linked too.
    Returns (pipe, rep, the other REQ)."""
    p = Pipe("a", "b", "c")
    req = p.nodes["a"].create("REQ", "req")
    other = p.nodes["c"].create("REQ", "req")
    rep = p.nodes["b"].create("REP", "rep")
    req.link(("b", "rep"), p.now)
    other.link(("b", "rep"), p.now)
    p.run()
    assert req.try_send(b"q")
    p.run()
    got = rep.try_recv()
    assert got is not None and got.payload == b"q"
    req.close(p.now)
    p.run()
    return p, rep, other


def test_rep_reply_to_a_vanished_req_is_a_link_error_then_rep_serves_on() -> None:
    p, rep, other = rep_owing_a_vanished_req()
    assert not rep.is_linked(("a", "req"))
    assert rep.writable  # the send does not block: it reports the error at once
    with pytest.raises(LinkError, match="went away"):
        rep.try_send(b"answer")
    assert other.try_send(b"q2")  # the REP is free for the next request
    p.run()
    got = rep.try_recv()
    assert got is not None and got.payload == b"q2"
    assert rep.try_send(b"a2")
    p.run()
    assert other.try_recv().payload == b"a2"  # type: ignore[union-attr]


def test_rep_may_skip_the_reply_to_a_vanished_req() -> None:
    p, rep, other = rep_owing_a_vanished_req()
    other.try_send(b"q2")
    p.run()
    assert rep.readable  # the owed reply has nobody to go to: the next request is readable
    got = rep.try_recv()
    assert got is not None and got.payload == b"q2"


def test_a_message_too_large_changes_nothing() -> None:
    """Refused before the pattern or the link moves: no seq is spent, no request is left
    outstanding, the next message goes through (found: it jammed the node's outbox)."""
    p = Pipe("a", "b")
    for core in p.nodes.values():
        core.max_message_size = 4096
    req, rep = linked(p, "REQ", "REP")
    with pytest.raises(MessageTooLarge):
        req.try_send(b"x" * 4096)
    assert req.try_send(b"small")
    p.run()
    got = rep.try_recv()
    assert got is not None and got.payload == b"small"
    with pytest.raises(MessageTooLarge):
        rep.try_send(b"y" * 4096)
    assert rep.try_send(b"ok")
    p.run()
    assert req.try_recv().payload == b"ok"  # type: ignore[union-attr]
    # a PUB whose topic makes the message too large sends it to no subscriber at all
    pub = p.nodes["a"].create("PUB", "pub")
    subs = [p.nodes["b"].create("SUB", f"sub{i}") for i in range(2)]
    for s in subs:
        s.subscribe(b"")
        s.link(("a", "pub"), p.now)
    p.run()
    room = 4096 - 300
    with pytest.raises(MessageTooLarge):
        pub.try_send(b"z" * (room - 100), topic=b"t" * 200)
    assert pub.try_send(b"fine", topic=b"t")
    p.run()
    for s in subs:
        assert recv_all(s) == [b"fine"]


def test_pub_sub_prefixes_overlap_once_and_late_subscribe() -> None:
    p = Pipe("a", "b", "c")
    pub = p.nodes["a"].create("PUB", "pub")
    s1 = p.nodes["b"].create("SUB", "sub")
    s2 = p.nodes["c"].create("SUB", "sub")
    s1.subscribe(b"weather.")  # before linking: travels in the link metadata
    s1.subscribe(b"weather.eu")  # overlapping
    s1.link(("a", "pub"), p.now)
    s2.link(("a", "pub"), p.now)
    p.run()
    assert pub.try_send(b"rain", topic=b"weather.eu.pt")  # no slow joiner for s1
    assert pub.try_send(b"goal", topic=b"sport")
    p.run()
    got = s1.try_recv()
    assert got is not None and (got.payload, got.topic) == (b"rain", b"weather.eu.pt")
    assert s1.try_recv() is None and s2.try_recv() is None  # one copy; s2 has no subscription
    s2.subscribe(b"")  # everything, after linking
    p.run()
    pub.try_send(b"x", topic=b"any")
    p.run()
    assert recv_all(s2) == [b"x"] and recv_all(s1) == []
    s1.unsubscribe(b"weather.")
    s1.unsubscribe(b"weather.eu")
    p.run()
    pub.try_send(b"sun", topic=b"weather.eu")
    p.run()
    assert recv_all(s1) == [] and recv_all(s2) == [b"sun"]


def test_sub_messages_left_by_a_closed_publisher_keep_their_topic() -> None:
    """Messages queued on a link that closes (the PUB went away after publishing) are still
    delivered, unwrapped as usual (found: they came out with the topic framing, topic None),
    and the PUB's target cache follows subscriptions and links."""
    p = Pipe("a", "b")
    pub = p.nodes["a"].create("PUB", "pub")
    sub = p.nodes["b"].create("SUB", "sub")
    sub.subscribe(b"t")
    sub.link(("a", "pub"), p.now)
    p.run()
    assert pub.try_send(b"one", topic=b"t1")
    assert pub.try_send(b"skip", topic=b"u")  # not subscribed: never sent
    sub.subscribe(b"u")
    p.run()
    assert pub.try_send(b"two", topic=b"u")  # the cached targets of b"u" were refreshed
    pub.close(p.now)
    p.run()
    assert not sub.links and len(sub.orphans) == 2
    got = [sub.try_recv() for _ in range(2)]
    assert [(g.payload, g.topic) for g in got if g] == [(b"one", b"t1"), (b"two", b"u")]
    assert sub.try_recv() is None


def test_xpub_tells_the_union_of_subscriptions_and_xsub_sends_them_upstream() -> None:
    p = Pipe("pub", "fwd", "s1", "s2")
    pub = p.nodes["pub"].create("PUB", "pub")
    xsub = p.nodes["fwd"].create("XSUB", "in")
    xpub = p.nodes["fwd"].create("XPUB", "out")
    s1 = p.nodes["s1"].create("SUB", "sub")
    s2 = p.nodes["s2"].create("SUB", "sub")
    xsub.link(("pub", "pub"), p.now)
    s1.subscribe(b"a")  # travels in the link metadata
    s1.link(("fwd", "out"), p.now)
    s2.link(("fwd", "out"), p.now)
    p.run()
    s2.subscribe(b"a")  # after linking: SUBSCRIBE control messages
    s2.subscribe(b"b")
    p.run()
    assert recv_all(xpub) == [b"\x01a", b"\x01b"]  # each topic once, when first wanted
    with pytest.raises(UsageError, match="XSUB sends subscriptions"):
        xsub.try_send(b"no marker")
    assert xsub.try_send(b"\x01a") and xsub.try_send(b"\x01b")
    p.run()
    assert pub.try_send(b"1", topic=b"a1") and pub.try_send(b"2", topic=b"b")
    assert pub.try_send(b"3", topic=b"c")  # nobody downstream wants c: not even sent
    p.run()
    got = []
    while (r := xsub.try_recv()) is not None:  # the forwarder's loop, by hand
        got.append(r.payload)
        assert xpub.try_send(r.payload, topic=r.topic)
    assert got == [b"1", b"2"]
    p.run()
    assert recv_all(s1) == [b"1"] and recv_all(s2) == [b"1", b"2"]
    s2.unsubscribe(b"a")  # s1 still wants a: no change upstream
    p.run()
    assert recv_all(xpub) == []
    s2.close(p.now)  # its b goes with it
    p.run()
    assert recv_all(xpub) == [b"\x00b"]
    s1.unsubscribe(b"a")
    p.run()
    assert recv_all(xpub) == [b"\x00a"]
    assert xsub.try_send(b"\x00a") and xsub.try_send(b"\x00b")
    assert xsub.subscriptions == set()


def test_pub_is_synchronised_to_the_slowest_subscriber() -> None:
    p = Pipe("a", "b", "c")
    pub = p.nodes["a"].create("PUB", "pub")
    fast = p.nodes["b"].create("SUB", "sub", capacity=100)
    slow = p.nodes["c"].create("SUB", "sub", capacity=4)
    for s in (fast, slow):
        s.subscribe(b"")
        s.link(("a", "pub"), p.now)
    p.run()
    sent = 0
    while pub.try_send(b"%d" % sent):
        sent += 1
    assert sent == 4  # the slow subscriber's credits set the pace; nothing is dropped
    p.run()
    assert len(recv_all(fast)) == 4 and len(recv_all(slow)) == 4
    p.run()
    assert pub.writable


def test_dealer_router_routing_and_unknown_route() -> None:
    p = Pipe("a", "b", "c")
    router = p.nodes["a"].create("ROUTER", "r")
    d1 = p.nodes["b"].create("DEALER", "d")
    d2 = p.nodes["c"].create("DEALER", "d")
    for d in (d1, d2):
        d.link(("a", "r"), p.now)
    p.run()
    d1.try_send(b"hello from b")
    d2.try_send(b"hello from c")
    p.run()
    msgs = [router.try_recv(), router.try_recv()]
    for m in msgs:
        assert m is not None
        assert router.try_send(b"back to " + m.source[0].encode(), to=m.source)
    p.run()
    assert recv_all(d1) == [b"back to b"] and recv_all(d2) == [b"back to c"]
    with pytest.raises(SocketNotLinked, match="no route"):
        router.try_send(b"lost?", to=("z", "nowhere"))
    with pytest.raises(UsageError):
        router.try_send(b"no id")


def test_survey_answers_until_the_deadline() -> None:
    p = Pipe("a", "b", "c", "d")
    sv = p.nodes["a"].create("SURVEYOR", "s", survey_time_s=0.5)
    resp = [p.nodes[n].create("RESPONDENT", "r") for n in ("b", "c", "d")]
    for r in resp:
        r.link(("a", "s"), p.now)
    p.run()
    with pytest.raises(UsageError, match="no survey"):
        sv.try_recv()
    assert sv.try_send(b"who is there?")
    p.run()
    for r in resp[:2]:  # the third never answers
        got = r.try_recv()
        assert got is not None and got.payload == b"who is there?"
        r.try_send(b"me: " + got.source[0].encode())
    p.run()
    assert sorted(recv_all_until_none(sv)) == [b"me: a", b"me: a"]
    p.advance(0.6)
    with pytest.raises(Timeout, match="deadline"):
        sv.try_recv()


def test_survey_deadline_fires_once_and_late_answers_are_dropped() -> None:
    p = Pipe("a", "b")
    sv = p.nodes["a"].create("SURVEYOR", "s", survey_time_s=0.5)
    r = p.nodes["b"].create("RESPONDENT", "r")
    r.link(("a", "s"), p.now)
    p.run()
    assert sv.try_send(b"q")
    p.run()
    got = r.try_recv()
    assert got is not None
    assert sv.next_timer() == pytest.approx(p.now + 0.5)
    p.advance(0.6)  # the deadline passes with nobody reading
    t = sv.next_timer()  # fired once: the node does not wake again for it (keepalive may)
    assert t is None or t > p.now
    r.try_send(b"late answer")
    p.run()
    assert not sv.readable
    with pytest.raises(Timeout, match="deadline"):
        sv.try_recv()
    with pytest.raises(UsageError, match="no survey"):
        sv.try_recv()


def test_survey_time_option_is_checked() -> None:
    p = Pipe("a")
    sv = p.nodes["a"].create("SURVEYOR", "s")
    for bad in (-1, 0, "1", True):
        with pytest.raises(UsageError, match="survey_time_s must be"):
            sv.set_option("survey_time_s", bad)
    sv.set_option("survey_time_s", 2)
    assert sv.get_option("survey_time_s") == 2.0
    with pytest.raises(UsageError, match="survey_time_s must be"):
        p.nodes["a"].create("SURVEYOR", "s2", survey_time_s=0)


def recv_all_until_none(sock: SocketCore) -> list[bytes]:
    out = []
    while True:
        got = sock.try_recv()
        if got is None:
            return out
        out.append(got.payload)


def test_bus_every_peer_hears_every_message_once() -> None:
    names = ["a", "b", "c", "d"]
    p = Pipe(*names)
    bus = {n: p.nodes[n].create("BUS", "bus") for n in names}
    for x, y in itertools.combinations(names, 2):
        bus[x].link((y, "bus"), p.now)
    p.run()
    for n in names:
        assert bus[n].try_send(b"from " + n.encode())
    p.run()
    for n in names:
        got = sorted(recv_all(bus[n]))
        assert got == sorted(b"from " + o.encode() for o in names if o != n)
