"""``a3m audit DIR``: the Spark job over delivery journals (lost, duplicated, phantoms)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("dir", help="journal directory (holds node=<id>/ folders)")
    p.add_argument("--master", default=None,
                   help="Spark master URL (default: $A3M_SPARK_MASTER, else local[*]; "
                        "ignored under spark-submit)")
    p.add_argument("--report", default=None, help="HTML report path (default DIR/report.html)")
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")


def _log(msg: str) -> None:
    print(f"[audit] {msg}", file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    from a3m.spark.audit import audit
    from a3m.spark.report import write_report
    from a3m.spark.session import get_or_create

    t0 = time.monotonic()
    _log("starting Spark")
    spark = get_or_create(args.master, app_name="a3m-audit")
    _log(f"Spark up on {spark.sparkContext.master} in {time.monotonic() - t0:.1f} s; "
         f"auditing {args.dir}")
    try:
        summary = audit(spark, args.dir)
    except FileNotFoundError as exc:
        _log(str(exc))
        return 2
    report = Path(args.report) if args.report else Path(args.dir) / "report.html"
    summary["report"] = str(write_report(summary, report))
    summary["elapsed_s"] = round(time.monotonic() - t0, 3)
    if args.json:
        print(json.dumps(summary), flush=True)
    else:
        lat = summary["latency_us"]
        print(f"{len(summary['nodes'])} nodes, {len(summary['links'])} links: "
              f"sent {summary['sent']}, delivered {summary['delivered']}, "
              f"lost {summary['lost']}, duplicated {summary['duplicated']}, "
              f"phantoms {summary['phantoms']} -> "
              f"{'exactly once' if summary['exactly_once'] else 'NOT exactly once'}")
        print(f"latency p50 {lat['p50']} us, p90 {lat['p90']} us, p99 {lat['p99']} us, "
              f"max {lat['max']} us")
        print(f"report: {summary['report']}")
    return 0 if summary["exactly_once"] else 1
