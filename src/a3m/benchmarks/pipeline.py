"""``a3m bench pipeline``: one streaming aggregation and sink, fed by Spark's ``rate`` source
and by the ``a3m`` source (1, 2, 4 partitions) in the same run.

The query, the same for every feed: readings (``node``, JSON ``payload`` with ``seq``, ``ts``,
``value``) are parsed, grouped by producer and 1-second event-time window (watermark 30 s)
with ``count`` and ``avg``, and the windows go out through the ``a3m`` sink (complete mode:
Python sinks take append or complete, not update) to a PULL socket in this process, which
keeps the latest count per window: their sum is the number of readings aggregated so far.

- ``rate``: Spark's built-in ``rate-micro-batch`` source, ``rowsPerBatch`` rows each micro-batch
  (200 k by default), batches back to back, so the query's own ceiling shows; each row becomes a
  reading (``to_json``). Readings per second = the slope of the aggregated count after a
  warm-up. (The time-based ``rate`` source asked for more rows per second than the query takes
  makes each batch bigger than the last and never settles.)
- ``a3m``: producer nodes in a process of their own send ``readings`` readings as fast as they
  can (one message each, ``send_many``), one PUSH socket per producer linked to every
  partition's node; readings per second = readings / (time from the first send until the
  sink has counted all of them): producers to aggregated result, end to end. The count must
  come out exact (``exact``): a lost or doubled reading would show.

The rate feed runs first and warms the JVM up for the aggregation and the sink; a short
unmeasured ``a3m`` run warms up the source's path.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing as mp
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

Progress = Callable[[str], None]
WINDOW = "1 second"
READING_SCHEMA = "seq long, ts double, value double"


def _free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def aggregation(df: Any) -> Any:
    """Readings (``node``, ``payload``) -> one JSON ``payload`` per window."""
    from pyspark.sql import functions as F

    readings = df.select(
        F.col("node").alias("producer"),
        F.from_json(F.col("payload").cast("string"), READING_SCHEMA).alias("r"),
    ).select("producer", F.timestamp_seconds("r.ts").alias("event_time"),
             F.col("r.value").alias("value"))
    agg = (readings.withWatermark("event_time", "30 seconds")
           .groupBy("producer", F.window("event_time", WINDOW))
           .agg(F.count("*").alias("readings"), F.avg("value").alias("mean")))
    return agg.select(F.to_json(F.struct(
        "producer", F.col("window.start").cast("double").alias("start"), "readings",
        "mean")).alias("payload"))


class Results:
    """The sink's peer: a PULL socket keeping the latest count of each (producer, window)."""

    def __init__(self) -> None:
        import a3m

        self.node = a3m.Node("bench-results")
        self.sock = self.node.socket(a3m.PULL, "results")
        self.counts: dict[tuple[str, float], int] = {}
        self.total = 0
        # (monotonic time, total) at each change: a batch's tasks each send their windows,
        # so one batch may show as several changes
        self.changes: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._drain, daemon=True)
        self._thread.start()

    @property
    def address(self) -> str:
        host, port = self.node.address
        return f"{host}:{port}"

    def _drain(self) -> None:
        import a3m

        while not self._stop.is_set():
            try:
                got = self.sock.recv_many(1024, timeout=0.1)
            except (a3m.Timeout, a3m.Closed):
                continue
            before = self.total
            for payload in got:
                row = json.loads(payload)
                key = (row["producer"], row["start"])
                n = int(row["readings"])
                self.total += n - self.counts.get(key, 0)
                self.counts[key] = n
            if self.total != before:
                self.changes.append((time.monotonic(), self.total))

    def reset(self) -> None:
        self.counts.clear()
        self.total = 0
        self.changes = []

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.node.close(timeout=5)


def _start(spark: Any, df: Any, results: Results, run: Path) -> Any:
    return (aggregation(df).writeStream.format("a3m").outputMode("complete")
            .option("peers", "bench-results/results")
            .option("addresses", f"bench-results={results.address}")
            .option("ledger", str(run / "ledger"))
            .option("checkpointLocation", str(run / "checkpoint"))
            .trigger(processingTime="100 milliseconds").start())


def _stop(spark: Any, query: Any) -> None:
    """Stop a query; one stopped mid-batch aborts that batch's write, which Spark logs as an
    error although nothing is wrong (the next run starts from a fresh checkpoint)."""
    deadline = time.monotonic() + 5
    while query.isActive and query.status.get("isTriggerActive", False) \
            and time.monotonic() < deadline:
        time.sleep(0.02)
    spark.sparkContext.setLogLevel("OFF")
    try:
        query.stop()
    finally:
        spark.sparkContext.setLogLevel("ERROR")


def run_rate(spark: Any, results: Results, work: Path, producers: int, rows_per_batch: int,
             warmup_s: float, seconds: float, progress: Progress,
             deadline_s: float = 600.0) -> dict[str, Any]:
    """The rate feed's slope. The warm-up lasts ``warmup_s`` and at least until the first
    batch has finished (a cold JVM's first batches can take far longer than a window); then
    the feed is measured for ``seconds`` and on until two batches have finished after the
    warm-up, so a slow or busy machine gives a slower figure, not an error. Only when
    ``deadline_s`` (from the query's start) passes first does it raise, saying what it saw."""
    from pyspark.sql import functions as F

    df = (spark.readStream.format("rate-micro-batch").option("rowsPerBatch", rows_per_batch)
          .option("numPartitions", 2).option("advanceMillisPerBatch", 100).load())
    readings = df.select(
        F.concat(F.lit("producer-"), (F.col("value") % producers).cast("string")).alias("node"),
        F.to_json(F.struct(F.col("value").alias("seq"),
                           (F.unix_micros("timestamp") / 1e6).alias("ts"),
                           (20 + (F.col("value") % 1000) / 200).alias("value")))
        .cast("binary").alias("payload"))
    results.reset()
    started = time.monotonic()
    deadline = started + deadline_s
    query = _start(spark, readings, results, work / "rate")

    def wait_until(done: Callable[[], bool], until: float) -> bool:
        """Wait for ``done()`` until ``until`` (monotonic) or the query fails."""
        while not done():
            if query.exception() is not None:
                raise RuntimeError(f"the rate query failed: {query.exception()}")
            if time.monotonic() >= until:
                return False
            time.sleep(0.05)
        return True

    def finished(t_from: float) -> list[tuple[float, int]]:
        """Batches finished since ``t_from``: every batch adds ``rows_per_batch`` readings
        (timestamps only move forward, so the watermark drops none), and a batch's tasks
        report separately, so a batch has finished when the total is a multiple of it."""
        return [c for c in results.changes if c[0] >= t_from and c[1] % rows_per_batch == 0]

    def seen(t_from: float | None) -> str:
        after = "" if t_from is None else f", {len(finished(t_from))} after the warm-up"
        return (f"{len(finished(started))} batch(es) of {rows_per_batch:,} rows finished in "
                f"{time.monotonic() - started:.1f} s since the query started{after}, "
                f"{results.total:,} readings aggregated")

    try:
        progress(f"rate source, {rows_per_batch:,} rows per batch: {warmup_s:.0f} s warm-up "
                 f"(and a first batch), then {seconds:.0f} s measured (and two batches)")
        wait_until(lambda: False, min(deadline, started + warmup_s))
        if not wait_until(lambda: bool(finished(started)), deadline):
            raise RuntimeError(f"the rate feed did not finish its first batch within "
                               f"{deadline_s:.0f} s: {seen(None)}")
        t_from = time.monotonic()
        wait_until(lambda: False, min(deadline, t_from + seconds))
        if not wait_until(lambda: len(finished(t_from)) >= 2, deadline):
            raise RuntimeError(f"the rate feed did not finish two batches after its warm-up "
                               f"within {deadline_s:.0f} s: {seen(t_from)}")
    finally:
        _stop(spark, query)
    # Batch by batch: from the first batch that finished after the warm-up to the last one.
    done = finished(t_from)
    (t1, n1), (t2, n2) = done[0], done[-1]
    rate = (n2 - n1) / (t2 - t1)
    return {"feed": "rate", "rows_per_batch": rows_per_batch, "seconds": round(t2 - t1, 1),
            "batches": (n2 - n1) // rows_per_batch, "warmup_s": round(t_from - started, 1),
            "readings": n2 - n1, "readings_per_s": round(rate)}


def _produce(targets: list[tuple[str, str]], names: list[str], per: int, batch: int,
             conn: Any) -> None:
    """A producer process: one node per name, each with a PUSH socket linked to every
    partition's node; sends when told, reports the seconds it took.

    The nodes are ``a3m.aio`` nodes on one event loop (no thread of their own), so a process
    holds hundreds of producers; the pipe's blocking reads run in the loop's executor while
    the loop keeps answering the collectors."""
    asyncio.run(_produce_on_loop(targets, names, per, batch, conn))


async def _produce_on_loop(targets: list[tuple[str, str]], names: list[str], per: int,
                           batch: int, conn: Any) -> None:
    import a3m
    from a3m import aio

    loop = asyncio.get_running_loop()
    nodes = [aio.Node(name) for name in names]
    socks = []
    for node in nodes:
        push = node.socket(a3m.PUSH, "readings")
        for nid, addr in targets:
            host, _, port = addr.rpartition(":")
            node.associate(nid, (host, int(port)))
            push.link((nid, "readings"))
        socks.append(push)
    for push in socks:
        for nid, _ in targets:
            await push.wait_linked((nid, "readings"), timeout=60)
    conn.send("ready")
    await loop.run_in_executor(None, conn.recv)  # go
    t0 = time.monotonic()

    async def send(push: Any) -> None:
        for k0 in range(0, per, batch):
            now = time.time()
            msgs = [b'{"seq":%d,"ts":%.6f,"value":%.3f}' % (k, now, 20 + (k % 1000) / 200)
                    for k in range(k0, min(per, k0 + batch))]
            while msgs:
                msgs = msgs[await push.send_many(msgs, timeout=300):]

    await asyncio.gather(*(send(push) for push in socks))
    sent_s = time.monotonic() - t0
    for node in nodes:
        await node.flush(timeout=60)
    conn.send(sent_s)
    await loop.run_in_executor(None, conn.recv)  # done
    await asyncio.gather(*(node.close(timeout=5) for node in nodes))


def run_a3m(spark: Any, results: Results, work: Path, partitions: int, producers: int,
            readings: int, progress: Progress, batch: int = 256,
            processes: int = 1) -> dict[str, Any]:
    from a3m.spark import collector
    from a3m.spark.source import A3MStreamReader

    run = work / f"a3m-{partitions}-{time.monotonic_ns()}"
    binds = ",".join(f"127.0.0.1:{_free_udp_port()}" for _ in range(partitions))
    options = {"node": "bench-collector", "partitions": str(partitions), "bind": binds,
               "socket": "readings", "spool": str(run / "spool"),
               "maxRowsPerBatch": "1000000", "maxPending": "4000000"}
    reader = A3MStreamReader(options)
    df = spark.readStream.format("a3m").options(**options).load()
    results.reset()
    query = _start(spark, df, results, run)
    ctx = mp.get_context("spawn")
    per = readings // producers
    procs: list[tuple[Any, Any]] = []
    try:
        deadline = time.monotonic() + 60
        while not all(collector.running(loc) for loc in reader.locations):
            if time.monotonic() > deadline or query.exception() is not None:
                raise RuntimeError(f"the a3m source's collectors did not start "
                                   f"({query.exception()})")
            time.sleep(0.1)
        targets = list(zip(reader.node_ids(), reader.binds, strict=True))
        names = [f"producer-{i}" for i in range(producers)]
        for j in range(processes):
            here, there = ctx.Pipe()
            proc = ctx.Process(target=_produce,
                               args=(targets, names[j::processes], per, batch, there))
            proc.start()
            procs.append((proc, here))
        for _, here in procs:
            if not here.poll(60) or here.recv() != "ready":
                raise RuntimeError("the producers did not link in 60 s")
        total = per * producers
        t0 = time.monotonic()
        for _, here in procs:
            here.send("go")
        deadline = t0 + 300
        while results.total < total:
            if time.monotonic() > deadline or query.exception() is not None:
                raise RuntimeError(f"{results.total} of {total} readings aggregated in "
                                   f"300 s ({query.exception()})")
            time.sleep(0.01)
        elapsed = time.monotonic() - t0
        sends = [here.recv() if here.poll(30) else None for _, here in procs]
        sent_s = None if None in sends else max(sends)
        time.sleep(0.5)  # a duplicate would land now
        counted = results.total
        for _, here in procs:
            here.send("done")
    finally:
        _stop(spark, query)
        for proc, _ in procs:
            proc.join(30)
        collector.stop(run / "spool")
        shutil.rmtree(run, ignore_errors=True)
    rate = total / elapsed
    progress(f"a3m source, {partitions} partition(s): {total:,} readings in {elapsed:.2f} s "
             f"= {rate:,.0f}/s")
    return {"feed": "a3m", "partitions": partitions, "producers": producers,
            "producer_processes": processes,
            "readings": total, "counted": counted, "exact": counted == total,
            "producers_send_s": None if sent_s is None else round(sent_s, 2),
            "end_to_end_s": round(elapsed, 2), "readings_per_s": round(rate)}


def run_pipeline(readings: int = 200_000, producers: int = 4,
                 partitions: tuple[int, ...] = (1, 2, 4), rate_rows_per_batch: int = 200_000,
                 rate_seconds: float = 15.0, warmup: int = 20_000, master: str = "local[2]",
                 progress: Progress = lambda _: None, processes: int = 1) -> dict[str, Any]:
    from a3m.benchmarks.registry import machine
    from a3m.spark.session import get_or_create

    spark = get_or_create(master, app_name="a3m-bench-pipeline",
                          conf={"spark.sql.shuffle.partitions": "2",
                                "spark.ui.enabled": "false"})
    work = Path(tempfile.mkdtemp(prefix="a3m-bench-pipeline-"))
    results = Results()
    try:
        rate = run_rate(spark, results, work, producers, rate_rows_per_batch, 5.0, rate_seconds,
                        progress)
        progress(f"rate source: {rate['readings_per_s']:,} readings/s aggregated")
        if warmup:
            progress(f"a3m source: warm-up with {warmup:,} readings (not measured)")
            run_a3m(spark, results, work, 1, producers, warmup, lambda _: None)
        runs = [run_a3m(spark, results, work, k, producers, readings, progress,
                        processes=processes) for k in partitions]
    finally:
        results.close()
        shutil.rmtree(work, ignore_errors=True)
    best = max(runs, key=lambda r: r["readings_per_s"])
    return {"workload": "pipeline", "master": spark.sparkContext.master,
            "query": "parse JSON, groupBy(producer, 1 s window): count, avg; complete "
                     "mode to the a3m sink",
            "rate": rate, "a3m": runs,
            "a3m_over_rate": round(best["readings_per_s"] / max(1, rate["readings_per_s"]),
                                   2),
            "exact": all(r["exact"] for r in runs), "machine": machine()}


def plot(result: dict[str, Any], path: str) -> str:
    """Bars: readings per second aggregated, the rate feed beside each a3m partition count."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 3.8))
    ax = fig.add_subplot()
    labels = ["rate source"] + [f"a3m, {r['partitions']} partition"
                                f"{'s' if r['partitions'] > 1 else ''}" for r in result["a3m"]]
    values = [result["rate"]["readings_per_s"]] + [r["readings_per_s"] for r in result["a3m"]]
    bars = ax.bar(labels, values, color=["#9aa5b1"] + ["#1f77b4"] * len(result["a3m"]))
    for b, v in zip(bars, values, strict=True):
        ax.annotate(f"{v / 1000:,.1f} k", (b.get_x() + b.get_width() / 2, v),
                    ha="center", va="bottom", fontsize="small")
    ax.set_ylabel("readings aggregated per second")
    ax.set_title(f"The same Spark query fed by rate and by a3m ({result['master']})",
                 fontsize="medium")
    ax.grid(True, axis="y", alpha=0.3)
    ax.set_ylim(0, max(values) * 1.15)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return path
