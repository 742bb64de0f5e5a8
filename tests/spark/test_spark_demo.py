"""``a3m demo --json`` end to end (its own Spark, in a subprocess): exactly once, a report,
and what a new user reads on the terminal. One run serves both: the demo's progress and
verdict go to stderr with or without ``--json`` (``--json`` only adds the JSON line on stdout
and makes the progress bar transient), and each demo run costs a Spark start-up."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.spark
def test_demo_counts_each_reading_once_and_prints_no_trace(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "a3m", "demo", "--producers", "2", "--readings", "1500",
         "--rate", "1000", "--out", str(tmp_path / "demo"), "--master", "local[2]", "--json"],
        capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stdout
    out = json.loads(lines[0])
    assert out["sent"] == out["counted"] == 3000
    assert out["lost"] == out["duplicates"] == out["phantoms"] == 0
    assert out["restarts"] == 1 and out["exactly_once"]
    assert out["audit"]["delivered"] == 3000 and out["audit"]["exactly_once"]
    assert out["relay"]["dropped"] > 0
    report = Path(out["report"])
    assert report.is_file() and "exactly once" in report.read_text()
    pngs = list((report.parent / "report_files").glob("*.png"))
    assert len(pngs) == 4 and all(p.stat().st_size > 5000 for p in pngs)
    # What a new user sees: progress and a result, never a Java or Python stack trace or an
    # ERROR line (the query is restarted half-way, as by default).
    noisy = [line for line in proc.stderr.splitlines()
             if "Traceback" in line or line.startswith("\tat ") or "ERROR" in line
             or "Exception" in line]
    assert noisy == [], "\n".join(noisy[:40])
    assert "counted exactly once" in proc.stderr and "restarting it" in proc.stderr
