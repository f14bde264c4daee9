"""Spark and Arrow types of what the data source reads.

A queue reads with the RECEIVE columns (spec 3): uniqueidentifiers as strings, the body
as binary, the enqueue time as a UTC timestamp, tinyint and int as INT, bigint as BIGINT.
Rows travel to Spark as Arrow record batches, whose schema must equal the Spark schema
in Arrow form (Spark's TIMESTAMP is ``timestamp[us, tz=UTC]`` there).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa

Columns = Sequence[tuple[str, str]]  # (name, Spark SQL type)

RECEIVE_COLUMNS: Columns = (
    ("status", "INT"),
    ("priority", "INT"),
    ("queuing_order", "BIGINT"),
    ("conversation_group_id", "STRING"),
    ("conversation_handle", "STRING"),
    ("message_sequence_number", "BIGINT"),
    ("service_name", "STRING"),
    ("service_id", "INT"),
    ("service_contract_name", "STRING"),
    ("service_contract_id", "INT"),
    ("message_type_name", "STRING"),
    ("message_type_id", "INT"),
    ("validation", "STRING"),
    ("message_body", "BINARY"),
    ("message_enqueue_time", "TIMESTAMP"),
)

_ARROW: dict[str, pa.DataType] = {
    "INT": pa.int32(),
    "BIGINT": pa.int64(),
    "BOOLEAN": pa.bool_(),
    "STRING": pa.string(),
    "BINARY": pa.binary(),
    "TIMESTAMP": pa.timestamp("us", tz="UTC"),
}


def ddl(columns: Columns) -> str:
    """The Spark schema as DDL text: ``status INT, priority INT, ...``."""
    return ", ".join(f"`{name}` {spark_type}" for name, spark_type in columns)


def arrow_schema(columns: Columns) -> pa.Schema:
    return pa.schema([(name, _ARROW[spark_type]) for name, spark_type in columns])


def record_batch(schema: pa.Schema, columns: Sequence[Sequence[Any]]) -> pa.RecordBatch:
    """One Arrow batch from column lists (in schema order)."""
    return pa.RecordBatch.from_arrays(
        [pa.array(values, type=field.type) for values, field in zip(columns, schema, strict=True)], schema=schema
    )
