"""Counting the work of a piece of code in units that do not move with the CPU's speed, per
layer of a3m (where the code runs): Python-level function calls, calls into C (builtins and
a3m's compiled modules, which ``sys.setprofile`` sees as C calls only), and memory
allocations (every PyMem/PyObject allocation, counted by a small C module built on the fly
from ``bench/alloc_count.c``; none counted without a C compiler). Used by ``rr_path.py`` and
``rr_timeline.py`` (``--count``)."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import tempfile
import threading
from collections import Counter
from typing import Any

#: Path fragments of a code object's file -> layer (first match), else "stdlib".
LAYERS = (("/a3m/exon/secure/", "exon.secure"), ("/a3m/exon/", "exon"), ("/a3m/core/", "core"),
          ("/a3m/patterns/", "patterns"), ("/a3m/runtime/", "runtime"), ("/a3m/aio/", "aio"),
          ("/a3m/testing/", "harness"), ("/bench/", "harness"), ("/a3m/benchmarks/", "harness"))
MODULES = (("a3m.exon.secure", "exon.secure"), ("a3m.exon", "exon"), ("a3m.core", "core"),
           ("a3m.patterns", "patterns"), ("a3m.runtime", "runtime"), ("a3m.aio", "aio"),
           ("a3m.testing", "harness"))
ORDER = ("runtime", "aio", "exon.secure", "exon", "core", "patterns", "harness", "stdlib")
UNITS = ("py_calls", "c_calls", "a3m_c_calls", "allocs")


def layer_of_file(path: str) -> str:
    return next((name for key, name in LAYERS if key in path), "stdlib")


def layer_of_c(fn: Any) -> str | None:
    """The a3m layer of a C function (a compiled a3m module's), None for any other."""
    mod = getattr(fn, "__module__", None)
    if mod is None:
        owner = getattr(fn, "__self__", None)
        if owner is not None:
            mod = type(owner).__module__
    if not isinstance(mod, str) or not mod.startswith("a3m."):
        return None
    return next((name for prefix, name in MODULES if mod.startswith(prefix)), None)


_counter: Any = None


def alloc_counter() -> Any:
    """The C allocation counter (installed once per process), or None without a compiler."""
    global _counter
    if _counter is not None:
        return _counter
    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "alloc_count.c")
    out = os.path.join(tempfile.mkdtemp(prefix="a3m-alloc-"),
                       "_alloc_count" + (sysconfig.get_config_var("EXT_SUFFIX") or ".so"))
    cc = (sysconfig.get_config_var("CC") or "cc").split()
    try:
        subprocess.run([*cc, "-shared", "-fPIC", "-O2", "-I", sysconfig.get_paths()["include"],
                        src, "-o", out], check=True, capture_output=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    sys.path.insert(0, os.path.dirname(out))
    import _alloc_count  # type: ignore[import-not-found]

    _alloc_count.install()
    _counter = _alloc_count
    return _counter


class WorkCounter:
    """Counts calls and allocations per layer while :meth:`start`-ed (every thread that
    starts after, too). The allocations between two profile events are the layer's that ran
    between them (a C function's own: its caller's layer, or its a3m layer if compiled)."""

    def __init__(self) -> None:
        counter = alloc_counter()
        self.has_allocs = counter is not None
        self._count = counter.count if counter is not None else (lambda: 0)
        self.units: dict[str, Counter[str]] = {u: Counter() for u in UNITS}
        self._files: dict[Any, str] = {}
        self._local = threading.local()
        self._at = 0  # the allocation count after the last event, of any thread
        #: Python and C calls per (layer, function), for ``top()``.
        self.calls: Counter[tuple[str, str]] = Counter()
        #: With ``by_function``, allocations per (layer, function running), for ``top()``.
        self.by_function = bool(os.environ.get("A3M_COUNT_TOP"))
        self.alloc_calls: Counter[tuple[str, str]] = Counter()

    def _layer(self, frame: Any) -> str:
        code = frame.f_code
        name = self._files.get(code)
        if name is None:
            name = self._files[code] = layer_of_file(code.co_filename)
        return name

    def _prof(self, frame: Any, event: str, arg: Any) -> None:
        count = self._count
        now = count()
        st = self._local.__dict__
        cur = st.get("cur")
        # Since the last event of any thread (the interpreter runs one thread at a time; the
        # allocation counter is the process's), less the one int the last count() made.
        if cur is not None and self._at:
            self.units["allocs"][cur] += now - self._at - 1
            if self.by_function:
                self.alloc_calls[cur, st["fn"]] += now - self._at - 1
        if event == "call":
            cur = self._layer(frame)
            self.units["py_calls"][cur] += 1
            self.calls[cur, frame.f_code.co_qualname] += 1
        elif event == "c_call":
            callee = layer_of_c(arg)
            if callee is None:
                cur = self._layer(frame)
                self.units["c_calls"][cur] += 1
                self.calls[cur, "C " + getattr(arg, "__qualname__", "?")] += 1
            else:
                cur = callee
                self.units["a3m_c_calls"][callee] += 1
                self.calls[callee, "C " + getattr(arg, "__qualname__", "?")] += 1
        elif event == "return":
            back = frame.f_back
            cur = self._layer(back) if back is not None else "harness"
        else:  # c_return, c_exception: back in the caller
            cur = self._layer(frame)
        st["cur"] = cur
        if self.by_function:
            st["fn"] = ("C " + getattr(arg, "__qualname__", "?") if event == "c_call" else
                        frame.f_back.f_code.co_qualname if event == "return" and frame.f_back
                        else frame.f_code.co_qualname)
        self._at = count()

    def start(self) -> None:
        self._at = 0  # what ran since the last stop() is not this counter's
        threading.setprofile(self._prof)
        sys.setprofile(self._prof)

    def stop(self) -> None:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]

    def reset(self) -> None:
        for c in self.units.values():
            c.clear()
        self.calls.clear()
        self.alloc_calls.clear()

    def top(self, n: int, most: int = 90) -> str:
        """The most frequent calls per ``n`` (round trips), by layer and function."""
        calls = "\n".join(f"  {c / n:6.2f}  {layer:11s} {name}"
                          for (layer, name), c in self.calls.most_common(most))
        allocs = "\n".join(f"  {c / n:6.2f}  {layer:11s} {name}"
                           for (layer, name), c in self.alloc_calls.most_common(most))
        return f"calls:\n{calls}\nallocations, by the function running:\n{allocs}"

    def table(self, n: int, title: str) -> str:
        """The units per ``n`` (round trips), one row per layer that did any work."""
        lines = [title, f"  {'layer':12s} {'py calls':>9s} {'C calls':>8s} {'into a3m C':>10s} "
                        f"{'allocs':>7s}"]
        rows = [(layer, [self.units[u][layer] for u in UNITS]) for layer in ORDER]
        rows.append(("total", [sum(self.units[u].values()) for u in UNITS]))
        for layer, row in rows:
            if not any(row):
                continue
            alloc = f"{row[3] / n:7.1f}" if self.has_allocs else "    n/a"
            lines.append(f"  {layer:12s} {row[0] / n:9.1f} {row[1] / n:8.1f} {row[2] / n:10.1f} "
                         f"{alloc}")
        return "\n".join(lines)
