"""Every failure carries SQL Server's error number, and a failing verb writes nothing.

Each failing verb runs inside a transaction that catches the error and then commits:
the broker promises that a BrokerError is raised before anything is written, so the
database must look exactly as it did before.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest
from lxml import etree
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

ERROR_NS = "http://schemas.microsoft.com/SQL/ServiceBroker/Error"


def snapshot(db: broker.Broker) -> dict[str, Any]:
    """Everything a failing verb could have half-written."""
    def rows(view: str, key: str) -> list[dict[str, Any]]:
        return sorted(db.catalog(view), key=lambda r: str(r[key]))

    queues = {q["name"]: db.queue_rows(q["name"]) for q in db.catalog("sys.service_queues")}
    return {
        "queues": queues,
        "endpoints": rows("sys.conversation_endpoints", "conversation_handle"),
        "groups": rows("sys.conversation_groups", "conversation_group_id"),
        "transmission": db.catalog("sys.transmission_queue"),
        "message_types": rows("sys.service_message_types", "message_type_id"),
        "contracts": rows("sys.service_contracts", "service_contract_id"),
        "usages": rows("sys.service_contract_message_usages", "message_type_id"),
        "services": rows("sys.services", "service_id"),
        "service_contracts": rows("sys.service_contract_usages", "service_id"),
        "queue_objects": rows("sys.service_queues", "object_id"),
    }


def fails(db: broker.Broker, number: int, verb: Callable[[broker.Transaction], object]) -> broker.BrokerError:
    """Run ``verb`` in a transaction that survives its error and commits; nothing may change."""
    before = snapshot(db)
    with db.transaction() as tx:
        with pytest.raises(broker.BrokerError) as info:
            verb(tx)
    assert info.value.number == number, str(info.value)
    assert snapshot(db) == before
    return info.value


def ddl_fails(db: broker.Broker, number: int, call: Callable[[], object]) -> broker.BrokerError:
    before = snapshot(db)
    with pytest.raises(broker.BrokerError) as info:
        call()
    assert info.value.number == number, str(info.value)
    assert snapshot(db) == before
    return info.value




# -- SEND (spec 2.2) -------------------------------------------------------------------


def test_send_without_a_handle_is_8418(tutorial: broker.Broker) -> None:
    fails(tutorial, 8418, lambda tx: tx.send(None, REQUEST, b"<x/>"))
    fails(tutorial, 8418, lambda tx: tx.send([], REQUEST, b"<x/>"))


def test_send_on_an_unknown_handle_is_8426(tutorial: broker.Broker) -> None:
    unknown = uuid.uuid4()
    error = fails(tutorial, 8426, lambda tx: tx.send(unknown, REQUEST, b"<x/>"))
    assert str(unknown).upper() in error.message
    assert isinstance(error, broker.ConversationNotFoundError)
    fails(tutorial, 8426, lambda tx: tx.send("not-a-handle", REQUEST, b"<x/>"))


def test_send_checks_the_handle_before_the_message_type(tutorial: broker.Broker) -> None:
    fails(tutorial, 8426, lambda tx: tx.send(uuid.uuid4(), "//no/such/type", b"<x/>"))


def test_send_on_an_ended_handle_is_8426(tutorial: broker.Broker) -> None:
    db = tutorial
    handle = open_dialog(db)
    with db.transaction() as tx:
        tx.end_conversation(handle)  # delivered at once: the initiator endpoint is gone
    fails(db, 8426, lambda tx: tx.send(handle, REQUEST, b"<x/>"))


@pytest.mark.parametrize("ended_by", ["target", "target_with_error"])
def test_send_in_a_wrong_state_is_8429_with_the_state(tutorial: broker.Broker, ended_by: str) -> None:
    db = tutorial
    handle = open_dialog(db)
    with db.transaction() as tx:
        if ended_by == "target":
            tx.end_conversation(target_handle(db, handle))
        else:
            tx.end_conversation(target_handle(db, handle), error=1, description="no")
    expected = "DI" if ended_by == "target" else "ER"
    error = fails(db, 8429, lambda tx: tx.send(handle, REQUEST, b"<x/>"))
    assert f"current endpoint state is '{expected}'" in error.message


def test_send_on_a_closed_target_endpoint_is_8429_cd(tutorial: broker.Broker) -> None:
    db = tutorial
    handle = open_dialog(db)
    target = target_handle(db, handle)
    with db.transaction() as tx:
        tx.end_conversation(target)
    error = fails(db, 8429, lambda tx: tx.send(target, REPLY, b"<x/>"))
    assert "'CD'" in error.message


def test_send_of_an_unknown_message_type_is_8428(tutorial: broker.Broker) -> None:
    handle = open_dialog(tutorial)
    error = fails(tutorial, 8428, lambda tx: tx.send(handle, "//no/such/type", b"<x/>"))
    assert "//no/such/type" in error.message


def test_send_of_a_type_outside_the_contract_is_8431(tutorial: broker.Broker) -> None:
    db = tutorial
    db.create_message_type("//other/Type")
    handle = open_dialog(db)
    error = fails(db, 8431, lambda tx: tx.send(handle, "//other/Type", b"x"))
    assert "//other/Type" in error.message
    fails(db, 8431, lambda tx: tx.send(handle))  # DEFAULT is not in the contract


def test_send_against_the_direction_is_8432_or_8434(tutorial: broker.Broker) -> None:
    db = tutorial
    handle = open_dialog(db)
    fails(db, 8432, lambda tx: tx.send(handle, REPLY, b"<x/>"))
    fails(db, 8434, lambda tx: tx.send(target_handle(db, handle), REQUEST, b"<x/>"))


def test_send_with_own_queue_disabled_and_retention_on_is_9618(tutorial: broker.Broker) -> None:
    db = tutorial
    handle = open_dialog(db)
    db.alter_queue(INITIATOR_QUEUE, retention=True, status=False)
    error = fails(db, 9618, lambda tx: tx.send(handle, REQUEST, b"<x/>"))
    assert INITIATOR_QUEUE in error.message
    db.alter_queue(INITIATOR_QUEUE, retention=False)
    with db.transaction() as tx:  # without retention a disabled own queue does not matter
        tx.send(handle, REQUEST, b"<x/>")
    assert len(db.queue_rows(TARGET_QUEUE)) == 2


def test_a_transaction_stays_usable_after_a_failed_send(tutorial: broker.Broker) -> None:
    db = tutorial
    handle = open_dialog(db)
    with db.transaction() as tx:
        with pytest.raises(broker.BrokerError):
            tx.send(handle, REPLY, b"<wrong-direction/>")
        tx.send(handle, REQUEST, b"<fine/>")
    rows = db.queue_rows(TARGET_QUEUE)
    assert [r.message_body for r in rows] == [b"<RequestMsg/>", b"<fine/>"]
    assert [r.message_sequence_number for r in rows] == [0, 1]  # no sequence number lost


def test_multicast_send_with_an_unknown_handle_sends_nothing(tutorial: broker.Broker) -> None:
    db = tutorial
    h1 = open_dialog(db)
    fails(db, 8426, lambda tx: tx.send([h1, uuid.uuid4()], REQUEST, b"<all/>"))


def test_multicast_send_with_a_wrong_direction_on_one_handle_sends_nothing(tutorial: broker.Broker) -> None:
    db = tutorial
    h1, h2 = open_dialog(db), open_dialog(db)
    t2 = target_handle(db, h2)
    # REQUEST is fine for the initiator h1 but not for the target t2.
    fails(db, 8434, lambda tx: tx.send([h1, t2], REQUEST, b"<all/>"))


def test_multicast_send_with_a_repeated_handle_sends_nothing(tutorial: broker.Broker) -> None:
    # No number is documented for a repeated handle (spec 13): the project's own 59005.
    db = tutorial
    h1, h2 = open_dialog(db), open_dialog(db)
    error = fails(db, 59005, lambda tx: tx.send([h1, h2, h1], REQUEST, b"<x/>"))
    assert "more than once" in error.message


# -- BEGIN DIALOG (spec 2.1) -----------------------------------------------------------


def test_begin_dialog_from_an_unknown_service_is_8423(tutorial: broker.Broker) -> None:
    error = fails(tutorial, 8423, lambda tx: tx.begin_dialog("//no/Service", TARGET_SERVICE, CONTRACT))
    assert "//no/Service" in error.message
    fails(tutorial, 8421, lambda tx: tx.begin_dialog("", TARGET_SERVICE, CONTRACT))


def test_begin_dialog_on_an_unknown_contract_is_8425(tutorial: broker.Broker) -> None:
    error = fails(tutorial, 8425, lambda tx: tx.begin_dialog(INITIATOR_SERVICE, TARGET_SERVICE, "//no/Contract"))
    assert "//no/Contract" in error.message


def test_begin_dialog_with_a_null_contract_is_8417(tutorial: broker.Broker) -> None:
    fails(tutorial, 8417, lambda tx: tx.begin_dialog(INITIATOR_SERVICE, TARGET_SERVICE, None))  # type: ignore[arg-type]


def test_begin_dialog_with_an_invalid_target_name_is_8412(tutorial: broker.Broker) -> None:
    fails(tutorial, 8412, lambda tx: tx.begin_dialog(INITIATOR_SERVICE, "", CONTRACT))
    fails(tutorial, 8412, lambda tx: tx.begin_dialog(INITIATOR_SERVICE, "x" * 257, CONTRACT))


def test_begin_dialog_does_not_validate_the_target_service(tutorial: broker.Broker) -> None:
    with tutorial.transaction() as tx:
        handle = tx.begin_dialog(INITIATOR_SERVICE, "//nowhere/Service", CONTRACT)
    row = endpoint(tutorial, handle)
    assert row is not None and row["state"] == "SO" and row["far_service"] == "//nowhere/Service"


@pytest.mark.parametrize("lifetime", [0, -1, 2_147_483_648])
def test_begin_dialog_lifetime_out_of_range_is_8411(tutorial: broker.Broker, lifetime: int) -> None:
    error = fails(tutorial, 8411, lambda tx: tx.begin_dialog(
        INITIATOR_SERVICE, TARGET_SERVICE, CONTRACT, lifetime=lifetime))
    assert str(lifetime) in error.message


def test_begin_dialog_lifetime_bounds_are_accepted(tutorial: broker.Broker) -> None:
    with tutorial.transaction() as tx:
        tx.begin_dialog(INITIATOR_SERVICE, TARGET_SERVICE, CONTRACT, lifetime=1)
        tx.begin_dialog(INITIATOR_SERVICE, TARGET_SERVICE, CONTRACT, lifetime=2_147_483_647)
    assert len(tutorial.catalog("sys.conversation_endpoints")) == 2


def test_begin_dialog_with_a_too_long_broker_instance_is_8413(tutorial: broker.Broker) -> None:
    fails(tutorial, 8413, lambda tx: tx.begin_dialog(
        INITIATOR_SERVICE, TARGET_SERVICE, CONTRACT, broker_instance="a" * 129))


def test_begin_dialog_related_to_another_services_conversation_is_9610(tutorial: broker.Broker) -> None:
    db = tutorial
    handle = open_dialog(db)
    target = target_handle(db, handle)  # owned by the target service
    error = fails(db, 9610, lambda tx: tx.begin_dialog(
        INITIATOR_SERVICE, TARGET_SERVICE, CONTRACT, related_conversation=target))
    assert INITIATOR_SERVICE in error.message and TARGET_SERVICE in error.message
    target_group = endpoint(db, target)["conversation_group_id"]  # type: ignore[index]
    fails(db, 9610, lambda tx: tx.begin_dialog(
        INITIATOR_SERVICE, TARGET_SERVICE, CONTRACT, related_conversation_group=target_group))


def test_begin_dialog_related_to_an_unknown_conversation_is_8426(tutorial: broker.Broker) -> None:
    fails(tutorial, 8426, lambda tx: tx.begin_dialog(
        INITIATOR_SERVICE, TARGET_SERVICE, CONTRACT, related_conversation=uuid.uuid4()))


# -- END CONVERSATION (spec 2.6) -------------------------------------------------------


def test_end_with_error_needs_both_code_and_description(tutorial: broker.Broker) -> None:
    handle = open_dialog(tutorial)
    fails(tutorial, 8419, lambda tx: tx.end_conversation(handle, description="no code"))
    fails(tutorial, 8422, lambda tx: tx.end_conversation(handle, error=50))
    with tutorial.transaction() as tx:  # empty is not missing: SQL Server asks only for non-NULL
        tx.end_conversation(handle, error=50, description="")


@pytest.mark.parametrize("code", [0, -8489])
def test_end_with_error_code_must_be_positive(tutorial: broker.Broker, code: int) -> None:
    handle = open_dialog(tutorial)
    fails(tutorial, 8419, lambda tx: tx.end_conversation(handle, error=code, description="x"))


def test_end_of_an_unknown_handle_is_8426(tutorial: broker.Broker) -> None:
    fails(tutorial, 8426, lambda tx: tx.end_conversation(uuid.uuid4()))
    fails(tutorial, 8418, lambda tx: tx.end_conversation(None))


def test_end_of_an_ended_endpoint_is_8427(tutorial: broker.Broker) -> None:
    db = tutorial
    handle = open_dialog(db)
    target = target_handle(db, handle)
    with db.transaction() as tx:
        tx.end_conversation(target)
    error = fails(db, 8427, lambda tx: tx.end_conversation(target))
    assert "'CD'" in error.message


def test_end_of_a_dialog_that_sent_nothing_removes_it(tutorial: broker.Broker) -> None:
    # Spec 13.13 (assumed): nothing was sent, so nobody is told.
    db = tutorial
    with db.transaction() as tx:
        handle = tx.begin_dialog(INITIATOR_SERVICE, TARGET_SERVICE, CONTRACT)
    with db.transaction() as tx:
        tx.end_conversation(handle)
    assert db.catalog("sys.conversation_endpoints") == []
    assert db.catalog("sys.conversation_groups") == []
    assert db.queue_rows(TARGET_QUEUE) == []


# -- MOVE CONVERSATION (spec 2.5) ------------------------------------------------------


def test_move_to_a_group_of_another_queue_is_8439(tutorial: broker.Broker) -> None:
    db = tutorial
    handle = open_dialog(db)
    target_group = endpoint(db, target_handle(db, handle))["conversation_group_id"]  # type: ignore[index]
    error = fails(db, 8439, lambda tx: tx.move_conversation(handle, target_group))
    assert str(target_group).upper() in error.message
    fails(db, 8439, lambda tx: tx.move_conversation(handle, uuid.uuid4()))


def test_move_of_an_ended_endpoint_is_8438(tutorial: broker.Broker) -> None:
    db = tutorial
    h1, h2 = open_dialog(db), open_dialog(db)
    t1, t2 = target_handle(db, h1), target_handle(db, h2)
    with db.transaction() as tx:
        tx.end_conversation(t1)
    other_group = endpoint(db, t2)["conversation_group_id"]  # type: ignore[index]
    error = fails(db, 8438, lambda tx: tx.move_conversation(t1, other_group))
    assert "'CD'" in error.message
    fails(db, 8426, lambda tx: tx.move_conversation(uuid.uuid4(), other_group))


def test_move_without_a_group_is_8420(tutorial: broker.Broker) -> None:
    handle = open_dialog(tutorial)
    fails(tutorial, 8420, lambda tx: tx.move_conversation(handle, None))


def test_move_joins_the_group_and_takes_its_messages(tutorial: broker.Broker) -> None:
    db = tutorial
    h1, h2 = open_dialog(db, b"<one/>"), open_dialog(db, b"<two/>")
    t1, t2 = target_handle(db, h1), target_handle(db, h2)
    g1 = uuid.UUID(str(endpoint(db, t1)["conversation_group_id"]))  # type: ignore[index]
    g2 = uuid.UUID(str(endpoint(db, t2)["conversation_group_id"]))  # type: ignore[index]
    with db.transaction() as tx:
        tx.move_conversation(t2, g1)
    assert {r.conversation_group_id for r in db.queue_rows(TARGET_QUEUE)} == {g1}
    groups = {str(g["conversation_group_id"]) for g in db.catalog("sys.conversation_groups")}
    assert str(g2) not in groups  # the emptied group is gone
    with db.transaction() as tx:
        got = tx.receive(TARGET_QUEUE)
    assert [m.message_body for m in got] == [b"<one/>", b"<two/>"]


# -- RECEIVE and GET CONVERSATION GROUP (spec 2.3, 2.4) --------------------------------


def test_receive_on_a_disabled_queue_is_9617(tutorial: broker.Broker) -> None:
    db = tutorial
    open_dialog(db)
    db.alter_queue(TARGET_QUEUE, status=False)
    error = fails(db, 9617, lambda tx: tx.receive(TARGET_QUEUE))
    assert isinstance(error, broker.QueueDisabledError)
    assert f'"{TARGET_QUEUE}"' in error.message
    fails(db, 9617, lambda tx: tx.receive(TARGET_QUEUE, timeout=5))  # no waiting on a disabled queue
    fails(db, 9617, lambda tx: tx.get_conversation_group(TARGET_QUEUE))


def test_receive_on_an_unknown_queue_is_208(tutorial: broker.Broker) -> None:
    fails(tutorial, 208, lambda tx: tx.receive("NoSuchQueue"))
    fails(tutorial, 208, lambda tx: tx.get_conversation_group("NoSuchQueue"))
    with pytest.raises(broker.BrokerError) as info:
        tutorial.queue_rows("NoSuchQueue")
    assert info.value.number == 208


def test_receive_where_an_unknown_or_foreign_handle_is_8426(tutorial: broker.Broker) -> None:
    # Spec 13.1 leaves 8426 vs 8436 open: the code reports a handle as 8426.
    db = tutorial
    handle = open_dialog(db)
    fails(db, 8426, lambda tx: tx.receive(TARGET_QUEUE, conversation_handle=uuid.uuid4()))
    fails(db, 8426, lambda tx: tx.receive(TARGET_QUEUE, conversation_handle=handle))  # initiator's queue


def test_receive_where_an_unknown_group_is_8436(tutorial: broker.Broker) -> None:
    # Spec 13.1 leaves it open: the code reports an unknown group as 8436 and a group of
    # another queue as 8440.
    db = tutorial
    handle = open_dialog(db)
    fails(db, 8436, lambda tx: tx.receive(TARGET_QUEUE, conversation_group_id=uuid.uuid4()))
    initiator_group = endpoint(db, handle)["conversation_group_id"]  # type: ignore[index]
    fails(db, 8440, lambda tx: tx.receive(TARGET_QUEUE, conversation_group_id=initiator_group))


def test_receive_where_handle_takes_only_that_conversation(tutorial: broker.Broker) -> None:
    db = tutorial
    h1, h2 = open_dialog(db, b"<one/>"), open_dialog(db, b"<two/>")
    with db.transaction() as tx:
        got = tx.receive(TARGET_QUEUE, conversation_handle=target_handle(db, h2))
    assert [m.message_body for m in got] == [b"<two/>"]
    assert [m.message_body for m in db.queue_rows(TARGET_QUEUE)] == [b"<one/>"]
    assert h1 != h2


# -- BEGIN CONVERSATION TIMER (spec 2.7) -----------------------------------------------


def test_timer_in_a_wrong_state_is_8458(tutorial: broker.Broker) -> None:
    db = tutorial
    handle = open_dialog(db)
    target = target_handle(db, handle)
    with db.transaction() as tx:
        tx.end_conversation(target, error=9, description="bad")
    assert endpoint(db, handle)["state"] == "ER"  # type: ignore[index]
    error = fails(db, 8458, lambda tx: tx.begin_conversation_timer(handle, timeout=10))
    assert "'ER'" in error.message
    error = fails(db, 8458, lambda tx: tx.begin_conversation_timer(target, timeout=10))
    assert "'CD'" in error.message


def test_timer_beyond_lifetime_is_8410_and_unknown_handle_8426(tutorial: broker.Broker) -> None:
    handle = open_dialog(tutorial, lifetime=100)
    fails(tutorial, 8410, lambda tx: tx.begin_conversation_timer(handle, timeout=101))
    fails(tutorial, 8426, lambda tx: tx.begin_conversation_timer(uuid.uuid4(), timeout=1))


# -- DDL -------------------------------------------------------------------------------


def test_duplicate_names_are_2714(tutorial: broker.Broker) -> None:
    db = tutorial
    ddl_fails(db, 2714, lambda: db.create_message_type(REQUEST))
    ddl_fails(db, 2714, lambda: db.create_message_type("DEFAULT"))
    ddl_fails(db, 2714, lambda: db.create_contract(CONTRACT, {REQUEST: "ANY"}))
    ddl_fails(db, 2714, lambda: db.create_queue(TARGET_QUEUE))
    ddl_fails(db, 2714, lambda: db.create_queue(TARGET_QUEUE.lower()))  # object names ignore case
    ddl_fails(db, 2714, lambda: db.create_service(TARGET_SERVICE, INITIATOR_QUEUE))
    db.create_xml_schema_collection("//x/Schema", "<xs:schema xmlns:xs='http://www.w3.org/2001/XMLSchema'/>")
    ddl_fails(db, 2714, lambda: db.create_xml_schema_collection(
        "//x/Schema", "<xs:schema xmlns:xs='http://www.w3.org/2001/XMLSchema'/>"))


def test_a_queue_cannot_take_the_name_of_a_catalog_table(db: broker.Broker) -> None:
    ddl_fails(db, 2714, lambda: db.create_queue("sb_services"))


def test_service_names_are_case_sensitive(tutorial: broker.Broker) -> None:
    db = tutorial
    db.create_service(TARGET_SERVICE.upper(), TARGET_QUEUE)
    assert {r["name"] for r in db.catalog("sys.services")} >= {TARGET_SERVICE, TARGET_SERVICE.upper()}


def test_contract_listing_a_type_twice_is_8403(tutorial: broker.Broker) -> None:
    db = tutorial
    error = ddl_fails(db, 8403, lambda: db.create_contract("//c/Twice", [(REQUEST, "INITIATOR"), (REQUEST, "TARGET")]))
    assert REQUEST in error.message


def test_service_listing_a_contract_twice_is_8404(tutorial: broker.Broker) -> None:
    db = tutorial
    ddl_fails(db, 8404, lambda: db.create_service("//s/Twice", TARGET_QUEUE, [CONTRACT, CONTRACT]))


def test_contract_without_an_initiator_type_is_8492(tutorial: broker.Broker) -> None:
    db = tutorial
    ddl_fails(db, 8492, lambda: db.create_contract("//c/TargetOnly", {REPLY: "TARGET"}))
    ddl_fails(db, 8492, lambda: db.create_contract("//c/Empty", {}))
    db.create_contract("//c/Any", {REPLY: "ANY"})  # ANY counts as sent by the initiator


def test_contract_naming_an_unknown_type_is_8428(tutorial: broker.Broker) -> None:
    db = tutorial
    error = ddl_fails(db, 8428, lambda: db.create_contract("//c/Unknown", {"//no/Type": "INITIATOR"}))
    assert "//no/Type" in error.message


def test_service_on_an_unknown_contract_is_8425_and_unknown_queue_15151(tutorial: broker.Broker) -> None:
    db = tutorial
    ddl_fails(db, 8425, lambda: db.create_service("//s/New", TARGET_QUEUE, ["//no/Contract"]))
    ddl_fails(db, 15151, lambda: db.create_service("//s/New", "NoSuchQueue"))


def test_alter_of_an_unknown_queue_is_15151(db: broker.Broker) -> None:
    ddl_fails(db, 15151, lambda: db.alter_queue("NoSuchQueue", status=False))


def test_valid_xml_needs_an_existing_schema_collection(db: broker.Broker) -> None:
    ddl_fails(db, 15151, lambda: db.create_message_type("//m/Valid", "VALID_XML", "//no/Collection"))


def test_drop_of_a_referenced_object_is_3729(tutorial: broker.Broker) -> None:
    db = tutorial
    error = ddl_fails(db, 3729, lambda: db.drop_message_type(REQUEST))
    assert CONTRACT in error.message
    error = ddl_fails(db, 3729, lambda: db.drop_contract(CONTRACT))
    assert TARGET_SERVICE in error.message
    error = ddl_fails(db, 3729, lambda: db.drop_queue(TARGET_QUEUE))
    assert TARGET_SERVICE in error.message


@pytest.mark.parametrize("kind", ["service", "queue", "contract", "message_type"])
def test_drop_of_an_unknown_object_is_3701(tutorial: broker.Broker, kind: str) -> None:
    db = tutorial
    drop = getattr(db, f"drop_{kind}")
    ddl_fails(db, 3701, lambda: drop("//no/such/object"))


def test_system_objects_cannot_be_dropped(db: broker.Broker) -> None:
    ddl_fails(db, 3708, lambda: db.drop_message_type("DEFAULT"))
    ddl_fails(db, 3708, lambda: db.drop_message_type(broker.ERROR))
    ddl_fails(db, 3708, lambda: db.drop_contract("DEFAULT"))


@pytest.mark.parametrize("name", ["#q", "#", 'a"b', "a.b", "a[b", "a]b", "tab\tq", "", "   ", "q" * 129])
def test_invalid_queue_names_are_refused(db: broker.Broker, name: str) -> None:
    with pytest.raises(broker.BrokerError) as info:
        db.create_queue(name)
    assert info.value.number in (102, 103, 1038)
    assert db.catalog("sys.service_queues") == []


def test_queue_name_may_carry_dbo_and_brackets(db: broker.Broker) -> None:
    # The code accepts SQL Server's ``dbo.`` schema and ``[ ]`` quoting and strips them.
    db.create_queue("dbo.[Orders Queue]")
    assert [q["name"] for q in db.catalog("sys.service_queues")] == ["Orders Queue"]
    assert db.queue_rows("Orders Queue") == []


def test_too_long_names_are_103(db: broker.Broker) -> None:
    ddl_fails(db, 103, lambda: db.create_message_type("m" * 129))
    ddl_fails(db, 103, lambda: db.create_contract("c" * 129, {"DEFAULT": "ANY"}))
    db.create_queue("Q")
    ddl_fails(db, 103, lambda: db.create_service("s" * 129, "Q"))
    db.create_service("s" * 128, "Q")  # a service name is a sysname, like every object name


# -- the Error message body (spec 5.2) -------------------------------------------------


def test_parse_error_round_trips(db: broker.Broker) -> None:
    for code, description in [(50, "x"), (-8489, "The dialog has exceeded the specified LIFETIME."),
                              (1, "<tag> & 'quotes' \"double\" ünïcödé")]:
        assert broker.parse_error(broker.error_body(code, description)) == (code, description)
        assert broker.parse_error(broker.error_body(code, description).decode("utf-8")) == (code, description)


def test_parse_error_reads_a_hand_written_body(db: broker.Broker) -> None:
    body = (f'<?xml version="1.0"?><Error xmlns="{ERROR_NS}"><Code>-8408</Code>'
            "<Description>Target service does not support contract.</Description></Error>")
    assert broker.parse_error(body) == (-8408, "Target service does not support contract.")


@pytest.mark.parametrize("body", [None, b"", b"<not-closed>", b"<Error/>"])
def test_parse_error_refuses_what_is_not_an_error_body(db: broker.Broker, body: bytes | None) -> None:
    with pytest.raises(broker.BrokerError):
        broker.parse_error(body)


def test_error_body_xml_shape(tutorial: broker.Broker) -> None:
    db = tutorial
    handle = open_dialog(db)
    with db.transaction() as tx:
        tx.end_conversation(target_handle(db, handle), error=50, description="a < b & c")
    [message] = db.queue_rows(INITIATOR_QUEUE)
    assert message.message_type_name == broker.ERROR == ERROR_NS
    assert message.message_body is not None
    root = etree.fromstring(message.message_body)
    assert root.tag == f"{{{ERROR_NS}}}Error"
    assert [child.tag for child in root] == [f"{{{ERROR_NS}}}Code", f"{{{ERROR_NS}}}Description"]
    assert root.findtext(f"{{{ERROR_NS}}}Code") == "50"
    assert root.findtext(f"{{{ERROR_NS}}}Description") == "a < b & c"
    assert broker.parse_error(message.message_body) == (50, "a < b & c")


def test_broker_error_carries_number_and_text() -> None:
    error = broker.BrokerError(8426, handle="ABC")
    assert error.number == 8426
    assert error.message == 'The conversation handle "ABC" is not found.'
    assert str(error) == 'Msg 8426: The conversation handle "ABC" is not found.'
    assert isinstance(broker.QueueDisabledError("Q"), broker.BrokerError)
    assert broker.QueueDisabledError("Q").number == 9617
