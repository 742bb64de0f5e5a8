"""``a3m chaos WORKLOAD``: the workload over real UDP through the fault-injecting relay."""

from __future__ import annotations

import argparse
import json
import sys

CHAOS_WORKLOADS = ("transport", "pushpull", "reqrep", "pubsub")


def _probability(text: str) -> float:
    value = float(text)
    if not 0.0 <= value < 1.0:
        raise argparse.ArgumentTypeError("a probability in [0, 1)")
    return value


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("workload", choices=CHAOS_WORKLOADS)
    p.add_argument("--messages", type=int, default=None,
                   help="messages (default 20000; reqrep 1000: each lost datagram of a round "
                        "trip costs a retransmission timeout)")
    p.add_argument("--loss", type=_probability, default=0.2)
    p.add_argument("--dup", type=_probability, default=0.1)
    p.add_argument("--reorder", type=_probability, default=0.2)
    p.add_argument("--seed", type=int, default=1, help="the relay's random seed")
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")


def run(args: argparse.Namespace) -> int:
    from a3m.benchmarks.chaos import run_chaos
    from a3m.benchmarks.registry import WORKLOADS

    if args.workload not in WORKLOADS:
        print(f"a3m chaos: workload {args.workload!r} is not available yet", file=sys.stderr)
        return 2

    def progress(msg: str) -> None:
        print(f"[chaos] {msg}", file=sys.stderr, flush=True)

    messages = args.messages or (1000 if args.workload == "reqrep" else 20_000)
    result = run_chaos(args.workload, messages, args.loss, args.dup, args.reorder,
                       seed=args.seed, progress=progress)
    if args.json:
        print(json.dumps(result))
    else:
        from rich.console import Console
        from rich.table import Table

        table = Table(title=f"a3m chaos {args.workload}")
        for key in ("sent", "delivered", "duplicates", "lost", "phantoms", "exactly_once",
                    "retransmits", "p50_us", "p99_us", "elapsed_s"):
            if key in result:
                table.add_row(key, str(result[key]))
        Console(stderr=True).print(table)
    return 0 if result["exactly_once"] else 1
