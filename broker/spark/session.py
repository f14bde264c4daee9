"""A quiet local SparkSession with the data source registered (examples, CLI, tests).

Spark reads its environment once, when the JVM starts, so this sets it first: Python
workers run this interpreter (``PYSPARK_PYTHON``; otherwise they run whatever
``python3`` is on PATH), the driver binds to the loopback address, the JVM logs only
errors (``SPARK_CONF_DIR``), and the session's time zone is UTC. Variables already set
are left alone.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from pyspark.sql import SparkSession

from broker.spark import register

CONF_DIR = Path(__file__).resolve().parent / "conf"
# A small driver JVM that starts fast (C1 only, serial GC): local jobs are short.
JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Duser.timezone=UTC"


def local_session(app_name: str = "servicebroker", cores: int = 2) -> SparkSession:
    """Start (or return the running) local SparkSession with ``servicebroker`` registered."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("SPARK_CONF_DIR", str(CONF_DIR))
    spark = (
        SparkSession.builder.master(f"local[{cores}]").appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.memory", "512m")
        .config("spark.driver.extraJavaOptions", JVM_OPTIONS)
        .config("spark.sql.shuffle.partitions", str(cores))
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    register(spark)
    return spark
