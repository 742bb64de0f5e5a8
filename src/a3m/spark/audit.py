"""The audit job: prove exactly-once per link from the delivery journals of any number of nodes.

A link is (sender node, sender socket) -> (receiver node, receiver socket). Sent rows name
the link from the sender's side, delivered rows from the receiver's; both carry the message's
``msg_id``, so a full outer join of the two sides per (link, msg_id) classifies each message:

- delivered: sent and delivered at least once (its first delivery gives the latency),
- lost: sent, never delivered,
- duplicated: delivered more than once (``duplicate_deliveries`` counts the extra copies),
- phantom: delivered, never sent.

Latency is first delivery minus the sender's journal time (or the ``sent_ts`` the message
carried when the sender's journal is missing), in microseconds; percentiles are exact
(Spark's ``percentile``, linear interpolation). Throughput is counted per second of wall time.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

LINK = ["src_node", "src_socket", "dst_node", "dst_socket"]
PERCENTILES = (0.5, 0.9, 0.99)
HIST_BINS_PER_DECADE = 20  # latency histogram: log-spaced buckets, computed in Spark


def journal_schema() -> Any:
    """The journal's schema as Spark sees it (``node`` from the partition directory)."""
    from pyspark.sql import types as T

    return T.StructType(
        [
            T.StructField("socket", T.StringType(), False),
            T.StructField("peer_node", T.StringType(), False),
            T.StructField("peer_socket", T.StringType(), False),
            T.StructField("direction", T.StringType(), False),
            T.StructField("msg_id", T.StringType(), False),
            T.StructField("size", T.LongType(), False),
            T.StructField("ts", T.TimestampType(), False),
            T.StructField("sent_ts", T.TimestampType(), True),
            T.StructField("node", T.StringType(), False),
        ]
    )


def read_journals(spark: SparkSession, directory: str) -> DataFrame:
    """Every node's journal under ``directory`` as one DataFrame."""
    base = str(directory).rstrip("/")
    if "://" not in base and not list(Path(base).glob("node=*/part-*.parquet")):
        raise FileNotFoundError(f"no journal files under {base}/node=*/")
    return (
        spark.read.schema(journal_schema())
        .option("basePath", base)
        .parquet(f"{base}/node=*/part-*.parquet")
    )


def per_message(journals: DataFrame) -> DataFrame:
    """One row per (link, msg_id): times sent and delivered, first times, size."""
    from pyspark.sql import functions as F

    us = F.unix_micros
    sent = (
        journals.where(F.col("direction") == "sent")
        .select(
            F.col("node").alias("src_node"),
            F.col("socket").alias("src_socket"),
            F.col("peer_node").alias("dst_node"),
            F.col("peer_socket").alias("dst_socket"),
            "msg_id",
            "size",
            us("ts").alias("ts"),
        )
        .groupBy(*LINK, "msg_id")
        .agg(F.count("*").alias("n_sent"), F.min("ts").alias("t_sent"),
             F.max("size").alias("sent_size"))
    )
    delivered = (
        journals.where(F.col("direction") == "delivered")
        .select(
            F.col("peer_node").alias("src_node"),
            F.col("peer_socket").alias("src_socket"),
            F.col("node").alias("dst_node"),
            F.col("socket").alias("dst_socket"),
            "msg_id",
            "size",
            us("ts").alias("ts"),
            us("sent_ts").alias("sent_ts"),
        )
        .groupBy(*LINK, "msg_id")
        .agg(F.count("*").alias("n_delivered"), F.min("ts").alias("t_delivered"),
             F.min("sent_ts").alias("carried_sent_ts"), F.max("size").alias("del_size"))
    )
    joined = sent.join(delivered, on=[*LINK, "msg_id"], how="full_outer")
    return joined.select(
        *LINK,
        "msg_id",
        F.coalesce("n_sent", F.lit(0)).alias("n_sent"),
        F.coalesce("n_delivered", F.lit(0)).alias("n_delivered"),
        F.coalesce("t_sent", "carried_sent_ts").alias("t_sent"),
        "t_delivered",
        F.coalesce("sent_size", "del_size").alias("size"),
    ).withColumn("latency_us", F.col("t_delivered") - F.col("t_sent"))


def _link_counts(msgs: DataFrame) -> DataFrame:
    from pyspark.sql import functions as F

    was_sent = F.col("n_sent") > 0
    got = F.col("n_delivered") > 0
    lat_ok = was_sent & got
    pct = F.percentile(F.when(lat_ok, F.col("latency_us")), list(PERCENTILES))
    return msgs.groupBy(*LINK).agg(
        F.sum(was_sent.cast("long")).alias("sent"),
        F.sum((was_sent & got).cast("long")).alias("delivered"),
        F.sum((was_sent & ~got).cast("long")).alias("lost"),
        F.sum((F.col("n_delivered") > 1).cast("long")).alias("duplicated"),
        F.sum(F.greatest(F.col("n_delivered") - 1, F.lit(0))).alias("duplicate_deliveries"),
        F.sum((~was_sent & got).cast("long")).alias("phantoms"),
        F.sum(F.when(got, F.col("size")).otherwise(0)).alias("bytes_delivered"),
        pct.alias("pct"),
        F.max(F.when(lat_ok, F.col("latency_us"))).alias("max_latency"),
    )


def _latency_dict(pcts: list[float] | None, max_us: float | None) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    values: list[float | None] = list(pcts) if pcts else [None] * len(PERCENTILES)
    for p, v in zip(PERCENTILES, values, strict=True):
        out[f"p{round(p * 100)}"] = None if v is None else float(v)
    out["max"] = None if max_us is None else float(max_us)
    return out


COUNTS = ("sent", "delivered", "lost", "duplicated", "duplicate_deliveries", "phantoms")


def audit(spark: SparkSession, directory: str) -> dict[str, Any]:
    """Run the audit over ``directory``; the summary as a JSON-ready dict."""
    from pyspark.sql import functions as F

    journals = read_journals(spark, directory)
    msgs = per_message(journals).persist()
    try:
        links = []
        for r in _link_counts(msgs).orderBy(*LINK).collect():
            entry: dict[str, Any] = {
                "src": f"{r['src_node']}/{r['src_socket']}",
                "dst": f"{r['dst_node']}/{r['dst_socket']}",
            }
            entry.update({k: int(r[k] or 0) for k in COUNTS})
            entry["bytes_delivered"] = int(r["bytes_delivered"] or 0)
            entry["latency_us"] = _latency_dict(r["pct"], r["max_latency"])
            links.append(entry)

        lat = msgs.where((F.col("n_sent") > 0) & (F.col("n_delivered") > 0))
        overall = lat.agg(
            F.percentile("latency_us", list(PERCENTILES)).alias("pct"),
            F.max("latency_us").alias("mx"),
            F.min("latency_us").alias("mn"),
            F.avg("latency_us").alias("mean"),
        ).first()
        latency = _latency_dict(overall["pct"] if overall else None,
                                overall["mx"] if overall else None)
        latency["min"] = None if overall is None or overall["mn"] is None else float(overall["mn"])
        latency["mean"] = (None if overall is None or overall["mean"] is None
                           else float(overall["mean"]))

        # Log-spaced latency histogram (bucket b covers [10^(b/k), 10^((b+1)/k)) us).
        k = HIST_BINS_PER_DECADE
        bucket = F.floor(F.log10(F.greatest(F.col("latency_us"), F.lit(1))) * k).cast("int")
        histogram = [
            {"lo_us": 10 ** (b / k), "hi_us": 10 ** ((b + 1) / k), "count": int(n)}
            for b, n in sorted(
                (row["b"], row["n"])
                for row in lat.groupBy(bucket.alias("b")).agg(F.count("*").alias("n")).collect()
            )
        ]

        throughput = _throughput(journals)
        nodes = sorted(r["node"] for r in journals.select("node").distinct().collect())
    finally:
        msgs.unpersist()

    totals = {k: sum(link[k] for link in links) for k in COUNTS}
    return {
        "dir": str(directory),
        "nodes": nodes,
        "links": links,
        "totals": totals,
        **totals,
        "exactly_once": totals["lost"] == 0 and totals["duplicated"] == 0
        and totals["phantoms"] == 0,
        "latency_us": latency,
        "latency_histogram": histogram,
        "throughput": throughput,
    }


def _throughput(journals: DataFrame) -> list[dict[str, Any]]:
    """Messages sent and delivered per second of wall time, every second from first to last."""
    from pyspark.sql import functions as F

    sec = F.floor(F.unix_micros("ts") / 1_000_000).cast("long")
    rows = (
        journals.groupBy(sec.alias("second"))
        .agg(
            F.sum((F.col("direction") == "sent").cast("long")).alias("sent"),
            F.sum((F.col("direction") == "delivered").cast("long")).alias("delivered"),
            F.sum(F.when(F.col("direction") == "delivered", F.col("size")).otherwise(0))
            .alias("bytes"),
        )
        .orderBy("second")
        .collect()
    )
    if not rows:
        return []
    by_sec = {int(r["second"]): r for r in rows}
    first, last = min(by_sec), max(by_sec)
    span = range(first, last + 1) if last - first <= 86_400 else sorted(by_sec)
    out = []
    for s in span:
        r = by_sec.get(s)
        out.append({
            "second": s,
            "t": s - first,
            "sent": int(r["sent"]) if r else 0,
            "delivered": int(r["delivered"]) if r else 0,
            "bytes_delivered": int(r["bytes"]) if r else 0,
        })
    return out
