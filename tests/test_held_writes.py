"""Writes a transaction holds back (``broker.storage.pending``) reach the database in the
order they were made, on both backends: on PostgreSQL they go as one statement of common
table expressions (``statements.held_as_one``) or, past its row limit, one executemany
per statement; a message's queuing order follows the order of the SENDs."""

from __future__ import annotations

import pytest
from support import CONTRACT, INITIATOR_SERVICE, REQUEST, TARGET_QUEUE, TARGET_SERVICE, target_handle

import broker
from broker.storage.statements import HELD_AS_ONE_MAX_ROWS


@pytest.mark.parametrize("count", [1, 3, HELD_AS_ONE_MAX_ROWS - 2, HELD_AS_ONE_MAX_ROWS + 5])
def test_messages_sent_in_one_transaction_keep_their_order(tutorial: broker.Broker, count: int) -> None:
    """A SEND on many handles locks them all, then holds back one row per handle with
    no statement in between: the rows reach the queue in the order of the handles."""
    with tutorial.transaction() as tx:
        handles = [tx.begin_dialog(INITIATOR_SERVICE, TARGET_SERVICE, CONTRACT) for _ in range(count)]
    with tutorial.transaction() as tx:
        tx.send(handles, REQUEST, "<a/>")
        tx.send(list(reversed(handles)), REQUEST, "<b/>")
    targets = [target_handle(tutorial, h) for h in handles]
    rows = sorted(tutorial.queue_rows(TARGET_QUEUE), key=lambda r: r.queuing_order)
    assert [(str(r.conversation_handle), r.message_body) for r in rows] == [
        *((str(t), b"<a/>") for t in targets), *((str(t), b"<b/>") for t in reversed(targets))]
    with tutorial.transaction() as tx:
        received = tx.receive(TARGET_QUEUE)
    assert [m.message_body for m in received] == [b"<a/>", b"<b/>"]
    assert [m.message_sequence_number for m in received] == [0, 1]


def test_a_receive_after_sends_in_one_transaction_sees_them(tutorial: broker.Broker) -> None:
    with tutorial.transaction() as tx:
        handle = tx.begin_dialog(INITIATOR_SERVICE, TARGET_SERVICE, CONTRACT)
    with tutorial.transaction() as tx:
        for i in range(3):
            tx.send(handle, REQUEST, f"<m>{i}</m>")
        received = tx.receive(TARGET_QUEUE, 2)  # the held-back INSERT goes first
        assert [m.message_body for m in received] == [b"<m>0</m>", b"<m>1</m>"]
        tx.send(handle, REQUEST, "<m>3</m>")  # held back with the two deletes
    with tutorial.transaction() as tx:
        assert [m.message_body for m in tx.receive(TARGET_QUEUE)] == [b"<m>2</m>", b"<m>3</m>"]
    assert tutorial.queue_rows(TARGET_QUEUE) == []


def test_a_receive_resets_the_rollback_count_with_its_deletes(tutorial: broker.Broker) -> None:
    with tutorial.transaction() as tx:
        handle = tx.begin_dialog(INITIATOR_SERVICE, TARGET_SERVICE, CONTRACT)
        tx.send(handle, REQUEST, "<m>0</m>")
        tx.send(handle, REQUEST, "<m>1</m>")
    with pytest.raises(RuntimeError):
        with tutorial.transaction() as tx:
            tx.receive(TARGET_QUEUE, 1)
            raise RuntimeError("roll back")
    assert _rollback_count(tutorial) == 1
    with tutorial.transaction() as tx:
        assert [m.message_body for m in tx.receive(TARGET_QUEUE, 1)] == [b"<m>0</m>"]
        assert tx.receive(TARGET_QUEUE, 1)[0].message_body == b"<m>1</m>"
    assert _rollback_count(tutorial) == 0
    assert tutorial.queue_rows(TARGET_QUEUE) == []


def _rollback_count(db: broker.Broker) -> int:
    with db.transaction() as tx:
        [row] = tx.query("SELECT rollback_count FROM sb_queues WHERE name = :n", n=TARGET_QUEUE)
    return int(row["rollback_count"])
