"""``a3m bench soak`` for two minutes (issue 40): streams, round trips, link churn and a
receiver restarted every 30 s, through the lossy relay. Counts only, never timing: every
message is accounted for (delivered once, or reported UNKNOWN at a restart, or
NOT_DELIVERED), the restarts were heard with as many unknown messages as the cookies say,
and every process sampled itself. The hour-long run is in docs/performance.md."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from a3m.benchmarks.soak import growth_mib_per_h


def test_a_short_soak_accounts_for_every_message(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "a3m.cli.main", "bench", "soak", "--minutes", "2", "--rate",
         "100", "--batch", "50", "--churn-s", "2", "--restart-s", "30", "--sample-s", "10",
         "--workdir", str(tmp_path / "work"), "--json", "--plot", str(tmp_path / "soak.png")],
        capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    r = json.loads(out.stdout)
    assert r["exact"] and r["lost"] == 0 and r["duplicates"] == 0 and r["phantoms"] == 0
    assert r["delivered"] + r["unknown"] + r["not_delivered"] == r["sent"] > 1000
    assert r["restarts"] >= 2 and len(r["restarts_heard"]) == r["restarts"]
    restarted = r["outcomes_by_stream"]["restarted"]
    assert r["unknown_heard"] == restarted.get("unknown", 0)  # the events say what cookies say
    assert r["outcomes_by_stream"]["stream"] == {"delivered": r["outcomes_by_stream"]
                                                 ["stream"]["delivered"]}
    assert r["rpc_ok"] >= 10 and r["churn_links"] >= 10 and r["churn_failed"] == 0
    for role in ("tx", "rx"):
        proc = r["processes"][role]
        assert len(proc["samples"]) >= 10
        assert all({"rss_mib", "fds", "threads", "tables"} <= set(s) for s in proc["samples"])
    assert r["processes"]["rx2"]["incarnations"] == r["restarts"] + 1
    assert set(r["growth_mib_per_h"]) == {"tx", "rx"}
    assert (tmp_path / "soak.png").stat().st_size > 0


def test_growth_is_the_least_squares_slope_after_the_warmup() -> None:
    samples = [{"t": t, "rss_mib": 100.0 + (50.0 if t < 300 else t / 3600)}
               for t in range(0, 3600, 30)]
    assert growth_mib_per_h(samples, 300.0) == 1.0
    assert growth_mib_per_h(samples[:2], 0.0) is None
