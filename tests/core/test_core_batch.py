"""BATCH (several DATA messages in one, docs/core-messages.md): what a socket sends between two
hand-offs to the transport leaves together; numbers, credits, order and exactly-once are those
of the messages one by one, whatever order the BATCHes arrive in."""

from __future__ import annotations

from typing import Any

import pytest

from a3m.core import message as m
from a3m.core.link import State
from a3m.core.socket_core import SocketCore
from a3m.errors import UsageError
from a3m.patterns.pipeline import Pull

from .pipe import Pipe

A, B = ("a", "src"), ("b", "sink")


def linked(p: Pipe, capacity: int = 1000, pull_kind: str = "PULL") -> tuple[Any, Any]:
    push = p.nodes["a"].create("PUSH", "src")
    pull = p.nodes["b"].create(pull_kind, "sink", capacity=capacity)
    push.link(B, p.now)
    p.run()
    assert push.is_linked(B)
    return push, pull


def sent_types(p: Pipe) -> list[int]:
    return [x.type for s, _, x in p.log if s == "a" and x.type in (m.DATA, m.BATCH)]


def test_messages_sent_between_hand_offs_leave_as_one_batch() -> None:
    p = Pipe("a", "b")
    push, pull = linked(p)
    for i in range(50):
        assert push.try_send(b"%d" % i)
    assert p.nodes["a"].has_output()
    p.run()
    assert sent_types(p) == [m.BATCH]
    assert pull.try_recv_many(100) == [b"%d" % i for i in range(50)]
    assert push.links[B].send.sent == 50 and pull.links[A].recv.delivered == 50
    assert pull.stats["received"] == pull.stats["delivered"] == 50


def test_send_many_splits_batches_by_size_and_keeps_order_when_reordered() -> None:
    p = Pipe("a", "b", reorder=True, seed=5)
    push, pull = linked(p)
    p.nodes["a"].batch_bytes = 100  # a handful of messages per BATCH
    payloads = [bytes([i]) * (i % 30) for i in range(200)]
    assert push.try_send_many(payloads[:150]) == 150
    for one in payloads[150:]:
        push.try_send(one)
    p.run()
    kinds = sent_types(p)
    assert kinds.count(m.BATCH) > 10
    got: list[bytes] = []
    while len(got) < 200:
        more = pull.try_recv_many(7)
        assert more
        got += more
        p.run()
    assert got == payloads and pull.violations == 0


def test_a_lone_message_is_plain_data() -> None:
    p = Pipe("a", "b")
    push, pull = linked(p)
    push.try_send(b"one")
    p.run()
    assert sent_types(p) == [m.DATA]


def test_a_peer_that_does_not_take_batches_gets_data() -> None:
    class OldPull(Pull):
        def link_metadata(self) -> dict[str, Any]:
            return {"batch": False}  # as a peer from before BATCH would (no "batch" key)

    p = Pipe("a", "b")
    p.nodes["b"].register_type("OLDPULL", OldPull)
    push = p.nodes["a"].create("PUSH", "src")
    pull = p.nodes["b"].create("OLDPULL", "sink")
    push.link(B, p.now)
    p.run()
    for i in range(10):
        push.try_send(b"%d" % i)
    assert push.try_send_many([b"x", b"y"]) == 2
    p.run()
    assert set(sent_types(p)) == {m.DATA}
    assert len(pull.try_recv_many(100)) == 12


def test_send_many_stops_at_the_credits() -> None:
    p = Pipe("a", "b")
    push, pull = linked(p, capacity=8)
    assert push.try_send_many([b"m"] * 20) == 8
    assert not push.writable
    p.run()
    assert len(pull.try_recv_many(3)) == 3
    p.run()  # the FLOW of a batch of credits (a quarter of the capacity)
    assert push.try_send_many([b"m"] * 20) == 3


def test_a_batch_beyond_the_credits_keeps_what_they_covered() -> None:
    p = Pipe("a", "b")
    push, pull = linked(p, capacity=4)
    push.send_many_on(push.links[B], [b"%d" % i for i in range(6)])  # ignores the credits
    p.run()
    assert pull.violations == 1 and A not in pull.links
    assert [r.payload for r in pull.orphans] == [b"0", b"1", b"2", b"3"]


def batch_bytes(seq: int, payloads: list[bytes], src: SocketCore, dst: SocketCore) -> bytes:
    link = src.links[B]
    head = m.data_head(src.tag_bytes, link.peer_tag_bytes, link.my_inc, link.peer_inc)
    return m.encode_batch_with_head(head, seq, payloads)


@pytest.mark.parametrize("order", ["early-overlap-first", "early-overlap-second"])
def test_overlapping_batches_are_a_protocol_violation(order: str) -> None:
    """A forged BATCH whose numbers another (early) message also claims never delivers a
    number twice: the link is closed as for a repeated sequence number."""
    p = Pipe("a", "b")
    push, pull = linked(p)
    wide = batch_bytes(2, [b"w2", b"w3", b"w4"], push, pull)
    inner = batch_bytes(3, [b"i3", b"i4"], push, pull)
    first = batch_bytes(1, [b"f1"], push, pull)
    for data in ([wide, inner] if order == "early-overlap-first" else [inner, wide]) + [first]:
        p.nodes["b"].receive("a", data, p.now)
    got = [r.payload for r in pull.orphans] + [x for lk in pull.links.values() for x in lk.inq]
    assert pull.violations == 1
    assert len(got) == len(set(got)) and len({g[1:] for g in got}) == len(got)


def test_batches_count_every_message_for_the_observer_and_the_delivery_goal() -> None:
    seen: list[tuple[str, int]] = []

    class Obs:
        def on_sent(self, tag: str, peer: Any, inc: int, seq: int, size: int) -> None:
            seen.append(("sent", seq))

        def on_delivered(self, tag: str, peer: Any, inc: int, seq: int, size: int) -> None:
            seen.append(("delivered", seq))

    p = Pipe("a", "b")
    push, pull = linked(p)
    p.nodes["a"].observer = p.nodes["b"].observer = Obs()
    push.try_send_many([b"a", b"b", b"c"])
    push.unlink(B, p.now)  # UNLINK's goal counts the three
    p.run()
    assert [s for k, s in seen if k == "sent"] == [1, 2, 3]
    assert [s for k, s in seen if k == "delivered"] == [1, 2, 3]
    assert pull.link_state(A) in (State.UNLINKING, None)
    assert pull.try_recv_many(10) == [b"a", b"b", b"c"]


def two_senders(p: Pipe, each: int) -> tuple[Any, list[Any]]:
    """A PULL on node b fed by PUSHes on nodes a and c, ``each`` messages from each (named by
    their node and number), all arrived."""
    pull = p.nodes["b"].create("PULL", "sink")
    pushes = [p.nodes[n].create("PUSH", "src") for n in ("a", "c")]
    for push in pushes:
        push.link(B, p.now)
    p.run()
    for n, push in zip("ac", pushes, strict=True):
        push.try_send_many([n.encode() + b"%d" % i for i in range(each)])
    p.run()
    return pull, pushes


def test_recv_many_is_fair_over_links() -> None:
    pull, _ = two_senders(Pipe("a", "c", "b"), 10)
    got = pull.try_recv_many(4) + pull.try_recv_many(4)
    assert {g[:1] for g in got} == {b"a", b"c"}
    rest = pull.try_recv_many(100)
    assert sorted(got + rest) == sorted(n.encode() + b"%d" % i for n in "ac" for i in range(10))
    for n in "ac":
        mine = [g for g in got + rest if g[:1] == n.encode()]
        assert mine == [n.encode() + b"%d" % i for i in range(10)]  # in order per link


def test_recv_runs_give_each_links_messages_with_their_source() -> None:
    pull, pushes = two_senders(Pipe("a", "c", "b"), 5)
    runs = pull.try_recv_runs(7)
    assert sum(len(r[2]) for r in runs) == 7
    for source, topic, payloads in runs:
        assert topic is None and {x[:1] for x in payloads} == {source[0].encode()}
    rest = pull.try_recv_runs(100)
    got = [x for r in runs + rest for x in r[2]]
    assert sorted(got) == sorted(n.encode() + b"%d" % i for n in "ac" for i in range(5))
    assert pull.try_recv_runs(10) == [] and pull.try_recv_payload() is None
    with pytest.raises(UsageError):
        pushes[0].try_recv_payload()  # a PUSH cannot receive


def test_batches_fit_what_the_transport_carries_unfragmented() -> None:
    """On a path with a small MTU a BATCH fits one datagram: a lost datagram then holds back
    one BATCH's messages, not 60 KB of them."""
    p = Pipe("a", "b")
    push, pull = linked(p)
    p.nodes["a"].unfragmented = lambda node_id: 300 if node_id == "b" else None
    payloads = [b"%05d" % i + b"." * 40 for i in range(100)]
    assert push.try_send_many(payloads) == 100
    out = p.nodes["a"].take_output()
    assert len(out) > 10 and all(len(data) <= 300 for _, data in out)
    for dst, data in out:
        p.nodes[dst].receive("a", data, p.now)
    assert pull.try_recv_many(200) == payloads


@pytest.mark.parametrize("seed", range(6))
def test_each_batch_is_the_longest_run_that_fits(seed: int) -> None:
    """Runs are cut where the next message would pass ``batch_bytes`` (payload bytes plus 4
    a message), never sooner: mixed sizes, one larger than the limit alone."""
    from random import Random

    rng = Random(seed)
    p = Pipe("a", "b")
    push, pull = linked(p, capacity=5000)
    limit = 700
    p.nodes["a"].batch_bytes = limit
    payloads = [bytes(rng.choice((0, 1, 5, 60, 200, 900))) for _ in range(2000)]
    assert push.try_send_many(payloads) == 2000
    out = p.nodes["a"].take_output()
    counts: list[int] = []
    for _, data in out:
        msg = m.decode(data)
        counts.append(len(m.split_batch(msg.payload)) if msg.type == m.BATCH else 1)
    assert sum(counts) == 2000
    start = 0
    for count in counts:
        run = payloads[start:start + count]
        cost = sum(map(len, run)) + 4 * len(run)
        assert count == 1 or cost <= limit
        if start + count < len(payloads):  # the next one would not have fitted
            assert cost + len(payloads[start + count]) + 4 > limit
        start += count
    for dst, data in out:
        p.nodes[dst].receive("a", data, p.now)
    assert pull.try_recv_many(5000) == payloads


def test_an_exchange_hands_its_data_to_the_output_at_once_not_through_the_cork() -> None:
    """A request or a reply (REQ, REP: one at a time per link) never makes a BATCH: it goes to
    the node's output when sent, while a stream's DATA waits on its link for the hand-off."""
    p = Pipe("a", "b")
    req = p.nodes["a"].create("REQ", "req")
    rep = p.nodes["b"].create("REP", "rep")
    req.link(("b", "rep"), p.now)
    p.run()
    link = req.links[("b", "rep")]
    assert link.batches  # the peer takes BATCHes: a stream's send would cork here
    assert req.try_send(b"question")
    node = p.nodes["a"]
    assert not link.pending and not node._corked and len(node._out) == 1
    p.run()
    got = rep.try_recv()
    assert got is not None and got.payload == b"question"
    assert rep.try_send(b"answer")
    assert not rep.links[("a", "req")].pending and len(p.nodes["b"]._out) == 1
    p.run()
    answer = req.try_recv()
    assert answer is not None and answer.payload == b"answer"
    assert sent_types(p) == [m.DATA]  # (the replies' too: sent_types reads node a's)
    push, _ = linked(p)
    assert push.try_send(b"stream")
    assert push.links[B].pending == [b"stream"] and p.nodes["a"]._corked
