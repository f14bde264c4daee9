"""Per-queue storage: the hidden internal table and the view named after the queue.

As in SQL Server, ``CREATE QUEUE TargetQueue`` makes an internal table
(``queue_messages_<object_id>``) and a read-only view ``TargetQueue`` with the documented
queue columns, so ``SELECT * FROM "TargetQueue"`` works from any SQL client. The table
carries ``layout_version`` in ``sb_queues`` so that a later migration can upgrade every
queue's table.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import Any, NamedTuple, cast

from sqlalchemy import (
    BigInteger,
    Column,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    SmallInteger,
    String,
    Table,
    any_,
    bindparam,
    delete,
    exists,
    func,
    insert,
    literal_column,
    select,
    text,
    true,
    update,
)
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import Connection
from sqlalchemy.sql import Select

from broker.errors import BrokerError
from broker.storage.models import SYSNAME, ConversationGroup, ServiceQueue
from broker.storage.statements import Prepared
from broker.storage.types import GUID, UTCDateTime

LAYOUT_VERSION = 1
INTERNAL_PREFIX = "queue_messages_"

# The status of a message that is not complete yet: arrived ahead of a missing one, or
# still arriving in fragments. RECEIVE takes only status 1.
INCOMPLETE = 2

# Receive order inside one conversation: a DialogTimer first, then an Error, then the
# rest in sequence order (spec 2.3).
RANK_DIALOG_TIMER = 0
RANK_ERROR = 1
RANK_SEQUENCED = 2
# Not a message yet: the row (status 2) that shows a message still arriving in fragments
# from another instance (``conversations.arrival``). It is never received.
RANK_PARTIAL = 3

# Names SQL Server would reject for a queue, or that cannot be quoted safely everywhere.
_FORBIDDEN = re.compile(r'["\x00-\x1f\x7f\[\]]')  # quotes, brackets, control characters (DEL too)


def internal_table_name(object_id: int) -> str:
    return f"{INTERNAL_PREFIX}{object_id}"


def is_internal_queue_object(name: str | None, type_: str) -> bool:
    """True for per-queue tables and their indexes (Alembic leaves them alone)."""
    if not name:
        return False
    return name.startswith(INTERNAL_PREFIX) or name.startswith(f"ix_{INTERNAL_PREFIX}")


def validate_queue_name(name: str) -> str:
    """Check the name of a new queue (``dbo.`` and brackets already taken off by the gate).

    Queue names become SQL identifiers (the view), so they are validated here and
    always quoted by the dialect when used.
    """
    if not name.strip():
        raise BrokerError(102, near=name)
    if len(name) > SYSNAME:
        raise BrokerError(103, name=name[:SYSNAME])
    if name.startswith("#") or _FORBIDDEN.search(name) or "." in name:
        raise BrokerError(102, near=name)
    return name


@cache
def queue_table(table_name: str) -> Table:
    """The SQLAlchemy table of a queue's internal storage (built once per process)."""
    metadata = MetaData()
    table = Table(
        table_name,
        metadata,
        # AUTOINCREMENT on SQLite: a queuing_order is never reused, even after the
        # newest message is received, so it stays monotonic.
        Column("queuing_order", BigInteger().with_variant(Integer, "sqlite"),
               primary_key=True, autoincrement=True),
        Column("status", SmallInteger, nullable=False),
        Column("priority", SmallInteger, nullable=False),
        Column("conversation_group_id", GUID(), nullable=False),
        Column("conversation_handle", GUID(), nullable=False),
        Column("message_sequence_number", BigInteger, nullable=False),
        Column("service_id", Integer, nullable=False),
        Column("service_contract_id", Integer, nullable=False),
        Column("message_type_id", Integer, nullable=False),
        Column("validation", String(2), nullable=False),
        Column("message_body", LargeBinary, nullable=True),
        Column("message_enqueue_time", UTCDateTime(), nullable=False),
        Column("receive_rank", SmallInteger, nullable=False),
        sqlite_autoincrement=True,
    )
    # Next group to serve: highest priority first, then the oldest ready message.
    Index(f"ix_{table_name}_ready", table.c.status, table.c.priority.desc(), table.c.queuing_order)
    # A group's conversations in the same order.
    Index(f"ix_{table_name}_group", table.c.conversation_group_id, table.c.status,
          table.c.priority.desc(), table.c.queuing_order)
    # One conversation's messages in receive order.
    Index(f"ix_{table_name}_conversation", table.c.conversation_handle, table.c.status,
          table.c.receive_rank, table.c.message_sequence_number)
    return table


class QueueRow(NamedTuple):
    """One row of a queue's internal table (columns in table order)."""

    queuing_order: int
    status: int
    priority: int
    conversation_group_id: uuid.UUID
    conversation_handle: uuid.UUID
    message_sequence_number: int
    service_id: int
    service_contract_id: int
    message_type_id: int
    validation: str
    message_body: bytes | None
    message_enqueue_time: datetime
    receive_rank: int


class TakenRows(NamedTuple):
    """What RECEIVE took with the statement that picked its group (``Backend.take_next_conversation_rows``)."""

    rows: list[tuple[Any, ...]]  # in receive order, each in table order
    # Whether the queue's poison count was reset with them; None: not looked at, the
    # caller resets it as it would after any RECEIVE.
    rollback_count_reset: bool | None


@dataclass(frozen=True, slots=True)
class QueueStatements:
    """The prepared statements of one queue's hot path."""

    insert: Prepared  # values: every column but queuing_order, in table order
    next_ready: Prepared  # (group, conversation) holding the next message to serve
    # PostgreSQL: the next group nobody holds, locked, and its first message's
    # conversation (``pick_group``); the same with up to p_top of that conversation's
    # rows taken, deleted or (RETENTION) marked received (``take_next``).
    pick_group: Prepared
    take_next: Prepared
    mark_next: Prepared
    conversation_rows: Prepared  # one conversation's ready rows in receive order, LIMIT p_top
    all_conversation_rows: Prepared  # the same without a limit
    # The same for the conversation holding the next message to serve, found in the same
    # statement (where no group lock has to be taken in between: SQLite).
    next_conversation_rows: Prepared
    all_next_conversation_rows: Prepared
    delete_row: Prepared
    mark_received: Prepared  # RETENTION: status 0 instead of deleting
    # PostgreSQL: the same for many rows in one statement (``= ANY(array)``).
    delete_rows: Prepared
    mark_rows_received: Prepared


_groups = cast(Table, ConversationGroup.__table__)
_queues = cast(Table, ServiceQueue.__table__)

# What a SEND writes: every column but the queuing order the database assigns.
_INSERTED = QueueRow._fields[1:]


def serve_order_of(table: Any) -> tuple[Any, ...]:
    """The order messages are served in: highest priority first, then the oldest."""
    return table.c.priority.desc(), table.c.queuing_order


def receive_order_of(table: Any) -> tuple[Any, ...]:
    """The order of one conversation's messages: a DialogTimer, an Error, then the rest
    in sequence order."""
    return table.c.receive_rank, table.c.message_sequence_number, table.c.queuing_order


def _rows_of(table: Any, handle: Any) -> Select[Any]:
    """One conversation's ready rows in receive order."""
    return (
        select(table).where(table.c.conversation_handle == handle, table.c.status == 1)
        .order_by(*receive_order_of(table))
    )


# Constants written into the SQL of the statements that pick a group, not sent as
# parameters: with them as parameters, PostgreSQL rates its generic plan above a custom
# one and plans the statement again at every execution (about 200 µs of a RECEIVE).
_ONE, _ZERO = literal_column("1", Integer), literal_column("0", Integer)
_READY = _ONE  # status 1: ready to be received


def _picked_group(t: Table) -> Any:
    """PostgreSQL: the first ready message in serve order (the queue's ready index) whose
    group row this transaction can lock, with that group, locked (``FOR UPDATE SKIP
    LOCKED``: a group another transaction holds is skipped, never waited for)."""
    m = t.alias("ready_message")
    return (
        select(_groups.c.conversation_group_id, m.c.queuing_order)
        .join_from(m, _groups, _groups.c.conversation_group_id == m.c.conversation_group_id)
        .where(m.c.status == _READY).order_by(*serve_order_of(m)).limit(_ONE)
        .with_for_update(skip_locked=True, of=_groups)
    ).cte("picked")


def _first_conversation(picked: Any, f: Any) -> Select[Any]:
    """The conversation of the message ``picked`` found first, read from ``f`` (an alias of
    the queue's table) in the statement's snapshot, taken before the group lock."""
    return select(f.c.conversation_handle).where(f.c.queuing_order == select(picked.c.queuing_order).scalar_subquery())


def rollback_count_reset() -> Any:
    """UPDATE: queue ``p_queue``'s poison count back to 0 where it is not
    (``broker.conversations.poison``; RECEIVE's ``take_next`` on PostgreSQL)."""
    return (
        update(_queues)
        .where(_queues.c.object_id == bindparam("p_queue", type_=Integer), _queues.c.rollback_count != _ZERO)
        .values(rollback_count=_ZERO)
    )


def pick_group(t: Table) -> Prepared:
    """PostgreSQL: the next conversation group nobody holds, locked, and the conversation
    of its first message, in one statement (GET CONVERSATION GROUP).

    The statement reads a snapshot taken before the group lock, and a transaction that
    held the group may have taken the message and committed in between, so the message
    is locked too (``FOR UPDATE``): a row that is gone drops out, and one changed
    meanwhile (RETENTION sets status 0) is checked again in its latest version. Nobody
    else can hold the group's rows now: nothing is waited for.

    One row (group, conversation); none: no group nobody holds has a ready message. A
    NULL conversation: the picked message was taken meanwhile; the group stays locked,
    and the caller runs the statement again, on a newer snapshot.
    """
    picked, f = _picked_group(t), t.alias("first_message")
    first = _first_conversation(picked, f).where(f.c.status == _READY).with_for_update(of=f).cte("first")
    return Prepared(
        select(picked.c.conversation_group_id, first.c.conversation_handle)
        .select_from(picked.outerjoin(first, true()))
    )


def take_next(t: Table, *, retention: bool) -> Prepared:
    """PostgreSQL: RECEIVE without a WHERE in one statement: the next group nobody holds,
    locked; up to ``p_top`` (NULL: all) ready rows of its first message's conversation,
    taken (deleted; with RETENTION, set to status 0) and returned; and, when it took any,
    queue ``p_queue``'s poison count reset to 0 (``broker.conversations.poison``).

    The statement reads a snapshot taken before the group lock: a transaction that held
    the group may have taken some of those rows and committed in between. The DELETE (or
    UPDATE) takes each row in its latest version and checks it again (READ COMMITTED):
    a row that is gone, received (status 0) or moved to another group meanwhile is left
    out. Rows are never locked only to be read, so a RECEIVE writes each row once.

    Each result row is (group, number of poison counts reset (0 or 1), the columns of
    one taken row, NULL when none). No row: no group nobody holds has a ready message.
    A group with no row taken: its messages were taken meanwhile; the group stays
    locked, and the caller runs the statement again, on a newer snapshot.
    """
    picked, r = _picked_group(t), t.alias("taken_message")
    first = _first_conversation(picked, t.alias("first_message")).scalar_subquery()
    wanted = (
        select(r.c.queuing_order).where(r.c.conversation_handle == first, r.c.status == _READY)
        .order_by(*receive_order_of(r)).limit(bindparam("p_top", type_=BigInteger))
    )
    taking = update(t).values(status=_ZERO) if retention else delete(t)
    taken = (
        taking.where(t.c.queuing_order.in_(wanted), t.c.status == _READY,
                     t.c.conversation_group_id == select(picked.c.conversation_group_id).scalar_subquery())
        .returning(*t.c)
    ).cte("taken")
    reset = (
        rollback_count_reset().where(exists(select(taken.c.queuing_order))).returning(_queues.c.object_id)
    ).cte("reset")
    return Prepared(
        select(picked.c.conversation_group_id, select(func.count()).select_from(reset).scalar_subquery(), *taken.c)
        .select_from(picked.outerjoin(taken, true()))
        .order_by(*receive_order_of(taken))
    )


@cache
def queue_statements(table_name: str) -> QueueStatements:
    t = queue_table(table_name)
    ready = t.c.status == 1
    rows = _rows_of(t, bindparam("p_handle"))
    serve_order = (
        select(t.c.conversation_group_id, t.c.conversation_handle).where(ready).order_by(*serve_order_of(t))
    )
    n = t.alias("next_message")
    next_rows = _rows_of(t, select(n.c.conversation_handle).where(n.c.status == 1)
                         .order_by(*serve_order_of(n)).limit(1).scalar_subquery())
    return QueueStatements(
        insert=Prepared(insert(t).values({name: bindparam(name) for name in _INSERTED}), positional=_INSERTED),
        next_ready=Prepared(serve_order.limit(1)),
        pick_group=pick_group(t),
        take_next=take_next(t, retention=False),
        mark_next=take_next(t, retention=True),
        conversation_rows=Prepared(rows.limit(bindparam("p_top"))),
        all_conversation_rows=Prepared(rows),
        next_conversation_rows=Prepared(next_rows.limit(bindparam("p_top"))),
        all_next_conversation_rows=Prepared(next_rows),
        # Held back on PostgreSQL: written with the next statement or the commit.
        delete_row=Prepared(delete(t).where(t.c.queuing_order == bindparam("p_order")), held_back_on="postgresql"),
        mark_received=Prepared(
            update(t).where(t.c.queuing_order == bindparam("p_order")).values(status=0), held_back_on="postgresql"
        ),
        delete_rows=Prepared(delete(t).where(t.c.queuing_order == any_(_orders())), held_back_on="postgresql"),
        mark_rows_received=Prepared(
            update(t).where(t.c.queuing_order == any_(_orders())).values(status=0), held_back_on="postgresql"
        ),
    )


def _orders() -> Any:
    return bindparam("p_orders", type_=postgresql.ARRAY(BigInteger))


def take_rows(conn: Connection, statements: QueueStatements, orders: list[int], *, retention: bool) -> None:
    """RECEIVE's write: delete the rows ``orders`` (with RETENTION, mark them received),
    held back on PostgreSQL until the transaction's next statement or its commit.

    PostgreSQL takes many rows in one statement (``= ANY(array)``): a statement per row,
    even sent as one, cost the server about 40 % more for RECEIVE TOP(10). SQLite runs
    one prepared statement per row.
    """
    if len(orders) > 1 and conn.dialect.name == "postgresql":
        (statements.mark_rows_received if retention else statements.delete_rows).run(conn, p_orders=orders)
        return
    statement = statements.mark_received if retention else statements.delete_row
    if len(orders) == 1:
        statement.run(conn, p_order=orders[0])
    else:
        statement.run_many(conn, [{"p_order": order} for order in orders])


def create_queue_storage(conn: Connection, view_name: str, table_name: str) -> None:
    """Create the internal table and the queue's view (``Backend.queue_view_name``),
    inside the caller's transaction."""
    table = queue_table(table_name)
    table.create(conn)
    conn.execute(text(f"CREATE VIEW {_quote(conn, view_name)} AS {_view_select(conn, table_name)}"))


def drop_queue_storage(conn: Connection, view_name: str, table_name: str) -> None:
    conn.execute(text(f"DROP VIEW IF EXISTS {_quote(conn, view_name)}"))
    queue_table(table_name).drop(conn)


def _quote(conn: Connection, name: str) -> str:
    return conn.dialect.identifier_preparer.quote_identifier(name)


def _view_select(conn: Connection, table_name: str) -> str:
    m = _quote(conn, table_name)
    return (
        "SELECT m.status, m.priority, m.queuing_order, m.conversation_group_id, "
        "m.conversation_handle, m.message_sequence_number, s.name AS service_name, "
        "m.service_id, c.name AS service_contract_name, m.service_contract_id, "
        "t.name AS message_type_name, m.message_type_id, m.validation, m.message_body, "
        "m.message_enqueue_time "
        f"FROM {m} AS m "
        "LEFT JOIN sb_services AS s ON s.service_id = m.service_id "
        "LEFT JOIN sb_contracts AS c ON c.service_contract_id = m.service_contract_id "
        "LEFT JOIN sb_message_types AS t ON t.message_type_id = m.message_type_id"
    )
