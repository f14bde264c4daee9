"""The endpoint's views, read from an instance catalog: ``sys.service_broker_endpoints``,
``sys.tcp_endpoints``, ``sys.dm_broker_connections`` (migration 0007 defines them) and
``sys.dm_broker_forwarded_messages`` (0008).

``inst.catalog(view, **where)`` reads them here, with their uniqueidentifier and time
columns as ``uuid.UUID`` and aware ``datetime`` on every backend. They hold a row per
endpoint and per connection, so the filter runs on the rows read.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping
from typing import Any

from sqlalchemy import text

from broker import arguments
from broker.errors import BrokerError
from broker.storage.context import TxContext
from broker.storage.types import GUID, UTCDateTime

INSTANCE_VIEWS = ("service_broker_endpoints", "tcp_endpoints", "dm_broker_connections",
                  "dm_broker_forwarded_messages")
_VIEW_NAME = re.compile(r"^(?:sys\.)?([a-z_]+)\Z")
_GUID_COLUMNS = ("connection_id", "transport_stream_id", "peer_arbitration_id", "conversation_id")
_TIME_COLUMNS = ("connect_time", "login_time", "last_activity_time")
_KINDS = {**dict.fromkeys(_GUID_COLUMNS, "guid"), **dict.fromkeys(_TIME_COLUMNS, "time")}
_TYPES: dict[str, Any] = {**{c: GUID() for c in _GUID_COLUMNS}, **{c: UTCDateTime() for c in _TIME_COLUMNS}}


def instance_view(name: str) -> str | None:
    """The endpoint view ``name`` means (``"sys.tcp_endpoints"``, any case), or None."""
    match = _VIEW_NAME.match(name.lower())
    return match.group(1) if match is not None and match.group(1) in INSTANCE_VIEWS else None


def view_rows(ctx: TxContext, view: str, where: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The rows of ``view`` whose columns equal ``where``'s values (207 for a column the
    view lacks), read in the caller's transaction."""
    for column, value in where.items():
        arguments.column_value(value, column, _KINDS.get(column))
    wanted = {column: _comparable(value, column) for column, value in where.items()}
    quoted = ctx.state.backend.catalog_view(view)
    result = ctx.conn.execute(text(f"SELECT * FROM {quoted}").columns(**_TYPES))
    columns = set(result.keys())
    unknown = [column for column in wanted if column not in columns]
    if unknown:
        raise BrokerError(207, f"Invalid column name '{unknown[0]}'.")
    rows = [dict(row._mapping) for row in result]
    return [row for row in rows if all(row[column] == value for column, value in wanted.items())]


def _comparable(value: Any, column: str) -> Any:
    """A filter value as the column reads back: a uniqueidentifier's text as a UUID."""
    return uuid.UUID(value) if _KINDS.get(column) == "guid" and isinstance(value, str) else value
