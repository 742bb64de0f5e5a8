"""A socket's readiness as a file descriptor (``Socket.fileno`` / ``Socket.poll``, pyzmq's
``FD``): select, an event loop's add_reader and a Poller over several nodes wait on it, and no
wake-up is lost between a look and the next wait."""

from __future__ import annotations

import asyncio
import os
import select
import threading
from collections.abc import Iterator
from typing import Any

import pytest

import a3m
from a3m.runtime.sockets import Socket

from .streams import push_pull


@pytest.fixture
def pair() -> Iterator[tuple[a3m.Node, a3m.Node, a3m.Socket, a3m.Socket]]:
    """A PUSH on one node linked to a PULL on another."""
    with push_pull("fd") as nodes_and_sockets:
        yield nodes_and_sockets


def _readable(sock: a3m.Socket, timeout: float) -> bool:
    return bool(select.select([sock], [], [], timeout)[0])


def test_the_descriptor_becomes_readable_when_a_message_comes_and_a_look_reads_it_clear(
        pair: tuple[a3m.Node, a3m.Node, a3m.Socket, a3m.Socket]) -> None:
    _, _, push, pull = pair
    assert pull.fileno() == pull.fileno()  # (made once)
    assert not _readable(pull, 0) and pull.poll(0) == 0
    for round_ in range(3):
        push.send(b"m%d" % round_, timeout=10)
        assert _readable(pull, 10)
        assert pull.poll(0) == a3m.POLLIN
        assert not _readable(pull, 0)  # the look read it clear
        assert pull.recv(timeout=0) == b"m%d" % round_
        assert pull.poll(0) == 0
    # Edge-triggered: what stays ready after a look does not post again by itself...
    push.send(b"a", timeout=10)
    push.send(b"b", timeout=10)
    assert pull.poll(10) == a3m.POLLIN
    assert pull.recv(timeout=10) == b"a"
    # ...but the rest is there for whoever loops until the socket is no longer ready.
    got = []
    while pull.poll(1) & a3m.POLLIN:
        got.append(pull.recv(timeout=0))
    assert got == [b"b"]


def test_a_socket_ready_when_its_descriptor_is_first_asked_for_makes_it_readable_at_once(
        pair: tuple[a3m.Node, a3m.Node, a3m.Socket, a3m.Socket]) -> None:
    _, _, push, pull = pair
    push.send(b"early", timeout=10)
    assert pull.poll(10) == a3m.POLLIN  # (there before the descriptor is made)
    assert _readable(pull, 0)
    assert pull.recv(timeout=0) == b"early"


def test_pollout_rises_when_a_link_comes_up() -> None:
    with a3m.Node("fd-c") as a, a3m.Node("fd-d") as b:
        a.associate("fd-d", b.address)
        push = a.socket(a3m.PUSH, "out")
        assert push.poll(0, a3m.POLLOUT) == 0  # no link: nothing can go
        push.fileno()
        b.socket(a3m.PULL, "in")
        push.link("fd-d/in")
        assert _readable(push, 10)
        assert push.poll(0, a3m.POLLOUT | a3m.POLLIN) == a3m.POLLOUT


def test_no_wake_up_is_lost_between_a_look_and_the_next_wait(
        pair: tuple[a3m.Node, a3m.Node, a3m.Socket, a3m.Socket]) -> None:
    """A sender thread streams while the receiver waits on the descriptor only (select,
    never a blocking recv): every message arrives, and no wait runs into its timeout while
    messages are there."""
    _, _, push, pull = pair
    n = 3000
    sender = threading.Thread(target=lambda: [push.send(b"%d" % i, timeout=30)
                                               for i in range(n)])
    sender.start()
    got: list[bytes] = []
    stalls = 0
    while len(got) < n and stalls < 3:
        if not _readable(pull, 10):
            stalls += 1  # (10 s with messages due: a lost wake-up)
        while pull.poll(0) & a3m.POLLIN:
            got.append(pull.recv(timeout=0))
    sender.join(30)
    assert stalls == 0
    assert got == [b"%d" % i for i in range(n)]


def test_a_poller_over_two_nodes_waits_on_the_descriptors(
        monkeypatch: pytest.MonkeyPatch,
        pair: tuple[a3m.Node, a3m.Node, a3m.Socket, a3m.Socket]) -> None:
    """Not in 2 ms sleeps: a quiet poll looks at each socket about twice (before its wait
    and after it), and a message ends the wait."""
    a, _, push, pull = pair
    other = a.socket(a3m.PULL, "other")
    looks = [0]
    look = Socket._look

    def counted(self: Socket, flags: int) -> int:
        looks[0] += 1
        return look(self, flags)

    monkeypatch.setattr(Socket, "_look", counted)
    poller = a3m.Poller()
    poller.register(pull, a3m.POLLIN)
    poller.register(other, a3m.POLLIN)
    assert poller.poll(0.5) == []
    assert looks[0] <= 2 * 3  # (sleeping 2 ms between looks made about 250 each)
    threading.Timer(0.2, lambda: push.send(b"late", timeout=10)).start()
    ready = poller.poll(10)
    assert [(s.id.tag, ev) for s, ev in ready] == [("in", a3m.POLLIN)]
    assert pull.recv(timeout=0) == b"late"


@pytest.mark.parametrize("loop_kind", ["asyncio", "uvloop"])
def test_an_event_loop_reads_a_threaded_node_through_add_reader(
        loop_kind: str, pair: tuple[a3m.Node, a3m.Node, a3m.Socket, a3m.Socket]) -> None:
    if loop_kind == "uvloop":
        uvloop = pytest.importorskip("uvloop")
        new_loop: Any = uvloop.new_event_loop
    else:
        new_loop = asyncio.new_event_loop
    _, _, push, pull = pair
    n = 500

    async def main() -> list[bytes]:
        loop = asyncio.get_running_loop()
        got: list[bytes] = []
        done = asyncio.Event()

        def readable() -> None:
            while pull.poll(0) & a3m.POLLIN:
                got.append(pull.recv(timeout=0))
            if len(got) >= n:
                done.set()

        loop.add_reader(pull.fileno(), readable)
        try:
            await asyncio.to_thread(lambda: [push.send(b"%d" % i, timeout=30)
                                             for i in range(n)])
            await asyncio.wait_for(done.wait(), 30)
        finally:
            loop.remove_reader(pull.fileno())
        return got

    loop = new_loop()
    try:
        got = loop.run_until_complete(main())
    finally:
        loop.close()
    assert got == [b"%d" % i for i in range(n)]


def test_closing_the_socket_closes_its_descriptor_and_a_node_without_one_posts_nothing(
        pair: tuple[a3m.Node, a3m.Node, a3m.Socket, a3m.Socket]) -> None:
    _, b, _, pull = pair
    assert b._listeners == []  # no descriptor asked for: no listener, nothing to post
    other = b.socket(a3m.PULL, "other")
    fd = pull.fileno()
    other.fileno()
    assert len(b._listeners) == 1  # one listener for the node's watched sockets
    pull.close(timeout=10)
    with pytest.raises(OSError):
        os.fstat(fd)
    with pytest.raises(a3m.Closed):
        pull.fileno()
    with pytest.raises(a3m.Closed):
        pull.poll(0)
    assert len(b._listeners) == 1
    other.close(timeout=10)
    assert b._listeners == []
