"""One SparkSession for the whole test run (starting one costs ~8 s): local[2], small shuffles."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    pytest.importorskip("pyspark")
    from a3m.spark.session import get_or_create

    session = get_or_create(
        "local[2]",
        app_name="a3m-tests",
        conf={
            "spark.sql.shuffle.partitions": "2",
            "spark.ui.enabled": "false",
            "spark.default.parallelism": "2",
        },
    )
    yield session
    session.stop()
