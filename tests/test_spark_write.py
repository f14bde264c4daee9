"""Spark writes rows as SENDs: a batch job atomically, a stream exactly once per batch."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from pyspark.sql import SparkSession
from spark_support import SOURCE, bodies, drop_last_commit, make_services, send_dialogs, spark_fixture  # noqa: F401
from sqlalchemy import func, select
from support import sqlite_only

import broker
from broker.spark.sinks import MARKER, checkpoint_sink_id
from broker.storage.models import SparkSink, SparkStagedMessage
from cli.main import cli

pytestmark = pytest.mark.spark


def _staged(db: broker.Broker) -> int:
    with db.engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(SparkStagedMessage)).scalar_one())


@sqlite_only
def test_batch_write_begins_dialogs_and_sends_on_handles_in_one_commit(
        spark: SparkSession, db: broker.Broker, db_url: str) -> None:
    make_services(db, "Orders")
    send_dialogs(db, "Orders", dialogs=1, per_dialog=1)
    with db.transaction() as tx:
        [order] = tx.receive("Orders")
    rows = [
        (None, "//Sender", "//Orders", None, b"new dialog"),
        (None, "//Sender", "//Orders", "k", b"k1"),
        (None, "//Sender", "//Orders", "k", b"k2"),
        (str(order.conversation_handle), None, None, None, b"reply"),
    ]
    df = spark.createDataFrame(rows, "conversation_handle STRING, from_service STRING, to_service STRING, "
                                     "dialog_key STRING, message_body BINARY").coalesce(1)
    df.write.format(SOURCE).option("url", db_url).mode("append").save()

    received = db.queue_rows("Orders")
    assert sorted(bodies(received)) == [b"k1", b"k2", b"new dialog"]
    k_dialog = {m.conversation_handle for m in received if m.message_body in (b"k1", b"k2")}
    assert len(k_dialog) == 1  # one dialog per dialog_key, in row order
    assert [m.message_body for m in received if m.conversation_handle in k_dialog] == [b"k1", b"k2"]
    assert bodies(db.queue_rows("SenderQueue")) == [b"reply"]
    assert _staged(db) == 0


@sqlite_only
def test_a_bad_row_fails_the_job_with_its_error_and_sends_nothing(
        spark: SparkSession, db: broker.Broker, db_url: str) -> None:
    make_services(db, "Orders")
    rows = [("//Sender", "//Orders", "DEFAULT", f"m{i}") for i in range(5)]
    rows.append(("//Sender", "//Orders", "//no/such/type", "bad"))
    df = spark.createDataFrame(rows, "from_service STRING, to_service STRING, message_type STRING, message_body STRING")
    with pytest.raises(Exception, match="Msg 8428"):
        df.write.format(SOURCE).option("url", db_url).mode("append").save()
    assert db.queue_rows("Orders") == []
    assert db.catalog("sys.conversation_endpoints") == []
    assert _staged(db) == 0
    with pytest.raises(Exception, match="cannot write column"):
        df.withColumnRenamed("message_body", "body").write.format(SOURCE).option("url", db_url).mode("append").save()


def test_stream_write_sends_a_replayed_batch_once(
        spark: SparkSession, db: broker.Broker, db_url: str, tmp_path: Path) -> None:
    """Orders in, replies out: a stream from one queue to SENDs on the same dialogs."""
    make_services(db, "Orders")
    send_dialogs(db, "Orders", dialogs=8, per_dialog=2)
    checkpoint = tmp_path / "checkpoint"

    def run() -> None:
        query = (spark.readStream.format(SOURCE).option("url", db_url).option("queue", "Orders")
                 .option("maxRowsPerBatch", 6).load()
                 .selectExpr("conversation_handle", "concat(cast(message_body AS STRING), '-reply') AS message_body")
                 .writeStream.format(SOURCE).option("url", db_url).option("checkpointLocation", str(checkpoint))
                 .trigger(availableNow=True).start())
        query.awaitTermination()

    run()
    replies = sorted(bodies(db.queue_rows("SenderQueue")))
    assert len(replies) == 16
    assert db.queue_rows("Orders") == []
    drop_last_commit(checkpoint)  # Spark runs the last batch again and commits it again
    run()
    assert sorted(bodies(db.queue_rows("SenderQueue"))) == replies
    assert _staged(db) == 0


@sqlite_only
def test_a_stream_on_a_new_checkpoint_at_an_old_path_sends_everything(
        spark: SparkSession, db: broker.Broker, db_url: str, tmp_path: Path) -> None:
    """Deleting a checkpoint restarts batch ids at 0: that is a new sink, not a replay."""
    make_services(db, "Orders")
    checkpoint = tmp_path / "checkpoint"

    def run() -> None:
        query = (spark.readStream.format(SOURCE).option("url", db_url).option("queue", "Orders").load()
                 .selectExpr("conversation_handle", "concat(cast(message_body AS STRING), '-reply') AS message_body")
                 .writeStream.format(SOURCE).option("url", db_url).option("checkpointLocation", str(checkpoint))
                 .trigger(availableNow=True).start())
        query.awaitTermination()

    send_dialogs(db, "Orders", dialogs=3, per_dialog=1)
    run()
    assert len(db.queue_rows("SenderQueue")) == 3
    shutil.rmtree(checkpoint)
    send_dialogs(db, "Orders", dialogs=2, per_dialog=1)
    run()
    assert len(db.queue_rows("SenderQueue")) == 5
    assert len(_sinks(db)) == 2  # one per checkpoint


def _sinks(db: broker.Broker) -> list[str]:
    with db.engine.connect() as conn:
        return list(conn.execute(select(SparkSink.sink_id)).scalars())


@sqlite_only
def test_a_foreach_batch_write_with_sink_and_batch_id_is_sent_once(
        spark: SparkSession, db: broker.Broker, db_url: str) -> None:
    make_services(db, "Orders")
    df = spark.createDataFrame([("//Sender", "//Orders", f"m{i}") for i in range(3)],
                               "from_service STRING, to_service STRING, message_body STRING")
    for batch_id in (0, 0, 1):  # batch 0 replayed
        (df.write.format(SOURCE).option("url", db_url).option("sinkId", "s").option("batchId", batch_id)
         .mode("append").save())
    assert len(db.queue_rows("Orders")) == 6
    assert _staged(db) == 0


@sqlite_only
def test_broker_spark_demo_runs_the_example_pipeline(spark: SparkSession, db: broker.Broker, db_url: str) -> None:
    result = CliRunner().invoke(cli, ["--db", db_url, "spark-demo", "--orders", "40"])
    assert result.exit_code == 0, result.output
    assert "orders left on OrdersQueue: 0" in result.output
    assert "receipts on StoreQueue: 40" in result.output
    reported = sum(int(line.split(": ")[1].split(" ")[0]) for line in result.output.splitlines()
                   if line.startswith("c"))
    assert reported == 40  # every order counted once in the totals


def test_register_without_the_extra_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    import broker.spark

    monkeypatch.setitem(sys.modules, "broker.spark.source", None)  # as if pyspark were missing
    with pytest.raises(ImportError, match=r"servicebroker\[spark\]"):
        broker.spark.register(object())


def test_a_checkpoint_keeps_its_sink_id_and_a_new_one_gets_another(tmp_path: Path) -> None:
    checkpoint = tmp_path / "checkpoint"
    first = checkpoint_sink_id(str(checkpoint))
    assert first.startswith(f"{checkpoint}#") and first == checkpoint_sink_id(str(checkpoint))
    assert checkpoint_sink_id(checkpoint.as_uri()) == first  # a file: URI names the same checkpoint
    shutil.rmtree(checkpoint)
    assert checkpoint_sink_id(str(checkpoint)) not in (first, str(checkpoint))


def test_a_checkpoint_from_before_sink_ids_keeps_its_path_as_id(tmp_path: Path) -> None:
    older = tmp_path / "older"
    (older / "commits").mkdir(parents=True)
    (older / "commits" / "7").write_text("v1\n")
    assert checkpoint_sink_id(str(older)) == str(older)
    assert (older / MARKER).read_text() == str(older)
    assert checkpoint_sink_id("s3a://bucket/checkpoints/q1") == "s3a://bucket/checkpoints/q1"
