"""The Spark tests' session and helpers (tests/test_spark_*.py).

One local SparkSession serves every Spark test of the run (starting one takes seconds):
local[2], UI off, logs at ERROR (``broker.spark.session``). Spark needs Java: without
``java`` on PATH the Spark tests skip and say so; PySpark itself is required
(``pip install -e '.[test,spark]'``).
"""

from __future__ import annotations

import atexit
import functools
import shutil
from collections.abc import Iterable
from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession

import broker
from broker.spark.session import local_session

SOURCE = "servicebroker"


@functools.cache
def _session() -> SparkSession:
    spark = local_session("servicebroker-tests")
    atexit.register(spark.stop)
    return spark


@pytest.fixture(scope="session", name="spark")
def spark_fixture() -> SparkSession:
    """The shared SparkSession (import ``spark_fixture`` to use the fixture ``spark``)."""
    if shutil.which("java") is None:
        pytest.skip("Spark needs a Java runtime and there is no `java` on PATH")
    return _session()


def make_services(db: broker.Broker, *queues: str) -> None:
    """A queue and a service //<queue> (DEFAULT contract) for each name, plus //Sender."""
    db.create_queue("SenderQueue")
    db.create_service("//Sender", "SenderQueue")
    for queue in queues:
        db.create_queue(queue)
        db.create_service(f"//{queue}", queue, ["DEFAULT"])


def send_dialogs(db: broker.Broker, to_queue: str, dialogs: int, per_dialog: int, prefix: str = "m") -> None:
    """``dialogs`` dialogs from //Sender to //<to_queue>, ``per_dialog`` messages each."""
    with db.transaction() as tx:
        for d in range(dialogs):
            handle = tx.begin_dialog("//Sender", f"//{to_queue}")
            for m in range(per_dialog):
                tx.send(handle, "DEFAULT", f"{prefix}{d}-{m}".encode())


def read_queue(spark: SparkSession, url: str, queue: str, **options: object) -> DataFrame:
    reader = spark.read.format(SOURCE).option("url", url).option("queue", queue)
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader.load()


def drop_last_commit(checkpoint: Path) -> int:
    """Delete the newest file of the checkpoint's commit log, as a crash before it would.

    Returns the batch id whose commit it removed: Spark runs that batch again.
    """
    commits = sorted((p for p in (checkpoint / "commits").iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
    commits[-1].unlink()
    (checkpoint / "commits" / f".{commits[-1].name}.crc").unlink(missing_ok=True)
    return int(commits[-1].name)


def bodies(rows: Iterable[object]) -> list[bytes]:
    return [bytes(row.message_body) for row in rows]  # type: ignore[attr-defined]
