"""``a3m bench WORKLOAD``: throughput or latency, beside raw UDP, pyzmq and pynng."""

from __future__ import annotations

import argparse
import json
import sys

BENCH_WORKLOADS = ("transport", "pushpull", "reqrep", "pubsub")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("workload", choices=BENCH_WORKLOADS)
    p.add_argument("--size", type=int, default=64, help="payload bytes (default 64)")
    p.add_argument("--messages", type=int, default=200_000, help="messages (default 200000)")
    p.add_argument("--no-baselines", action="store_true", help="measure A3M only")
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    p.add_argument("--out", help="also write the JSON result to this file")


def run(args: argparse.Namespace) -> int:
    from a3m.benchmarks.registry import WORKLOADS, run_bench

    if args.workload not in WORKLOADS:
        print(f"a3m bench: workload {args.workload!r} is not available yet", file=sys.stderr)
        return 2
    if args.size < 8 or args.messages < 2:
        print("a3m bench: need --size >= 8 and --messages >= 2", file=sys.stderr)
        return 2

    def progress(msg: str) -> None:
        print(f"[bench] {msg}", file=sys.stderr, flush=True)

    result = run_bench(args.workload, args.size, args.messages, progress,
                       baselines=not args.no_baselines)
    text = json.dumps(result, indent=None if args.json else 2)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    if args.json:
        print(text)
    else:
        _table(result)
    return 0


def _table(result: dict[str, object]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"a3m bench {result['workload']} ({result['size']} B)")
    table.add_column("system")
    metric = "p50_us" if "p50_us" in result else "msgs_per_s"
    table.add_column(metric, justify="right")
    table.add_row("a3m", f"{result[metric]:,.0f}")  # type: ignore[str-format]
    for name, row in result["baselines"].items():  # type: ignore[attr-defined]
        value = row.get(metric)
        table.add_row(name, f"{value:,.0f}" if value is not None else row.get("error", "-"))
    Console(stderr=True).print(table)
