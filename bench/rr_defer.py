"""How much of a sleeping REQ/REP round trip the server's core work costs on the critical
path: the REP server's request handled three ways, the client unchanged, interleaved::

    .venv/bin/python bench/rr_defer.py [--sets 10] [--round-trips 8000]

- ``base``: ``rep.send(rep.recv())``, as an application does;
- ``after``: the request's payload is taken straight from the engine's event, the reply
  encoded on the link and handed to Exon and sent at once; then, after its ``sendmmsg``, the
  request goes through the core as usual (dispatch, sequence and credits, the pattern's
  queue, ``recv``'s bookkeeping and FLOW), so both sides' state ends as after ``base``;
- ``before``: the same, with the core's work done before the reply is sent;
- ``skip``: the same, with the request never run through the core at all (the REP's
  credits set so high that no FLOW is due in the run): what a round trip would cost if the
  core's work per message were gone, as a native data path would make it.

A measurement, not a design: ``after`` and ``before`` reach into the node's internals, skip
the checks a real path needs, and run the application's echo under the node's lock. ``after``
against ``base`` bounds what deferring the core's work past the reply could save on one side;
``before`` against ``after`` says whether the saving is the order or the shorter loop;
``skip`` against ``after``, what the work itself costs. Every mode's REP has the same
(large) capacity.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import time
from collections import deque
from typing import Any

WARMUP = 500
MODES = ("base", "after", "before", "skip")
CAPACITY = 1 << 20  # no FLOW due within a run: ``skip`` never counts a delivery


def server(q: Any, n: int, mode: str) -> None:
    os.sched_setaffinity(0, {1 % os.cpu_count()})  # type: ignore[operator]
    import a3m
    from a3m.core import message as m
    from a3m.exon.events import Delivered

    with a3m.Node("srv", busy_poll_s=0) as node:
        rep = node.socket(a3m.REP, "rep", capacity=CAPACITY)
        q.put(node.address)
        rep.send(rep.recv())  # the link's set-up
        if mode == "base":
            for _ in range(n - 1):
                rep.send(rep.recv())
        else:
            drv, core, proto, rc = node._driver, node._core, node._proto, rep._core
            requests: deque[tuple[str, str, bytes, bytes]] = deque()
            handle = drv._on_events

            def on_events(events: Any, now: float) -> None:
                while events:
                    ev = events.popleft()
                    if type(ev) is Delivered and len(ev.payload) > 8 \
                            and ev.payload[3] == m.DATA:
                        _, src_tag, dst_tag, _, _, _, payload = m.decode_sequenced(ev.payload)
                        if dst_tag == "rep":
                            proto.consumed(len(ev.payload))
                            requests.append((ev.source, src_tag, ev.payload, payload))
                            continue
                    handle(deque([ev]), now)

            def through_core(src: str, data: bytes, now: float) -> None:
                core.receive(src, data, now)
                rc.try_recv()
                rc._owed = None  # (the reply went already)

            drv._on_events = on_events
            for _ in range(n - 1):
                with drv.lock:
                    while not requests:
                        drv.wait(1.0)
                    src, src_tag, data, payload = requests.popleft()
                    link = rc.links[(src, src_tag)]
                    now = time.monotonic()
                    if mode == "before":
                        through_core(src, data, now)
                    seq = link.next_seq
                    link.next_seq = seq + 1
                    link.send.sent += 1
                    proto.send(src, m.encode_with_head(rc._head(link), seq, payload), now)
                    drv.flush()
                    if mode == "after":
                        through_core(src, data, now)
                    node._after_call()
        time.sleep(0.3)


def client(addr: Any, n: int, out: Any) -> None:
    os.sched_setaffinity(0, {0})
    import a3m

    with a3m.Node("cli", busy_poll_s=0) as node:
        node.associate("srv", addr)
        req = node.socket(a3m.REQ, "req")
        req.link("srv/rep")
        assert req.wait_linked(timeout=30)
        body = b"x" * 64
        lat = []
        for _ in range(n):
            t = time.perf_counter_ns()
            req.send(body)
            if req.recv() != body:
                raise RuntimeError("a wrong reply")
            lat.append(time.perf_counter_ns() - t)
        lat = sorted(lat[WARMUP:])
        out.put(lat[len(lat) // 2] / 1000)


def run(n: int, mode: str) -> float:
    ctx = mp.get_context("spawn")
    q, out = ctx.Queue(), ctx.Queue()
    s = ctx.Process(target=server, args=(q, n, mode))
    s.start()
    c = ctx.Process(target=client, args=(q.get(timeout=60), n, out))
    c.start()
    p50: float = out.get(timeout=300)
    c.join(60)
    s.join(60)
    return p50


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sets", type=int, default=10)
    ap.add_argument("--round-trips", type=int, default=8000)
    args = ap.parse_args()
    got: dict[str, list[float]] = {k: [] for k in MODES}
    for i in range(args.sets):
        for mode in MODES:
            got[mode].append(run(args.round_trips + WARMUP, mode))
        print(f"set {i + 1}: " + ", ".join(f"{k} {v[-1]:.1f}" for k, v in got.items()),
              flush=True)
    print("p50 medians: " + ", ".join(f"{k} {statistics.median(v):.1f} us"
                                      for k, v in got.items()))


if __name__ == "__main__":
    main()
