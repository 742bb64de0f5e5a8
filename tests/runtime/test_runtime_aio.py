"""a3m.aio: the same sockets for asyncio, never blocking the event loop."""

from __future__ import annotations

import asyncio

import pytest

import a3m
import a3m.aio


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
