"""PostgreSQL: RECEIVE picks and locks the next group and reads its rows in one statement
(``queue_tables.pick_group``). The statement reads a snapshot taken before its locks are
granted; these tests take a message away between the two and check that it is never
returned twice and that the RECEIVE still serves the group's next message.

The other transaction locks the message row itself (not the group), so the RECEIVE's
statement waits on that row, and the test sees it waiting in ``pg_stat_activity``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from sqlalchemy import Connection, text
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


def receive_while_taken(db: broker.Broker, other: Connection, order: int) -> list[bytes]:
    """RECEIVE TOP(10) while ``other`` holds the row ``order``; ``other`` deletes it and
    commits once the RECEIVE waits for it. The bodies received."""
    other.execute(text(f"SELECT 1 FROM {table(db)} WHERE queuing_order = :o FOR UPDATE"), {"o": order})
    received: list[bytes] = []

    def receive() -> None:
        with db.transaction() as tx:
            received.extend(m.message_body or b"" for m in tx.receive(TARGET_QUEUE, 10))

    reader = threading.Thread(target=receive)
    reader.start()
    wait_until(lambda: waiting_on_a_row(db))
    other.execute(text(f"DELETE FROM {table(db)} WHERE queuing_order = :o"), {"o": order})
    other.commit()
    reader.join(10)
    assert not reader.is_alive()
    return received


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
