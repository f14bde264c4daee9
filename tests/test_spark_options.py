"""The servicebroker data source's options and what it is pointed at: a bad option, a
row the staging table cannot hold, a database that is not there or holds no broker are
each refused with a number (docs/spark.md), never a raw driver error or a new file."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from pyspark.sql.types import BinaryType, StringType, StructField, StructType
from sqlalchemy import func, select
from sqlalchemy.engine import make_url

import broker
from broker.errors import BrokerError, InvalidArgumentError
from broker.spark import staging
from broker.spark.options import LONGEST_SINK_ID, SourceOptions
from broker.spark.source import ServiceBrokerSource
from broker.storage.models import SparkStagedMessage

pytestmark = pytest.mark.spark

URL = "sqlite:///never-opened.db"


@pytest.mark.parametrize(("options", "number"), [
    ({}, 59004),
    ({"url": ""}, 59004),
    ({"url": URL, "queue": "q", "view": "sys.services"}, 59002),
    ({"url": URL, "partitions": "0"}, 59002),
    ({"url": URL, "partitions": "257"}, 59002),  # a group's partition is its id's last byte % partitions
    ({"url": URL, "partitions": "9" * 30}, 59002),  # planned as that many partitions, it never ended
    ({"url": URL, "partitions": "\u0663"}, 59002),  # int() reads an Arabic-Indic 3
    ({"url": URL, "maxRowsPerBatch": " 5"}, 59002),
    ({"url": URL, "maxRowsPerBatch": "1_000"}, 59002),
    ({"url": URL, "batchId": "-1"}, 59002),
    ({"url": URL, "sinkId": "s" * (LONGEST_SINK_ID + 1)}, 103),  # PostgreSQL refused it mid-batch, raw
    ({"url": URL, "sinkId": "a\x00b"}, 102),
])
def test_a_bad_option_is_a_numbered_value_error(options: dict[str, str], number: int) -> None:
    with pytest.raises(InvalidArgumentError) as caught:
        SourceOptions.parse(options)
    assert caught.value.number == number
    assert isinstance(caught.value, ValueError)


def test_the_widest_options_are_taken() -> None:
    options = SourceOptions.parse({"url": URL, "Partitions": "256", "MAXROWSPERBATCH": "1",
                                   "sinkId": "s" * LONGEST_SINK_ID, "batchId": "0"})
    assert (options.partitions, options.max_rows_per_batch, options.batch_id) == (256, 1, 0)


def test_a_checkpoint_too_long_to_name_its_sink_asks_for_a_sink_id(tmp_path: Path) -> None:
    """The sink id of a checkpoint is its location plus a random part; past the sinks
    table's 1024 characters PostgreSQL refused it in the middle of the first batch."""
    location = tmp_path.joinpath(*["d" * 200] * 5)
    schema = StructType([StructField("conversation_handle", StringType()), StructField("message_body", BinaryType())])
    source = ServiceBrokerSource({"url": f"sqlite:///{tmp_path / 'b.db'}", "checkpointLocation": str(location)})
    with pytest.raises(InvalidArgumentError) as caught:
        source.streamWriter(schema, False)
    assert caught.value.number == 103
    assert "sinkId" in str(caught.value)


@pytest.mark.parametrize(("make", "number"), [
    (lambda source, schema: source.writer(schema, True), 59002),  # overwrite: SEND only appends
    (lambda source, schema: source.writer(StructType([StructField("body", BinaryType())]), False), 207),
    (lambda source, schema: source.writer(StructType([StructField("message_body", BinaryType())]), False), 59004),
    (lambda source, schema: source.streamWriter(schema, False), 59004),  # no checkpointLocation, no sinkId
    (lambda source, schema: source.reader(schema), 59004),  # neither queue nor view
])
def test_a_write_or_read_that_cannot_be_planned_is_numbered(make, number: int, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    schema = StructType([StructField("conversation_handle", StringType()), StructField("message_body", BinaryType())])
    source = ServiceBrokerSource({"url": f"sqlite:///{tmp_path / 'b.db'}"})
    with pytest.raises(InvalidArgumentError) as caught:
        make(source, schema)
    assert caught.value.number == number


@pytest.mark.parametrize(("row", "number"), [
    ({"from_service": "a" * 257, "to_service": "//b"}, 103),  # PostgreSQL: a raw DataError in the task
    ({"from_service": "//a", "to_service": "//b\x00"}, 102),
    ({"from_service": "//a", "to_service": "//b", "message_type": "t" * 129}, 103),
    ({"from_service": "//a", "to_service": "//b", "contract": 5}, 206),
    ({"conversation_handle": "not a handle"}, 8426),
])
def test_a_written_row_the_staging_table_cannot_hold_fails_its_task_numbered(
        db: broker.Broker, db_url: str, row: dict[str, object], number: int) -> None:
    with pytest.raises(BrokerError) as caught:
        staging.stage(db_url, "job:test", None, 0, [{"message_body": b"x"}, row])
    assert caught.value.number == number
    with db.engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(SparkStagedMessage)).scalar_one() == 0


def _read_all(options: dict[str, str]) -> list[object]:
    """Plan a batch read of ``options`` and run its first partition, as Spark would."""
    source = ServiceBrokerSource(options)
    reader = source.reader(StructType([]))  # the readers take their columns from the database
    return list(reader.read(reader.partitions()[0]))


@pytest.mark.parametrize("read", [{"view": "sys.services"}, {"queue": "Orders"}], ids=["view", "queue"])
def test_a_read_of_a_sqlite_file_that_is_not_there_is_911_and_creates_none(
        tmp_path: Path, read: dict[str, str]) -> None:
    """The read opened the path with a plain engine: SQLite made an empty file, then a
    raw NoSuchTableError or OperationalError came out of the task."""
    with pytest.raises(BrokerError) as caught:
        _read_all({"url": f"sqlite:///{tmp_path / 'typo.db'}", **read})
    assert caught.value.number == 911
    assert list(tmp_path.iterdir()) == []


@pytest.mark.empty_database
@pytest.mark.parametrize("read", [{"view": "sys.services"}, {"queue": "Orders"}], ids=["view", "queue"])
def test_a_read_of_a_database_without_the_broker_catalog_is_208(db_url: str, read: dict[str, str]) -> None:
    if db_url.startswith("sqlite"):
        sqlite3.connect(make_url(db_url).database or "").close()  # an empty SQLite file
    with pytest.raises(BrokerError) as caught:
        _read_all({"url": db_url, **read})
    assert caught.value.number == 208
    assert next(iter(read.values())) in str(caught.value)


@pytest.mark.parametrize("url", ["bogus://x", "sqlite:///x.db?mode=ro&uri=true", "sqlite:///x.db?isolation_level=NONE"])
def test_a_read_of_a_url_the_broker_cannot_use_is_59011(url: str) -> None:
    with pytest.raises(BrokerError) as caught:
        _read_all({"url": url, "view": "sys.services"})
    assert caught.value.number == 59011
