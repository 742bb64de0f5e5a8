"""The work of one REQ/REP round trip through ``a3m.aio``, both nodes on one asyncio loop (one
process), per layer (``bench/work_units.py``: Python calls, C calls, allocations), with
``busy_poll_s=0``::

    .venv/bin/python bench/rr_aio_work.py [--round-trips 2000]

``A3M_COUNT_TOP=1`` also lists the most frequent calls and where the allocations are made.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from work_units import WorkCounter  # noqa: E402

import a3m  # noqa: E402
import a3m.aio  # noqa: E402


async def main(n: int) -> None:
    work = WorkCounter()
    async with a3m.aio.Node("c-rx", busy_poll_s=0) as rx, \
            a3m.aio.Node("c-tx", busy_poll_s=0) as tx:
        tx.associate("c-rx", rx.address)
        rep = rx.socket(a3m.REP, "rep")
        req = tx.socket(a3m.REQ, "req")
        req.link("c-rx/rep")
        assert await req.wait_linked(timeout=30)

        async def server(k: int) -> None:
            for _ in range(k):
                await rep.send(await rep.recv())
        srv = asyncio.ensure_future(server(n + 300))
        body = b"x" * 64
        for i in range(n + 300):
            if i == 300:
                work.start()
            await req.send(body)
            await req.recv()
        work.stop()
        await srv
    print(work.table(n, "a3m.aio, one loop, both nodes, per round trip "
                        f"({'compiled' if a3m.COMPILED else 'Python sources'})"))
    if os.environ.get("A3M_COUNT_TOP"):
        print(work.top(n, 40))


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--round-trips", type=int, default=2000)
    asyncio.run(main(ap.parse_args().round_trips))
