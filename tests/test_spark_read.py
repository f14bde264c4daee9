"""Spark reads a queue (batch and stream) and the catalog views."""

from __future__ import annotations

import uuid
from datetime import UTC
from pathlib import Path

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession
from pyspark.sql.functions import spark_partition_id
from spark_support import SOURCE, make_services, read_queue, send_dialogs, spark_fixture  # noqa: F401
from support import sqlite_only

import broker
from broker.spark.dialects import bucket_of
from broker.spark.options import SourceOptions
from broker.spark.readers import OFFSET_KEY, QueueStreamReader

pytestmark = pytest.mark.spark


@sqlite_only
def test_batch_read_shows_the_queue_with_receive_columns_and_spark_types(
        spark: SparkSession, db: broker.Broker, db_url: str) -> None:
    make_services(db, "Orders")
    send_dialogs(db, "Orders", dialogs=2, per_dialog=2)
    df = read_queue(spark, db_url, "Orders")
    assert [(f.name, f.dataType.simpleString()) for f in df.schema.fields] == [
        ("status", "int"), ("priority", "int"), ("queuing_order", "bigint"), ("conversation_group_id", "string"),
        ("conversation_handle", "string"), ("message_sequence_number", "bigint"), ("service_name", "string"),
        ("service_id", "int"), ("service_contract_name", "string"), ("service_contract_id", "int"),
        ("message_type_name", "string"), ("message_type_id", "int"), ("validation", "string"),
        ("message_body", "binary"), ("message_enqueue_time", "timestamp"),
    ]
    got = sorted(df.collect(), key=lambda row: row.queuing_order)
    expected = db.queue_rows("Orders")
    assert len(got) == len(expected) == 4
    for row, message in zip(got, expected, strict=True):
        assert row.conversation_handle == str(message.conversation_handle)
        assert row.conversation_group_id == str(message.conversation_group_id)
        assert (row.status, row.service_name, row.message_type_name) == (1, "//Orders", "DEFAULT")
        assert bytes(row.message_body) == message.message_body
        assert row.message_enqueue_time.astimezone(UTC) == message.message_enqueue_time  # collect() gives local time
    assert db.queue_counts("Orders") == {1: 4}  # a batch read receives nothing


@sqlite_only
def test_a_conversation_group_stays_in_one_partition_in_order(
        spark: SparkSession, db: broker.Broker, db_url: str) -> None:
    make_services(db, "Orders")
    send_dialogs(db, "Orders", dialogs=12, per_dialog=4)
    df = read_queue(spark, db_url, "Orders", partitions=3)
    assert df.rdd.getNumPartitions() == 3
    by_partition = df.select("conversation_group_id", "message_sequence_number").rdd.glom().collect()
    assert sum(len(rows) for rows in by_partition) == 48
    seen: dict[str, int] = {}
    for number, rows in enumerate(by_partition):
        sequences: dict[str, list[int]] = {}
        for group, sequence in rows:
            assert seen.setdefault(group, number) == number  # never in two partitions
            assert bucket_of(uuid.UUID(group), 3) == number
            sequences.setdefault(group, []).append(sequence)
        assert all(s == sorted(s) for s in sequences.values())
    partition_ids = df.select(spark_partition_id().alias("p")).distinct().count()
    assert partition_ids == len({bucket_of(uuid.UUID(g), 3) for g in seen})


@sqlite_only
def test_catalog_views_read_with_their_columns(spark: SparkSession, db: broker.Broker, db_url: str) -> None:
    make_services(db, "Orders")
    send_dialogs(db, "Orders", dialogs=3, per_dialog=1)
    endpoints = spark.read.format(SOURCE).option("url", db_url).option("view", "sys.conversation_endpoints").load()
    types = {f.name: f.dataType.simpleString() for f in endpoints.schema.fields}
    assert [types[c] for c in ("conversation_handle", "lifetime", "send_sequence")] == ["string", "timestamp", "bigint"]
    rows = endpoints.collect()
    assert sorted(r.conversation_handle for r in rows) == sorted(
        str(r["conversation_handle"]) for r in db.catalog("sys.conversation_endpoints"))
    queues = spark.read.format(SOURCE).option("url", db_url).option("view", "service_queues").load()
    assert {r.name for r in queues.collect()} == {"SenderQueue", "Orders"}


def _run_stream(spark: SparkSession, url: str, queue: str, checkpoint: Path,
                batches: dict[int, list[int]], crash_at: int | None = None) -> None:
    """One availableNow run, 10 rows a batch, into ``batches`` (batch id -> queuing
    orders; a replay replaces). ``crash_at``: that batch fails after its rows are seen."""
    def keep(frame, batch_id):  # type: ignore[no-untyped-def]
        batches[batch_id] = sorted(row.queuing_order for row in frame.select("queuing_order").collect())
        if batch_id == crash_at:
            raise RuntimeError("crash")

    query = (spark.readStream.format(SOURCE).option("url", url).option("queue", queue)
             .option("maxRowsPerBatch", 10).option("partitions", 2).load()
             .writeStream.foreachBatch(keep).option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    if crash_at is None:
        query.awaitTermination()
    else:
        with pytest.raises(StreamingQueryException):
            query.awaitTermination()


def test_stream_read_receives_on_commit_and_restarts_without_loss_or_duplicate(
        spark: SparkSession, db: broker.Broker, db_url: str, tmp_path: Path) -> None:
    make_services(db, "Orders")
    send_dialogs(db, "Orders", dialogs=10, per_dialog=3)
    orders = [m.queuing_order for m in db.queue_rows("Orders")]
    checkpoint = tmp_path / "checkpoint"
    batches: dict[int, list[int]] = {}

    _run_stream(spark, db_url, "Orders", checkpoint, batches, crash_at=2)
    assert sorted(batches) == [0, 1, 2]
    # Batches 0 and 1 committed, so their messages are RECEIVEd; batch 2 failed: its
    # messages stay on the queue.
    assert sorted(m.queuing_order for m in db.queue_rows("Orders")) == batches[2]
    crashed = list(batches[2])

    send_dialogs(db, "Orders", dialogs=5, per_dialog=1, prefix="late")
    orders = [m.queuing_order for m in db.queue_rows("Orders")] + orders
    _run_stream(spark, db_url, "Orders", checkpoint, batches)  # restart from the checkpoint
    assert batches[2] == crashed  # batch 2 runs again with the same messages
    assert sorted(batches) == [0, 1, 2, 3]

    delivered = [order for batch in batches.values() for order in batch]
    assert sorted(delivered) == sorted(set(orders))  # each message once, none lost
    assert db.queue_rows("Orders") == []


def _reader(url: str, queue: str, **options: str) -> QueueStreamReader:
    return QueueStreamReader(SourceOptions.parse({"url": url, "queue": queue, **options}), queue)


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
def test_latest_offset_stops_below_an_uncommitted_send(db: broker.Broker, db_url: str) -> None:
    """PostgreSQL commits sequence values out of order: an offset never passes a
    queuing order that a running transaction may still commit."""
    make_services(db, "Orders")
    send_dialogs(db, "Orders", dialogs=1, per_dialog=1)
    reader = _reader(db_url, "Orders")
    start = reader.initialOffset()
    first = reader.latestOffset(start, reader.getDefaultReadLimit())[OFFSET_KEY]
    with db.transaction() as slow:
        handle = slow.begin_dialog("//Sender", "//Orders")
        slow.send(handle, "DEFAULT", b"slow")
        slow.query("SELECT 1")  # the SEND's row is written (not yet committed)
        send_dialogs(db, "Orders", dialogs=1, per_dialog=1, prefix="fast")  # a higher order, committed
        assert reader.latestOffset(start, reader.getDefaultReadLimit())[OFFSET_KEY] == first
    orders = sorted(m.queuing_order for m in db.queue_rows("Orders"))
    final = reader.latestOffset(start, reader.getDefaultReadLimit())[OFFSET_KEY]
    assert final == orders[-1]
    assert reader.latestOffset({OFFSET_KEY: final}, reader.getDefaultReadLimit()) == {OFFSET_KEY: final}


def test_commit_receives_up_to_the_offset_once_and_keeps_retained_rows(db: broker.Broker, db_url: str) -> None:
    make_services(db, "Orders")
    db.alter_queue("Orders", retention=True)
    send_dialogs(db, "Orders", dialogs=3, per_dialog=2)
    orders = [m.queuing_order for m in db.queue_rows("Orders") if m.status == 1]
    reader = _reader(db_url, "Orders", maxRowsPerBatch="4")
    end = reader.latestOffset(reader.initialOffset(), reader.getDefaultReadLimit())
    assert end == {OFFSET_KEY: orders[3]}  # the fourth ready message
    reader.commit(end)
    reader.commit(end)  # Spark may commit again after a restart: nothing changes
    status = {m.queuing_order: m.status for m in db.queue_rows("Orders") if m.queuing_order in orders}
    assert status == {order: 0 if order <= orders[3] else 1 for order in orders}
    with db.transaction() as tx:
        assert [m.queuing_order for m in tx.receive("Orders")] == orders[4:]


def test_a_batch_read_returns_committed_rows_while_a_writer_holds_its_transaction(
        spark: SparkSession, db: broker.Broker, db_url: str) -> None:
    """Spark's batch reads (the queue and the catalog views) take no lock: a write
    transaction left open does not hold them up, and its rows are not seen."""
    make_services(db, "Orders")
    send_dialogs(db, "Orders", dialogs=2, per_dialog=2)
    [handle, *_] = [e["conversation_handle"] for e in db.catalog("sys.conversation_endpoints") if e["is_initiator"]]
    with db.transaction() as holding:
        holding.send(handle, "DEFAULT", b"not committed")
        rows = read_queue(spark, db_url, "Orders").collect()
        services = spark.read.format(SOURCE).option("url", db_url).option("view", "sys.services").load().collect()
    assert len(rows) == 4 and b"not committed" not in [bytes(r.message_body) for r in rows]
    assert "//Orders" in {s.name for s in services}
    assert db.queue_counts("Orders") == {1: 5}
