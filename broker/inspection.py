"""What ``Broker`` reads without changing anything: queue rows, catalog views and the
counts ``broker status`` summarises. Every read runs on a snapshot (``Broker.snapshot``):
it takes no lock and never waits for a writer."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy import Table, bindparam, func, select, text

from broker import arguments
from broker.conversations import outbound
from broker.conversations.messages import Message
from broker.conversations.receiving import message_from_row
from broker.errors import BrokerError
from broker.storage.context import TxContext
from broker.storage.models import ConversationEndpoint, TransmissionQueueEntry
from broker.storage.queue_tables import queue_table
from broker.storage.types import GUID, UTCDateTime

if TYPE_CHECKING:
    from broker.storage.state import DatabaseState
    from broker.transaction import Transaction

T = TypeVar("T")

CATALOG_VIEWS = (
    "databases", "xml_schema_collections", "service_message_types", "service_contracts",
    "service_contract_message_usages", "service_queues", "services", "service_contract_usages",
    "routes", "remote_service_bindings", "conversation_groups", "conversation_endpoints", "transmission_queue",
    "conversation_priorities", "dm_broker_queue_monitors", "dm_broker_activated_tasks", "internal_tables",
    "procedures", "symmetric_keys", "database_principals", "server_principals", "certificates",
    "database_permissions", "server_permissions",
)
_VIEW_NAME = re.compile(r"^(?:sys\.)?([a-z_]+)\Z")
_COLUMN_NAME = re.compile(r"^[a-z_]+\Z")
# Catalog view columns read back as Python types on every backend (SQLite has neither
# uuid nor timestamp types, so a view would otherwise hand back text).
_GUID_COLUMNS = ("service_broker_guid", "conversation_handle", "conversation_id", "conversation_group_id",
                 "outbound_session_key_identifier", "inbound_session_key_identifier", "key_guid",
                 "cryptographic_provider_guid")
_TIME_COLUMNS = ("create_date", "modify_date", "lifetime", "dialog_timer", "security_timestamp", "enqueue_time",
                 "last_empty_rowset_time", "last_activated_time", "start_date", "expiry_date",
                 "pvt_key_last_backup_date")
_BINARY_COLUMNS = ("message_body", "sid", "thumbprint", "key_thumbprint")
_COLUMN_KINDS = {**{column: "guid" for column in _GUID_COLUMNS}, **{column: "time" for column in _TIME_COLUMNS},
                 **{column: "binary" for column in _BINARY_COLUMNS}}
# The kinds SQL Server documents for the view columns a backend computes without declaring
# a type: SQLite declares none for an expression, PostgreSQL types a bare NULL as text.
# Column names keep one kind across the views, as in SQL Server's catalog.
_COMPUTED_COLUMN_KINDS = {
    **dict.fromkeys((
        "object_id", "schema_id", "principal_id", "parent_object_id", "execute_as_principal_id",
        "service_contract_id", "far_principal_id", "last_send_tran_id", "receive_sequence_frag",
        "first_out_of_order_sequence", "last_out_of_order_frag", "database_id", "execute_as", "internal_type",
        "parent_minor_id", "lob_data_space_id", "filestream_data_space_id", "key_length", "owning_principal_id",
        "authentication_type", "default_language_lcid", "allow_encrypted_value_modifications", "credential_id",
        "minor_id", "grantor_principal_id"), "number"),
    **dict.fromkeys((
        "name", "type", "type_desc", "validation_desc", "state", "state_desc", "internal_type_desc",
        "key_algorithm", "algorithm_desc", "provider_type", "default_schema_name", "authentication_type_desc",
        "default_language_name", "default_database_name", "pvt_key_encryption_type_desc", "string_sid",
        "attested_by", "class_desc"), "text"),
}
VIEW_COLUMN_TYPES: dict[str, Any] = {
    **{column: GUID() for column in _GUID_COLUMNS},
    **{column: UTCDateTime() for column in _TIME_COLUMNS},
}


class Inspection:
    """The reading half of ``Broker`` (a mixin: ``Broker`` gives ``_state`` and ``snapshot``)."""

    _state: DatabaseState

    if TYPE_CHECKING:
        def snapshot(self) -> AbstractContextManager[Transaction]: ...

    def queue_rows(self, queue: str) -> list[Message]:
        """SELECT * FROM queue: every row with its stored status, in queuing order."""
        queue = arguments.queue_name(queue)

        def read(ctx: TxContext) -> list[Message]:
            table = _queue_table(ctx, queue)
            rows = ctx.conn.execute(select(table).order_by(table.c.queuing_order)).all()
            return [message_from_row(ctx, row, row.status) for row in rows]
        return self._read(read)

    def iter_queue_rows(self, queue: str, page_size: int = 1000) -> Iterator[Message]:
        """SELECT * FROM queue in pages, for queues of any size in constant memory.

        Yields the rows of ``queue_rows`` (stored status, queuing order) without
        receiving them. Each page of ``page_size`` rows is read in its own short
        transaction, by ``queuing_order`` after the last row seen, so writers are not
        held up between pages; rows that arrive meanwhile are seen when a page reaches
        them, rows received meanwhile are not.
        """
        queue = arguments.queue_name(queue)
        page_size = arguments.integer(page_size, "page_size", minimum=1)

        def page_after(last: int) -> Callable[[TxContext], list[Message]]:
            def read(ctx: TxContext) -> list[Message]:
                table = _queue_table(ctx, queue)
                rows = ctx.conn.execute(
                    select(table).where(table.c.queuing_order > last)
                    .order_by(table.c.queuing_order).limit(page_size)
                ).all()
                return [message_from_row(ctx, row, row.status) for row in rows]
            return read

        last = 0
        while True:
            page = self._read(page_after(last))
            yield from page
            if len(page) < page_size:
                return
            last = page[-1].queuing_order

    def catalog(self, name: str, /, **where: Any) -> list[dict[str, Any]]:
        """Rows of a catalog view (``"sys.conversation_endpoints"`` ...) as dicts.

        ``where`` keeps the rows whose columns equal the values given:
        ``db.catalog("sys.conversation_endpoints", conversation_handle=h)``.
        """
        match = _VIEW_NAME.match(arguments.text(name, "catalog view name").lower())
        if match is None or match.group(1) not in CATALOG_VIEWS:
            raise BrokerError(208, f"Invalid object name '{name}'.")
        view = match.group(1)
        quoted = self._view_name(view)
        conditions, binds = [], []
        postgres = self._state.engine.dialect.name == "postgresql"
        columns = _VIEW_COLUMNS.get((self._state.engine.dialect.name, view)) if where else {}
        if columns is None:
            columns = self._read(lambda ctx: _view_columns(ctx, view, quoted))
        for number, (column, value) in enumerate(where.items()):
            if _COLUMN_NAME.match(column) is None or column not in columns:
                raise BrokerError(207, f"Invalid column name '{column}'.")
            declared = columns[column]
            kind = _COLUMN_KINDS.get(column) or _COMPUTED_COLUMN_KINDS.get(column, declared)
            arguments.column_value(value, column, kind)  # guids, times and binaries
            if isinstance(value, bool):  # the views' bit columns are integers (PostgreSQL compares no bool to them)
                value = int(value)
            if value is not None and kind in ("number", "text") and isinstance(value, str) != (kind == "text"):
                # PostgreSQL compares no number with text; SQLite would just match nothing.
                raise BrokerError(206, f"Operand type clash: {type(value).__name__} is incompatible with the "
                                       f"column {column}.")
            if postgres and declared == "text" and kind != "text":  # a bare NULL, which PostgreSQL types as text
                conditions.append(f'"{column}" = CAST(:where_{number} AS TEXT)')
            else:
                conditions.append(f'"{column}" = :where_{number}')
            binds.append(bindparam(f"where_{number}", value, type_=VIEW_COLUMN_TYPES.get(column)))
        sql = f"SELECT * FROM {quoted}" + (f" WHERE {' AND '.join(conditions)}" if conditions else "")
        query = text(sql).bindparams(*binds).columns(**VIEW_COLUMN_TYPES)
        return self._read(lambda ctx: [dict(r._mapping) for r in ctx.conn.execute(query)])

    def queue_counts(self, queue: str) -> dict[int, int]:
        """Messages in ``queue`` by stored status (1 ready, 0 retained, 3 sent copies),
        counted without reading their bodies."""
        queue = arguments.queue_name(queue)

        def count(ctx: TxContext) -> dict[int, int]:
            table = _queue_table(ctx, queue)
            rows = ctx.conn.execute(select(table.c.status, func.count()).group_by(table.c.status))
            return {status: number for status, number in rows}
        return self._read(count)

    def oldest_ready_time(self, queue: str) -> datetime | None:
        """The enqueue time of the oldest ready message (status 1) in ``queue``; None if none."""
        queue = arguments.queue_name(queue)

        def oldest(ctx: TxContext) -> datetime | None:
            table = _queue_table(ctx, queue)
            moment: datetime | None = ctx.conn.execute(
                select(table.c.message_enqueue_time).where(table.c.status == 1)
                .order_by(table.c.queuing_order).limit(1)
            ).scalar()
            return moment
        return self._read(oldest)

    def transmission_backlog(self) -> dict[str, int]:
        """Messages in the transmission queue by ``transmission_status`` (why each waits),
        counted without reading their bodies."""
        def count(ctx: TxContext) -> dict[str, int]:
            status = TransmissionQueueEntry.transmission_status
            rows = ctx.conn.execute(select(status, func.count()).group_by(status).order_by(status))
            return {reason: number for reason, number in rows}
        return self._read(count)

    def transmission_destinations(self) -> list[dict[str, Any]]:
        """The transmission queue counted by destination (``to_service_name``,
        ``to_broker_instance``) and ``transmission_status``, without reading bodies; in
        that order."""
        return self._read(outbound.destinations)

    def endpoint_states(self) -> list[tuple[str, str, int]]:
        """(state, state_desc, count) of the conversation endpoints, counted in the database."""
        view = self._view_name("conversation_endpoints")
        query = text(f"SELECT state, state_desc, COUNT(*) FROM {view} GROUP BY state, state_desc ORDER BY state")
        return self._read(lambda ctx: [(s, d, n) for s, d, n in ctx.conn.execute(query)])

    def timer_summary(self) -> tuple[int, int, datetime | None]:
        """(timers set, timers due now, the earliest deadline), from the deadline index."""
        def summary(ctx: TxContext) -> tuple[int, int, datetime | None]:
            timer = ConversationEndpoint.dialog_timer
            armed = timer.is_not(None)
            count, earliest = ctx.conn.execute(select(func.count(), func.min(timer)).where(armed)).one()
            due = ctx.conn.execute(select(func.count()).where(armed, timer <= ctx.now())).scalar_one()
            return count, due, earliest
        return self._read(summary)

    def _view_name(self, view: str) -> str:
        return self._state.backend.catalog_view(view)

    def _read(self, verb: Callable[[TxContext], T]) -> T:
        with self.snapshot() as tx:
            return tx.read(verb)


# Each catalog view's columns, by backend: "number" or "text" where the backend declares
# it, else None. The views are fixed by the schema revision, which is this release's.
_VIEW_COLUMNS: dict[tuple[str, str], dict[str, str | None]] = {}


def _view_columns(ctx: TxContext, view: str, quoted: str) -> dict[str, str | None]:
    """Read (and keep in ``_VIEW_COLUMNS``) the columns of ``view``."""
    backend = ctx.conn.dialect.name
    if backend == "sqlite":
        rows = ctx.conn.exec_driver_sql(f"PRAGMA table_xinfo({quoted})").all()
        known = {row[1]: _declared_kind(row[1], row[2]) for row in rows}
    else:
        described = ctx.conn.exec_driver_sql(f"SELECT * FROM {quoted} WHERE 1 = 0").cursor.description
        known = {name: _POSTGRES_KINDS.get(type_code) for name, type_code, *_ in described}
    _VIEW_COLUMNS[(backend, view)] = known
    return known


# PostgreSQL's type oids: bool, int8, int2, int4, numeric; text, char, varchar
_POSTGRES_KINDS: dict[object, str] = {
    16: "number", 20: "number", 21: "number", 23: "number", 1700: "number", 25: "text", 1042: "text", 1043: "text",
}


def _declared_kind(column: str, declared: str) -> str | None:
    """What SQLite declares a view column to be; a column it computes declares nothing,
    but the ``is_`` ones are bits."""
    declared = declared.upper()
    if "INT" in declared or column.startswith("is_"):
        return "number"
    return "text" if "CHAR" in declared else None


def _queue_table(ctx: TxContext, queue: str) -> Table:
    """The internal table of ``queue``; error 208 when there is no such queue."""
    info = ctx.catalog.queue_named(queue)
    if info is None:
        raise BrokerError(208, f"Invalid object name '{queue}'.")
    return queue_table(info.table_name)
