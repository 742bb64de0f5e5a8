"""The node layer's own work for a REQ/REP round trip, warm: two ``NodeCore``s joined in
memory (``tests/core/pipe.py``'s way, no Exon, no sockets, no I/O), one thread.

Each round trip: REQ ``try_send``, REP's delivery and ``try_recv``, REP ``try_send``, REQ's
delivery and ``try_recv``, the credits both ways. Repeated, the code and data stay in the
caches: this is the floor of what the core costs, and what a change to the build (compile
flags, a profile: docs/performance.md, "The compiled fast path") moves with no noise from
wake-ups. Run it on two builds interleaved (``PYTHONPATH`` set to each tree's ``src``)::

    .venv/bin/python bench/core_warm.py [--round-trips 50000] [--sets 3]

Prints one JSON object: microseconds a round trip, both sides, per set.
"""

from __future__ import annotations

import argparse
import json
import time
from random import Random

import a3m
from a3m.core.node_core import NodeCore
from a3m.patterns import register_builtin

WARMUP = 2000
BODY = b"x" * 64


def _pair() -> tuple[NodeCore, NodeCore]:
    return register_builtin(NodeCore("a", Random(1))), register_builtin(NodeCore("b", Random(2)))


def _hand_over(src: NodeCore, dst: NodeCore) -> None:
    for _node, data in src.take_output():
        dst.receive(src.node_id, data, 0.0)


def measure(round_trips: int) -> float:
    """Microseconds a round trip, both sides, after ``WARMUP`` round trips."""
    a, b = _pair()
    req, rep = a.create("REQ", "req"), b.create("REP", "rep")
    req.link(("b", "rep"), 0.0)
    for _ in range(10):
        _hand_over(a, b)
        _hand_over(b, a)
    if not req.is_linked(None):
        raise RuntimeError("the in-memory link did not come up")

    def one() -> None:
        if not req.try_send(BODY, None):
            raise RuntimeError("REQ could not send")
        _hand_over(a, b)
        if rep.try_recv() is None or not rep.try_send(BODY, None):
            raise RuntimeError("REP did not get the request")
        _hand_over(b, a)
        if req.try_recv() is None:
            raise RuntimeError("REQ did not get the reply")
        _hand_over(a, b)  # (credits and acknowledgements, either way)
        _hand_over(b, a)

    for _ in range(WARMUP):
        one()
    t0 = time.perf_counter()
    for _ in range(round_trips):
        one()
    return (time.perf_counter() - t0) / round_trips * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--round-trips", type=int, default=50_000)
    ap.add_argument("--sets", type=int, default=3)
    args = ap.parse_args()
    sets = [round(measure(args.round_trips), 3) for _ in range(args.sets)]
    print(json.dumps({"bench": "core_warm", "round_trip_us": sets, "compiled": a3m.COMPILED,
                      "round_trips": args.round_trips}))


if __name__ == "__main__":
    main()
