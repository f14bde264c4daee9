"""The sender's half of the dialog protocol: the transmission queue's outbound messages.

A message for another database waits in its sender's transmission queue until the
destination acknowledges it. The transmitter (``broker.runtime.transmitter``) reads the
due ones (:func:`due_messages`), routes them, sends them as frames, and settles the
receipts here in the sender's transaction (:func:`settle`): an acknowledged message
leaves the queue (the first acknowledgement names the far side's broker instance, and an
endpoint that has ended closes once its EndDialog or Error and every message before it
are acknowledged), a refused one waits
with the reason and a growing back-off, a broker error ends this side of the dialog.

A large message for another instance goes in fragments (:func:`frames_in_fragments`),
and its destination answers each one. While it is incomplete there, the message stays,
and the queue records how many fragments the destination holds and which destination
(broker instance) that is: the next attempt to that destination starts at the first
fragment it lacks, at once when the last attempt got further than the one before, after
a back-off when it did not. The first such answer also names the far side's broker
instance, which now holds the dialog's target endpoint.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any, NamedTuple, cast

from sqlalchemy import Table, bindparam, case, delete, func, select, update

from broker.conversations import endpoints as ep
from broker.conversations.delivery import ERROR_RECEIVED, broker_error, retry_held
from broker.conversations.frames import Delivery, Kind, MessageFrame, Receipt, fragments_of, in_one_fragment
from broker.conversations.scheduler import retry_delay
from broker.storage.catalog import Catalog
from broker.storage.context import TxContext
from broker.storage.models import RemoteServiceBinding
from broker.storage.statements import Prepared

_t, _e = ep.transmissions, ep.endpoints
_bindings = cast(Table, RemoteServiceBinding.__table__)
_DUE_COLUMNS = (
    _t.c.message_id, _t.c.conversation_handle, _t.c.to_service_name, _t.c.to_broker_instance,
    _t.c.from_service_name, _t.c.service_contract_id, _t.c.message_sequence_number, _t.c.message_type_id,
    _t.c.is_conversation_error, _t.c.is_end_of_dialog, _t.c.message_body, _t.c.attempts,
    _e.c.conversation_id, _e.c.is_initiator, _e.c.lifetime, _e.c.state, _e.c.far_broker_instance,
    _e.c.outbound_session_key_identifier, _t.c.fragments_held, _t.c.fragments_held_by,
)
DELETE_CHUNK = 250  # message ids per DELETE ... IN (...), repeated to fill the last
# The status of a message sent to another instance that came back without a receipt (the
# frames were lost or dropped on the way, or forwarded and not answered), or whose
# fragments got no further: it goes again after a back-off.
NOT_ACKNOWLEDGED = "The message was sent to the remote instance but has not been acknowledged yet."


class OutboundMessage(NamedTuple):
    """A message in the transmission queue, with what routing and its frame need (a
    named tuple: made from each row the transmitter reads, so made cheaply)."""

    message_id: int
    conversation_handle: uuid.UUID
    to_service: str
    to_broker: str | None
    from_service: str
    contract_id: int
    sequence: int
    message_type_id: int
    is_error: bool
    is_end: bool
    body: bytes | None
    attempts: int
    conversation_id: uuid.UUID
    from_initiator: bool
    lifetime: datetime
    state: str
    far_broker: str | None
    session_key: uuid.UUID | None  # set when the dialog asked for ENCRYPTION = ON
    fragments_held: int = 0  # how many of its fragments the broker instance ``fragments_held_by`` holds
    fragments_held_by: str | None = None

    @property
    def kind(self) -> Kind:
        return "error" if self.is_error else "end" if self.is_end else "message"

    @property
    def destination_instance(self) -> str | None:
        """The broker instance the message is for: the one it was routed to before, else
        the one the dialog knows (pinned at BEGIN DIALOG, or named by an acknowledgement)."""
        return self.to_broker or self.far_broker

    def first_fragment(self, destination: str) -> int:
        """The first fragment to send to the broker instance ``destination`` ("" when not
        known): the first it does not hold yet."""
        return self.fragments_held if destination and destination == self.fragments_held_by else 0


def due_messages(ctx: TxContext, limit: int, after: int = 0) -> list[OutboundMessage]:
    """Outbound messages due for an attempt, in the order they go out: by message id,
    within each priority from the highest when HONOR_BROKER_PRIORITY is ON; only those
    whose message id is above ``after`` (the ones below are on their way). Reads only."""
    statement = _DUE_BY_PRIORITY if ctx.catalog.honor_broker_priority else _DUE
    return list(map(OutboundMessage._make,
                    statement.all(ctx.conn, p_now=ctx.now(), p_limit=limit, p_after=after)))


def destinations(ctx: TxContext) -> list[dict[str, Any]]:
    """The transmission queue counted by destination (``to_service_name``,
    ``to_broker_instance``) and ``transmission_status``, in that order, without reading
    bodies. Reads only."""
    keys = (_t.c.to_service_name, _t.c.to_broker_instance, _t.c.transmission_status)
    rows = ctx.conn.execute(select(*keys, func.count().label("count")).group_by(*keys).order_by(*keys))
    return [dict(row._mapping) for row in rows]


def bound_services(ctx: TxContext) -> frozenset[str]:
    """The remote services this database has a remote service binding for (dialog
    security, spec 1.7)."""
    return frozenset(ctx.conn.execute(select(_bindings.c.remote_service_name)).scalars())


def next_due(ctx: TxContext) -> datetime | None:
    """The earliest moment an outbound message waiting here is due again (None: none)."""
    moment: datetime | None = _NEXT_DUE.scalar(ctx.conn)
    return moment


def frames_of(catalog: Catalog, messages: Sequence[OutboundMessage], destination: str | None) -> list[MessageFrame]:
    """The frames that carry ``messages`` (of the database ``catalog`` describes) to the
    database whose broker instance is ``destination``; None: to another instance, each
    to the broker instance its dialog knows ("" while it knows none)."""
    here = str(catalog.broker_guid)
    contracts = {i: c.name for i, c in catalog.contracts.items()}
    message_types = {i: t.name for i, t in catalog.message_types.items()}
    return [MessageFrame(
        m.message_id, m.conversation_id, m.from_initiator, m.from_service, here, m.to_service,
        destination or m.destination_instance or "",
        contracts[m.contract_id], message_types[m.message_type_id], m.sequence,
        "error" if m.is_error else "end" if m.is_end else "message", m.body, m.lifetime,
    ) for m in messages]


def frames_in_fragments(catalog: Catalog, messages: Sequence[OutboundMessage]) -> list[MessageFrame]:
    """The frames that carry ``messages`` to another instance, each to the broker instance
    its dialog knows: the whole messages first, then those over ``FRAGMENT_BYTES`` in
    fragments (so that they hold none of the small ones up), each from the first
    fragment its destination does not hold yet."""
    whole: list[MessageFrame] = []
    parts: list[MessageFrame] = []
    for message, frame in zip(messages, frames_of(catalog, messages, None), strict=True):
        if in_one_fragment(frame):  # the hot path: no list per message
            whole.append(frame)
        else:
            parts += fragments_of(frame, message.first_fragment(frame.to_broker))
    return whole + parts


def claim(ctx: TxContext, handles: Iterable[uuid.UUID]) -> set[uuid.UUID]:
    """Lock, without waiting, the conversation groups and endpoints of these handles, in
    the order SEND takes them (group, then endpoint); the handles locked. The transmitter
    settles only those: it never waits for an application's transaction, so it never
    deadlocks with one. What it skips it settles in a later pass (the destination, which
    already has those messages, acknowledges them again). On SQLite the write lock
    covers every row: all are locked."""
    wanted = sorted(set(handles))
    if not wanted or not ctx.state.backend.row_locks:
        return set(wanted)
    groups = ep.groups
    of_wanted = select(_e.c.conversation_group_id).where(_e.c.conversation_handle.in_(wanted))
    held_groups = list(ctx.conn.execute(
        select(groups.c.conversation_group_id).where(groups.c.conversation_group_id.in_(of_wanted))
        .order_by(groups.c.conversation_group_id).with_for_update(skip_locked=True)).scalars())
    return set(ctx.conn.execute(
        select(_e.c.conversation_handle)
        .where(_e.c.conversation_handle.in_(wanted), _e.c.conversation_group_id.in_(held_groups))
        .order_by(_e.c.conversation_handle).with_for_update(skip_locked=True)).scalars())


def settle(ctx: TxContext, delivery: Delivery, sent: dict[int, OutboundMessage]) -> int:
    """Apply the destination's receipts in the sender's transaction; how many messages
    left the transmission queue. ``sent`` holds the messages to settle (claimed).

    A message sent in fragments has a receipt per fragment, given in order: it is
    acknowledged if any of them says so (the destination has it whole, or discarded
    it); else the last count of fragments held says where the next attempt starts, and
    the last receipt whether it is refused with a reason."""
    acknowledged: dict[int, None] = {}  # in the order given
    others: dict[int, list[Receipt]] = {}  # receipts that are not a plain acknowledgement
    for receipt in delivery.receipts:
        if receipt.message_id not in sent:
            continue
        if receipt.acknowledged:
            acknowledged[receipt.message_id] = None
        if not receipt.acknowledged or receipt.error is not None:
            others.setdefault(receipt.message_id, []).append(receipt)
    gone = _forget(ctx, list(acknowledged), delivery.broker_instance)
    # An ended endpoint (DO) closes once the far side has its EndDialog / Error and every
    # message before it: an EndDialog may be acknowledged ahead of an earlier message (one
    # still arriving in fragments, or in a batch that was lost), which must still go.
    for handle in _ended_among(ctx, {sent[message_id].conversation_handle for message_id in gone}):
        endpoint = ep.find_endpoint(ctx, handle)
        if endpoint is not None and endpoint.state == "DO" and not _holds_outbound(ctx, handle):
            ep.close_endpoint(ctx, endpoint)
    for message_id, receipts in others.items():
        message, last = sent[message_id], receipts[-1]
        if message_id not in acknowledged:
            held = next((r.fragments_held for r in reversed(receipts) if r.fragments_held is not None), None)
            further = held is not None and _count_held(ctx, message, held, delivery.broker_instance)
            if last.fragments_held is None:
                wait(ctx, [message], last.reason)
            elif not further:
                wait(ctx, [message], NOT_ACKNOWLEDGED)
        error = next((r.error for r in receipts if r.error is not None), None)
        if error is not None:
            endpoint = ep.find_endpoint(ctx, message.conversation_handle)
            if endpoint is not None:
                broker_error(ctx, endpoint, error.code, error.description)
    return len(gone)


def _ended_among(ctx: TxContext, handles: set[uuid.UUID]) -> list[uuid.UUID]:
    """Which of ``handles`` name endpoints that have ended (DO), in one query: the few
    that may close, out of every dialog a batch settles."""
    if not handles:
        return []
    return sorted(ctx.conn.execute(select(_e.c.conversation_handle).where(
        _e.c.conversation_handle.in_(handles), _e.c.state == "DO")).scalars())


def _holds_outbound(ctx: TxContext, handle: uuid.UUID) -> bool:
    """Whether the endpoint ``handle`` still has messages of its own to send."""
    return ctx.conn.execute(select(_t.c.message_id).where(
        _t.c.conversation_handle == handle, _t.c.to_conversation_handle.is_(None)).limit(1)).first() is not None


def _count_held(ctx: TxContext, message: OutboundMessage, held: int, far_broker: str) -> bool:
    """Record that ``far_broker`` holds the first ``held`` fragments of ``message`` (not
    all: the message stays); whether that is further than the last count.

    Further: the count goes up (never down: another transmitter may have settled a later
    answer already), the rest may go at once (no failed attempt is counted), and the
    dialog's far side is that broker instance from now on, since it holds the target
    endpoint. Not further: the count is set to what the destination holds (fewer, when
    it lost some: the next attempt starts there), unless another transmitter moved it
    meanwhile."""
    if held > message.first_fragment(far_broker):
        raised = (_t.c.fragments_held_by != far_broker) | _t.c.fragments_held_by.is_(None) | (
            _t.c.fragments_held < held)
        ctx.conn.execute(update(_t).where(_t.c.message_id == message.message_id, raised).values(
            fragments_held=held, fragments_held_by=far_broker, attempts=0))
        ctx.conn.execute(update(_e).where(_e.c.conversation_handle == message.conversation_handle,
                                          _e.c.far_broker_instance.is_(None)).values(far_broker_instance=far_broker))
        return True
    ctx.conn.execute(update(_t).where(
        _t.c.message_id == message.message_id, _t.c.fragments_held == message.fragments_held,
        _t.c.fragments_held_by.is_not_distinct_from(message.fragments_held_by),
    ).values(fragments_held=held, fragments_held_by=far_broker))
    return False


def wait(ctx: TxContext, messages: Iterable[OutboundMessage], reason: str) -> None:
    """These messages stay: say why, and try again after a back-off."""
    now = ctx.now()
    for message in messages:
        ctx.conn.execute(update(_t).where(_t.c.message_id == message.message_id).values(
            transmission_status=reason, attempts=message.attempts + 1,
            next_attempt_time=now + retry_delay(message.attempts + 1)))
        ep.set_endpoint(ctx, message.conversation_handle, transmission_status=reason)


def hold_for_the_application(ctx: TxContext, messages: Iterable[OutboundMessage]) -> None:
    """The dialog received an Error: its messages wait, unsent, until it is ended."""
    for message in messages:
        ctx.conn.execute(update(_t).where(_t.c.message_id == message.message_id).values(
            transmission_status=ERROR_RECEIVED, next_attempt_time=None))


def deliver_here(ctx: TxContext, messages: Sequence[OutboundMessage]) -> int:
    """Messages routed to their own database: deliver them in this transaction, in order
    per dialog; the ones that still cannot go back off. How many left the queue."""
    if not messages:
        return 0
    retry_held(ctx, {m.conversation_handle for m in messages}, routed_here=True)
    remaining = set(ctx.conn.execute(
        select(_t.c.message_id).where(_t.c.message_id.in_([m.message_id for m in messages]))).scalars())
    still = [m for m in messages if m.message_id in remaining]
    now = ctx.now()
    for message in still:
        ctx.conn.execute(update(_t).where(_t.c.message_id == message.message_id).values(
            attempts=message.attempts + 1, next_attempt_time=now + retry_delay(message.attempts + 1)))
    return len(messages) - len(still)


def _forget(ctx: TxContext, message_ids: list[int], far_broker: str) -> set[int]:
    """Delete the acknowledged messages; the endpoints that sent them learn where their
    far side is and how many messages they still hold. The ids actually deleted (another
    transmitter may have settled some already)."""
    gone: dict[int, uuid.UUID] = {}
    for start in range(0, len(message_ids), DELETE_CHUNK):
        chunk = message_ids[start:start + DELETE_CHUNK]
        chunk += chunk[-1:] * (DELETE_CHUNK - len(chunk))  # one statement of a fixed size, prepared once
        gone.update(_DELETE_ACKNOWLEDGED.all(ctx.conn, **{f"p_{n}": m for n, m in enumerate(chunk)}))
    _SETTLE_ENDPOINT.run_many(ctx.conn, [
        {"p_handle": handle, "p_count": count, "p_far": far_broker} for handle, count in Counter(gone.values()).items()
    ])
    return set(gone)


def _due(*order: Any) -> Prepared:
    """Outbound messages due now, in ``order``: a message waits behind every earlier
    message of its dialog that is backing off, so a dialog is never reordered, whatever
    the back-off of each message. (A message with no next attempt is held for a dialog in
    error, whose messages never leave: it needs no check.) The check is one seek in
    ``ix_sb_transmission_queue_handle_due``: only messages backing off match it."""
    earlier = _t.alias("earlier")
    waiting_before = select(earlier.c.message_id).where(
        earlier.c.conversation_handle == _t.c.conversation_handle, earlier.c.next_attempt_time > bindparam("p_now"),
        earlier.c.to_conversation_handle.is_(None), earlier.c.message_sequence_number < _t.c.message_sequence_number)
    return Prepared(
        select(*_DUE_COLUMNS).join(_e, _e.c.conversation_handle == _t.c.conversation_handle)
        .where(_t.c.to_conversation_handle.is_(None), _t.c.next_attempt_time <= bindparam("p_now"),
               _t.c.message_id > bindparam("p_after"), ~waiting_before.exists())
        .order_by(*order).limit(bindparam("p_limit")))


_DUE = _due(_t.c.message_id)
_DUE_BY_PRIORITY = _due(_t.c.priority.desc(), _t.c.message_id)
_NEXT_DUE = Prepared(select(func.min(_t.c.next_attempt_time)).where(_t.c.to_conversation_handle.is_(None)))
_DELETE_ACKNOWLEDGED = Prepared(
    delete(_t).where(_t.c.message_id.in_([bindparam(f"p_{n}") for n in range(DELETE_CHUNK)]))
    .returning(_t.c.message_id, _t.c.conversation_handle))
_SETTLE_ENDPOINT = Prepared(
    update(_e).where(_e.c.conversation_handle == bindparam("p_handle")).values(
        held_messages=_e.c.held_messages - bindparam("p_count"), far_broker_instance=bindparam("p_far"),
        transmission_status=case((_e.c.held_messages - bindparam("p_count") == 0, ""),
                                 else_=_e.c.transmission_status)))
