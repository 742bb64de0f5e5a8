"""CPU an idle secure node spends on a storm of garbage datagrams (no stream beside it): the
same attacker process as ``a3m bench storm`` floods an ``a3m.Node`` for 3 s; prints the
node process's CPU share and its CPU per datagram received (the socket read, the turn and the
rejection; ``bench/reject_cost.py`` gives the rejection alone)::

    .venv/bin/python bench/storm_cpu.py RATE MIX     # e.g. 20000 mixed; MIX as a3m bench storm
"""

from __future__ import annotations

import multiprocessing as mp
import resource
import sys
import time

import a3m
from a3m.benchmarks.storm import attacker


def cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main() -> None:
    rate, mix = float(sys.argv[1]), sys.argv[2]
    ctx = mp.get_context("spawn")
    with a3m.Node("storm-idle", loopback_datagram_size=0) as node:
        ready, results, stop = ctx.Queue(), ctx.Queue(), ctx.Event()
        p = ctx.Process(target=attacker, args=(node.address, rate, mix, ready, stop, results))
        p.start()
        ready.get()
        time.sleep(0.5)
        c0, d0, t0 = cpu_s(), node.stats["exon"]["datagrams_in"], time.monotonic()
        time.sleep(3)
        c1, d1, t1 = cpu_s(), node.stats["exon"]["datagrams_in"], time.monotonic()
        stop.set()
        att = results.get()
        p.join()
    print(f"{mix} at {rate:g}/s (sent {att['rate']}/s): node CPU {100 * (c1 - c0) / (t1 - t0):.1f} %,"
          f" {(c1 - c0) / max(1, d1 - d0) * 1e6:.2f} us per datagram received "
          f"({(d1 - d0) / (t1 - t0):,.0f}/s)")


if __name__ == "__main__":
    main()
