"""Charts of ``a3m bench`` results: A3M beside raw UDP, pyzmq and pynng from the same run.

A throughput result (``msgs_per_s``) becomes a bar per system; a latency result (``p50_us``,
``p99_us``, the ``reqrep`` workload) becomes a pair of bars per system. One result draws one
panel; several (``a3m bench --plot FILE --from a.json b.json``) draw one panel each on a
single figure. matplotlib is imported lazily, with the Agg canvas (no display, no pyplot
state), so the rest of the package never needs it.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.axes import Axes

#: Output formats matplotlib's Agg canvas writes, by file suffix.
FORMATS = (".png", ".svg", ".pdf")

LABELS = {"a3m": "a3m", "raw_udp": "raw UDP", "pyzmq": "pyzmq", "pynng": "pynng"}
A3M_COLOR = "#1f77b4"
BASE_COLOR = "#9aa5b1"
P50_COLOR = "#1f77b4"
P99_COLOR = "#ff7f0e"


class PlotError(ValueError):
    """A chart cannot be drawn: bad arguments or a file that is not a bench result."""


# ---------------------------------------------------------------------------- inputs


def metric_of(result: dict[str, Any]) -> str:
    """``"msgs_per_s"`` (throughput) or ``"latency"`` (p50_us / p99_us)."""
    return "latency" if "p50_us" in result else "msgs_per_s"


def check_result(result: Any, source: str = "result") -> dict[str, Any]:
    """Return ``result`` if it looks like the JSON ``a3m bench`` writes, else raise PlotError."""
    if not isinstance(result, dict):
        raise PlotError(f"{source}: not an a3m bench result (expected a JSON object, "
                        f"got {type(result).__name__})")
    missing = [k for k in ("workload", "size", "messages") if k not in result]
    if missing:
        raise PlotError(f"{source}: not an a3m bench result (no {', '.join(missing)}); "
                        "write one with `a3m bench WORKLOAD --out FILE.json`")
    need = ("p50_us", "p99_us") if metric_of(result) == "latency" else ("msgs_per_s",)
    for key in need:
        if not isinstance(result.get(key), (int, float)):
            raise PlotError(f"{source}: bench result for {result['workload']!r} has no "
                            f"numeric {key!r}")
    base = result.get("baselines", {})
    if not isinstance(base, dict):
        raise PlotError(f"{source}: 'baselines' should be an object")
    return result


def load_results(paths: Sequence[str]) -> list[dict[str, Any]]:
    """Read saved results (``a3m bench ... --out FILE``); PlotError names the bad file."""
    out = []
    for path in paths:
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
        except FileNotFoundError:
            raise PlotError(f"{path}: no such file") from None
        except IsADirectoryError:
            raise PlotError(f"{path}: is a directory, not a JSON file") from None
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise PlotError(f"{path}: not valid JSON ({exc})") from None
        out.append(check_result(data, path))
    return out


def check_output(path: str) -> None:
    """Refuse an output path the chart cannot be written to, before any work is done."""
    suffix = os.path.splitext(path)[1].lower()
    if suffix not in FORMATS:
        raise PlotError(f"--plot {path}: the file name must end in {', '.join(FORMATS)}")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise PlotError(f"--plot {path}: directory {parent} does not exist")
    if os.path.isdir(path):
        raise PlotError(f"--plot {path}: is a directory")


def require_matplotlib() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise PlotError("--plot needs matplotlib: pip install 'a3m[spark]' "
                        "(or pip install matplotlib)") from None


# ---------------------------------------------------------------------------- drawing


def _si(value: float) -> str:
    """12345678 -> '12.3 M' (bar labels)."""
    for div, unit in ((1e9, " G"), (1e6, " M"), (1e3, " k")):
        if abs(value) >= div:
            return f"{value / div:.3g}{unit}"
    return f"{value:.3g}"


def _count(result: dict[str, Any]) -> str:
    if metric_of(result) == "latency":
        n = result.get("round_trips", result["messages"])
        return f"{n:,} round trips"
    return f"{result['messages']:,} messages"


def describe(result: dict[str, Any]) -> str:
    """One line naming a result: workload (and its batch size), payload size, message count."""
    batch = f" (batches of {result['batch']})" if result.get("batch") else ""
    return f"{result['workload']}{batch}: {result['size']:,} B payload, {_count(result)}"


def _systems(result: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(label, row) for A3M then each baseline, in the order they were measured."""
    if metric_of(result) == "latency":
        a3m_row = {"p50_us": result["p50_us"], "p99_us": result["p99_us"]}
    else:
        a3m_row = {"msgs_per_s": result["msgs_per_s"]}
    rows = [("a3m", a3m_row)]
    for name, row in (result.get("baselines") or {}).items():
        rows.append((LABELS.get(name, name), row if isinstance(row, dict) else {}))
    return rows


def _missing_note(row: dict[str, Any]) -> str:
    if "skipped" in row:
        return "skipped"
    if "error" in row:
        return "failed"
    return "n/a"


def draw_panel(ax: Axes, result: dict[str, Any], title: str | None = None) -> None:
    """Draw one result on ``ax`` (``title``: None for :func:`describe`'s line, "" for none)."""
    systems = _systems(result)
    labels = [name for name, _ in systems]
    xs = list(range(len(systems)))
    if metric_of(result) == "latency":
        _draw_latency(ax, systems, xs)
        ax.set_ylabel("round-trip latency (µs), lower is better")
        pz = result.get("p50_vs_pyzmq")
        note = f"a3m p50 = {pz:.2f} × pyzmq" if isinstance(pz, (int, float)) else ""
    else:
        _draw_throughput(ax, systems, xs)
        ax.set_ylabel("messages per second, higher is better")
        vs = result.get("vs_raw_udp")
        note = f"a3m = {vs:.2f} × raw UDP" if isinstance(vs, (int, float)) else ""
    ax.set_xticks(xs, labels)
    title = describe(result) if title is None else title
    if title:
        ax.set_title(title, fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)
    ax.yaxis.set_major_formatter(_axis_formatter())
    if note:
        ax.text(0.99, 0.97, note, transform=ax.transAxes, ha="right", va="top", fontsize=8,
                color="#444444")


def _axis_formatter() -> Any:
    from matplotlib.ticker import FuncFormatter

    return FuncFormatter(lambda v, _pos: _si(v) if v else "0")


def _headroom(ax: Axes, top: float) -> None:
    ax.set_ylim(0, top * 1.18 if top > 0 else 1)


def _draw_throughput(ax: Axes, systems: list[tuple[str, dict[str, Any]]],
                     xs: list[int]) -> None:
    values = [row.get("msgs_per_s") for _, row in systems]
    top = max((v for v in values if isinstance(v, (int, float))), default=0.0)
    for x, (name, row), v in zip(xs, systems, values, strict=True):
        color = A3M_COLOR if name == "a3m" else BASE_COLOR
        if not isinstance(v, (int, float)) or math.isnan(v):
            ax.text(x, top * 0.02, _missing_note(row), ha="center", va="bottom", fontsize=8,
                    color="#aa0000")
            continue
        ax.bar(x, v, color=color, width=0.6)
        label = _si(v)
        if row.get("lost"):
            label += f"\n(lost {row['lost']:,})"
        ax.text(x, v, label, ha="center", va="bottom", fontsize=8)
    _headroom(ax, top)


def _draw_latency(ax: Axes, systems: list[tuple[str, dict[str, Any]]], xs: list[int]) -> None:
    width = 0.38
    top = 0.0
    for key, shift, color in (("p50_us", -width / 2, P50_COLOR),
                              ("p99_us", width / 2, P99_COLOR)):
        first = True
        for x, (_, row) in zip(xs, systems, strict=True):
            v = row.get(key)
            if not isinstance(v, (int, float)):
                if key == "p50_us":
                    ax.text(x, 0, _missing_note(row), ha="center", va="bottom", fontsize=8,
                            color="#aa0000")
                continue
            ax.bar(x + shift, v, width=width, color=color,
                   label=key.removesuffix("_us") if first else None)
            first = False
            ax.text(x + shift, v, f"{v:,.0f}", ha="center", va="bottom", fontsize=7)
            top = max(top, v)
    _headroom(ax, top)
    ax.legend(loc="upper left", fontsize=8)


def _footer(results: Sequence[dict[str, Any]]) -> str:
    machines = {json.dumps(r.get("machine"), sort_keys=True) for r in results}
    if len(machines) != 1:
        return "results from several machines"
    m = results[0].get("machine") or {}
    parts = []
    if m.get("cpus"):
        parts.append(f"{m['cpus']} CPUs")
    if m.get("python"):
        parts.append(f"Python {m['python']}")
    if m.get("platform"):
        parts.append(str(m["platform"]))
    return ", ".join(parts)


def plot_results(results: Sequence[dict[str, Any]], path: str,
                 title: str | None = None) -> str:
    """Draw one panel per result into ``path`` (.png, .svg or .pdf); returns ``path``."""
    if not results:
        raise PlotError("nothing to plot: no results")
    for i, r in enumerate(results):
        check_result(r, f"result {i + 1}")
    check_output(path)
    require_matplotlib()
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    n = len(results)
    cols = 1 if n == 1 else 2 if n in (2, 4) else 3
    rows = math.ceil(n / cols)
    fig = Figure(figsize=(6.4 * cols, 4.6 * rows + 0.6), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(rows, cols, squeeze=False)
    for i, ax in enumerate(axes.flat):
        if i < n:
            draw_panel(ax, results[i], "" if n == 1 else None)
        else:
            ax.set_visible(False)
    if title is None:
        title = f"a3m bench {describe(results[0])}" if n == 1 else f"a3m bench: {n} results"
    fig.suptitle(title, fontsize=12, fontweight="bold")
    footer = _footer(results)
    if footer:
        fig.supxlabel(footer, fontsize=7, color="#666666")
    fig.savefig(path, dpi=110)
    return path


def plot_result(result: dict[str, Any], path: str) -> str:
    """Draw one result (A3M beside its baselines) into ``path``."""
    return plot_results([result], path)


def finish(fig: Any, axes: Sequence[Any], path: str) -> None:
    """The benchmarks' common last step: a light grid and a legend on each of ``axes``,
    a tight layout, the figure saved to ``path`` and closed."""
    import matplotlib.pyplot as plt

    for ax in axes:
        ax.grid(True, alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


__all__ = ["FORMATS", "PlotError", "check_output", "check_result", "describe", "draw_panel",
           "finish", "load_results", "plot_result", "plot_results", "require_matplotlib"]
