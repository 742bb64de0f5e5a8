"""The batch API: ``send_many`` and ``recv_many`` (and their asyncio forms) deliver exactly
once and in order, like loops of ``send``/``recv``; they say how many went when the windows
stop them, and raise as ``send``/``recv`` do when nothing could be done."""

from __future__ import annotations

import asyncio
import threading
from contextlib import AbstractContextManager
from typing import Any

import pytest

import a3m
import a3m.aio

from .streams import push_pull


def pair(capacity: int = 256
         ) -> AbstractContextManager[tuple[a3m.Node, a3m.Node, a3m.Socket, a3m.Socket]]:
    return push_pull("batch", capacity)


def test_a_stream_of_batches_arrives_once_in_order() -> None:
    with pair() as (a, b, push, pull):
        msgs = [b"m%d" % i for i in range(20_000)]
        got: list[bytes] = []

        def reader() -> None:
            while len(got) < len(msgs):
                got.extend(pull.recv_many(500, timeout=30))

        t = threading.Thread(target=reader)
        t.start()
        for i in range(0, len(msgs), 1000):
            assert push.send_many(msgs[i:i + 1000], timeout=30) == 1000
        t.join(60)
        assert got == msgs
        with pytest.raises(a3m.Timeout):
            pull.recv_many(10, timeout=0.2)  # nothing more: no duplicate


def test_the_windows_stop_a_batch_and_it_says_how_far_it_went() -> None:
    with pair(capacity=16) as (a, b, push, pull):
        assert push.send_many([b"x%d" % i for i in range(100)], timeout=1.0) == 16
        with pytest.raises(a3m.WouldBlock):  # no credit left: nothing could go
            push.send_many([b"y"], timeout=0)
        first = pull.recv_many(5, timeout=5)
        assert 1 <= len(first) <= 5 and first == [b"x%d" % i for i in range(len(first))]
        rest = pull.recv_many(100, timeout=5)
        while len(first) + len(rest) < 16:
            rest += pull.recv_many(100, timeout=5)
        assert first + rest == [b"x%d" % i for i in range(16)]
        with pytest.raises(a3m.UsageError):
            pull.recv_many(0)
        with pytest.raises(a3m.UsageError):
            push.send_many(["not bytes"])  # type: ignore[list-item]


def test_a_batch_of_other_buffers_or_with_an_oversize_message() -> None:
    """A list with a bytearray or a memoryview among its bytes goes the checked way (the send
    buffer takes only bytes within the largest message, checked in one pass): all arrive, as
    bytes, in order; a list with one message too large raises before any of it is sent."""
    with pair() as (a, b, push, pull):
        sent: list[bytes] = []
        for i in range(30):  # a stream (the send buffer opens), within the link's 256 credits
            batch: list[Any] = [b"a%d" % i, bytearray(b"b%d" % i), memoryview(b"c%d" % i),
                                b"d%d" % i]
            assert push.send_many(batch, timeout=10) == 4
            sent += [bytes(x) for x in batch]
            assert push.send_many([b"e%d" % i] * 3, timeout=10) == 3
            sent += [b"e%d" % i] * 3
        too_big = b"x" * a._core.max_message_size
        with pytest.raises(a3m.MessageTooLarge):
            push.send_many([b"fits", too_big], timeout=1)
        got: list[bytes] = []
        while len(got) < len(sent):
            got += pull.recv_many(500, timeout=10)
        assert got == sent
        with pytest.raises(a3m.Timeout):
            pull.recv_many(10, timeout=0.2)  # nothing of the refused list went


def test_the_asyncio_forms() -> None:
    async def main() -> list[bytes]:
        async with a3m.aio.Node("aio-batch-a") as a, a3m.aio.Node("aio-batch-b") as b:
            a.associate(b.id, b.address)
            pull = b.socket(a3m.PULL, "in")
            push = a.socket(a3m.PUSH, "out")
            push.link((b.id, "in"))
            assert await push.wait_linked(timeout=5)
            got: list[bytes] = []

            async def read() -> None:
                while len(got) < 3000:
                    got.extend(await pull.recv_many(256, timeout=10))

            sent, _ = await asyncio.gather(
                push.send_many([b"%d" % i for i in range(3000)], timeout=30), read())
            assert sent == 3000
            with pytest.raises(a3m.Timeout):
                await pull.recv_many(1, timeout=0.2)
            return got

    assert asyncio.run(main()) == [b"%d" % i for i in range(3000)]


def test_send_many_travels_as_batches_and_so_does_a_stream_of_sends() -> None:
    """BATCH on the wire: a ``send_many`` costs the transport one message per BATCH, and
    ``send`` one by one in a tight loop is gathered within ``cork_s`` the same way."""
    with pair(capacity=4096) as (a, b, push, pull):
        got: list[bytes] = []

        def reader(n: int) -> None:
            while len(got) < n:
                got.extend(pull.recv_many(1000, timeout=30))

        t = threading.Thread(target=reader, args=(4000,))
        t.start()
        before = a.stats["exon"]["tokens_sent"]
        for i in range(0, 2000, 500):
            assert push.send_many([b"b%d" % j for j in range(i, i + 500)], timeout=30) == 500
        batched = a.stats["exon"]["tokens_sent"] - before
        for i in range(2000):
            push.send(b"s%d" % i, timeout=30)
        t.join(60)
        one_by_one = a.stats["exon"]["tokens_sent"] - before - batched
        assert got == [b"b%d" % i for i in range(2000)] + [b"s%d" % i for i in range(2000)]
        assert batched <= 8  # 500 x ~5 B: one BATCH per call
        assert one_by_one < 1000  # most sends shared a BATCH (all of them alone: 2000)


def test_cork_s_is_checked_and_zero_still_delivers() -> None:
    """(That ``cork_s=0`` hands each send off alone is not observed here: in one process a
    turn under way holds sends too. The cross-process datagram count is in
    tests/runtime/test_runtime_endpoint.py.)"""
    with push_pull("cork", cork_s=0) as (_, _, push, pull):
        for i in range(50):
            push.send(b"%d" % i, timeout=5)
            assert pull.recv(timeout=5) == b"%d" % i
        with pytest.raises(a3m.UsageError):
            a3m.Node("cork-c", cork_s=-1)
