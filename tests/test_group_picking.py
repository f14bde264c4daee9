"""PostgreSQL: RECEIVE picks and locks the next group and takes its rows in one statement
(``queue_tables.take_next``). The statement reads a snapshot taken before its locks are
granted; these tests take, receive or move a message between the two and check that it
is never returned twice, that the RECEIVE still serves the group's next message, and
that it holds the lock of the group its messages are in.

The other transaction locks the message rows themselves (not the group), so the
RECEIVE's statement waits on such a row, and the test sees it waiting in
``pg_stat_activity``.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator

import pytest
from sqlalchemy import Connection, text
from sqlalchemy.exc import OperationalError
from support import CONTRACT, INITIATOR_SERVICE, REQUEST, TARGET_QUEUE, TARGET_SERVICE, wait_until

import broker

pytestmark = pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)


@pytest.fixture
def orders(tutorial: broker.Broker) -> list[int]:
    """One conversation of three requests, b"<m1/>" to b"<m3/>"; their queuing orders."""
    with tutorial.transaction() as tx:
        handle = tx.begin_dialog(INITIATOR_SERVICE, TARGET_SERVICE, CONTRACT)
        for n in (1, 2, 3):
            tx.send(handle, REQUEST, f"<m{n}/>".encode())
    with tutorial.engine.connect() as conn:
        return list(conn.execute(text(f"SELECT queuing_order FROM {table(tutorial)} ORDER BY queuing_order")).scalars())


@pytest.fixture
def other(tutorial: broker.Broker) -> Iterator[Connection]:
    """Another transaction, on a connection of its own."""
    with tutorial.engine.connect() as conn:
        yield conn


def table(db: broker.Broker) -> str:
    [queue] = [q for q in db.catalog("sys.service_queues") if q["name"] == TARGET_QUEUE]
    return f"queue_messages_{queue['object_id']}"


def receive_while_changed(db: broker.Broker, other: Connection, orders: list[int], *changes: str,
                          while_held: Callable[[list[broker.Message]], None] = lambda _: None) -> list[bytes]:
    """RECEIVE TOP(10) while ``other`` holds the rows ``orders``; ``other`` runs ``changes``
    (SQL statements with ``:orders``) and commits once the RECEIVE waits for them.
    ``while_held`` sees the messages before the RECEIVE commits. The bodies received."""
    other.execute(text(f"SELECT 1 FROM {table(db)} WHERE queuing_order = ANY(:orders) FOR UPDATE"),
                  {"orders": orders})
    received: list[bytes] = []
    failed: list[BaseException] = []

    def receive() -> None:
        try:
            with db.transaction() as tx:
                messages = tx.receive(TARGET_QUEUE, 10)
                while_held(messages)
                received.extend(m.message_body or b"" for m in messages)
        except BaseException as error:  # noqa: BLE001 - reported by the test's thread below
            failed.append(error)

    reader = threading.Thread(target=receive)
    reader.start()
    wait_until(lambda: waiting_on_a_row(db))
    for change in changes:
        other.execute(text(change), {"orders": orders})
    other.commit()
    reader.join(10)
    assert not reader.is_alive()
    assert not failed, failed
    return received


def receive_while_taken(db: broker.Broker, other: Connection, order: int) -> list[bytes]:
    """RECEIVE TOP(10) while ``other`` deletes the row ``order``."""
    return receive_while_changed(db, other, [order], f"DELETE FROM {table(db)} WHERE queuing_order = ANY(:orders)")


def waiting_on_a_row(db: broker.Broker) -> bool:
    """Whether a session of the database waits for a lock (read in a transaction of its
    own: a transaction sees ``pg_stat_activity`` as it was at its first look)."""
    with db.engine.connect() as conn:
        return bool(conn.execute(text(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )).scalar_one())


def test_a_first_message_taken_meanwhile_is_skipped(tutorial: broker.Broker, orders: list[int],
                                                   other: Connection) -> None:
    assert receive_while_taken(tutorial, other, orders[0]) == [b"<m2/>", b"<m3/>"]


def test_a_later_message_taken_meanwhile_is_not_returned(tutorial: broker.Broker, orders: list[int],
                                                        other: Connection) -> None:
    assert receive_while_taken(tutorial, other, orders[1]) == [b"<m1/>", b"<m3/>"]


def test_a_message_received_meanwhile_under_retention_is_not_returned_again(
        tutorial: broker.Broker, orders: list[int], other: Connection) -> None:
    tutorial.alter_queue(TARGET_QUEUE, retention=True)
    marked = f"UPDATE {table(tutorial)} SET status = 0 WHERE queuing_order = ANY(:orders)"
    assert receive_while_changed(tutorial, other, [orders[0]], marked) == [b"<m2/>", b"<m3/>"]
    statuses = [m.status for m in tutorial.queue_rows(TARGET_QUEUE)]
    assert statuses == [0, 0, 0]  # kept, every one received


def test_a_conversation_moved_meanwhile_is_received_under_its_new_groups_lock(
        tutorial: broker.Broker, orders: list[int], other: Connection) -> None:
    [row] = tutorial.queue_rows(TARGET_QUEUE)[:1]
    old_group, new_group = row.conversation_group_id, uuid.uuid4()
    other.execute(text(
        "INSERT INTO sb_conversation_groups (conversation_group_id, service_id, queue_id, is_system)"
        " SELECT :new, service_id, queue_id, is_system FROM sb_conversation_groups WHERE conversation_group_id = :old"
    ), {"new": new_group, "old": old_group})
    moved = (f"UPDATE {table(tutorial)} SET conversation_group_id = '{new_group}' WHERE queuing_order = ANY(:orders)",
             f"UPDATE sb_conversation_endpoints SET conversation_group_id = '{new_group}'"
             f" WHERE conversation_group_id = '{old_group}'")
    locked: list[bool] = []

    def new_group_is_locked(messages: list[broker.Message]) -> None:
        assert {m.conversation_group_id for m in messages} == {new_group}
        with tutorial.engine.connect() as third:
            try:
                third.execute(text("SELECT 1 FROM sb_conversation_groups WHERE conversation_group_id = :g"
                                   " FOR UPDATE NOWAIT"), {"g": new_group})
                locked.append(False)
            except OperationalError:
                locked.append(True)

    received = receive_while_changed(tutorial, other, orders, *moved, while_held=new_group_is_locked)
    assert received == [b"<m1/>", b"<m2/>", b"<m3/>"]
    assert locked == [True]
