"""Which data plane runs: the native one (``a3m._native``, the Rust crate in ``native/``) or its
Python twins (``docs/design.md``, "The native data plane").

The set-up builds the native module where a Rust toolchain is found (``setup.py``). At import
the Python twins run instead when

- ``A3M_PURE_PYTHON=1`` is set (the Python specification alone: the mypyc build is left
  aside too, ``a3m._compiled``),
- ``A3M_NATIVE=0`` is set (only the native module is left aside), or
- a Rust source under ``native/`` is newer than the built module (edited since the build: a
  warning says to rebuild; a stale module never shadows an edit).

This module is never compiled and imports no I/O module: the sans-I/O cores read
:data:`native` from it.
"""

from __future__ import annotations

import os
import warnings
from typing import Any

#: Set to 0 to run the Python twins even where the native module was built.
NATIVE_ENV = "A3M_NATIVE"
PURE_ENV = "A3M_PURE_PYTHON"


def _stale(module_file: str) -> str | None:
    """A Rust source newer than the built module (an editable install's ``native/``), or
    None."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(module_file))))
    src = os.path.join(root, "native", "src")
    try:
        built = os.stat(module_file).st_mtime
    except OSError:
        return None
    for folder, _, names in os.walk(src):
        for name in names:
            path = os.path.join(folder, name)
            if name.endswith(".rs") and os.stat(path).st_mtime > built:
                return path
    return None


def load() -> Any | None:
    """The native module, or None when the Python twins are to run (see the module's
    docstring)."""
    if os.environ.get(PURE_ENV, "") not in ("", "0"):
        return None
    if os.environ.get(NATIVE_ENV, "").strip() == "0":
        return None
    try:
        from a3m import _native
    except ImportError:
        return None
    stale = _stale(_native.__file__ or "")
    if stale is not None:
        warnings.warn(f"a3m: {stale} changed since the native data plane was built; running "
                      "its Python twins. Rebuild with `make` or `pip install -e .`",
                      RuntimeWarning, stacklevel=2)
        return None
    return _native


#: ``a3m._native`` when it runs, else None.
native: Any | None = load()
