"""Smoke tests of the transport commands: each prints exactly one JSON object with its fields."""

from __future__ import annotations

import json
import subprocess
import sys


def run_cli(*args: str, timeout: float = 240) -> dict[str, object]:
    proc = subprocess.run([sys.executable, "-m", "a3m", *args], capture_output=True,
                          text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stdout
    return json.loads(lines[0])  # type: ignore[no-any-return]


def test_bench_transport_json() -> None:
    out = run_cli("bench", "transport", "--size", "64", "--messages", "5000", "--json")
    assert out["workload"] == "transport" and out["received"] == 5000
    assert float(out["msgs_per_s"]) > 0  # type: ignore[arg-type]
    assert "raw_udp" in out["baselines"]  # type: ignore[operator]


def test_chaos_transport_json_exactly_once() -> None:
    out = run_cli("chaos", "transport", "--messages", "3000", "--loss", "0.2", "--dup", "0.1",
                  "--reorder", "0.2", "--json")
    assert out["sent"] == out["delivered"] == 3000
    assert out["lost"] == out["duplicates"] == out["phantoms"] == 0
    assert out["relay"]["dropped"] > 0  # type: ignore[index]


def test_bench_asyncio_json() -> None:
    """a3m.aio beside pyzmq.asyncio, one process and two: every run received everything."""
    out = run_cli("bench", "pushpull", "--asyncio", "--messages", "3000", "--json")
    assert out["workload"] == "pushpull" and out["asyncio"] is True
    runs = out["runs"]
    assert {(r["system"], r["processes"]) for r in runs} >= {  # type: ignore[union-attr]
        ("a3m.aio", 1), ("a3m.aio", 2)}
    for r in runs:  # type: ignore[union-attr]
        assert "error" not in r and r["received"] == 3000, r
    out = run_cli("bench", "reqrep", "--asyncio", "--processes", "1", "--messages", "300",
                  "--json")
    a3m_run = next(r for r in out["runs"] if r["system"] == "a3m.aio")  # type: ignore[union-attr]
    assert a3m_run["round_trips"] == 300 and a3m_run["p50_us"] > 0
    work = a3m_run["work"]["process"]  # one process: the work of both sides, per round trip
    assert work["per"] == 300 and work["cpu_us"] > 0 and work["wakeups"] >= 0


def native_counter() -> bool:
    from a3m.benchmarks.work import alloc_counter

    return alloc_counter()[0] is not None


def check_counters(w: dict[str, object], out: dict[str, object], name: object) -> None:
    """A side's allocations and system calls per round trip: counted (a round trip of any
    system allocates and makes system calls), or None with the reason, kept once in the
    result."""
    if native_counter():
        assert w["allocations"] > 0, (name, w)  # type: ignore[operator]
    else:
        assert w["allocations"] is None and out["allocations_why"], (name, w)
    if w["syscalls"] is None:
        assert out["syscalls_why"], (name, w)
    else:
        assert w["syscalls"] > 0, (name, w)  # type: ignore[operator]
    assert "syscalls_why" not in w and "allocations_why" not in w, (name, w)


def test_bench_reqrep_reports_the_work_per_round_trip() -> None:
    """Each side's CPU time, wake-ups, allocations and system calls per round trip, and with
    --count its Python calls, for A3M and for each peer of the same run (counted, not timed:
    a profiler runs)."""
    out = run_cli("bench", "reqrep", "--messages", "400", "--count", "--json")
    assert out["counted"] is True and out["round_trips"] == 400 and out["wrong_answers"] == 0
    rows = {"a3m": out, **out["baselines"]}  # type: ignore[dict-item]
    for name, row in rows.items():
        if "error" in row or "skipped" in row:
            continue
        for side in ("client", "server"):
            w = row["work"][side]  # type: ignore[index]
            assert w["per"] >= 399 and w["cpu_us"] >= 0 and w["wakeups"] >= 0, (name, w)
            assert w["py_calls"] >= 0, (name, w)
            check_counters(w, out, name)
    # The A3M sides run Python per round trip (its runtime, its patterns): counted.
    assert out["work"]["client"]["py_calls"] > 1  # type: ignore[index]
    assert out["work"]["server"]["py_calls"] > 1  # type: ignore[index]
    # The Exon transport alone on the same runtime ran beside it: its round trips, and what
    # the node layer adds to them.
    exon = out["baselines"]["a3m_exon"]  # type: ignore[index]
    assert exon["p50_us"] > 0 and exon["work"]["client"]["per"] >= 398, exon
    assert out["p50_over_exon_us"] == round(out["p50_us"] - exon["p50_us"], 1)


def test_bench_reqrep_asyncio_counts_the_work_per_round_trip() -> None:
    """--asyncio --count: a3m.aio and pyzmq.asyncio, one process and two, each run's Python
    calls, allocations and system calls per round trip (each side's), and their medians."""
    out = run_cli("bench", "reqrep", "--asyncio", "--count", "--messages", "200", "--json")
    assert out["counted"] is True
    runs = out["runs"]
    assert {(r["system"], r["processes"]) for r in runs} >= {  # type: ignore[union-attr]
        ("a3m.aio", 1), ("a3m.aio", 2)}
    for r in runs:  # type: ignore[union-attr]
        assert "error" not in r and r["round_trips"] == 200, r
        sides = ("process",) if r["processes"] == 1 else ("client", "server")
        for side in sides:
            w = r["work"][side]
            assert w["py_calls"] > 0, (r["system"], side, w)
            check_counters(w, out, (r["system"], side))
    for row in out["medians"]:  # type: ignore[union-attr]
        units = row["work"]["a3m.aio"]
        assert units["py_calls"] > 0 and units["cpu_us"] > 0, row
