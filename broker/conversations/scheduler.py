"""Work that falls due with time: conversation timers, dialog lifetimes, transmission retries.

Every function runs inside the caller's transaction and finds its work through an index
on the deadline (``dialog_timer``, ``lifetime``, ``next_attempt_time``), so the cost of a
pass does not grow with the number of conversations that have nothing due. The runtime's
scheduler calls ``run_due`` on time; RECEIVE and GET CONVERSATION GROUP call the timer and
lifetime parts for their own queue, so a program that never starts the runtime still
sees its DialogTimer and lifetime Error messages.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from sqlalchemy import bindparam, func, or_, select, update

from broker.conversations import endpoints as ep
from broker.conversations.delivery import broker_error, deliver_system_message, retry_held
from broker.conversations.system_messages import DIALOG_TIMER_ID, LIFETIME_EXPIRED
from broker.storage.context import TxContext
from broker.storage.rows import Endpoint
from broker.storage.statements import Prepared

# Transmission retries: a few seconds, doubling, capped near a minute (spec 7.4); the
# first one is scheduled by delivery.FIRST_RETRY when the message is held.
FIRST_RETRY_S = 4
LONGEST_RETRY_S = 64
LIFETIME_TEXT = "The dialog has exceeded the specified LIFETIME."
# Closed target endpoints stay CD this long (replay protection, as SQL Server keeps them).
CLOSED_ENDPOINT_KEPT = timedelta(minutes=30)
# States whose lifetime still matters (the others have ended or already failed).
_OPEN_STATES = ("SO", "SI", "CO", "DI")

_e, _g, _t = ep.endpoints, ep.groups, ep.transmissions
_ON_GROUP = _g.c.conversation_group_id == _e.c.conversation_group_id
# Spelled out, not IN (...): a prepared statement cannot carry an expanding list.
_IS_OPEN = or_(*(_e.c.state == state for state in _OPEN_STATES))
# Several runtimes (and RECEIVEs) may look for the same due work at once: each locks the
# endpoint rows it fires and skips the ones another transaction holds, so nothing fires
# twice (PostgreSQL; SQLite compiles the clause away, its write lock serializes them).
_DUE_TIMERS = Prepared(
    select(_e).where(_e.c.dialog_timer <= bindparam("p_now")).with_for_update(skip_locked=True, of=_e)
)
_DUE_TIMERS_OF_QUEUE = Prepared(
    select(_e).join(_g, _ON_GROUP)
    .where(_e.c.dialog_timer <= bindparam("p_now"), _g.c.queue_id == bindparam("p_queue"))
    .with_for_update(skip_locked=True, of=_e)
)
_EXPIRED = Prepared(
    select(_e).where(_e.c.lifetime <= bindparam("p_now"), _IS_OPEN).with_for_update(skip_locked=True, of=_e)
)
_EXPIRED_OF_QUEUE = Prepared(
    select(_e).join(_g, _ON_GROUP)
    .where(_e.c.lifetime <= bindparam("p_now"), _IS_OPEN, _g.c.queue_id == bindparam("p_queue"))
    .with_for_update(skip_locked=True, of=_e)
)

# The earliest dialog timer and the earliest lifetime in the whole database: two index
# seeks. Ended endpoints' lifetimes count too, which can only make the moment earlier.
_EARLIEST_DUE = Prepared(select(
    select(func.min(_e.c.dialog_timer)).scalar_subquery(), select(func.min(_e.c.lifetime)).scalar_subquery()
))
NEVER = datetime.max.replace(tzinfo=UTC)


@dataclass(slots=True)
class DueWork:
    """What one pass did."""

    timers: list[Endpoint] = field(default_factory=list)
    expired: list[Endpoint] = field(default_factory=list)
    retried: int = 0
    purged: int = 0


def retry_delay(attempts: int) -> timedelta:
    """Wait before the next delivery attempt after ``attempts`` failed ones."""
    return timedelta(seconds=min(FIRST_RETRY_S * 2 ** min(attempts, 8), LONGEST_RETRY_S))


def earliest_due(ctx: TxContext) -> datetime:
    """No dialog timer or lifetime anywhere falls due before this moment (``NEVER``:
    none is set). One statement; it may be earlier than the real next piece of work."""
    row = _EARLIEST_DUE.first(ctx.conn)
    present = [moment for moment in (row or ()) if moment is not None]
    return min(present) if present else NEVER


def fire_due_timers(ctx: TxContext, queue_id: int | None = None) -> list[Endpoint]:
    """Put a DialogTimer on the local queue of every endpoint whose timer expired, and
    clear the timer, in this transaction. Nothing is sent to the far side."""
    now = ctx.now()
    rows = (_DUE_TIMERS.all(ctx.conn, p_now=now) if queue_id is None
            else _DUE_TIMERS_OF_QUEUE.all(ctx.conn, p_now=now, p_queue=queue_id))
    fired = [Endpoint(*row) for row in rows]
    for endpoint in fired:
        ep.set_endpoint(ctx, endpoint.conversation_handle, dialog_timer=None)
        deliver_system_message(ctx, endpoint, DIALOG_TIMER_ID, None)
    return fired


def expire_lifetimes(ctx: TxContext, queue_id: int | None = None) -> list[Endpoint]:
    """Error -8489 to every open endpoint whose dialog outlived its LIFETIME; state ER.

    Each side's endpoint carries the lifetime, so both sides fail, each in its own queue.
    What an expired endpoint still had to send goes at once: the far side refuses it.
    """
    now = ctx.now()
    rows = (_EXPIRED.all(ctx.conn, p_now=now) if queue_id is None
            else _EXPIRED_OF_QUEUE.all(ctx.conn, p_now=now, p_queue=queue_id))
    expired = [Endpoint(*row) for row in rows]
    for endpoint in expired:
        if endpoint.held_messages:
            ep.drop_outbound(ctx, endpoint)
        broker_error(ctx, endpoint, LIFETIME_EXPIRED, LIFETIME_TEXT)
    return expired


def retry_due_transmissions(ctx: TxContext) -> int:
    """Try again the parked inbound messages (their queue was OFF) whose retry time has
    come; back off the rest. Returns how many messages left the transmission queue.

    Outbound messages are the transmitter's (``broker.runtime.transmitter``): it routes
    them, to this database or another.
    """
    now = ctx.now()
    due = ctx.conn.execute(
        select(_t.c.message_id, _t.c.conversation_handle)
        .where(_t.c.next_attempt_time <= now, _t.c.to_conversation_handle.is_not(None))
        .with_for_update(skip_locked=True)
    ).all()
    if not due:
        return 0
    before = _held_count(ctx)
    retry_held(ctx, {row.conversation_handle for row in due})
    still = ctx.conn.execute(
        select(_t.c.message_id, _t.c.attempts).where(_t.c.message_id.in_([row.message_id for row in due]))
    ).all()
    for row in still:
        ctx.conn.execute(update(_t).where(_t.c.message_id == row.message_id).values(
            attempts=row.attempts + 1, next_attempt_time=now + retry_delay(row.attempts + 1)))
    return max(0, before - _held_count(ctx))


def purge_closed_endpoints(ctx: TxContext) -> int:
    """Delete target endpoints closed (CD) more than 30 minutes ago, and their empty groups."""
    cutoff = ctx.now() - CLOSED_ENDPOINT_KEPT
    closed = ep.endpoints_where(ctx, _e.c.closed_date <= cutoff)
    for endpoint in closed:
        ep.delete_endpoint(ctx, endpoint)
    return len(closed)


def run_due(ctx: TxContext) -> DueWork:
    """One scheduler pass over the whole database."""
    return DueWork(timers=fire_due_timers(ctx), expired=expire_lifetimes(ctx),
                   retried=retry_due_transmissions(ctx), purged=purge_closed_endpoints(ctx))


def run_if_due(ctx: TxContext) -> tuple[DueWork, datetime | None]:
    """``run_due`` if its deadline has come, and the next deadline after it. A pass woken
    by a commit (a message arriving, most often) reads only the deadline: the work is
    looked for only when some is due (on a snapshot, ``TxContext.writing`` then asks for
    a transaction that writes)."""
    deadline = next_deadline(ctx)
    if deadline is None or deadline > ctx.now():
        return DueWork(), deadline
    ctx.writing()
    return run_due(ctx), next_deadline(ctx)


def next_deadline(ctx: TxContext) -> datetime | None:
    """The earliest moment at which ``run_due`` will have something to do."""
    oldest_closed = ctx.conn.execute(select(func.min(_e.c.closed_date))).scalar()
    candidates = [
        None if oldest_closed is None else oldest_closed + CLOSED_ENDPOINT_KEPT,
        ctx.conn.execute(select(func.min(_e.c.dialog_timer))).scalar(),
        ctx.conn.execute(select(func.min(_e.c.lifetime)).where(_e.c.state.in_(_OPEN_STATES))).scalar(),
        ctx.conn.execute(select(func.min(_t.c.next_attempt_time))
                         .where(_t.c.to_conversation_handle.is_not(None))).scalar(),
    ]
    present = [moment for moment in candidates if moment is not None]
    return min(present) if present else None


def _held_count(ctx: TxContext) -> int:
    return int(ctx.conn.execute(select(func.count()).select_from(_t)).scalar_one())
