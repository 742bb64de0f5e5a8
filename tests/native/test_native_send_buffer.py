"""The native send buffer against its Python twin (runtime/send_buffer.py), and the socket's
native ways in and out (``FastSend``, ``FastRecv``): the same seeded operations give the same
results and the same state after each, and every send the fast way cannot take goes to the
Python ``send``, which says what is wrong."""

from __future__ import annotations

import weakref
from collections import deque
from random import Random
from typing import Any

import pytest

import a3m
from a3m._dataplane import native
from a3m.runtime.send_buffer import SendBuffer

pytestmark = pytest.mark.skipif(native is None, reason="the native data plane is not built")


class Refused(Exception):
    """What a drain's ``hand`` raises in the differential runs."""


def _state(buf: Any) -> tuple[Any, ...]:
    marks = buf.marks
    return (list(buf.items), None if marks is None else list(marks), buf.room, buf.stalled,
            len(buf))


def _op(buf: Any, rng: Random, handed: list[Any]) -> Any:
    """One seeded operation (``rng`` replayed identically for both twins)."""
    kind = rng.randrange(9)
    if kind <= 2:
        item = b"m%d" % rng.randrange(1000)
        mark = None if rng.random() < 0.6 else f"c{rng.randrange(1000)}"
        return ("offer", buf.offer(item, mark))
    if kind == 3:
        n = rng.randrange(0, 5)
        items = [b"b%d" % rng.randrange(1000) for _ in range(n)]
        marks = None if rng.random() < 0.5 else [
            None if rng.random() < 0.5 else f"d{i}" for i in range(n)]
        if rng.random() < 0.5:  # checked: only bytes, none longer than max_size
            if n and rng.random() < 0.2:
                items[rng.randrange(n)] = rng.choice(
                    [bytearray(b"ba"), memoryview(b"mv"), "str", 7])
            max_size = rng.randrange(0, 6)
            return ("offer_many", buf.offer_many(items, marks, max_size))
        return ("offer_many", buf.offer_many(items, marks))
    if kind == 4:
        take = rng.randrange(0, 6)
        fail = rng.random() < 0.1

        def hand(items: list[Any], marks: list[Any] | None) -> int:
            handed.append((list(items), None if marks is None else list(marks)))
            if fail:
                raise Refused
            return take

        try:
            return ("drain", buf.drain(hand))
        except Refused:
            return ("drain", "refused")
    if kind == 5:
        return ("open", buf.open(rng.randrange(0, 8)))
    if kind == 6:
        return ("shut", buf.shut())
    if kind == 7:
        if rng.random() < 0.3:
            return ("clear", buf.clear_marks(), buf.clear())
        return ("give_up_marked", buf.give_up_marked())
    buf.stalled = rng.random() < 0.5
    return ("stalled", buf.stalled)


@pytest.mark.parametrize("seed", range(40))
def test_the_native_buffer_does_what_its_twin_does(seed: int) -> None:
    py_buf: SendBuffer[bytes] = SendBuffer()
    rs_buf = native.SendBuffer()
    handed_py: list[Any] = []
    handed_rs: list[Any] = []
    for step in range(300):
        a = _op(py_buf, Random(seed * 1000 + step), handed_py)
        b = _op(rs_buf, Random(seed * 1000 + step), handed_rs)
        assert a == b, (seed, step)
        assert _state(py_buf) == _state(rs_buf), (seed, step, a)
    assert handed_py == handed_rs


@pytest.mark.parametrize("twin", ["python", "native"])
def test_a_refused_drain_puts_everything_back_first_in_line(twin: str) -> None:
    buf = SendBuffer() if twin == "python" else native.SendBuffer()
    buf.open(4)
    assert buf.offer(b"a", "A") and buf.offer(b"b")

    def refuse(items: list[Any], marks: Any) -> int:
        buf.open(4)  # (a send came meanwhile: it stays behind them)
        assert buf.offer(b"c")
        raise Refused

    with pytest.raises(Refused):
        buf.drain(refuse)
    assert list(buf.items) == [b"a", b"b", b"c"] and list(buf.marks) == ["A", None, None]
    assert buf.stalled


class _Owner:
    def __init__(self) -> None:
        self.slow: list[tuple[Any, ...]] = []

    def send(self, data: Any, timeout: Any = None, cookie: Any = None, **kw: Any) -> str:
        self.slow.append((data, timeout, cookie, kw))
        return "slow"

    def recv(self, timeout: Any = None) -> str:
        self.slow.append(("recv", timeout))
        return "slow"

    def recv_many(self, max_items: Any, timeout: Any = None) -> str:
        self.slow.append(("recv_many", max_items, timeout))
        return "slow"


def test_fast_send_takes_plain_messages_and_leaves_the_rest_to_python() -> None:
    owner = _Owner()
    buf = native.SendBuffer()
    send = native.FastSend(buf, 100, _Owner.send, weakref.ref(owner)).send
    assert send(b"x") == "slow" and list(buf.items) == []  # closed: the Python send
    assert owner.slow == [(b"x", None, None, {})]
    buf.open(10)
    assert send(b"a") is None and send(b"b", 5) is None and send(b"c", timeout=0.0) is None
    assert list(buf.items) == [b"a", b"b", b"c"] and buf.room == 7
    owner.slow.clear()
    # each of these is the Python send's to take (or to refuse, saying why)
    assert send(b"d", cookie=1) == "slow"
    assert send(bytearray(b"f")) == "slow"
    assert send(b"g" * 101) == "slow"
    assert send(b"h", -1) == "slow"
    assert send(b"i", "soon") == "slow"
    assert [s[0] for s in owner.slow] == [b"d", bytearray(b"f"), b"g" * 101, b"h", b"i"]
    # no other keyword (the socket binds it only where its pattern takes none): refused
    # before anything is taken, naming the keyword; called by vectorcall (no dict a call)
    with pytest.raises(TypeError, match="'topic'"):
        send(b"e", topic=b"t")
    assert list(buf.items) == [b"a", b"b", b"c"]
    del owner  # (a socket closed and let go while its send is kept)
    with pytest.raises(a3m.Closed):
        send(b"j", cookie=2)


def test_fast_recv_takes_the_inbox_s_first_payload_or_asks_python() -> None:
    owner = _Owner()
    inbox: deque[tuple[bytes, Any]] = deque([(b"one", ("n", "t")), (b"two", ("n", "t"))])
    recv = native.FastRecv(inbox, _Owner.recv, weakref.ref(owner)).recv
    assert recv() == b"one" and recv(timeout=1) == b"two"
    assert recv(0.5) == "slow" and owner.slow == [("recv", 0.5)]
    del owner
    with pytest.raises(a3m.Closed):
        recv()


def test_fast_recv_many_takes_what_the_inbox_holds_or_asks_python() -> None:
    """As ``Socket.recv_many``'s first lines: up to ``max_items`` payloads from the inbox, in
    order; an empty inbox or a ``max_items`` that is not an int >= 1 goes to the Python
    method (which waits, or raises UsageError)."""
    owner = _Owner()
    inbox: deque[tuple[bytes, Any]] = deque((b"m%d" % i, ("n", "t")) for i in range(5))
    recv_many = native.FastRecv(inbox, _Owner.recv_many, weakref.ref(owner)).recv_many
    assert recv_many(2) == [b"m0", b"m1"]
    assert recv_many(10, timeout=1) == [b"m2", b"m3", b"m4"] and not inbox
    assert recv_many(3, 0.5) == "slow"
    inbox.append((b"m5", ("n", "t")))
    for bad in (0, -1, 2.0, "2", True):
        assert recv_many(bad) == "slow"
    assert owner.slow == [("recv_many", 3, 0.5)] + [("recv_many", b, None)
                                                    for b in (0, -1, 2.0, "2", True)]
    assert list(inbox) == [(b"m5", ("n", "t"))]
    del owner  # (a socket let go: what its inbox holds can still be taken, then Closed)
    assert recv_many(1, 0) == [b"m5"]
    with pytest.raises(a3m.Closed):
        recv_many(1, 0)


def test_a_socket_sends_and_receives_through_the_native_ways() -> None:
    """A stream's sends and receives go the native ways (the buffer and inbox are the native
    twins'), and the messages arrive exact and in order; a send the fast way leaves to
    Python still works (a cookie) or says what is wrong."""
    with a3m.Node("fast-rx", bind="127.0.0.1:0") as rx, \
            a3m.Node("fast-tx", bind="127.0.0.1:0") as tx:
        pull = rx.socket(a3m.PULL, "in")
        tx.associate(rx.id, rx.address)
        push = tx.socket(a3m.PUSH, "out")
        push.link((rx.id, "in"))
        assert push.wait_linked(timeout=10)
        assert type(push._sbuf) is native.SendBuffer
        assert type(push.send).__name__ == "builtin_function_or_method"
        n = 200  # (within the link's credits: nothing reads meanwhile)
        for i in range(n):
            push.send(i.to_bytes(4, "big"), timeout=10)
        push.send(b"last", timeout=10, cookie="last")
        got = [pull.recv(timeout=10) for _ in range(n // 2)]
        assert type(pull.recv_many).__name__ == "builtin_function_or_method"
        while len(got) < n + 1:
            got += pull.recv_many(7, timeout=10)
        assert got == [i.to_bytes(4, "big") for i in range(n)] + [b"last"]
        assert push.recv_cookie(timeout=10).value == "last"
        with pytest.raises(a3m.UsageError, match="bytes"):
            push.send("text is not bytes", timeout=10)  # type: ignore[arg-type]
        with pytest.raises(a3m.UsageError):
            push.send(b"x", timeout=-1)
