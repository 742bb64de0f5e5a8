"""A discovery source backed by a file of ``id,host,port[,key]`` lines, re-read when it changes."""

from __future__ import annotations

import os
from pathlib import Path

from a3m.exon.discovery import parse_directory


class FileDiscovery:
    """Resolve node ids from a CSV-like file (``id,host,port[,key]`` per line, ``#`` comments;
    a line's public key, 64 hex digits, pins the key that node must speak with).

    The file is read on the first lookup and again whenever its modification time changes, so
    an operator (or a deployment tool) can move a node by editing one line.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._mtime: int | None = None
        self._map: dict[str, tuple[str, int]] = {}
        self._keys: dict[str, bytes] = {}

    def _refresh(self) -> None:
        try:
            mtime = self.path.stat().st_mtime_ns
        except FileNotFoundError:
            self._map = {}
            self._keys = {}
            self._mtime = None
            return
        if mtime != self._mtime:
            self._map, self._keys = parse_directory(self.path.read_text(encoding="utf-8"))
            self._mtime = mtime

    def __call__(self, node_id: str) -> tuple[str, int] | None:
        self._refresh()
        return self._map.get(node_id)

    def public_key(self, node_id: str) -> bytes | None:
        """The key this file pins for ``node_id`` (None: none)."""
        self._refresh()
        return self._keys.get(node_id)

    def nodes(self) -> list[str]:
        """Every node id the file lists now."""
        self._refresh()
        return list(self._map)
