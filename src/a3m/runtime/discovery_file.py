"""A discovery source backed by a file of ``id,host,port`` lines, re-read when it changes."""

from __future__ import annotations

import os
from pathlib import Path

from a3m.exon.discovery import parse_association_lines


class FileDiscovery:
    """Resolve node ids from a CSV-like file (``id,host,port`` per line, ``#`` comments).

    The file is read on the first lookup and again whenever its modification time changes, so
    an operator (or a deployment tool) can move a node by editing one line.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._mtime: int | None = None
        self._map: dict[str, tuple[str, int]] = {}

    def _refresh(self) -> None:
        try:
            mtime = self.path.stat().st_mtime_ns
        except FileNotFoundError:
            self._map = {}
            self._mtime = None
            return
        if mtime != self._mtime:
            self._map = parse_association_lines(self.path.read_text(encoding="utf-8"))
            self._mtime = mtime

    def __call__(self, node_id: str) -> tuple[str, int] | None:
        self._refresh()
        return self._map.get(node_id)
