"""The audit report: one HTML page with PNG plots beside it (matplotlib, no Spark needed).

``write_report(summary, path)`` writes ``path`` and a folder ``<stem>_files/`` holding
``latency_hist.png``, ``latency_cdf.png`` and ``throughput.png``; the page links them by
relative path and shows the per-link table.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

PLOTS = ("latency_hist.png", "latency_cdf.png", "throughput.png")

#: What each plot shows, in words, printed above it in the report.
CAPTIONS = {
    "latency_hist.png": (
        "Latency histogram: how many messages took how long from the sender's journal row "
        "(the message put on its link) to the receiver's (the receiving socket accepted it in "
        "order), on a log scale: the bulk is the usual delivery time, and the right tail the "
        "messages whose datagram was lost or held back and had to be sent again, each a probe "
        "timeout or more later."),
    "latency_cdf.png": (
        "Latency CDF: the share of delivered messages that took at most the latency on the "
        "horizontal axis (log scale); read the percentiles of the table above off it."),
    "throughput.png": (
        "Throughput: messages sent and delivered in each second of wall time, counted from "
        "the journals, from the first journal row (the first message put on a link) to the "
        "last. The two lines follow each other when nothing is held back; a delivered line "
        "that lags the sent one shows messages waiting for a retransmission."),
}


def _fmt_us(v: float | None) -> str:
    if v is None:
        return "-"
    if abs(v) >= 1_000_000:
        return f"{v / 1e6:.2f} s"
    if abs(v) >= 1_000:
        return f"{v / 1e3:.2f} ms"
    return f"{v:.0f} µs"


def _plots(summary: dict[str, Any], folder: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    folder.mkdir(parents=True, exist_ok=True)
    hist = summary.get("latency_histogram") or []
    lo = [h["lo_us"] / 1e3 for h in hist]
    width = [(h["hi_us"] - h["lo_us"]) / 1e3 for h in hist]
    counts = [h["count"] for h in hist]
    paths = [folder / name for name in PLOTS]

    fig, ax = plt.subplots(figsize=(7, 3.5))
    if hist:
        ax.bar(lo, counts, width=width, align="edge", color="#4878a8")
        ax.set_xscale("log")
    else:
        ax.text(0.5, 0.5, "no delivered message", ha="center", transform=ax.transAxes)
    ax.set_xlabel("latency sent -> delivered (ms, log)")
    ax.set_ylabel("messages")
    ax.set_title("Latency histogram")
    fig.tight_layout()
    fig.savefig(paths[0], dpi=100)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(7, 3.5))
    if hist:
        total = sum(counts)
        acc, xs, ys = 0, [], []
        for h in hist:
            acc += h["count"]
            xs.append(h["hi_us"] / 1e3)
            ys.append(acc / total)
        ax.step([hist[0]["lo_us"] / 1e3, *xs], [0.0, *ys], where="post", color="#4878a8")
        ax.set_xscale("log")
        ax.set_ylim(0, 1.02)
    ax.set_xlabel("latency (ms, log)")
    ax.set_ylabel("fraction delivered")
    ax.set_title("Latency CDF")
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(paths[1], dpi=100)
    plt.close(fig)

    tp = summary.get("throughput") or []
    fig, ax = plt.subplots(figsize=(7, 3.5))
    ax.plot([r["t"] for r in tp], [r["sent"] for r in tp], label="sent", marker=".")
    ax.plot([r["t"] for r in tp], [r["delivered"] for r in tp], label="delivered", marker=".")
    ax.set_xlabel("seconds since the first journal row")
    ax.set_ylabel("messages / s")
    ax.set_title("Throughput")
    ax.legend()
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(paths[2], dpi=100)
    plt.close(fig)
    return paths


def _table(links: list[dict[str, Any]]) -> str:
    head = ("link", "sent", "delivered", "lost", "duplicated", "phantoms",
            "p50", "p90", "p99", "max")
    rows = ["<tr>" + "".join(f"<th>{h}</th>" for h in head) + "</tr>"]
    for link in links:
        lat = link["latency_us"]
        bad = link["lost"] or link["duplicated"] or link["phantoms"]
        cells = [
            html.escape(f"{link['src']} -> {link['dst']}"),
            *(str(link[k]) for k in ("sent", "delivered", "lost", "duplicated", "phantoms")),
            *(_fmt_us(lat[k]) for k in ("p50", "p90", "p99", "max")),
        ]
        cls = ' class="bad"' if bad else ""
        rows.append(f"<tr{cls}>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    return "<table>\n" + "\n".join(rows) + "\n</table>"


def write_report(summary: dict[str, Any], path: str | Path, extra_html: str = "",
                 title: str = "A3M audit") -> Path:
    """Write the HTML report and its PNGs; returns the page's path. ``extra_html`` goes
    before the audit (the demo puts its query's results there)."""
    page = Path(path)
    page.parent.mkdir(parents=True, exist_ok=True)
    folder = page.parent / f"{page.stem}_files"
    plots = _plots(summary, folder)
    lat = summary["latency_us"]
    verdict = "exactly once" if summary["exactly_once"] else "NOT exactly once"
    imgs = "\n".join(
        f'<p>{html.escape(CAPTIONS[p.name])}</p>\n'
        f'<p><img src="{folder.name}/{p.name}" alt="{p.stem}"></p>' for p in plots
    )
    body = f"""<!doctype html>
<html><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>
body {{ font-family: sans-serif; margin: 2em; }}
table {{ border-collapse: collapse; }}
td, th {{ border: 1px solid #bbb; padding: 0.2em 0.6em; text-align: right; }}
tr.bad td {{ background: #fdd; }}
</style></head><body>
<h1>{html.escape(title)}: {verdict}</h1>
{extra_html}
<h2>Audit of the delivery journals</h2>
<p>Journals: {html.escape(summary['dir'])} ({len(summary['nodes'])} nodes,
{len(summary['links'])} links).<br>
Sent {summary['sent']}, delivered {summary['delivered']}, lost {summary['lost']},
duplicated {summary['duplicated']} ({summary['duplicate_deliveries']} extra copies),
phantoms {summary['phantoms']}.<br>
Latency p50 {_fmt_us(lat['p50'])}, p90 {_fmt_us(lat['p90'])}, p99 {_fmt_us(lat['p99'])},
max {_fmt_us(lat['max'])}.</p>
<h2>Links</h2>
{_table(summary['links'])}
<h2>Plots</h2>
{imgs}
</body></html>
"""
    page.write_text(body, encoding="utf-8")
    return page
