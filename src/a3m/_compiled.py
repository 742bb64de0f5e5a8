"""The compiled fast path: which modules mypyc compiles, and, at import, whether the compiled
modules or their Python sources run (``docs/performance.md``, "The compiled fast path").

``setup.py`` compiles every module of :data:`PACKAGES` (the sans-I/O cores) with mypyc when a C
compiler is there; the extension modules land beside their sources and Python's import system
prefers them. The sources stay the reference and the fallback: they run instead when

- ``A3M_PURE_PYTHON=1`` is set (the suite runs the sans-I/O tests both ways), or
- a source is newer than its compiled module (edited since the last build; a warning says to
  rebuild with ``make``, or ``pip install -e .``): a stale extension never shadows an edit.

It is all or nothing: the compiled modules call one another natively, so one stale module
sends the whole group back to the sources. This module never imports the modules it governs
and is itself never compiled.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import warnings
from collections.abc import Sequence
from types import ModuleType

#: Packages (paths under ``src``) whose modules, ``__init__`` aside, are compiled.
PACKAGES = ("a3m/core", "a3m/exon", "a3m/exon/secure", "a3m/patterns")
#: Modules (paths under ``src``) compiled alone, outside those packages: the runtime's per
#: message path (a blocking call's wait and turn, the node's hooks, the asyncio driver's
#: turn, the socket layer's Python twin, the sockets' send and receive in both runtimes).
#: Both drivers are native classes.
MODULES = ("a3m/runtime/driver.py", "a3m/runtime/node_turn.py", "a3m/runtime/offload.py",
           "a3m/runtime/socket_calls.py", "a3m/aio/driver.py", "a3m/aio/socket_calls.py")
#: Set to 1 to run the Python sources even where compiled modules were built.
PURE_ENV = "A3M_PURE_PYTHON"
#: The profile-guided build's stage (``tools/pgo_build.py`` sets it for ``setup.py``):
#: ``generate`` builds modules that count what runs, ``use`` lays the code out by those counts.
PGO_ENV = "A3M_PGO"


#: What ``tools/pgo_build.py`` writes after a profile-guided build (not in the repository):
#: which compiled group it built, so that a later plain build is not taken for one.
PROFILE_MARKER = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                              "_compiled_profile.json")


#: The oldest GCC that builds guided by a profile (``-fprofile-partial-training``).
PGO_MIN_GCC = 10


def gcc_major() -> int:
    """The major version of the C compiler a build runs (``CC``, else Python's), if it is
    GCC; else 0. Read from the compiler's predefined macros (clang defines ``__GNUC__`` too,
    and ``__clang__``)."""
    import shlex
    import subprocess
    import sysconfig

    cc = shlex.split(os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc")
    try:
        out = subprocess.run([*cc, "-dM", "-E", "-x", "c", os.devnull], capture_output=True,
                             text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return 0
    macros = dict(line.split()[1:3] for line in out.splitlines()
                  if line.startswith("#define ") and len(line.split()) >= 3)
    major = macros.get("__GNUC__", "0")
    return int(major) if major.isdigit() and "__clang__" not in macros else 0


def group_library(root: str) -> str | None:
    """The compiled modules' shared library (mypyc's group) under the source root ``root``."""
    try:
        names = os.listdir(root)
    except OSError:
        return None
    suffixes = tuple(importlib.machinery.EXTENSION_SUFFIXES)
    for name in sorted(names):
        if "__mypyc" in name and name.endswith(suffixes):
            return os.path.join(root, name)
    return None


def profile_guided(root: str, marker: str = PROFILE_MARKER) -> bool:
    """Whether the group under ``root`` is the one a profile-guided build left (its
    ``marker`` names it with its size and time; any later build has another)."""
    import json

    group = group_library(root)
    try:
        with open(marker, encoding="utf-8") as f:
            made = json.load(f)
        st = os.stat(group) if group else None
    except (OSError, ValueError):
        return False
    return (st is not None and isinstance(made, dict)
            and made.get("library") == os.path.basename(str(group))
            and made.get("size") == st.st_size and made.get("mtime_ns") == st.st_mtime_ns)


def compile_flags(gcc_major: int, pgo: str = "") -> tuple[list[str], list[str]]:
    """The C compiler's and the linker's extra arguments for the compiled modules, on POSIX
    (``setup.py``): ``gcc_major`` is GCC's major version (0: another compiler), ``pgo`` the
    stage of :data:`PGO_ENV` (GCC :data:`PGO_MIN_GCC` or later; elsewhere none).

    Only the group's init functions are exported (``PyMODINIT_FUNC``: the modules reach the
    group through its capsules, never by symbol), and with ``-fPIC``'s default of
    interposable symbols GCC could neither inline one compiled function into another nor
    call it but through the PLT. A profile lays the hot paths out together and the rest
    apart: a round trip's code then spans fewer cache lines (docs/performance.md, "The
    compiled fast path"). Functions the training run never reached are optimized as without
    a profile (``-fprofile-partial-training``), not for size."""
    cflags = ["-fvisibility=hidden"]
    lflags: list[str] = []
    if gcc_major >= 5:
        cflags.append("-fno-semantic-interposition")
    if gcc_major >= PGO_MIN_GCC and pgo == "generate":
        # (atomic: the node's I/O thread and the application's run the same code)
        cflags += ["-fprofile-generate", "-fprofile-update=atomic"]
        lflags.append("-fprofile-generate")
    elif gcc_major >= PGO_MIN_GCC and pgo == "use":
        # (a function whose code changed since the counts: compiled without them, not an
        # error under mypyc's -Werror)
        cflags += ["-fprofile-use", "-fprofile-partial-training", "-fprofile-correction",
                   "-Wno-missing-profile", "-Wno-error=coverage-mismatch"]
    return cflags, lflags


def sources(src: str) -> list[str]:
    """The module files to compile, under the source root ``src`` (for ``setup.py``)."""
    found = []
    for pkg in PACKAGES:
        folder = os.path.join(src, pkg)
        found += sorted(os.path.join(folder, f) for f in os.listdir(folder)
                        if f.endswith(".py") and f != "__init__.py")
    return found + [os.path.join(src, m) for m in MODULES]


def _extensions(root: str) -> dict[str, tuple[str, str]]:
    """Module name -> (source, compiled module) for each compiled module found under ``root``
    (the folder that holds the ``a3m`` package)."""
    suffixes = tuple(importlib.machinery.EXTENSION_SUFFIXES)
    found: dict[str, tuple[str, str]] = {}
    places = [(pkg, None) for pkg in PACKAGES] + [
        (os.path.dirname(m), os.path.basename(m)[:-3]) for m in MODULES]
    for pkg, only in places:
        folder = os.path.join(root, pkg)
        try:
            names = os.listdir(folder)
        except OSError:
            continue
        for name in names:
            if only is not None and not name.startswith(only + "."):
                continue
            for suffix in suffixes:
                if name.endswith(suffix):
                    stem = name[: -len(suffix)]
                    source = os.path.join(folder, stem + ".py")
                    if stem != "__init__" and os.path.exists(source):
                        found[pkg.replace("/", ".") + "." + stem] = (
                            source, os.path.join(folder, name))
                    break
    return found


class SourceFinder(importlib.abc.MetaPathFinder):
    """Imports the listed modules from their ``.py`` sources, past their compiled modules."""

    def __init__(self, files: dict[str, str]) -> None:
        self.files = files

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        source = self.files.get(fullname)
        return None if source is None else importlib.util.spec_from_file_location(
            fullname, source)


def activate(root: str) -> bool:
    """Choose between the compiled modules and the sources (see the module's docstring);
    True when the compiled modules will run. Called once, by ``a3m/__init__.py``."""
    found = _extensions(root)
    if not found:
        return False
    stale = [name for name, (source, ext) in found.items()
             if os.stat(source).st_mtime > os.stat(ext).st_mtime]
    pure = os.environ.get(PURE_ENV, "") not in ("", "0")
    if not pure and not stale:
        return True
    if stale and not pure:
        warnings.warn(f"a3m: {len(stale)} source(s) changed since the compiled fast path was "
                      f"built (e.g. {stale[0]}); running the Python sources. Rebuild with "
                      "`make` or `pip install -e .`", RuntimeWarning, stacklevel=3)
    sys.meta_path.insert(0, SourceFinder({name: src for name, (src, _) in found.items()}))
    return False
