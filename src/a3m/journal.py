"""Delivery journals: what each socket of a node sent and delivered, as partitioned Parquet.

A node calls :meth:`JournalWriter.record_sent` / :meth:`JournalWriter.record_delivered` from
its hot path. Each call appends one tuple to a bounded in-memory buffer; a background thread
turns the buffer into Arrow columns and writes Parquet files under ``DIR/node=<id>/`` (Hive
partitioning, so Spark or ``pyarrow.dataset`` recover the ``node`` column from the path).

The buffer is bounded. When it is full the caller **blocks** until the flusher has taken the
rows: a journal that dropped rows under load would make the audit report losses that never
happened (or hide phantoms), so back-pressure is the only honest choice. With the defaults the
flusher takes a batch every ``flush_interval_s`` or as soon as ``batch_rows`` are pending, so a
caller blocks only when the disk cannot keep up.

Schema (``docs/pipeline.md``): ``node`` (partition), ``socket``, ``peer_node``, ``peer_socket``,
``direction`` (``sent`` / ``delivered``), ``msg_id``, ``size``, ``ts`` (UTC, microseconds) and
``sent_ts`` (the sender's timestamp carried in the message, delivered rows only, may be null).
Only pyarrow is needed, never pyspark.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pyarrow as pa
import pyarrow.parquet as pq

SENT = "sent"
DELIVERED = "delivered"

# Columns stored in each file; ``node`` lives in the directory name (Hive partitioning).
FILE_SCHEMA = pa.schema(
    [
        pa.field("socket", pa.string(), nullable=False),
        pa.field("peer_node", pa.string(), nullable=False),
        pa.field("peer_socket", pa.string(), nullable=False),
        pa.field("direction", pa.string(), nullable=False),
        pa.field("msg_id", pa.string(), nullable=False),
        pa.field("size", pa.int64(), nullable=False),
        pa.field("ts", pa.timestamp("us", tz="UTC"), nullable=False),
        pa.field("sent_ts", pa.timestamp("us", tz="UTC"), nullable=True),
    ]
)
COLUMNS = [f.name for f in FILE_SCHEMA]

Peer = tuple[str, str] | Sequence[str] | str


class JournalError(RuntimeError):
    """The journal cannot record any more (its flusher failed, or it is closed)."""


def message_id(node: str, socket: str, seq: int, inc: int = 0) -> str:
    """A message's identity: its sender (node, socket), the sender's link incarnation and the
    link sequence number, ``node/socket/inc:seq``. Both ends of a link know all four."""
    return f"{node}/{socket}/{inc}:{seq}"


def _split_peer(peer: Peer) -> tuple[str, str]:
    if isinstance(peer, str):
        node, sep, sock = peer.partition("/")
        if not sep:
            raise ValueError(f"peer {peer!r} is not 'node/socket'")
        return node, sock
    node, sock = peer  # a tuple or an a3m.SocketId
    return str(node), str(sock)


def _us(t: float) -> int:
    return int(round(t * 1_000_000))


def partition_dir(root: str | os.PathLike[str], node: str) -> Path:
    """``root/node=<id>``, the id escaped the way Spark unescapes partition values."""
    return Path(root) / f"node={quote(node, safe='')}"


class JournalWriter:
    """Append-only journal of one node; thread-safe; flushes off the caller's thread.

    ``t`` arguments are wall-clock seconds (``time.time()``), comparable across nodes.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        node: str,
        *,
        max_buffer_rows: int = 65_536,
        batch_rows: int = 16_384,
        flush_interval_s: float = 1.0,
    ) -> None:
        if max_buffer_rows < 1 or batch_rows < 1:
            raise ValueError("max_buffer_rows and batch_rows must be positive")
        self.node = node
        self.directory = partition_dir(directory, node)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.max_buffer_rows = max_buffer_rows
        self.batch_rows = min(batch_rows, max_buffer_rows)
        self.flush_interval_s = flush_interval_s
        self._rows: list[tuple[Any, ...]] = []
        self._cond = threading.Condition()
        self._closing = False
        self._closed = False
        self._error: BaseException | None = None
        self._flush_requested = False
        self._flushing = 0  # rows taken by the flusher and not yet on disk
        self._file_seq = 0
        self._prefix = uuid.uuid4().hex[:12]
        self.rows_written = 0
        self.files_written = 0
        self.blocked = 0  # how many appends had to wait for room
        self._thread = threading.Thread(
            target=self._run, name=f"a3m-journal-{node}", daemon=True
        )
        self._thread.start()

    # -- hot path ---------------------------------------------------------------------------
    def record_sent(self, socket: str, peer: Peer, msg_id: str, size: int, t: float) -> None:
        """``socket`` handed message ``msg_id`` of ``size`` bytes towards ``peer`` at ``t``."""
        pn, ps = _split_peer(peer)
        self._append((socket, pn, ps, SENT, msg_id, size, _us(t), None))

    def record_delivered(
        self,
        socket: str,
        peer: Peer,
        msg_id: str,
        size: int,
        t_sent: float | None,
        t: float,
    ) -> None:
        """``socket`` delivered ``msg_id`` from ``peer`` to the application at ``t``."""
        pn, ps = _split_peer(peer)
        sent_us = None if t_sent is None else _us(t_sent)
        self._append((socket, pn, ps, DELIVERED, msg_id, size, _us(t), sent_us))

    def _append(self, row: tuple[Any, ...]) -> None:
        with self._cond:
            if len(self._rows) >= self.max_buffer_rows:
                self.blocked += 1
                while len(self._rows) >= self.max_buffer_rows and self._error is None:
                    if self._closing:
                        break
                    self._flush_requested = True
                    self._cond.notify_all()  # wake the flusher now
                    self._cond.wait()
            if self._error is not None:
                raise JournalError(f"journal of {self.node} failed") from self._error
            if self._closing:
                raise JournalError(f"journal of {self.node} is closed")
            self._rows.append(row)
            if len(self._rows) >= self.batch_rows:
                self._cond.notify_all()

    # -- flushing ---------------------------------------------------------------------------
    def flush(self, timeout: float | None = None) -> None:
        """Block until every row recorded before this call is on disk."""
        with self._cond:
            self._flush_requested = True
            self._cond.notify_all()
            ok = self._cond.wait_for(
                lambda: (not self._rows and not self._flushing) or self._error is not None,
                timeout,
            )
            if self._error is not None:
                raise JournalError(f"journal of {self.node} failed") from self._error
            if not ok:
                raise TimeoutError(f"journal of {self.node} did not flush in {timeout} s")

    def close(self, timeout: float | None = None) -> None:
        """Flush what is buffered, stop the flusher; raises if any write failed."""
        with self._cond:
            if self._closed:
                return
            self._closing = True
            self._cond.notify_all()
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise TimeoutError(f"journal of {self.node} did not close in {timeout} s")
        self._closed = True
        if self._error is not None:
            raise JournalError(f"journal of {self.node} failed") from self._error

    def __enter__(self) -> JournalWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(
                    lambda: self._closing or self._flush_requested
                    or len(self._rows) >= self.batch_rows,
                    self.flush_interval_s,
                )
                self._flush_requested = False
                rows, self._rows = self._rows, []
                self._flushing = len(rows)
                closing = self._closing
                self._cond.notify_all()  # room for blocked callers
            try:
                if rows:
                    self._write(rows)
            except BaseException as exc:  # surfaced to callers and to close()
                with self._cond:
                    self._error = exc
                    self._flushing = 0
                    self._cond.notify_all()
                return
            with self._cond:
                self._flushing = 0
                self._cond.notify_all()
                if closing and not self._rows:
                    return

    def _write(self, rows: list[tuple[Any, ...]]) -> None:
        columns = list(zip(*rows, strict=True))
        arrays = [
            pa.array(col, type=field.type) for col, field in zip(columns, FILE_SCHEMA, strict=True)
        ]
        table = pa.Table.from_arrays(arrays, schema=FILE_SCHEMA)
        name = f"part-{self._prefix}-{self._file_seq:06d}.parquet"
        self._file_seq += 1
        tmp = self.directory / f".{name}.tmp"  # Spark and pyarrow skip dot files
        pq.write_table(table, tmp)
        os.replace(tmp, self.directory / name)
        self.rows_written += len(rows)
        self.files_written += 1


class NodeJournal:
    """Journals a node's traffic: the :class:`~a3m.core.node_core.DeliveryObserver` that
    ``a3m.Node(..., journal=DIR)`` installs. ``sent`` is recorded when a socket puts a DATA
    message on a link, ``delivered`` when the receiving socket accepts it in order (from there
    it waits in the socket's bounded queue for the application)."""

    def __init__(self, directory: str | os.PathLike[str], node: str, **options: Any) -> None:
        self.node = node
        self.writer = JournalWriter(directory, node, **options)

    def on_sent(self, tag: str, peer: tuple[str, str], inc: int, seq: int, size: int) -> None:
        self.writer._append((tag, peer[0], peer[1], SENT, f"{self.node}/{tag}/{inc}:{seq}",
                             size, _us(time.time()), None))

    def on_delivered(self, tag: str, peer: tuple[str, str], peer_inc: int, seq: int,
                     size: int) -> None:
        self.writer._append((tag, peer[0], peer[1], DELIVERED,
                             f"{peer[0]}/{peer[1]}/{peer_inc}:{seq}", size, _us(time.time()),
                             None))

    def flush(self, timeout: float | None = None) -> None:
        self.writer.flush(timeout)

    def close(self, timeout: float | None = None) -> None:
        self.writer.close(timeout)


def read_journal(directory: str | os.PathLike[str]) -> pa.Table:
    """All journal rows under ``directory`` (every node), ``node`` restored from the path."""
    import pyarrow.dataset as ds

    part = ds.partitioning(pa.schema([pa.field("node", pa.string())]), flavor="hive")
    files = sorted(str(p) for p in Path(directory).glob("node=*/part-*.parquet"))
    schema = pa.schema([pa.field("node", pa.string()), *FILE_SCHEMA])
    dataset = ds.dataset(
        files, schema=schema, format="parquet", partitioning=part,
        partition_base_dir=str(directory),
    )
    return dataset.to_table()
