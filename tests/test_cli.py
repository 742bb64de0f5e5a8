from __future__ import annotations

import os
import subprocess
import sys

import pytest


def test_help_lists_commands() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "a3m", "--help"], capture_output=True, text=True, check=True
    ).stdout
    for name in ("demo", "bench", "chaos", "audit"):
        assert name in out


def test_version() -> None:
    from importlib.metadata import version

    import a3m

    out = subprocess.run([sys.executable, "-m", "a3m", "--version"], capture_output=True,
                         text=True, check=True).stdout
    first, _, paths = " ".join(out.split()).partition(": ")
    assert first == f"a3m {version('a3m')}"
    # which paths run: the native data plane (or its Python twins), the compiled cores
    assert ("native data plane" in paths) == a3m.NATIVE
    assert ("cores compiled" in paths) == a3m.COMPILED
    off = subprocess.run([sys.executable, "-m", "a3m", "--version"], capture_output=True,
                         text=True, check=True, env={**os.environ, "A3M_NATIVE": "0"}).stdout
    assert "Python data plane" in " ".join(off.split())


def test_bench_placement_pins_each_side() -> None:
    """``spread`` puts the two benchmark processes on two CPUs, ``shared`` on one."""
    import os

    from a3m.benchmarks.procs import cpus_for

    usable = sorted(os.sched_getaffinity(0))
    rx, tx = cpus_for("spread")
    if len(usable) >= 2:
        assert rx == {usable[0]} and tx == {usable[1]}
    rx, tx = cpus_for("shared")
    assert rx == tx == {usable[0]}
    assert cpus_for("free") == (None, None)
    with pytest.raises(ValueError):
        cpus_for("anywhere")
