"""Catalog views (``sys.conversation_endpoints`` ...) as Spark tables.

A view's Spark types come from the database's own description of it, with the
broker's rules on top: uniqueidentifiers are strings, dates are UTC timestamps (as
``db.catalog`` reads them on every backend), integers and bits are BIGINT. SQLite does
not type a computed view column; those are BIGINT when named like an id or a flag
(``*_id``, ``is_*``) and STRING otherwise, the types PostgreSQL reports for them.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from sqlalchemy import Boolean, DateTime, Integer, LargeBinary, Uuid
from sqlalchemy.exc import NoSuchTableError
from sqlalchemy.types import NullType

import broker
from broker.errors import BrokerError
from broker.inspection import CATALOG_VIEWS, VIEW_COLUMN_TYPES
from broker.spark.columns import Columns, arrow_schema, record_batch
from broker.spark.dialects import dialect_for
from broker.spark.reading import reading
from broker.storage.types import GUID, UTCDateTime


def view_name(name: str) -> str:
    """``sys.conversation_endpoints`` or ``conversation_endpoints`` → the view's short name."""
    short = name.lower().removeprefix("sys.")
    if short not in CATALOG_VIEWS:
        raise BrokerError(208, f"Invalid object name '{name}'.")
    return short


def view_columns(url: str, name: str) -> Columns:
    """(column, Spark type) of a catalog view, in the view's order."""
    view = view_name(name)
    with reading(url) as conn:
        try:
            reflected = dialect_for(conn).view_columns(conn, view)
        except NoSuchTableError:  # a database without the broker's catalog
            raise BrokerError(208, f"Invalid object name '{name}'.") from None
    return [(column["name"], _spark_type(column["name"], column["type"])) for column in reflected]


def _spark_type(name: str, reflected: Any) -> str:
    known = VIEW_COLUMN_TYPES.get(name)
    if isinstance(known, GUID) or isinstance(reflected, Uuid):
        return "STRING"
    if isinstance(known, UTCDateTime) or isinstance(reflected, DateTime):
        return "TIMESTAMP"
    if isinstance(reflected, (Integer, Boolean)):
        return "BIGINT"
    if isinstance(reflected, LargeBinary):
        return "BINARY"
    if isinstance(reflected, NullType) and (name.endswith("_id") or name.startswith("is_")):
        return "BIGINT"
    return "STRING"


def read_view(url: str, name: str, columns: Columns) -> pa.RecordBatch:
    """All rows of the view, read through ``db.catalog`` (one short transaction)."""
    db = broker.connect(url, upgrade=False)
    try:
        rows = db.catalog(f"sys.{view_name(name)}")
    finally:
        db.dispose()
    return record_batch(arrow_schema(columns), [
        [_value(row[column], spark_type) for row in rows] for column, spark_type in columns
    ])


def _value(value: Any, spark_type: str) -> Any:
    if value is None:
        return None
    if spark_type == "STRING":
        return str(value)
    if spark_type == "BIGINT":
        return int(value)
    return value
