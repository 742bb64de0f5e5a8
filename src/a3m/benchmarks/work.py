"""The work of a measured stretch in units a CPU's speed does not move much: per round trip
(or message), this process's CPU time, its thread wake-ups (voluntary context switches: each
is a thread that slept and was woken), its allocations (new blocks of the interpreter's
``mem`` and ``obj`` allocators, every thread's: ``a3m._native``'s counter, None without the
native module) and, with ``count``, the Python functions it called (every thread's,
``sys.setprofile``: the calls native code makes without the interpreter are not Python calls
and are not counted) and its system calls (every thread's, ``perf stat`` on the kernel's
``raw_syscalls:sys_enter`` tracepoint: None where perf is missing or may not trace,
:mod:`a3m.benchmarks.syscalls`). Measured the same way in A3M's processes and in its
peers', so the figures sit side by side.

The allocation counter costs an increment per allocation (``object()`` 80 -> 84 ns on a
2-core machine): always on. The system calls are counted with ``count`` only: while perf is
attached every system call on the machine takes the kernel's slow path, and a counted one
its tracepoint too (``os.getppid()`` 0.28 -> 0.45 -> 0.63 us), which a round trip of a few
dozen calls would feel.

What the allocation count leaves out: what a library allocates with the C library's
``malloc`` (libzmq's and libnng's own buffers in pyzmq's and pynng's processes, the Rust
data plane's), the interpreter's raw domain, and the objects a free list serves (small
tuples, floats, lists, dicts) without calling the allocator. With ``count`` the profiler's own
allocations are in (the frame objects it needs, its counter's ints: about two a Python call).
"""

from __future__ import annotations

import os
import resource
import sys
import threading
from typing import Any

from a3m.benchmarks.syscalls import SyscallCounter

#: Why a count is missing, per counter (kept once in a result, not per side).
WHY = ("allocations_why", "syscalls_why")
#: Why the system calls of a run without ``count`` are not counted.
SYSCALLS_NOT_ASKED = ("counted with --count only: perf's tracepoint slows every system call "
                      "while it is attached")


def alloc_counter() -> tuple[Any | None, str]:
    """(``a3m._native``, "") where it has the allocation counter, else (None, why). Loaded
    whichever data plane runs (``A3M_NATIVE=0`` runs the Python twins: their allocations are
    counted too); not under ``A3M_PURE_PYTHON``, where nothing compiled is loaded."""
    if os.environ.get("A3M_PURE_PYTHON", "") not in ("", "0"):
        return None, "A3M_PURE_PYTHON is set: a3m._native (the counter) is not loaded"
    try:
        from a3m import _native
    except ImportError:
        return None, "a3m._native (the allocation counter) is not built"
    if not hasattr(_native, "alloc_counting"):
        return None, "a3m._native was built without the allocation counter: rebuild it"
    return _native, ""


class Work:
    """``start()`` before the stretch, ``report(n)`` after it: the units per ``n``.

    Make it before the node (or anything whose threads should be counted), and before this
    process tells its peer it is ready: the profiler (``count``) reaches the threads started
    after it and this one, and perf (``syscalls``) is started and attached here, outside
    every stretch. ``allocations``, ``syscalls``: count them (None in the report otherwise;
    the system calls by default with ``count``)."""

    def __init__(self, count: bool = False, allocations: bool = True,
                 syscalls: bool | None = None) -> None:
        self.count = count
        self._calls = [0]
        self._at: tuple[float, int, int, int] = (0.0, 0, 0, 0)
        self._why: dict[str, str] = {}
        self._alloc, why = alloc_counter() if allocations else (None, "")
        if why:
            self._why["allocations_why"] = why
        if syscalls is None:
            syscalls = count
        self._sys = SyscallCounter() if syscalls else None
        if not syscalls:
            self._why["syscalls_why"] = SYSCALLS_NOT_ASKED
        elif self._sys is not None and not self._sys.attached:
            self._why["syscalls_why"] = self._sys.why or "perf did not attach"
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
        if self._sys is not None:
            self._sys.enable()  # (back once perf counts: its wait is outside the stretch)
        cpu, wakeups = self._now()
        allocs = 0
        if self._alloc is not None:
            self._alloc.alloc_counting(True)
            allocs = self._alloc.allocations()
        self._at = (cpu, wakeups, allocs, self._calls[0])

    def report(self, n: int) -> dict[str, Any]:
        """The units per ``n`` since :meth:`start` (and the profiler, the allocation counter
        and perf removed)."""
        calls = self._calls[0]
        allocs = None
        if self._alloc is not None:
            allocs = self._alloc.allocations() - self._at[2]
            self._alloc.alloc_counting(False)
        if self.count:
            sys.setprofile(None)
            threading.setprofile(None)  # type: ignore[arg-type]
        cpu, wakeups = self._now()
        syscalls = None
        if self._sys is not None:
            self._sys.disable()
            syscalls = self._sys.stop()
            if syscalls is None:
                self._why["syscalls_why"] = self._sys.why or "perf printed no count"
        n = max(1, n)
        out: dict[str, Any] = {
            "per": n,
            "cpu_us": round((cpu - self._at[0]) * 1e6 / n, 2),
            "wakeups": round((wakeups - self._at[1]) / n, 3),
            "allocations": None if allocs is None else round(allocs / n, 2),
            "syscalls": None if syscalls is None else round(syscalls / n, 2),
        }
        if self.count:
            out["py_calls"] = round((calls - self._at[3]) / n, 2)
        out.update(self._why)
        return out


def hoist_why(result: dict[str, Any], works: list[dict[str, Any] | None]) -> None:
    """Move each work report's reasons for a missing count (:data:`WHY`) into ``result``,
    once: a count missing in one process is missing for the same reason in all."""
    for work in works:
        for key in WHY:
            why = (work or {}).pop(key, None)
            if why is not None:
                result.setdefault(key, why)


#: The units of a work report, as summed over a run's sides (:func:`total`).
UNITS = ("cpu_us", "wakeups", "py_calls", "allocations", "syscalls")


def total(sides: dict[str, dict[str, Any] | None] | None) -> dict[str, float | None]:
    """A run's work per round trip, its sides' (client and server, or the one process's)
    added up: per unit, None when a side has no figure for it (not counted, or no report)."""
    reports = list((sides or {}).values())
    out: dict[str, float | None] = {}
    for unit in UNITS:
        vals = [w.get(unit) if w else None for w in reports]
        out[unit] = (round(sum(v for v in vals if v is not None), 2)
                     if vals and all(v is not None for v in vals) else None)
    return out
