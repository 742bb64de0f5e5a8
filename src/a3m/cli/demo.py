"""``a3m demo``: producers send readings across a lossy, duplicating, reordering relay to a
collector, which counts each reading; the count is then checked exactly-once.

(The Spark streaming pipeline of SPEC section 8 replaces the collector once it exists.)
"""

from __future__ import annotations

import argparse
import json
import struct
import threading
import time
from collections import Counter
from typing import Any

READING = struct.Struct(">HIq")  # producer index, sequence number, value


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--producers", type=int, default=3)
    p.add_argument("--readings", type=int, default=20_000, help="readings per producer")
    p.add_argument("--loss", type=float, default=0.1)
    p.add_argument("--dup", type=float, default=0.05)
    p.add_argument("--reorder", type=float, default=0.1)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
    from rich.table import Table

    from a3m.exon import Endpoint
    from a3m.testing.relay import FaultRelay

    console = Console(stderr=True)
    total = args.producers * args.readings
    counts: Counter[tuple[int, int]] = Counter()
    sums: Counter[int] = Counter()
    t0 = time.perf_counter()
    net = {"loopback_datagram_size": 0}  # the relay stands for a real network (1400 B MTU)
    with Endpoint("collector", **net) as collector, FaultRelay(
            {"collector": collector.address}, loss=args.loss, dup=args.dup,
            reorder=args.reorder, seed=args.seed) as relay:
        producers = [Endpoint(f"producer-{i}", **net) for i in range(args.producers)]
        for ep in producers:
            ep.associate("collector", relay.front("collector"))

        def produce(i: int, ep: Any) -> None:
            for seq in range(args.readings):
                ep.send("collector", READING.pack(i, seq, seq % 97), timeout=60)

        threads = [threading.Thread(target=produce, args=(i, ep), daemon=True)
                   for i, ep in enumerate(producers)]
        with Progress(TextColumn("{task.description}"), BarColumn(),
                      TextColumn("{task.completed}/{task.total}"), TimeElapsedColumn(),
                      console=console, transient=args.json) as bar:
            task = bar.add_task("readings counted", total=total)
            for t in threads:
                t.start()
            received = 0
            deadline = time.monotonic() + 300
            while received < total and time.monotonic() < deadline:
                try:
                    batch = collector.recv_many(8192, timeout=1.0)
                except Exception:
                    continue
                for _, payload in batch:
                    i, seq, value = READING.unpack(payload)
                    counts[(i, seq)] += 1
                    sums[i] += value
                received += len(batch)
                bar.update(task, completed=received)
            # a late duplicate would show up now
            end = time.monotonic() + 0.5
            while time.monotonic() < end:
                try:
                    for _, payload in collector.recv_many(8192, timeout=0.1):
                        i, seq, _ = READING.unpack(payload)
                        counts[(i, seq)] += 1
                        received += 1
                except Exception:
                    pass
        for t in threads:
            t.join(timeout=10)
        for ep in producers:
            ep.close(timeout=10)
        relay_stats = relay.stats.as_dict()
    elapsed = time.perf_counter() - t0
    duplicates = sum(c - 1 for c in counts.values() if c > 1)
    lost = sum(1 for i in range(args.producers) for s in range(args.readings)
               if (i, s) not in counts)
    result = {"sent": total, "counted": received, "lost": lost, "duplicates": duplicates,
              "exactly_once": lost == 0 and duplicates == 0 and received == total,
              "producers": args.producers, "relay": relay_stats,
              "elapsed_s": round(elapsed, 2), "report": None}
    table = Table(title="a3m demo: readings through a faulty network")
    table.add_column("producer")
    table.add_column("readings", justify="right")
    table.add_column("sum of values", justify="right")
    for i in range(args.producers):
        table.add_row(f"producer-{i}", str(sum(1 for (p, _) in counts if p == i)), str(sums[i]))
    console.print(table)
    console.print(f"relay: dropped {relay_stats['dropped']}, duplicated "
                  f"{relay_stats['duplicated']}, reordered {relay_stats['reordered']} datagrams")
    verdict = "[green]exactly once[/green]" if result["exactly_once"] else "[red]FAILED[/red]"
    console.print(f"sent {total}, counted {received}, lost {lost}, duplicates {duplicates}: "
                  f"{verdict} in {elapsed:.1f} s")
    if args.json:
        print(json.dumps(result))
    return 0 if result["exactly_once"] else 1

