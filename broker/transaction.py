"""``db.transaction()``: one real database transaction carrying broker verbs.

The verbs mirror Service Broker's statements one to one. Each runs in this
transaction: its effects are visible to others only after commit and vanish on
rollback. Locks (``broker.storage.backends``): on SQLite the transaction holds the database write
lock (``BEGIN IMMEDIATE``) from its first verb to its end, which includes every
conversation group lock; on PostgreSQL it holds row locks on the conversation groups it
receives from (and the rows it writes) until it ends.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy import event, text
from sqlalchemy.engine import Connection
from sqlalchemy.orm import Session

from broker import arguments, events
from broker.arguments import FOREVER
from broker.conversations import dialogs, poison, receiving, sending
from broker.conversations.messages import Message
from broker.errors import TRANSACTION_ENDED, BrokerError, InvalidArgumentError
from broker.storage import pending
from broker.storage.context import TxContext
from broker.storage.driver_errors import as_broker_error
from broker.storage.group_commit import Member, end_transaction
from broker.storage.queue_tables import queue_table

if TYPE_CHECKING:
    from broker.storage.state import DatabaseState

log = logging.getLogger("broker")
T = TypeVar("T")


class Transaction:
    """Broker verbs inside one database transaction (see ``Broker.transaction``)."""

    def __init__(self, state: DatabaseState, *, session: Session | None = None,
                 connection: Connection | None = None, snapshot: bool = False) -> None:
        self._state = state
        # Reads only, on the last committed state, without the write lock (``Broker.snapshot``).
        self._snapshot = snapshot
        self._session = session
        self._joined = connection if connection is not None else None
        self._owned: Connection | None = None
        # The place of this transaction in its database's group commit (SQLite), while it
        # runs: then ``_owned`` is the group's connection, not one of this thread's.
        self._member: Member | None = None
        self._ctx: TxContext | None = None
        self._doomed = False
        # Whether this transaction has written: until then a WAITFOR may release the
        # write lock while it waits.
        self._wrote = False
        self._closed = False  # its ``with`` block (or ``close``) has ended it
        # Threads that share the transaction run its verbs one at a time, as a session runs
        # one request at a time: its connection, cursors and held-back writes are one
        # thread's at a time (PostgreSQL's shared cursors hung). A WAITFOR does not hold
        # it while it waits.
        self._busy = threading.RLock()

    # -- conversations -------------------------------------------------------------

    def begin_dialog(self, from_service: str, to_service: str, contract: str = "DEFAULT", *,
                     broker_instance: str | None = None, related_conversation: object | None = None,
                     related_conversation_group: object | None = None, lifetime: int | None = None,
                     encryption: bool = True) -> uuid.UUID:
        """BEGIN DIALOG: create the initiator endpoint and return its handle.

        Takes the new dialog's group lock. ``encryption`` (ENCRYPTION = ON) asks for
        dialog security: the endpoint gets a session key identifier
        (``sys.conversation_endpoints.outbound_session_key_identifier``), while dialogs
        inside one instance are never encrypted, as in SQL Server.
        """
        initiator = arguments.optional_text(from_service, "FROM SERVICE")
        target = arguments.target_service(to_service)
        contract_name = arguments.optional_text(contract, "contract name")
        broker_instance = arguments.broker_instance(broker_instance)
        related_conversation = arguments.optional_guid(related_conversation, "RELATED_CONVERSATION")
        related_conversation_group = arguments.optional_guid(related_conversation_group,
                                                             "RELATED_CONVERSATION_GROUP")
        lifetime = arguments.lifetime(lifetime)
        encryption = arguments.flag(encryption, "ENCRYPTION")
        return self._write(lambda ctx: dialogs.begin_dialog(
            ctx, initiator, target, contract_name, broker_instance=broker_instance,
            related_conversation=related_conversation,
            related_conversation_group=related_conversation_group, lifetime=lifetime, encryption=encryption))

    def send(self, handle: object, message_type: str = "DEFAULT", body: bytes | str | None = None) -> None:
        """SEND ON CONVERSATION one handle or a list of handles (atomic across them).

        The message reaches the target queue when this transaction commits, or waits in
        the transmission queue when the target cannot take it now. Takes the group lock
        of every handle's conversation.
        """
        message_type = arguments.text(message_type, "message type name")
        payload = arguments.body(body)
        self._write(lambda ctx: sending.send(ctx, handle, message_type, payload))

    def receive(self, queue: str, top: int | None = None, *, conversation_handle: object | None = None,
                conversation_group_id: object | None = None, timeout: float | None = None) -> list[Message]:
        """RECEIVE [TOP (n)] FROM queue [WHERE ...], with WAITFOR when ``timeout`` is given.

        ``timeout``: None returns at once; seconds to wait; -1 waits forever. Received
        messages leave the queue (or turn status 0 under RETENTION) when this
        transaction commits; a rollback puts them back in place. Takes the lock of the
        group it returns messages of (a WHERE-named group's lock is waited for).
        """
        queue = arguments.queue_name(queue)
        top = arguments.top(top)
        conversation_handle = arguments.optional_guid(conversation_handle, "conversation_handle")
        conversation_group_id = arguments.optional_guid(conversation_group_id, "conversation_group_id")
        if conversation_handle is not None and conversation_group_id is not None:
            raise InvalidArgumentError(102, "RECEIVE takes WHERE conversation_handle or conversation_group_id, "
                                            "not both.", near="AND")
        wait = arguments.wait_time(timeout)
        unfiltered = conversation_handle is None and conversation_group_id is None
        return self._watched(queue, unfiltered, lambda: self._waitfor(queue, wait, lambda ctx: receiving.receive(
            ctx, queue, top, conversation_handle, conversation_group_id), empty=[]))

    def get_conversation_group(self, queue: str, timeout: float | None = None) -> uuid.UUID | None:
        """GET CONVERSATION GROUP: the next group RECEIVE would serve, locked; None if none."""
        queue = arguments.queue_name(queue)
        wait = arguments.wait_time(timeout)
        return self._watched(queue, True, lambda: self._waitfor(
            queue, wait, lambda ctx: receiving.get_conversation_group(ctx, queue), empty=None))

    def move_conversation(self, handle: object, conversation_group_id: object) -> None:
        """MOVE CONVERSATION into another group of the same queue (locks both groups)."""
        handle = arguments.optional_guid(handle, "conversation handle")
        conversation_group_id = arguments.optional_guid(conversation_group_id, "conversation group id")
        self._write(lambda ctx: dialogs.move_conversation(ctx, handle, conversation_group_id))

    def end_conversation(self, handle: object, *, error: int | None = None,
                         description: str | None = None, cleanup: bool = False) -> None:
        """END CONVERSATION [WITH ERROR = n DESCRIPTION = '...' | WITH CLEANUP].

        Takes the conversation's group lock. WITH ERROR needs both a code (an ``int``
        > 0) and a description XML can carry (at most 3000 characters).
        """
        handle = arguments.optional_guid(handle, "conversation handle")
        error, description = arguments.failure(error, description)
        cleanup = arguments.flag(cleanup, "WITH CLEANUP")
        if cleanup and (error is not None or description is not None):
            raise InvalidArgumentError(102, "END CONVERSATION takes WITH ERROR or WITH CLEANUP, not both.",
                                       near="CLEANUP")
        self._write(lambda ctx: dialogs.end_conversation(
            ctx, handle, error=error, description=description, cleanup=cleanup))

    def begin_conversation_timer(self, handle: object, timeout: float) -> None:
        """BEGIN CONVERSATION TIMER: a DialogTimer message arrives ``timeout`` seconds from now.

        ``timeout`` is seconds, 0 up to an ``int``'s range, and no later than the
        dialog's lifetime (8410). Takes the conversation's group lock.
        """
        handle = arguments.optional_guid(handle, "conversation handle")
        seconds = arguments.seconds(timeout, "the conversation timer TIMEOUT")
        self._write(lambda ctx: dialogs.begin_conversation_timer(ctx, handle, seconds))

    def get_transmission_status(self, handle: object) -> str:
        """GET_TRANSMISSION_STATUS(handle): why the last attempt to deliver a message of
        this conversation failed; ``""`` when it did not, when none was made, or for an
        unknown handle. Reads only; takes no lock."""
        checked = arguments.optional_guid(handle, "conversation handle")
        return self._call(lambda ctx: dialogs.transmission_status(ctx, checked))

    # -- running verbs ---------------------------------------------------------------

    def run(self, verb: Callable[[TxContext], T]) -> T:
        """Run ``verb`` in this transaction (used by the database object's DDL methods)."""
        return self._write(verb)

    def read(self, verb: Callable[[TxContext], T]) -> T:
        """Run ``verb``, which only reads, in this transaction (a snapshot's too)."""
        return self._call(verb)

    def _write(self, verb: Callable[[TxContext], T]) -> T:
        self._refuse_in_snapshot()
        result = self._call(verb)
        self._wrote = True
        return result

    def _call(self, verb: Callable[[TxContext], T]) -> T:
        with self._busy:
            if self._doomed:
                raise BrokerError(3930, "The current transaction cannot be committed and cannot support "
                                        "operations that write to the log file. Roll back the transaction.")
            try:
                return verb(self._context())
            except BrokerError:
                raise  # raised before any write: the transaction stays usable
            except self._state.database_errors as exc:
                self._doomed = True
                raise as_broker_error(exc) from exc
            except BaseException:
                self._doomed = True
                raise

    def _watched(self, queue: str, unfiltered: bool, call: Callable[[], T]) -> T:
        """Run a RECEIVE through this thread's receive watcher, if it has one."""
        watcher = getattr(self._state.receive_watch, "watcher", None)
        return call() if watcher is None else watcher(queue, unfiltered, call)

    def _refuse_in_snapshot(self) -> None:
        if self._snapshot:
            raise BrokerError(3906, "Failed to update database because the database is read-only. "
                                    "(a snapshot only reads: use db.transaction() to change anything)")

    def _waitfor(self, queue: str, timeout: float | None, attempt: Callable[[TxContext], T], empty: T) -> T:
        self._refuse_in_snapshot()  # RECEIVE and GET CONVERSATION GROUP take and lock
        if timeout is None or timeout == 0:
            return self._kept(self._call(attempt))
        deadline = float("inf") if timeout == FOREVER else time.monotonic() + timeout
        while True:
            # Read before the attempt: a commit after it then ends the wait at once. The
            # catalog is read again after it too: a DDL commit (a queue disabled) that
            # came between the transaction's snapshot and ``seen`` would otherwise go
            # unseen until the timeout.
            seen = self._call(lambda ctx: self._state.notifier.counter(receiving.receivable_queue(ctx, queue).id))
            # Other processes' commits must reach the notifier before each look. After
            # ``seen``: a listener that failed before it (its wake-up counted in ``seen``)
            # is replaced here, one that fails later wakes the wait.
            self._listen()
            self._call(TxContext.refresh_catalog)
            result = self._kept(self._call(attempt))
            if result is not None and result != []:
                return result
            if time.monotonic() >= deadline or self._stopping():
                return empty
            self._wait(queue, seen, deadline)

    def _kept(self, result: T) -> T:
        """A RECEIVE's rows or GET CONVERSATION GROUP's group: taken and locked, they count
        as written, so that a later WAITFOR of the transaction keeps them (it would
        otherwise roll back to wait, and the rows would be received again)."""
        if result is not None and result != []:
            self._wrote = True
        return result

    def _listen(self) -> None:
        try:
            self._state.backend.start_listening(self._state.engine, self._state.notifier)
        except self._state.database_errors as exc:
            raise as_broker_error(exc) from exc

    def _stopping(self) -> bool:
        """Whether this thread is an activated reader whose runtime is stopping: its WAITFOR
        ends as if it timed out, as SQL Server ends activated tasks at shutdown."""
        stopping = getattr(self._state.receive_watch, "stopping", None)
        return stopping is not None and stopping.is_set()

    def _wait(self, queue_name: str, seen: int, deadline: float) -> None:
        """Wait for messages, without holding locks whenever that is possible.

        A transaction that has not written rolls its empty attempt back (releasing the
        SQLite write lock, or PostgreSQL's group locks) and begins again when woken.
        One that has written keeps its locks while it waits (see ``broker.storage.backends``).
        """
        with self._busy:
            ctx = self._context()
            queue = receiving.receivable_queue(ctx, queue_name)
            timer = receiving.next_timer(ctx, queue)
            if timer is not None:
                deadline = min(deadline, time.monotonic() + max(0.0, (timer - ctx.now()).total_seconds()))
            owned = self._owned
            released = None if self._wrote or owned is None else self._release(owned)
        backend, notifier = self._state.backend, self._state.notifier
        if released is None:
            backend.wait_holding(notifier, queue.id, seen, deadline)
            return
        member, conn = released
        try:
            backend.wait_released(notifier, queue.id, seen, deadline, conn, queue_table(queue.table_name).name,
                                  ctx.catalog.version)
        finally:
            if member is not None:
                self._state.checkin(conn)

    def _release(self, owned: Connection) -> tuple[Member | None, Connection]:
        """Roll back the empty attempt of a transaction that has written nothing, releasing
        its locks while it waits; the connection to watch for commits on, of this thread's
        (a group's connection goes on with others' work), and the group place it left."""
        member, self._ctx = self._member, None
        if member is None:
            self._end(owned, commit=False)
            return None, owned
        self._member, self._owned = None, None
        self._state.group.rollback(member)  # type: ignore[union-attr]
        return member, self._state.checkout()

    def _context(self) -> TxContext:
        if self._ctx is None:
            if self._closed:  # else a verb would begin a transaction nobody ends
                raise BrokerError(TRANSACTION_ENDED)
            conn = self._connection()
            kept = pending.pending(conn)
            owned = conn is self._owned
            if self._member is not None:  # the group began the transaction (or this one's savepoint)
                kept.begin(self._state.backend.data_version(conn))
            elif not conn.in_transaction():
                # Begin before any prepared statement runs on the driver's cursor: on
                # the broker's own connection the backend may begin on the driver itself
                # (BEGIN IMMEDIATE on SQLite), else through SQLAlchemy.
                if self._snapshot:
                    self._state.backend.begin_snapshot(conn)
                elif not (owned and self._state.backend.begin_on_driver(conn)):
                    conn.begin()
                # Only a connection of the broker's own is known to run nothing else
                # between its transactions: what it kept from the last one may be reused.
                kept.begin(self._state.backend.data_version(conn) if owned else None)
            self._ctx = TxContext(conn, self._state, self._state.catalog_for(conn, kept.catalog_version), kept,
                                  changes_at_begin=self._state.backend.changes(conn) if owned else None,
                                  snapshot=self._snapshot)
        return self._ctx

    def _connection(self) -> Connection:
        if self._joined is not None:
            pending.install(self._joined.engine)  # the caller's engine may not be ours
            return self._joined
        if self._session is not None:
            self._joined = self._session.connection()
            pending.install(self._joined.engine)
            event.listen(self._session, "after_commit", self._notify_after_session_commit, once=True)
            return self._joined
        if self._owned is None:
            group = self._state.group
            if group is not None and not self._snapshot:
                self._member = group.join()
                self._owned = self._member.conn
            else:
                self._owned = self._state.checkout()
        return self._owned

    # -- ending ------------------------------------------------------------------------

    def commit(self) -> None:
        with self._busy:
            self._commit()

    def _commit(self) -> None:
        if self._doomed:
            self.rollback()
            raise BrokerError(3930, "The transaction was doomed by an earlier failure and has been rolled back.")
        ctx = self._ctx
        touched = ctx.touched_queues if ctx is not None else set()
        changed = True
        if self._owned is not None:
            backend, owned = self._state.backend, self._owned
            try:
                if self._member is not None:
                    member, self._member, self._owned = self._member, None, None
                    try:
                        pending.flush(owned)
                    except BaseException:
                        self._state.group.rollback(member)  # type: ignore[union-attr]
                        raise
                    # Read now: other members run on the connection once the turn passes.
                    changes = backend.changes(owned)
                    if ctx is not None:  # current for the next member; dropped if the group's commit fails
                        ctx.kept.committed(ctx.catalog.version)
                    self._state.group.commit(  # type: ignore[union-attr]
                        member, catalog_changed=ctx is not None and ctx.changed_catalog, wrote=self._wrote)
                else:
                    self._end(owned, commit=True)
                    changes = backend.changes(owned)
                    if ctx is not None:
                        ctx.kept.committed(ctx.catalog.version)
            except self._state.database_errors as exc:
                raise as_broker_error(exc) from exc
            if ctx is not None:
                # A transaction that wrote nothing (a look), or that the transmitter wrote
                # (``TxContext.quiet``), wakes no one unless it touched a queue: a runtime
                # woken by its own passes would pass again at once, for ever.
                before = ctx.changes_at_begin
                changed = bool(touched) or not ctx.quiet and (before is None or changes != before)
        self._ctx = None
        if changed:
            self._state.notifier.notify(touched)

    def rollback(self) -> None:
        with self._busy:
            self._rollback()

    def _rollback(self) -> None:
        received = self._ctx.received_queues if self._ctx is not None else set()
        owned = self._owned
        if self._member is not None:
            member, self._member, self._owned = self._member, None, None
            self._state.group.rollback(member)  # type: ignore[union-attr]
        elif owned is not None:
            self._end(owned, commit=False)
        self._ctx = None
        if received and owned is not None:
            self._count_poison_rollback(received)

    def _count_poison_rollback(self, queue_ids: set[int]) -> None:
        """Count this rollback against the queues it received from, in a new transaction."""
        counter = Transaction(self._state)
        try:
            disabled = counter.run(lambda ctx: poison.count_rollback(ctx, queue_ids))
            counter.commit()
        except BaseException:
            counter.rollback()
            raise
        finally:
            counter.close()
        for name in disabled:
            log.warning("queue %s disabled: five consecutive rolled-back RECEIVE transactions", name)
            self._state.events.emit(events.BROKER_QUEUE_DISABLED, queue=name)

    def _end(self, conn: Connection, *, commit: bool) -> None:
        """Commit or roll back the broker's own connection (``end_transaction``), then
        give back the write lock."""
        committed = False
        try:
            interrupted = end_transaction(conn, commit=commit)
            committed = commit
        finally:
            self._state.backend.ended(conn, committed=committed)
        if interrupted is not None:  # after the commit, which stands: made durable above
            raise interrupted

    def close(self) -> None:
        """End this transaction for good: rolled back if it was neither committed nor
        rolled back; its verbs raise 59040 from now on."""
        self._closed = True
        if self._member is not None:  # neither committed nor rolled back (a failed begin): undo it
            self.rollback()
        if self._owned is not None:
            self._state.checkin(self._owned)
            self._owned = None

    def _notify_after_session_commit(self, _session: Session) -> None:
        if self._ctx is not None:
            self._state.notifier.notify(self._ctx.touched_queues)

    @property
    def doomed(self) -> bool:
        """Whether an earlier failure doomed this transaction: it can only roll back
        (T-SQL's XACT_STATE() = -1); ``commit`` raises 3930."""
        return self._doomed

    @property
    def connection(self) -> Connection:
        """The SQLAlchemy connection this transaction runs on (for application SQL).

        Whatever runs on it may have written, so from now on a WAITFOR keeps the write
        lock rather than rolling back to wait.
        """
        self._wrote = True
        return self._context().conn

    def query(self, sql: str, **params: Any) -> list[dict[str, Any]]:
        """Run SQL in this transaction (e.g. ``SELECT * FROM "TargetQueue"``); rows as dicts
        (none for a statement that returns no rows).

        A statement the database refuses dooms the transaction, as any database failure
        inside a verb does (PostgreSQL aborts the transaction anyway). In a snapshot
        (``Broker.snapshot``) a statement that writes is refused with 3906 and dooms it.
        """
        statement = arguments.text(sql, "SQL statement", empty=False)
        for name, value in params.items():  # what no backend can take, refused alike on every one
            if isinstance(value, str):
                arguments.text(value, f"the parameter :{name}")
            elif isinstance(value, int) and not isinstance(value, bool):
                arguments.integer(value, f"the parameter :{name}", sql_type="bigint")
        self._wrote = True

        def run(ctx: TxContext) -> list[dict[str, Any]]:
            result = ctx.conn.execute(text(statement), params)
            rows = [dict(row) for row in result.mappings()] if result.returns_rows else []
            if self._snapshot and self._state.backend.changes(ctx.conn) != ctx.changes_at_begin:
                # SQLite cannot be told to refuse it beforehand (PostgreSQL's READ ONLY does).
                self._doomed = True
                self._refuse_in_snapshot()
            return rows

        return self._call(run)
