from __future__ import annotations

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

    out = subprocess.run([sys.executable, "-m", "a3m", "--version"], capture_output=True,
                         text=True, check=True).stdout
    assert out.strip() == f"a3m {version('a3m')}"


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
