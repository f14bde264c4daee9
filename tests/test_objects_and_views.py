"""Broker objects and the sys.* catalog views, with the column names of spec 4.

Also the queue's own view (spec 3), message validation at delivery, the DEFAULT
contract, and messages held in the transmission queue (spec 4.12) while the broker is
disabled or the target service does not exist yet.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

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

QUEUE_COLUMNS = [
    "status", "priority", "queuing_order", "conversation_group_id", "conversation_handle",
    "message_sequence_number", "service_name", "service_id", "service_contract_name",
    "service_contract_id", "message_type_name", "message_type_id", "validation", "message_body",
    "message_enqueue_time",
]
ENDPOINT_COLUMNS = {
    "conversation_handle", "conversation_id", "is_initiator", "service_contract_id",
    "conversation_group_id", "service_id", "lifetime", "state", "state_desc", "far_service",
    "far_broker_instance", "principal_id", "far_principal_id", "outbound_session_key_identifier",
    "inbound_session_key_identifier", "security_timestamp", "dialog_timer", "send_sequence",
    "last_send_tran_id", "end_dialog_sequence", "receive_sequence", "receive_sequence_frag",
    "system_sequence", "first_out_of_order_sequence", "last_out_of_order_sequence",
    "last_out_of_order_frag", "is_system", "priority",
}
TRANSMISSION_COLUMNS = [
    "conversation_handle", "to_service_name", "to_broker_instance", "from_service_name",
    "service_contract_name", "enqueue_time", "message_sequence_number", "message_type_name",
    "is_conversation_error", "is_end_of_dialog", "message_body", "transmission_status", "priority",
]
BROKER_DISABLED = "The broker is disabled in the sender's database."
SERVICE_NOT_FOUND = (
    "The target service name could not be found. Ensure that the service name is specified "
    "correctly and/or the routing information has been supplied."
)
XSD = """<xs:schema xmlns:xs="http://www.w3.org/2001/XMLSchema">
  <xs:element name="Order">
    <xs:complexType>
      <xs:sequence><xs:element name="Qty" type="xs:positiveInteger"/></xs:sequence>
    </xs:complexType>
  </xs:element>
</xs:schema>"""


def by(rows: list[dict[str, Any]], key: str, value: object) -> dict[str, Any]:
    found = [r for r in rows if r[key] == value]
    assert len(found) == 1, (key, value, rows)
    return found[0]


# -- built-in objects ------------------------------------------------------------------


def test_builtin_message_types(db: broker.Broker) -> None:
    rows = db.catalog("sys.service_message_types")
    expected = {
        1: ("http://schemas.microsoft.com/SQL/ServiceBroker/Error", "X"),
        2: ("http://schemas.microsoft.com/SQL/ServiceBroker/EndDialog", "E"),
        5: ("http://schemas.microsoft.com/SQL/ServiceBroker/DialogTimer", "E"),
        14: ("DEFAULT", "N"),
    }
    for type_id, (name, validation) in expected.items():
        row = by(rows, "message_type_id", type_id)
        assert (row["name"], row["validation"]) == (name, validation)
    assert broker.ERROR == expected[1][0]
    assert broker.END_DIALOG == expected[2][0]
    assert broker.DIALOG_TIMER == expected[5][0]
    assert all(r["message_type_id"] < 65536 for r in rows)
    assert not any(r["name"].startswith("https://") for r in rows)


def test_builtin_default_contract(db: broker.Broker) -> None:
    contract = by(db.catalog("sys.service_contracts"), "name", "DEFAULT")
    usages = [u for u in db.catalog("sys.service_contract_message_usages")
              if u["service_contract_id"] == contract["service_contract_id"]]
    assert [(u["message_type_id"], u["is_sent_by_initiator"], u["is_sent_by_target"]) for u in usages] == [
        (14, 1, 1)]


def test_a_new_database_has_no_user_objects_and_the_broker_enabled(db: broker.Broker) -> None:
    assert db.catalog("sys.service_queues") == []
    assert db.catalog("sys.services") == []
    assert db.catalog("sys.conversation_endpoints") == []
    assert db.catalog("sys.transmission_queue") == []
    [database] = db.catalog("sys.databases")
    assert database["is_broker_enabled"] == 1
    assert uuid.UUID(str(database["service_broker_guid"]))


def test_unknown_catalog_view_is_208(db: broker.Broker) -> None:
    with pytest.raises(broker.BrokerError) as info:
        db.catalog("sys.no_such_view")
    assert info.value.number == 208
    with pytest.raises(broker.BrokerError):
        db.catalog("sys.services; DROP TABLE sb_services")


def test_user_object_ids_start_at_65536(db: broker.Broker) -> None:
    db.create_xml_schema_collection("//x/Schema", XSD)
    db.create_message_type("//m/One")
    db.create_message_type("//m/Two")
    db.create_contract("//c/One", {"//m/One": "INITIATOR"})
    db.create_queue("QueueOne")
    db.create_queue("QueueTwo")
    db.create_service("//s/One", "QueueOne", ["//c/One"])
    types = {r["name"]: r["message_type_id"] for r in db.catalog("sys.service_message_types")}
    assert (types["//m/One"], types["//m/Two"]) == (65536, 65537)
    assert by(db.catalog("sys.service_contracts"), "name", "//c/One")["service_contract_id"] == 65536
    queues = {r["name"]: r["object_id"] for r in db.catalog("sys.service_queues")}
    # A queue's internal table takes the next object id (sys.internal_tables), as in SQL Server.
    assert queues == {"QueueOne": 65536, "QueueTwo": 65538}
    assert by(db.catalog("sys.services"), "name", "//s/One")["service_id"] == 65536
    assert by(db.catalog("sys.xml_schema_collections"), "name", "//x/Schema")["xml_collection_id"] == 65536


# -- message types, contracts, services ------------------------------------------------


def test_message_type_validation_columns(db: broker.Broker) -> None:
    db.create_xml_schema_collection("//x/Schema", XSD)
    db.create_message_type("//m/None")
    db.create_message_type("//m/Empty", "EMPTY")
    db.create_message_type("//m/Xml", "WELL_FORMED_XML")
    db.create_message_type("//m/Valid", "VALID_XML", schema_collection="//x/Schema")
    rows = db.catalog("sys.service_message_types")
    assert {"name", "message_type_id", "principal_id", "validation", "validation_desc",
            "xml_collection_id"} <= set(rows[0])
    collection = by(db.catalog("sys.xml_schema_collections"), "name", "//x/Schema")["xml_collection_id"]
    # validation_desc for NONE: the docs say NONE, a real server shows BINARY (spec 13.14);
    # the code follows the real server.
    got = {r["name"]: (r["validation"], r["validation_desc"], r["xml_collection_id"]) for r in rows}
    assert got["//m/None"] == ("N", "BINARY", None)
    assert got["//m/Empty"] == ("E", "EMPTY", None)
    assert got["//m/Xml"] == ("X", "XML", None)
    assert got["//m/Valid"] == ("X", "XML", collection)


def test_contract_views(tutorial: broker.Broker) -> None:
    db = tutorial
    db.create_message_type("//m/Either")
    db.create_contract("//c/Mixed", {REQUEST: "INITIATOR", REPLY: "TARGET", "//m/Either": "ANY"})
    contract = by(db.catalog("sys.service_contracts"), "name", "//c/Mixed")
    assert set(contract) >= {"name", "service_contract_id", "principal_id"}
    types = {r["name"]: r["message_type_id"] for r in db.catalog("sys.service_message_types")}
    usages = {u["message_type_id"]: (u["is_sent_by_initiator"], u["is_sent_by_target"])
              for u in db.catalog("sys.service_contract_message_usages")
              if u["service_contract_id"] == contract["service_contract_id"]}
    assert usages == {types[REQUEST]: (1, 0), types[REPLY]: (0, 1), types["//m/Either"]: (1, 1)}


def test_service_views(tutorial: broker.Broker) -> None:
    db = tutorial
    queues = {q["name"]: q["object_id"] for q in db.catalog("sys.service_queues")}
    services = db.catalog("sys.services")
    assert set(services[0]) >= {"name", "service_id", "principal_id", "service_queue_id"}
    target = by(services, "name", TARGET_SERVICE)
    initiator = by(services, "name", INITIATOR_SERVICE)
    assert target["service_queue_id"] == queues[TARGET_QUEUE]
    assert initiator["service_queue_id"] == queues[INITIATOR_QUEUE]
    contract_id = by(db.catalog("sys.service_contracts"), "name", CONTRACT)["service_contract_id"]
    usages = db.catalog("sys.service_contract_usages")
    assert [(u["service_id"], u["service_contract_id"]) for u in usages] == [(target["service_id"], contract_id)]


def test_service_with_several_contracts(tutorial: broker.Broker) -> None:
    db = tutorial
    db.create_service("//s/Both", TARGET_QUEUE, [CONTRACT, "DEFAULT"])
    service_id = by(db.catalog("sys.services"), "name", "//s/Both")["service_id"]
    contracts = {u["service_contract_id"] for u in db.catalog("sys.service_contract_usages")
                 if u["service_id"] == service_id}
    assert contracts == {6, by(db.catalog("sys.service_contracts"), "name", CONTRACT)["service_contract_id"]}


# -- queues ----------------------------------------------------------------------------


def test_service_queues_columns_and_defaults(db: broker.Broker) -> None:
    db.create_queue("Q")
    [queue] = db.catalog("sys.service_queues")
    assert set(queue) >= {
        "name", "object_id", "principal_id", "schema_id", "parent_object_id", "type", "type_desc",
        "create_date", "modify_date", "is_ms_shipped", "is_published", "is_schema_published",
        "max_readers", "activation_procedure", "execute_as_principal_id", "is_activation_enabled",
        "is_receive_enabled", "is_enqueue_enabled", "is_retention_enabled",
        "is_poison_message_handling_enabled",
    }
    assert (queue["type"], queue["type_desc"]) == ("SQ", "SERVICE_QUEUE")
    assert queue["is_receive_enabled"] == queue["is_enqueue_enabled"] == 1
    assert queue["is_retention_enabled"] == 0
    # Spec 13.15: no ACTIVATION clause means activation disabled.
    assert queue["is_activation_enabled"] == 0
    assert queue["activation_procedure"] is None
    assert queue["is_poison_message_handling_enabled"] == 1


def test_service_queues_flags_follow_create_and_alter(db: broker.Broker) -> None:
    db.create_queue("Q", status=False, retention=True, poison_message_handling=False)
    [queue] = db.catalog("sys.service_queues")
    # Spec 4.4 [unconfirmed]: STATUS = OFF clears both is_receive_enabled and is_enqueue_enabled.
    assert (queue["is_receive_enabled"], queue["is_enqueue_enabled"]) == (0, 0)
    assert queue["is_retention_enabled"] == 1
    assert queue["is_poison_message_handling_enabled"] == 0
    db.alter_queue("Q", status=True)
    [queue] = db.catalog("sys.service_queues")
    assert (queue["is_receive_enabled"], queue["is_enqueue_enabled"]) == (1, 1)
    assert queue["is_retention_enabled"] == 1  # untouched by an ALTER that does not name it
    db.alter_queue("Q", retention=False, poison_message_handling=True)
    [queue] = db.catalog("sys.service_queues")
    assert (queue["is_retention_enabled"], queue["is_poison_message_handling_enabled"]) == (0, 1)
    assert queue["is_receive_enabled"] == 1
    db.alter_queue("Q", status=False)
    [queue] = db.catalog("sys.service_queues")
    assert (queue["is_receive_enabled"], queue["is_enqueue_enabled"]) == (0, 0)


def test_activation_options_are_stored(db: broker.Broker) -> None:
    db.create_queue("Q", activation={"procedure_name": "app.handlers.run", "max_queue_readers": 4,
                                     "execute_as": "OWNER"})
    [queue] = db.catalog("sys.service_queues")
    assert queue["is_activation_enabled"] == 1
    assert queue["activation_procedure"] == "app.handlers.run"
    assert queue["max_readers"] == 4
    assert queue["execute_as_principal_id"] == -2
    db.alter_queue("Q", activation={"status": False})
    [queue] = db.catalog("sys.service_queues")
    assert queue["is_activation_enabled"] == 0
    assert queue["activation_procedure"] == "app.handlers.run"
    db.alter_queue("Q", activation=None)  # ACTIVATION (DROP)
    [queue] = db.catalog("sys.service_queues")
    assert (queue["is_activation_enabled"], queue["activation_procedure"], queue["max_readers"]) == (0, None, 0)


def test_queue_view_has_the_documented_columns_in_order(tutorial: broker.Broker) -> None:
    """The view as any SQL client sees it: plain SQL on the driver, outside the broker."""
    db = tutorial
    handle = open_dialog(db)
    driver = db.engine.raw_connection()
    try:
        cursor = driver.cursor()
        cursor.execute(f'SELECT * FROM "{TARGET_QUEUE}"')
        columns = [d[0] for d in cursor.description]
        rows = cursor.fetchall()
    finally:
        driver.close()
    assert columns == QUEUE_COLUMNS
    [row] = rows
    values = dict(zip(columns, row, strict=True))
    assert values["status"] == 1
    assert values["message_type_name"] == REQUEST
    assert values["service_name"] == TARGET_SERVICE
    assert values["service_contract_name"] == CONTRACT
    assert values["validation"] == "X"
    assert bytes(values["message_body"]) == b"<RequestMsg/>"
    # Text on SQLite, a native uuid on PostgreSQL.
    assert str(values["conversation_handle"]) == str(target_handle(db, handle))
    assert values["message_sequence_number"] == 0


def test_queue_rows_match_the_queue_view(tutorial: broker.Broker) -> None:
    db = tutorial
    open_dialog(db)
    [message] = db.queue_rows(TARGET_QUEUE)
    assert list(broker.Message.__dataclass_fields__) == QUEUE_COLUMNS
    assert isinstance(message.conversation_handle, uuid.UUID)
    assert isinstance(message.conversation_group_id, uuid.UUID)
    assert message.message_enqueue_time.tzinfo is not None
    assert db.queue_rows(TARGET_QUEUE.upper()) == [message]  # object names ignore case


def test_queuing_order_is_monotonic_and_never_reused(tutorial: broker.Broker) -> None:
    db = tutorial
    handle = open_dialog(db, b"<m1/>")
    [first] = db.queue_rows(TARGET_QUEUE)
    with db.transaction() as tx:
        tx.receive(TARGET_QUEUE)
    with db.transaction() as tx:
        tx.send(handle, REQUEST, b"<m2/>")
    [second] = db.queue_rows(TARGET_QUEUE)
    assert second.queuing_order > first.queuing_order


def test_retention_rows_show_status_0_and_3(tutorial: broker.Broker) -> None:
    db = tutorial
    db.alter_queue(TARGET_QUEUE, retention=True)
    db.alter_queue(INITIATOR_QUEUE, retention=True)
    open_dialog(db)
    with db.transaction() as tx:
        tx.receive(TARGET_QUEUE)
    assert [m.status for m in db.queue_rows(TARGET_QUEUE)] == [0]
    assert [m.status for m in db.queue_rows(INITIATOR_QUEUE)] == [3]
    with db.transaction() as tx:  # the queue's view, as any SQL client reads it
        assert tx.query(f'SELECT status FROM "{TARGET_QUEUE}"') == [{"status": 0}]
        assert tx.query(f'SELECT status, message_type_name FROM "{INITIATOR_QUEUE}"') == [
            {"status": 3, "message_type_name": REQUEST}]


def test_receive_output_shows_status_0(tutorial: broker.Broker) -> None:
    # Spec 13.3: RECEIVE's status column follows the documentation (0) although the
    # stored row was ready (1).
    db = tutorial
    open_dialog(db)
    assert [m.status for m in db.queue_rows(TARGET_QUEUE)] == [1]
    with db.transaction() as tx:
        [message] = tx.receive(TARGET_QUEUE)
    assert message.status == 0


# -- conversation endpoints and groups -------------------------------------------------


def test_conversation_endpoint_columns_and_state_desc(tutorial: broker.Broker) -> None:
    db = tutorial
    with db.transaction() as tx:
        started = tx.begin_dialog(INITIATOR_SERVICE, TARGET_SERVICE, CONTRACT)
    row = endpoint(db, started)
    assert row is not None
    assert set(row) >= ENDPOINT_COLUMNS
    assert (row["state"], row["state_desc"]) == ("SO", "STARTED_OUTBOUND")
    assert row["is_initiator"] == 1
    assert row["far_service"] == TARGET_SERVICE
    assert row["far_broker_instance"] is None  # learnt from the first delivery
    # No timer set: SQL Server shows 1900-01-01 (spec 2.7, 13.9).
    timer = row["dialog_timer"]
    timer = timer if isinstance(timer, datetime) else datetime.fromisoformat(str(timer))
    assert (timer.year, timer.month, timer.day) == (1900, 1, 1)
    assert row["priority"] == 5
    assert row["send_sequence"] == 0

    handle = open_dialog(db)
    target = target_handle(db, handle)
    assert endpoint(db, handle)["send_sequence"] == 1  # type: ignore[index]
    assert endpoint(db, target)["receive_sequence"] == 1  # type: ignore[index]
    [database] = db.catalog("sys.databases")
    assert str(endpoint(db, handle)["far_broker_instance"]).lower() == str(database["service_broker_guid"]).lower()  # type: ignore[index]
    with db.transaction() as tx:
        tx.end_conversation(target)
    descriptions = {(r["state"], r["state_desc"]) for r in db.catalog("sys.conversation_endpoints")}
    assert descriptions == {("SO", "STARTED_OUTBOUND"), ("DI", "DISCONNECTED_INBOUND"), ("CD", "CLOSED")}
    error_dialog = open_dialog(db)
    with db.transaction() as tx:
        tx.end_conversation(target_handle(db, error_dialog), error=3, description="boom")
    assert endpoint(db, error_dialog)["state_desc"] == "ERROR"  # type: ignore[index]


def test_end_dialog_sequence_is_recorded(tutorial: broker.Broker) -> None:
    db = tutorial
    handle = open_dialog(db)
    target = target_handle(db, handle)
    with db.transaction() as tx:
        tx.send(target, REPLY, b"<r/>")
        tx.end_conversation(target)
    assert endpoint(db, target)["end_dialog_sequence"] == 1  # type: ignore[index]
    assert [m.message_sequence_number for m in db.queue_rows(INITIATOR_QUEUE)] == [0, 1]


def test_conversation_groups_view(tutorial: broker.Broker) -> None:
    db = tutorial
    handle = open_dialog(db)
    groups = db.catalog("sys.conversation_groups")
    assert set(groups[0]) >= {"conversation_group_id", "service_id", "is_system"}
    services = {s["name"]: s["service_id"] for s in db.catalog("sys.services")}
    mine = by(groups, "conversation_group_id", endpoint(db, handle)["conversation_group_id"])  # type: ignore[index]
    assert mine["service_id"] == services[INITIATOR_SERVICE]
    assert mine["is_system"] == 0
    assert len(groups) == 2
    with db.transaction() as tx:
        tx.end_conversation(handle)
    # The initiator's group disappears with its last conversation.
    assert [g["service_id"] for g in db.catalog("sys.conversation_groups")] == [services[TARGET_SERVICE]]


# -- transmission queue ----------------------------------------------------------------


def test_transmission_queue_columns_while_a_message_is_held(tutorial: broker.Broker) -> None:
    db = tutorial
    db.alter_queue(TARGET_QUEUE, status=False)
    handle = open_dialog(db)
    [row] = db.catalog("sys.transmission_queue")
    assert list(row) == TRANSMISSION_COLUMNS
    assert str(row["conversation_handle"]) == str(handle)
    assert row["to_service_name"] == TARGET_SERVICE
    assert row["from_service_name"] == INITIATOR_SERVICE
    assert row["service_contract_name"] == CONTRACT
    assert row["message_type_name"] == REQUEST
    assert row["message_sequence_number"] == 0
    assert (row["is_conversation_error"], row["is_end_of_dialog"]) == (0, 0)
    assert row["message_body"] == b"<RequestMsg/>"
    assert row["priority"] == 5
    assert row["enqueue_time"] is not None
    # Spec 13.10: the text for a disabled local target queue is 9617's.
    assert row["transmission_status"] == f'The service queue "{TARGET_QUEUE}" is currently disabled.'


def test_end_dialog_waits_behind_held_messages(tutorial: broker.Broker) -> None:
    db = tutorial
    handle = open_dialog(db, b"<one/>")
    db.alter_queue(TARGET_QUEUE, status=False)
    with db.transaction() as tx:
        tx.send(handle, REQUEST, b"<two/>")
        tx.end_conversation(handle)
    held = db.catalog("sys.transmission_queue")
    assert [(r["message_type_name"], r["is_end_of_dialog"]) for r in held] == [(REQUEST, 0), (broker.END_DIALOG, 1)]
    assert endpoint(db, handle)["state"] == "DO"  # type: ignore[index]
    db.alter_queue(TARGET_QUEUE, status=True)
    assert db.catalog("sys.transmission_queue") == []
    assert [m.message_type_name for m in db.queue_rows(TARGET_QUEUE)] == [REQUEST, REQUEST, broker.END_DIALOG]
    assert endpoint(db, handle) is None  # acknowledged: the initiator closes
    assert endpoint(db, target_handle_after(db))["state"] == "DI"  # type: ignore[index]


def target_handle_after(db: broker.Broker) -> uuid.UUID:
    [row] = [r for r in db.catalog("sys.conversation_endpoints") if not r["is_initiator"]]
    return uuid.UUID(str(row["conversation_handle"]))


def test_disabled_broker_holds_sends_and_enabling_delivers_them_in_order(tutorial: broker.Broker) -> None:
    db = tutorial
    db.set_broker_enabled(False)
    assert db.catalog("sys.databases")[0]["is_broker_enabled"] == 0
    first = open_dialog(db, b"<m1/>")
    with db.transaction() as tx:
        tx.send(first, REQUEST, b"<m2/>")
    second = open_dialog(db, b"<m3/>")
    held = db.catalog("sys.transmission_queue")
    assert [r["message_body"] for r in held] == [b"<m1/>", b"<m2/>", b"<m3/>"]
    assert {r["transmission_status"] for r in held} == {BROKER_DISABLED}
    assert db.queue_rows(TARGET_QUEUE) == []
    db.set_broker_enabled(True)
    assert db.catalog("sys.databases")[0]["is_broker_enabled"] == 1
    assert db.catalog("sys.transmission_queue") == []
    rows = db.queue_rows(TARGET_QUEUE)
    assert [r.message_body for r in rows] == [b"<m1/>", b"<m2/>", b"<m3/>"]
    assert [r.message_sequence_number for r in rows] == [0, 1, 0]
    assert rows[0].conversation_handle == rows[1].conversation_handle == target_handle(db, first)
    assert rows[2].conversation_handle == target_handle(db, second)


def test_unknown_target_service_is_held_until_it_is_created(tutorial: broker.Broker) -> None:
    db = tutorial
    with db.transaction() as tx:
        handle = tx.begin_dialog(INITIATOR_SERVICE, "//later/Service", CONTRACT)
        tx.send(handle, REQUEST, b"<early/>")
    with db.transaction() as tx:
        tx.send(handle, REQUEST, b"<second/>")
    held = db.catalog("sys.transmission_queue")
    assert [r["message_body"] for r in held] == [b"<early/>", b"<second/>"]
    assert {r["transmission_status"] for r in held} == {SERVICE_NOT_FOUND}
    assert {r["to_service_name"] for r in held} == {"//later/Service"}
    assert endpoint(db, handle)["state"] == "CO"  # type: ignore[index]
    db.create_queue("LaterQueue")
    db.create_service("//later/Service", "LaterQueue", [CONTRACT])
    assert db.catalog("sys.transmission_queue") == []
    assert [m.message_body for m in db.queue_rows("LaterQueue")] == [b"<early/>", b"<second/>"]
    assert len(db.catalog("sys.conversation_endpoints")) == 2


def test_service_names_match_byte_for_byte(tutorial: broker.Broker) -> None:
    db = tutorial
    with db.transaction() as tx:
        handle = tx.begin_dialog(INITIATOR_SERVICE, TARGET_SERVICE.lower(), CONTRACT)
        tx.send(handle, REQUEST, b"<x/>")
    assert db.queue_rows(TARGET_QUEUE) == []
    [row] = db.catalog("sys.transmission_queue")
    assert row["transmission_status"] == SERVICE_NOT_FOUND


def test_pinned_broker_instance(tutorial: broker.Broker) -> None:
    db = tutorial
    with db.transaction() as tx:
        here = tx.begin_dialog(INITIATOR_SERVICE, TARGET_SERVICE, CONTRACT, broker_instance="CURRENT DATABASE")
        tx.send(here, REQUEST, b"<here/>")
        elsewhere = tx.begin_dialog(INITIATOR_SERVICE, TARGET_SERVICE, CONTRACT, broker_instance=str(uuid.uuid4()))
        tx.send(elsewhere, REQUEST, b"<elsewhere/>")
    assert [m.message_body for m in db.queue_rows(TARGET_QUEUE)] == [b"<here/>"]
    [row] = db.catalog("sys.transmission_queue")
    assert row["message_body"] == b"<elsewhere/>"
    assert row["transmission_status"] == "Could not find the target broker in the local SQL Server instance."


# -- validation at delivery, EMPTY, DEFAULT --------------------------------------------


def _valid_xml_objects(db: broker.Broker) -> None:
    db.create_xml_schema_collection("//x/Orders", XSD)
    db.create_message_type("//x/Order", "VALID_XML", schema_collection="//x/Orders")
    db.create_contract("//x/Contract", {"//x/Order": "INITIATOR"})
    db.create_queue("OrderQueue")
    db.create_service("//x/OrderService", "OrderQueue", ["//x/Contract"])
    db.create_queue("ShopQueue")
    db.create_service("//x/Shop", "ShopQueue")


def _send_order(db: broker.Broker, body: bytes) -> uuid.UUID:
    with db.transaction() as tx:
        handle = tx.begin_dialog("//x/Shop", "//x/OrderService", "//x/Contract")
        tx.send(handle, "//x/Order", body)
    return handle


def test_valid_xml_body_is_delivered(db: broker.Broker) -> None:
    _valid_xml_objects(db)
    _send_order(db, b"<Order><Qty>3</Qty></Order>")
    [row] = db.queue_rows("OrderQueue")
    assert row.message_body == b"<Order><Qty>3</Qty></Order>"
    assert row.validation == "X"
    assert db.queue_rows("ShopQueue") == []


@pytest.mark.parametrize("body", [b"<Order><Qty>-1</Qty></Order>", b"<Other/>", b"<Order>", b""])
def test_invalid_xml_body_is_refused_with_9615(db: broker.Broker, body: bytes) -> None:
    _valid_xml_objects(db)
    handle = _send_order(db, body)
    assert db.queue_rows("OrderQueue") == []
    [error] = db.queue_rows("ShopQueue")
    assert error.message_type_name == broker.ERROR
    assert error.conversation_handle == handle
    code, description = broker.parse_error(error.message_body)
    assert code == -9615
    assert "//x/Order" in description
    assert endpoint(db, handle)["state"] == "ER"  # type: ignore[index]
    assert db.catalog("sys.transmission_queue") == []


def test_well_formed_xml_accepts_any_xml(tutorial: broker.Broker) -> None:
    db = tutorial
    open_dialog(db, "<anything><nested a='1'/></anything>")
    assert [m.message_type_name for m in db.queue_rows(TARGET_QUEUE)] == [REQUEST]


def test_none_validation_accepts_anything(db: broker.Broker) -> None:
    db.create_message_type("//n/Bytes")
    db.create_contract("//n/Contract", {"//n/Bytes": "ANY"})
    db.create_queue("Q")
    db.create_service("//n/Service", "Q", ["//n/Contract"])
    with db.transaction() as tx:
        handle = tx.begin_dialog("//n/Service", "//n/Service", "//n/Contract")
        tx.send(handle, "//n/Bytes", b"\x00\xff<not xml")
        tx.send(handle, "//n/Bytes", None)
        tx.send(handle, "//n/Bytes", "text é")
    bodies = [m.message_body for m in db.queue_rows("Q")]
    assert bodies == [b"\x00\xff<not xml", None, "text é".encode()]
    assert {m.validation for m in db.queue_rows("Q")} == {"N"}


def test_empty_type(db: broker.Broker) -> None:
    db.create_message_type("//e/Ping", "EMPTY")
    db.create_contract("//e/Contract", {"//e/Ping": "ANY"})
    db.create_queue("PingQueue")
    db.create_service("//e/Service", "PingQueue", ["//e/Contract"])
    db.create_queue("SenderQueue")
    db.create_service("//e/Sender", "SenderQueue")
    with db.transaction() as tx:
        good = tx.begin_dialog("//e/Sender", "//e/Service", "//e/Contract")
        tx.send(good, "//e/Ping")
        bad = tx.begin_dialog("//e/Sender", "//e/Service", "//e/Contract")
        tx.send(bad, "//e/Ping", b"<body/>")
    [ping] = db.queue_rows("PingQueue")
    assert (ping.message_type_name, ping.validation, ping.message_body) == ("//e/Ping", "E", None)
    [error] = db.queue_rows("SenderQueue")
    assert error.conversation_handle == bad
    assert broker.parse_error(error.message_body)[0] == -9615


def test_default_contract_and_default_message_type(db: broker.Broker) -> None:
    db.create_queue("TargetQ")
    db.create_service("//d/Target", "TargetQ", ["DEFAULT"])
    db.create_queue("InitiatorQ")
    db.create_service("//d/Initiator", "InitiatorQ")
    with db.transaction() as tx:
        handle = tx.begin_dialog("//d/Initiator", "//d/Target")  # ON CONTRACT defaults to DEFAULT
        tx.send(handle)  # MESSAGE TYPE defaults to DEFAULT, body omitted
    [message] = db.queue_rows("TargetQ")
    assert message.message_type_name == "DEFAULT"
    assert message.message_type_id == 14
    assert message.service_contract_name == "DEFAULT"
    assert message.service_contract_id == 6
    assert message.message_body is None
    assert message.validation == "N"
    with db.transaction() as tx:  # the target may send DEFAULT back (SENT BY ANY)
        tx.send(message.conversation_handle, "DEFAULT", b"back")
    assert [m.message_body for m in db.queue_rows("InitiatorQ")] == [b"back"]


def test_default_contract_needs_the_target_to_accept_it(db: broker.Broker) -> None:
    db.create_queue("TargetQ")
    db.create_service("//d/Target", "TargetQ")  # no contracts: it can only initiate
    db.create_queue("InitiatorQ")
    db.create_service("//d/Initiator", "InitiatorQ")
    with db.transaction() as tx:
        handle = tx.begin_dialog("//d/Initiator", "//d/Target")
        tx.send(handle)
    assert db.queue_rows("TargetQ") == []
    [error] = db.queue_rows("InitiatorQ")
    assert broker.parse_error(error.message_body)[0] == -8408


# -- dropping with open conversations --------------------------------------------------


def test_drop_service_with_open_dialogs_tells_the_far_side(tutorial: broker.Broker) -> None:
    db = tutorial
    handle = open_dialog(db)
    db.drop_service(TARGET_SERVICE)
    assert db.queue_rows(TARGET_QUEUE) == []
    assert [r["is_initiator"] for r in db.catalog("sys.conversation_endpoints")] == [1]
    [error] = db.queue_rows(INITIATOR_QUEUE)
    assert error.conversation_handle == handle
    # Spec 13.1: the far-side code for a dropped service is taken to be -8470.
    assert broker.parse_error(error.message_body)[0] == -8470
    assert endpoint(db, handle)["state"] == "ER"  # type: ignore[index]


def test_queues_named_like_the_internal_tables_of_later_queues_take_nothing_from_them(db: broker.Broker) -> None:
    # A queue's internal table is queue_messages_<its object id>, in the namespace of the
    # queues' views: the next queues take ids whose names are free.
    db.create_queue("First")
    taken = max(row["object_id"] for row in db.catalog("sys.service_queues")) + 2  # the next queue's id
    names = [f"queue_messages_{taken}", f"queue_messages_{taken + 6}", f"ix_queue_messages_{taken + 8}_ready",
             "Later", "AndAnother"]
    for name in names:
        db.create_queue(name)
        db.create_service(f"//{name}", name, ["DEFAULT"])
    with db.transaction() as tx:
        for name in names:
            tx.send(tx.begin_dialog(f"//{name}", f"//{name}"), "DEFAULT", name.encode())
    for name in names:
        assert [m.message_body for m in db.queue_rows(name)] == [name.encode()]
    ids = [row["object_id"] for row in db.catalog("sys.service_queues")]
    assert len(set(ids)) == len(ids)
    first_table = db.catalog("sys.service_queues", name="First")[0]["object_id"]
    with pytest.raises(broker.BrokerError) as info:  # an internal table that exists is an object
        db.create_queue(f"queue_messages_{first_table}")
    assert info.value.number == 2714


def test_catalog_filters_a_bit_column_by_a_bool(db: broker.Broker) -> None:
    db.create_queue("Q")
    db.create_service("//s", "Q", ["DEFAULT"])
    with db.transaction() as tx:
        handle = tx.begin_dialog("//s", "//s")
        tx.send(handle, "DEFAULT", b"x")
    [initiator] = db.catalog("sys.conversation_endpoints", is_initiator=True)
    [target] = db.catalog("sys.conversation_endpoints", is_initiator=False)
    assert initiator["conversation_handle"] == handle and target["conversation_handle"] != handle
    assert db.catalog("sys.conversation_endpoints", is_initiator=1) == [initiator]


@pytest.mark.parametrize(("name", "where", "number"), [
    ("sys.services\n", {}, 208), ("sys.services", {"name\n": "x"}, 207),
])
def test_a_catalog_name_with_a_line_end_is_no_name(db: broker.Broker, name: str, where: dict[str, object],
                                                   number: int) -> None:
    with pytest.raises(broker.BrokerError) as info:
        db.catalog(name, **where)
    assert info.value.number == number


@pytest.mark.parametrize("spelling", ["[dbo].[Spelled]", "[DBO].Spelled", "dbo.[Spelled]", "Dbo.Spelled"])
def test_a_queue_is_named_with_its_schema_as_t_sql_writes_it(db: broker.Broker, spelling: str) -> None:
    db.create_queue(spelling)
    assert [row["name"] for row in db.catalog("sys.service_queues", name="Spelled")] == ["Spelled"]
    assert db.queue_counts(spelling) == {} and db.queue_rows("[dbo].[Spelled]") == []
    db.drop_queue(spelling)
    assert db.catalog("sys.service_queues", name="Spelled") == []
    with pytest.raises(broker.BrokerError) as info:
        db.create_queue("[]")
    assert info.value.number == 1038


@pytest.mark.parametrize("name", ['a"b', "a[b", "a]b", "a\x01b", "a\x7fb"])  # DEL is a control character too
def test_a_queue_name_a_view_cannot_carry_is_102(db: broker.Broker, name: str) -> None:
    with pytest.raises(broker.BrokerError) as refused:
        db.create_queue(name)
    assert refused.value.number == 102
    assert db.catalog("sys.service_queues") == []
