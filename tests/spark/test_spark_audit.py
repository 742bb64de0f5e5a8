"""The audit job on synthetic journals written with the real JournalWriter (one Spark session)."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")

from a3m.journal import JournalWriter, message_id  # noqa: E402

pytestmark = pytest.mark.spark
T0 = 1_700_000_000.0  # wall-clock seconds of the first send


def _write_traffic(
    root: Path,
    *,
    links: list[tuple[str, str, str, str]],
    n: int,
    lose: set[int] = frozenset(),  # type: ignore[assignment]
    dup: set[int] = frozenset(),  # type: ignore[assignment]
    phantoms: int = 0,
    latency_s: Any = None,
) -> None:
    """n messages per link, sender and receiver journals; plant losses, dups, phantoms by index."""
    nodes = sorted({x for s_node, _, d_node, _ in links for x in (s_node, d_node)})
    writers = {node: JournalWriter(root, node, batch_rows=97) for node in nodes}
    try:
        for s_node, s_sock, d_node, d_sock in links:
            for i in range(n):
                mid = message_id(s_node, s_sock, i)
                t = T0 + i * 0.002  # 500 messages per second
                lat = latency_s(i) if latency_s else 0.001
                writers[s_node].record_sent(s_sock, (d_node, d_sock), mid, 100, t)
                if i in lose:
                    continue
                writers[d_node].record_delivered(d_sock, (s_node, s_sock), mid, 100, t, t + lat)
                if i in dup:
                    writers[d_node].record_delivered(d_sock, (s_node, s_sock), mid, 100, t,
                                                     t + lat + 0.5)
            for k in range(phantoms):
                mid = message_id(s_node, s_sock, n + 1000 + k)  # never sent
                writers[d_node].record_delivered(d_sock, (s_node, s_sock), mid, 100, None, T0 + 1)
    finally:
        for w in writers.values():
            w.close()


def test_planted_faults_are_found_exactly(spark: Any, tmp_path: Path) -> None:
    from a3m.spark.audit import audit

    links = [("alpha", "out", "gamma", "in"), ("beta", "out", "gamma", "in"),
             ("alpha", "out2", "beta", "in")]
    # Faults only on the first two links (same index sets on each); the third stays clean.
    _write_traffic(tmp_path / "bad", links=links[:2], n=1000, lose={3, 50, 999},
                   dup={7, 8, 500, 501, 502}, phantoms=2)
    _write_traffic(tmp_path / "bad", links=links[2:], n=400)
    s = audit(spark, str(tmp_path / "bad"))
    assert s["nodes"] == ["alpha", "beta", "gamma"]
    by_link = {(x["src"], x["dst"]): x for x in s["links"]}
    assert set(by_link) == {("alpha/out", "gamma/in"), ("beta/out", "gamma/in"),
                            ("alpha/out2", "beta/in")}
    for key in [("alpha/out", "gamma/in"), ("beta/out", "gamma/in")]:
        x = by_link[key]
        assert (x["sent"], x["delivered"], x["lost"]) == (1000, 997, 3)
        assert (x["duplicated"], x["duplicate_deliveries"], x["phantoms"]) == (5, 5, 2)
    clean = by_link[("alpha/out2", "beta/in")]
    assert (clean["sent"], clean["delivered"], clean["lost"], clean["duplicated"],
            clean["phantoms"]) == (400, 400, 0, 0, 0)
    assert (s["sent"], s["lost"], s["duplicated"], s["phantoms"]) == (2400, 6, 10, 4)
    assert s["exactly_once"] is False
    # Throughput: 500 sends a second per link -> seconds 0 and 1 have traffic.
    assert sum(r["sent"] for r in s["throughput"]) == 2400
    assert s["throughput"][0]["sent"] == 1400  # 500 + 500 + 400 in the first second


def test_clean_journals_pass_and_percentiles_are_exact(spark: Any, tmp_path: Path) -> None:
    import numpy as np

    from a3m.spark.audit import audit

    rng = random.Random(5)
    lat_ms = [rng.randint(1, 2000) / 10 for _ in range(3000)]  # 0.1 .. 200 ms, in 0.1 ms steps
    _write_traffic(tmp_path, links=[("p", "s", "c", "r")], n=3000,
                   latency_s=lambda i: lat_ms[i] / 1000)
    s = audit(spark, str(tmp_path))
    assert s["exactly_once"] is True
    assert (s["sent"], s["delivered"], s["lost"], s["duplicated"], s["phantoms"]) == (
        3000, 3000, 0, 0, 0)
    lat_us = np.array(lat_ms) * 1000
    for name, q in (("p50", 50), ("p90", 90), ("p99", 99)):
        assert s["latency_us"][name] == pytest.approx(np.percentile(lat_us, q), abs=2)
    assert s["latency_us"]["max"] == pytest.approx(lat_us.max(), abs=1)
    assert s["links"][0]["latency_us"]["p99"] == pytest.approx(np.percentile(lat_us, 99), abs=2)
    assert sum(h["count"] for h in s["latency_histogram"]) == 3000


def test_cli_json_and_report(spark: Any, tmp_path: Path,
                             capsys: pytest.CaptureFixture[str]) -> None:
    from a3m.cli.main import main

    _write_traffic(tmp_path / "j", links=[("a", "s", "b", "r")], n=200, lose={10}, dup={20})
    report = tmp_path / "out" / "audit.html"
    rc = main(["audit", str(tmp_path / "j"), "--json", "--report", str(report)])
    out = capsys.readouterr().out
    summary = json.loads(out)  # exactly one object: json.loads rejects trailing data
    assert out.count("\n") == 1
    assert rc == 1  # not exactly once -> non-zero, so scripts can check it
    assert (summary["lost"], summary["duplicated"], summary["phantoms"]) == (1, 1, 0)
    assert summary["report"] == str(report)
    html = report.read_text()
    for png in ("latency_hist.png", "latency_cdf.png", "throughput.png"):
        path = report.parent / "audit_files" / png
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"audit_files/{png}" in html
    assert "a/s -&gt; b/r" in html

    assert main(["audit", str(tmp_path / "empty"), "--json"]) == 2
