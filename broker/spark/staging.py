"""Spark writes: tasks stage rows, the job's commit SENDs them in one broker transaction.

A write task inserts its rows into ``sb_spark_staging`` under a token of its own (one
task attempt), so a retried task's rows are sent once: the commit sends only the tokens
of the attempts Spark reports as successful. The commit SENDs every row in one
transaction and deletes the job's staged rows in it; a failing row (unknown message
type, a body that fails validation, ...) rolls the whole job back with its Service
Broker error, and the staged rows are discarded. A streaming sink records the last
micro-batch it committed (``sb_spark_sinks``) in the same transaction, so a batch that
Spark replays after a restart is sent once.

Columns a written DataFrame may have:

* ``conversation_handle``: SEND on this conversation; or, when it is NULL (or absent),
* ``from_service``, ``to_service`` and optionally ``contract`` (default ``DEFAULT``):
  BEGIN DIALOG, then SEND. Rows with the same ``dialog_key`` (and services and
  contract) share one dialog per job or micro-batch, in row order; a row without a
  ``dialog_key`` begins a dialog of its own.
* ``message_type`` (default ``DEFAULT``) and ``message_body`` (binary or text, UTF-8).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import and_, delete, insert, select, update
from sqlalchemy.engine import Connection
from sqlalchemy.pool import NullPool

import broker
from broker import arguments
from broker.conversations.endpoints import as_handle
from broker.errors import MISSING_OPTION, BrokerError, InvalidArgumentError
from broker.storage.engine import create_broker_engine
from broker.storage.models import SparkSink, SparkStagedMessage

COLUMNS = ("conversation_handle", "from_service", "to_service", "contract", "message_type", "message_body",
           "dialog_key")
INSERT_CHUNK = 5_000
SEND_PAGE = 5_000

_Staged = SparkStagedMessage


def check_columns(names: Sequence[str]) -> None:
    """Fail at analysis, not in a task, when a DataFrame cannot be written as messages."""
    unknown = sorted(set(names) - set(COLUMNS))
    if unknown:
        raise InvalidArgumentError(207, f"Invalid column name '{unknown[0]}': servicebroker cannot write "
                                        f"column(s) {', '.join(unknown)}; the columns are {', '.join(COLUMNS)}.")
    if "conversation_handle" not in names and not {"from_service", "to_service"} <= set(names):
        raise InvalidArgumentError(MISSING_OPTION, statement="A row written to servicebroker",
                                   names="column conversation_handle, or from_service and to_service to begin a dialog")


def stage(url: str, job: str, batch_id: int | None, partition_id: int, rows: Iterable[Mapping[str, Any]]) -> str:
    """Insert one task's rows under a new token, in one transaction; return the token."""
    token = str(uuid.uuid4())
    now = datetime.now(UTC)
    engine = create_broker_engine(url, poolclass=NullPool)
    try:
        with engine.begin() as conn:
            chunk: list[dict[str, Any]] = []
            for row in rows:
                chunk.append(_staged(row, job, batch_id, token, partition_id, now))
                if len(chunk) == INSERT_CHUNK:
                    conn.execute(insert(_Staged), chunk)
                    chunk = []
            if chunk:
                conn.execute(insert(_Staged), chunk)
    finally:
        engine.dispose()
    return token


def _staged(row: Mapping[str, Any], job: str, batch_id: int | None, token: str, partition_id: int,
            now: datetime) -> dict[str, Any]:
    handle = row.get("conversation_handle")
    # Checked here, as the staging table's columns take them on every backend (PostgreSQL
    # refused a longer name, or a NUL, with a raw error); SEND checks the rest.
    return {
        "job": job, "batch_id": batch_id, "token": token, "partition_id": partition_id,
        "conversation_handle": None if handle is None else as_handle(handle),
        "from_service": arguments.optional_text(row.get("from_service"), "from_service", longest=256),
        "to_service": arguments.optional_text(row.get("to_service"), "to_service", longest=256),
        "contract": arguments.optional_text(row.get("contract"), "contract", longest=arguments.SYSNAME),
        "message_type": arguments.optional_text(row.get("message_type"), "message_type", longest=arguments.SYSNAME),
        "dialog_key": arguments.optional_text(row.get("dialog_key"), "dialog_key"),
        "message_body": arguments.body(row.get("message_body")),
        "staged_at": now,
    }


def send_job(url: str, job: str, tokens: Sequence[str]) -> int:
    """A batch job's commit: SEND the staged rows of ``tokens`` in one transaction.

    Deletes all of the job's staged rows in the same transaction. On any failure nothing
    is sent, the staged rows are discarded and the error is raised. Returns the number
    of messages sent.
    """
    db = broker.connect(url, upgrade=False)
    try:
        with db.transaction() as tx:
            sent = _send_staged(tx, tokens)
            tx.connection.execute(delete(_Staged).where(_Staged.job == job))
        return sent
    except BaseException:
        discard(db, job)
        raise
    finally:
        db.dispose()


def send_batch(url: str, sink_id: str, batch_id: int, tokens: Sequence[str]) -> int:
    """A streaming sink's commit of one micro-batch, exactly once.

    In one transaction: unless the sink has committed ``batch_id`` (or a later one)
    already, SEND the staged rows of ``tokens`` and record ``batch_id``; either way,
    delete the sink's staged rows of this and earlier batches (left over from tasks of
    cancelled or replayed batches). On a failure nothing is sent and the batch's staged
    rows are discarded. Returns the number of messages sent (0 for a replay).
    """
    db = broker.connect(url, upgrade=False)
    try:
        with db.transaction() as tx:
            conn = tx.connection
            last = conn.execute(
                select(SparkSink.batch_id).where(SparkSink.sink_id == sink_id).with_for_update()
            ).scalar()
            sent = 0
            if last is None or batch_id > last:
                sent = _send_staged(tx, tokens)
                _record_batch(conn, sink_id, batch_id, first=last is None)
            conn.execute(delete(_Staged).where(and_(_Staged.job == sink_id, _Staged.batch_id <= batch_id)))
        return sent
    except BaseException:
        discard(db, sink_id, batch_id)  # a replay stages the batch again
        raise
    finally:
        db.dispose()


def _record_batch(conn: Connection, sink_id: str, batch_id: int, *, first: bool) -> None:
    values = {"batch_id": batch_id, "commit_time": datetime.now(UTC)}
    if first:
        conn.execute(insert(SparkSink).values(sink_id=sink_id, **values))
    else:
        conn.execute(update(SparkSink).where(SparkSink.sink_id == sink_id).values(**values))


def _send_staged(tx: broker.Transaction, tokens: Sequence[str]) -> int:
    """SEND the staged rows of ``tokens`` (in partition order), each in row order."""
    dialogs: dict[tuple[str, str, str, str], uuid.UUID] = {}
    sent = 0
    for row in _staged_rows(tx, tokens):
        handle = row.conversation_handle
        if handle is None:
            handle = _dialog_for(tx, row, dialogs)
        tx.send(handle, row.message_type or "DEFAULT", row.message_body)
        sent += 1
    return sent


def _dialog_for(tx: broker.Transaction, row: Any, dialogs: dict[tuple[str, str, str, str], uuid.UUID]) -> uuid.UUID:
    if not row.from_service or not row.to_service:
        raise BrokerError(8421)  # the service name is missing
    contract = row.contract or "DEFAULT"
    if row.dialog_key is None:
        return tx.begin_dialog(row.from_service, row.to_service, contract)
    key = (row.from_service, row.to_service, contract, row.dialog_key)
    if key not in dialogs:
        dialogs[key] = tx.begin_dialog(row.from_service, row.to_service, contract)
    return dialogs[key]


def _staged_rows(tx: broker.Transaction, tokens: Sequence[str]) -> Iterator[Any]:
    """The staged rows of each token in turn, in pages (reading a page flushes the
    SENDs queued before it)."""
    for token in tokens:
        last = 0
        while True:
            page = tx.connection.execute(
                select(_Staged.__table__).where(_Staged.token == token, _Staged.staging_id > last)
                .order_by(_Staged.staging_id).limit(SEND_PAGE)
            ).all()
            yield from page
            if len(page) < SEND_PAGE:
                break
            last = page[-1].staging_id


def discard(db: broker.Broker, job: str, batch_id: int | None = None) -> None:
    """Delete a job's staged rows (a stream's: those of ``batch_id`` and earlier)."""
    condition = _Staged.job == job
    if batch_id is not None:
        condition = and_(condition, _Staged.batch_id <= batch_id)
    with db.transaction() as tx:
        tx.connection.execute(delete(_Staged).where(condition))


def discard_url(url: str, job: str, batch_id: int | None = None) -> None:
    """``discard`` on a database opened (and closed) for it: a job's abort."""
    db = broker.connect(url, upgrade=False)
    try:
        discard(db, job, batch_id)
    finally:
        db.dispose()
