"""``spark.readStream.format("a3m")``: messages sent to an A3M socket, exactly once.

Options (keys are case-insensitive):

- ``node`` (required): the receiving node's id; ``bind``: its address (``host:port``;
  producers must know it, so give a fixed port); ``socket``: the socket's tag (``events``).
- ``type``: ``PULL`` (default) or ``SUB`` with ``topics`` (comma-separated prefixes).
- ``spool``: the directory where received messages are made durable (default
  ``<tmp>/a3m-spool/<node>-<socket>-<digest of node, bind, socket, type, topics>``, so sources
  configured differently never share one); keep it beside the query's checkpoint. One
  collector serves a spool: a query whose options differ from the running collector's is
  refused with an error that says so.
- ``partitions``: how many receiving nodes (default 1), each with its own spool partition
  (``<spool>/part-<i>``) and collector; node ids ``<node>-<i>`` when more than one, ``bind``
  then a comma-separated list of addresses (or one ``host:port``: ports ``port + i``).
  Producers spread their messages over the nodes (one PUSH socket linked to all of them
  load-balances). Each micro-batch has one Spark input partition per spool partition (more
  when a partition holds more than 50 000 rows), read by executors straight from storage.
- ``collectors``: ``managed`` (default: the source starts its collectors on the host where
  Spark runs the offset methods) or ``external`` (collectors run as services of their own,
  ``a3m collect --spool <spool>/part-<i> ...``, on any host; the source only reads their
  spools, which may then be any ``pyarrow.fs`` URI: a shared mount, ``s3://``, ``hdfs://``).
- ``dedup``: ``true`` when the producers are an a3m sink with ``idempotent=true`` (another
  query): the collector unwraps each message and drops a retried task's repeats
  (:mod:`a3m.spark.idempotent`), so the chain stays exactly-once through a killed executor.
- ``maxRowsPerBatch``: most rows per micro-batch (default 100000), shared out over the
  partitions.
- ``journal``: a delivery-journal directory for the node (``a3m audit`` reads it).
- ``maxPending``: rows spooled but not committed before the node stops taking messages
  (back-pressure on producers; default 200000). ``idleTimeout``: seconds without a query
  before the node closes (default 120).
- ``metricsPort``: each collector serves its node's metrics for Prometheus
  (:mod:`a3m.metrics`) at ``http://127.0.0.1:<metricsPort + partition>/metrics`` (0, the
  default: off).

Columns: ``node`` and ``socket`` (the producer's), ``payload`` (binary), ``received_at``
(timestamp), ``topic`` (binary, SUB only) and ``offset`` (the row's index in its spool
partition).

How it stays exactly-once: the node lives in a collector process (:mod:`a3m.spark.collector`)
that outlives query runs and spools each message durably before it leaves the node's memory.
Offsets are spool indexes, one per partition (``{"0": n0, "1": n1, ...}``; a checkpoint
of the unpartitioned source's ``{"offset": n}`` is partition 0): ``latestOffset`` reports only
what is on disk, a replayed batch reads the same rows again from the spool, and ``commit``
deletes what Spark will never ask for again. Input partitions carry only where to read
(spool location and index range): executors open the Arrow IPC segments themselves through
``pyarrow.fs``, so rows never travel through the driver. A new query (no checkpoint: Spark asks for ``initialOffset``) starts at the end of
what is on disk: rows spooled for another query are never its rows. See ``docs/pipeline.md``
for the crash model.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

from a3m.spark.spool import SpoolView, partition_dirs, read_batches

SCHEMA_DDL = ("node string, socket string, payload binary, received_at timestamp, "
              "topic binary, offset long")
ROWS_PER_PARTITION = 50_000
READ_COLUMNS = ["node", "socket", "payload", "received_at", "topic", "offset"]  # SCHEMA_DDL


def _opt(options: Any, name: str, default: str | None = None) -> str | None:
    value = options.get(name.lower(), options.get(name))
    return default if value is None else str(value)


class A3MDataSource(DataSource):
    """The ``a3m`` format: a streaming source and a streaming sink."""

    @classmethod
    def name(cls) -> str:
        return "a3m"

    def schema(self) -> str:
        return SCHEMA_DDL

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return A3MStreamReader(dict(self.options))

    def streamWriter(self, schema: StructType, overwrite: bool) -> Any:
        from a3m.spark.sink import A3MStreamWriter

        return A3MStreamWriter(dict(self.options), schema)


class SpoolPartition(InputPartition):  # type: ignore[misc]
    """Rows ``[start, end)`` of one spool partition: only where to read them (executors
    open the segments themselves, through ``pyarrow.fs``)."""

    def __init__(self, location: str, part: int, start: int, end: int) -> None:
        super().__init__((part, start, end))
        self.location, self.part, self.start, self.end = location, part, start, end


Offsets = dict[str, int]


def _ends(offset: dict[str, Any] | None, n: int) -> list[int] | None:
    """Per-partition indexes of a Spark offset (the old single-spool form is partition 0)."""
    if not offset:
        return None
    if "offset" in offset:
        return [int(offset["offset"])] + [0] * (n - 1)
    return [int(offset.get(str(i), 0)) for i in range(n)]


def _offset(ends: list[int]) -> Offsets:
    return {str(i): e for i, e in enumerate(ends)}


class A3MStreamReader(DataSourceStreamReader):  # type: ignore[misc]
    def __init__(self, options: dict[str, str]) -> None:
        node = _opt(options, "node")
        if not node:
            raise ValueError('the a3m source needs .option("node", ...)')
        self.node = node
        self.parts = int(_opt(options, "partitions", "1") or 1)
        if self.parts < 1:
            raise ValueError("the a3m source's partitions is >= 1")
        self.bind = _opt(options, "bind", "127.0.0.1:0") or "127.0.0.1:0"
        self.binds = _binds(self.bind, self.parts)
        self.socket = _opt(options, "socket", "events") or "events"
        self.kind = (_opt(options, "type", "PULL") or "PULL").upper()
        if self.kind not in ("PULL", "SUB"):
            raise ValueError("the a3m source's type is PULL or SUB")
        self.topics = _opt(options, "topics", "") or ""
        self.managed = (_opt(options, "collectors", "managed") or "managed").lower()
        if self.managed not in ("managed", "external"):
            raise ValueError("the a3m source's collectors is managed or external")
        flag = (_opt(options, "dedup", "false") or "false").lower()
        if flag not in ("true", "false"):
            raise ValueError("the a3m source's dedup option is true or false")
        self.dedup = flag == "true"
        self.spool_dir = _opt(options, "spool") or os.path.join(
            tempfile.gettempdir(), "a3m-spool",
            f"{node}-{self.socket}-{self._digest()}")
        self.locations = partition_dirs(self.spool_dir, self.parts)
        self.max_rows = int(_opt(options, "maxRowsPerBatch", "100000") or 100000)
        self.journal = _opt(options, "journal")
        self.max_pending = int(_opt(options, "maxPending", "200000") or 200000)
        self.idle_timeout = float(_opt(options, "idleTimeout", "120") or 120)
        self.metrics_port = int(_opt(options, "metricsPort", "0") or 0)

    def node_ids(self) -> list[str]:
        """The receiving nodes' ids, one per partition (producers link to these)."""
        if self.parts == 1:
            return [self.node]
        return [f"{self.node}-{i}" for i in range(self.parts)]

    def config(self, part: int = 0) -> dict[str, str]:
        """What the collector of a partition must serve (compared with a running one's)."""
        cfg = {"node": self.node_ids()[part], "bind": self.binds[part],
               "socket": self.socket, "type": self.kind, "topics": self.topics}
        if self.dedup:
            cfg["dedup"] = "true"
        return cfg

    def _digest(self) -> str:
        text = "\0".join(f"{k}={v}" for k, v in sorted(self.config().items()))
        if self.parts > 1:
            text += f"\0partitions={self.parts}\0binds={','.join(self.binds)}"
        return hashlib.sha256(text.encode()).hexdigest()[:12]

    # The collectors are started lazily, from the process where Spark runs these methods.
    def _ensure(self) -> list[SpoolView]:
        if self.managed == "managed":
            from a3m.spark import collector

            wanted = []
            for i, loc in enumerate(self.locations):
                cfg = self.config(i)
                args = ["--node", cfg["node"], "--bind", cfg["bind"], "--socket",
                        self.socket, "--type", self.kind, "--topics", self.topics,
                        "--max-pending", str(self.max_pending),
                        "--idle-timeout", str(self.idle_timeout)]
                if self.journal:
                    args += ["--journal", self.journal]
                if self.dedup:
                    args.append("--dedup")
                if self.metrics_port:  # partition i serves on the port after i
                    args += ["--metrics-port", str(self.metrics_port + i)]
                wanted.append((loc, args, cfg))
            collector.ensure_all(wanted)
        return [SpoolView(loc) for loc in self.locations]

    def initialOffset(self) -> Offsets:
        """Only a query without a checkpoint asks: it starts at the end of what is on disk
        (what is there was spooled for another query, which may come back for it)."""
        return _offset([v.durable_end() for v in self._ensure()])

    def latestOffset(self, start: dict[str, Any] | None = None, limit: Any = None
                     ) -> Offsets:
        views = self._ensure()
        begins = _ends(start, self.parts) or [v.start() for v in views]
        ends = [v.durable_end() for v in views]
        cap = self.max_rows
        max_rows = getattr(limit, "max_rows", None) or getattr(limit, "maxRows", None)
        if max_rows:
            cap = min(cap, int(max_rows))
        return _offset(_share(begins, ends, cap))

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[SpoolPartition]:
        starts = _ends(start, self.parts) or [0] * self.parts
        ends = _ends(end, self.parts) or starts
        parts = []
        for i, (s, e) in enumerate(zip(starts, ends, strict=True)):
            for lo in range(s, e, ROWS_PER_PARTITION):
                parts.append(SpoolPartition(self.locations[i], i, lo,
                                            min(e, lo + ROWS_PER_PARTITION)))
        return parts

    def read(self, partition: SpoolPartition) -> Any:
        """The partition's rows as Arrow record batches read from the spool's segments, in
        the schema's column order: Spark takes them without turning each row into Python
        objects (about 10x faster than yielding tuples: bench/source_rate.py)."""
        import pyarrow as pa

        nullable = None
        for batch in read_batches(partition.location, partition.start, partition.end,
                                  READ_COLUMNS):
            if nullable is None:  # Spark's schema has every column nullable
                nullable = pa.schema([f.with_nullable(True) for f in batch.schema])
            yield batch.cast(nullable)

    def commit(self, end: dict[str, Any]) -> None:
        ends = _ends(end, self.parts) or []
        for loc, e in zip(self.locations, ends, strict=True):
            SpoolView(loc).commit(e)
        if self.managed == "managed":
            from a3m.spark import collector

            for loc in self.locations:
                collector.heartbeat(loc)

    def stop(self) -> None:
        """Nothing: the collectors outlive this query run (a restart finds them)."""


def _binds(bind: str, n: int) -> list[str]:
    """``n`` addresses from a comma-separated list, or from one ``host:port`` (ports
    ``port + i``; port 0 stays 0: an ephemeral port each)."""
    items = [b.strip() for b in bind.split(",") if b.strip()]
    if len(items) == n:
        return items
    if len(items) != 1:
        raise ValueError(f"the a3m source has {n} partitions and {len(items)} bind "
                         f"addresses: give one or {n}")
    host, _, port = items[0].rpartition(":")
    p = int(port)
    return [f"{host}:{p + i if p else 0}" for i in range(n)]


def _share(begins: list[int], ends: list[int], cap: int) -> list[int]:
    """Ends advanced by at most ``cap`` rows in all, shared out over the partitions (each
    gets an equal share; what one cannot use goes to the others)."""
    avail = [max(0, e - b) for b, e in zip(begins, ends, strict=True)]
    take = [0] * len(avail)
    left = cap
    while left > 0:
        open_ = [i for i, a in enumerate(avail) if a > take[i]]
        if not open_:
            break
        share = max(1, left // len(open_))
        for i in open_:
            t = min(share, avail[i] - take[i], left)
            take[i] += t
            left -= t
            if left <= 0:
                break
    return [b + t for b, t in zip(begins, take, strict=True)]
