"""Conversation endpoints and groups: reading, creating and removing them."""

from __future__ import annotations

import uuid
from dataclasses import fields
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Row, Table, bindparam, delete, exists, insert, select, update

from broker.arguments import wrong_type
from broker.conversations import priorities
from broker.errors import BrokerError, ConversationNotFoundError
from broker.storage.context import TxContext
from broker.storage.models import ConversationEndpoint, ConversationGroup, MessageFragment, TransmissionQueueEntry
from broker.storage.queue_tables import INCOMPLETE, RANK_PARTIAL, queue_table
from broker.storage.rows import Endpoint
from broker.storage.statements import Prepared

endpoints = cast(Table, ConversationEndpoint.__table__)
groups = cast(Table, ConversationGroup.__table__)
transmissions = cast(Table, TransmissionQueueEntry.__table__)
fragments = cast(Table, MessageFragment.__table__)

# States in which an endpoint may still SEND.
SENDABLE_STATES = frozenset({"SO", "SI", "CO"})


def as_handle(value: object) -> uuid.UUID:
    """A conversation handle from a UUID or its text; None is error 8418, another type 206."""
    if value is None:
        raise BrokerError(8418)
    if isinstance(value, uuid.UUID):
        return value
    if not isinstance(value, str):
        raise wrong_type("conversation handle", value, "uniqueidentifier")
    try:
        return uuid.UUID(value)
    except ValueError:
        raise ConversationNotFoundError(value) from None


_named = endpoints.alias("named")
# Both endpoints of a handle's conversation in one read: the peer, when it is local, is
# what SEND delivers to next. Endpoint reads need no flush (see ``Prepared``).
# On PostgreSQL the rows are locked (SQLite compiles FOR UPDATE away: its write lock
# covers them), initiator first: SEND writes its peer's row back too, so two
# transactions on one conversation must not overwrite each other's sequence numbers,
# and taking the two rows in one order keeps a SEND and a reply from deadlocking.
_CONVERSATION_OF_HANDLE = Prepared(select(endpoints).where(
    endpoints.c.conversation_id == select(_named.c.conversation_id)
    .where(_named.c.conversation_handle == bindparam("p_handle")).scalar_subquery()
).order_by(endpoints.c.is_initiator.desc()).with_for_update(of=endpoints), flush=False)
_BY_CONVERSATION = Prepared(select(endpoints).where(
    endpoints.c.conversation_id == bindparam("p_conversation"),
    endpoints.c.is_initiator == bindparam("p_initiator"),
).with_for_update(), flush=False)


def get_endpoint(ctx: TxContext, handle: object) -> Endpoint:
    """The endpoint of ``handle``; 8426 if there is none."""
    h = as_handle(handle)
    endpoint = find_endpoint(ctx, h)
    if endpoint is None:
        raise ConversationNotFoundError(h)
    return endpoint


def lock_endpoint(ctx: TxContext, handle: object) -> Endpoint:
    """The endpoint of ``handle``, its conversation group locked until the transaction ends.

    For the verbs that take the group lock (spec 6): SEND, END CONVERSATION, MOVE,
    BEGIN CONVERSATION TIMER, RECEIVE naming a conversation, BEGIN DIALOG related to one.
    The group is locked before the endpoint rows, the order RECEIVE takes them in, so a
    RECEIVE and a SEND never wait for each other.
    """
    h = as_handle(handle)
    backend = ctx.state.backend
    locked = backend.lock_group_of(ctx.conn, h)
    endpoint = get_endpoint(ctx, h)
    if locked is not None and locked != endpoint.conversation_group_id:
        backend.lock_group(ctx.conn, endpoint.conversation_group_id)  # moved meanwhile
    return endpoint


def find_endpoint(ctx: TxContext, handle: uuid.UUID) -> Endpoint | None:
    """The endpoint of ``handle`` or None; kept, with its local peer, for the rest of
    the transaction."""
    kept = ctx.kept
    endpoint = kept.endpoints.get(handle.int)
    if endpoint is None:
        for row in _CONVERSATION_OF_HANDLE.all(ctx.conn, p_handle=handle):
            kept.keep_read(Endpoint(*row))
        endpoint = kept.endpoints.get(handle.int)
    return endpoint


def endpoints_where(ctx: TxContext, *conditions: Any) -> list[Endpoint]:
    """Endpoints matching SQLAlchemy ``conditions`` (for the rarer, set-wise paths)."""
    return [Endpoint(*row) for row in ctx.conn.execute(select(endpoints).where(*conditions))]


def peer_of(ctx: TxContext, endpoint: Endpoint) -> Endpoint | None:
    """The other side's endpoint when it lives in this database."""
    return by_conversation(ctx, endpoint.conversation_id, not endpoint.is_initiator)


def by_conversation(ctx: TxContext, conversation_id: uuid.UUID, is_initiator: bool) -> Endpoint | None:
    """One side's endpoint of a conversation, if it is in this database; kept for the
    rest of the transaction (row-locked on PostgreSQL)."""
    kept = ctx.kept
    found = kept.by_conversation.get((conversation_id.int, is_initiator))
    if found is not None:
        return found
    row = _BY_CONVERSATION.first(ctx.conn, p_conversation=conversation_id, p_initiator=is_initiator)
    return None if row is None else kept.keep_read(Endpoint(*row))


def advance_send(ctx: TxContext, endpoint: Endpoint, state: str) -> None:
    """Count one more sequenced message sent and set the state (written back later)."""
    endpoint.send_sequence += 1
    endpoint.state = state
    ctx.kept.changed(endpoint)


def advance_receive(ctx: TxContext, endpoint: Endpoint, next_sequence: int, state: str) -> None:
    """Record the next sequence number expected and set the state (written back later)."""
    endpoint.receive_sequence = next_sequence
    endpoint.state = state
    ctx.kept.changed(endpoint)


def set_endpoint(ctx: TxContext, handle: uuid.UUID, **values: Any) -> None:
    ctx.conn.execute(update(endpoints).where(endpoints.c.conversation_handle == handle).values(**values))


def get_group(ctx: TxContext, group_id: uuid.UUID) -> Row[Any] | None:
    return ctx.conn.execute(select(groups).where(groups.c.conversation_group_id == group_id)).first()


def create_group(ctx: TxContext, group_id: uuid.UUID, service_id: int) -> None:
    queue_id = ctx.catalog.services[service_id].queue_id
    ctx.conn.execute(insert(groups).values(
        conversation_group_id=group_id, service_id=service_id, queue_id=queue_id, is_system=False,
    ))


def create_endpoint(
    ctx: TxContext,
    *,
    conversation_id: uuid.UUID,
    is_initiator: bool,
    contract_id: int,
    group_id: uuid.UUID,
    service_id: int,
    lifetime: datetime,
    state: str,
    far_service: str,
    far_broker_instance: str | None,
    receive_sequence: int = 0,
    session_key: uuid.UUID | None = None,
) -> Endpoint:
    endpoint = Endpoint(
        conversation_handle=uuid.uuid4(), conversation_id=conversation_id, is_initiator=is_initiator,
        service_contract_id=contract_id, conversation_group_id=group_id, service_id=service_id,
        lifetime=lifetime, state=state, far_service=far_service,
        far_broker_instance=far_broker_instance, dialog_timer=None, send_sequence=0,
        end_dialog_sequence=-1, receive_sequence=receive_sequence, system_sequence=0,
        priority=priorities.priority_for(ctx, contract_id, service_id, far_service),
        is_system=False, held_messages=0, transmission_status="",
        create_date=ctx.now(), closed_date=None, outbound_session_key_identifier=session_key,
    )
    ctx.conn.execute(insert(endpoints).values({f.name: getattr(endpoint, f.name) for f in fields(Endpoint)}))
    return endpoint


def remove_local_messages(ctx: TxContext, endpoint: Endpoint) -> None:
    """Delete every message of this conversation from its local queue (retained ones
    too), and the fragments of those still arriving."""
    table = _queue_table_of(ctx, endpoint)
    ctx.conn.execute(delete(table).where(table.c.conversation_handle == endpoint.conversation_handle))
    _drop_fragments(ctx, endpoint.conversation_handle)


def drop_held_messages(ctx: TxContext, handle: uuid.UUID) -> None:
    """Discard this endpoint's undelivered messages from the transmission queue, and the
    fragments of the messages still arriving for it."""
    ctx.conn.execute(delete(transmissions).where(
        (transmissions.c.conversation_handle == handle) | (transmissions.c.to_conversation_handle == handle)
    ))
    _drop_fragments(ctx, handle)


def drop_partial_messages(ctx: TxContext, endpoint: Endpoint, sequence: int | None = None) -> None:
    """Discard what this endpoint holds of the messages still arriving in fragments (of
    message ``sequence`` only, when given): their fragments and the rows that show them
    in its queue (status 2)."""
    table = _queue_table_of(ctx, endpoint)
    handle = endpoint.conversation_handle
    which = [] if sequence is None else [table.c.message_sequence_number == sequence]
    ctx.conn.execute(delete(table).where(table.c.conversation_handle == handle, table.c.status == INCOMPLETE,
                                         table.c.receive_rank == RANK_PARTIAL, *which))
    _drop_fragments(ctx, handle, sequence)


def _drop_fragments(ctx: TxContext, handle: uuid.UUID, sequence: int | None = None) -> None:
    which = [] if sequence is None else [fragments.c.message_sequence_number == sequence]
    ctx.conn.execute(delete(fragments).where(fragments.c.conversation_handle == handle, *which))


def _queue_table_of(ctx: TxContext, endpoint: Endpoint) -> Table:
    return queue_table(ctx.catalog.queues[ctx.catalog.services[endpoint.service_id].queue_id].table_name)


def drop_outbound(ctx: TxContext, endpoint: Endpoint) -> None:
    """Discard what this endpoint still has to send (its far side will not take it)."""
    ctx.conn.execute(delete(transmissions).where(transmissions.c.conversation_handle == endpoint.conversation_handle,
                                                 transmissions.c.to_conversation_handle.is_(None)))
    set_endpoint(ctx, endpoint.conversation_handle, held_messages=0, transmission_status="")


def close_endpoint(ctx: TxContext, endpoint: Endpoint) -> None:
    """Both sides are done: drop an initiator endpoint, keep a target one as CD.

    SQL Server removes closed initiator endpoints and keeps target endpoints CLOSED for
    a while as replay protection; the runtime purges them later.
    """
    if endpoint.is_initiator:
        delete_endpoint(ctx, endpoint)
    else:
        set_endpoint(ctx, endpoint.conversation_handle, state="CD", closed_date=ctx.now(),
                     dialog_timer=None, held_messages=0)


def delete_endpoint(ctx: TxContext, endpoint: Endpoint) -> None:
    ctx.conn.execute(delete(endpoints).where(endpoints.c.conversation_handle == endpoint.conversation_handle))
    drop_group_if_empty(ctx, endpoint.conversation_group_id)


def drop_group_if_empty(ctx: TxContext, group_id: uuid.UUID) -> None:
    """A group lives while any of its conversations does."""
    in_use = select(exists().where(endpoints.c.conversation_group_id == group_id))
    if not ctx.conn.execute(in_use).scalar():
        ctx.conn.execute(delete(groups).where(groups.c.conversation_group_id == group_id))
