"""Spec 12.1, steps 6-9: the single-database request/reply tutorial, every "Expect" line.

The ``tutorial`` fixture has run steps 1-5 (objects). Each test drives the dialog as far
as it needs and checks what the tutorial says can be observed at that point.
"""

from __future__ import annotations

import contextlib
import sqlite3
import uuid

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
    sqlite_only,
)

import broker

REQUEST_BODY = "<RequestMsg>Message for Target service.</RequestMsg>"
REPLY_BODY = "<ReplyMsg>Message for Initiator service.</ReplyMsg>"


def _step6(db: broker.Broker) -> uuid.UUID:
    """BEGIN DIALOG ... WITH ENCRYPTION = OFF; SEND the request; COMMIT."""
    with db.transaction() as tx:
        handle = tx.begin_dialog(INITIATOR_SERVICE, TARGET_SERVICE, CONTRACT, encryption=False)
        tx.send(handle, REQUEST, REQUEST_BODY)
    return handle


def _step7(db: broker.Broker) -> list[broker.Message]:
    """The target RECEIVEs the request, SENDs the reply and ENDs its side; COMMIT."""
    with db.transaction() as tx:
        received = tx.receive(TARGET_QUEUE, 1, timeout=1)
        assert len(received) == 1
        target = received[0].conversation_handle
        tx.send(target, REPLY, REPLY_BODY)
        tx.end_conversation(target)
    return received


def _step8(db: broker.Broker) -> list[broker.Message]:
    """The initiator RECEIVEs the reply and ENDs its side; COMMIT."""
    with db.transaction() as tx:
        received = tx.receive(INITIATOR_QUEUE, 1, timeout=1)
        assert len(received) == 1
        tx.end_conversation(received[0].conversation_handle)
    return received


def _endpoints(db: broker.Broker) -> list[dict]:  # type: ignore[type-arg]
    return db.catalog("sys.conversation_endpoints")


def _target_of(db: broker.Broker, initiator: uuid.UUID) -> dict:  # type: ignore[type-arg]
    mine = endpoint(db, initiator)
    assert mine is not None
    rows = [r for r in _endpoints(db)
            if str(r["conversation_id"]) == str(mine["conversation_id"]) and not r["is_initiator"]]
    assert len(rows) == 1
    return rows[0]


# -- step 6 ------------------------------------------------------------------------------


@sqlite_only  # reads the queue's view through a plain sqlite3 connection
def test_step6_send_is_invisible_to_other_sessions_before_commit(tutorial: broker.Broker) -> None:
    db = tutorial
    # Another session reads the queue's view while the sending transaction is open. A
    # broker transaction would wait for the write lock, so read through plain sqlite3
    # (WAL readers do not wait for the writer).
    with contextlib.closing(sqlite3.connect(db.engine.url.database or "")) as other:
        with db.transaction() as tx:
            handle = tx.begin_dialog(INITIATOR_SERVICE, TARGET_SERVICE, CONTRACT, encryption=False)
            tx.send(handle, REQUEST, REQUEST_BODY)
            assert other.execute(f'SELECT count(*) FROM "{TARGET_QUEUE}"').fetchone() == (0,)
            assert other.execute('SELECT count(*) FROM "sys.conversation_endpoints"').fetchone() == (0,)
        assert other.execute(f'SELECT count(*) FROM "{TARGET_QUEUE}"').fetchone() == (1,)


def test_step6_target_queue_holds_the_request(tutorial: broker.Broker) -> None:
    _step6(tutorial)
    rows = tutorial.queue_rows(TARGET_QUEUE)
    assert len(rows) == 1
    row = rows[0]
    assert row.status == 1
    assert row.message_type_name == REQUEST
    assert row.validation == "X"
    assert row.message_body == REQUEST_BODY.encode()
    assert row.service_name == TARGET_SERVICE
    assert row.service_contract_name == CONTRACT
    assert tutorial.queue_rows(INITIATOR_QUEUE) == []


def test_step6_transmission_queue_is_empty(tutorial: broker.Broker) -> None:
    _step6(tutorial)
    assert tutorial.catalog("sys.transmission_queue") == []


def test_step6_two_endpoints_share_the_conversation_id(tutorial: broker.Broker) -> None:
    handle = _step6(tutorial)
    rows = _endpoints(tutorial)
    assert len(rows) == 2
    initiator = endpoint(tutorial, handle)
    target = _target_of(tutorial, handle)
    assert initiator is not None
    assert initiator["is_initiator"] == 1 and target["is_initiator"] == 0
    assert str(initiator["conversation_id"]) == str(target["conversation_id"])
    assert str(initiator["conversation_handle"]) != str(target["conversation_handle"])
    assert (initiator["state"], target["state"]) == ("CO", "CO")
    assert initiator["state_desc"] == target["state_desc"] == "CONVERSING"
    assert initiator["far_service"] == TARGET_SERVICE
    assert target["far_service"] == INITIATOR_SERVICE
    # The row the target receives carries the target's own handle, not the initiator's.
    assert str(tutorial.queue_rows(TARGET_QUEUE)[0].conversation_handle) == str(target["conversation_handle"])


def test_step6_each_endpoint_in_its_own_group(tutorial: broker.Broker) -> None:
    handle = _step6(tutorial)
    initiator = endpoint(tutorial, handle)
    target = _target_of(tutorial, handle)
    assert initiator is not None
    assert str(initiator["conversation_group_id"]) != str(target["conversation_group_id"])
    groups = {str(g["conversation_group_id"]): g for g in tutorial.catalog("sys.conversation_groups")}
    assert set(groups) == {str(initiator["conversation_group_id"]), str(target["conversation_group_id"])}
    assert groups[str(initiator["conversation_group_id"])]["service_id"] == initiator["service_id"]
    assert groups[str(target["conversation_group_id"])]["service_id"] == target["service_id"]
    assert str(tutorial.queue_rows(TARGET_QUEUE)[0].conversation_group_id) == str(target["conversation_group_id"])


def test_step6_encryption_off_asks_for_no_dialog_security(tutorial: broker.Broker) -> None:
    handle = _step6(tutorial)
    initiator = endpoint(tutorial, handle)
    assert initiator is not None
    assert initiator["outbound_session_key_identifier"] is None


def test_encryption_on_gives_the_initiator_a_session_key_identifier(tutorial: broker.Broker) -> None:
    """ON (the default) asks for dialog security; inside one instance nothing is
    encrypted, but the endpoint shows the session key identifier the dialog would use."""
    handles = []
    with tutorial.transaction() as tx:
        for options in ({}, {"encryption": True}):
            handles.append(tx.begin_dialog(INITIATOR_SERVICE, TARGET_SERVICE, CONTRACT, **options))
            tx.send(handles[-1], REQUEST, REQUEST_BODY)
    rows = [endpoint(tutorial, handle) for handle in handles]
    keys = [row["outbound_session_key_identifier"] for row in rows if row is not None]
    assert len(keys) == 2 and all(isinstance(key, uuid.UUID) for key in keys) and keys[0] != keys[1]
    for handle in handles:  # the target side asked for nothing
        target = _target_of(tutorial, handle)
        assert target["outbound_session_key_identifier"] is None
        assert target["inbound_session_key_identifier"] is None


# -- step 7 ------------------------------------------------------------------------------


def test_step7_receive_returns_the_request(tutorial: broker.Broker) -> None:
    handle = _step6(tutorial)
    target = _target_of(tutorial, handle)
    received = _step7(tutorial)
    message = received[0]
    assert message.message_type_name == REQUEST
    assert message.message_body == REQUEST_BODY.encode()
    assert str(message.conversation_handle) == str(target["conversation_handle"])
    assert isinstance(message.conversation_handle, uuid.UUID)


def test_step7_target_queue_empty_and_initiator_has_reply_then_end_dialog(tutorial: broker.Broker) -> None:
    _step6(tutorial)
    _step7(tutorial)
    assert tutorial.queue_rows(TARGET_QUEUE) == []
    rows = tutorial.queue_rows(INITIATOR_QUEUE)
    assert [r.message_type_name for r in rows] == [REPLY, broker.END_DIALOG]
    reply, end = rows
    assert reply.message_body == REPLY_BODY.encode()
    assert end.message_sequence_number == reply.message_sequence_number + 1
    assert end.message_body is None
    assert end.validation == "E"
    assert reply.queuing_order < end.queuing_order
    assert reply.conversation_handle == end.conversation_handle
    assert all(r.status == 1 for r in rows)


def test_step7_endpoint_states_di_and_cd(tutorial: broker.Broker) -> None:
    handle = _step6(tutorial)
    _step7(tutorial)
    initiator = endpoint(tutorial, handle)
    target = _target_of(tutorial, handle)
    assert initiator is not None
    assert (initiator["state"], initiator["state_desc"]) == ("DI", "DISCONNECTED_INBOUND")
    # The tutorial allows DO briefly; a local delivery is acknowledged at once.
    assert target["state"] in ("CD", "DO")
    assert target["state"] == "CD" and target["state_desc"] == "CLOSED"
    assert tutorial.catalog("sys.transmission_queue") == []


# -- step 8 ------------------------------------------------------------------------------


def test_step8_initiator_receives_the_reply(tutorial: broker.Broker) -> None:
    handle = _step6(tutorial)
    _step7(tutorial)
    received = _step8(tutorial)
    assert received[0].message_type_name == REPLY
    assert received[0].message_body == REPLY_BODY.encode()
    assert received[0].conversation_handle == handle


def test_step8_end_discards_the_end_dialog_and_removes_the_initiator(tutorial: broker.Broker) -> None:
    handle = _step6(tutorial)
    _step7(tutorial)
    target_handle = _target_of(tutorial, handle)["conversation_handle"]
    _step8(tutorial)
    assert tutorial.queue_rows(INITIATOR_QUEUE) == []
    assert endpoint(tutorial, handle) is None
    target = endpoint(tutorial, target_handle)
    assert target is not None and target["state"] == "CD"
    # Nothing sent back: the target queue and the transmission queue stay empty.
    assert tutorial.queue_rows(TARGET_QUEUE) == []
    assert tutorial.catalog("sys.transmission_queue") == []
    assert len(_endpoints(tutorial)) == 1


# -- step 9 ------------------------------------------------------------------------------


def _number(call: object) -> int:
    with pytest.raises(broker.BrokerError) as info:
        call()  # type: ignore[operator]
    return info.value.number


def test_step9_cleanup_in_dependency_order(tutorial: broker.Broker) -> None:
    db = tutorial
    _step6(db)
    _step7(db)
    _step8(db)
    # Out of order first: every dependency is refused with 3729 and nothing is dropped.
    assert _number(lambda: db.drop_message_type(REQUEST)) == 3729
    assert _number(lambda: db.drop_message_type(REPLY)) == 3729
    assert _number(lambda: db.drop_contract(CONTRACT)) == 3729
    assert _number(lambda: db.drop_queue(TARGET_QUEUE)) == 3729
    assert _number(lambda: db.drop_queue(INITIATOR_QUEUE)) == 3729
    assert {r["name"] for r in db.catalog("sys.services")} == {TARGET_SERVICE, INITIATOR_SERVICE}
    assert {r["name"] for r in db.catalog("sys.service_queues")} == {TARGET_QUEUE, INITIATOR_QUEUE}

    # Lesson 3's order: services, queues, contract, message types.
    db.drop_service(INITIATOR_SERVICE)
    db.drop_service(TARGET_SERVICE)
    assert db.catalog("sys.services") == []
    assert db.catalog("sys.conversation_endpoints") == []
    db.drop_queue(INITIATOR_QUEUE)
    db.drop_queue(TARGET_QUEUE)
    assert db.catalog("sys.service_queues") == []
    with pytest.raises(broker.BrokerError) as info:
        db.queue_rows(TARGET_QUEUE)
    assert info.value.number == 208
    # The message types are still referenced by the contract.
    assert _number(lambda: db.drop_message_type(REQUEST)) == 3729
    db.drop_contract(CONTRACT)
    assert CONTRACT not in {r["name"] for r in db.catalog("sys.service_contracts")}
    db.drop_message_type(REQUEST)
    db.drop_message_type(REPLY)
    names = {r["name"] for r in db.catalog("sys.service_message_types")}
    assert REQUEST not in names and REPLY not in names
    assert {broker.ERROR, broker.END_DIALOG, broker.DIALOG_TIMER, "DEFAULT"} <= names


def test_step9_queue_view_is_gone_after_drop(tutorial: broker.Broker) -> None:
    db = tutorial
    db.drop_service(TARGET_SERVICE)
    db.drop_queue(TARGET_QUEUE)
    if db.engine.dialect.name != "sqlite":
        return
    with contextlib.closing(sqlite3.connect(db.engine.url.database or "")) as raw:
        names = {row[0] for row in raw.execute("SELECT name FROM sqlite_master")}
    assert TARGET_QUEUE not in names
    assert INITIATOR_QUEUE in names
