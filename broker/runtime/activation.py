"""Activation (spec 9): queue monitors that start readers, and QUEUE_ACTIVATION for external ones.

The runtime calls :meth:`ActivationManager.evaluate` on every pass (on every commit to the
database, and at least once a second). One transaction per pass looks at every queue:

* A queue with activation STATUS ON and a PROCEDURE_NAME has a **queue monitor**.
  Activation is necessary when the queue has ready messages and either no reader is
  running, or this runtime's readers have received since its last start and none of
  their RECEIVEs came back empty for ``FEW_SECONDS`` (they are falling behind). A
  reader (``broker.runtime.readers``) is started then, while fewer than MAX_QUEUE_READERS run
  (counted by their ``sys.dm_broker_activated_tasks`` rows, so across runtimes), and only
  if the ready messages span at least as many conversation groups as readers run: a
  backlog on one conversation gets one extra reader, no more. The monitor's state
  (INACTIVE, NOTIFIED, RECEIVES_OCCURRING) is kept in ``sys.dm_broker_queue_monitors``,
  written only when it changes.
* A queue without a procedure gets **external activation**: ``events.QUEUE_ACTIVATION``
  when a message arrives on an empty queue, and again whenever it has stayed non-empty for
  ``FEW_SECONDS`` without a RECEIVE (seen as its ready count falling) or a notification.

Nothing is activated on a queue whose STATUS is OFF.
"""

from __future__ import annotations

import functools
import logging
import math
import threading
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import delete, func, insert, select, update

from broker import events
from broker.errors import BrokerError
from broker.runtime.readers import (
    Activity,
    Reader,
    delete_tasks,
    forget_dead_tasks,
    grace_left,
    resolve_procedure,
    task_count,
)
from broker.storage.catalog import QueueInfo
from broker.storage.context import TxContext
from broker.storage.models import QueueMonitor
from broker.storage.queue_tables import queue_statements, queue_table
from broker.storage.served import ServedDatabase, look_then_write
from broker.storage.statements import Prepared

log = logging.getLogger("broker.activation")

# Spec 9.1's "few seconds": readers whose RECEIVEs have not come back empty for this long
# are falling behind; also the pause after a reader fails, and between QUEUE_ACTIVATION events.
FEW_SECONDS = 5.0
# How long a PROCEDURE_NAME that cannot be imported is left alone before trying again.
RETRY_MISSING_S = 60.0
# A reader inside one RECEIVE for this long is waiting for messages (tasks_waiting), not
# merely for the database lock.
WAITING_S = 0.2
# How often a runtime checks that its session's mark is still held (``Backend.renew_session``;
# PostgreSQL: one round trip on the session's connection): at most this often, on the
# runtime's passes, which come at least this often while its readers run. Well within
# ``Backend.session_grace``.
SESSION_CHECK_S = 0.5

INACTIVE = "INACTIVE"
NOTIFIED = "NOTIFIED"
RECEIVES_OCCURRING = "RECEIVES_OCCURRING"
MAX_READERS_ZERO = 9648

# state, last_empty_rowset_time, last_activated_time, tasks_waiting
MonitorRow = tuple[str, datetime | None, datetime | None, int]


@dataclass(eq=False)
class Monitor:
    """The queue monitor of one queue with internal activation (its row is written on change)."""

    queue: QueueInfo
    activity: Activity = field(default_factory=Activity)
    readers: set[Reader] = field(default_factory=set)
    activated_at: float = -math.inf  # time.monotonic() of the last start
    last_activated_time: datetime | None = None
    receives_at_activation: int = 0
    checked_at: float = -math.inf  # last refusal for lack of conversation groups
    blocked: str | None = None  # a procedure that failed: not started again before blocked_until
    blocked_until: float = -math.inf
    warned_zero: bool = False  # 9648 logged for the current MAX_QUEUE_READERS = 0
    written: MonitorRow | None = None


@dataclass(eq=False)
class Watch:
    """External activation of one queue without a procedure."""

    ready: int = 0  # ready messages at the last look
    since: float = -math.inf  # start of the current few seconds (arrival, RECEIVE or notification)


@dataclass(eq=False)
class Plan:
    """What one look decided; carried out once its transaction has committed."""

    starts: list[tuple[Monitor, Reader]] = field(default_factory=list)
    notify: list[QueueInfo] = field(default_factory=list)
    rows: list[tuple[Monitor, MonitorRow]] = field(default_factory=list)
    monitored: frozenset[int] | None = None
    again: float | None = None

    def wake(self, seconds: float) -> None:
        """Ask for another look within ``seconds``."""
        seconds = max(0.0, seconds)
        self.again = seconds if self.again is None else min(self.again, seconds)


class ActivationManager:
    """Queue monitors and external activation of one database, driven by its runtime."""

    def __init__(self, db: ServedDatabase, stopping: threading.Event) -> None:
        self.db = db
        self._stopping = stopping
        self._monitors: dict[int, Monitor] = {}
        self._watches: dict[int, Watch] = {}
        self._monitored: frozenset[int] | None = None  # queues whose rows the view holds
        self._lock = threading.Lock()  # readers and failures (reader threads end on their own)
        self._pass = threading.Lock()  # one look at a time; none while stop() cleans up
        self._cleaned = False
        # The ``spid`` of this runtime's task rows, alive until stop() (``Backend.session``).
        self._session = ExitStack()
        self._session_id: int | None = None
        self._session_checked = -math.inf  # time.monotonic() of the last renew_session
        self._session_lost: int | None = None  # a lost session whose readers' rows are still to be moved
        self._ended_seen: dict[int, float] = {}  # other runtimes' sessions seen ended, and since when

    def evaluate(self) -> float | None:
        """Look at every queue; seconds until it wants to look again (None: no need).

        The look runs in one transaction (its reads, the task rows of new readers, the
        monitor rows that changed); readers start and events go out after it commits.
        It is tried on a snapshot first, which takes no lock: most looks change nothing,
        and they must not queue for the write lock behind the workers (or hold them up).
        One that finds something to write (``TxContext.writing``) stops there, before
        changing anything it would decide differently on a second try, and runs again
        in a transaction that writes, deciding afresh under the write lock (so runtimes
        together never start more than MAX_QUEUE_READERS).
        """
        with self._pass:
            if self._stopping.is_set():
                return None
            self._keep_session()
            plan = look_then_write(self.db, self._look)
            self._carry_out(plan)
            with self._lock:
                reading = any(monitor.readers for monitor in self._monitors.values())
            if reading and self.db.state.backend.session_grace:
                plan.wake(SESSION_CHECK_S)  # their rows count only while the session is held
            return plan.again

    def stop(self, timeout: float) -> None:
        """Start no more readers; wait up to ``timeout`` for the running ones to return.

        A reader's transactions finish or roll back by themselves: nothing is lost. Then one
        transaction removes this runtime's monitor rows and the task rows of readers still
        running (the others removed their own).
        """
        deadline = time.monotonic() + timeout
        self._stopping.set()
        self.db.state.notifier.notify_all()  # readers waiting in RECEIVE ... WAITFOR look at it
        locked = self._pass.acquire(timeout=timeout)
        try:
            with self._lock:
                readers = [reader for monitor in self._monitors.values() for reader in monitor.readers]
            for reader in readers:
                reader.join(max(0.0, deadline - time.monotonic()))
            running = [reader for reader in readers if reader.alive]
            if running:
                log.warning("%d activation reader(s) still running after %.1f s", len(running), timeout)
            self._remove_rows(running)
            self._session.close()
            self._session_id = None
        finally:
            if locked:
                self._pass.release()

    def _keep_session(self) -> None:
        """Check, at most every ``SESSION_CHECK_S``, that this runtime's session is still
        marked running (``Backend.renew_session``). If its mark was lost (PostgreSQL: the
        connection holding the advisory lock ended while the runtime runs), it is taken
        again at once, and every running reader's task row is given the session number
        now held, or inserted again if another runtime removed it meanwhile. Raises (the
        pass fails; the next one tries again) while the mark cannot be taken: no reader
        is started meanwhile."""
        if self._session_id is None:
            return
        now = time.monotonic()
        if now - self._session_checked < SESSION_CHECK_S:
            return
        number = self.db.state.backend.renew_session(self.db.engine, self._session_id)
        if number is not None:
            self._session_lost, self._session_id = self._session_id, number
        if self._session_lost is not None:  # again on the next pass if a row could not be written
            with self._lock:
                readers = [reader for monitor in self._monitors.values() for reader in monitor.readers]
            restored = sum(reader.keep_row(self._session_id) for reader in readers)
            lost, self._session_lost = self._session_lost, None
            if restored:
                log.warning("runtime session %d was lost and another runtime removed %d task row(s) of its "
                            "running readers; restored under session %d", lost, restored, self._session_id)
            else:
                log.warning("runtime session %d was lost and taken again as %d", lost, self._session_id)
        self._session_checked = now

    def _session_of_tasks(self) -> int:
        if self._session_id is None:
            self._session_id = self._session.enter_context(self.db.state.backend.session(self.db.engine))
        return self._session_id

    # -- one look ------------------------------------------------------------------------

    def _look(self, ctx: TxContext) -> Plan:
        """Decide for every queue, in the caller's transaction."""
        now = time.monotonic()
        plan = Plan()
        if not self._cleaned or self._ended_seen:
            forget_dead_tasks(ctx, self._ended_seen)
        waiting = grace_left(self._ended_seen, self.db.state.backend.session_grace)
        if waiting is not None:
            plan.wake(waiting)  # look again when their rows may go
        queues = list(ctx.catalog.queues.values())
        internal = [q for q in queues if q.activation_enabled and q.activation_procedure]
        for queue in internal:
            monitor = self._monitors[queue.id] = self._monitors.get(queue.id) or Monitor(queue)
            self._look_internal(ctx, monitor, queue, now, plan)
        monitored = frozenset(q.id for q in internal)
        if monitored != self._monitored:
            stale = QueueMonitor.queue_id.not_in(monitored)
            if ctx.conn.execute(select(QueueMonitor.queue_id).where(stale).limit(1)).first() is not None:
                ctx.writing()
                ctx.conn.execute(delete(QueueMonitor).where(stale))
            plan.monitored = monitored
        # Nothing is written from here on: the external watches change as they decide.
        watches: dict[int, Watch] = {}
        for queue in queues:
            if not queue.activation_procedure:
                watch = watches[queue.id] = self._watches.get(queue.id) or Watch()
                self._look_external(ctx, queue, watch, now, plan)
        self._watches = watches
        with self._lock:
            self._monitors = {i: m for i, m in self._monitors.items() if i in monitored or m.readers}
        for queue_id, monitor in self._monitors.items():
            if queue_id not in monitored:
                monitor.written = None  # its row is gone; rewrite it if activation comes back
        return plan

    def _look_internal(self, ctx: TxContext, monitor: Monitor, queue: QueueInfo, now: float, plan: Plan) -> None:
        """Start a reader if activation is necessary and allowed; write the monitor's row if it changed."""
        monitor.queue = queue
        ready = queue.receive_enabled and queue_statements(queue.table_name).next_ready.first(ctx.conn) is not None
        reader = self._activate(ctx, monitor, now, plan) if ready else None
        with self._lock:
            readers = list(monitor.readers)
        if reader is not None:
            plan.starts.append((monitor, reader))
            state = NOTIFIED
        elif not ready or not readers:
            state = INACTIVE
        elif monitor.activity.receives == monitor.receives_at_activation:
            state = NOTIFIED
        else:
            state = RECEIVES_OCCURRING
        waiting = sum(1 for r in readers if (since := r.waiting_since) is not None and now - since >= WAITING_S)
        row: MonitorRow = (state, monitor.activity.last_empty_time, monitor.last_activated_time, waiting)
        if row != monitor.written:
            _write_monitor_row(ctx, queue.id, row)
            plan.rows.append((monitor, row))

    def _activate(self, ctx: TxContext, monitor: Monitor, now: float, plan: Plan) -> Reader | None:
        """A new reader (its task row inserted in this transaction) or None, for a queue with ready messages."""
        queue = monitor.queue
        procedure_name = queue.activation_procedure
        assert procedure_name is not None  # monitors exist only for queues with a procedure
        if queue.max_readers == 0:
            if not monitor.warned_zero:
                log.error("error %d: The queue '%s' has been enabled for activation, but the MAX_QUEUE_READERS "
                          "is zero. No procedures will be activated.", MAX_READERS_ZERO, queue.name)
                monitor.warned_zero = True
            return None
        monitor.warned_zero = False
        running = self._running(ctx, monitor)
        with self._lock:
            blocked_until = monitor.blocked_until if monitor.blocked == procedure_name else -math.inf
        if running >= queue.max_readers:
            return None
        if now < blocked_until:
            plan.wake(blocked_until - now)
            return None
        if running and not self._behind(ctx, monitor, running, now, plan):
            return None
        try:
            procedure = resolve_procedure(procedure_name, self.db)
        except BrokerError as exc:
            log.error("error %d: activation on queue '%s' failed: %s (trying again in %.0f s)",
                      exc.number, queue.name, exc.message, RETRY_MISSING_S)
            with self._lock:
                monitor.blocked, monitor.blocked_until = procedure_name, now + RETRY_MISSING_S
            return None
        reader = Reader(self.db, queue.name, queue.id, procedure_name, procedure, monitor.activity,
                        functools.partial(self._reader_ended, monitor), self._session_of_tasks(), self._stopping)
        reader.insert_row(ctx)
        monitor.activated_at, monitor.last_activated_time = now, reader.start_time
        monitor.receives_at_activation = monitor.activity.receives
        return reader

    def _running(self, ctx: TxContext, monitor: Monitor) -> int:
        """Readers running on the queue in every runtime (their task rows), read in the caller's transaction.

        Runtimes take turns with the write lock, so together they never exceed
        MAX_QUEUE_READERS. With other processes' rows, rows of processes that have died
        are removed first: counted, they would never receive, and ``_behind`` would wait
        for them for good.
        """
        with self._lock:
            ours = len(monitor.readers)
        rows = task_count(ctx, monitor.queue.id)
        if rows > ours and forget_dead_tasks(ctx, self._ended_seen):
            rows = task_count(ctx, monitor.queue.id)
        # A reader deletes its row just before it leaves monitor.readers.
        return max(ours, rows)

    def _behind(self, ctx: TxContext, monitor: Monitor, running: int, now: float, plan: Plan) -> bool:
        """Whether running readers need help (spec 9.1, second case), read in the caller's transaction.

        They must have received since the last start (NOTIFIED waits for that), and no
        RECEIVE of theirs has come back empty for ``FEW_SECONDS``. Group locking: another
        reader helps only if the ready messages span at least as many conversation groups
        as readers run, so a backlog on one conversation gets one extra reader, no more.
        """
        if monitor.activity.receives == monitor.receives_at_activation:
            return False
        quiet = max(monitor.activity.last_empty, monitor.activated_at, monitor.checked_at)
        if now - quiet < FEW_SECONDS:
            plan.wake(quiet + FEW_SECONDS - now)
            return False
        if _ready_groups(ctx, monitor.queue, running) < running:
            monitor.checked_at = now
            plan.wake(FEW_SECONDS)
            return False
        return True

    def _look_external(self, ctx: TxContext, queue: QueueInfo, watch: Watch, now: float, plan: Plan) -> None:
        """Decide whether to emit QUEUE_ACTIVATION for a queue without a procedure."""
        ready = _ready_count(ctx, queue) if queue.receive_enabled else 0
        previous, watch.ready = watch.ready, ready
        if ready == 0:
            return
        if previous == 0 or (ready >= previous and now - watch.since >= FEW_SECONDS):
            plan.notify.append(queue)  # a message arrived on an empty queue, or nobody has received for a while
            watch.since = now
        elif ready < previous:
            watch.since = now  # a RECEIVE: someone is at work, give them a few seconds
        plan.wake(watch.since + FEW_SECONDS - now)

    def _carry_out(self, plan: Plan) -> None:
        """After the look's commit: remember written rows, start readers, emit events."""
        for monitor, row in plan.rows:
            monitor.written = row
        if plan.monitored is not None:
            self._monitored = plan.monitored
        self._cleaned = True
        for monitor, reader in plan.starts:
            with self._lock:
                monitor.readers.add(reader)
            reader.start()
            log.info("activated %s on queue %s", reader.procedure_name, reader.queue_name)
            self.db.events.emit(events.READER_STARTED, queue=reader.queue_name, procedure=reader.procedure_name)
        for queue in plan.notify:
            log.debug("QUEUE_ACTIVATION on queue %s", queue.name)
            self.db.events.emit(events.QUEUE_ACTIVATION, queue=queue.name, queue_id=queue.id)

    def _reader_ended(self, monitor: Monitor, reader: Reader) -> None:
        """Called by a reader's thread as it ends; a failed procedure waits a few seconds."""
        failed = reader.failed or not reader.received
        if failed and not reader.failed:
            log.warning("the activated proc '%s' on queue '%s' returned without a RECEIVE; treated as failed",
                        reader.procedure_name, reader.queue_name)
        with self._lock:
            monitor.readers.discard(reader)
            if failed:
                monitor.blocked, monitor.blocked_until = reader.procedure_name, time.monotonic() + FEW_SECONDS

    def _remove_rows(self, running: list[Reader]) -> None:
        """Delete this runtime's monitor rows and the task rows of ``running`` (one transaction)."""
        monitored = self._monitored or frozenset()
        if not monitored and not running:
            return  # nothing to remove: no write transaction to wait for
        try:
            with self.db.transaction() as tx:
                tx.run(lambda ctx: ctx.conn.execute(delete(QueueMonitor).where(QueueMonitor.queue_id.in_(monitored))))
                tx.run(lambda ctx: delete_tasks(ctx, [reader.task_id for reader in running]))
        except Exception:
            log.exception("could not remove the activation rows of this runtime")
            return
        self._monitored = None
        for monitor in self._monitors.values():
            monitor.written = None


@functools.cache
def _ready_count_statement(table_name: str) -> Prepared:
    table = queue_table(table_name)
    return Prepared(select(func.count()).select_from(table).where(table.c.status == 1))


def _ready_count(ctx: TxContext, queue: QueueInfo) -> int:
    """Ready messages in a queue (an index count; every pass runs it for every watched queue)."""
    return int(_ready_count_statement(queue.table_name).scalar(ctx.conn))


def _ready_groups(ctx: TxContext, queue: QueueInfo, limit: int) -> int:
    """How many conversation groups hold ready messages, counting up to ``limit``."""
    table = queue_table(queue.table_name)
    groups = select(table.c.conversation_group_id).where(table.c.status == 1).distinct().limit(limit).subquery()
    return int(ctx.conn.execute(select(func.count()).select_from(groups)).scalar_one())


def _write_monitor_row(ctx: TxContext, queue_id: int, row: MonitorRow) -> None:
    """Insert or update one sys.dm_broker_queue_monitors row in the caller's transaction."""
    ctx.writing()
    state, last_empty, last_activated, waiting = row
    values = {"state": state, "last_empty_rowset_time": last_empty, "last_activated_time": last_activated,
              "tasks_waiting": waiting}
    if not ctx.conn.execute(update(QueueMonitor).where(QueueMonitor.queue_id == queue_id).values(values)).rowcount:
        ctx.conn.execute(insert(QueueMonitor).values(queue_id=queue_id, **values))
