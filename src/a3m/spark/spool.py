"""The source's spool: received messages made durable and replayable by index (pyarrow only).

Rows get consecutive indexes from 0. Each :meth:`Spool.append` writes one Arrow IPC segment
``seg-<first>-<end>.arrow`` (a temporary file, fsync, rename, fsync of the directory), so a
segment is either whole on disk or absent. ``committed`` records the lowest index still
needed; :meth:`Spool.commit` deletes the segments wholly below it. The streaming source reports
an offset only up to :meth:`Spool.durable_end`, so whatever Spark asks for (again, after a
restart) is on disk.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.ipc as ipc  # type: ignore[import-untyped]

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
    """One directory of segments. Appends come from one process (the collector); readers
    (the streaming source) only list, read and commit."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)

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
        tables = []
        for seg in self.segments():
            if seg.end <= start or seg.first >= end:
                continue
            with pa.memory_map(str(seg.path)) as src:
                t = ipc.open_file(src).read_all()
            lo, hi = max(start, seg.first) - seg.first, min(end, seg.end) - seg.first
            tables.append(t.slice(lo, hi - lo))
        table = pa.concat_tables(tables) if tables else SCHEMA.empty_table()
        if table.num_rows != max(0, end - start):
            raise RuntimeError(f"spool {self.dir}: rows [{start}, {end}) are not all on disk "
                               f"(found {table.num_rows}); was it committed past them?")
        return table.combine_chunks()

    # ------------------------------------------------------------------ writing

    def append(self, rows: dict[str, list[Any]]) -> tuple[int, int]:
        """Write rows (columns without ``offset``) durably; returns their ``[first, end)``."""
        n = len(rows["payload"])
        first = self.durable_end()
        end = first + n
        columns = {**rows, "offset": list(range(first, end))}
        table = pa.Table.from_pydict(columns, schema=SCHEMA)
        name = f"seg-{first:020d}-{end:020d}.arrow"
        tmp = self.dir / f".{name}.tmp"
        with open(tmp, "wb") as f:
            with ipc.new_file(f, SCHEMA) as writer:
                writer.write_table(table)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.dir / name)
        _fsync_dir(self.dir)
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
        """Rows on disk that Spark has not committed yet."""
        return self.durable_end() - max(self.committed(), self.start())
