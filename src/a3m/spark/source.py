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
- ``maxRowsPerBatch``: most rows per micro-batch (default 100000).
- ``journal``: a delivery-journal directory for the node (``a3m audit`` reads it).
- ``maxPending``: rows spooled but not committed before the node stops taking messages
  (back-pressure on producers; default 200000). ``idleTimeout``: seconds without a query
  before the node closes (default 120).

Columns: ``node`` and ``socket`` (the producer's), ``payload`` (binary), ``received_at``
(timestamp), ``topic`` (binary, SUB only) and ``offset`` (the row's index in the spool).

How it stays exactly-once: the node lives in a collector process (:mod:`a3m.spark.collector`)
that outlives query runs and spools each message durably before it leaves the node's memory.
Offsets are spool indexes: ``latestOffset`` reports only what is on disk, a replayed batch
reads the same rows again from the spool, and ``commit`` deletes what Spark will never ask
for again. A new query (no checkpoint: Spark asks for ``initialOffset``) starts at the end of
what is on disk: rows spooled for another query are never its rows. See ``docs/pipeline.md``
for the crash model.
"""

from __future__ import annotations

import hashlib
import io
import os
import tempfile
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

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
    """Rows ``[start, end)`` of the spool, carried as Arrow IPC bytes (no shared disk needed
    on executors)."""

    def __init__(self, start: int, end: int, data: bytes) -> None:
        super().__init__((start, end))
        self.start, self.end, self.data = start, end, data


class A3MStreamReader(DataSourceStreamReader):  # type: ignore[misc]
    def __init__(self, options: dict[str, str]) -> None:
        node = _opt(options, "node")
        if not node:
            raise ValueError('the a3m source needs .option("node", ...)')
        self.node = node
        self.bind = _opt(options, "bind", "127.0.0.1:0") or "127.0.0.1:0"
        self.socket = _opt(options, "socket", "events") or "events"
        self.kind = (_opt(options, "type", "PULL") or "PULL").upper()
        if self.kind not in ("PULL", "SUB"):
            raise ValueError("the a3m source's type is PULL or SUB")
        self.topics = _opt(options, "topics", "") or ""
        self.spool_dir = _opt(options, "spool") or os.path.join(
            tempfile.gettempdir(), "a3m-spool",
            f"{node}-{self.socket}-{self._digest()}")
        self.max_rows = int(_opt(options, "maxRowsPerBatch", "100000") or 100000)
        self.journal = _opt(options, "journal")
        self.max_pending = int(_opt(options, "maxPending", "200000") or 200000)
        self.idle_timeout = float(_opt(options, "idleTimeout", "120") or 120)

    def config(self) -> dict[str, str]:
        """What the collector must serve for this source (compared with a running one's)."""
        return {"node": self.node, "bind": self.bind, "socket": self.socket,
                "type": self.kind, "topics": self.topics}

    def _digest(self) -> str:
        text = "\0".join(f"{k}={v}" for k, v in sorted(self.config().items()))
        return hashlib.sha256(text.encode()).hexdigest()[:12]

    # The collector is started lazily, from the process where Spark runs these methods.
    def _ensure(self) -> Any:
        from a3m.spark import collector
        from a3m.spark.spool import Spool

        args = ["--node", self.node, "--bind", self.bind, "--socket", self.socket,
                "--type", self.kind, "--topics", self.topics,
                "--max-pending", str(self.max_pending),
                "--idle-timeout", str(self.idle_timeout)]
        if self.journal:
            args += ["--journal", self.journal]
        collector.ensure_running(self.spool_dir, args, config=self.config())
        return Spool(self.spool_dir)

    def initialOffset(self) -> dict[str, int]:
        """Only a query without a checkpoint asks: it starts at the end of what is on disk
        (what is there was spooled for another query, which may come back for it)."""
        return {"offset": self._ensure().durable_end()}

    def latestOffset(self, start: dict[str, int] | None = None, limit: Any = None
                     ) -> dict[str, int]:
        spool = self._ensure()
        end = spool.durable_end()
        begin = int(start["offset"]) if start else spool.start()
        cap = self.max_rows
        max_rows = getattr(limit, "max_rows", None) or getattr(limit, "maxRows", None)
        if max_rows:
            cap = min(cap, int(max_rows))
        return {"offset": max(begin, min(end, begin + cap))}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[SpoolPartition]:
        import pyarrow.ipc as ipc  # type: ignore[import-untyped]

        from a3m.spark.spool import Spool

        s, e = int(start["offset"]), int(end["offset"])
        if e <= s:
            return []
        table = Spool(self.spool_dir).read(s, e)
        parts = []
        for lo in range(0, e - s, ROWS_PER_PARTITION):
            chunk = table.slice(lo, ROWS_PER_PARTITION)
            buf = io.BytesIO()
            with ipc.new_stream(buf, chunk.schema) as w:
                w.write_table(chunk)
            parts.append(SpoolPartition(s + lo, s + lo + chunk.num_rows, buf.getvalue()))
        return parts

    def read(self, partition: SpoolPartition) -> Any:
        """The partition's rows as Arrow record batches, in the schema's column order: Spark
        takes them without turning each row into Python objects (about 10x faster than
        yielding tuples: bench/source_rate.py)."""
        import pyarrow as pa
        import pyarrow.ipc as ipc

        table = ipc.open_stream(partition.data).read_all().select(READ_COLUMNS)
        # Spark's schema has every column nullable; the spool's says which never are.
        nullable = pa.schema([f.with_nullable(True) for f in table.schema])
        yield from table.cast(nullable).to_batches()

    def commit(self, end: dict[str, int]) -> None:
        from a3m.spark import collector
        from a3m.spark.spool import Spool

        Spool(self.spool_dir).commit(int(end["offset"]))
        collector.heartbeat(self.spool_dir)

    def stop(self) -> None:
        """Nothing: the collector outlives this query run (a restart finds it)."""
