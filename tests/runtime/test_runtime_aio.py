"""a3m.aio: the same sockets for asyncio, never blocking the event loop."""

from __future__ import annotations

import asyncio
import queue
import socket
import threading
import time
from collections.abc import Awaitable, Callable
from random import Random
from typing import Any

import pytest

import a3m
import a3m.aio
from a3m.core import link as L
from a3m.patterns.pipeline import Pull
from a3m.testing.relay import FaultRelay


def test_aio_pushpull_and_timeouts() -> None:
    async def main() -> None:
        async with a3m.aio.Node("alpha") as alpha, a3m.aio.Node("beta") as beta:
            alpha.associate("beta", beta.address)
            pull = beta.socket(a3m.PULL, "sink", capacity=16)
            push = alpha.socket(a3m.PUSH, "source")
            push.link(("beta", "sink"))
            assert await push.wait_linked(timeout=5)
            ticks = 0

            async def ticker() -> None:  # proves the loop keeps running while we wait
                nonlocal ticks
                while True:
                    await asyncio.sleep(0.01)
                    ticks += 1

            t = asyncio.create_task(ticker())
            with pytest.raises(a3m.Timeout):
                await pull.recv(timeout=0.2)
            assert ticks >= 5

            async def produce() -> None:
                for i in range(2000):
                    await push.send(b"%d" % i, timeout=10)

            async def consume() -> list[bytes]:
                return [await pull.recv(timeout=10) for _ in range(2000)]

            _, got = await asyncio.gather(produce(), consume())
            assert got == [b"%d" % i for i in range(2000)]
            msg_task = asyncio.create_task(pull.recv_msg(timeout=5))
            await asyncio.sleep(0.05)
            await push.send(b"last", timeout=5)
            msg = await msg_task
            assert msg.payload == b"last" and msg.source == a3m.SocketId("alpha", "source")
            t.cancel()
            wrong = alpha.socket(a3m.PUSH, "p2")
            beta.socket(a3m.PUSH, "push-too")
            wrong.link("beta/push-too")
            assert await wrong.wait_linked(timeout=5) is False
            assert await push.close(timeout=5)

    asyncio.run(main())


# ---------------------------------------------------------------------------- helpers

OP_S = 20.0  # one await that should succeed
TEST_S = 90.0  # a whole test: only reached when something hangs


def run(main: Callable[[], Awaitable[None]]) -> None:
    async def guarded() -> None:
        await asyncio.wait_for(main(), TEST_S)

    asyncio.run(guarded())


async def linked_pair(x: a3m.aio.Node, y: a3m.aio.Node, capacity: int = 256
                      ) -> tuple[a3m.aio.Socket, a3m.aio.Socket]:
    """A PUSH on ``x`` linked to a PULL on ``y`` with ``capacity`` credits (no growth)."""
    x.associate(y.id, y.address)
    pull = y.socket(a3m.PULL, "in", capacity=capacity, capacity_max=0)
    push = x.socket(a3m.PUSH, "out")
    push.link(pull.id)
    assert await push.wait_linked(timeout=OP_S)
    return push, pull


async def linked_reqrep(x: a3m.aio.Node, y: a3m.aio.Node
                        ) -> tuple[a3m.aio.Socket, a3m.aio.Socket]:
    """A REQ on ``x`` linked to a REP on ``y``: (req, rep)."""
    x.associate(y.id, y.address)
    rep = y.socket(a3m.REP, "rep")
    req = x.socket(a3m.REQ, "req")
    req.link(rep.id)
    assert await req.wait_linked(timeout=OP_S)
    return req, rep


# ---------------------------------------------------------------------------- cancellation

def test_a_stream_cancelled_at_every_await_point_loses_nothing_and_doubles_nothing() -> None:
    """Every send and every receive of a stream runs as a task cancelled after 0 to 5 turns
    of the event loop: before it started, while it waits (for credits, for a message), just
    after a turn woke it, or after it finished. A cancelled send is sent again (so a
    cancelled send that went anyway would arrive twice); a cancelled receive is simply
    repeated (so one that took a message would lose it). The receiver must get every
    message once, in order."""
    n = 1500

    async def main() -> None:
        async with a3m.aio.Node("cx") as x, a3m.aio.Node("cy") as y:
            push, pull = await linked_pair(x, y, capacity=8)
            turns_tx, turns_rx = Random(5), Random(6)
            cancelled = {"send": 0, "recv": 0, "done_send": 0, "done_recv": 0}
            got: list[int] = []

            async def one(op: Awaitable[Any], turns: Random, kind: str) -> tuple[bool, Any]:
                task = asyncio.ensure_future(op)
                for _ in range(turns.randrange(6)):
                    await asyncio.sleep(0)
                if task.cancel():
                    try:
                        return True, await task
                    except asyncio.CancelledError:
                        cancelled[kind] += 1
                        return False, None
                cancelled[f"done_{kind}"] += 1
                return True, task.result()

            async def produce() -> None:
                i = 0
                while i < n:
                    ok, _ = await one(push.send(b"%d" % i, timeout=OP_S), turns_tx, "send")
                    i += ok

            async def consume() -> None:
                while len(got) < n:
                    ok, payload = await one(pull.recv(timeout=OP_S), turns_rx, "recv")
                    if ok:
                        got.append(int(payload))

            await asyncio.gather(produce(), consume())
            assert got == list(range(n))
            with pytest.raises(a3m.Timeout):
                await pull.recv(timeout=0.3)  # nothing more: no cancelled send went
            # the test exercised what it is about (the counts are of cancellations, not time)
            assert cancelled["send"] > 0 and cancelled["recv"] > 0
            assert cancelled["done_send"] > 0 and cancelled["done_recv"] > 0

    run(main)


def test_a_cancel_right_after_the_wake_up_takes_nothing_and_sends_nothing() -> None:
    """The narrowest point: the task's wait is over (a local delivery or credit woke it in
    the very call that made it) but the task has not run yet when it is cancelled."""
    async def main() -> None:
        async with a3m.aio.Node("solo") as node:
            pull = node.socket(a3m.PULL, "in", capacity=1, capacity_max=0)
            push = node.socket(a3m.PUSH, "out")
            push.link(pull.id)
            assert await push.wait_linked(timeout=OP_S)
            waiting = asyncio.ensure_future(pull.recv(timeout=OP_S))
            await asyncio.sleep(0)  # it waits now
            await push.send(b"first", timeout=OP_S)  # local: delivered (and woken) in here
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting
            assert await pull.recv(timeout=0) == b"first"  # still there

            await push.send(b"second", timeout=OP_S)  # the one credit
            blocked = asyncio.ensure_future(push.send(b"third", timeout=OP_S))
            await asyncio.sleep(0)
            assert not blocked.done()
            assert await pull.recv(timeout=OP_S) == b"second"  # the credit goes back
            blocked.cancel()
            with pytest.raises(asyncio.CancelledError):
                await blocked
            with pytest.raises(a3m.Timeout):
                await pull.recv(timeout=0.3)  # "third" was not sent

    run(main)


def test_a_cancelled_send_many_says_how_many_went() -> None:
    async def main() -> None:
        async with a3m.aio.Node("mx") as x, a3m.aio.Node("my") as y:
            push, pull = await linked_pair(x, y, capacity=4)
            task = asyncio.ensure_future(push.send_many([b"%d" % i for i in range(10)],
                                                        timeout=OP_S))
            for _ in range(50):  # until it waits for credits that will not come
                await asyncio.sleep(0.01)
                if not push.writable:
                    break
            assert not task.done()
            task.cancel()
            with pytest.raises(asyncio.CancelledError) as info:
                await task
            went = info.value.sent  # type: ignore[attr-defined]
            assert 1 <= went < 10
            got = [await pull.recv(timeout=OP_S) for _ in range(went)]
            assert got == [b"%d" % i for i in range(went)]
            with pytest.raises(a3m.Timeout):
                await pull.recv(timeout=0.3)

    run(main)


@pytest.mark.parametrize("call", ["send", "send_many"])
def test_a_send_that_waited_for_credits_goes_on_in_the_cork_window(call: str) -> None:
    """As the threaded sockets' (test_runtime_buffers.py): a send that had to wait for
    credits is part of a stream, so when the grant comes its messages wait in the cork
    window (the send buffer opens for what follows) instead of leaving at once, alone, as
    after a quiet spell. The aio retry tries with timeout=0 once it has awaited, and such a
    try alone never counted as a wait: each grant began with one call's messages alone."""
    window = 0.01  # (a long cork window: a quiet spell is easy to make)
    cap = 64  # a grant moves the edge by cap / 4 or more: room is left after the send
    first = [b"A%d" % i for i in range(8)] if call == "send_many" else [b"A0"]

    async def main() -> None:
        async with a3m.aio.Node("kx", cork_s=window) as x, a3m.aio.Node("ky") as y:
            push, pull = await linked_pair(x, y, capacity=cap)
            fill = [b"fill%d" % i for i in range(cap)]
            assert await push.send_many(fill, timeout=OP_S) == cap  # credits: none left

            async def stream() -> bool:
                if call == "send":
                    await push.send(first[0], timeout=OP_S)
                else:
                    assert await push.send_many(first, timeout=OP_S) == len(first)
                # (the await returned from the retry's try without yielding to the loop: no
                # turn ran since the send)
                return push.sync._sbuf.room > 0

            task = asyncio.ensure_future(stream())
            await asyncio.sleep(window * 3)  # longer than the window: no earlier send's cork
            assert not task.done()  # it waits for credits
            assert push.sync._sbuf.room == 0
            got: list[bytes] = []
            while len(got) < cap:  # the grant
                got += await pull.recv_many(cap - len(got), timeout=OP_S)
            assert got == fill
            opened = await asyncio.wait_for(task, OP_S)
            rest: list[bytes] = []
            while len(rest) < len(first):
                rest += await pull.recv_many(len(first) - len(rest), timeout=OP_S)
            assert rest == first
            assert opened, "the send buffer did not open after a send that waited for credits"

    run(main)


def test_waiting_on_several_sockets_is_asyncio_wait_over_their_receives() -> None:
    async def main() -> None:
        async with a3m.aio.Node("wx") as x, a3m.aio.Node("wy") as y:
            x.associate(y.id, y.address)
            pulls = [y.socket(a3m.PULL, f"in{i}") for i in range(3)]
            pushes = [x.socket(a3m.PUSH, f"out{i}") for i in range(3)]
            for push, pull in zip(pushes, pulls, strict=True):
                push.link(pull.id)
                assert await push.wait_linked(timeout=OP_S)
            tasks = {asyncio.ensure_future(p.recv(timeout=OP_S)): i for i, p in enumerate(pulls)}
            await pushes[1].send(b"one", timeout=OP_S)
            done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            assert [tasks[t] for t in done] == [1] and done.pop().result() == b"one"
            for t in pending:
                t.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
            await pushes[0].send(b"zero", timeout=OP_S)
            await pushes[2].send(b"two", timeout=OP_S)
            assert await pulls[0].recv(timeout=OP_S) == b"zero"  # the cancelled ones lost
            assert await pulls[2].recv(timeout=OP_S) == b"two"   # nothing

    run(main)


# ---------------------------------------------------------------------------- the driver

def test_no_io_thread_and_a_blocking_call_on_the_loop_is_refused() -> None:
    async def main() -> None:
        before = threading.active_count()
        async with a3m.aio.Node("tx") as x, a3m.aio.Node("ty") as y:
            assert threading.active_count() == before  # the loop drives both nodes
            push, pull = await linked_pair(x, y)
            with pytest.raises(a3m.UsageError, match="stall the loop"):
                pull.sync.recv(timeout=1)
            # a worker thread may use the blocking API of the same node
            got = asyncio.ensure_future(asyncio.to_thread(pull.sync.recv, OP_S))
            await asyncio.sleep(0.05)
            await push.send(b"to a thread", timeout=OP_S)
            assert await got == b"to a thread"
            sent = asyncio.ensure_future(asyncio.to_thread(push.sync.send, b"from a thread",
                                                           OP_S))
            assert await pull.recv(timeout=OP_S) == b"from a thread"
            await sent

    run(main)
    with pytest.raises(a3m.UsageError, match="coroutine"):
        a3m.aio.Node("outside")


def test_garbage_datagrams_are_read_in_bursts_counted_and_dropped() -> None:
    """A blast of datagrams that are not Exon: each is read (the reader callback drains the
    socket), counted as malformed, and the node goes on; the kernel's drops are reported."""
    n = 3000

    async def main() -> None:
        async with a3m.aio.Node("gx", secure=False) as x, \
                a3m.aio.Node("gy", secure=False) as y:
            push, pull = await linked_pair(x, y)
            def refused() -> int:  # not Exon (no version byte): counted, never delivered
                ex = y.stats["exon"]
                return int(ex["secure_refused"] + ex["malformed"] + ex["truncated"])

            before = refused()
            blaster = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            try:
                for i in range(n):
                    blaster.sendto(b"\xff garbage %d" % i, y.address)
                    if i % 200 == 0:
                        await asyncio.sleep(0)  # let the loop read (the kernel buffer is finite)
            finally:
                blaster.close()
            stats = y.stats
            drops = stats["rx_drops"]
            assert drops is None or drops >= 0
            deadline = time.monotonic() + OP_S
            while refused() - before < n - (drops or 0):
                assert time.monotonic() < deadline, y.stats
                await asyncio.sleep(0.01)
            await push.send(b"still here", timeout=OP_S)
            assert await pull.recv(timeout=OP_S) == b"still here"
            assert y.stats["loop_errors"] == 0

    run(main)


def test_an_idle_node_does_not_spin() -> None:
    """With nothing to do, the driver turns only on its timers (counted: a loop that spun
    would turn hundreds of thousands of times in the same wait)."""
    async def main() -> None:
        async with a3m.aio.Node("ix") as x, a3m.aio.Node("iy") as y:
            await linked_pair(x, y)
            await asyncio.sleep(0.1)
            drv = y.sync._driver
            before = drv.turns
            await asyncio.sleep(0.5)
            assert drv.turns - before < 200

    run(main)


def test_an_idle_node_has_no_periodic_turn() -> None:
    """A node with nothing to do (no link, no timer, no one waiting) arms no timer: a
    process holding thousands of idle nodes wakes none of them (was: one turn each every
    second, the driver's safety net). A coroutine that waits still gets its own safety net
    (changed() within a second) and leaves no future behind."""
    async def main() -> None:
        async with a3m.aio.Node("quiet-one") as x:
            x.socket(a3m.PULL, "sink")
            await asyncio.sleep(0.3)  # the start's turns are over
            drv = x.sync._driver
            before = drv.turns
            await asyncio.sleep(2.5)
            assert drv.turns == before
            await drv.changed(None)  # nothing changes: the safety net ends the wait
            assert drv._futures == []
            assert drv.turns == before

    run(main)


def test_a_wait_without_a_timeout_arms_no_timer_of_its_own() -> None:
    """A coroutine's wait without a timeout (a round trip's ``recv``) arms no timer: the
    driver's one safety net covers every waiter (was: a ``call_later`` and its cancel per
    wait, 2 a round trip, whose cancelled handles stayed in asyncio's heap). A wait with a
    timeout shorter than the net still gets its own, and a wait on a closed node ends."""
    async def main() -> None:
        loop = asyncio.get_running_loop()
        armed: list[str] = []
        real = loop.call_at

        def call_at(when: float, cb: Callable[..., object], *args: object,
                    **kw: Any) -> asyncio.TimerHandle:
            armed.append(getattr(cb, "__name__", ""))
            return real(when, cb, *args, **kw)

        loop.call_at = call_at  # type: ignore[method-assign]
        async with a3m.aio.Node("nt-x") as x, a3m.aio.Node("nt-y") as y:
            req, rep = await linked_reqrep(x, y)

            async def serve(n: int) -> None:
                for _ in range(n):
                    await rep.send(await rep.recv())

            server = asyncio.create_task(serve(300))
            del armed[:]
            for i in range(300):
                await req.send(b"q%d" % i)
                assert await req.recv() == b"q%d" % i
            await server
            assert armed.count("_wake") == 0  # (was 600)
            assert armed.count("_on_net") <= 2 * (1 + int(TEST_S))
            with pytest.raises(a3m.Timeout):
                await rep.recv(timeout=0.05)
            assert armed.count("_wake") == 1
            drv = y.sync._driver
        drv.stop()
        await asyncio.wait_for(drv.changed(None), OP_S)  # the net ends it: no hang

    run(main)


@pytest.mark.parametrize("eager", [True, False], ids=["asyncio-ready-queue", "no-ready-queue"])
def test_a_turn_that_wakes_a_coroutine_leaves_its_output_and_timer_until_it_ran(
        eager: bool) -> None:
    """The reader turn that hands a waiting ``recv`` its request wakes the coroutine before
    it takes its output and arms its timer (``LoopDriver._tail``): the reply is made before
    that work. On asyncio's own loops the turn runs the wake-ups it queued itself
    (``eager_wakes``: no loop iteration, no ``select(0)``, between a request and the
    coroutine that answers it); on a loop that shows no ready queue (uvloop's) the tail is
    scheduled behind them. Nothing is lost: the round trips go on, and no tail is left
    pending once the loop had a turn."""
    async def main() -> None:
        async with a3m.aio.Node("tl-x") as x, a3m.aio.Node("tl-y") as y:
            req, rep = await linked_reqrep(x, y)
            drv = y.sync._driver
            if not eager:
                drv._loop_ready = None  # as on uvloop
            pending: list[bool] = []

            async def serve(n: int) -> None:
                for _ in range(n):
                    got = await rep.recv()
                    pending.append(drv._tail_soon)  # the turn that woke us has not ended
                    await rep.send(got)

            server = asyncio.create_task(serve(50))
            for i in range(50):
                await asyncio.sleep(0.001)  # the server waits in recv before the request
                await req.send(b"t%d" % i)
                assert await req.recv(timeout=OP_S) == b"t%d" % i
            await server
            assert pending.count(True) >= 45, pending  # (a recv that found one there: no wake)
            if eager:
                # (a wake-up that finds the shared loop's ready queue holding something else,
                # the client's own under a loaded host, is left to the loop: 44 of 50 once)
                assert drv.eager_wakes >= 40, drv.eager_wakes
            else:
                assert drv.eager_wakes == 0
            await asyncio.sleep(0)
            assert drv._tail_soon is False

    run(main)


def test_rebind_keeps_the_links_and_the_stream() -> None:
    async def main() -> None:
        async with a3m.aio.Node("rx") as x, a3m.aio.Node("ry") as y:
            push, pull = await linked_pair(x, y)
            await push.send(b"before", timeout=OP_S)
            assert await pull.recv(timeout=OP_S) == b"before"
            old = x.address
            x.rebind("127.0.0.1:0")
            assert x.address != old
            for i in range(100):
                await push.send(b"%d" % i, timeout=OP_S)
            assert [await pull.recv(timeout=OP_S) for _ in range(100)] == \
                [b"%d" % i for i in range(100)]

    run(main)


def test_pushpull_through_the_fault_relay_exactly_once_in_order() -> None:
    """The threaded runtime's relay test on the event loop (loss, duplication, reordering)."""
    n = 5000

    async def main() -> None:
        net = {"loopback_datagram_size": 0}
        async with a3m.aio.Node("fa", **net) as x, a3m.aio.Node("fb", **net) as y:
            with FaultRelay({"fb": y.address}, loss=0.2, dup=0.1, reorder=0.2,
                            seed=11) as relay:
                x.associate("fb", relay.front("fb"))
                pull = y.socket(a3m.PULL, "sink", capacity=512)
                push = x.socket(a3m.PUSH, "source")
                push.link(pull.id)
                assert await push.wait_linked(timeout=OP_S)

                async def produce() -> None:
                    for i in range(n):
                        await push.send(b"%d" % i, timeout=60)

                async def consume() -> list[bytes]:
                    return [await pull.recv(timeout=60) for _ in range(n)]

                _, got = await asyncio.gather(produce(), consume())
                assert got == [b"%d" % i for i in range(n)]
                assert relay.stats.dropped > 10 and relay.stats.duplicated > 5
                with pytest.raises(a3m.Timeout):
                    await pull.recv(timeout=0.3)
                assert await x.flush(timeout=OP_S)

    run(main)


class FragilePull(Pull):
    """A PULL whose application hook fails on one message."""

    def on_data(self, link: L.Link, payload: bytes) -> None:
        if payload == b"boom":
            raise RuntimeError("on_data failed")
        super().on_data(link, payload)


def test_a_failing_hook_is_counted_and_loses_nothing_else_of_its_turn() -> None:
    async def main() -> None:
        async with a3m.aio.Node("ha") as x, a3m.aio.Node("hb") as y:
            x.associate("hb", y.address)
            y.register_socket_type("FRAGILE", FragilePull)
            pull = y.socket("FRAGILE", "sink")
            push = x.socket(a3m.PUSH, "source")
            push.link("hb/sink")
            assert await push.wait_linked(timeout=OP_S)
            drv = y.sync._driver
            drv.loop.remove_reader(drv._sock.fileno())  # hb reads nothing: one batch later
            try:
                for p in (b"1", b"2", b"boom", b"3", b"4"):
                    await push.send(p, timeout=OP_S)
                await asyncio.sleep(0.2)
            finally:
                drv.loop.add_reader(drv._sock.fileno(), drv._on_readable)
            assert [await pull.recv(timeout=OP_S) for _ in range(4)] == [b"1", b"2", b"3", b"4"]
            assert y.stats["event_errors"] == 1 and y.stats["loop_errors"] == 0

    run(main)


def test_close_hands_the_linger_to_a_thread_that_ends_by_itself() -> None:
    opts = {"rto_max_s": 0.25, "rto_initial_s": 0.1}  # linger = 4 x 0.25 s

    async def main() -> None:
        async with a3m.aio.Node("lb", **opts) as y:
            x = a3m.aio.Node("la", **opts)
            push, pull = await linked_pair(x, y)
            await push.send(b"x", timeout=OP_S)
            assert await pull.recv(timeout=OP_S) == b"x"
            assert await x.close(timeout=5) is True
            drv = x.sync._driver
            assert not drv.running
            with pytest.raises(a3m.Closed):
                x.socket(a3m.PUSH)
            lingerer = drv.lingerer
            assert lingerer is not None and lingerer.lingering
            deadline = time.monotonic() + OP_S
            while lingerer._io_thread.is_alive():
                assert time.monotonic() < deadline
                await asyncio.sleep(0.02)
            assert not lingerer.lingering and lingerer._sock.fileno() == -1
            assert x.sync._proto.is_finished()

    run(main)


def test_a_node_started_again_with_the_same_id_ends_the_linger() -> None:
    async def main() -> None:
        async with a3m.aio.Node("sb") as y:
            x = a3m.aio.Node("sa")
            port = x.address[1]
            push, pull = await linked_pair(x, y)
            await push.send(b"x", timeout=OP_S)
            assert await pull.recv(timeout=OP_S) == b"x"
            assert await x.close(timeout=5) is True
            old = x.sync._driver.lingerer
            assert old is not None and old.lingering
            x2 = a3m.aio.Node("sa", bind=f"127.0.0.1:{port}")  # the port is free at once
            try:
                assert not old.lingering and not old._io_thread.is_alive()
            finally:
                assert await x2.close(timeout=5)

    run(main)


def test_on_uvloop_when_the_application_chose_it() -> None:
    uvloop = pytest.importorskip("uvloop")

    async def main() -> None:
        assert "uvloop" in type(asyncio.get_running_loop()).__module__
        async with a3m.aio.Node("ux") as x, a3m.aio.Node("uy") as y:
            push, pull = await linked_pair(x, y, capacity=16)

            async def produce() -> None:
                for i in range(2000):
                    await push.send(b"%d" % i, timeout=OP_S)

            async def consume() -> list[bytes]:
                return [await pull.recv(timeout=OP_S) for _ in range(2000)]

            _, got = await asyncio.gather(produce(), consume())
            assert got == [b"%d" % i for i in range(2000)]
            rep = y.socket(a3m.REP, "rep")
            req = x.socket(a3m.REQ, "req")
            req.link(rep.id)
            for i in range(50):
                await req.send(b"q%d" % i, timeout=OP_S)
                await rep.send(await rep.recv(timeout=OP_S), timeout=OP_S)
                assert await req.recv(timeout=OP_S) == b"q%d" % i

    uvloop.run(asyncio.wait_for(main(), TEST_S))


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
@pytest.mark.parametrize("busy_poll_s", [200e-6, 0.0])
def test_busy_poll_is_used_for_round_trips_and_can_be_turned_off(busy_poll_s: float,
                                                                 loop: str) -> None:
    """After a request or a reply left, a waiting coroutine's loop polls before it sleeps
    (counted in poll_hits); ``busy_poll_s=0`` turns that off. The REP runs on its own event
    loop in another thread (on one loop, the other node's work is always ready: no poll).
    On asyncio's loop the poll watches the loop's selector; on uvloop, which shows none, the
    node's socket."""
    runner: Callable[[Awaitable[None]], None] = asyncio.run
    if loop == "uvloop":
        runner = pytest.importorskip("uvloop").run
    n = 200
    ready: queue.Queue[Any] = queue.Queue()
    hits: dict[str, int] = {}

    def server() -> None:
        async def serve() -> None:
            async with a3m.aio.Node("py", busy_poll_s=busy_poll_s) as y:
                rep = y.socket(a3m.REP, "rep")
                ready.put(y.address)
                for _ in range(n):
                    await rep.send(await rep.recv(timeout=OP_S), timeout=OP_S)
                hits["rep"] = y.sync._driver.poll_hits

        runner(serve())

    th = threading.Thread(target=server)
    th.start()

    async def main() -> None:
        async with a3m.aio.Node("px", busy_poll_s=busy_poll_s) as x:
            x.associate("py", ready.get(timeout=OP_S))
            req = x.socket(a3m.REQ, "req")
            req.link("py/rep")
            assert await req.wait_linked(timeout=OP_S)
            for i in range(n):
                await req.send(b"%d" % i, timeout=OP_S)
                assert await req.recv(timeout=OP_S) == b"%d" % i
            hits["req"] = x.sync._driver.poll_hits

    try:
        runner(asyncio.wait_for(main(), TEST_S))
    finally:
        th.join(timeout=TEST_S)
    total = hits["req"] + hits["rep"]
    assert total > 0 if busy_poll_s else total == 0


# ---------------------------------------------------------------------------- cookies

def test_cookies_in_the_loop_and_a_cancelled_recv_cookie_takes_nothing() -> None:
    """The cookie contract through a3m.aio: outcomes DELIVERED once the PULL's application
    took each message; a recv_cookie cancelled while it waits takes no outcome (the next
    one gets it); NOT_DELIVERED for the rest when the PULL closes; send_many's cookies."""

    async def main() -> None:
        async with a3m.aio.Node("akc-a") as a, a3m.aio.Node("akc-b") as b:
            push, pull = await linked_pair(a, b)
            waiting = asyncio.ensure_future(push.recv_cookie(timeout=OP_S))
            await asyncio.sleep(0.05)
            waiting.cancel()  # nothing to take yet: cancelled, it took nothing
            with pytest.raises(asyncio.CancelledError):
                await waiting
            for i in range(10):
                await push.send(b"%d" % i, cookie=i, timeout=OP_S)
            assert await push.send_many([b"10", b"11"], cookies=[10, 11], timeout=OP_S) == 2
            taken = [int(await pull.recv(timeout=OP_S)) for _ in range(4)]
            got = [await push.recv_cookie(timeout=OP_S) for _ in range(4)]
            assert sorted(c.value for c in got) == sorted(taken)
            assert {c.outcome for c in got} == {a3m.DELIVERED}
            assert push.cookies() == []
            await pull.close(timeout=OP_S)
            rest = [await push.recv_cookie(timeout=OP_S) for _ in range(8)]
            assert sorted(c.value for c in rest) == [i for i in range(12) if i not in taken]
            assert {c.outcome for c in rest} == {a3m.NOT_DELIVERED}

    run(main)


def test_aio_recv_waits_without_raising_would_block(monkeypatch: pytest.MonkeyPatch) -> None:
    """An a3m.aio recv tries with Socket._recv_now (None: nothing yet) rather than catching a
    WouldBlock from recv(timeout=0) on every wait; recv(timeout=0) still raises it, and a
    timeout still raises Timeout."""
    raised = [0]
    real = a3m.WouldBlock.__init__

    def counted(self: Exception, *args: Any) -> None:
        raised[0] += 1
        real(self, *args)

    async def main() -> None:
        async with a3m.aio.Node("alpha") as alpha, a3m.aio.Node("beta") as beta:
            req, rep = await linked_reqrep(alpha, beta)
            assert rep.sync._recv_now() is None
            monkeypatch.setattr(a3m.WouldBlock, "__init__", counted)

            async def serve() -> None:
                for _ in range(50):
                    await rep.send(await rep.recv(timeout=5), timeout=5)

            server = asyncio.create_task(serve())
            for i in range(50):
                await req.send(b"%d" % i, timeout=5)
                assert await req.recv(timeout=5) == b"%d" % i
            await server
            assert raised[0] == 0, f"{raised[0]} WouldBlock raised in 50 round trips"
            with pytest.raises(a3m.WouldBlock):
                await rep.recv(timeout=0)
            with pytest.raises(a3m.Timeout):
                await rep.recv(timeout=0.05)

    asyncio.run(main())


def test_recv_now_takes_what_is_there_and_raises_closed() -> None:
    with a3m.Node("alpha") as alpha, a3m.Node("beta") as beta:
        alpha.associate("beta", beta.address)
        pull = beta.socket(a3m.PULL, "sink")
        push = alpha.socket(a3m.PUSH, "source")
        push.link(("beta", "sink"))
        assert push.wait_linked(timeout=5)
        assert pull._recv_now() is None
        for i in range(3):
            push.send(b"%d" % i, timeout=5)
        got = [pull.recv(timeout=5)]  # (the first waits; the others may be in the inbox)
        deadline = time.monotonic() + 30  # (a hang guard, not a speed)
        while len(got) < 3 and time.monotonic() < deadline:
            m = pull._recv_now()
            if m is not None:
                got.append(m)
        assert got == [b"0", b"1", b"2"]
        pull.close(timeout=5)
        with pytest.raises(a3m.Closed):
            pull._recv_now()


def test_a_close_with_messages_past_the_exon_window_delivers_them_all() -> None:
    """The asyncio node's close, as the threaded one's (test_runtime_linger.py): what waits
    above Exon's window goes into Exon before Exon closes, and nothing is dropped."""
    async def main() -> None:
        async with a3m.aio.Node("adrain-rcv") as y:
            x = a3m.aio.Node("adrain-snd", window_per_peer=16, window_global=16)
            push, pull = await linked_pair(x, y, capacity=1000)
            sent = [b"a-%d" % i + b"." * 200_000 for i in range(100)]
            for m in sent:  # one by one: corked, they leave with the node's next output
                await push.send(m, timeout=OP_S)
            assert await x.close(timeout=120) is True
            got = [await pull.recv(timeout=OP_S) for _ in sent]
            assert sorted(got) == sorted(sent)
            with pytest.raises(a3m.Timeout):
                await pull.recv(timeout=0.3)

    run(main)


def test_a_send_the_pacer_holds_back_arms_the_loop_timer_by_its_release() -> None:
    """As the threaded driver's: a send the pacer holds back leaves no output but an earlier
    deadline (its release); ``flush`` arms the loop's timer for it. Before, it looked at
    the deadline only after sending something, and the held tokens waited for the timer
    armed before (the record's idle release, 1 s later)."""
    from a3m.aio.driver import LoopDriver
    from a3m.exon import Delivered, ExonConfig, ExonProtocol, MemoryClockStore

    async def main() -> None:
        got: list[bytes] = []

        def collect(events: Any, now: float) -> None:
            got.extend(ev.payload for ev in events if isinstance(ev, Delivered))
            events.clear()

        cfg = ExonConfig(secure=False)
        tx = LoopDriver(ExonProtocol("tx", cfg, rng=Random(1), clock_store=MemoryClockStore(1)),
                        "127.0.0.1:0", lambda ev, now: ev.clear())
        rx = LoopDriver(ExonProtocol("rx", cfg, rng=Random(2), clock_store=MemoryClockStore(1)),
                        "127.0.0.1:0", collect)
        relay = FaultRelay({"rx": rx.address}, delay_s=0.005)  # a path Exon paces
        try:
            tx.proto.associate("rx", relay.front("rx"))
            tx.proto.send("rx", b"first", time.monotonic())
            tx.flush()
            end = time.monotonic() + 30
            while time.monotonic() < end:  # the first exchange done, the timer far
                await asyncio.sleep(0.01)
                path = tx.proto._paths.get("rx")
                rec = tx.proto._sr.get("rx")
                if (b"first" in got and path is not None and path.pacing_rate > 0
                        and rec is not None and not rec.tokens
                        and tx._timer_at > time.monotonic() + 0.3):
                    break
            else:
                raise AssertionError("the paced path never went idle")
            now = time.monotonic()
            path.paced(10 * 1400, now)  # the bucket in debt: the next sends wait
            tx.proto.send("rx", b"held-1", now)  # held; it asks for slots
            tx._send(tx.proto.datagrams_to_send(now))  # (the slot request, as flush would)
            tx.proto.send("rx", b"held", now)
            assert len(rec.queue) == 2 and not tx.proto.has_output()  # nothing to send
            t = tx.proto.next_timer()
            assert t is not None and t < now + 0.1
            tx.flush()
            assert tx._timer_at <= t  # armed for the release
            end = time.monotonic() + 30
            while b"held" not in got and time.monotonic() < end:
                await asyncio.sleep(0.005)
            assert b"held" in got
        finally:
            tx.stop()
            rx.stop()
            relay.close()

    run(main)


def test_an_exit_a_woken_coroutine_raises_leaves_no_turn_tail_pending() -> None:
    """A ``SystemExit`` raised by a coroutine the reader turn ran itself goes out of the
    loop, as from any callback; the turn's tail still ran, so a node used again would not
    wait for a tail that never comes."""
    drivers: list[Any] = []

    async def main() -> None:
        async with a3m.aio.Node("ex-x") as x, a3m.aio.Node("ex-y") as y:
            req, rep = await linked_reqrep(x, y)
            drivers.append(y.sync._driver)

            async def serve() -> None:
                await rep.recv()
                raise SystemExit(3)

            servers.append(asyncio.create_task(serve()))
            await asyncio.sleep(0.01)
            await req.send(b"bye")
            await asyncio.sleep(OP_S)  # (the exit ends the loop's run first)

    servers: list[asyncio.Task[None]] = []
    loop = asyncio.new_event_loop()
    try:
        with pytest.raises(SystemExit):
            loop.run_until_complete(main())
        assert drivers and drivers[0]._tail_soon is False  # (looked at before any other turn)
    finally:
        for task in servers:
            if task.done():
                task.exception()  # (retrieved: SystemExit(3))
        rest = asyncio.all_tasks(loop)
        for task in rest:
            task.cancel()
        loop.run_until_complete(asyncio.gather(*rest, return_exceptions=True))
        loop.close()
