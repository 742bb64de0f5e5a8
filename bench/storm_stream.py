"""A stream under a storm, counted in units the CPU's speed does not move: the receiving
node lives in this process (a PULL read by the main thread), the sender and the attacker are
the ``a3m bench storm`` processes. Prints the stream's rate and the receiver's CPU per message
(both move with the host), the datagrams the native loops handed to Python per second
(``loop_left``: the flood's handshakes, and before the native loop opened live DATA ahead of
them, the stream read after them too), the datagrams handed to the Python secure layer by
any read (``secure_python``), the HELLOs the native reads shed (``hellos_shed``), the
INITIATEs they refused (``initiates_refused``) and the driver's turns per second::

    .venv/bin/python bench/storm_stream.py RATE [MESSAGES] [MIX]   # e.g. 20000 2000000 mixed

Run it with RATE 0 and RATE 20000 one after the other, several times: a loaded host moves the
rates by far more than the storm does.
"""

from __future__ import annotations

import multiprocessing as mp
import sys
import time

import a3m
from a3m.benchmarks.storm import attacker, storm_sender
from a3m.benchmarks.work import Work


def main() -> None:
    rate = float(sys.argv[1])
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 2_000_000
    mix = sys.argv[3] if len(sys.argv) > 3 else "mixed"
    ctx = mp.get_context("spawn")
    with a3m.Node("storm-rx", loopback_datagram_size=0) as node:
        pull = node.socket(a3m.PULL, "sink", capacity=4096)
        drv = node._driver  # (its ``turns``: the I/O thread's and the leaders' turns)
        left = getattr(node._proto, "loop_left", lambda: 0)
        shed = getattr(node._proto, "hellos_shed", lambda: 0)
        handed = getattr(node._proto, "secure_python", lambda: 0)
        forged = getattr(node._proto, "initiates_refused", lambda: 0)
        stop, ready, results = ctx.Event(), ctx.Queue(), ctx.Queue()
        procs = []
        if rate:
            att = ctx.Process(target=attacker, args=(node.address, rate, mix, ready, stop,
                                                     results), daemon=True)
            att.start()
            procs.append(att)
            ready.get(timeout=60)
            time.sleep(0.3)  # the storm is on before the stream links
        tx = ctx.Process(target=storm_sender, args=(node.address, results),
                         kwargs={"messages": n, "size": 64}, daemon=True)
        tx.start()
        procs.append(tx)
        pull.recv(timeout=60)
        work = Work()
        work.start()
        t0, k0, l0, h0, p0, f0 = time.monotonic(), drv.turns, left(), shed(), handed(), forged()
        d0 = node.stats["exon"]["datagrams_in"]
        for _ in range(n - 1):
            pull.recv(timeout=60)
        cpu_us = work.report(n - 1)["cpu_us"]
        t1, k1, l1, h1, p1, f1 = time.monotonic(), drv.turns, left(), shed(), handed(), forged()
        d1 = node.stats["exon"]["datagrams_in"]
        stop.set()
        for p in procs:
            p.join(10)
    dt = t1 - t0
    print(f"storm {rate:g}/s {mix if rate else ''}: {(n - 1) / dt:,.0f} msg/s, "
          f"{cpu_us:.3f} us CPU a message; datagrams in {(d1 - d0) / dt:,.0f}/s, "
          f"left to Python by the loop {(l1 - l0) / dt:,.0f}/s, handed to the Python secure "
          f"layer {(p1 - p0) / dt:,.0f}/s, HELLOs shed natively "
          f"{(h1 - h0) / dt:,.0f}/s, INITIATEs refused natively {(f1 - f0) / dt:,.0f}/s, "
          f"turns {(k1 - k0) / dt:,.0f}/s")


if __name__ == "__main__":
    main()
