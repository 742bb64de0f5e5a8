"""Build: the sans-I/O cores (``a3m.exon``, ``a3m.core``) compiled by mypyc when a C compiler
is there; everything else, and the cores' sources, as plain Python.

A failed compilation warns and leaves the pure-Python package (it runs the same, slower);
``A3M_PURE_BUILD=1`` skips the compilation. ``a3m.COMPILED`` tells which one runs.
Metadata and dependencies are in ``pyproject.toml``.
"""

from __future__ import annotations

import os
import runpy
import sys

from setuptools import setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))


class OptionalBuildExt(build_ext):
    """``build_ext`` that falls back to the Python sources instead of failing the install.

    All or nothing: the compiled modules need their shared library (mypyc's group), so when
    any extension fails, the ones already built are removed too."""

    def initialize_options(self) -> None:
        super().initialize_options()
        self.parallel = os.cpu_count() or 1

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:  # no compiler, no headers: the sources run instead
            for path in self.get_outputs():
                if os.path.exists(path):
                    os.remove(path)
            print(f"a3m: the compiled fast path was not built ({exc}); the Python sources "
                  "run", file=sys.stderr)


def ext_modules() -> list:  # type: ignore[type-arg]
    if os.environ.get("A3M_PURE_BUILD", "") not in ("", "0"):
        return []
    try:
        from mypyc.build import mypycify
    except ImportError as exc:
        print(f"a3m: mypyc unavailable ({exc}); the Python sources run", file=sys.stderr)
        return []
    sources = runpy.run_path(os.path.join(HERE, "src", "a3m", "_compiled.py"))["sources"]
    os.chdir(HERE)  # mypyc names the modules from paths relative to here
    return mypycify(sources("src"), opt_level="3")


setup(ext_modules=ext_modules(), cmdclass={"build_ext": OptionalBuildExt})
