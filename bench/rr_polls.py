"""How a REQ/REP client and server wait, in running nodes: per process the leader turns, the
waits a brief poll ended (``Driver.poll_hits``), the waits that polled at all, and the poll
choice's two averages (``runtime/poll_choice.py``); for the client, the round trips grouped by
(poll hits, leader turns) with each group's median. Secure by default::

    .venv/bin/python bench/rr_polls.py [--seconds 3] [--insecure]

The client is pinned to CPU 0, the server to CPU 1, as ``a3m bench``'s spread placement.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import time
from collections import defaultdict
from typing import Any


def _count_polls() -> None:
    from a3m.runtime import driver

    poll = driver.Driver._poll

    def counted(self: Any, *a: Any) -> bool:
        self.polls = getattr(self, "polls", 0) + 1
        return poll(self, *a)

    driver.Driver._poll = counted  # type: ignore[method-assign]


def _waits(drv: Any) -> str:
    c = drv._poll_choice
    return (f"leader turns {drv.leader_turns}, polled {getattr(drv, 'polls', 0)}, "
            f"poll hits {drv.poll_hits}, averages polling {c.poll_s * 1e6:.1f} us / "
            f"sleeping {c.block_s * 1e6:.1f} us")


def _server(ready: Any, out: Any, secure: bool) -> None:
    import a3m

    os.sched_setaffinity(0, {1})
    _count_polls()
    with a3m.Node("polls-rep", secure=secure) as node:
        rep = node.socket(a3m.REP, "rep")
        ready.put(node.address)
        served = 0
        try:
            while True:
                rep.send(rep.recv(timeout=3), timeout=5)
                served += 1
        except a3m.Timeout:
            pass
        out.put(f"server: {served} requests; {_waits(node._driver)}")


def _client(address: Any, seconds: float, secure: bool) -> None:
    import a3m

    os.sched_setaffinity(0, {0})
    _count_polls()
    with a3m.Node("polls-req", secure=secure) as node:
        drv = node._driver
        node.associate("polls-rep", tuple(address))
        req = node.socket(a3m.REQ, "req")
        req.link("polls-rep/rep")
        if not req.wait_linked(timeout=10):
            raise RuntimeError("could not link")
        body = b"x" * 64
        for _ in range(500):
            req.send(body)
            req.recv()
        groups: dict[tuple[int, int], list[float]] = defaultdict(list)
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            hits, turns = drv.poll_hits, drv.leader_turns
            t = time.perf_counter()
            req.send(body)
            req.recv()
            groups[(drv.poll_hits - hits, drv.leader_turns - turns)].append(
                time.perf_counter() - t)
        n = sum(len(v) for v in groups.values())
        print(f"client: {n} round trips; {_waits(drv)}")
        for (hits, turns), v in sorted(groups.items(), key=lambda kv: -len(kv[1]))[:5]:
            print(f"  {hits} poll hits, {turns} leader turns: {100 * len(v) / n:.1f} % of "
                  f"round trips, p50 {statistics.median(v) * 1e6:.1f} us")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--insecure", action="store_true")
    args = ap.parse_args()
    ctx = mp.get_context("spawn")
    ready, out = ctx.Queue(), ctx.Queue()
    server = ctx.Process(target=_server, args=(ready, out, not args.insecure))
    server.start()
    address = ready.get(timeout=60)
    _client(address, args.seconds, not args.insecure)
    print(out.get(timeout=60))
    server.join()


if __name__ == "__main__":
    main()
