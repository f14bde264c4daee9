"""ALTER SERVICE and ALTER MESSAGE TYPE (spec 1.2, 1.5), and sys.internal_tables (spec 4.15)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
from click.testing import CliRunner
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
)

import broker
from broker.storage import schema
from cli.main import cli

NEW_QUEUE = "NewTargetQueue"
INTERNAL_TABLE_COLUMNS = [
    "name", "object_id", "principal_id", "schema_id", "parent_object_id", "type", "type_desc", "create_date",
    "modify_date", "is_ms_shipped", "is_published", "is_schema_published", "internal_type",
    "internal_type_desc", "parent_id", "parent_minor_id", "lob_data_space_id", "filestream_data_space_id",
]


@contextmanager
def raises(number: int) -> Iterator[pytest.ExceptionInfo[broker.BrokerError]]:
    with pytest.raises(broker.BrokerError) as info:
        yield info
    assert info.value.number == number, str(info.value)


def bodies(db: broker.Broker, queue: str) -> list[bytes | None]:
    return [m.message_body for m in db.queue_rows(queue)]


def service_queue_id(db: broker.Broker, service: str) -> int:
    [row] = db.catalog("sys.services", name=service)
    return int(row["service_queue_id"])


def contracts_of(db: broker.Broker, service: str) -> set[str]:
    [row] = db.catalog("sys.services", name=service)
    names = {c["service_contract_id"]: c["name"] for c in db.catalog("sys.service_contracts")}
    return {names[u["service_contract_id"]] for u in db.catalog("sys.service_contract_usages",
                                                                 service_id=row["service_id"])}


def queue_id(db: broker.Broker, queue: str) -> int:
    [row] = db.catalog("sys.service_queues", name=queue)
    return int(row["object_id"])


def error_codes(db: broker.Broker, queue: str) -> list[int]:
    return [broker.parse_error(m.message_body)[0] for m in db.queue_rows(queue)
            if m.message_type_name == broker.ERROR]


def invoke(db_url: str, *args: str, expect: int = 0) -> str:
    result = CliRunner().invoke(cli, ["--db", db_url, *args])
    assert result.exit_code == expect, (result.stdout, result.stderr)
    return result.stdout if expect == 0 else result.stderr


# -- ALTER SERVICE ... ON QUEUE ----------------------------------------------------------------


def test_a_new_queue_takes_the_services_messages_and_groups(tutorial: broker.Broker) -> None:
    db = tutorial
    db.create_queue(NEW_QUEUE)
    first = open_dialog(db, b"<a1/>")
    second = open_dialog(db, b"<b1/>")
    with db.transaction() as tx:
        tx.send(first, REQUEST, b"<a2/>")
    db.alter_queue(TARGET_QUEUE, retention=True)
    with db.transaction() as tx:  # a retained, received message moves too
        [received] = tx.receive(TARGET_QUEUE, 1)
    assert received.message_body == b"<a1/>"
    before = [(m.conversation_handle, m.conversation_group_id, m.message_sequence_number, m.status,
               m.message_body) for m in db.queue_rows(TARGET_QUEUE)]

    db.alter_service(TARGET_SERVICE, queue=NEW_QUEUE)

    assert service_queue_id(db, TARGET_SERVICE) == queue_id(db, NEW_QUEUE)
    assert db.queue_rows(TARGET_QUEUE) == []
    moved = db.queue_rows(NEW_QUEUE)
    assert [(m.conversation_handle, m.conversation_group_id, m.message_sequence_number, m.status,
             m.message_body) for m in moved] == before  # in the order they had
    assert [m.queuing_order for m in moved] == sorted(m.queuing_order for m in moved)
    # The groups belong to the new queue: RECEIVE by group finds them there (8440 if not).
    with db.transaction() as tx:
        got = tx.receive(NEW_QUEUE, conversation_group_id=received.conversation_group_id)
        assert [m.message_body for m in got] == [b"<a2/>"]
        with raises(8440):
            tx.receive(TARGET_QUEUE, conversation_group_id=moved[-1].conversation_group_id)
    # New messages, on old dialogs and new ones, go to the new queue; replies still work.
    with db.transaction() as tx:
        tx.send(second, REQUEST, b"<b2/>")
        tx.send(received.conversation_handle, REPLY, b"<reply/>")
    open_dialog(db, b"<c1/>")
    assert bodies(db, TARGET_QUEUE) == []
    assert [b for b in bodies(db, NEW_QUEUE) if b != b"<a1/>"] == [b"<b1/>", b"<b2/>", b"<c1/>"]
    assert bodies(db, INITIATOR_QUEUE) == [b"<reply/>"]
    assert endpoint(db, second)["state"] == "CO"  # type: ignore[index]


def _two_services_sharing_a_group(db: broker.Broker) -> tuple[object, object, object]:
    """Services //s1 and //s2 on queue Shared, a reply waiting for each on its own dialog,
    and //s1's dialog moved into //s2's group: (s1's handle, s2's handle, that group)."""
    db.create_queue("Shared")
    db.create_service("//s1", "Shared", ["DEFAULT"])
    db.create_service("//s2", "Shared", ["DEFAULT"])
    db.create_queue("Far")
    db.create_service("//far", "Far", ["DEFAULT"])
    with db.transaction() as tx:
        first = tx.begin_dialog("//s1", "//far")
        tx.send(first, "DEFAULT", b"a")
        second = tx.begin_dialog("//s2", "//far")
        tx.send(second, "DEFAULT", b"b")
    for _ in range(2):  # RECEIVE without WHERE takes one group at a time
        with db.transaction() as tx:
            for message in tx.receive("Far", 10):
                tx.send(message.conversation_handle, "DEFAULT", b"reply-" + (message.message_body or b""))
    group = endpoint(db, second)["conversation_group_id"]  # type: ignore[index]
    with db.transaction() as tx:
        tx.move_conversation(first, group)
    return first, second, group


def test_dropping_a_service_keeps_a_group_another_services_dialog_was_moved_into(db: broker.Broker) -> None:
    first, _second, group = _two_services_sharing_a_group(db)

    db.drop_service("//s2")

    assert db.catalog("sys.conversation_groups", conversation_group_id=group) != []
    with db.transaction() as tx:
        assert tx.get_conversation_group("Shared") == group
        got = tx.receive("Shared", 10, conversation_group_id=group)
    assert [(m.conversation_handle, m.message_body) for m in got] == [(first, b"reply-a")]


def test_a_service_moving_to_a_new_queue_leaves_a_group_it_shares(db: broker.Broker) -> None:
    first, second, group = _two_services_sharing_a_group(db)
    db.create_queue(NEW_QUEUE)

    db.alter_service("//s2", queue=NEW_QUEUE)

    # //s1's dialog keeps the group, in the old queue; //s2's leaves it for a new one.
    assert endpoint(db, first)["conversation_group_id"] == group  # type: ignore[index]
    moved_group = endpoint(db, second)["conversation_group_id"]  # type: ignore[index]
    assert moved_group != group
    assert [m.conversation_group_id for m in db.queue_rows(NEW_QUEUE)] == [moved_group]
    with db.transaction() as tx:
        assert [m.message_body for m in tx.receive("Shared", 10, conversation_group_id=group)] == [b"reply-a"]
        assert [m.message_body for m in tx.receive(NEW_QUEUE, 10, conversation_group_id=moved_group)] == [
            b"reply-b"]


def test_moving_to_a_queue_that_is_on_delivers_what_waited_for_the_old_one(tutorial: broker.Broker) -> None:
    db = tutorial
    db.create_queue(NEW_QUEUE)
    db.alter_queue(TARGET_QUEUE, status=False)
    open_dialog(db, b"<waited/>")
    assert len(db.catalog("sys.transmission_queue")) == 1
    db.alter_service(TARGET_SERVICE, queue=NEW_QUEUE)
    assert db.catalog("sys.transmission_queue") == []
    assert bodies(db, NEW_QUEUE) == [b"<waited/>"]


def test_a_move_waits_for_a_receive_under_way_and_copies_nothing_twice(tutorial: broker.Broker) -> None:
    db = tutorial
    db.create_queue(NEW_QUEUE)
    open_dialog(db, b"<m1/>")
    handle = open_dialog(db, b"<n1/>")
    with db.transaction() as tx:
        tx.send(handle, REQUEST, b"<n2/>")
    done = threading.Event()
    failures: list[BaseException] = []

    def move() -> None:
        try:
            db.alter_service(TARGET_SERVICE, queue=NEW_QUEUE)
        except BaseException as exc:  # reported by the test
            failures.append(exc)
        finally:
            done.set()

    with db.transaction() as tx:
        assert [m.message_body for m in tx.receive(TARGET_QUEUE)] == [b"<m1/>"]  # holds the first group
        mover = threading.Thread(target=move, daemon=True)
        mover.start()
        # Waits for this transaction's group lock (PostgreSQL) or write lock (SQLite).
        assert not done.wait(0.2)
    mover.join(30)
    assert done.is_set() and failures == []
    assert bodies(db, NEW_QUEUE) == [b"<n1/>", b"<n2/>"]  # the received message is not copied back
    assert bodies(db, TARGET_QUEUE) == []


# -- ALTER SERVICE ... (ADD / DROP CONTRACT) ------------------------------------------------------


def test_a_dropped_contract_refuses_new_dialogs_and_leaves_existing_ones(tutorial: broker.Broker) -> None:
    db = tutorial
    existing = open_dialog(db, b"<before/>")
    db.alter_service(TARGET_SERVICE, drop_contracts=[CONTRACT])
    assert contracts_of(db, TARGET_SERVICE) == set()
    with db.transaction() as tx:
        tx.send(existing, REQUEST, b"<after/>")
    assert bodies(db, TARGET_QUEUE) == [b"<before/>", b"<after/>"]
    assert endpoint(db, existing)["state"] == "CO"  # type: ignore[index]
    refused = open_dialog(db, b"<new/>")
    assert endpoint(db, refused)["state"] == "ER"  # type: ignore[index]
    assert error_codes(db, INITIATOR_QUEUE) == [-8408]
    assert bodies(db, TARGET_QUEUE) == [b"<before/>", b"<after/>"]


def test_an_added_contract_is_accepted_from_then_on(tutorial: broker.Broker) -> None:
    db = tutorial
    with db.transaction() as tx:
        refused = tx.begin_dialog(INITIATOR_SERVICE, TARGET_SERVICE)  # the DEFAULT contract
        tx.send(refused, body=b"default")
    assert error_codes(db, INITIATOR_QUEUE) == [-8408]
    db.alter_service(TARGET_SERVICE, add_contracts=["DEFAULT"])
    assert contracts_of(db, TARGET_SERVICE) == {CONTRACT, "DEFAULT"}
    with db.transaction() as tx:
        tx.send(tx.begin_dialog(INITIATOR_SERVICE, TARGET_SERVICE), body=b"default")
    assert bodies(db, TARGET_QUEUE) == [b"default"]


def test_add_and_drop_in_one_statement_with_a_move(tutorial: broker.Broker) -> None:
    db = tutorial
    db.create_queue(NEW_QUEUE)
    db.alter_service(TARGET_SERVICE, queue=f"dbo.[{NEW_QUEUE}]", add_contracts="DEFAULT", drop_contracts=[CONTRACT])
    assert contracts_of(db, TARGET_SERVICE) == {"DEFAULT"}
    assert service_queue_id(db, TARGET_SERVICE) == queue_id(db, NEW_QUEUE)


@pytest.mark.parametrize(("options", "number"), [
    ({}, 8493),  # nothing to change
    ({"queue": TARGET_QUEUE.lower()}, 8493),  # the queue it is on already
    ({"add_contracts": [CONTRACT]}, 8404),  # it has that contract already
    ({"add_contracts": ["DEFAULT", "DEFAULT"]}, 8404),
    ({"add_contracts": ["DEFAULT"], "drop_contracts": ["DEFAULT"]}, 8404),
    ({"drop_contracts": ["DEFAULT"]}, 8425),  # not one of its contracts
    ({"add_contracts": ["//no/such/contract"]}, 8425),
    ({"queue": "NoSuchQueue"}, 15151),
    ({"queue": INITIATOR_QUEUE, "drop_contracts": ["//no/such/contract"]}, 8425),
])
def test_alter_service_refusals_change_nothing(tutorial: broker.Broker, options: dict[str, object],
                                               number: int) -> None:
    db = tutorial
    open_dialog(db)
    with raises(number):
        db.alter_service(TARGET_SERVICE, **options)  # type: ignore[arg-type]
    assert contracts_of(db, TARGET_SERVICE) == {CONTRACT}
    assert service_queue_id(db, TARGET_SERVICE) == queue_id(db, TARGET_QUEUE)
    assert len(db.queue_rows(TARGET_QUEUE)) == 1


def test_alter_service_of_an_unknown_service_is_15151(db: broker.Broker) -> None:
    with raises(15151):
        db.alter_service("//no/such/service", add_contracts=["DEFAULT"])


@pytest.mark.parametrize("call", [
    lambda db: db.alter_service(7),
    lambda db: db.alter_service(TARGET_SERVICE, queue=7),
    lambda db: db.alter_service(TARGET_SERVICE, add_contracts=7),
    lambda db: db.alter_service(TARGET_SERVICE, drop_contracts=[b"x"]),
    lambda db: db.alter_message_type(REQUEST, 7),
    lambda db: db.alter_message_type(None, "NONE"),
])
def test_arguments_of_the_wrong_type_are_206(tutorial: broker.Broker, call: Callable[[broker.Broker], None]) -> None:
    with raises(206):
        call(tutorial)


# -- ALTER MESSAGE TYPE --------------------------------------------------------------------------

XSD = """<xs:schema xmlns:xs="http://www.w3.org/2001/XMLSchema"><xs:element name="Order"/></xs:schema>"""


def validation_of(db: broker.Broker, name: str) -> tuple[str, str, object]:
    [row] = db.catalog("sys.service_message_types", name=name)
    return row["validation"], row["validation_desc"], row["xml_collection_id"]


def test_alter_message_type_changes_the_validation_shown(db: broker.Broker) -> None:
    db.create_xml_schema_collection("Orders", XSD)
    db.create_message_type("//m/T", "WELL_FORMED_XML")
    db.alter_message_type("//m/T", "valid_xml", "Orders")
    [collection] = db.catalog("sys.xml_schema_collections", name="Orders")
    assert validation_of(db, "//m/T") == ("X", "XML", collection["xml_collection_id"])
    db.alter_message_type("//m/T", validation="EMPTY")
    assert validation_of(db, "//m/T") == ("E", "EMPTY", None)
    db.alter_message_type("//m/T", "NONE")
    assert validation_of(db, "//m/T") == ("N", "BINARY", None)


def test_queued_messages_are_not_checked_again_and_later_ones_are(tutorial: broker.Broker) -> None:
    db = tutorial
    handle = open_dialog(db, b"<queued/>")
    db.alter_message_type(REQUEST, "EMPTY")
    [queued] = db.queue_rows(TARGET_QUEUE)
    assert (queued.message_body, queued.validation) == (b"<queued/>", "X")
    with db.transaction() as tx:
        tx.send(handle, REQUEST, b"<not empty/>")
    assert error_codes(db, INITIATOR_QUEUE) == [-9615]  # the new body failed EMPTY, the queued one stays
    assert [m.message_body for m in db.queue_rows(TARGET_QUEUE) if m.message_type_name == REQUEST] == [b"<queued/>"]


def test_a_held_message_is_checked_against_the_validation_of_its_delivery(tutorial: broker.Broker) -> None:
    db = tutorial
    db.alter_queue(TARGET_QUEUE, status=False)
    open_dialog(db, b"not XML at all")  # would fail WELL_FORMED_XML; it waits, unchecked
    db.alter_message_type(REQUEST, "NONE")
    db.alter_queue(TARGET_QUEUE, status=True)
    assert bodies(db, TARGET_QUEUE) == [b"not XML at all"]
    assert error_codes(db, INITIATOR_QUEUE) == []


@pytest.mark.parametrize(("name", "validation", "collection", "number"), [
    ("//no/such/type", "NONE", None, 15151),
    ("DEFAULT", "EMPTY", None, 59030),  # built-in types keep their validation
    (broker.ERROR, "NONE", None, 59030),
    (REQUEST, "VALID_XML", None, 59004),
    (REQUEST, "VALID_XML", "NoSuchCollection", 15151),
    (REQUEST, "WELL_FORMED_XML", "Orders", 102),
    (REQUEST, "XML", None, 102),
])
def test_alter_message_type_refusals_change_nothing(tutorial: broker.Broker, name: str, validation: str,
                                                    collection: str | None, number: int) -> None:
    db = tutorial
    db.create_xml_schema_collection("Orders", XSD)
    before = db.catalog("sys.service_message_types")
    with raises(number):
        db.alter_message_type(name, validation, collection)
    assert db.catalog("sys.service_message_types") == before


# -- the command line ----------------------------------------------------------------------------


def test_cli_alter_service_and_message_type(tutorial: broker.Broker, db_url: str) -> None:
    db = tutorial
    db.create_queue(NEW_QUEUE)
    open_dialog(db, b"<moved/>")
    assert invoke(db_url, "alter", "service", TARGET_SERVICE, "--queue", NEW_QUEUE, "--add-contract", "DEFAULT",
                  "--drop-contract", CONTRACT) == f"altered service {TARGET_SERVICE}\n"
    assert bodies(db, NEW_QUEUE) == [b"<moved/>"] and contracts_of(db, TARGET_SERVICE) == {"DEFAULT"}
    assert invoke(db_url, "alter", "service", TARGET_SERVICE, expect=1).startswith("error 8493: ")
    assert invoke(db_url, "alter", "message-type", REQUEST, "--validation", "empty") == (
        f"altered message type {REQUEST}\n")
    assert validation_of(db, REQUEST)[0] == "E"
    assert invoke(db_url, "alter", "message-type", REQUEST, expect=2).startswith("error: Missing option")


# -- sys.internal_tables ---------------------------------------------------------------------------


def test_each_queue_has_an_internal_table_row(tutorial: broker.Broker) -> None:
    db = tutorial
    open_dialog(db)
    rows = db.catalog("sys.internal_tables")
    assert [list(row) for row in rows] == [INTERNAL_TABLE_COLUMNS] * 2
    queues = {q["object_id"]: q for q in db.catalog("sys.service_queues")}
    # The join of SQL Server's documentation: one internal table per queue, by parent.
    by_queue = {queues[row["parent_object_id"]]["name"]: row for row in rows}
    assert set(by_queue) == {TARGET_QUEUE, INITIATOR_QUEUE}
    object_ids = {row["object_id"] for row in rows}
    assert len(object_ids) == 2 and not object_ids & set(queues)  # objects of their own
    for queue_name, row in by_queue.items():
        parent = queue_id(db, queue_name)
        assert row["name"] == f"queue_messages_{parent}"
        assert (row["parent_id"], row["parent_minor_id"]) == (parent, 0)
        assert (row["type"], row["type_desc"], row["schema_id"]) == ("IT", "INTERNAL_TABLE", 4)
        assert (row["internal_type"], row["internal_type_desc"]) == (201, "QUEUE_MESSAGES")
        assert row["create_date"] == queues[parent]["create_date"]
        # The name is the table that holds the queue's messages.
        with db.transaction() as tx:
            [counted] = tx.query(f'SELECT count(*) AS n FROM "{row["name"]}"')
        assert counted["n"] == len(db.queue_rows(queue_name))
    assert by_queue[TARGET_QUEUE]["object_id"] == queue_id(db, TARGET_QUEUE) + 1
    db.drop_service(TARGET_SERVICE)
    db.drop_queue(TARGET_QUEUE)
    assert [row["parent_id"] for row in db.catalog("sys.internal_tables")] == [queue_id(db, INITIATOR_QUEUE)]


def test_the_migration_numbers_the_internal_tables_of_older_queues(db: broker.Broker) -> None:
    db.create_queue("Q1")
    db.create_queue("Q2")
    schema.downgrade(db.engine, "0003")  # before sys.internal_tables
    schema.upgrade(db.engine)
    db.dispose()
    queues = {q["name"]: q["object_id"] for q in db.catalog("sys.service_queues")}
    tables = {row["parent_id"]: row["object_id"] for row in db.catalog("sys.internal_tables")}
    highest = max(queues.values())
    assert sorted(tables.values()) == [highest + 1, highest + 2]
    db.create_queue("Q3")  # takes the next id after them all
    assert queue_id(db, "Q3") == highest + 3
    assert len(set(tables.values()) | set(queues.values()) | {highest + 3}) == 5

