"""``a3m bench pipeline`` (issue 15, item 4): the same query fed by Spark's rate source and by
the a3m source with 1 and 2 partitions, in one run; the a3m count must come out exact."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from a3m.benchmarks import pipeline


def test_bench_pipeline_runs_both_feeds_and_counts_exactly(spark: Any, tmp_path: Path) -> None:
    """The mechanics, not a speed: a 1 s window is shorter than a cold JVM's first batches
    on a busy machine; the rate feed then measures on until two batches have finished."""
    seen: list[str] = []
    result = pipeline.run_pipeline(readings=3000, producers=2, partitions=(1, 2),
                                   rate_rows_per_batch=2000, rate_seconds=1.0, warmup=0,
                                   progress=seen.append)
    rate = result["rate"]
    # the slope spans whole batches: at least one, every row of each aggregated
    assert rate["batches"] >= 1 and rate["readings"] == 2000 * rate["batches"]
    assert rate["readings_per_s"] > 0
    assert [r["partitions"] for r in result["a3m"]] == [1, 2]
    for r in result["a3m"]:
        assert r["readings"] == 3000 and r["counted"] == 3000 and r["exact"]
        assert r["readings_per_s"] > 0
    assert result["exact"] and result["a3m_over_rate"] > 0
    assert any("2 partition(s)" in line for line in seen)
    json.dumps(result)
    png = pipeline.plot(result, str(tmp_path / "pipeline.png"))
    assert Path(png).stat().st_size > 1000


def test_rate_feed_past_its_deadline_says_what_it_saw(spark: Any, tmp_path: Path) -> None:
    """With no time at all, the rate feed raises naming the batches it saw (none)."""
    results = pipeline.Results()
    try:
        with pytest.raises(RuntimeError, match=r"did not finish its first batch within 0 s: "
                                               r"0 batch\(es\) of 2,000 rows finished"):
            pipeline.run_rate(spark, results, tmp_path, 2, 2000, 0.0, 1.0, lambda _: None,
                              deadline_s=0.0)
    finally:
        results.close()


def test_cli_refuses_bad_partitions(capsys: Any) -> None:
    from a3m.cli.main import main

    assert main(["bench", "pipeline", "--partitions", "two"]) != 0
    assert "--partitions" in capsys.readouterr().err
