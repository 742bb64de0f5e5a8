"""REQ/REP through ``a3m.aio`` across two processes (server on CPU 1, client on CPU 0), no
busy poll: prints the client's p50 and p99. Small and quick, for interleaved A/B pairs of two
builds (run each with ``PYTHONPATH`` set to that tree's ``src``)::

    .venv/bin/python bench/aio_rr.py [--round-trips 20000] [--loop asyncio|uvloop]

``a3m bench reqrep --asyncio`` measures the same beside pyzmq.asyncio.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import time
from typing import Any

WARMUP = 500


def _run(loop: str, coro: Any) -> None:
    if loop == "uvloop":
        import uvloop
        uvloop.run(coro)
    else:
        asyncio.run(coro)


def server(q: Any, n: int, loop: str) -> None:
    os.sched_setaffinity(0, {1 % os.cpu_count()})  # type: ignore[operator]
    import a3m
    import a3m.aio

    async def main() -> None:
        async with a3m.aio.Node("srv", busy_poll_s=0) as node:
            rep = node.socket(a3m.REP, "rep")
            q.put(node.address)
            for _ in range(n):
                await rep.send(await rep.recv())
            await asyncio.sleep(0.2)  # the last reply's ACK
    _run(loop, main())


def client(addr: Any, n: int, loop: str, out: Any) -> None:
    os.sched_setaffinity(0, {0})
    import a3m
    import a3m.aio

    async def main() -> None:
        async with a3m.aio.Node("cli", busy_poll_s=0) as node:
            node.associate("srv", addr)
            req = node.socket(a3m.REQ, "req")
            req.link("srv/rep")
            assert await req.wait_linked(timeout=30)
            body = b"x" * 64
            lat = []
            for _ in range(n):
                t = time.perf_counter_ns()
                await req.send(body)
                await req.recv()
                lat.append(time.perf_counter_ns() - t)
            lat = sorted(lat[WARMUP:])
            out.put((lat[len(lat) // 2] / 1000, lat[int(len(lat) * 0.99)] / 1000))
    _run(loop, main())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--round-trips", type=int, default=20000)
    ap.add_argument("--loop", choices=("asyncio", "uvloop"), default="asyncio")
    args = ap.parse_args()
    n = args.round_trips + WARMUP
    ctx = mp.get_context("spawn")
    q, out = ctx.Queue(), ctx.Queue()
    s = ctx.Process(target=server, args=(q, n, args.loop))
    s.start()
    c = ctx.Process(target=client, args=(q.get(timeout=60), n, args.loop, out))
    c.start()
    p50, p99 = out.get(timeout=600)
    c.join(60)
    s.join(60)
    print(f"{args.loop} p50 {p50:.0f} us p99 {p99:.0f} us")


if __name__ == "__main__":
    main()
