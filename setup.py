"""Build: the sans-I/O cores (``a3m.exon``, ``a3m.core``) compiled by mypyc when a C compiler
is there, and the native data plane (``native/``, the Rust crate built into ``a3m._native``
by setuptools-rust) when a Rust toolchain is there; everything else, and the cores' sources,
as plain Python.

Each is optional: a failed or impossible build warns and leaves the Python package (it runs
the same, slower). ``A3M_PURE_BUILD=1`` skips both; ``A3M_NO_NATIVE_BUILD=1`` skips only the
native module, ``A3M_NO_MYPYC_BUILD=1`` only the compiled cores (``make`` builds those next,
profile-guided: ``tools/pgo_build.py``). ``a3m.COMPILED`` and ``a3m.NATIVE`` tell which run.
Metadata and dependencies are in ``pyproject.toml``.
"""

from __future__ import annotations

import os
import runpy
import shutil
import sys

from setuptools import setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))


def _on(name: str) -> bool:
    return os.environ.get(name, "") not in ("", "0")


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
    if _on("A3M_PURE_BUILD") or _on("A3M_NO_MYPYC_BUILD"):
        return []
    try:
        from mypyc.build import mypycify
    except ImportError as exc:
        print(f"a3m: mypyc unavailable ({exc}); the Python sources run", file=sys.stderr)
        return []
    compiled = runpy.run_path(os.path.join(HERE, "src", "a3m", "_compiled.py"))
    os.chdir(HERE)  # mypyc names the modules from paths relative to here
    exts = mypycify(compiled["sources"]("src"), opt_level="3")
    if os.name == "posix":
        gcc = compiled["gcc_major"]()
        pgo = os.environ.get(compiled["PGO_ENV"], "")
        if pgo in ("generate", "use") and gcc < compiled["PGO_MIN_GCC"]:
            print(f"a3m: a profile-guided build needs GCC {compiled['PGO_MIN_GCC']} or later; "
                  "building without one", file=sys.stderr)
        cflags, lflags = compiled["compile_flags"](gcc, pgo)
        for ext in exts:
            ext.extra_compile_args = [*ext.extra_compile_args, *cflags]
            ext.extra_link_args = [*ext.extra_link_args, *lflags]
    return exts


def rust_extensions() -> list:  # type: ignore[type-arg]
    """The native data plane, optional: without cargo (or setuptools-rust) the build says so
    and the Python twins run."""
    if _on("A3M_PURE_BUILD") or _on("A3M_NO_NATIVE_BUILD"):
        return []
    try:
        from setuptools_rust import Binding, RustExtension
    except ImportError as exc:
        print(f"a3m: setuptools-rust unavailable ({exc}); the native data plane is not "
              "built, its Python twins run", file=sys.stderr)
        return []
    if shutil.which(os.environ.get("CARGO", "cargo")) is None:
        print("a3m: no Rust toolchain (cargo) found; the native data plane is not built, "
              "its Python twins run", file=sys.stderr)
        return []
    return [RustExtension("a3m._native", path=os.path.join("native", "Cargo.toml"),
                          binding=Binding.PyO3, features=["python"], optional=True,
                          debug=False)]  # release even for an editable install


setup(ext_modules=ext_modules(), rust_extensions=rust_extensions(),
      cmdclass={"build_ext": OptionalBuildExt})
