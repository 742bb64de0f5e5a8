"""The source's spool: received messages made durable and replayable by index (pyarrow only).

Rows get consecutive indexes from 0. Each :meth:`Spool.append` writes one Arrow IPC segment
``seg-<first>-<end>.arrow`` (a temporary file, fsync, rename, fsync of the directory), so a
segment is either whole on disk or absent. ``committed`` records the lowest index still
needed; :meth:`Spool.commit` deletes the segments wholly below it. The streaming source reports
an offset only up to :meth:`Spool.durable_end`, so whatever Spark asks for (again, after a
restart) is on disk.

A partitioned source has one spool per partition (``part-<i>`` under its root, see
:func:`partition_dirs`). Executors read rows straight from storage with :func:`read_batches`,
through ``pyarrow.fs``: a local path, a shared mount, or any filesystem URI pyarrow knows
(``s3://``, ``hdfs://``, ``gs://``, ...), never through Spark's driver.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.ipc as ipc

SCHEMA = pa.schema([
    pa.field("node", pa.string(), nullable=False),
    pa.field("socket", pa.string(), nullable=False),
    pa.field("topic", pa.binary(), nullable=True),
    pa.field("payload", pa.binary(), nullable=False),
    pa.field("received_at", pa.timestamp("us", tz="UTC"), nullable=False),
    pa.field("offset", pa.int64(), nullable=False),
])
_SEG = re.compile(r"^seg-(\d{20})-(\d{20})\.arrow$")
COMMITTED = "committed"
PART_PREFIX = "part-"


def partition_dirs(root: str, partitions: int) -> list[str]:
    """The spool directory of each partition: ``root`` itself for one partition (the layout
    of an unpartitioned source), else ``root/part-<i>``."""
    if partitions <= 1:
        return [root]
    sep = "" if root.endswith("/") else "/"
    return [f"{root}{sep}{PART_PREFIX}{i:04d}" for i in range(partitions)]


@dataclass(frozen=True)
class Segment:
    first: int
    end: int
    path: Path


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Spool:
    """One directory of segments. Appends come from one process (the collector), which keeps
    the end in memory once it has listed the directory; readers (the streaming source) only
    list, read and commit."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self._end: int | None = None  # the writer's own end (it is the only one appending)

    # ------------------------------------------------------------------ reading state

    def segments(self) -> list[Segment]:
        out = []
        for name in os.listdir(self.dir):
            m = _SEG.match(name)
            if m:
                out.append(Segment(int(m[1]), int(m[2]), self.dir / name))
        out.sort(key=lambda s: s.first)
        return out

    def committed(self) -> int:
        try:
            return int((self.dir / COMMITTED).read_text().strip() or 0)
        except FileNotFoundError:
            return 0

    def durable_end(self) -> int:
        """One past the last index on disk (indexes below it are durable or committed)."""
        segs = self.segments()
        return max(segs[-1].end if segs else 0, self.committed())

    def start(self) -> int:
        """The lowest index still on disk (where a query without a checkpoint starts)."""
        segs = self.segments()
        return segs[0].first if segs else self.durable_end()

    def read(self, start: int, end: int) -> pa.Table:
        """Rows with ``start <= offset < end`` (every one must be on disk)."""
        batches = list(read_batches(str(self.dir), start, end))
        return (pa.Table.from_batches(batches, SCHEMA) if batches
                else SCHEMA.empty_table()).combine_chunks()

    # ------------------------------------------------------------------ writing

    def append(self, rows: dict[str, Any]) -> tuple[int, int]:
        """Write rows (columns without ``offset``: lists or Arrow arrays) durably; returns
        their ``[first, end)``."""
        n = len(rows["payload"])
        if self._end is None:
            self._end = self.durable_end()
        first = self._end
        end = first + n
        columns = [rows["node"], rows["socket"], rows["topic"], rows["payload"],
                   rows["received_at"], pa.array(range(first, end), pa.int64())]
        batch = pa.RecordBatch.from_arrays(
            [c if isinstance(c, pa.Array) else pa.array(c, f.type)
             for c, f in zip(columns, SCHEMA, strict=True)], schema=SCHEMA)
        name = f"seg-{first:020d}-{end:020d}.arrow"
        tmp = self.dir / f".{name}.tmp"
        with open(tmp, "wb") as f:
            with ipc.new_file(f, SCHEMA) as writer:
                writer.write_batch(batch)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.dir / name)
        _fsync_dir(self.dir)
        self._end = end
        return first, end

    def commit(self, end: int) -> int:
        """Spark will never ask for indexes below ``end`` again: delete what is wholly below.
        Returns how many segments were deleted."""
        if end <= self.committed():
            return 0
        tmp = self.dir / f".{COMMITTED}.tmp"
        tmp.write_text(str(end))
        os.replace(tmp, self.dir / COMMITTED)
        deleted = 0
        for seg in self.segments():
            if seg.end <= end:
                seg.path.unlink(missing_ok=True)
                deleted += 1
        return deleted

    def pending(self) -> int:
        """Rows on disk that Spark has not committed yet (the writer's cheap version: no
        listing once it knows its end)."""
        if self._end is None:
            return self.durable_end() - max(self.committed(), self.start())
        return max(0, self._end - self.committed())


# ---------------------------------------------------------------------- reading anywhere

def _filesystem(location: str) -> tuple[Any, str]:
    """A pyarrow filesystem and the path inside it, for a local path or any URI."""
    if "://" not in location:
        return pafs.LocalFileSystem(), os.path.abspath(location)
    return pafs.FileSystem.from_uri(location)


class SpoolView:
    """The reading side of one spool, wherever it is stored (a local path or any
    ``pyarrow.fs`` URI): what the source's offset methods need (list, commit), no writing
    of segments."""

    def __init__(self, location: str) -> None:
        self.location = location
        self.fs, self.base = _filesystem(location)

    def _segments(self) -> list[tuple[int, int, str]]:
        try:
            infos = self.fs.get_file_info(pafs.FileSelector(self.base))
        except FileNotFoundError:
            return []
        out = []
        for info in infos:
            m = _SEG.match(info.base_name)
            if m:
                out.append((int(m[1]), int(m[2]), info.path))
        out.sort()
        return out

    def committed(self) -> int:
        try:
            with self.fs.open_input_stream(f"{self.base}/{COMMITTED}") as f:
                return int(f.read().decode().strip() or 0)
        except FileNotFoundError:
            return 0

    def durable_end(self) -> int:
        segs = self._segments()
        return max(segs[-1][1] if segs else 0, self.committed())

    def start(self) -> int:
        segs = self._segments()
        return segs[0][0] if segs else self.durable_end()

    def commit(self, end: int) -> int:
        """As :meth:`Spool.commit`, through the filesystem API."""
        if end <= self.committed():
            return 0
        tmp = f"{self.base}/.{COMMITTED}.tmp"
        with self.fs.open_output_stream(tmp) as f:
            f.write(str(end).encode())
        self.fs.move(tmp, f"{self.base}/{COMMITTED}")
        deleted = 0
        for _first, seg_end, path in self._segments():
            if seg_end <= end:
                try:
                    self.fs.delete_file(path)
                except FileNotFoundError:
                    pass
                deleted += 1
        return deleted


def read_batches(location: str, start: int, end: int,
                 columns: list[str] | None = None) -> Iterator[pa.RecordBatch]:
    """Rows ``[start, end)`` of the spool at ``location`` as Arrow record batches, straight
    from its segments (local path or any ``pyarrow.fs`` URI). Raises when some rows are no
    longer (or not yet) there."""
    if end <= start:
        return
    fs, base = _filesystem(location)
    segs = []
    for info in fs.get_file_info(pafs.FileSelector(base)):
        m = _SEG.match(info.base_name)
        if m and int(m[2]) > start and int(m[1]) < end:
            segs.append((int(m[1]), int(m[2]), info.path))
    segs.sort()
    expect = start
    for first, seg_end, path in segs:
        if first > expect:
            break
        with fs.open_input_file(path) as f:
            reader = ipc.open_file(f)
            at = first
            for i in range(reader.num_record_batches):
                batch = reader.get_batch(i)
                lo, hi = max(start, at) - at, min(end, at + batch.num_rows) - at
                at += batch.num_rows
                if hi <= lo:
                    continue
                part = batch.slice(lo, hi - lo)
                yield part.select(columns) if columns else part
        expect = seg_end
    if expect < end:
        raise RuntimeError(f"spool {location}: rows [{start}, {end}) are not all on disk "
                           f"(found up to {expect}); was it committed past them?")
