"""CPU of one REQ/REP round trip without sockets or threads: two simulated node hosts (Exon,
secure layer, core, patterns) hand datagrams to each other directly; the time is both sides'
sans-I/O work, the floor under ``a3m bench reqrep``'s latency beside the kernel's and the
runtime's. ``--layers`` shares it out by package as cProfile's own time does::

    .venv/bin/python bench/rr_path.py [--insecure] [--cookies] [--layers] [--count]
                                      [--round-trips 20000]

``--cookies``: each request carries a cookie (its outcome read every 64 round trips).

``--count``: the work of one round trip in units that do not move with the CPU's speed, per
layer (where the code runs: exon.secure, exon, core, patterns, harness, stdlib): Python-level
function calls, calls into C (builtins, and a3m's compiled modules, which ``sys.setprofile``
sees as C calls only: run it once with ``A3M_PURE_PYTHON=1`` too), memory allocations (every
PyMem/PyObject allocation, counted by a small C module built on the fly from
``bench/alloc_count.c``; "n/a" without a C compiler), and datagrams and their bytes.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import time
from collections import Counter
from random import Random

from a3m.exon import ExonConfig
from a3m.testing.sim_node import NodeHost

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from work_units import WorkCounter  # noqa: E402

LAYERS = (("/a3m/exon/secure/", "exon.secure"), ("/a3m/exon/", "exon"), ("/a3m/core/", "core"),
          ("/a3m/patterns/", "patterns"), ("/a3m/testing/", "harness"), ("rr_path", "harness"))


class RoundTrips:
    def __init__(self, secure: bool, cookies: bool = False) -> None:
        self.cookies = cookies
        self.count = 0
        cfg = ExonConfig(secure=secure)
        rng = Random(1)
        self.cli, self.srv = NodeHost("cli", rng, cfg), NodeHost("srv", rng, cfg)
        self.cli.proto.associate("srv", "srv")
        self.srv.proto.associate("cli", "cli")
        self.hosts = {"cli": self.cli, "srv": self.srv}
        self.now = 0.0
        self.datagrams = 0
        self.wire_bytes = 0
        self.rep = self.srv.core.create("REP", "rep")
        self.req = self.cli.core.create("REQ", "req")
        self.req.link(("srv", "rep"), 0.0)
        for _ in range(200):
            self.now += 0.0001
            for h in (self.cli, self.srv):
                self._move(h)
                t = h.next_timer()
                if t is not None and t <= self.now:
                    h.handle_timer(self.now)
        if not self.req.is_linked():
            raise RuntimeError("the REQ did not link")

    def _move(self, h: NodeHost) -> None:
        src = "cli" if h is self.cli else "srv"
        for data, addr in h.datagrams_to_send(self.now):
            self.datagrams += 1
            self.wire_bytes += len(data)
            self.hosts[addr].receive_datagram(data, src, self.now)

    def one(self) -> None:
        self.now += 0.0001
        self.count += 1
        if not self.req.try_send(b"x" * 64, self.count if self.cookies else None):
            raise RuntimeError("REQ could not send")
        self._move(self.cli)  # the request goes out and into the server
        self._move(self.srv)  # the server's events reach its core
        got = self.rep.try_recv()
        if got is None or not self.rep.try_send(got.payload):
            raise RuntimeError("no request at the REP")
        self._move(self.srv)
        self._move(self.cli)
        if self.req.try_recv() is None:
            raise RuntimeError("no reply at the REQ")
        if self.cookies and self.count % 64 == 0 and len(self.req.take_cookies(64)) != 64:
            raise RuntimeError("outcomes missing")


def count_work(rt: RoundTrips, n: int) -> str:
    """The units of one round trip (``--count``), per layer, with datagrams and bytes."""
    import a3m

    work = WorkCounter()
    d0, b0 = rt.datagrams, rt.wire_bytes
    work.start()
    for _ in range(n):
        rt.one()
    work.stop()
    top = "\n" + work.top(n) if work.by_function else ""
    return top + "\n" + work.table(n, f"work per round trip ({'compiled' if a3m.COMPILED else 'Python sources'}"
                         f", both sides; {(rt.datagrams - d0) / n:.2f} datagrams, "
                         f"{(rt.wire_bytes - b0) / n:.0f} bytes on the wire)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--insecure", action="store_true")
    ap.add_argument("--layers", action="store_true")
    ap.add_argument("--cookies", action="store_true")
    ap.add_argument("--count", action="store_true")
    ap.add_argument("--round-trips", type=int, default=20000)
    args = ap.parse_args()
    rt = RoundTrips(not args.insecure, args.cookies)
    for _ in range(2000):
        rt.one()
    n = args.round_trips
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(n):
        rt.one()
    us = (time.perf_counter() - t0) / n * 1e6
    cpu = (time.process_time() - c0) / n * 1e6
    # The CPU time beside the wall time: on a shared machine the wall time also counts the
    # time this process waited for a CPU.
    print(f"{'opt-out' if args.insecure else 'secure'}{' with cookies' if args.cookies else ''}: "
          f"{us:.1f} us per round trip, both sides ({cpu:.1f} us of CPU)")
    if args.layers:
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(n // 4):
            rt.one()
        prof.disable()
        own: Counter[str] = Counter()
        for (path, _, _), (_, _, tottime, _, _) in pstats.Stats(prof).stats.items():  # type: ignore[attr-defined]
            layer = next((name for key, name in LAYERS if key in path), "builtins, stdlib")
            own[layer] += tottime
        total = sum(own.values())
        for layer, t in own.most_common():
            print(f"  {layer:17s} {100 * t / total:5.1f} %  ({us * t / total:.1f} us)")
    if args.count:  # last: the allocation counter stays installed
        print(count_work(rt, 2000))


if __name__ == "__main__":
    main()
