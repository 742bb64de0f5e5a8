"""``a3m bench fanin`` end to end, small: a few hundred producer nodes (asyncio, several per
process, real UDP on loopback) into one collector, every message audited exactly once; the
JSON holds the contract's fields (SPEC 7b). Figures are the benchmark's business: nothing here
depends on the machine's speed beyond generous phase time-outs."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from a3m.benchmarks import fanin


def test_a_few_hundred_producers_deliver_exactly_once() -> None:
    r = fanin.run_once("a3m", 240, 5, quiet_s=0.5, timeout=90, per_process=120)
    assert "error" not in r, r.get("error")
    assert r["linked"] == 240 and r["link_timed_out"] is False and r["link_s"] is not None
    assert r["sent"] == 240 * 5 and r["unsent"] == 0
    assert r["received"] == r["sent"] and r["lost"] == 0
    assert r["duplicates"] == 0 and r["phantoms"] == 0 and r["exact"] is True
    assert r["kib_per_peer"] > 0 and r["idle_cpu_pct"] >= 0


def test_the_cli_prints_the_contract_fields_with_pyzmq_beside() -> None:
    pytest.importorskip("zmq")
    out = subprocess.run(
        [sys.executable, "-m", "a3m", "bench", "fanin", "--peers", "20", "--messages", "3",
         "--quiet-s", "0.3", "--timeout", "60", "--json"],
        capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout)
    for key in ("link_s", "idle_cpu_pct", "kib_per_peer", "rx_drops", "msgs_per_s", "sent",
                "received", "lost", "duplicates"):
        assert key in result, key
    assert result["sent"] == result["received"] == 60 and result["exact"] is True
    zmq = result["baselines"]["pyzmq"]
    assert zmq["exact"] is True and zmq["lost"] == 0
    assert [r["system"] for r in result["runs"]] == ["a3m", "pyzmq"]


def test_source_addresses_spread_over_loopback() -> None:
    assert fanin.source_address(7, 1) == "127.0.0.1"
    got = {fanin.source_address(i, 300) for i in range(600)}
    assert len(got) == 300 and all(a.startswith("127.0.") for a in got)
    assert fanin.default_messages(100) == 2000 and fanin.default_messages(100_000) == 20
