"""Clock stores that touch the outside world: a file written ahead of use, and the wall clock."""

from __future__ import annotations

import os
import time
from pathlib import Path


class FileClockStore:
    """Keeps the node clock's high-water mark in a file.

    :meth:`reserve` writes the new mark to a temporary file, fsyncs it and renames it over the
    old one (then fsyncs the directory), so after a crash the file holds a mark at least as high
    as every clock value the node used. A missing file starts the clock at ``start``.
    """

    def __init__(self, path: str | os.PathLike[str], start: int = 0) -> None:
        self.path = Path(path)
        self._start = start
        self.writes = 0

    def load(self) -> int:
        try:
            text = self.path.read_text(encoding="ascii").strip()
        except FileNotFoundError:
            return self._start
        try:
            value = int(text)
        except ValueError as exc:
            raise ValueError(f"clock file {self.path} is corrupt: {text[:40]!r}") from exc
        if value < 0:
            raise ValueError(f"clock file {self.path} holds a negative clock")
        return max(value, self._start)

    def reserve(self, upto: int) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, b"%d\n" % upto)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.path)
        try:
            dfd = os.open(self.path.parent, os.O_RDONLY)
        except OSError:
            return
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
        self.writes += 1


class WallClockStore:
    """The default when no clock file is given: start from the wall clock in nanoseconds.

    A restarted node starts above every value it used before, as long as the wall clock does not
    step back and the node used fewer than 10**9 clock values per second (it uses far fewer).
    Nothing is written.
    """

    def __init__(self) -> None:
        self._mark = time.time_ns()

    def load(self) -> int:
        return self._mark

    def reserve(self, upto: int) -> None:
        if upto > self._mark:
            self._mark = upto
