"""The driver of tests/spark/test_spark_cluster.py, in a process of its own (one SparkContext
per process): the a3m source -> the idempotent a3m sink on a standalone cluster.

``first``: run until the test writes ``restart``, then stop the query and the driver (the
source's collector lives on, detached, holding what producers send meanwhile). ``second``: a
new driver on the same checkpoint, until ``done``; then the collector is stopped too."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from a3m.spark import collector
from a3m.spark.session import get_or_create


def wait_for(flag: Path, query: object, limit: float) -> None:
    deadline = time.monotonic() + limit
    while not flag.exists():
        if time.monotonic() > deadline:
            raise SystemExit(f"no {flag.name} in {limit} s")
        exc = query.exception()  # type: ignore[attr-defined]
        if exc is not None:
            raise SystemExit(f"the query failed: {exc}")
        time.sleep(0.1)


def main() -> None:
    phase, master, work, bind, peer = sys.argv[1:6]
    w = Path(work)
    spark = get_or_create(master, app_name="a3m-cluster-test", conf={
        "spark.executor.memory": "512m", "spark.executor.cores": "1",
        "spark.sql.shuffle.partitions": "2", "spark.ui.enabled": "false",
        "spark.task.maxFailures": "8"})

    def start() -> object:
        df = (spark.readStream.format("a3m").option("node", "cluster-collector")
              .option("bind", bind).option("socket", "readings")
              .option("spool", str(w / "spool")).load())
        host_port = peer.partition("=")[2]
        return (df.select("payload").writeStream.format("a3m")
                .option("peers", "cluster-peer/rows")
                .option("addresses", f"cluster-peer={host_port}")
                .option("idempotent", "true").option("ledger", str(w / "ledger"))
                .option("checkpointLocation", str(w / "ck"))
                .trigger(processingTime="200 milliseconds").start())

    q = start()
    if phase == "first":
        (w / "started").write_text("")
        wait_for(w / "restart", q, 300)
        q.stop()  # type: ignore[attr-defined]
        spark.stop()
        return
    (w / "restarted").write_text("")
    wait_for(w / "done", q, 300)
    q.stop()  # type: ignore[attr-defined]
    collector.stop(w / "spool")
    spark.stop()

if __name__ == "__main__":
    main()
