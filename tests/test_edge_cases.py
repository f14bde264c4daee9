"""Spec 12.5: edge-case scenarios (items 1-8, 10-14, 17, 18; item 9 lifetime comes later)."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

import pytest
from support import (
    CONTRACT,
    INITIATOR_QUEUE,
    INITIATOR_SERVICE,
    REPLY,
    REQUEST,
    TARGET_QUEUE,
    TARGET_SERVICE,
    endpoint,
    open_dialog,
    target_handle,
)

import broker
from broker.errors import REPEATED_HANDLE


class Abort(Exception):
    """Raised inside a transaction to make it roll back."""


@contextmanager
def raises(number: int) -> Iterator[pytest.ExceptionInfo[broker.BrokerError]]:
    with pytest.raises(broker.BrokerError) as info:
        yield info
    assert info.value.number == number, str(info.value)




def state(db: broker.Broker, handle: uuid.UUID) -> str | None:
    row = endpoint(db, handle)
    return None if row is None else str(row["state"])


def types(db: broker.Broker, queue: str) -> list[str]:
    return [m.message_type_name for m in db.queue_rows(queue)]


def as_datetime(value: object) -> datetime:
    """A catalog timestamp (text on SQLite, datetime elsewhere) as aware UTC."""
    moment = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def timer_set(db: broker.Broker, handle: uuid.UUID) -> bool:
    """Whether the endpoint has a timer armed (SQL Server shows 1900-01-01 when not)."""
    value = endpoint(db, handle)["dialog_timer"]  # type: ignore[index]
    return value is not None and as_datetime(value).year > 1900


def reply(db: broker.Broker, target: uuid.UUID, body: str = "<Reply/>") -> None:
    with db.transaction() as tx:
        tx.send(target, REPLY, body)


# -- 1. transactionality ---------------------------------------------------------------


def test_send_then_rollback_leaves_nothing(tutorial: broker.Broker) -> None:
    db = tutorial
    with pytest.raises(Abort), db.transaction() as tx:
        handle = tx.begin_dialog(INITIATOR_SERVICE, TARGET_SERVICE, CONTRACT)
        tx.send(handle, REQUEST, "<RequestMsg/>")
        raise Abort
    assert db.queue_rows(TARGET_QUEUE) == []
    assert db.catalog("sys.conversation_endpoints") == []
    assert db.catalog("sys.conversation_groups") == []
    assert db.catalog("sys.transmission_queue") == []


def test_send_on_existing_dialog_then_rollback_keeps_the_dialog(tutorial: broker.Broker) -> None:
    db = tutorial
    handle = open_dialog(db)
    before = endpoint(db, handle)
    with pytest.raises(Abort), db.transaction() as tx:
        tx.send(handle, REQUEST, "<Second/>")
        raise Abort
    assert [m.message_body for m in db.queue_rows(TARGET_QUEUE)] == [b"<RequestMsg/>"]
    assert endpoint(db, handle) == before


def test_receive_then_rollback_puts_the_message_back(tutorial: broker.Broker) -> None:
    db = tutorial
    open_dialog(db)
    [original] = db.queue_rows(TARGET_QUEUE)
    with pytest.raises(Abort), db.transaction() as tx:
        assert len(tx.receive(TARGET_QUEUE)) == 1
        assert tx.receive(TARGET_QUEUE) == []  # gone for this transaction
        raise Abort
    [back] = db.queue_rows(TARGET_QUEUE)
    assert back.status == 1
    assert back.queuing_order == original.queuing_order
    assert back == original
    with db.transaction() as tx:
        assert [m.queuing_order for m in tx.receive(TARGET_QUEUE)] == [original.queuing_order]


# -- 2. group locks --------------------------------------------------------------------


def _receive_in_thread(db: broker.Broker, **where: object) -> tuple[threading.Thread, threading.Event, list]:  # type: ignore[type-arg]
    """Start a RECEIVE in another thread (its own connection and transaction)."""
    result: list = []  # type: ignore[type-arg]
    done = threading.Event()

    def run() -> None:
        try:
            with db.transaction() as tx:
                result.append(tx.receive(TARGET_QUEUE, **where))  # type: ignore[arg-type]
        except BaseException as exc:  # reported by the test
            result.append(exc)
        finally:
            done.set()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, done, result


def _two_groups(db: broker.Broker) -> tuple[uuid.UUID, uuid.UUID]:
    """Two dialogs to the target, two requests each; their target groups, oldest first."""
    first = open_dialog(db, b"<g1m1/>")
    second = open_dialog(db, b"<g2m1/>")
    with db.transaction() as tx:
        tx.send(first, REQUEST, b"<g1m2/>")
        tx.send(second, REQUEST, b"<g2m2/>")
    rows = db.queue_rows(TARGET_QUEUE)
    return rows[0].conversation_group_id, rows[1].conversation_group_id


def test_group_lock_second_reader_gets_the_other_group(tutorial: broker.Broker) -> None:
    db = tutorial
    g1, g2 = _two_groups(db)
    sqlite = db.engine.dialect.name == "sqlite"
    with db.transaction() as tx:
        mine = tx.receive(TARGET_QUEUE)
        assert {m.conversation_group_id for m in mine} == {g1}
        assert [m.message_body for m in mine] == [b"<g1m1/>", b"<g1m2/>"]
        thread, done, result = _receive_in_thread(db)
        if sqlite:
            # The database write lock is a superset of every group lock: the other
            # reader waits for this transaction instead of skipping G1.
            assert not done.wait(0.2)
        else:
            # Row locks: the other reader skips G1, still locked here, and returns.
            assert done.wait(10)
    thread.join(10)
    assert done.is_set()
    [theirs] = result
    assert not isinstance(theirs, BaseException), theirs
    assert {m.conversation_group_id for m in theirs} == {g2}
    assert [m.message_body for m in theirs] == [b"<g2m1/>", b"<g2m2/>"]
    assert db.queue_rows(TARGET_QUEUE) == []


def test_group_lock_reader_of_the_same_group_waits_and_gets_the_rest(tutorial: broker.Broker) -> None:
    db = tutorial
    g1, _ = _two_groups(db)
    with db.transaction() as tx:
        [first] = tx.receive(TARGET_QUEUE, 1)
        assert first.conversation_group_id == g1
        thread, done, result = _receive_in_thread(db, conversation_group_id=g1)
        # WHERE conversation_group_id = G1 waits for the lock on every backend.
        assert not done.wait(0.2)
    thread.join(10)
    assert done.is_set()
    [theirs] = result
    assert not isinstance(theirs, BaseException), theirs
    assert [m.message_body for m in theirs] == [b"<g1m2/>"]
    assert {m.conversation_group_id for m in theirs} == {g1}


def test_group_lock_waiting_reader_sees_a_rolled_back_receive(tutorial: broker.Broker) -> None:
    db = tutorial
    g1, _ = _two_groups(db)
    with pytest.raises(Abort), db.transaction() as tx:
        assert len(tx.receive(TARGET_QUEUE, 1)) == 1
        thread, done, result = _receive_in_thread(db, conversation_group_id=g1)
        assert not done.wait(0.2)
        raise Abort
    thread.join(10)
    [theirs] = result
    assert not isinstance(theirs, BaseException), theirs
    assert [m.message_body for m in theirs] == [b"<g1m1/>", b"<g1m2/>"]


def test_concurrent_readers_receive_each_message_exactly_once(tutorial: broker.Broker) -> None:
    db = tutorial
    expected = [f"<m{i}/>".encode() for i in range(12)]
    with db.transaction() as tx:
        for body in expected:
            handle = tx.begin_dialog(INITIATOR_SERVICE, TARGET_SERVICE, CONTRACT)
            tx.send(handle, REQUEST, body)
    received: list[bytes | None] = []
    failures: list[BaseException] = []
    guard = threading.Lock()

    def reader() -> None:
        try:
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                with db.transaction() as tx:
                    got = tx.receive(TARGET_QUEUE, 1)
                if not got:
                    return  # every message was committed before the readers started
                with guard:
                    received.extend(m.message_body for m in got)
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=reader, daemon=True) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(15)
    assert failures == []
    assert not any(t.is_alive() for t in threads)
    assert sorted(received) == sorted(expected)  # type: ignore[type-var]
    assert db.queue_rows(TARGET_QUEUE) == []


# -- 3. related conversations ----------------------------------------------------------


def test_related_conversation_shares_the_group(tutorial: broker.Broker) -> None:
    db = tutorial
    d1 = open_dialog(db, b"<one/>")
    with db.transaction() as tx:
        d2 = tx.begin_dialog(INITIATOR_SERVICE, TARGET_SERVICE, CONTRACT, related_conversation=d1)
        tx.send(d2, REQUEST, b"<two/>")
    e1, e2 = endpoint(db, d1), endpoint(db, d2)
    assert e1 is not None and e2 is not None
    assert str(e1["conversation_group_id"]) == str(e2["conversation_group_id"])
    assert str(e1["conversation_id"]) != str(e2["conversation_id"])
    # The targets' endpoints are each in a group of their own.
    t1, t2 = target_handle(db, d1), target_handle(db, d2)
    assert str(endpoint(db, t1)["conversation_group_id"]) != str(endpoint(db, t2)["conversation_group_id"])  # type: ignore[index]
    reply(db, t1, "<r1/>")
    reply(db, t2, "<r2/>")
    with db.transaction() as tx:
        got = tx.receive(INITIATOR_QUEUE)
    assert {m.conversation_handle for m in got} == {d1, d2}
    assert sorted(m.message_body for m in got) == [b"<r1/>", b"<r2/>"]  # type: ignore[type-var]
    assert {str(m.conversation_group_id) for m in got} == {str(e1["conversation_group_id"])}


def test_related_conversation_unknown_handle_is_8426(tutorial: broker.Broker) -> None:
    with raises(8426), tutorial.transaction() as tx:
        tx.begin_dialog(INITIATOR_SERVICE, TARGET_SERVICE, CONTRACT, related_conversation=uuid.uuid4())
    assert tutorial.catalog("sys.conversation_endpoints") == []


# -- 4. related conversation group -----------------------------------------------------


def test_related_conversation_group_with_a_fresh_guid_creates_that_group(tutorial: broker.Broker) -> None:
    db = tutorial
    group = uuid.uuid4()
    with db.transaction() as tx:
        h1 = tx.begin_dialog(INITIATOR_SERVICE, TARGET_SERVICE, CONTRACT, related_conversation_group=group)
        h2 = tx.begin_dialog(INITIATOR_SERVICE, TARGET_SERVICE, CONTRACT, related_conversation_group=group)
    assert str(endpoint(db, h1)["conversation_group_id"]) == str(group)  # type: ignore[index]
    assert str(endpoint(db, h2)["conversation_group_id"]) == str(group)  # type: ignore[index]
    groups = [g for g in db.catalog("sys.conversation_groups") if str(g["conversation_group_id"]) == str(group)]
    assert len(groups) == 1
    services = {s["name"]: s["service_id"] for s in db.catalog("sys.services")}
    assert groups[0]["service_id"] == services[INITIATOR_SERVICE]
    assert len(db.catalog("sys.conversation_groups")) == 1


# -- 5. direction violations -----------------------------------------------------------


def test_initiator_sending_a_target_type_is_8432(tutorial: broker.Broker) -> None:
    handle = open_dialog(tutorial)
    with raises(8432), tutorial.transaction() as tx:
        tx.send(handle, REPLY, "<x/>")
    assert tutorial.queue_rows(TARGET_QUEUE)[-1].message_type_name == REQUEST


def test_target_sending_an_initiator_type_is_8434(tutorial: broker.Broker) -> None:
    db = tutorial
    handle = open_dialog(db)
    with raises(8434), db.transaction() as tx:
        tx.send(target_handle(db, handle), REQUEST, "<x/>")
    assert db.queue_rows(INITIATOR_QUEUE) == []


def test_type_not_in_contract_is_8431(tutorial: broker.Broker) -> None:
    db = tutorial
    db.create_message_type("//other/Type")
    handle = open_dialog(db)
    with raises(8431), db.transaction() as tx:
        tx.send(handle, "//other/Type", b"x")
    with raises(8431), db.transaction() as tx:
        tx.send(handle, "DEFAULT")  # the contract lacks the DEFAULT type
    assert len(db.queue_rows(TARGET_QUEUE)) == 1


# -- 6. contract not accepted by the target --------------------------------------------


def test_target_without_the_contract_refuses_with_8408(tutorial: broker.Broker) -> None:
    db = tutorial
    db.create_service("//AWDB/1DBSample/NoContract", TARGET_QUEUE)
    with db.transaction() as tx:
        handle = tx.begin_dialog(INITIATOR_SERVICE, "//AWDB/1DBSample/NoContract", CONTRACT)
        tx.send(handle, REQUEST, "<RequestMsg/>")  # SEND itself succeeds
    assert db.queue_rows(TARGET_QUEUE) == []
    [error] = db.queue_rows(INITIATOR_QUEUE)
    assert error.message_type_name == broker.ERROR
    assert error.conversation_handle == handle
    code, description = broker.parse_error(error.message_body)
    assert code == -8408
    assert "//AWDB/1DBSample/NoContract" in description and CONTRACT in description
    assert state(db, handle) == "ER"
    assert len(db.catalog("sys.conversation_endpoints")) == 1  # no target endpoint
    with raises(8429) as info, db.transaction() as tx:
        tx.send(handle, REQUEST, "<again/>")
    assert "'ER'" in info.value.message
    with db.transaction() as tx:
        tx.end_conversation(handle)
    assert endpoint(db, handle) is None
    assert db.queue_rows(INITIATOR_QUEUE) == []


# -- 7/8. validation at delivery -------------------------------------------------------


def test_malformed_xml_fails_at_delivery_with_9615(tutorial: broker.Broker) -> None:
    db = tutorial
    handle = open_dialog(db, "<a>")  # SEND succeeds
    assert db.queue_rows(TARGET_QUEUE) == []
    [error] = db.queue_rows(INITIATOR_QUEUE)
    assert error.message_type_name == broker.ERROR
    code, description = broker.parse_error(error.message_body)
    assert code == -9615
    assert REQUEST in description
    assert state(db, handle) == "ER"
    # Spec 13.2: the first message never arrived, so no target endpoint was made.
    assert len(db.catalog("sys.conversation_endpoints")) == 1
    assert db.catalog("sys.transmission_queue") == []


def test_malformed_xml_on_an_open_dialog_errors_both_sides(tutorial: broker.Broker) -> None:
    # Implementation choice (spec 13.2): the receiving endpoint cannot continue with a
    # hole in its sequence, so it gets the same Error -9615 and goes to ER as well.
    db = tutorial
    handle = open_dialog(db)
    target = target_handle(db, handle)
    with db.transaction() as tx:
        tx.send(handle, REQUEST, "<unclosed>")
    assert types(db, TARGET_QUEUE) == [REQUEST, broker.ERROR]
    assert broker.parse_error(db.queue_rows(TARGET_QUEUE)[1].message_body)[0] == -9615
    assert types(db, INITIATOR_QUEUE) == [broker.ERROR]
    assert (state(db, handle), state(db, target)) == ("ER", "ER")


def test_empty_type_with_a_body_fails_at_delivery(tutorial: broker.Broker) -> None:
    db = tutorial
    db.create_message_type("//e/Empty", "EMPTY")
    db.create_contract("//e/Contract", {"//e/Empty": "INITIATOR"})
    db.create_service("//e/Target", TARGET_QUEUE, ["//e/Contract"])
    with db.transaction() as tx:
        bad = tx.begin_dialog(INITIATOR_SERVICE, "//e/Target", "//e/Contract")
        tx.send(bad, "//e/Empty", b"not empty")
        good = tx.begin_dialog(INITIATOR_SERVICE, "//e/Target", "//e/Contract")
        tx.send(good, "//e/Empty")
        zero = tx.begin_dialog(INITIATOR_SERVICE, "//e/Target", "//e/Contract")
        tx.send(zero, "//e/Empty", b"")
    [error] = db.queue_rows(INITIATOR_QUEUE)
    assert error.conversation_handle == bad
    assert broker.parse_error(error.message_body)[0] == -9615
    rows = db.queue_rows(TARGET_QUEUE)
    assert [r.message_type_name for r in rows] == ["//e/Empty", "//e/Empty"]
    assert all(r.validation == "E" for r in rows)
    assert (state(db, bad), state(db, good), state(db, zero)) == ("ER", "CO", "CO")


# -- 10. conversation timers -----------------------------------------------------------


def test_timer_stores_the_deadline_and_rearming_moves_it(tutorial: broker.Broker) -> None:
    db = tutorial
    handle = open_dialog(db)
    before = datetime.now(UTC)
    with db.transaction() as tx:
        tx.begin_conversation_timer(handle, timeout=100)
    first = as_datetime(endpoint(db, handle)["dialog_timer"])  # type: ignore[index]
    assert before + timedelta(seconds=99) <= first <= datetime.now(UTC) + timedelta(seconds=101)
    with db.transaction() as tx:
        tx.begin_conversation_timer(handle, timeout=1000)
    second = as_datetime(endpoint(db, handle)["dialog_timer"])  # type: ignore[index]
    assert second - first >= timedelta(seconds=899)
    with db.transaction() as tx:
        tx.begin_conversation_timer(handle, timeout=10)
    assert as_datetime(endpoint(db, handle)["dialog_timer"]) < first  # type: ignore[index]
    # Not yet due: nothing arrives.
    with db.transaction() as tx:
        assert tx.receive(INITIATOR_QUEUE) == []


def test_timer_beyond_the_lifetime_is_8410(tutorial: broker.Broker) -> None:
    db = tutorial
    handle = open_dialog(db, lifetime=60)
    with raises(8410), db.transaction() as tx:
        tx.begin_conversation_timer(handle, timeout=120)
    assert not timer_set(db, handle)
    with db.transaction() as tx:
        tx.begin_conversation_timer(handle, timeout=30)
    assert timer_set(db, handle)


def test_expired_timer_puts_a_dialog_timer_on_the_local_queue_only(tutorial: broker.Broker) -> None:
    # Spec 13.9 leaves TIMEOUT = 0 open (fire now or cancel): the code arms a timer that
    # is due at once, and RECEIVE fires due timers itself, so no test has to wait.
    db = tutorial
    handle = open_dialog(db)
    with db.transaction() as tx:
        tx.begin_conversation_timer(handle, timeout=0)
    with db.transaction() as tx:
        [timer] = tx.receive(INITIATOR_QUEUE)
    assert timer.message_type_name == broker.DIALOG_TIMER
    assert timer.conversation_handle == handle
    assert timer.message_body is None
    assert timer.validation == "E"
    assert types(db, TARGET_QUEUE) == [REQUEST]  # nothing went to the far side
    assert not timer_set(db, handle)
    assert state(db, handle) == "CO"  # the conversation is not otherwise affected
    with db.transaction() as tx:
        assert tx.receive(INITIATOR_QUEUE) == []  # fires once


def test_receive_order_dialog_timer_then_error_then_messages(tutorial: broker.Broker) -> None:
    db = tutorial
    handle = open_dialog(db, b"<m0/>")
    target = target_handle(db, handle)
    with db.transaction() as tx:
        tx.begin_conversation_timer(target, timeout=0)
    with db.transaction() as tx:
        tx.send(handle, REQUEST, b"<m1/>")
        tx.end_conversation(handle, error=50, description="stop")
    got_rows = db.queue_rows(TARGET_QUEUE)
    assert [r.message_type_name for r in got_rows] == [REQUEST, REQUEST, broker.ERROR]
    with db.transaction() as tx:
        got = tx.receive(TARGET_QUEUE)
    assert [m.message_type_name for m in got] == [broker.DIALOG_TIMER, broker.ERROR, REQUEST, REQUEST]
    assert [m.message_body for m in got[2:]] == [b"<m0/>", b"<m1/>"]
    assert broker.parse_error(got[1].message_body) == (50, "stop")
    assert {m.conversation_handle for m in got} == {target}


def test_timer_can_be_armed_on_a_disconnected_inbound_endpoint(tutorial: broker.Broker) -> None:
    db = tutorial
    handle = open_dialog(db)
    with db.transaction() as tx:
        tx.end_conversation(target_handle(db, handle))
    assert state(db, handle) == "DI"
    with db.transaction() as tx:
        tx.begin_conversation_timer(handle, timeout=0)
    with db.transaction() as tx:
        got = tx.receive(INITIATOR_QUEUE)
    assert [m.message_type_name for m in got] == [broker.DIALOG_TIMER, broker.END_DIALOG]


# -- 11. ending order ------------------------------------------------------------------


def test_target_ends_first(tutorial: broker.Broker) -> None:
    db = tutorial
    handle = open_dialog(db)
    target = target_handle(db, handle)
    reply(db, target)
    with db.transaction() as tx:
        tx.end_conversation(target)
    assert state(db, handle) == "DI"
    assert state(db, target) == "CD"
    with raises(8429) as info, db.transaction() as tx:
        tx.send(handle, REQUEST, "<late/>")
    assert "'DI'" in info.value.message
    with db.transaction() as tx:  # DI can still RECEIVE
        got = tx.receive(INITIATOR_QUEUE)
    assert [m.message_type_name for m in got] == [REPLY, broker.END_DIALOG]
    with db.transaction() as tx:
        tx.end_conversation(handle)
    assert endpoint(db, handle) is None
    assert state(db, target) == "CD"
    assert db.queue_rows(TARGET_QUEUE) == []


def test_initiator_ends_first(tutorial: broker.Broker) -> None:
    db = tutorial
    handle = open_dialog(db)
    target = target_handle(db, handle)
    with db.transaction() as tx:
        tx.end_conversation(handle)
    assert endpoint(db, handle) is None  # delivered locally: acknowledged at once
    assert state(db, target) == "DI"
    assert types(db, TARGET_QUEUE) == [REQUEST, broker.END_DIALOG]
    rows = db.queue_rows(TARGET_QUEUE)
    assert rows[1].message_sequence_number == rows[0].message_sequence_number + 1
    with db.transaction() as tx:
        tx.end_conversation(target)
    assert state(db, target) == "CD"
    assert db.queue_rows(TARGET_QUEUE) == []
    assert db.queue_rows(INITIATOR_QUEUE) == []


def test_end_with_error_reaches_the_far_side(tutorial: broker.Broker) -> None:
    db = tutorial
    handle = open_dialog(db)
    target = target_handle(db, handle)
    with db.transaction() as tx:
        tx.end_conversation(target, error=50, description="x")
    assert state(db, handle) == "ER"
    [error] = db.queue_rows(INITIATOR_QUEUE)
    assert error.message_type_name == broker.ERROR
    assert error.validation == "X"
    assert broker.parse_error(error.message_body) == (50, "x")
    assert state(db, target) == "CD"
    with raises(8429) as info, db.transaction() as tx:
        tx.send(handle, REQUEST, "<x/>")
    assert "'ER'" in info.value.message
    with db.transaction() as tx:
        tx.end_conversation(handle)
    assert endpoint(db, handle) is None
    assert db.queue_rows(INITIATOR_QUEUE) == []


def test_end_with_error_drops_untransmitted_messages(tutorial: broker.Broker) -> None:
    db = tutorial
    handle = open_dialog(db, b"<sent/>")
    target = target_handle(db, handle)
    db.alter_queue(TARGET_QUEUE, status=False)
    with db.transaction() as tx:
        tx.send(handle, REQUEST, b"<held/>")
    assert [r["message_body"] for r in db.catalog("sys.transmission_queue")] == [b"<held/>"]
    with db.transaction() as tx:
        tx.end_conversation(handle, error=50, description="gone")
    held = db.catalog("sys.transmission_queue")
    assert [bool(r["is_conversation_error"]) for r in held] == [True]
    db.alter_queue(TARGET_QUEUE, status=True)
    assert db.catalog("sys.transmission_queue") == []
    rows = db.queue_rows(TARGET_QUEUE)
    assert [r.message_type_name for r in rows] == [REQUEST, broker.ERROR]
    assert rows[0].message_body == b"<sent/>"
    assert broker.parse_error(rows[1].message_body) == (50, "gone")
    assert state(db, target) == "ER"
    assert endpoint(db, handle) is None


def test_far_side_end_drops_what_an_ended_side_still_holds(tutorial: broker.Broker) -> None:
    # Spec 2.6: a far side that still had unsent messages drops them silently. The
    # target ends while the initiator's queue is OFF (reply and EndDialog held, target
    # DO); the initiator, not knowing, ends too: both sides are done.
    db = tutorial
    handle = open_dialog(db)
    target = target_handle(db, handle)
    db.alter_queue(INITIATOR_QUEUE, status=False)
    with db.transaction() as tx:
        tx.send(target, REPLY, b"<held/>")
        tx.end_conversation(target)
    assert state(db, target) == "DO"
    assert len(db.catalog("sys.transmission_queue")) == 2
    with db.transaction() as tx:
        tx.end_conversation(handle)
    assert endpoint(db, handle) is None
    assert state(db, target) == "CD"
    assert db.catalog("sys.transmission_queue") == []
    db.alter_queue(INITIATOR_QUEUE, status=True)
    assert db.queue_rows(INITIATOR_QUEUE) == []
    assert db.queue_rows(TARGET_QUEUE) == []


def test_end_while_the_end_dialog_is_held_leaves_do(tutorial: broker.Broker) -> None:
    db = tutorial
    handle = open_dialog(db)
    target = target_handle(db, handle)
    db.alter_queue(TARGET_QUEUE, status=False)
    with db.transaction() as tx:
        tx.end_conversation(handle)
    assert state(db, handle) == "DO"
    assert [bool(r["is_end_of_dialog"]) for r in db.catalog("sys.transmission_queue")] == [True]
    with raises(8429) as info, db.transaction() as tx:
        tx.send(handle, REQUEST, b"<x/>")
    assert "'DO'" in info.value.message
    with raises(8427) as info, db.transaction() as tx:
        tx.end_conversation(handle)
    assert "'DO'" in info.value.message
    with raises(8458), db.transaction() as tx:
        tx.begin_conversation_timer(handle, timeout=1)
    db.alter_queue(TARGET_QUEUE, status=True)
    assert endpoint(db, handle) is None
    assert state(db, target) == "DI"
    assert types(db, TARGET_QUEUE) == [REQUEST, broker.END_DIALOG]


# -- 12. END WITH CLEANUP --------------------------------------------------------------


def test_end_with_cleanup_removes_everything_local_and_tells_nobody(tutorial: broker.Broker) -> None:
    db = tutorial
    handle = open_dialog(db)
    target = target_handle(db, handle)
    reply(db, target)
    db.alter_queue(TARGET_QUEUE, status=False)
    with db.transaction() as tx:
        tx.send(handle, REQUEST, b"<held/>")
    assert len(db.catalog("sys.transmission_queue")) == 1
    assert types(db, INITIATOR_QUEUE) == [REPLY]
    with db.transaction() as tx:
        tx.end_conversation(handle, cleanup=True)
    assert endpoint(db, handle) is None
    assert db.queue_rows(INITIATOR_QUEUE) == []
    assert db.catalog("sys.transmission_queue") == []
    db.alter_queue(TARGET_QUEUE, status=True)
    assert types(db, TARGET_QUEUE) == [REQUEST]  # no EndDialog, no Error, no held message
    assert state(db, target) == "CO"


def test_end_with_cleanup_works_on_a_closed_endpoint(tutorial: broker.Broker) -> None:
    db = tutorial
    handle = open_dialog(db)
    target = target_handle(db, handle)
    with db.transaction() as tx:
        tx.end_conversation(target)
    assert state(db, target) == "CD"
    with db.transaction() as tx:
        tx.end_conversation(target, cleanup=True)
    assert endpoint(db, target) is None
    assert state(db, handle) == "DI"


# -- 13. queue disabled ----------------------------------------------------------------


def test_disabled_target_queue_holds_sends_until_enabled(tutorial: broker.Broker) -> None:
    db = tutorial
    db.alter_queue(TARGET_QUEUE, status=False)
    first = open_dialog(db, b"<one/>")
    with db.transaction() as tx:
        tx.send(first, REQUEST, b"<two/>")
    second = open_dialog(db, b"<three/>")
    held = db.catalog("sys.transmission_queue")
    assert [r["message_body"] for r in held] == [b"<one/>", b"<two/>", b"<three/>"]
    assert all(r["transmission_status"] for r in held)
    assert all(TARGET_QUEUE in r["transmission_status"] for r in held)
    assert all(r["to_service_name"] == TARGET_SERVICE for r in held)
    assert db.queue_rows(TARGET_QUEUE) == []
    with raises(9617) as info, db.transaction() as tx:
        tx.receive(TARGET_QUEUE)
    assert isinstance(info.value, broker.QueueDisabledError)
    with raises(9617), db.transaction() as tx:
        tx.get_conversation_group(TARGET_QUEUE)
    db.alter_queue(TARGET_QUEUE, status=True)
    assert db.catalog("sys.transmission_queue") == []
    rows = db.queue_rows(TARGET_QUEUE)
    assert [r.message_body for r in rows] == [b"<one/>", b"<two/>", b"<three/>"]
    assert [r.message_sequence_number for r in rows[:2]] == [0, 1]
    assert (state(db, first), state(db, second)) == ("CO", "CO")


def test_send_on_a_dialog_with_held_messages_keeps_order(tutorial: broker.Broker) -> None:
    db = tutorial
    handle = open_dialog(db, b"<one/>")
    db.alter_queue(TARGET_QUEUE, status=False)
    with db.transaction() as tx:
        tx.send(handle, REQUEST, b"<two/>")
    db.alter_queue(TARGET_QUEUE, status=True)
    with db.transaction() as tx:
        tx.send(handle, REQUEST, b"<three/>")
    assert [r.message_body for r in db.queue_rows(TARGET_QUEUE)] == [b"<one/>", b"<two/>", b"<three/>"]


# -- 14. retention ---------------------------------------------------------------------


def test_retention_keeps_sent_and_received_rows_until_end(tutorial: broker.Broker) -> None:
    db = tutorial
    db.alter_queue(TARGET_QUEUE, retention=True)
    db.alter_queue(INITIATOR_QUEUE, retention=True)
    handle = open_dialog(db)
    [copy] = db.queue_rows(INITIATOR_QUEUE)
    assert (copy.status, copy.message_type_name, copy.conversation_handle) == (3, REQUEST, handle)
    [arrived] = db.queue_rows(TARGET_QUEUE)
    assert arrived.status == 1
    with db.transaction() as tx:
        [got] = tx.receive(TARGET_QUEUE)
    assert got.message_type_name == REQUEST
    [kept] = db.queue_rows(TARGET_QUEUE)
    assert kept.status == 0 and kept.queuing_order == arrived.queuing_order
    with db.transaction() as tx:
        assert tx.receive(TARGET_QUEUE) == []
    with db.transaction() as tx:
        assert tx.receive(INITIATOR_QUEUE) == []  # a status-3 copy is never received
    with db.transaction() as tx:
        tx.end_conversation(got.conversation_handle)
    assert db.queue_rows(TARGET_QUEUE) == []
    assert [(r.status, r.message_type_name) for r in db.queue_rows(INITIATOR_QUEUE)] == [
        (3, REQUEST), (1, broker.END_DIALOG)]
    with db.transaction() as tx:
        tx.end_conversation(handle)
    assert db.queue_rows(INITIATOR_QUEUE) == []


# -- 17. multicast SEND ----------------------------------------------------------------


def test_multicast_send_delivers_one_copy_per_dialog(tutorial: broker.Broker) -> None:
    db = tutorial
    h1, h2 = open_dialog(db), open_dialog(db)
    with db.transaction() as tx:
        tx.send([h1, h2], REQUEST, b"<all/>")
    rows = [r for r in db.queue_rows(TARGET_QUEUE) if r.message_body == b"<all/>"]
    assert len(rows) == 2
    assert {r.conversation_handle for r in rows} == {target_handle(db, h1), target_handle(db, h2)}
    assert all(r.message_sequence_number == 1 for r in rows)


def test_multicast_send_is_atomic(tutorial: broker.Broker) -> None:
    db = tutorial
    h1 = open_dialog(db)
    h2 = open_dialog(db)
    with db.transaction() as tx:
        tx.end_conversation(target_handle(db, h2), error=7, description="broken")
    assert state(db, h2) == "ER"
    before = db.queue_rows(TARGET_QUEUE)
    e1 = endpoint(db, h1)
    with db.transaction() as tx:  # the failure is caught and the transaction commits
        with raises(8429):
            tx.send([h1, h2], REQUEST, b"<all/>")
    assert db.queue_rows(TARGET_QUEUE) == before
    assert endpoint(db, h1) == e1
    assert db.catalog("sys.transmission_queue") == []


def test_multicast_send_refuses_a_repeated_handle(tutorial: broker.Broker) -> None:
    # SQL Server's number for a repeated handle is not documented (spec 2.2): the
    # project's own 59005, and nothing is sent.
    db = tutorial
    h1, h2 = open_dialog(db), open_dialog(db)
    before = db.queue_rows(TARGET_QUEUE)
    with db.transaction() as tx:
        with raises(REPEATED_HANDLE):
            tx.send([h1, h2, h1], REQUEST, b"<dup/>")
        with raises(REPEATED_HANDLE):
            tx.send([h1, str(h1)], REQUEST, b"<dup/>")
    assert db.queue_rows(TARGET_QUEUE) == before


# -- 18. GET CONVERSATION GROUP --------------------------------------------------------


def test_get_conversation_group_returns_the_next_group_without_consuming(tutorial: broker.Broker) -> None:
    db = tutorial
    g1, g2 = _two_groups(db)
    before = db.queue_rows(TARGET_QUEUE)
    with db.transaction() as tx:
        group = tx.get_conversation_group(TARGET_QUEUE)
        assert group == g1
        assert isinstance(group, uuid.UUID)
        got = tx.receive(TARGET_QUEUE, conversation_group_id=group)
        assert [m.message_body for m in got] == [b"<g1m1/>", b"<g1m2/>"]
        assert tx.get_conversation_group(TARGET_QUEUE) == g2
    assert len(before) == 4
    assert {r.conversation_group_id for r in db.queue_rows(TARGET_QUEUE)} == {g2}


def test_get_conversation_group_leaves_messages_in_place(tutorial: broker.Broker) -> None:
    db = tutorial
    open_dialog(db)
    before = db.queue_rows(TARGET_QUEUE)
    with db.transaction() as tx:
        assert tx.get_conversation_group(TARGET_QUEUE) == before[0].conversation_group_id
    assert db.queue_rows(TARGET_QUEUE) == before


def test_get_conversation_group_on_an_empty_queue_is_none(tutorial: broker.Broker) -> None:
    with tutorial.transaction() as tx:
        assert tx.get_conversation_group(TARGET_QUEUE) is None
        assert tx.get_conversation_group(TARGET_QUEUE, timeout=0) is None


def test_get_conversation_group_waitfor_times_out_with_none(tutorial: broker.Broker) -> None:
    with tutorial.transaction() as tx:
        start = time.monotonic()
        assert tx.get_conversation_group(TARGET_QUEUE, timeout=0.1) is None
        elapsed = time.monotonic() - start
    assert 0.1 <= elapsed < 2.0


def test_waitfor_receive_wakes_when_a_message_is_committed(tutorial: broker.Broker) -> None:
    db = tutorial
    result: list[list[broker.Message]] = []
    started = threading.Event()

    def reader() -> None:
        with db.transaction() as tx:
            started.set()
            result.append(tx.receive(TARGET_QUEUE, timeout=10))

    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    assert started.wait(10)
    begun = time.monotonic()
    open_dialog(db, b"<wake/>")
    thread.join(10)
    assert not thread.is_alive()
    assert [m.message_body for m in result[0]] == [b"<wake/>"]
    assert time.monotonic() - begun < 5
