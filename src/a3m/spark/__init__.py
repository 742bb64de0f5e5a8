"""A3M on Apache Spark: delivery-journal audit, Structured Streaming source and sink.

``register(spark)`` makes ``spark.readStream.format("a3m")`` and
``df.writeStream.format("a3m")`` available (see :mod:`a3m.spark.source` and
:mod:`a3m.spark.sink`); ``a3m.spark.session.get_or_create`` registers them itself.
"""

from __future__ import annotations

from typing import Any


def register(spark: Any) -> None:
    """Register the ``a3m`` streaming source and sink on a SparkSession."""
    from a3m.spark.source import A3MDataSource

    spark.dataSource.register(A3MDataSource)


__all__ = ["register"]
