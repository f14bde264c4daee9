"""Apache Spark access to the broker: the PySpark data source ``servicebroker``.

``broker.spark.register(spark)`` registers it on a SparkSession; then a queue reads as a
DataFrame (``spark.read.format("servicebroker")``) or a stream whose commits RECEIVE
(``spark.readStream``), and rows write as SENDs (``df.write`` / ``df.writeStream``). See
docs/spark.md. PySpark and PyArrow come with the extra ``servicebroker[spark]``; nothing
else in ``broker`` imports them.
"""

from __future__ import annotations

from typing import Any

SOURCE_NAME = "servicebroker"
INSTALL_HINT = "Spark support needs the extra: pip install 'servicebroker[spark]'"

__all__ = ["INSTALL_HINT", "SOURCE_NAME", "register"]


def register(spark: Any) -> None:
    """Register the ``servicebroker`` data source on the SparkSession ``spark``.

    Raises ImportError naming the extra to install when PySpark or PyArrow is missing.
    """
    try:
        from broker.spark.source import ServiceBrokerSource
    except ImportError as exc:
        raise ImportError(f"{INSTALL_HINT} ({exc})") from exc
    spark.dataSource.register(ServiceBrokerSource)
