"""The fan-in and fan-out charts (one shared drawing, ``fanin.sweep_plot``): every figure
against the sweep's axis, A3M beside pyzmq, drawn from a result shaped as the benches write."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("matplotlib")

from a3m.benchmarks import fanin, fanout  # noqa: E402


def _runs(x: str, figures: tuple[tuple[str, str], ...]) -> list[dict[str, Any]]:
    return [{"system": system, x: n, "path": "native", "engine": "native",
             **{key: float(i + n) for i, (key, _) in enumerate(figures)}}
            for system in ("a3m", "pyzmq") for n in (100, 1000)]


@pytest.mark.parametrize("module,x", [(fanin, "peers"), (fanout, "subs")])
def test_the_sweep_chart_is_drawn(module: Any, x: str, tmp_path: Path) -> None:
    result = {"runs": _runs(x, module.FIGURES), "size": 64, "messages": 1000,
              "per_process": 250, "placement": "spread", "sources": 1,
              "machine": {"cpus": 2, "python": "3.11", "compiled": True}}
    out = tmp_path / f"{x}.png"
    assert module.plot(result, str(out)) == str(out)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 10_000
