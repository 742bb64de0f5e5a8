"""Suite-wide set-up: nodes keep their keys in a directory of the test run, not the user's."""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any

_STATE: list[str] = []


def pytest_configure(config: Any) -> None:
    # Nodes named by the application keep their long-term key in the user's key directory
    # (a3m.runtime.identity); the suite's nodes (and the processes it starts) use a fresh one.
    _STATE.append(tempfile.mkdtemp(prefix="a3m-test-state-"))
    os.environ["A3M_STATE_DIR"] = _STATE[-1]


def pytest_unconfigure(config: Any) -> None:
    for path in _STATE:
        shutil.rmtree(path, ignore_errors=True)


def pytest_collection_modifyitems(config: Any, items: list[Any]) -> None:
    # With `pytest -n 2 --dist loadgroup` (make test), every Spark test runs in one worker
    # (one JVM at a time on a 2-core machine, one session-wide SparkSession for them all), and
    # the tests that make network namespaces and run benchmarks in them run one at a time.
    import pytest

    for item in items:
        path = str(item.fspath).replace(os.sep, "/")
        if "/tests/spark/" in path:
            item.add_marker(pytest.mark.xdist_group("spark"))
        elif any(f"/tests/testing/{name}.py" in path for name in _NETNS_TESTS):
            item.add_marker(pytest.mark.xdist_group("netns"))


_NETNS_TESTS = ("test_bench_bulk", "test_bench_emulated", "test_netem")
