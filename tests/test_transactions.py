"""Real transactions: joining the caller's session, rollback, threads, WAITFOR wake-ups."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import threading
import time
from contextlib import nullcontext

import pytest
from sqlalchemy import Column, Integer, MetaData, String, Table, func, insert, select
from support import (
    CONTRACT,
    INITIATOR_QUEUE,
    INITIATOR_SERVICE,
    REQUEST,
    TARGET_QUEUE,
    TARGET_SERVICE,
    open_dialog,
    sqlite_only,
    target_handle,
)

import broker

orders = Table("orders", MetaData(), Column("id", Integer, primary_key=True), Column("item", String(50)))


def _order_count(db: broker.Broker) -> int:
    with db.engine.connect() as conn:
        return conn.execute(select(func.count()).select_from(orders)).scalar_one()


def test_messages_and_application_rows_commit_together(tutorial: broker.Broker) -> None:
    orders.create(tutorial.engine)
    with tutorial.Session() as session:
        with session.begin():
            session.execute(insert(orders).values(item="widget"))
            with tutorial.transaction(session=session) as tx:
                handle = tx.begin_dialog(INITIATOR_SERVICE, TARGET_SERVICE, CONTRACT)
                tx.send(handle, REQUEST, "<order>widget</order>")
    assert _order_count(tutorial) == 1
    assert [m.message_body for m in tutorial.queue_rows(TARGET_QUEUE)] == [b"<order>widget</order>"]


def test_messages_and_application_rows_roll_back_together(tutorial: broker.Broker) -> None:
    orders.create(tutorial.engine)
    with tutorial.Session() as session:
        with pytest.raises(RuntimeError):
            with session.begin():
                session.execute(insert(orders).values(item="widget"))
                with tutorial.transaction(session=session) as tx:
                    handle = tx.begin_dialog(INITIATOR_SERVICE, TARGET_SERVICE, CONTRACT)
                    tx.send(handle, REQUEST, "<order>widget</order>")
                raise RuntimeError("application failure after SEND")
    assert _order_count(tutorial) == 0
    assert tutorial.queue_rows(TARGET_QUEUE) == []
    assert tutorial.catalog("sys.conversation_endpoints") == []


def test_a_received_message_comes_back_in_place_on_rollback(tutorial: broker.Broker) -> None:
    open_dialog(tutorial, "<a/>")
    [before] = tutorial.queue_rows(TARGET_QUEUE)
    with pytest.raises(RuntimeError):
        with tutorial.transaction() as tx:
            assert len(tx.receive(TARGET_QUEUE)) == 1
            raise RuntimeError
    assert tutorial.queue_rows(TARGET_QUEUE) == [before]


@pytest.mark.parametrize("first", ["receive", "get_conversation_group"])
def test_a_waitfor_keeps_what_the_transaction_took_before_it(tutorial: broker.Broker, first: str) -> None:
    # A RECEIVE without WAITFOR (or GET CONVERSATION GROUP) then a WAITFOR on an empty
    # queue: the wait rolled the transaction back to release the lock, undoing the first.
    open_dialog(tutorial, "<a/>")
    with tutorial.transaction() as tx:
        if first == "get_conversation_group":
            assert tx.get_conversation_group(TARGET_QUEUE) is not None
        taken = tx.receive(TARGET_QUEUE)
        assert len(taken) == 1
        assert tx.receive(INITIATOR_QUEUE, timeout=0.2) == []
    assert tutorial.queue_rows(TARGET_QUEUE) == []


def test_a_broker_error_leaves_the_transaction_usable(tutorial: broker.Broker) -> None:
    with tutorial.transaction() as tx:
        handle = tx.begin_dialog(INITIATOR_SERVICE, TARGET_SERVICE, CONTRACT)
        with pytest.raises(broker.BrokerError):
            tx.send(handle, "no such type", "<a/>")
        tx.send(handle, REQUEST, "<a/>")
    assert len(tutorial.queue_rows(TARGET_QUEUE)) == 1


def test_threads_share_one_file_without_lock_errors(tutorial: broker.Broker, db_url: str) -> None:
    """A producer and two consumers in threads, each with its own connections."""
    total = 60
    received: list[bytes] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def produce() -> None:
        try:
            for i in range(total):
                open_dialog(tutorial, f"<n>{i}</n>")
        except BaseException as exc:  # noqa: BLE001 - reported to the main thread
            errors.append(exc)

    def consume() -> None:
        other = broker.connect(db_url)
        try:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                with lock:
                    if len(received) >= total:
                        return
                with other.transaction() as tx:
                    got = tx.receive(TARGET_QUEUE, timeout=0.2)
                with lock:
                    received.extend(m.message_body for m in got)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)
        finally:
            other.dispose()

    threads = [threading.Thread(target=produce)] + [threading.Thread(target=consume) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors, errors
    assert sorted(received) == sorted(f"<n>{i}</n>".encode() for i in range(total))


def test_waitfor_wakes_when_another_thread_commits(tutorial: broker.Broker) -> None:
    result: list[list[broker.Message]] = []

    def wait() -> None:
        with tutorial.transaction() as tx:
            result.append(tx.receive(TARGET_QUEUE, timeout=30))

    waiter = threading.Thread(target=wait)
    waiter.start()
    open_dialog(tutorial, "<wake/>")
    waiter.join(30)
    assert not waiter.is_alive()
    assert [m.message_body for m in result[0]] == [b"<wake/>"]


def test_waitfor_does_not_block_the_sender(tutorial: broker.Broker, db_url: str) -> None:
    """While a WAITFOR waits, other transactions can write (the lock is released)."""
    started = threading.Event()
    result: list[list[broker.Message]] = []

    def wait() -> None:
        other = broker.connect(db_url)
        with other.transaction() as tx:
            started.set()
            result.append(tx.receive(TARGET_QUEUE, timeout=30))
        other.dispose()

    waiter = threading.Thread(target=wait)
    waiter.start()
    assert started.wait(10)
    for i in range(3):
        open_dialog(tutorial, f"<n>{i}</n>")  # would time out if the waiter held the lock
    waiter.join(30)
    assert result and len(result[0]) == 1


def test_waitfor_wakes_across_processes(tutorial: broker.Broker, db_url: str) -> None:
    script = (
        "import broker, sys\n"
        "db = broker.connect(sys.argv[1])\n"
        "print('waiting', flush=True)\n"
        "with db.transaction() as tx:\n"
        "    got = tx.receive(sys.argv[2], timeout=30)\n"
        "print(got[0].message_body.decode() if got else 'timeout', flush=True)\n"
    )
    child = subprocess.Popen([sys.executable, "-c", script, db_url, TARGET_QUEUE],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "waiting"
    open_dialog(tutorial, "<across/>")
    out, err = child.communicate(timeout=60)
    assert child.returncode == 0, err
    assert out.strip() == "<across/>"


def test_waitfor_times_out_with_an_empty_result(tutorial: broker.Broker) -> None:
    started = time.monotonic()
    with tutorial.transaction() as tx:
        assert tx.receive(TARGET_QUEUE, timeout=0.2) == []
        assert tx.get_conversation_group(TARGET_QUEUE, timeout=0.1) is None
    assert time.monotonic() - started >= 0.3


def test_waitfor_on_a_queue_disabled_while_waiting_fails(tutorial: broker.Broker, db_url: str) -> None:
    failures: list[broker.BrokerError] = []
    started = threading.Event()

    def wait() -> None:
        other = broker.connect(db_url)
        try:
            with other.transaction() as tx:
                started.set()
                tx.receive(TARGET_QUEUE, timeout=30)
        except broker.BrokerError as exc:
            failures.append(exc)
        finally:
            other.dispose()

    waiter = threading.Thread(target=wait)
    waiter.start()
    assert started.wait(10)
    tutorial.alter_queue(TARGET_QUEUE, status=False)
    waiter.join(10)  # well before the 30 s WAITFOR timeout
    assert not waiter.is_alive()
    assert [f.number for f in failures] == [9617]


def test_waitfor_keeps_application_sql_run_before_it(tutorial: broker.Broker) -> None:
    """A WAITFOR must not roll back what the application wrote on the connection."""
    orders.create(tutorial.engine)
    with tutorial.transaction() as tx:
        tx.connection.execute(insert(orders).values(item="kept"))
        assert tx.receive(TARGET_QUEUE, timeout=0.05) == []
    assert _order_count(tutorial) == 1


@pytest.mark.parametrize("fails", [False, True], ids=["commits", "rolls-back"])
def test_application_sql_after_a_send_ends_with_it(tutorial: broker.Broker, fails: bool) -> None:
    """The SEND begins the transaction; SQL run through ``tx.connection`` afterwards joins
    it, and both commit or roll back together."""
    orders.create(tutorial.engine)
    handle = open_dialog(tutorial)
    with pytest.raises(RuntimeError) if fails else nullcontext(), tutorial.transaction() as tx:
        tx.send(handle, REQUEST, "<second/>")
        tx.connection.execute(insert(orders).values(item="widget"))
        tx.send(handle, REQUEST, "<third/>")
        if fails:
            raise RuntimeError("application failure")
    bodies = [m.message_body for m in tutorial.queue_rows(TARGET_QUEUE)]
    if fails:
        assert (_order_count(tutorial), bodies) == (0, [b"<RequestMsg/>"])
    else:
        assert (_order_count(tutorial), bodies) == (1, [b"<RequestMsg/>", b"<second/>", b"<third/>"])
    with tutorial.transaction() as tx:  # the connection is clean for the next transaction
        tx.send(handle, REQUEST, "<fourth/>")
    assert tutorial.queue_rows(TARGET_QUEUE)[-1].message_body == b"<fourth/>"


# SQLite: no other transaction commits while this one holds the write lock.
@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
def test_a_receive_fires_a_timer_another_transaction_set_since_the_last(tutorial: broker.Broker,
                                                                        db_url: str) -> None:
    """Under READ COMMITTED a transaction sees timers committed since its last RECEIVE."""
    handle = open_dialog(tutorial)
    with tutorial.transaction() as tx:
        tx.receive(TARGET_QUEUE)
    other = broker.connect(db_url)
    try:
        with tutorial.transaction() as tx:
            assert tx.receive(TARGET_QUEUE) == []  # nothing ready, nothing due
            with other.transaction() as setter:
                setter.begin_conversation_timer(target_handle(other, handle), 0)
            [timer] = tx.receive(TARGET_QUEUE)
        assert timer.message_type_name == "http://schemas.microsoft.com/SQL/ServiceBroker/DialogTimer"
    finally:
        other.dispose()


def test_many_sends_in_one_transaction_queue_in_the_order_they_were_sent(tutorial: broker.Broker) -> None:
    # 2 x 101 rows: written in several multi-row INSERTs (64 + 32 + ...) at commit on
    # SQLite, which must not reorder them, across conversations too.
    dialogs = [open_dialog(tutorial), open_dialog(tutorial)]
    targets = [target_handle(tutorial, handle) for handle in dialogs]
    with tutorial.transaction() as tx:  # take the opening requests
        for target in targets:
            tx.receive(TARGET_QUEUE, conversation_handle=target)
    sent = []
    with tutorial.transaction() as tx:
        for n in range(101):
            for handle, target in zip(dialogs, targets, strict=True):
                body = f"<n>{n}</n>"
                tx.send(handle, REQUEST, body)
                sent.append((target, n + 1, body.encode()))
    rows = tutorial.queue_rows(TARGET_QUEUE)
    assert [(r.conversation_handle, r.message_sequence_number, r.message_body) for r in rows] == sent
    orders = [r.queuing_order for r in rows]
    assert orders == sorted(set(orders))


def test_a_verb_on_a_transaction_that_has_ended_is_59040_and_holds_nothing(tutorial: broker.Broker) -> None:
    handle = open_dialog(tutorial)
    with tutorial.transaction() as tx:
        tx.send(handle, REQUEST, "<one/>")
    with pytest.raises(broker.BrokerError) as info:
        tx.send(handle, REQUEST, "<late/>")  # would begin a transaction nobody ends
    assert info.value.number == 59040
    with pytest.raises(broker.BrokerError) as info:
        tx.receive(TARGET_QUEUE)
    assert info.value.number == 59040
    with tutorial.transaction() as later:  # the write turn and the locks are free
        later.send(handle, REQUEST, "<two/>")
    assert [m.message_body for m in tutorial.queue_rows(TARGET_QUEUE)] [1:] == [b"<one/>", b"<two/>"]


@sqlite_only
def test_a_second_transaction_of_the_thread_writing_fails_at_once(tutorial: broker.Broker) -> None:
    handle = open_dialog(tutorial)
    with tutorial.transaction() as tx:
        tx.send(handle, REQUEST, "<kept/>")
        with pytest.raises(broker.BrokerError) as info:  # not after the busy timeout
            with tutorial.transaction() as nested:
                nested.send(handle, REQUEST, "<nested/>")
        assert info.value.number == 1222
        assert "this thread's own open transaction" in str(info.value)
        with pytest.raises(broker.BrokerError) as info:
            tutorial.create_queue("MadeMeanwhile")  # DDL runs in a transaction of its own
        assert info.value.number == 1222
    assert [m.message_body for m in tutorial.queue_rows(TARGET_QUEUE)][-1] == b"<kept/>"


class _InterruptedConnection(sqlite3.Connection):
    """Raises KeyboardInterrupt (a Ctrl-C) in ``commit``: before or after committing."""

    interrupt: str | None = None

    def commit(self) -> None:
        when, _InterruptedConnection.interrupt = _InterruptedConnection.interrupt, None
        if when == "before":
            raise KeyboardInterrupt
        super().commit()
        if when == "after":
            raise KeyboardInterrupt


@sqlite_only
@pytest.mark.parametrize("when", ["before", "after"])
@pytest.mark.parametrize("first", [True, False], ids=["first-message", "later-message"])
def test_ctrl_c_in_a_commit_is_raised_as_it_is_and_the_outcome_is_whole(db_url: str, when: str,
                                                                         first: bool) -> None:
    # The first message of a dialog makes its target's group through SQLAlchemy, which
    # then commits; a later one commits on the driver alone.
    db = broker.connect(db_url, connect_args={"factory": _InterruptedConnection})
    try:
        db.create_queue("Q")
        db.create_service("//s", "Q", ["DEFAULT"])
        with db.transaction() as tx:
            handle = tx.begin_dialog("//s", "//s")
            if not first:
                tx.send(handle, "DEFAULT", b"earlier")
        _InterruptedConnection.interrupt = when
        with pytest.raises(KeyboardInterrupt):  # not a BrokerError: the caller must not take it for a failure
            with db.transaction() as tx:
                tx.send(handle, "DEFAULT", b"once")
        expected = ([] if first else [b"earlier"]) + ([b"once"] if when == "after" else [])
        assert [m.message_body for m in db.queue_rows("Q")] == expected
        with db.transaction() as tx:  # the turn and the write lock were given back
            tx.send(handle, "DEFAULT", b"next")
        assert [m.message_body for m in db.queue_rows("Q")] == [*expected, b"next"]
    finally:
        db.dispose()


@pytest.mark.parametrize(("options", "number"), [
    ({"session": 5}, 206), ({"connection": "not a connection"}, 206), ({"session": "x", "connection": None}, 206),
])
def test_joining_something_that_is_no_transaction_is_206(tutorial: broker.Broker, options: dict[str, object],
                                                         number: int) -> None:
    with pytest.raises(broker.BrokerError) as info:
        with tutorial.transaction(**options):  # type: ignore[arg-type]
            pass
    assert info.value.number == number


def test_joining_a_session_and_a_connection_at_once_is_refused(tutorial: broker.Broker) -> None:
    with tutorial.Session() as session, tutorial.engine.connect() as conn:
        with pytest.raises(broker.BrokerError) as info:
            with tutorial.transaction(session=session, connection=conn):
                pass
    assert info.value.number == 59004


_TWO_THREADS = """
import sys, threading, uuid, broker
db = broker.connect(sys.argv[1])
handle, errors = uuid.UUID(sys.argv[2]), []
def send(tag):
    try:
        for number in range(200):
            tx.send(handle, sys.argv[3], f"<{tag}{number}/>")
    except BaseException as exc:
        errors.append(repr(exc))
with db.transaction() as tx:
    threads = [threading.Thread(target=send, args=(tag,)) for tag in "ab"]
    for thread in threads: thread.start()
    for thread in threads: thread.join()
print(errors)
"""


def test_threads_sharing_one_transaction_take_turns(tutorial: broker.Broker, db_url: str) -> None:
    """PostgreSQL hung (8 runs in 9) or raised raw errors when two threads sent in one
    transaction at once: its connection's shared cursors were one thread's at a time.
    The verbs now run one at a time, as a session runs one request at a time. (In a
    subprocess: a hang fails the test instead of the run.)"""
    handle = open_dialog(tutorial)
    done = subprocess.run([sys.executable, "-c", _TWO_THREADS, db_url, str(handle), REQUEST],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"
    bodies = [m.message_body for m in tutorial.queue_rows(TARGET_QUEUE)]
    for tag in "ab":  # each thread's messages in its own order
        assert [b for b in bodies if b.startswith(f"<{tag}".encode())] == [f"<{tag}{n}/>".encode() for n in range(200)]
    assert len(bodies) == 401  # and open_dialog's request
