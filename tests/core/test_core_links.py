"""Every flow of the link notes (seed 003), sans-I/O: two node cores joined by a pipe that can
hold messages back to force each order of every race."""

from __future__ import annotations

import pytest

from a3m.core import link as L
from a3m.core import message as m
from a3m.core.link import Ev, IllegalTransition, Link, State
from a3m.core.socket_core import SocketCore

from .pipe import Pipe

A, B = ("a", "src"), ("b", "sink")


def drain(sock: SocketCore) -> list[bytes]:
    out = []
    while (r := sock.try_recv()) is not None:
        out.append(r.payload)
    return out


def pushpull(p: Pipe, capacity: int = 256) -> tuple[SocketCore, SocketCore]:
    return (p.nodes["a"].create("PUSH", "src"),
            p.nodes["b"].create("PULL", "sink", capacity=capacity))


def test_three_way_handshake_and_metadata() -> None:
    p = Pipe("a", "b")
    push, pull = pushpull(p, capacity=10)
    push.link(B, p.now)
    p.run()
    assert p.types("a") == ["LINK", "LINKACK"] and p.types("b") == ["LINKACK"]
    assert push.is_linked(B) and pull.is_linked(A)
    assert push.links[B].send.available == 10  # the initial credits came in the handshake
    first_ack = [x for s, _, x in p.log if s == "b"][0]
    assert first_ack.meta is not None and first_ack.meta["type"] == "PULL"
    final_ack = [x for s, _, x in p.log if s == "a" and x.type == m.LINKACK][0]
    assert final_ack.meta is None  # metadata is sent once per side


@pytest.mark.parametrize("first", ["a", "b"])
def test_simultaneous_link_both_orders(first: str) -> None:
    p = Pipe("a", "b")
    push, pull = pushpull(p)
    push.link(B, p.now)
    pull.link(A, p.now)
    # deliver one side's LINK first, then the other's
    out = {n: c.take_output() for n, c in p.nodes.items()}
    second = "b" if first == "a" else "a"
    for src in (first, second):
        for dst, data in out[src]:
            p.nodes[dst].receive(src, data, p.now)
    p.run()
    assert push.is_linked(B) and pull.is_linked(A)
    assert len(push.links) == 1 and len(pull.links) == 1
    push.try_send(b"x")
    p.run()
    assert drain(pull) == [b"x"]


def test_linkack_before_link() -> None:
    p = Pipe("a", "b")
    push, pull = pushpull(p)
    push.link(B, p.now)
    pull.link(A, p.now)
    # hold b's LINK: a sees b's LINKACK (no metadata) before b's LINK (with metadata)
    p.hold = lambda src, dst, msg: src == "b" and msg.type == m.LINK
    p.run()
    assert push.link_state(B) is State.LINKING  # cannot establish without b's metadata
    p.hold = None
    p.release()
    assert push.is_linked(B) and pull.is_linked(A)


def test_data_before_final_linkack_is_implicit_acceptance() -> None:
    p = Pipe("a", "b")
    push, pull = pushpull(p)
    push.link(B, p.now)
    p.hold = lambda src, dst, msg: src == "a" and msg.type == m.LINKACK
    p.run()
    assert push.is_linked(B) and pull.link_state(A) is State.LINKING
    assert push.try_send(b"early")
    p.run()
    assert pull.is_linked(A)  # the DATA itself proved a's positive decision
    assert drain(pull) == [b"early"]
    p.hold = None
    p.release()  # the late LINKACK changes nothing
    assert pull.is_linked(A) and len(pull.links) == 1


def test_unlink_while_linking_cancels_cleanly() -> None:
    p = Pipe("a", "b")
    push, pull = pushpull(p)
    push.link(B, p.now)
    push.unlink(B, p.now)
    assert push.link_state(B) is State.LINKING  # waits for the handshake to end
    p.run()
    assert not push.links and not pull.links
    final = [x for s, _, x in p.log if s == "a" and x.type == m.LINKACK]
    assert final and final[0].code == L.CANCELLED  # the handshake ends in a refusal


def test_unlink_with_messages_in_flight_delivers_them_all() -> None:
    p = Pipe("a", "b", reorder=True, seed=3)
    push, pull = pushpull(p)
    push.link(B, p.now)
    p.run()
    for i in range(50):
        assert push.try_send(b"%d" % i)
    p.hold = lambda src, dst, msg: msg.type in (m.DATA, m.BATCH)  # all fifty still in flight
    p.run()
    push.unlink(B, p.now)
    p.run()
    assert pull.link_state(A) is State.UNLINKING  # waiting for its delivery goal
    p.hold = None
    p.release(reverse=True)
    assert not push.links and not pull.links
    assert drain(pull) == [b"%d" % i for i in range(50)]  # all, in order, after the close


def test_unlink_from_the_receiving_side_too() -> None:
    p = Pipe("a", "b")
    push, pull = pushpull(p)
    push.link(B, p.now)
    p.run()
    for i in range(5):
        push.try_send(b"%d" % i)
    pull.unlink(A, p.now)
    p.run()
    assert not push.links and not pull.links
    assert drain(pull) == [b"%d" % i for i in range(5)]


def test_fatal_refusal_incompatible_is_not_retried() -> None:
    p = Pipe("a", "b")
    push = p.nodes["a"].create("PUSH", "src")
    p.nodes["b"].create("PUSH", "sink")
    push.link(B, p.now)
    p.run()
    assert not push.links and push.fatal_refusal(B) == L.INCOMPATIBLE
    assert not push.retry_at


def test_incoming_not_allowed_is_fatal() -> None:
    p = Pipe("a", "b")
    push = p.nodes["a"].create("PUSH", "src")
    p.nodes["b"].create("PULL", "sink", incoming=False)
    push.link(B, p.now)
    p.run()
    assert push.fatal_refusal(B) == L.INCOMING_NOT_ALLOWED


def test_most_severe_reason_wins() -> None:
    assert L.most_severe([L.LINK_LIMIT, L.INCOMPATIBLE]) == L.INCOMPATIBLE
    assert L.most_severe([L.INCOMPATIBLE, L.LINK_LIMIT, L.CLOSED_SOCKET]) == L.INCOMPATIBLE
    assert L.most_severe([L.LINK_LIMIT]) == L.LINK_LIMIT
    assert L.most_severe([]) == L.OK


def test_non_fatal_refusal_retried_with_randomised_growing_delay() -> None:
    p = Pipe("a", "b", "c")
    pair_b = p.nodes["b"].create("PAIR", "p")
    pair_a = p.nodes["a"].create("PAIR", "p")
    pair_c = p.nodes["c"].create("PAIR", "p")
    pair_a.link(("b", "p"), p.now)
    p.run()
    assert pair_b.is_linked(("a", "p"))
    delays = []
    pair_c.link(("b", "p"), p.now)
    for _ in range(5):
        p.run()
        assert pair_c.refusals[("b", "p")] == L.LINK_LIMIT
        t = pair_c.retry_at[("b", "p")]
        delays.append(t - p.now)
        p.advance(t - p.now + 1e-6)
    assert delays[-1] > delays[0] * 2  # grows
    pair_a.unlink(("b", "p"), p.now)
    p.run()
    p.advance(pair_c.retry_at[("b", "p")] - p.now + 1e-6)
    assert pair_c.is_linked(("b", "p")) and pair_b.is_linked(("c", "p"))


def test_socket_not_found_then_created_later() -> None:
    p = Pipe("a", "b")
    push = p.nodes["a"].create("PUSH", "src")
    push.link(B, p.now)
    p.run()
    assert "ERROR" in p.types("b") and push.refusals[B] == L.NOT_FOUND
    p.nodes["b"].create("PULL", "sink")
    p.advance(push.retry_at[B] - p.now + 1e-6)
    assert push.is_linked(B)


def test_socket_not_linked_and_no_error_for_an_error() -> None:
    p = Pipe("a", "b")
    pull = p.nodes["b"].create("PULL", "sink")
    data = m.encode_data(m.encoded_tag("src"), m.encoded_tag("sink"), 5, 99, 1, b"stray")
    p.nodes["b"].receive("a", data, p.now)
    out = p.nodes["b"].take_output()
    assert len(out) == 1 and m.decode(out[0][1]).code == m.ERR_SOCKET_NOT_LINKED
    assert drain(pull) == []
    # An ERROR to a missing socket, or about an unknown link, is never answered.
    err = m.encode(m.Message(m.ERROR, "src", "nowhere", 0, 0, code=m.ERR_SOCKET_NOT_LINKED))
    p.nodes["b"].receive("a", err, p.now)
    err2 = m.encode(m.Message(m.ERROR, "src", "sink", 0, 0, code=m.ERR_SOCKET_NOT_FOUND))
    p.nodes["b"].receive("a", err2, p.now)
    assert p.nodes["b"].take_output() == []


def test_old_incarnation_never_touches_a_new_link() -> None:
    p = Pipe("a", "b")
    push, pull = pushpull(p)
    push.link(B, p.now)
    p.run()
    old_inc = push.links[B].my_inc
    push.try_send(b"old")
    p.hold = lambda src, dst, msg: msg.type in (m.DATA, m.BATCH)
    p.run()
    stale = p.held
    p.held = []
    p.hold = None
    # the DATA never arrived: unlink waits for it... so cut the link hard and relink
    push._abort(push.links[B])
    pull._abort(pull.links[A])
    push.link(B, p.now)
    p.run()
    assert push.links[B].my_inc != old_inc and pull.is_linked(A)
    for src, dst, data in stale:  # the old DATA arrives now
        p.nodes[dst].receive(src, data, p.now)
    p.run()
    assert drain(pull) == []  # dropped: its incarnation is not the link's
    assert pull.links[A].recv.received == 0


def test_overspending_peer_is_unlinked() -> None:
    p = Pipe("a", "b")
    push, pull = pushpull(p, capacity=4)
    push.link(B, p.now)
    p.run()
    link = push.links[B]
    for i in range(6):  # ignore the credits: a misbehaving peer
        push.send_on(link, b"%d" % i)
    p.run()
    assert pull.violations == 1 and A not in pull.links
    assert len(drain(pull)) == 4  # what it was allowed to send is kept
    assert B not in push.links  # told with an ERROR, its side closed too


def test_credits_returned_in_batches_on_delivery() -> None:
    p = Pipe("a", "b")
    push, pull = pushpull(p, capacity=8)
    push.link(B, p.now)
    p.run()
    sent = 0
    while push.try_send(b"x"):
        sent += 1
    assert sent == 8 and not push.writable
    p.run()
    assert not push.writable  # arrival alone returns nothing: credits follow delivery
    pull.try_recv()
    p.run()
    assert not push.writable  # batches of capacity/4 = 2
    pull.try_recv()
    p.run()
    assert push.links[B].send.available == 2
    assert p.types("b").count("FLOW") == 1


def test_no_credits_returned_once_the_peer_unlinked() -> None:
    """After the peer's UNLINK (its goal is fixed: it sends no more DATA) reading the rest
    returns no credits: a FLOW then would only keep this node's close waiting on a peer that
    may have gone (seen: `a3m chaos pushpull` ran 10 s longer in one run of three)."""
    p = Pipe("a", "b")
    push, pull = pushpull(p, capacity=8)
    push.link(B, p.now)
    p.run()
    for _ in range(7):
        assert push.try_send(b"x")
    p.run()
    p.hold = lambda src, dst, msg: msg.type == m.DATA and msg.seq == 8  # the last is late
    assert push.try_send(b"x")
    p.run()
    pull.try_recv()
    pull.try_recv()  # a batch: one FLOW while the link is established
    p.run()
    assert p.types("b").count("FLOW") == 1
    push.unlink(B, p.now)
    p.run()
    assert pull.link_state(A) is State.UNLINKING  # waits for DATA 8, its delivery goal
    assert len(drain(pull)) == 5  # two batches' worth, read while unlinking
    p.run()
    assert p.types("b").count("FLOW") == 1
    p.hold = None
    p.release()
    assert drain(pull) == [b"x"] and not push.links and not pull.links


def test_capacity_lowered_below_held_credits_uses_the_loan() -> None:
    p = Pipe("a", "b")
    push, pull = pushpull(p, capacity=10)
    push.link(B, p.now)
    p.run()
    for _ in range(6):
        push.try_send(b"x")  # six in flight, four credits still held
    p.hold = lambda src, dst, msg: msg.type in (m.DATA, m.BATCH)
    p.run()
    pull.set_option("capacity", 2)  # below what the peer holds and has spent
    assert pull.links[A].recv.loan == 8
    p.hold = None
    p.release()
    assert pull.violations == 0 and len(pull.links[A].inq) == 6  # the loan covered them
    assert push.links[B].send.available <= 0  # the new, lower edge reached the sender
    assert len(drain(pull)) == 6
    p.run()
    assert push.links[B].send.available == 2  # now capacity 2 rules
    pull.set_option("capacity", 20)
    p.run()
    assert push.links[B].send.available == 20


def test_decision_hook_custom_condition() -> None:
    class Guarded(SocketCore):
        kind = "PULL"
        peers = frozenset({"PUSH"})
        sends = False

        def check_link(self, peer: tuple[str, str], meta: m.Metadata) -> int:
            return L.OK if meta.get("secret") == b"s3cret" else L.REFUSED

    class Keyed(SocketCore):
        kind = "PUSH"
        peers = frozenset({"PULL"})
        receives = False

        def link_metadata(self) -> m.Metadata:
            return {"secret": b"s3cret"}

    p = Pipe("a", "b", "c")
    p.nodes["b"].register_type("GUARDED", Guarded)
    p.nodes["a"].register_type("KEYED", Keyed)
    guarded = p.nodes["b"].create("GUARDED", "sink")
    good = p.nodes["a"].create("KEYED", "src")
    bad = p.nodes["c"].create("PUSH", "src")
    good.link(B, p.now)
    bad.link(B, p.now)
    p.run()
    assert good.is_linked(B) and not bad.links
    assert bad.fatal_refusal(B) == L.REFUSED
    assert list(guarded.links) == [A]


def test_transition_table_rejects_illegal_moves() -> None:
    link = Link(B, 1, True, 4)
    with pytest.raises(IllegalTransition, match="linking"):
        link.advance(Ev.GOAL_REACHED)
    link.advance(Ev.ESTABLISH)
    with pytest.raises(IllegalTransition):
        link.advance(Ev.ESTABLISH)


def test_close_unlinks_everything_and_refuses_new_links() -> None:
    p = Pipe("a", "b")
    push, pull = pushpull(p)
    push.link(B, p.now)
    p.run()
    pull.close(p.now)
    p.run()
    assert pull.is_drained and not push.links
    push.link(B, p.now)
    p.run()
    assert push.fatal_refusal(B) == L.CLOSED_SOCKET


def test_ordering_under_reordering_and_unordered_option() -> None:
    p = Pipe("a", "b", reorder=True, seed=9)
    push, pull = pushpull(p, capacity=1000)
    push.link(B, p.now)
    p.run()
    for i in range(500):
        push.try_send(b"%d" % i)
    p.run()
    assert drain(pull) == [b"%d" % i for i in range(500)]
    p2 = Pipe("a", "b", reorder=True, seed=9)
    push2 = p2.nodes["a"].create("PUSH", "src")
    pull2 = p2.nodes["b"].create("PULL", "sink", capacity=1000, ordered=False)
    push2.link(B, p2.now)
    p2.run()
    for i in range(500):
        push2.try_send(b"%d" % i)
    p2.run()
    got = drain(pull2)
    assert sorted(got) == sorted(b"%d" % i for i in range(500)) and got != sorted(got)


def test_same_node_delivery_bypasses_the_network() -> None:
    p = Pipe("a")
    push = p.nodes["a"].create("PUSH", "src")
    pull = p.nodes["a"].create("PULL", "sink")
    push.link(("a", "sink"), p.now)
    assert p.nodes["a"].take_output() == []  # the handshake stayed inside the node
    assert push.is_linked(("a", "sink"))
    assert push.try_send(b"local")
    assert p.nodes["a"].take_output() == []  # nothing for the transport
    assert drain(pull) == [b"local"]


# ---------------------------------------------------------------- keepalive and lost peers


def restart_node(p: Pipe, node_id: str) -> None:
    """The node's process restarts: a fresh core with no sockets and no links."""
    from random import Random

    from a3m.core.node_core import NodeCore
    from a3m.patterns import register_builtin

    p.nodes[node_id] = register_builtin(NodeCore(node_id, Random(99)))


def pings(p: Pipe, src: str) -> int:
    return p.types(src).count("PING")


def test_a_quiet_link_that_waits_on_its_peer_is_pinged_and_a_busy_one_is_not() -> None:
    """The PUSH spent its credits (the PULL's application reads nothing): it waits on the
    peer for a FLOW, so its quiet link gets a PING every keepalive_s; while messages flow
    either way, none."""
    p = Pipe("a", "b")
    push, pull = pushpull(p, capacity=64)
    push.set_option("keepalive_s", 2.0)
    pull.set_option("keepalive_s", 0)  # only one side pings here
    push.link(B, p.now)
    p.run()
    for _ in range(10):  # 5 s of traffic every half second: no PING
        p.advance(0.5)
        assert push.try_send(b"x")
        p.run()
        drain(pull)
    assert pings(p, "a") == 0
    while push.try_send(b"y"):  # the credits run out: the PUSH now waits on its peer
        pass
    p.run()
    for _ in range(20):  # 10 s of silence: a PING about every 2 s, answered by nothing
        p.advance(0.5)
    assert 4 <= pings(p, "a") <= 6
    assert p.types("b").count("ERROR") == 0 and push.is_linked(B) and pull.is_linked(A)


def test_a_quiet_link_that_waits_on_nothing_gets_only_the_idle_probe() -> None:
    """Passive keepalive: with nothing waiting either way, a quiet link gets no PING every
    keepalive_s, only an idle probe after idle_probe_s x 0.75-1.25 of quiet (jittered per
    link); a PING received counts as activity, so one side's probe spares the other's."""
    p = Pipe("a", "b")
    push, pull = pushpull(p)
    for sock in (push, pull):
        sock.set_option("keepalive_s", 2.0)
        sock.set_option("idle_probe_s", 40.0)
    push.link(B, p.now)
    p.run()
    assert push.try_send(b"x")
    p.run()
    drain(pull)  # its FLOW-free credit is back: nothing waits on either side
    for _ in range(58):  # 29 s of quiet (< 0.75 x 40): no PING either way
        p.advance(0.5)
    assert pings(p, "a") == pings(p, "b") == 0
    for _ in range(22):  # by 40 s (< 1.25 x 40 after the last activity): the idle probe
        p.advance(0.5)
    assert pings(p, "a") + pings(p, "b") >= 1
    for _ in range(800):  # 400 s more: one PING per 30-50 s, from one side or the other
        p.advance(0.5)
    total = pings(p, "a") + pings(p, "b")
    assert 440 / 50 - 1 <= total <= 440 / 30 + 1, total
    assert push.is_linked(B) and pull.is_linked(A)


def test_a_request_awaiting_its_reply_is_pinged_until_the_reply_comes() -> None:
    p = Pipe("a", "b")
    req = p.nodes["a"].create("REQ", "req", keepalive_s=2.0)
    rep = p.nodes["b"].create("REP", "rep", keepalive_s=0)
    req.link(("b", "rep"), p.now)
    p.run()
    assert req.try_send(b"q")
    p.run()
    assert rep.try_recv().payload == b"q"  # type: ignore[union-attr]
    for _ in range(20):  # 10 s without the reply: a PING about every 2 s
        p.advance(0.5)
    assert 4 <= pings(p, "a") <= 6
    assert rep.try_send(b"r")
    p.run()
    assert req.try_recv().payload == b"r"  # type: ignore[union-attr]
    before = pings(p, "a")
    for _ in range(60):  # 30 s after the reply: nothing waits, no PING (idle probe: 300 s)
        p.advance(0.5)
    assert pings(p, "a") == before


def test_cookies_awaiting_their_outcome_keep_the_link_pinged() -> None:
    p = Pipe("a", "b")
    push, pull = pushpull(p)
    push.set_option("keepalive_s", 2.0)
    pull.set_option("keepalive_s", 0)
    push.link(B, p.now)
    p.run()
    assert push.try_send(b"x", cookie="c")  # type: ignore[call-arg]
    p.run()
    for _ in range(20):  # the PULL's application has not taken it: its outcome is owed
        p.advance(0.5)
    assert 4 <= pings(p, "a") <= 6
    drain(pull)  # taken: the TAKEN report settles the cookie, nothing waits any more
    p.run()
    assert [c.value for c in push.take_cookies(10)] == ["c"]  # type: ignore[attr-defined]
    before = pings(p, "a")
    for _ in range(40):
        p.advance(0.5)
    assert pings(p, "a") == before


def test_a_restarted_peer_is_found_by_the_idle_probe_and_linked_again() -> None:
    """The PULL's node restarts (no UNLINK ever comes) while nothing waits on it: the PUSH's
    idle probe (2 s here) gets "socket not linked", the link ends, and the PUSH links again
    with the new PULL."""
    p = Pipe("a", "b")
    push, _ = pushpull(p)
    push.set_option("keepalive_s", 2.0)
    push.set_option("idle_probe_s", 2.0)
    push.link(B, p.now)
    p.run()
    old_inc = push.links[B].my_inc
    restart_node(p, "b")
    new_pull = p.nodes["b"].create("PULL", "sink")
    for _ in range(20):
        p.advance(0.5)
    assert push.is_linked(B) and push.links[B].my_inc != old_inc and new_pull.is_linked(A)
    assert push.try_send(b"after")
    p.run()
    assert drain(new_pull) == [b"after"]


def lose_one(p: Pipe, sock: SocketCore) -> bytes:
    """``sock`` (on node a) sends a message that node b's crash leaves of unknown outcome:
    held on the way, then reported lost by node a's transport. Returns its bytes."""
    p.hold = lambda src, dst, msg: msg.type in (m.DATA, m.BATCH)
    assert sock.try_send(b"q")
    p.run()
    (_, _, data), = p.held
    p.nodes["a"].message_lost("b", data, p.now)
    return data


def test_a_message_of_unknown_outcome_ends_its_link() -> None:
    """When the transport reports a message of unknown outcome (its node crashed), the link
    it belongs to ends; a REQ waiting for its reply gets LinkError, not a hang."""
    from a3m.errors import LinkError

    p = Pipe("a", "b")
    req = p.nodes["a"].create("REQ", "req")
    p.nodes["b"].create("REP", "rep")
    req.link(("b", "rep"), p.now)
    p.run()
    data = lose_one(p, req)
    with pytest.raises(LinkError, match="went away"):
        req.try_recv()
    assert not req.links and p.nodes["a"].lost_messages == 1
    p.hold = None
    p.held = []
    p.nodes["a"].message_lost("b", data, p.now)  # a late report: nothing left to end
    assert ("b", "rep") in req.retry_at  # it initiated the link: it links again


def test_a_ping_answered_after_unlinking_began_does_not_cut_the_delivery_goal() -> None:
    """Our PING crosses the peer's completed unlink: its ERROR must not abort our UNLINKING
    link (the peer's last messages are still on their way to us)."""
    p = Pipe("a", "b")
    push, pull = pushpull(p)
    pull.set_option("keepalive_s", 2.0)
    push.link(B, p.now)
    p.run()
    for i in range(3):
        push.try_send(b"%d" % i)
    p.hold = lambda src, dst, msg: msg.type in (m.DATA, m.BATCH)  # the three are still on their way
    p.run()
    late = list(p.held)
    p.held = []
    p.hold = lambda src, dst, msg: msg.type == m.PING
    p.advance(3.0)  # the PULL pings the (quiet, for it) link
    ping = p.held
    p.held = []
    p.hold = None
    push.unlink(B, p.now)
    p.run()
    assert pull.link_state(A) is State.UNLINKING
    assert B not in push.links  # the PUSH finished its side (nothing to wait for)
    for src, dst, data in ping:  # the PING arrives at a peer without the link: ERROR
        p.nodes[dst].receive(src, data, p.now)
    p.run()
    assert pull.link_state(A) is State.UNLINKING  # the ERROR about a PING changed nothing
    for src, dst, data in late:
        p.nodes[dst].receive(src, data, p.now)
    p.run()
    assert drain(pull) == [b"0", b"1", b"2"]


def test_on_link_lost_says_why_the_transport_lost_the_peer() -> None:
    """The extension point a pattern counts lost members with (RADIO's members_lost)."""
    from a3m.patterns.pipeline import Push

    seen: list[tuple[tuple[str, str], bool]] = []

    class Watching(Push):
        def on_link_lost(self, link: Link, unknown_outcome: bool) -> None:
            seen.append((link.peer, unknown_outcome))

    p = Pipe("a", "b")
    p.nodes["a"].register_type("WATCHING", Watching)
    push = p.nodes["a"].create("WATCHING", "src")
    p.nodes["b"].create("PULL", "sink")
    push.link(B, p.now)
    p.run()
    lose_one(p, push)
    assert seen == [(B, True)] and B in push.retry_at
    p.hold = None
    p.held = []
    p.advance(10.0)  # linked again
    assert push.is_linked(B)
    p.nodes["a"].peer_lost("b", p.now)
    assert seen == [(B, True), (B, False)]
