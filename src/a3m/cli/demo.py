"""``a3m demo``: the main job (SPEC 8).

Several producer nodes send readings through the fault-injecting relay (loss, duplication,
reordering) to the ``a3m`` Structured Streaming source; a Spark query aggregates them per
producer and event-time window. Half-way the query is stopped and restarted from its
checkpoint. Then the Spark audit job reads every node's delivery journal and the query's result
is checked against what the producers sent: each reading counted exactly once.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import json
import random
import shutil
import socket
import threading
import time
from pathlib import Path
from typing import Any

WINDOW = "1 second"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--producers", type=int, default=4)
    p.add_argument("--readings", type=int, default=5000, help="readings per producer")
    p.add_argument("--rate", type=float, default=500.0,
                   help="readings per second per producer (0: as fast as possible)")
    p.add_argument("--loss", type=float, default=0.1)
    p.add_argument("--dup", type=float, default=0.05)
    p.add_argument("--reorder", type=float, default=0.1)
    p.add_argument("--seed", type=int, default=7, help="the relay's random seed")
    p.add_argument("--out", default="a3m-demo", help="working directory (default ./a3m-demo)")
    p.add_argument("--master", default=None, help="Spark master (default $A3M_SPARK_MASTER "
                                                  "or local[*])")
    p.add_argument("--no-restart", action="store_true",
                   help="do not stop and restart the query half-way")
    p.add_argument("--verbose", action="store_true",
                   help="show Spark's own log (INFO and up) on the console")
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")


def _free_udp_port() -> int:
    """A UDP port free now, below the kernel's ephemeral range where it can (the collector
    binds it a few seconds later, in its own process: a port from the ephemeral range could
    be handed to another socket meanwhile, and the collector then failed to bind it)."""
    low = 32768
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range", encoding="ascii") as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        pass
    rng = random.Random()
    for _ in range(64):
        port = rng.randrange(max(1024, low // 2), max(1025, low))
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Producers:
    """Producer nodes, each sending its readings at its own pace: ``a3m.aio`` nodes on one
    event loop in a thread of its own, so a thousand producers cost one thread, not two
    each (a threaded node's I/O thread and a sending thread)."""

    def __init__(self, n: int, readings: int, rate: float, collector: tuple[str, int],
                 journal: Path) -> None:
        self.readings, self.rate = readings, rate
        self.sent = [0] * n
        self.errors: list[str] = []
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="producers",
                                        daemon=True)
        self._thread.start()
        self._sending: concurrent.futures.Future[Any] | None = None
        self.nodes, self.sockets = self._call(self._open(n, collector, journal), 60)

    def _call(self, coro: Any, timeout: float) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    async def _open(self, n: int, collector: tuple[str, int], journal: Path
                    ) -> tuple[list[Any], list[Any]]:
        import a3m
        from a3m import aio

        nodes, sockets = [], []
        for i in range(n):
            node = aio.Node(f"producer-{i}", journal=journal, loopback_datagram_size=0)
            node.associate("collector", collector)
            push = node.socket(a3m.PUSH, "readings")
            push.link("collector/readings")
            nodes.append(node)
            sockets.append(push)
        return nodes, sockets

    def wait_linked(self, timeout: float) -> float | None:
        """Wait until every producer's link to the collector is up (the collector starts
        with the query; the handshakes go through the lossy relay); the seconds it took, or
        None if some link was not up within ``timeout`` (their sends then wait for it)."""
        async def linked() -> bool:
            ups = await asyncio.gather(*(push.wait_linked(timeout=timeout)
                                         for push in self.sockets))
            return all(ups)

        t0 = time.monotonic()
        return time.monotonic() - t0 if self._call(linked(), timeout + 5) else None

    def start(self) -> None:
        self._sending = asyncio.run_coroutine_threadsafe(self._send_all(), self._loop)

    async def _send_all(self) -> None:
        await asyncio.gather(*(self._run(i, push) for i, push in enumerate(self.sockets)))

    async def _run(self, i: int, push: Any) -> None:
        t0 = time.monotonic()
        try:
            for seq in range(self.readings):
                if self.rate > 0:
                    ahead = t0 + seq / self.rate - time.monotonic()
                    if ahead > 0:
                        await asyncio.sleep(ahead)
                value = 20.0 + 5.0 * ((seq * 7919 + i * 104729) % 1000) / 1000.0
                body = json.dumps({"seq": seq, "ts": time.time(), "value": value})
                await push.send(body.encode(), timeout=120)
                self.sent[i] = seq + 1
        except Exception as exc:  # reported in the result, never silently
            self.errors.append(f"producer-{i}: {exc!r}")

    @property
    def total_sent(self) -> int:
        return sum(self.sent)

    def finish(self, timeout: float) -> None:
        if self._sending is not None:
            try:
                self._sending.result(timeout)
            except concurrent.futures.TimeoutError:
                self.errors.append(f"the producers were still sending after {timeout} s")

        async def flush() -> None:
            await asyncio.gather(*(node.flush(timeout=timeout) for node in self.nodes))

        self._call(flush(), timeout + 5)

    def close(self) -> None:
        async def close() -> None:
            await asyncio.gather(*(node.close(timeout=10) for node in self.nodes))

        try:
            self._call(close(), 30)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            if not self._thread.is_alive():
                self._loop.close()


def _query(spark: Any, port: int, work: Path, results: Path, state: dict[str, int]) -> Any:
    """Start the aggregation; each batch writes the result and counts it into ``state``
    (the demo reads its progress there, never from the files a batch is rewriting)."""
    from pyspark.sql import functions as F

    raw = (spark.readStream.format("a3m").option("node", "collector")
           .option("bind", f"127.0.0.1:{port}").option("socket", "readings")
           .option("spool", str(work / "spool")).option("journal", str(work / "journals"))
           .option("maxRowsPerBatch", "20000").load())
    readings = raw.select(
        F.col("node").alias("producer"),
        F.from_json(F.col("payload").cast("string"),
                    "seq long, ts double, value double").alias("r"),
    ).select("producer", "r.seq", F.timestamp_seconds("r.ts").alias("event_time"), "r.value")
    agg = readings.groupBy("producer", F.window("event_time", WINDOW)).agg(
        F.count("*").alias("readings"), F.avg("value").alias("mean_value"),
        F.collect_list("seq").alias("seqs"))

    def publish(df: Any, batch_id: int) -> None:
        # complete mode: every batch carries the whole result, so overwriting is idempotent
        df = df.persist()
        try:
            df.write.mode("overwrite").parquet(str(results))
            row = df.agg(F.sum("readings")).first()
            state["counted"] = int(row[0] or 0) if row else 0
        finally:
            df.unpersist()

    return (agg.writeStream.outputMode("complete").foreachBatch(publish)
            .option("checkpointLocation", str(work / "checkpoint"))
            .trigger(processingTime="1 second").start())


def _stop(query: Any, wait_s: float = 20.0) -> None:
    """Stop the query between two triggers: stopping one mid-batch interrupts Spark's
    threads, which log stack traces (nothing is lost either way: the checkpoint decides)."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline and query.isActive:
        if not query.status.get("isTriggerActive", False):
            break
        time.sleep(0.05)
    query.stop()


def _check(spark: Any, results: Path, producers: int, sent: list[int]) -> dict[str, Any]:
    """Each producer's counted sequence numbers against what it sent (exact, per reading)."""
    from collections import Counter

    from pyspark.sql import functions as F

    df = spark.read.parquet(str(results))
    counts: dict[str, Counter[int]] = {}
    for r in df.select("producer", F.explode("seqs").alias("seq")).toLocalIterator():
        counts.setdefault(r["producer"], Counter())[r["seq"]] += 1
    rows, lost, dups, phantoms = [], 0, 0, 0
    for name in sorted(set(counts) | {f"producer-{i}" for i in range(producers)}):
        c = counts.get(name, Counter())
        n_sent = sent[int(name.rsplit("-", 1)[1])] if name.startswith("producer-") else 0
        p_lost = sum(1 for s in range(n_sent) if s not in c)
        p_dup = sum(v - 1 for v in c.values() if v > 1)
        p_phantom = sum(1 for s in c if not 0 <= s < n_sent)
        lost, dups, phantoms = lost + p_lost, dups + p_dup, phantoms + p_phantom
        rows.append({"producer": name, "sent": n_sent, "counted_distinct": len(c),
                     "duplicates": p_dup, "lost": p_lost, "phantoms": p_phantom})
    windows = (df.groupBy("producer", F.col("window.start").alias("start"))
               .agg(F.sum("readings").alias("n"), F.avg("mean_value").alias("mean"))
               .orderBy("start").collect())
    return {"producers": rows, "lost": lost, "duplicates": dups, "phantoms": phantoms,
            "windows": [{"producer": w["producer"], "start": w["start"].timestamp(),
                         "readings": int(w["n"]), "mean": float(w["mean"])} for w in windows]}


def _demo_html(result: dict[str, Any], check: dict[str, Any], plot: Path) -> str:
    import html

    rows = "\n".join(
        f"<tr><td>{html.escape(p['producer'])}</td><td>{p['sent']}</td>"
        f"<td>{p['counted_distinct']}</td><td>{p['duplicates']}</td><td>{p['lost']}</td></tr>"
        for p in check["producers"])
    relay = result["relay"]
    link_s = result.get("link_s")
    linked = (f"Their links came up {link_s:.1f} s after the producers started (the "
              "collector starts with the query, and each handshake goes through the lossy "
              "relay); only then did they send their first reading."
              if link_s is not None else
              "Some links were not up within the wait, so early readings waited in their "
              "producer until their link was: the first windows hold a burst of them.")
    restarted_at = result.get("restarted_at")
    if not result["restarts"] or restarted_at is None:
        restart = ""
    elif _restart_in_span(check, restarted_at):
        restart = ("The dashed line marks the moment the query was stopped and restarted from "
                   "its checkpoint while the producers kept sending: the windows on either "
                   "side are as full as the others, nothing lost or counted twice across it.")
    else:
        restart = ("The query was stopped and restarted from its checkpoint (once Spark had "
                   "counted its first readings) after the last reading had been sent, so the "
                   "restart falls outside these windows; the counts above show what it "
                   "restarted on: nothing lost or counted twice.")
    return f"""<h2>The demo's Spark query</h2>
<p>{result['sent']} readings sent by {len(check['producers'])} producers through a relay that
dropped {relay.get('dropped', 0)}, duplicated {relay.get('duplicated', 0)} and reordered
{relay.get('reordered', 0)} datagrams; the query was restarted {result['restarts']} time(s)
from its checkpoint. Spark counted {result['counted']}: lost {result['lost']}, duplicates
{result['duplicates']}, phantoms {result['phantoms']}.</p>
<table><tr><th>producer</th><th>sent</th><th>counted once</th><th>duplicates</th>
<th>lost</th></tr>
{rows}
</table>
<h3>Readings per window</h3>
<p>What the Spark query computed: the readings it counted in each one-second window of event
time (the time a producer stamped a reading as it sent it), stacked by producer. The
horizontal axis starts at the first window with a reading. {linked} Each producer sends at a
steady pace, so the full windows stand at about the same height; the first and the last are
partial seconds. {restart}</p>
<p><img src="{plot.parent.name}/{plot.name}" alt="readings per window"></p>
"""


def _restart_in_span(check: dict[str, Any], restarted_at: float) -> bool:
    """Whether the query's restart (wall time) fell while readings were being stamped."""
    starts = [w["start"] for w in check["windows"]]
    return bool(starts) and min(starts) <= restarted_at <= max(starts) + 1.0


def _windows_plot(check: dict[str, Any], path: Path, restarted_at: float | None = None
                  ) -> Path:
    """Readings counted per producer and window, from the first window with a reading;
    ``restarted_at`` (wall time) draws a line where the query was restarted."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(8, 4.2))
    wins = check["windows"]
    t0 = min((w["start"] for w in wins), default=0.0)
    starts = sorted({w["start"] for w in wins})
    bottom = dict.fromkeys(starts, 0)
    for p in sorted({w["producer"] for w in wins}):
        mine = {w["start"]: w["readings"] for w in wins if w["producer"] == p}
        heights = [mine.get(t, 0) for t in starts]
        ax.bar([t - t0 for t in starts], heights, width=0.8, align="edge",
               bottom=[bottom[t] for t in starts], label=p)
        for t, h in zip(starts, heights, strict=True):
            bottom[t] += h
    if wins and restarted_at is not None and _restart_in_span(check, restarted_at):
        ax.axvline(restarted_at - t0, color="#444", linestyle="--", linewidth=1,
                   label="query restarted")
    ax.set_xlabel(f"event time (s from the first reading's window; windows of {WINDOW})")
    ax.set_ylabel("readings counted (stacked)")
    ax.set_title("Readings per producer and window (Spark streaming query)")
    ax.grid(True, alpha=0.3)
    if wins:  # below the axes: the bars fill the plot
        ax.legend(fontsize="small", loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=6,
                  frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
    from rich.table import Table

    from a3m.spark import collector
    from a3m.spark.audit import audit
    from a3m.spark.report import write_report
    from a3m.spark.session import get_or_create
    from a3m.testing.relay import FaultRelay

    console = Console(stderr=True)
    work = Path(args.out).resolve()
    for sub in ("journals", "spool", "checkpoint", "results", "report_files"):
        shutil.rmtree(work / sub, ignore_errors=True)
    work.mkdir(parents=True, exist_ok=True)
    results = work / "results"
    total = args.producers * args.readings
    t_start = time.monotonic()

    console.print("[bold]a3m demo[/bold]: starting Spark ...")
    spark = get_or_create(args.master, app_name="a3m-demo",
                          conf={"spark.sql.shuffle.partitions": "2",
                                "spark.ui.enabled": "false"},
                          log_level="INFO" if args.verbose else "ERROR")
    state = {"counted": 0}
    spark_start_s = time.monotonic() - t_start
    port = _free_udp_port()
    restarts = 0
    restarted_at: float | None = None
    link_s: float | None = None
    relay = FaultRelay({"collector": ("127.0.0.1", port)}, loss=args.loss, dup=args.dup,
                       reorder=args.reorder, seed=args.seed)
    producers: Producers | None = None
    query = None
    try:
        t_q = time.monotonic()
        query = _query(spark, port, work, results, state)
        producers = Producers(args.producers, args.readings, args.rate,
                              relay.front("collector"), work / "journals")
        console.print("linking the producers to the collector through the lossy relay ...")
        link_s = producers.wait_linked(60)
        with Progress(TextColumn("{task.description:<22}"), BarColumn(),
                      TextColumn("{task.completed:>7}/{task.total}"), TimeElapsedColumn(),
                      console=console, transient=args.json) as bar:
            t_sent = bar.add_task("readings sent", total=total)
            t_count = bar.add_task("counted by Spark", total=total)
            producers.start()
            deadline = time.monotonic() + 600
            counted = 0
            while time.monotonic() < deadline:
                sent = producers.total_sent
                counted = state["counted"]
                bar.update(t_sent, completed=sent)
                bar.update(t_count, completed=counted)
                if (not args.no_restart and restarts == 0 and sent >= total // 2
                        and counted > 0):
                    bar.console.log("stopping the query and restarting it from its "
                                    "checkpoint (the producers keep sending)")
                    _stop(query)
                    restarted_at = time.time()
                    query = _query(spark, port, work, results, state)
                    restarts += 1
                if producers.errors or (sent >= total and counted >= total):
                    break
                if query.exception() is not None:
                    raise RuntimeError(f"the Spark query failed: {query.exception()}")
                time.sleep(0.5)
            producers.finish(timeout=60)
            query.processAllAvailable()
            counted = state["counted"]
            bar.update(t_count, completed=counted)
        query_s = time.monotonic() - t_q
    finally:
        if query is not None:
            _stop(query)
        collector.stop(work / "spool")  # closes the node: its journal is flushed
        if producers is not None:
            producers.close()
        relay.close()

    console.print("auditing the journals with Spark ...")
    t_a = time.monotonic()
    summary = audit(spark, str(work / "journals"))
    sent_per = producers.sent
    check = _check(spark, results, args.producers, sent_per)
    audit_s = time.monotonic() - t_a
    result: dict[str, Any] = {
        "sent": sum(sent_per), "counted": counted, "lost": check["lost"],
        "duplicates": check["duplicates"], "phantoms": check["phantoms"],
        "restarts": restarts, "link_s": None if link_s is None else round(link_s, 2),
        "relay": relay.stats.as_dict(),
        "producer_errors": producers.errors,
        "audit": {k: summary[k] for k in ("sent", "delivered", "lost", "duplicated",
                                          "phantoms", "exactly_once", "latency_us")},
    }
    result["exactly_once"] = (summary["exactly_once"] and check["lost"] == 0
                              and check["duplicates"] == 0 and check["phantoms"] == 0
                              and counted == result["sent"] == total
                              and not producers.errors)
    result["restarted_at"] = restarted_at
    plot = _windows_plot(check, work / "report_files" / "windows.png", restarted_at)
    report = write_report(summary, work / "report.html",
                          extra_html=_demo_html(result, check, plot),
                          title="A3M demo")
    result.update({"report": str(report), "spark_start_s": round(spark_start_s, 1),
                   "query_s": round(query_s, 1), "audit_s": round(audit_s, 1),
                   "elapsed_s": round(time.monotonic() - t_start, 1),
                   "master": spark.sparkContext.master})

    table = Table(title="a3m demo: readings through a faulty network into Spark")
    for col in ("producer", "sent", "counted once", "duplicates", "lost"):
        table.add_column(col, justify="right")
    for p in check["producers"]:
        table.add_row(p["producer"], str(p["sent"]), str(p["counted_distinct"]),
                      str(p["duplicates"]), str(p["lost"]))
    console.print(table)
    rs = result["relay"]
    console.print(f"relay: dropped {rs['dropped']}, duplicated {rs['duplicated']}, reordered "
                  f"{rs['reordered']} datagrams; query restarted {restarts} time(s)")
    console.print(f"audit of the journals: sent {summary['sent']}, delivered "
                  f"{summary['delivered']}, lost {summary['lost']}, duplicated "
                  f"{summary['duplicated']}, phantoms {summary['phantoms']}")
    verdict = ("[green]each reading counted exactly once[/green]" if result["exactly_once"]
               else "[red]NOT exactly once[/red]")
    console.print(f"sent {result['sent']}, counted {counted}: {verdict}")
    console.print(f"Spark: start {spark_start_s:.1f} s, query {query_s:.1f} s, audit "
                  f"{audit_s:.1f} s; total {result['elapsed_s']} s. Report: {report}")
    if args.json:
        print(json.dumps(result))
    return 0 if result["exactly_once"] else 1
