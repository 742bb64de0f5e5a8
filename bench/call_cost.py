"""Microseconds per ``Socket.send`` and per ``Socket.recv`` call in a loop: both nodes in this
process, 100k x 64 B into a PULL with room for all (the I/O threads drain and deliver
meanwhile, on the same GIL)::

    .venv/bin/python bench/call_cost.py [--messages 100000]
"""

from __future__ import annotations

import argparse
import time

import a3m


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=100_000)
    n = ap.parse_args().messages
    with a3m.Node("cost-a") as a, a3m.Node("cost-b") as b:
        a.associate(b.id, b.address)
        pull = b.socket(a3m.PULL, "in", capacity=2 * n, capacity_max=0)
        push = a.socket(a3m.PUSH, "out")
        push.link((b.id, "in"))
        if not push.wait_linked(timeout=5):
            raise SystemExit("could not link")
        msg = b"x" * 64
        t0 = time.perf_counter()
        for _ in range(n):
            push.send(msg)
        send_us = (time.perf_counter() - t0) / n * 1e6
        got = 0
        while got < 1000:  # the first ones, then let the rest arrive
            got += len(pull.recv_many(1000 - got, timeout=10))
        time.sleep(1.0)
        t0 = time.perf_counter()
        for _ in range(n - got):
            pull.recv(timeout=10)
        recv_us = (time.perf_counter() - t0) / (n - got) * 1e6
    print(f"send {send_us:.2f} us, recv {recv_us:.2f} us per call")


if __name__ == "__main__":
    main()
