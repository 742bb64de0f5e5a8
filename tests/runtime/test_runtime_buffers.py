"""The socket's own buffers: in a stream, sends wait in the socket's send buffer for the I/O
thread's turn without taking the node's lock, never more than the links' credits took; and a
receive takes what else is there into the socket's inbox, so the next receives need no lock.
Every form of send and receive keeps exactly-once and order across them."""

from __future__ import annotations

import threading
import time
from contextlib import AbstractContextManager
from typing import Any

import pytest

import a3m

from .streams import push_pull

WINDOW = 0.01  # the longest cork window: the buffer stays open 10 ms after a send


def pair(capacity: int = 256, **options: Any
         ) -> AbstractContextManager[tuple[a3m.Node, a3m.Node, a3m.Socket, a3m.Socket]]:
    options.setdefault("cork_s", WINDOW)
    return push_pull("buf", capacity, **options)


def recv_all(pull: a3m.Socket, n: int) -> list[bytes]:
    got: list[bytes] = []
    while len(got) < n:
        got += pull.recv_many(n - len(got), timeout=10)
    return got


def hold_open_buffer(node: a3m.Node, push: a3m.Socket) -> int:
    """Two sends in a row open the send buffer; return holding the node's lock while it is
    open (the caller releases it), with how many messages that took."""
    lock = node._driver.lock
    for attempt in range(50):
        push.send(b"first%d" % attempt, timeout=5)
        push.send(b"second%d" % attempt, timeout=5)
        lock.acquire()
        if push._sbuf.room > 0:
            return 2 * (attempt + 1)
        lock.release()
        time.sleep(WINDOW * 2)
    pytest.fail("the send buffer never opened")


def in_thread(fn: object) -> threading.Thread:
    t = threading.Thread(target=fn, daemon=True)  # type: ignore[arg-type]
    t.start()
    return t


def test_a_stream_of_sends_waits_in_the_buffer_without_the_node_lock() -> None:
    with pair() as (a, b, push, pull):
        openers = hold_open_buffer(a, push)
        try:
            sent: list[bytes] = []
            room = push._sbuf.room

            def stream() -> None:  # blocks for ever on the node's lock without the buffer
                for i in range(min(100, room)):
                    push.send(b"m%d" % i, timeout=0)
                    sent.append(b"m%d" % i)

            t = in_thread(stream)
            t.join(5)
            assert not t.is_alive() and len(sent) == min(100, room)
        finally:
            a._driver.lock.release()
        got = recv_all(pull, openers + len(sent))
        after_openers = [m for m in got if m.startswith(b"m")]
        assert after_openers == sent
        with pytest.raises(a3m.Timeout):
            pull.recv(timeout=0.2)


def test_send_many_goes_through_an_open_buffer_whole() -> None:
    with pair() as (a, b, push, pull):
        openers = hold_open_buffer(a, push)
        try:
            room = push._sbuf.room
            went: list[int] = []
            t = in_thread(lambda: went.append(push.send_many([b"b%d" % i for i in range(10)],
                                                              timeout=0)))
            t.join(5)
            assert not t.is_alive() and went == [10] and room >= 10
            assert push._sbuf.room == room - 10
            more: list[int] = []
            too_many = in_thread(lambda: more.append(push.send_many([b"x"] * (room - 9),
                                                                    timeout=0)))
            too_many.join(0.3)
            assert too_many.is_alive(), "more than the room: it takes the lock (held here)"
        finally:
            a._driver.lock.release()
        too_many.join(5)
        assert more and 0 < more[0] <= room - 9  # as far as the credits went
        got = recv_all(pull, openers + 10 + more[0])
        assert [m for m in got if m.startswith(b"b")] == [b"b%d" % i for i in range(10)]


def test_buffered_sends_never_outrun_the_credits() -> None:
    with pair(capacity=64) as (a, b, push, pull):
        accepted = 0
        with pytest.raises(a3m.WouldBlock):
            for i in range(1000):  # one stream, well within the window: through the buffer
                push.send(b"x%d" % i, timeout=0)
                accepted += 1
        assert accepted == 64
        assert recv_all(pull, 64) == [b"x%d" % i for i in range(64)]
        push.send(b"more", timeout=5)
        assert pull.recv(timeout=5) == b"more"


def test_buffered_sends_wait_for_another_link_when_theirs_went_away() -> None:
    with pair() as (a, b, push, pull):
        spare = b.socket(a3m.PULL, "spare")
        hold_open_buffer(a, push)
        try:
            def stream() -> None:
                for i in range(20):
                    push.send(b"s%d" % i, timeout=0)

            in_thread(stream).join(5)
            assert len(push._sbuf.items) == 20
            push._core.unlink((b.id, "in"), time.monotonic())  # before the turn takes them
        finally:
            a._driver.lock.release()
        # Count a's I/O turns while the sends wait, rather than time its CPU (a busy machine
        # moved a CPU figure once): a loop that spun on them would make thousands of turns
        # in this 0.3 s; waiting on its timers, it makes a few. A slower machine only makes
        # fewer turns, so this cannot fail for want of speed.
        drv = a._driver
        before = drv.turns
        time.sleep(0.3)
        turns = drv.turns - before
        assert push._sbuf.items, "no link: they wait in the buffer"
        assert turns < 50, f"waiting for a link must not spin ({turns} turns)"
        with pytest.raises(a3m.WouldBlock):  # and nothing passes them
            push.send(b"later", timeout=0)
        push.link((b.id, "spare"))
        assert push.wait_linked((b.id, "spare"), timeout=5)
        push.send(b"later", timeout=5)
        assert recv_all(spare, 21) == [b"s%d" % i for i in range(20)] + [b"later"]


@pytest.mark.parametrize("how", ["close", "flush"])
def test_close_and_flush_send_what_the_buffer_holds(how: str) -> None:
    with pair() as (a, b, push, pull):
        openers = hold_open_buffer(a, push)
        try:
            in_thread(lambda: [push.send(b"c%d" % i, timeout=0) for i in range(30)]).join(5)
            assert len(push._sbuf.items) == 30
            assert a._buffering == {push}
        finally:
            a._driver.lock.release()
        if how == "flush":
            assert a.flush(timeout=5) and not push._sbuf.items
        assert push.close(timeout=5)
        got = recv_all(pull, openers + 30)
        assert [m for m in got if m.startswith(b"c")] == [b"c%d" % i for i in range(30)]


def test_cork_s_zero_never_opens_the_buffer() -> None:
    with pair(cork_s=0.0) as (a, b, push, pull):
        for i in range(200):
            push.send(b"z%d" % i, timeout=5)
            assert push._sbuf.room == 0
        assert recv_all(pull, 200) == [b"z%d" % i for i in range(200)]


def arrived(pull: a3m.Socket, n: int) -> None:
    """Wait until ``n`` messages wait in the PULL's core (none taken yet)."""
    end = time.monotonic() + 10
    while time.monotonic() < end:
        with pull.node._driver.lock:
            if sum(len(lk.inq) for lk in pull._core.links.values()) >= n:
                return
        time.sleep(0.005)
    pytest.fail("the messages did not arrive")


def test_a_receive_takes_ahead_and_the_next_need_no_lock() -> None:
    with pair() as (a, b, push, pull):
        assert push.send_many([b"r%d" % i for i in range(50)], timeout=5) == 50
        arrived(pull, 50)
        assert pull.recv(timeout=5) == b"r0"
        assert len(pull._inbox) == 49
        got: list[bytes] = []
        with b._driver.lock:  # without the inbox each receive would wait on this lock
            t = in_thread(lambda: got.extend(pull.recv(timeout=0) for _ in range(10)))
            t.join(5)
            assert not t.is_alive()
        assert got == [b"r%d" % i for i in range(1, 11)]


def test_poll_and_readable_see_what_the_inbox_holds() -> None:
    with pair() as (a, b, push, pull):
        push.send_many([b"p0", b"p1"], timeout=5)
        arrived(pull, 2)
        assert pull.recv(timeout=5) == b"p0"
        assert pull.readable  # the core holds nothing now: the inbox does
        poller = a3m.Poller()
        poller.register(pull, a3m.POLLIN)
        assert poller.poll(0) == [(pull, a3m.POLLIN)]
        assert pull.recv(timeout=0) == b"p1"
        assert not pull.readable and poller.poll(0) == []


def test_every_receive_form_keeps_order_across_the_inbox() -> None:
    with pair(capacity=4096) as (a, b, push, pull):
        msgs = [b"o%d" % i for i in range(3000)]
        t = in_thread(lambda: [push.send(m, timeout=30) for m in msgs])
        got: list[bytes] = []
        step = 0
        while len(got) < len(msgs):
            form = step % 4
            step += 1
            if form == 0:
                got.append(pull.recv(timeout=10))
            elif form == 1:
                msg = pull.recv_msg(timeout=10)
                assert msg.source == push.id and msg.topic is None and msg.group is None
                got.append(msg.payload)
            elif form == 2:
                got += pull.recv_many(7, timeout=10)
            else:
                for source, topic, payloads in pull._recv_runs(5, timeout=10):
                    assert source == tuple(push.id) and topic is None
                    got += payloads
        t.join(30)
        assert got == msgs
        with pytest.raises(a3m.Timeout):
            pull.recv(timeout=0.2)


def test_patterns_with_their_own_receive_hooks_take_nothing_ahead() -> None:
    a = a3m.Node("buf-sub-a")
    b = a3m.Node("buf-sub-b")
    try:
        a.associate(b.id, b.address)
        b.associate(a.id, a.address)
        sub = b.socket(a3m.SUB, "sub")
        sub.subscribe(b"t")
        pub = a.socket(a3m.PUB, "pub")
        sub.link((a.id, "pub"))
        assert sub.wait_linked(timeout=5) and pub.wait_linked(timeout=5)
        for i in range(5):
            pub.send(b"%d" % i, topic=b"t")
        assert [sub.recv_msg(timeout=5).topic for _ in range(5)] == [b"t"] * 5
        assert not sub._inbox and not pub._sbuf.room
    finally:
        a.close(5)
        b.close(5)


def test_send_buffer_keeps_each_mark_with_its_item_through_a_partial_drain() -> None:
    from a3m.runtime.send_buffer import SendBuffer

    buf: SendBuffer[bytes] = SendBuffer()
    buf.open(10)
    assert buf.offer(b"a") and buf.offer(b"b", "B") and buf.offer_many([b"c", b"d"], [None, "D"])
    seen: list[tuple[list[bytes], object]] = []

    def takes_two(items: list[bytes], marks: object) -> int:
        seen.append((list(items), marks))
        return 2

    assert buf.drain(takes_two) and buf.stalled
    assert seen == [([b"a", b"b", b"c", b"d"], [None, "B", None, "D"])]
    assert buf.items == [b"c", b"d"] and buf.marks == [None, "D"]
    assert buf.clear_marks() == ["D"] and buf.clear() == [b"c", b"d"] and buf.marks is None
    buf.open(10)
    assert buf.offer(b"e")
    assert buf.drain(lambda items, marks: seen.append((items, marks)) or 1)
    assert seen[-1] == ([b"e"], None)  # no mark anywhere: none handed on


def test_sends_waiting_for_exon_s_window_wait_for_an_ack_without_spinning(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Exon's window (8 pieces) is smaller than the link's credits, and the receiver's ACKs
    are held back (its node's lock is held): what the core sent waits above Exon (the
    bridge's outbox) and the sender's thread, blocked in ``send``, leads its driver. That
    output is not due before an ACK opens the window, so the leader waits on the socket:
    before, its cork deadline, long past, made every wait return at once, and a secure
    1500-byte stream's sender spun ~77 000 empty turns per 1 000 x 64 KiB (issue 31). Its
    waits are the window's: it polls for the ACK a while before it sleeps. Counted, not
    timed: a slower machine only makes fewer turns."""
    # The Python I/O loop: the native one reads and acknowledges without the node's lock
    # (that is its point), so holding b's lock would not hold its ACKs back.
    monkeypatch.setenv("A3M_NATIVE_LOOP", "0")
    with pair(capacity=64, window_per_peer=8, window_global=8) as (a, b, push, pull):
        push.send(b"warm", timeout=5)
        assert pull.recv(timeout=5) == b"warm"
        payload = b"p" * 10_000  # a few to a BATCH: many Exon messages for the credits
        sent = [0]
        b._driver.lock.acquire()  # b reads nothing, so it acknowledges nothing
        try:
            def stream() -> None:
                for _ in range(200):
                    push.send(payload, timeout=30)
                    sent[0] += 1

            sender = in_thread(stream)
            bridge = a._bridge
            end = time.monotonic() + 10
            while not (bridge.outbox and not bridge.ready()) and time.monotonic() < end:
                time.sleep(0.01)
            assert bridge.outbox and not bridge.ready(), "Exon's window never filled"
            drv = a._driver
            turns0, waits0, windows0 = drv.turns, drv.input_waits, drv.window_waits
            time.sleep(0.3)
            turns = drv.turns - turns0
            waits, windows = drv.input_waits - waits0, drv.window_waits - windows0
            assert sent[0] < 200 and bridge.outbox  # still waiting for the window
            assert turns < 100, f"waiting for Exon's window must not spin ({turns} turns)"
            # ... and the waits are the window's: the leader polls for the ACK (up to
            # WINDOW_POLL_S) before it sleeps, as a stream's sender gains from.
            assert waits and windows == waits, (waits, windows)
        finally:
            b._driver.lock.release()
        got = recv_all(pull, 200)
        sender.join(30)
        assert sent[0] == 200 and got == [payload] * 200


def test_a_keyword_the_pattern_does_not_take_is_refused_and_nothing_leaves() -> None:
    """PUSH's send takes no option: an unknown keyword is a TypeError naming it, whether the
    buffer is open (the native send refuses it) or not (the Python send), and what it carried
    is never sent."""
    with pair() as (a, b, push, pull):
        for attempt in range(3):
            push.send(b"before%d" % attempt, timeout=5)  # in a row: the buffer opens
            with pytest.raises(TypeError, match="'topic'"):
                push.send(b"never", timeout=5, topic=b"t")
        time.sleep(WINDOW * 3)  # the buffer closes: the Python send's turn
        with pytest.raises(TypeError, match="'topic'"):
            push.send(b"never", topic=b"t")
        push.send(b"after", timeout=5)
        assert recv_all(pull, 4) == [b"before0", b"before1", b"before2", b"after"]
        with pytest.raises(a3m.Timeout):
            pull.recv(timeout=0.2)


def test_a_stream_that_waited_for_credits_goes_on_in_the_cork_window() -> None:
    """A send_many that had to wait for credits is part of a stream: when the grant comes,
    its messages wait in the cork window (the send buffer opens for what follows) instead of
    leaving at once, alone, as after a quiet spell. (Each grant of a credit-bound stream then
    began with a small BATCH of one call's messages: one more datagram and ACK a grant, and
    at a few grants a millisecond the stream settled at half its rate.)"""
    cap = 64
    opened: list[bool] = []
    first = [b"A%d" % i for i in range(8)]
    for _ in range(3):  # (a grant before the thread waits shows nothing: again)
        with pair(capacity=cap) as (a, b, push, pull):
            drv = a._driver
            push.send_many([b"fill%d" % i for i in range(cap)], timeout=10)  # credits: none

            def stream(push: a3m.Socket = push) -> None:
                push.send_many(first, timeout=10)  # waits for the grant
                opened.append(push._sbuf.room > 0)  # (the window is 10 ms long)

            t = in_thread(stream)
            end = time.monotonic() + 10
            while not (drv._waiters or drv._leader is not None) and time.monotonic() < end:
                time.sleep(0.001)
            time.sleep(WINDOW * 3)  # a wait longer than the window: no earlier send's cork
            assert recv_all(pull, cap)[0] == b"fill0"  # the grant
            t.join(10)
            assert recv_all(pull, 8) == first
        if opened[-1]:
            break
    assert any(opened), "the buffer never opened after a send that waited for credits"


def test_a_batch_spreads_over_the_links_as_single_sends_would() -> None:
    """PUSH's round robin by runs gives each link its share of a batch (as far as its credits
    go), not the whole batch to one link: a producer whose single sends and buffered runs
    alternated sent nearly everything to one of two links."""
    a = a3m.Node("share-a")
    pulls: list[tuple[a3m.Node, a3m.Socket]] = []
    try:
        push = a.socket(a3m.PUSH, "out")
        for name in ("share-b", "share-c"):
            n = a3m.Node(name)
            pulls.append((n, n.socket(a3m.PULL, "in", capacity=256, capacity_max=0)))
            a.associate(n.id, n.address)
            push.link((n.id, "in"))
        for n, _ in pulls:
            assert push.wait_linked((n.id, "in"), timeout=5)
        assert push.send_many([b"m%d" % i for i in range(200)], timeout=10) == 200
        got = [recv_all(pull, 100) for _, pull in pulls]
        assert sorted(got[0] + got[1]) == sorted(b"m%d" % i for i in range(200))
        for _, pull in pulls:
            with pytest.raises(a3m.Timeout):
                pull.recv(timeout=0.2)
    finally:
        a.close(5)
        for n, _ in pulls:
            n.close(5)


@pytest.mark.parametrize("kinds", [(a3m.REQ, a3m.REP), (a3m.SURVEYOR, a3m.RESPONDENT)])
def test_an_exchange_s_sends_are_never_held_in_the_cork_window(kinds: tuple[str, str]
                                                               ) -> None:
    """A request and its reply (a survey and its response) follow the previous send of their
    node well within a 10 ms cork window, but are no stream: each is handed off at once,
    and neither node ever opens a window (before, every send that came within the window
    of the previous one waited for it to end: with the default 50 us window, a REQ/REP
    round trip shorter than the window held every other request and reply)."""
    ask, answer = kinds
    with a3m.Node("ex-a", cork_s=WINDOW) as a, a3m.Node("ex-b", cork_s=WINDOW) as b:
        a.associate(b.id, b.address)
        q = a.socket(ask, "q")
        r = b.socket(answer, "r")
        q.link((b.id, "r"))
        assert q.wait_linked(timeout=10)
        for i in range(30):
            q.send(b"q%d" % i, timeout=10)
            got = r.recv(timeout=10)
            assert got == b"q%d" % i
            r.send(b"a" + got, timeout=10)
            assert q.recv(timeout=10) == b"aq%d" % i
        # (a window opens at a held send: ``Cork.due``)
        assert a._cork.until == 0.0 and b._cork.until == 0.0
