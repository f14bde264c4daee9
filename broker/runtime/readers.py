"""Activation readers: the threads that run a queue's activation procedure.

A queue's PROCEDURE_NAME names a Python callable, ``package.module:function`` (or
``package.module.function``). A reader is a daemon thread of the runtime's process that
calls it with the database handle, like SQL Server starting the activation stored
procedure on a background session: the procedure opens its own transactions, loops on
``tx.receive(queue, 1, timeout=...)`` and returns when it finds nothing.

The handle it gets is the runtime's own database. The reader's thread sets itself as
that thread's receive watcher (``DatabaseState.receive_watch``), so every RECEIVE and GET
CONVERSATION GROUP without WHERE that the procedure runs on the reader's queue reaches the
queue monitor's :class:`Activity`: that is how the monitor knows whether readers receive
and whether they find the queue empty.
The readers' ``sys.dm_broker_activated_tasks`` rows are kept here too.
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import logging
import math
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TypeVar

from sqlalchemy import delete, func, insert, select, update

from broker import events
from broker.errors import BrokerError
from broker.storage.context import TxContext
from broker.storage.models import ActivatedTask
from broker.storage.served import ServedDatabase

log = logging.getLogger("broker.activation")

T = TypeVar("T")
Procedure = Callable[[ServedDatabase], object]

# SQL Server's numbers: a procedure that cannot be found, and an object that is not one.
PROCEDURE_NOT_FOUND = 2812
NOT_A_PROCEDURE = 9620


# Entry points that find procedures of other kinds (``broker.sql`` finds T-SQL ones):
# each ``finder(db, name)`` returns a procedure or None.
PROCEDURE_FINDERS = "servicebroker.procedures"


@functools.cache
def _finders() -> tuple[Callable[[ServedDatabase, str], Procedure | None], ...]:
    return tuple(entry.load() for entry in importlib.metadata.entry_points(group=PROCEDURE_FINDERS))


def resolve_procedure(name: str, db: ServedDatabase | None = None) -> Procedure:
    """The activation procedure ``name``: one a finder knows in ``db`` (a stored T-SQL
    procedure), else the Python callable ``package.module:function`` (or
    ``package.module.function``) imported.

    Raises ``BrokerError`` 2812 when it cannot be found and 9620 when what it names is
    not callable. A finder may read the database in a snapshot; importing runs none.
    """
    if db is not None:
        for finder in _finders():
            found = finder(db, name)
            if found is not None:
                return found
    module_name, _, attribute = name.partition(":") if ":" in name else name.rpartition(".")
    if not module_name or not attribute:
        raise BrokerError(PROCEDURE_NOT_FOUND, f"Could not find stored procedure '{name}' "
                                               "(expected package.module:function).")
    try:
        target: object = importlib.import_module(module_name)
        for part in attribute.split("."):
            target = getattr(target, part)
    except Exception as exc:  # a module that fails to import is as absent as a missing one
        raise BrokerError(PROCEDURE_NOT_FOUND, f"Could not find stored procedure '{name}': {exc}") from exc
    if not callable(target):
        raise BrokerError(NOT_A_PROCEDURE, f"The activation procedure '{name}' is not callable.")
    return target


class Activity:
    """What the readers of one queue did: RECEIVE calls and when one last came back empty.

    Written by reader threads and read by the runtime thread, under a lock. It outlives
    the readers, so the monitor still knows after a reader has ended.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.receives = 0
        self.last_empty = -math.inf  # time.monotonic() of the last empty result
        self.last_empty_time: datetime | None = None

    def record(self, found: bool) -> None:
        """Count one RECEIVE (or GET CONVERSATION GROUP) that returned rows or nothing."""
        with self._lock:
            self.receives += 1
            if not found:
                self.last_empty = time.monotonic()
                self.last_empty_time = datetime.now(UTC)


class Reader:
    """One running activation procedure: a daemon thread and its sys.dm_broker_activated_tasks row.

    The row is inserted by the monitor's transaction before the thread starts and deleted
    by the thread, in its own transaction, when the procedure returns or raises.
    """

    def __init__(self, db: ServedDatabase, queue_name: str, queue_id: int, procedure_name: str, procedure: Procedure,
                 activity: Activity, on_end: Callable[[Reader], None], session: int,
                 stopping: threading.Event) -> None:
        self.db = db
        self._stopping = stopping  # the runtime is stopping: a RECEIVE ... WAITFOR of the procedure ends
        self.session = session  # its task row's spid (``Backend.session``)
        self.queue_name = queue_name
        self.queue_id = queue_id
        self.procedure_name = procedure_name
        self.activity = activity
        self.task_id = uuid.uuid4()
        self.start_time = datetime.now(UTC)
        # time.monotonic() since which the procedure has been inside a RECEIVE, or None.
        self.waiting_since: float | None = None
        self.received = False  # whether the procedure ever issued a RECEIVE on its queue
        self.failed = False  # whether it raised
        self._procedure = procedure
        self._on_end = on_end
        # Held while the row is deleted at the end, or written again (``keep_row``).
        self._row_lock = threading.Lock()
        self._row_gone = False
        self._thread = threading.Thread(target=self._run, name=f"broker-reader-{queue_name}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def insert_row(self, ctx: TxContext) -> None:
        """Add this reader's sys.dm_broker_activated_tasks row in the caller's transaction."""
        ctx.writing()
        ctx.conn.execute(insert(ActivatedTask).values(
            task_id=self.task_id, queue_id=self.queue_id, procedure_name=self.procedure_name,
            process_id=self.session, start_time=self.start_time))

    def keep_row(self, session: int) -> bool:
        """The runtime's session is now ``session`` (its mark was lost and taken again):
        give this reader's task row that spid, in a transaction of its own, and insert it
        again if another runtime removed it meanwhile (it found the session ended).
        Nothing once the reader has deleted its row. Returns whether the row was missing."""
        with self._row_lock:
            self.session = session
            if self._row_gone:
                return False
            with self.db.transaction() as tx:
                return bool(tx.run(self._write_row))

    def _write_row(self, ctx: TxContext) -> bool:
        moved = ctx.conn.execute(update(ActivatedTask).where(ActivatedTask.task_id == self.task_id)
                                 .values(process_id=self.session))
        if moved.rowcount:
            return False
        self.insert_row(ctx)
        return True

    def observe(self, queue: str, unfiltered: bool, call: Callable[[], T]) -> T:
        """This thread's receive watcher: report RECEIVEs without WHERE on the reader's queue."""
        if not unfiltered or queue.lower() != self.queue_name.lower():
            return call()
        self.waiting_since = time.monotonic()
        try:
            result = call()
        finally:
            self.waiting_since = None
        self.received = True
        self.activity.record(bool(result))
        return result

    def _run(self) -> None:
        watch = self.db.state.receive_watch
        watch.watcher = self.observe  # this thread's RECEIVEs report here
        watch.stopping = self._stopping  # and their WAITFOR ends, empty, when the runtime stops
        try:
            self._procedure(self.db)
        except Exception as exc:
            self.failed = True
            log.exception("error 9724: The activated proc '%s' running on queue '%s' output the following: '%s'",
                          self.procedure_name, self.queue_name, exc)
        finally:
            self._finish()

    def _finish(self) -> None:
        """Delete the task row (own transaction), close this thread's connection, tell the monitor."""
        try:
            with self._row_lock:  # not written again (``keep_row``) once deleted
                self._row_gone = True
                with self.db.transaction() as tx:
                    tx.run(lambda ctx: delete_tasks(ctx, [self.task_id]))
            # The thread's idle connection would otherwise stay open after the thread is gone.
            self.db.state.checkout().close()
        except Exception:
            log.exception("could not remove the activated task row of '%s' on queue '%s'",
                          self.procedure_name, self.queue_name)
        finally:
            self._on_end(self)
            self.db.events.emit(events.READER_STOPPED, queue=self.queue_name, procedure=self.procedure_name)


def delete_tasks(ctx: TxContext, task_ids: list[uuid.UUID]) -> None:
    """Delete sys.dm_broker_activated_tasks rows in the caller's transaction."""
    if task_ids:
        ctx.conn.execute(delete(ActivatedTask).where(ActivatedTask.task_id.in_(task_ids)))


def task_count(ctx: TxContext, queue_id: int) -> int:
    """Task rows of a queue, from every runtime, in the caller's transaction."""
    query = select(func.count()).select_from(ActivatedTask).where(ActivatedTask.queue_id == queue_id)
    return int(ctx.conn.execute(query).scalar_one())


def forget_dead_tasks(ctx: TxContext, seen: dict[int, float]) -> bool:
    """Delete task rows left by runtimes that no longer run (their ``spid`` session has
    ended, see ``Backend.ended_sessions``), in the caller's transaction. Returns whether
    it deleted any.

    ``seen`` holds the sessions found ended and since when (``time.monotonic()``), kept
    by the caller from one look to the next: a session's rows go only once it has been
    seen ended for ``Backend.session_grace`` (PostgreSQL: a runtime whose session
    connection was lost takes its session again well within that, ``renew_session``, and
    its readers still run), and only under the backend's claim on the ended session
    (``claim_ended_sessions``: the runtime cannot take it again while the rows go).
    """
    backend = ctx.state.backend
    sessions = list(ctx.conn.execute(select(ActivatedTask.process_id).distinct()).scalars())
    ended = backend.ended_sessions(ctx.conn, sessions)
    now = time.monotonic()
    for number in [number for number in seen if number not in ended]:
        del seen[number]  # alive again, or its rows are gone
    for number in ended:
        seen.setdefault(number, now)
    due = [number for number in ended if now - seen[number] >= backend.session_grace]
    if not due:
        return False
    ctx.writing()
    dead = backend.claim_ended_sessions(ctx.conn, due)
    if dead:
        ctx.conn.execute(delete(ActivatedTask).where(ActivatedTask.process_id.in_(dead)))
        log.info("removed activated task rows of ended runtimes %s", dead)
    return bool(dead)


def grace_left(seen: dict[int, float], grace: float) -> float | None:
    """Seconds until the first of the sessions ``seen`` ended passes ``grace``; None if none is waiting."""
    if not seen:
        return None
    return max(0.0, min(seen.values()) + grace - time.monotonic())
