"""Large messages between instances travel in fragments, and the destination takes them
fragment by fragment (spec 7.5): ``frames.fragments_of`` cuts them, ``arrival`` stores
each fragment in the destination's transaction and shows the incomplete message with
status 2, and ``outbound.settle`` keeps a partly held message and goes on from the first
fragment the destination lacks.

The frames are the transmitter's own, applied at the target with ``arrival.arrive`` and
settled at the initiator with ``outbound.settle``, one step at a time, on an instance of
SQLite files, of PostgreSQL databases, and a mixed one. Over the network:
``tests/test_between_instances.py``.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import select, update
from support import (
    BETWEEN_CONTRACT,
    BETWEEN_INITIATOR_QUEUE,
    BETWEEN_INITIATOR_SERVICE,
    BETWEEN_REQUEST,
    BETWEEN_TARGET_QUEUE,
    BETWEEN_TARGET_SERVICE,
    between_databases,
)

import broker
from broker.conversations import scheduler
from broker.conversations.arrival import arrive
from broker.conversations.endpoints import endpoints, fragments, transmissions
from broker.conversations.frames import FRAGMENT_BYTES, Delivery, MessageFrame, Receipt, fragments_of
from broker.conversations.outbound import (
    NOT_ACKNOWLEDGED,
    OutboundMessage,
    due_messages,
    frames_in_fragments,
    frames_of,
    settle,
)
from broker.storage.context import TxContext

LARGE = b"<m>" + bytes(range(97, 123)) * (2 * FRAGMENT_BYTES // 26 + 100) + b"tail</m>"  # three fragments


@dataclass
class Pair:
    """The tutorial's two databases in one instance; the initiator's messages go to the
    target only when a test applies their frames there."""

    inst: broker.Instance
    initiator: broker.Broker
    target: broker.Broker

    def begin(self, body: bytes = LARGE, **options: object) -> uuid.UUID:
        with self.initiator.transaction() as tx:
            handle = tx.begin_dialog(BETWEEN_INITIATOR_SERVICE, BETWEEN_TARGET_SERVICE, BETWEEN_CONTRACT, **options)
            tx.send(handle, BETWEEN_REQUEST, body)
        return handle

    def send(self, handle: uuid.UUID, body: bytes) -> None:
        with self.initiator.transaction() as tx:
            tx.send(handle, BETWEEN_REQUEST, body)

    def due(self) -> list[OutboundMessage]:
        with self.initiator.transaction() as tx:
            return tx.run(lambda ctx: due_messages(ctx, 100))

    def frames(self) -> list[list[MessageFrame]]:
        """The frames of each message due at the initiator, addressed to the target."""
        with self.initiator.transaction() as tx:
            catalog = tx.run(lambda ctx: ctx.catalog)
        return [fragments_of(frame) for frame in frames_of(catalog, self.due(), str(self.target.service_broker_guid))]

    def apply(self, frames: Sequence[MessageFrame]) -> list[Receipt]:
        with self.target.transaction() as tx:
            return tx.run(lambda ctx: arrive(ctx, frames))

    def settle(self, receipts: Sequence[Receipt]) -> None:
        sent = {m.message_id: m for m in self.due()}
        with self.initiator.transaction() as tx:
            tx.run(lambda ctx: settle(ctx, Delivery(str(self.target.service_broker_guid), tuple(receipts)), sent))

    def rows(self) -> list[tuple[int, int, bytes | None]]:
        """(status, sequence, body) of the target queue's rows, in sequence order."""
        return sorted(((m.status, m.message_sequence_number, m.message_body)
                       for m in self.target.queue_rows(BETWEEN_TARGET_QUEUE)), key=lambda row: row[1])

    def stored(self) -> list[tuple[int, int]]:
        """(sequence, fragment) of every fragment the target holds."""
        with self.target.transaction() as tx:
            return tx.run(lambda ctx: [tuple(row) for row in ctx.conn.execute(
                select(fragments.c.message_sequence_number, fragments.c.fragment)
                .order_by(fragments.c.message_sequence_number, fragments.c.fragment))])

    def endpoint(self, db: broker.Broker) -> dict[str, Any]:
        [row] = db.catalog("sys.conversation_endpoints")
        return row

    def outbound(self) -> list[dict[str, Any]]:
        """The initiator's transmission queue rows, with the columns the view does not show."""
        with self.initiator.transaction() as tx:
            return tx.run(lambda ctx: [dict(row._mapping) for row in ctx.conn.execute(
                select(transmissions).order_by(transmissions.c.message_id))])


@pytest.fixture
def pair(instance_urls: tuple[str, str, str]) -> Iterator[Pair]:
    catalog_url, initiator_url, target_url = instance_urls
    inst = broker.instance(catalog_url)
    initiator, target = between_databases(inst, initiator_url, target_url)
    yield Pair(inst, initiator, target)
    inst.dispose()


def receive(db: broker.Broker) -> list[bytes | None]:
    with db.transaction() as tx:
        return [m.message_body for m in tx.receive(BETWEEN_TARGET_QUEUE, 10)]


# -- cutting -------------------------------------------------------------------------------------------------


def _frame(body: bytes | None) -> MessageFrame:
    return MessageFrame(7, uuid.UUID(int=7), True, "from", "a" * 36, "to", "b" * 36, "DEFAULT", "DEFAULT", 0,
                        "message", body, datetime.now(UTC) + timedelta(hours=1))


def test_a_body_over_the_fragment_size_is_cut_into_numbered_fragments() -> None:
    body = bytes(range(256)) * (FRAGMENT_BYTES // 256 * 2 + 3)  # two fragments and a piece
    pieces = fragments_of(_frame(body))
    assert [(p.fragment, p.fragments) for p in pieces] == [(0, 3), (1, 3), (2, 3)]
    assert b"".join(p.body or b"" for p in pieces) == body
    assert all(len(p.body or b"") == FRAGMENT_BYTES for p in pieces[:2])
    assert [(p.fragment, p.body) for p in fragments_of(_frame(body), 2)] == [(2, pieces[2].body)]
    assert [p.fragment for p in fragments_of(_frame(body), 9)] == [2]  # the last one always goes
    for small in (None, b"", b"x" * FRAGMENT_BYTES):
        whole = _frame(small)
        assert fragments_of(whole) == [whole]


def test_the_whole_messages_go_before_the_fragments_and_from_the_first_not_held(pair: Pair) -> None:
    large = pair.begin()
    pair.begin(b"<m>small</m>")
    pair.send(large, b"<m>after</m>")
    due = pair.due()
    with pair.initiator.transaction() as tx:
        catalog = tx.run(lambda ctx: ctx.catalog)
    assert [(f.body if f.fragments == 1 else None, f.fragment) for f in frames_in_fragments(catalog, due)] == [
        (b"<m>small</m>", 0), (b"<m>after</m>", 0), (None, 0), (None, 1), (None, 2)]
    target = str(pair.target.service_broker_guid)
    held = [m._replace(fragments_held=2, fragments_held_by=target, far_broker=target) if m.body == LARGE else m
            for m in due]
    assert [f.fragment for f in frames_in_fragments(catalog, held) if f.fragments > 1] == [2]
    elsewhere = [m._replace(far_broker=str(uuid.uuid4())) for m in held]  # the count is the target's: not here
    assert [f.fragment for f in frames_in_fragments(catalog, elsewhere) if f.fragments > 1] == [0, 1, 2]


# -- the destination -----------------------------------------------------------------------------------------


def test_fragments_in_order_are_stored_as_they_come_and_the_last_completes_the_message(pair: Pair) -> None:
    pair.begin()
    [[first, second, last]] = pair.frames()
    assert pair.apply([first]) == [Receipt(first.message_id, False, fragments_held=1)]
    assert pair.endpoint(pair.target)["state"] == "SI"  # the first message is not complete
    assert pair.rows() == [(2, 0, None)]  # SELECT shows it, with status 2
    assert pair.apply([second]) == [Receipt(first.message_id, False, fragments_held=2)]
    assert pair.stored() == [(0, 0), (0, 1)]
    assert pair.endpoint(pair.target)["receive_sequence_frag"] == 2
    assert receive(pair.target) == []  # RECEIVE never returns it
    assert pair.apply([last]) == [Receipt(first.message_id, True)]
    assert pair.rows() == [(1, 0, LARGE)]
    assert pair.stored() == []
    assert pair.endpoint(pair.target)["state"] == "CO"
    assert pair.endpoint(pair.target)["receive_sequence_frag"] == 0
    assert receive(pair.target) == [LARGE]


def test_a_fragment_held_already_or_beyond_a_gap_is_answered_with_the_count_and_not_stored(pair: Pair) -> None:
    pair.begin()
    [[first, second, last]] = pair.frames()
    held = Receipt(first.message_id, False, fragments_held=0)
    assert pair.apply([second]) == [held]  # nothing of it here: no endpoint is made
    assert pair.target.catalog("sys.conversation_endpoints") == []
    assert pair.apply([first, first, last]) == [held._replace(fragments_held=1)] * 3  # a duplicate, then a gap
    assert pair.stored() == [(0, 0)]
    assert pair.rows() == [(2, 0, None)]
    assert pair.apply([second, last]) == [held._replace(fragments_held=2), Receipt(first.message_id, True)]
    assert pair.apply([first, last]) == [Receipt(first.message_id, True)] * 2  # received already: duplicates
    assert pair.rows() == [(1, 0, LARGE)] and pair.stored() == []


def test_an_assembled_body_that_fails_validation_is_error_9615_on_both_sides(pair: Pair) -> None:
    handle = pair.begin(LARGE[:-1])  # the end tag is cut: not well-formed, seen only once complete
    [pieces] = pair.frames()
    receipts = pair.apply(pieces)
    assert [r.fragments_held for r in receipts[:2]] == [1, 2]
    assert receipts[2].acknowledged and receipts[2].error is not None and receipts[2].error.code == -9615
    pair.settle(receipts)
    [error] = pair.initiator.queue_rows(BETWEEN_INITIATOR_QUEUE)
    assert broker.parse_error(error.message_body)[0] == -9615
    assert pair.endpoint(pair.initiator)["state"] == "ER" and pair.outbound() == []
    assert pair.endpoint(pair.target)["state"] == "ER"
    assert [(m.status, m.message_type_name) for m in pair.target.queue_rows(BETWEEN_TARGET_QUEUE)] == [
        (1, broker.ERROR)]  # the incomplete message's row went with its fragments
    assert pair.stored() == []
    with pair.initiator.transaction() as tx:
        tx.end_conversation(handle)


def test_a_type_the_contract_lacks_is_refused_at_the_first_fragment(pair: Pair) -> None:
    pair.initiator.create_message_type("//BothDB/Large", "NONE")
    pair.initiator.create_contract("//BothDB/LargeContract", {"//BothDB/Large": "INITIATOR"})
    pair.target.create_message_type("//BothDB/Large", "NONE")
    pair.target.create_contract("//BothDB/LargeContract", {BETWEEN_REQUEST: "INITIATOR"})
    pair.target.alter_service(BETWEEN_TARGET_SERVICE, add_contracts=["//BothDB/LargeContract"])
    with pair.initiator.transaction() as tx:
        handle = tx.begin_dialog(BETWEEN_INITIATOR_SERVICE, BETWEEN_TARGET_SERVICE, "//BothDB/LargeContract")
        tx.send(handle, "//BothDB/Large", LARGE)
    [[first, *_]] = pair.frames()
    [receipt] = pair.apply([first])
    assert receipt.acknowledged and receipt.error is not None and receipt.error.code == -8498
    assert pair.target.catalog("sys.conversation_endpoints") == [] and pair.stored() == []


@pytest.mark.parametrize("cleanup", [False, True])
def test_ending_the_conversation_drops_its_fragments(pair: Pair, cleanup: bool) -> None:
    pair.begin()
    [[first, second, _]] = pair.frames()
    pair.apply([first, second])
    with pair.target.transaction() as tx:
        tx.end_conversation(pair.endpoint(pair.target)["conversation_handle"], cleanup=cleanup)
    assert pair.stored() == [] and pair.rows() == []


def test_new_broker_drops_the_fragments(pair: Pair) -> None:
    pair.begin()
    [[first, *_]] = pair.frames()
    pair.apply([first])
    pair.target.new_broker()
    assert pair.stored() == [] and pair.rows() == []


def test_a_lifetime_that_expires_drops_the_fragments(pair: Pair) -> None:
    pair.begin()
    [[first, second, last]] = pair.frames()
    pair.apply([first, second])

    def expire(ctx: TxContext) -> None:
        ctx.conn.execute(update(endpoints).values(lifetime=datetime.now(UTC) - timedelta(seconds=1)))
        scheduler.expire_lifetimes(ctx)

    with pair.target.transaction() as tx:
        tx.run(expire)
    assert pair.stored() == []
    assert [(m.status, m.message_type_name) for m in pair.target.queue_rows(BETWEEN_TARGET_QUEUE)] == [
        (1, broker.ERROR)]
    assert pair.apply([last]) == [Receipt(last.message_id, True)]  # the dialog is in error: discarded
    assert pair.stored() == []


def test_a_fragmented_message_ahead_of_a_gap_is_held_whole_until_the_gap_fills(pair: Pair) -> None:
    handle = pair.begin(b"<m>0</m>")
    pair.send(handle, LARGE)
    [[zero], pieces] = pair.frames()
    assert [r.fragments_held for r in pair.apply(pieces[:2])] == [1, 2]
    assert pair.endpoint(pair.target)["state"] == "SI"
    assert pair.apply(pieces[2:]) == [Receipt(pieces[0].message_id, True)]
    assert pair.rows() == [(2, 1, LARGE)]  # whole now, waiting for message 0
    assert pair.apply(pieces[:1]) == [Receipt(pieces[0].message_id, True)]  # held whole already: a duplicate
    assert pair.stored() == []
    assert pair.apply([zero]) == [Receipt(zero.message_id, True)]
    assert pair.endpoint(pair.target)["state"] == "CO"
    assert receive(pair.target) == [b"<m>0</m>", LARGE]


def test_a_message_still_in_fragments_holds_up_the_messages_after_it(pair: Pair) -> None:
    handle = pair.begin(b"<m>0</m>")
    pair.send(handle, LARGE)
    pair.send(handle, b"<m>2</m>")
    [[zero], pieces, [two]] = pair.frames()
    pair.apply([pieces[0], two, zero])  # 0 fills the first gap; 1 is still incomplete, so 2 waits
    assert pair.rows() == [(1, 0, b"<m>0</m>"), (2, 1, None), (2, 2, b"<m>2</m>")]
    assert receive(pair.target) == [b"<m>0</m>"]
    pair.apply(pieces[1:])
    assert pair.rows() == [(1, 1, LARGE), (1, 2, b"<m>2</m>")]
    assert receive(pair.target) == [LARGE, b"<m>2</m>"]


def test_a_small_message_of_another_dialog_is_received_while_a_large_one_is_incomplete(pair: Pair) -> None:
    pair.begin()
    pair.begin(b"<m>small</m>")
    [pieces, [small]] = pair.frames()
    pair.apply([pieces[0], small, pieces[1]])
    assert receive(pair.target) == [b"<m>small</m>"]
    pair.apply(pieces[2:])
    assert receive(pair.target) == [LARGE]


def test_with_the_queue_off_the_fragments_are_stored_and_the_message_parked_once_complete(pair: Pair) -> None:
    pair.target.alter_queue(BETWEEN_TARGET_QUEUE, status=False)
    pair.begin()
    [pieces] = pair.frames()
    assert [r.fragments_held for r in pair.apply(pieces[:2])] == [1, 2]
    assert pair.rows() == []  # nothing is shown in a queue that is OFF
    assert pair.apply(pieces[2:]) == [Receipt(pieces[0].message_id, True)]
    assert pair.stored() == [] and len(pair.target.catalog("sys.transmission_queue")) == 1
    pair.target.alter_queue(BETWEEN_TARGET_QUEUE, status=True)
    assert receive(pair.target) == [LARGE]


def test_a_last_fragment_refused_leaves_the_others_held_and_goes_again_alone(pair: Pair) -> None:
    pair.target.alter_queue(BETWEEN_TARGET_QUEUE, status=False)
    handle = pair.begin(b"<m>0</m>")
    pair.send(handle, LARGE)
    [_, pieces] = pair.frames()
    receipts = pair.apply(pieces)  # message 0 was lost: 1 is ahead of a gap, which a queue that is OFF refuses
    assert receipts[-1] == Receipt(pieces[0].message_id, False, f'The service queue "{BETWEEN_TARGET_QUEUE}" is '
                                   f'currently disabled.')
    assert pair.stored() == [(1, 0), (1, 1)]
    pair.settle(receipts)
    [_, row] = pair.outbound()
    assert (row["fragments_held"], row["attempts"]) == (2, 1)
    assert row["transmission_status"] == receipts[-1].reason
    pair.target.alter_queue(BETWEEN_TARGET_QUEUE, status=True)
    with pair.initiator.transaction() as tx:
        catalog = tx.run(lambda ctx: ctx.catalog)
        tx.run(lambda ctx: ctx.conn.execute(update(transmissions).values(next_attempt_time=ctx.now())))
    again = frames_in_fragments(catalog, pair.due())
    assert [(f.sequence, f.fragment) for f in again] == [(0, 0), (1, 2)]
    pair.settle(pair.apply(again))
    assert pair.outbound() == [] and pair.stored() == []
    assert receive(pair.target) == [b"<m>0</m>", LARGE]


# -- the sender ----------------------------------------------------------------------------------------------


def test_a_partly_held_message_stays_and_goes_on_from_the_first_fragment_not_held(pair: Pair) -> None:
    handle = pair.begin()
    [pieces] = pair.frames()
    pair.settle(pair.apply(pieces[:2]))
    target = str(pair.target.service_broker_guid)
    [row] = pair.outbound()
    assert (row["fragments_held"], row["fragments_held_by"], row["attempts"]) == (2, target, 0)
    assert len(pair.initiator.catalog("sys.transmission_queue")) == 1  # it stays until acknowledged whole
    assert pair.endpoint(pair.initiator)["far_broker_instance"] == target  # the target holds the dialog
    [message] = pair.due()  # due again at once: no back-off
    with pair.initiator.transaction() as tx:
        catalog = tx.run(lambda ctx: ctx.catalog)
    [rest] = frames_in_fragments(catalog, [message])
    assert (rest.fragment, rest.body) == (2, pieces[2].body)
    pair.settle(pair.apply([rest]))
    assert pair.outbound() == [] and receive(pair.target) == [LARGE]
    with pair.initiator.transaction() as tx:
        tx.end_conversation(handle)


def test_a_destination_that_lost_the_fragments_is_sent_them_again_after_a_back_off(pair: Pair) -> None:
    pair.begin()
    [pieces] = pair.frames()
    pair.settle(pair.apply(pieces[:2]))
    with pair.target.transaction() as tx:  # the target forgets the dialog, and its fragments
        tx.end_conversation(pair.endpoint(pair.target)["conversation_handle"], cleanup=True)
    pair.settle(pair.apply(pieces[2:]))  # answered: none of it is here
    [row] = pair.outbound()
    assert (row["fragments_held"], row["attempts"], row["transmission_status"]) == (0, 1, NOT_ACKNOWLEDGED)
    assert pair.due() == []  # backing off
