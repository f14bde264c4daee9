"""What a connection keeps from one transaction to the next (``broker.storage.pending``).

On SQLite a thread's connection reuses the endpoint rows, the catalog version and the
next timer deadline of its last committed transaction while no other connection has
committed. Each test first lets ``db`` keep something, then changes it behind its back
(another connection, a rollback, a verb outside the hot path) and checks the next
transaction sees the change. On PostgreSQL nothing is kept; the same checks hold.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from support import REQUEST, TARGET_QUEUE, open_dialog, target_handle, wait_until

import broker
from broker.errors import BrokerError

DIALOG_TIMER = "http://schemas.microsoft.com/SQL/ServiceBroker/DialogTimer"
ERROR = "http://schemas.microsoft.com/SQL/ServiceBroker/Error"


@pytest.fixture
def other(tutorial: broker.Broker, db_url: str) -> Iterator[broker.Broker]:
    """A second engine on the same database: its commits come from another connection."""
    database = broker.connect(db_url)
    yield database
    database.dispose()


def _send(db: broker.Broker, handle: object, body: str = "<a/>") -> None:
    with db.transaction() as tx:
        tx.send(handle, REQUEST, body)


def _receive(db: broker.Broker) -> list[broker.Message]:
    with db.transaction() as tx:
        return tx.receive(TARGET_QUEUE, 10)


def test_a_send_sees_an_end_committed_by_another_connection(tutorial: broker.Broker, other: broker.Broker) -> None:
    handle = open_dialog(tutorial)
    _send(tutorial, handle)  # the endpoint rows are now kept
    with other.transaction() as tx:
        tx.end_conversation(target_handle(other, handle))  # the initiator's row turns DI
    with pytest.raises(BrokerError) as raised:
        _send(tutorial, handle)
    assert (raised.value.number, raised.value.details) == (8429, {"state": "DI"})


def test_a_send_sees_a_queue_disabled_by_another_connection(tutorial: broker.Broker,
                                                             other: broker.Broker) -> None:
    handle = open_dialog(tutorial)
    _send(tutorial, handle)  # the catalog version is now kept
    other.alter_queue(TARGET_QUEUE, status=False)
    _send(tutorial, handle, "<held/>")
    [held] = tutorial.catalog("sys.transmission_queue")
    assert held["transmission_status"] == f'The service queue "{TARGET_QUEUE}" is currently disabled.'
    assert len(tutorial.queue_rows(TARGET_QUEUE)) == 2  # the two sent before


def test_a_rolled_back_send_leaves_no_gap_in_the_sequence(tutorial: broker.Broker) -> None:
    handle = open_dialog(tutorial)
    with pytest.raises(RuntimeError), tutorial.transaction() as tx:
        tx.send(handle, REQUEST, "<undone/>")
        raise RuntimeError("roll back")
    _send(tutorial, handle, "<b/>")
    rows = tutorial.queue_rows(TARGET_QUEUE)
    assert [(m.message_sequence_number, m.message_body) for m in rows] == [(0, b"<RequestMsg/>"), (1, b"<b/>")]


def test_sends_and_receives_in_a_row_keep_every_sequence_number(tutorial: broker.Broker) -> None:
    handle = open_dialog(tutorial)
    for n in range(5):
        _send(tutorial, handle, f"<m{n}/>")
        assert len(_receive(tutorial)) >= 1
    _send(tutorial, handle, "<last/>")
    [last] = _receive(tutorial)
    assert (last.message_sequence_number, last.message_body) == (6, b"<last/>")


def test_receive_fires_a_timer_set_by_another_connection(tutorial: broker.Broker, other: broker.Broker) -> None:
    handle = open_dialog(tutorial)
    _receive(tutorial)  # no timer anywhere: the deadline kept is "never"
    with other.transaction() as tx:
        tx.begin_conversation_timer(target_handle(other, handle), 0)
    assert [m.message_type_name for m in _receive(tutorial)] == [DIALOG_TIMER]


def test_receive_fires_a_timer_this_connection_just_set(tutorial: broker.Broker) -> None:
    handle = open_dialog(tutorial)
    _receive(tutorial)
    with tutorial.transaction() as tx:
        tx.begin_conversation_timer(target_handle(tutorial, handle), 0)
    assert [m.message_type_name for m in _receive(tutorial)] == [DIALOG_TIMER]


def test_receive_fires_a_lifetime_that_ran_out_after_the_deadline_was_kept(tutorial: broker.Broker) -> None:
    open_dialog(tutorial, lifetime=1)
    assert len(_receive(tutorial)) == 1  # keeps "the earliest lifetime, a second from now"
    arrived = wait_until(lambda: _receive(tutorial), timeout=10)
    assert [m.message_type_name for m in arrived] == [ERROR]  # type: ignore[attr-defined]


def test_a_joined_transaction_sees_an_end_committed_by_another_connection(tutorial: broker.Broker,
                                                                         other: broker.Broker) -> None:
    handle = open_dialog(tutorial)
    with tutorial.Session() as session:
        with session.begin(), tutorial.transaction(session=session) as tx:
            tx.send(handle, REQUEST, "<a/>")
        with other.transaction() as tx:
            tx.end_conversation(target_handle(other, handle))
        with pytest.raises(BrokerError) as raised, session.begin(), tutorial.transaction(session=session) as tx:
            tx.send(handle, REQUEST, "<b/>")
    assert (raised.value.number, raised.value.details) == (8429, {"state": "DI"})


def test_two_joined_blocks_in_one_session_transaction_keep_both_sends(tutorial: broker.Broker) -> None:
    handle = open_dialog(tutorial)
    with tutorial.Session() as session, session.begin():
        with tutorial.transaction(session=session) as tx:
            tx.send(handle, REQUEST, "<a/>")
        with tutorial.transaction(session=session) as tx:
            tx.send(handle, REQUEST, "<b/>")
    rows = tutorial.queue_rows(TARGET_QUEUE)
    assert [(m.message_sequence_number, m.message_body) for m in rows] == [
        (0, b"<RequestMsg/>"), (1, b"<a/>"), (2, b"<b/>")]


def test_a_connection_back_from_the_pool_starts_afresh(tutorial: broker.Broker) -> None:
    handle = open_dialog(tutorial)
    _send(tutorial, handle)  # kept on this thread's connection
    tutorial._state.close_idle()  # which goes back to the pool
    raw = tutorial.engine.raw_connection()  # someone takes it and writes behind SQLAlchemy's back
    try:
        raw.cursor().execute("UPDATE sb_conversation_endpoints SET state = 'DI' WHERE is_initiator = TRUE")
        raw.commit()
    finally:
        raw.close()
    with pytest.raises(BrokerError) as raised:
        _send(tutorial, handle)
    assert (raised.value.number, raised.value.details) == (8429, {"state": "DI"})
