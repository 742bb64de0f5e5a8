"""The work of a measured stretch in units a CPU's speed does not move much: per round trip
(or message), this process's CPU time, its thread wake-ups (voluntary context switches: each
is a thread that slept and was woken) and, with ``count``, the Python functions it called
(every thread's, ``sys.setprofile``: the calls native code makes without the interpreter are
not Python calls and are not counted). Measured the same way in A3M's processes and in its
peers', so the figures sit side by side."""

from __future__ import annotations

import resource
import sys
import threading
from typing import Any


class Work:
    """``start()`` before the stretch, ``report(n)`` after it: the units per ``n``.

    With ``count``, make it before the node (or anything whose threads should be counted):
    the profiler reaches the threads started after it and this one."""

    def __init__(self, count: bool = False) -> None:
        self.count = count
        self._calls = [0]
        self._at: tuple[float, int, int] = (0.0, 0, 0)
        if count:
            calls = self._calls

            def prof(frame: Any, event: str, arg: Any) -> None:
                if event == "call":
                    calls[0] += 1  # (under the interpreter's lock: no count is lost)

            threading.setprofile(prof)
            sys.setprofile(prof)

    @staticmethod
    def _now() -> tuple[float, int]:
        r = resource.getrusage(resource.RUSAGE_SELF)
        return r.ru_utime + r.ru_stime, r.ru_nvcsw

    def start(self) -> None:
        cpu, wakeups = self._now()
        self._at = (cpu, wakeups, self._calls[0])

    def report(self, n: int) -> dict[str, Any]:
        """The units per ``n`` since :meth:`start` (and the profiler removed)."""
        calls = self._calls[0]
        if self.count:
            sys.setprofile(None)
            threading.setprofile(None)  # type: ignore[arg-type]
        cpu, wakeups = self._now()
        n = max(1, n)
        out: dict[str, Any] = {
            "per": n,
            "cpu_us": round((cpu - self._at[0]) * 1e6 / n, 2),
            "wakeups": round((wakeups - self._at[1]) / n, 3),
        }
        if self.count:
            out["py_calls"] = round((calls - self._at[2]) / n, 2)
        return out
