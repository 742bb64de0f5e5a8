"""``a3m bench fanout`` end to end, small: one PUB to a handful of SUB nodes (asyncio, a few
per process, real UDP on loopback), every delivery audited exactly once and in order; the
JSON holds the contract's fields (SPEC 7b) and says which data plane ran. Also the data plane
reporting that ``a3m bench fanin`` shares. Figures are the benchmark's business: nothing here
depends on the machine's speed beyond generous phase time-outs."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest

import a3m
from a3m.benchmarks import fanin, fanout

HAVE_ZMQ = importlib.util.find_spec("zmq") is not None


def _offload_ok(offload: object) -> None:
    assert isinstance(offload, dict) and set(offload) == {"gso", "gro"}
    assert all(isinstance(v, bool) for v in offload.values())


def test_six_subs_get_every_message_once_in_order() -> None:
    r = fanout.run_once("a3m", 6, 50, timeout=60, per_process=2)
    assert "error" not in r, r.get("error")
    assert r["linked"] == 6 and r["pub_links"] == 6 and r["link_timed_out"] is False
    assert r["link_s"] is not None and r["link_s"] >= 0
    assert r["sent"] == 50 and r["unsent"] == 0 and r["expected"] == 300
    assert r["delivered"] == 300 and r["missing"] == 0 and r["complete_subs"] == 6
    assert r["duplicates"] == 0 and r["out_of_order"] == 0 and r["phantoms"] == 0
    assert r["exact"] is True and r["recv_timed_out"] is False
    assert r["deliveries_per_s"] > 0 and r["kib_per_sub"] is not None
    assert r["pub_cpu_s"] >= 0 and r["pub_cpu_us_per_delivery"] >= 0
    want = "native" if a3m.NATIVE else "python"
    assert r["path"] == r["sub_path"] == want and r["engine"] in ("native", "python")
    _offload_ok(r["offload"])


def test_the_python_data_plane_runs_when_asked() -> None:
    """``a3m-python`` (``--paths python``) starts its processes with A3M_NATIVE=0: every one
    of them says so, and the exactness holds there too."""
    r = fanout.run_once("a3m-python", 4, 20, timeout=60, per_process=2)
    assert "error" not in r, r.get("error")
    assert r["path"] == r["sub_path"] == "python" and r["engine"] == "python"
    _offload_ok(r["offload"])
    assert r["delivered"] == 80 and r["missing"] == 0 and r["exact"] is True


def test_the_cli_prints_the_contract_fields() -> None:
    cmd = [sys.executable, "-m", "a3m", "bench", "fanout", "--subs", "6", "--per-process",
           "2", "--messages", "50", "--timeout", "60", "--json"]
    if not HAVE_ZMQ:
        cmd.append("--no-baselines")
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout)
    for key in ("link_s", "deliveries_per_s", "kib_per_sub", "sent", "delivered", "missing",
                "duplicates", "pub_cpu_us_per_delivery", "path", "offload", "timeout_s"):
        assert key in result, key
    assert result["workload"] == "fanout" and result["subs"] == 6
    assert result["sent"] == 50 and result["delivered"] == 300 and result["missing"] == 0
    assert result["duplicates"] == 0 and result["exact"] is True and result["all_exact"]
    assert result["path"] in ("native", "python")
    _offload_ok(result["offload"])
    if HAVE_ZMQ:
        zmq = result["baselines"]["pyzmq"]
        assert zmq["delivered"] == 300 and zmq["missing"] == 0 and zmq["exact"] is True
        assert zmq["path"] is None  # not an A3M data plane
        assert [r["system"] for r in result["runs"]] == ["a3m", "pyzmq"]
        assert result["runs"][1]["probes"] >= 1  # the slow joiner was waited for
    assert set(result["systems"]) >= {"a3m"}


def test_the_cli_refuses_unknown_paths() -> None:
    out = subprocess.run([sys.executable, "-m", "a3m", "bench", "fanout", "--subs", "2",
                          "--paths", "native,gpu"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "--paths" in out.stderr


def test_a_tally_counts_duplicates_reordering_phantoms_and_probes() -> None:
    t = fanout.Tally(4)
    p = [fanout.payload(s, 16) for s in range(4)]
    t.take([p[0], p[2], fanout.payload(fanout.PROBE, 4)])
    t.take([p[1], p[2], fanout.payload(9, 16), p[3]])
    assert t.complete and t.unique == 4
    assert t.duplicates == 1 and t.phantoms == 1 and t.probes == 1
    assert t.out_of_order == 1  # 1 came after 2
    assert t.last >= t.first > 0


def test_paths_name_the_a3m_systems() -> None:
    assert fanin.a3m_systems("native") == ["a3m"]
    assert fanin.a3m_systems("python") == ["a3m-python"]
    both = fanin.a3m_systems("native, python")
    assert both == (["a3m", "a3m-python"] if a3m.NATIVE else ["a3m-python"])
    for bad in ("", "gpu", "native,gpu"):
        with pytest.raises(ValueError):
            fanin.a3m_systems(bad)
    assert fanin.one_path(["native", "native"]) == "native"
    assert fanin.one_path(["native", "python"]) == "mixed"
    assert fanin.one_path([None]) is None


def test_fanin_rows_say_which_data_plane_ran() -> None:
    r = fanin.run_once("a3m-python", 4, 3, quiet_s=0.2, timeout=60, per_process=2)
    assert "error" not in r, r.get("error")
    assert r["path"] == r["producer_path"] == "python" and r["engine"] == "python"
    _offload_ok(r["offload"])
    assert r["lost"] == 0 and r["duplicates"] == 0 and r["exact"] is True
    assert r["busy_cpu_us_per_msg"] >= 0
