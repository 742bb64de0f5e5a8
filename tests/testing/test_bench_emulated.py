"""``a3m bench rpc`` and ``a3m bench pushpull --loss``: arguments, and a short real run
across the emulated path when it can be built here (root)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from a3m.testing.netem import unavailable

A3M = [sys.executable, "-m", "a3m.cli.main"]


def a3m(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*A3M, *args], capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("args, says", [
    (("--loss", "abc"), "--loss takes percentages"),
    (("--loss", "150"), "within 0..100"),
    (("--concurrency", "0"), "--concurrency >= 1"),
    (("--loss-model", "nosuch"), "--loss-model takes random, burst"),
    (("--loss-model", "burst,ack"), "one --loss-model"),
    (("--loss-model", "burst", "--burst-len", "0.5"), "--burst-len >= 1"),
])
def test_bad_arguments_are_refused_clearly(args: tuple[str, ...], says: str) -> None:
    r = a3m("bench", "rpc", *args)
    assert r.returncode == 2 and says in r.stderr


@pytest.mark.skipif(unavailable() is None, reason="runs as root here: the other test runs")
def test_without_root_it_says_so() -> None:
    r = a3m("bench", "rpc", "--duration", "1")
    assert r.returncode == 2 and "root" in r.stderr


@pytest.mark.skipif(unavailable() is not None, reason=str(unavailable()))
def test_a_short_rpc_run_on_the_emulated_path() -> None:
    r = a3m("bench", "rpc", "--loss", "0,5", "--delay", "1", "--duration", "1", "--json")
    assert r.returncode == 0, r.stderr[-2000:]
    result = json.loads(r.stdout)
    assert result["workload"] == "rpc" and result["delay_ms"] == 1.0
    rows = result["results"]
    assert {row["loss_pct"] for row in rows} == {0.0, 5.0}
    for row in rows:
        assert "error" not in row, row
        assert row["round_trips"] > 0 and row["p99_ms"] >= row["p50_ms"] >= 2.0
    # A3M twice, per-link order off and on, in one run
    assert sorted(r["ordered"] for r in rows if r["system"] == "a3m") == [False, False, True,
                                                                          True]
    a3m_lossy = next(r for r in rows if r["system"] == "a3m" and r["loss_pct"] == 5.0)
    assert a3m_lossy["path_stats"]["ab"]["lost"] > 0  # the path did drop packets
    assert a3m_lossy["round_trips"] > 100  # ~2 ms round trips, losses cost a few ms


@pytest.mark.skipif(unavailable() is not None, reason=str(unavailable()))
def test_a_short_stream_on_the_emulated_path() -> None:
    r = a3m("bench", "pushpull", "--loss", "5", "--delay", "1", "--messages", "5000",
            "--loss-model", "random,ack", "--json")
    assert r.returncode == 0, r.stderr[-2000:]
    rows = json.loads(r.stdout)["results"]
    assert {row["model"] for row in rows} == {"random", "ack"}
    for row in rows:
        assert "error" not in row, row
        assert row["received"] == 5000 and row["msgs_per_s"] > 0
        ab, ba = row["path_stats"]["ab"], row["path_stats"]["ba"]
        assert ba["lost"] > 0 and (ab["lost"] > 0) == (row["model"] == "random")
        if row["system"] == "a3m":
            assert "retransmits" in row["sender"] and "duplicates" in row
