"""Rows per second through a count-only streaming query on local[2]: fed by the ``a3m`` source
(producer nodes sending as fast as they can) or by Spark's built-in ``rate`` source.

A first look at where the pipeline's ceiling is (issue 15, item 4): the demo's own query
(complete mode, ``collect_list`` of every sequence number, the whole result rewritten each
batch) costs more per batch as rows accumulate, so it is not the source's rate.

Usage: python bench/source_rate.py [--source a3m|rate] [--producers N] [--messages PER]
       [--batch N]
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import tempfile
import threading
import time
from typing import Any


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--source", choices=("a3m", "rate"), default="a3m")
    p.add_argument("--producers", type=int, default=4)
    p.add_argument("--messages", type=int, default=50_000, help="per producer")
    p.add_argument("--seconds", type=float, default=10.0, help="rate source: how long")
    p.add_argument("--batch", type=int, default=0, help="producers send this many messages "
                   "per call (send_many)")
    a = p.parse_args()

    import a3m
    import a3m.spark  # noqa: F401  (registers the source)
    from a3m.spark.session import get_or_create

    spark = get_or_create(master="local[2]")
    work = tempfile.mkdtemp(prefix="a3m-source-rate-")
    state: dict[str, Any] = {"rows": 0, "batches": 0}

    def count(df: Any, batch_id: int) -> None:
        n = df.count()
        state["rows"] += n
        state["batches"] += 1 if n else 0

    port = _free_port()
    if a.source == "a3m":
        df = (spark.readStream.format("a3m").option("node", "collector")
              .option("bind", f"127.0.0.1:{port}").option("socket", "readings")
              .option("spool", f"{work}/spool").option("maxRowsPerBatch", "200000").load())
    else:
        df = spark.readStream.format("rate").option("rowsPerSecond", 1_000_000).load()
    q = (df.writeStream.foreachBatch(count).option("checkpointLocation", f"{work}/ck")
         .trigger(processingTime="200 milliseconds").start())
    try:
        if a.source == "rate":
            time.sleep(3)  # its first batches
            r0, t0 = state["rows"], time.monotonic()
            time.sleep(a.seconds)
            out = {"source": "rate", "rows_per_s": round((state["rows"] - r0)
                                                         / (time.monotonic() - t0))}
        else:
            time.sleep(3)  # the collector is up
            nodes = [a3m.Node(f"rate-producer-{i}") for i in range(a.producers)]
            socks = []
            for n in nodes:
                n.associate("collector", ("127.0.0.1", port))
                s = n.socket(a3m.PUSH, "r")
                s.link("collector/readings")
                socks.append(s)
            total = a.producers * a.messages
            t0 = time.monotonic()

            def run(s: Any) -> None:
                if a.batch:
                    for k0 in range(0, a.messages, a.batch):
                        batch = [b'{"seq": %d, "value": 20.5}' % k
                                 for k in range(k0, min(k0 + a.batch, a.messages))]
                        while batch:
                            batch = batch[s.send_many(batch, timeout=120):]
                    return
                for k in range(a.messages):
                    s.send(b'{"seq": %d, "value": 20.5}' % k, timeout=120)

            threads = [threading.Thread(target=run, args=(s,)) for s in socks]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            sent_s = time.monotonic() - t0
            deadline = time.monotonic() + 300
            while state["rows"] < total and time.monotonic() < deadline:
                if q.exception() is not None:
                    raise RuntimeError(f"the query failed: {q.exception()}")
                time.sleep(0.05)
            el = time.monotonic() - t0
            out = {"source": "a3m", "rows": state["rows"], "batches": state["batches"],
                   "producers_send_s": round(sent_s, 2), "end_to_end_s": round(el, 2),
                   "rows_per_s": round(state["rows"] / el)}
            for n in nodes:
                n.close(timeout=5)
        print(json.dumps(out))
    finally:
        q.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
