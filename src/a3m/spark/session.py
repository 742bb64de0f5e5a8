"""One way to get a SparkSession for the package's jobs (audit, streaming, demo).

Master selection: under ``spark-submit`` (``PYSPARK_GATEWAY_PORT`` in the environment) the
session spark-submit configured is used as is; otherwise ``master`` if given, else the
environment variable ``A3M_SPARK_MASTER``, else ``local[*]``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

MASTER_ENV = "A3M_SPARK_MASTER"
DEFAULT_MASTER = "local[*]"


def launched_by_spark_submit() -> bool:
    """True when this Python process was started by spark-submit (or pyspark's shell)."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def choose_master(master: str | None = None) -> str | None:
    """The master URL to ask for, or None to keep the one spark-submit gave."""
    if launched_by_spark_submit():
        return None
    return master or os.environ.get(MASTER_ENV) or DEFAULT_MASTER


def get_or_create(
    master: str | None = None,
    app_name: str = "a3m",
    conf: Mapping[str, str] | None = None,
    log_level: str = "ERROR",
) -> SparkSession:
    """A session by the rules above, with quiet logs and workers on this interpreter.

    An already active session in this process is returned as is (tests share one).
    """
    # Workers must run this interpreter (it has a3m installed); loopback silences a warning.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    from a3m.spark import register

    active = SparkSession.getActiveSession()
    if active is not None:
        register(active)
        return active
    builder = SparkSession.builder.appName(app_name)
    chosen = choose_master(master)
    if chosen is not None:
        builder = builder.master(chosen)
        builder = builder.config("spark.ui.showConsoleProgress", "false")
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(log_level)
    register(spark)
    return spark
