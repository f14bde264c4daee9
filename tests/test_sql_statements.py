"""Every Service Broker statement through the T-SQL front end (``broker.sql.Session.run``):
each syntax variant and each error number of spec sections 1, 2, 3 and 5.4, with the
procedural subset around them and sqlcmd's script semantics (batches split on GO).

The effect of each statement is checked through the Python API (``db.catalog``,
``db.queue_rows``), not through more T-SQL, so a front-end bug cannot hide itself. The
objects a conversation test needs are made through the Python API for the same reason.
Every test runs on SQLite and on PostgreSQL (conftest's ``db`` fixture).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from support import target_handle

import broker
from broker.sql.errors import SqlError
from broker.sql.outputs import Failed, Output, Printed, ResultSet, RowsAffected
from broker.sql.session import Session
from broker.sql.values import Xml

DATABASE = "tutorial"

# The conversation objects (made through the Python API by the ``chat`` fixture).
REQUEST, REPLY = "Request", "Reply"  # WELL_FORMED_XML, sent by the initiator; NONE, sent by the target
CONTRACT = "Chat"
INITIATOR, INITIATOR_QUEUE = "Initiator", "InitiatorQueue"
TARGET, TARGET_QUEUE = "Target", "TargetQueue"  # a target of Chat and of [DEFAULT]
DEFAULT_CONTRACT_ID, DEFAULT_MESSAGE_TYPE_ID = 6, 14

QUEUE_COLUMNS = ("status", "priority", "queuing_order", "conversation_group_id", "conversation_handle",
                 "message_sequence_number", "service_name", "service_id", "service_contract_name",
                 "service_contract_id", "message_type_name", "message_type_id", "validation", "message_body",
                 "message_enqueue_time")
SCHEMA = ("<xsd:schema xmlns:xsd=\"http://www.w3.org/2001/XMLSchema\">"
          "<xsd:element name=\"a\" type=\"xsd:int\"/></xsd:schema>")
GUID = "6F9619FF-8B86-D011-B42D-00C04FC964FF"


# -- fixtures and helpers -----------------------------------------------------------------------


@pytest.fixture
def session(db: broker.Broker) -> Iterator[Session]:
    with Session(db, database_name=DATABASE) as opened:
        yield opened


@pytest.fixture
def chat(db: broker.Broker) -> broker.Broker:
    db.create_message_type(REQUEST, "WELL_FORMED_XML")
    db.create_message_type(REPLY, "NONE")
    db.create_contract(CONTRACT, {REQUEST: "INITIATOR", REPLY: "TARGET"})
    db.create_queue(INITIATOR_QUEUE)
    db.create_service(INITIATOR, INITIATOR_QUEUE)
    db.create_queue(TARGET_QUEUE)
    db.create_service(TARGET, TARGET_QUEUE, [CONTRACT, "DEFAULT"])
    return db


def ok(session: Session, script: str) -> list[Output]:
    """Run ``script``, which must not fail; its outputs."""
    outputs = session.run(script)
    failures = [str(output.error) for output in outputs if isinstance(output, Failed)]
    assert not failures, failures
    return outputs


def failure(session: Session, script: str) -> SqlError:
    """Run ``script``, which must fail exactly once; the error."""
    outputs = session.run(script)
    errors = [output.error for output in outputs if isinstance(output, Failed)]
    assert len(errors) == 1, outputs
    return errors[0]


def results(outputs: list[Output]) -> list[ResultSet]:
    return [output for output in outputs if isinstance(output, ResultSet)]


def rows(session: Session, script: str) -> tuple[tuple[Any, ...], ...]:
    """The rows of the last result set ``script`` returns."""
    return results(ok(session, script))[-1].rows


def value(session: Session, script: str) -> Any:
    """The single value of the last result set ``script`` returns."""
    [[only]] = rows(session, script)
    return only


def printed(outputs: list[Output]) -> list[str]:
    return [output.text for output in outputs if isinstance(output, Printed)]


def one(db: broker.Broker, view: str, **where: Any) -> dict[str, Any]:
    """The one catalog row of ``view`` matching ``where``."""
    [found] = db.catalog(view, **where)
    return found


def names(db: broker.Broker, view: str) -> set[str]:
    return {row["name"] for row in db.catalog(view)}


def handles(**variables: object) -> str:
    """``DECLARE @name UNIQUEIDENTIFIER = 'guid', ...``: handles carried into a script."""
    return "DECLARE " + ", ".join(f"@{name} UNIQUEIDENTIFIER = '{guid}'" for name, guid in variables.items())


def open_dialog(db: broker.Broker, body: bytes = b"<a><b>7</b></a>") -> uuid.UUID:
    """Begin a Chat dialog from Initiator and send one Request; the initiator's handle."""
    with db.transaction() as tx:
        handle = tx.begin_dialog(INITIATOR, TARGET, CONTRACT)
        tx.send(handle, REQUEST, body)
    return handle


def messages(db: broker.Broker, queue: str = TARGET_QUEUE) -> list[tuple[str, bytes | None]]:
    return [(message.message_type_name, message.message_body) for message in db.queue_rows(queue)]


def endpoints(db: broker.Broker, handle: object) -> list[dict[str, Any]]:
    return db.catalog("sys.conversation_endpoints", conversation_handle=uuid.UUID(str(handle)))


def endpoint(db: broker.Broker, handle: object) -> dict[str, Any]:
    [found] = endpoints(db, handle)
    return found


def seconds_from_now(moment: datetime) -> float:
    return (moment - datetime.now(UTC)).total_seconds()


# -- CREATE / ALTER / DROP MESSAGE TYPE (spec 1.2) -------------------------------------------------


@pytest.mark.parametrize(("clause", "validation"), [
    ("", "N"), ("VALIDATION = NONE", "N"), ("VALIDATION = EMPTY", "E"), ("VALIDATION = WELL_FORMED_XML", "X"),
])
def test_create_message_type_with_each_validation(db: broker.Broker, session: Session, clause: str,
                                                   validation: str) -> None:
    ok(session, f"CREATE MESSAGE TYPE [//tests/m] {clause}")
    row = one(db, "sys.service_message_types", name="//tests/m")
    assert (row["validation"], row["xml_collection_id"]) == (validation, None)


def test_valid_xml_names_a_schema_collection(db: broker.Broker, session: Session) -> None:
    ok(session, f"CREATE XML SCHEMA COLLECTION Numbers AS N'{SCHEMA}'\n"
                "CREATE MESSAGE TYPE m VALIDATION = VALID_XML WITH SCHEMA COLLECTION Numbers")
    collection = one(db, "sys.xml_schema_collections", name="Numbers")
    row = one(db, "sys.service_message_types", name="m")
    assert (row["validation"], row["xml_collection_id"]) == ("X", collection["xml_collection_id"])


def test_authorization_dbo_is_accepted(db: broker.Broker, session: Session) -> None:
    ok(session, "CREATE MESSAGE TYPE m AUTHORIZATION dbo VALIDATION = EMPTY")
    assert one(db, "sys.service_message_types", name="m")["validation"] == "E"


@pytest.mark.parametrize("clause", ["VALIDATION = BOGUS", "VALIDATION = VALID_XML"])
def test_an_unknown_or_incomplete_validation_is_a_syntax_error(db: broker.Broker, session: Session,
                                                                clause: str) -> None:
    assert failure(session, f"CREATE MESSAGE TYPE m {clause}").number == 102
    assert "m" not in names(db, "sys.service_message_types")


def test_valid_xml_with_a_missing_schema_collection_fails(db: broker.Broker, session: Session) -> None:
    failure(session, "CREATE MESSAGE TYPE m VALIDATION = VALID_XML WITH SCHEMA COLLECTION Nowhere")
    assert "m" not in names(db, "sys.service_message_types")


def test_alter_message_type_changes_its_validation(db: broker.Broker, session: Session) -> None:
    ok(session, f"CREATE XML SCHEMA COLLECTION Numbers AS N'{SCHEMA}'\n"
                "CREATE MESSAGE TYPE m VALIDATION = VALID_XML WITH SCHEMA COLLECTION Numbers\n"
                "ALTER MESSAGE TYPE m VALIDATION = EMPTY")
    row = one(db, "sys.service_message_types", name="m")
    assert (row["validation"], row["xml_collection_id"]) == ("E", None)


def test_drop_message_type(db: broker.Broker, session: Session) -> None:
    ok(session, "CREATE MESSAGE TYPE m\nGO\nDROP MESSAGE TYPE m")
    assert "m" not in names(db, "sys.service_message_types")


def test_a_message_type_a_contract_uses_cannot_be_dropped(db: broker.Broker, session: Session) -> None:
    ok(session, "CREATE MESSAGE TYPE m\nCREATE CONTRACT c (m SENT BY ANY)")
    assert failure(session, "DROP MESSAGE TYPE m").number == 3729
    assert "m" in names(db, "sys.service_message_types")


# -- CREATE / DROP CONTRACT (spec 1.3) ----------------------------------------------------------


def _usages(db: broker.Broker, contract: str) -> dict[int, tuple[int, int]]:
    row = one(db, "sys.service_contracts", name=contract)
    return {usage["message_type_id"]: (usage["is_sent_by_initiator"], usage["is_sent_by_target"])
            for usage in db.catalog("sys.service_contract_message_usages",
                                    service_contract_id=row["service_contract_id"])}


def test_create_contract_with_each_direction(db: broker.Broker, session: Session) -> None:
    ok(session, "CREATE MESSAGE TYPE [//t/a]\nCREATE MESSAGE TYPE [//t/b]\nCREATE MESSAGE TYPE [//t/c]\n"
                "CREATE CONTRACT [//t/contract] AUTHORIZATION dbo\n"
                "    ([//t/a] SENT BY INITIATOR, [//t/b] SENT BY TARGET, [//t/c] SENT BY ANY)")
    ids = {row["name"]: row["message_type_id"] for row in db.catalog("sys.service_message_types")}
    assert _usages(db, "//t/contract") == {ids["//t/a"]: (1, 0), ids["//t/b"]: (0, 1), ids["//t/c"]: (1, 1)}


def test_bracketed_default_names_the_default_message_type(db: broker.Broker, session: Session) -> None:
    ok(session, "CREATE CONTRACT c ([DEFAULT] SENT BY ANY)")
    assert _usages(db, "c") == {DEFAULT_MESSAGE_TYPE_ID: (1, 1)}


@pytest.mark.parametrize(("usages", "number"), [
    ("(m SENT BY TARGET)", 8492),  # nothing the initiator may send
    ("(m SENT BY INITIATOR, m SENT BY TARGET)", 8403),
    ("(m SENT BY INITIATOR, Nowhere SENT BY TARGET)", 8428),
    ("(m SENT BY NOBODY)", 102),
])
def test_create_contract_errors(db: broker.Broker, session: Session, usages: str, number: int) -> None:
    ok(session, "CREATE MESSAGE TYPE m")
    assert failure(session, f"CREATE CONTRACT c {usages}").number == number
    assert "c" not in names(db, "sys.service_contracts")


def test_drop_contract(db: broker.Broker, session: Session) -> None:
    ok(session, "CREATE MESSAGE TYPE m\nCREATE CONTRACT c (m SENT BY ANY)\nDROP CONTRACT c")
    assert "c" not in names(db, "sys.service_contracts")


# -- CREATE / ALTER / DROP QUEUE (spec 1.4) -----------------------------------------------------


def _queue(db: broker.Broker, name: str = "q") -> dict[str, Any]:
    return one(db, "sys.service_queues", name=name)


def _flags(row: dict[str, Any]) -> tuple[int, int, int, int]:
    return (row["is_receive_enabled"], row["is_retention_enabled"], row["is_activation_enabled"],
            row["is_poison_message_handling_enabled"])


def test_create_queue_defaults(db: broker.Broker, session: Session) -> None:
    ok(session, "CREATE QUEUE q")
    row = _queue(db)
    assert _flags(row) == (1, 0, 0, 1)
    assert (row["type"], row["activation_procedure"]) == ("SQ", None)


@pytest.mark.parametrize("options", ["STATUS = OFF, RETENTION = ON", "STATUS = OFF RETENTION = ON"])
def test_create_queue_status_and_retention(db: broker.Broker, session: Session, options: str) -> None:
    ok(session, f"CREATE QUEUE q WITH {options}")
    assert _flags(_queue(db))[:2] == (0, 1)


@pytest.mark.parametrize("activation", [
    "STATUS = ON, PROCEDURE_NAME = Activated, MAX_QUEUE_READERS = 2, EXECUTE AS OWNER",
    "STATUS = ON PROCEDURE_NAME = Activated MAX_QUEUE_READERS = 2 EXECUTE AS OWNER",
])
def test_create_queue_activation_with_and_without_commas(db: broker.Broker, session: Session,
                                                          activation: str) -> None:
    ok(session, f"CREATE QUEUE q WITH STATUS = ON, ACTIVATION ({activation})")
    row = _queue(db)
    assert (row["activation_procedure"], row["max_readers"], row["is_activation_enabled"],
            row["execute_as_principal_id"]) == ("Activated", 2, 1, -2)


@pytest.mark.parametrize("execute_as", ["SELF", "'dbo'", "OWNER"])
def test_create_queue_activation_execute_as(db: broker.Broker, session: Session, execute_as: str) -> None:
    ok(session, f"CREATE QUEUE q WITH ACTIVATION (PROCEDURE_NAME = p, MAX_QUEUE_READERS = 1, "
                f"EXECUTE AS {execute_as})")
    assert _queue(db)["activation_procedure"] == "p"


def test_create_queue_activation_procedure_may_be_schema_qualified(db: broker.Broker, session: Session) -> None:
    ok(session, "CREATE QUEUE q WITH ACTIVATION (PROCEDURE_NAME = dbo.Activated, MAX_QUEUE_READERS = 1, "
                "EXECUTE AS OWNER)")
    assert _queue(db)["activation_procedure"] in ("Activated", "dbo.Activated", "[dbo].[Activated]")


def test_create_queue_poison_message_handling_off(db: broker.Broker, session: Session) -> None:
    ok(session, "CREATE QUEUE q WITH POISON_MESSAGE_HANDLING (STATUS = OFF)")
    assert _flags(_queue(db))[3] == 0


@pytest.mark.parametrize("name", ["dbo.q", "[dbo].[q]", f"{DATABASE}.dbo.q"])
def test_schema_qualified_queue_names(db: broker.Broker, session: Session, name: str) -> None:
    ok(session, f"CREATE QUEUE {name} ON [DEFAULT]")
    ok(session, f"ALTER QUEUE {name} WITH STATUS = OFF")
    assert _flags(_queue(db))[0] == 0
    ok(session, f"DROP QUEUE {name}")
    assert "q" not in names(db, "sys.service_queues")


def test_a_queue_in_another_database_is_911(db: broker.Broker, session: Session) -> None:
    assert failure(session, "CREATE QUEUE Elsewhere.dbo.q").number == 911
    assert "q" not in names(db, "sys.service_queues")


def test_an_unknown_queue_option_is_a_syntax_error_and_creates_nothing(db: broker.Broker, session: Session) -> None:
    assert failure(session, "CREATE QUEUE q WITH STATUS = OFF, BOGUS = ON").number == 102
    assert "q" not in names(db, "sys.service_queues")


def test_a_queue_name_cannot_start_with_a_hash(db: broker.Broker, session: Session) -> None:
    failure(session, "CREATE QUEUE #q")
    assert {"#q", "q"}.isdisjoint(names(db, "sys.service_queues"))


def test_alter_queue_status_retention_and_poison_handling(db: broker.Broker, session: Session) -> None:
    ok(session, "CREATE QUEUE q")
    ok(session, "ALTER QUEUE q WITH STATUS = OFF, RETENTION = ON POISON_MESSAGE_HANDLING (STATUS = OFF)")
    assert _flags(_queue(db)) == (0, 1, 0, 0)


def test_alter_queue_activation_and_activation_drop(db: broker.Broker, session: Session) -> None:
    ok(session, "CREATE QUEUE q WITH ACTIVATION (PROCEDURE_NAME = p, MAX_QUEUE_READERS = 1, EXECUTE AS SELF)")
    ok(session, "ALTER QUEUE q WITH ACTIVATION (STATUS = OFF PROCEDURE_NAME = p2 MAX_QUEUE_READERS = 3)")
    row = _queue(db)
    assert (row["activation_procedure"], row["max_readers"], row["is_activation_enabled"]) == ("p2", 3, 0)
    ok(session, "ALTER QUEUE q WITH ACTIVATION (DROP)")
    row = _queue(db)
    assert (row["activation_procedure"], row["max_readers"], row["is_activation_enabled"]) == (None, 0, 0)


@pytest.mark.parametrize("storage", ["REBUILD", "REBUILD WITH (MAXDOP = 1)", "REORGANIZE", "MOVE TO [DEFAULT]"])
def test_alter_queue_storage_clauses_are_accepted(db: broker.Broker, session: Session, storage: str) -> None:
    ok(session, f"CREATE QUEUE q\nALTER QUEUE q {storage}")
    assert _flags(_queue(db)) == (1, 0, 0, 1)


def test_a_queue_a_service_uses_cannot_be_dropped(db: broker.Broker, session: Session) -> None:
    ok(session, "CREATE QUEUE q\nCREATE SERVICE s ON QUEUE q")
    assert failure(session, "DROP QUEUE q").number == 3729
    assert "q" in names(db, "sys.service_queues")


# -- CREATE / ALTER / DROP SERVICE (spec 1.5) ---------------------------------------------------


def _contracts_of(db: broker.Broker, service: str) -> set[str]:
    row = one(db, "sys.services", name=service)
    by_id = {contract["service_contract_id"]: contract["name"] for contract in db.catalog("sys.service_contracts")}
    return {by_id[usage["service_contract_id"]]
            for usage in db.catalog("sys.service_contract_usages", service_id=row["service_id"])}


@pytest.fixture
def two_contracts(session: Session) -> Session:
    ok(session, "CREATE MESSAGE TYPE m\nCREATE CONTRACT c1 (m SENT BY ANY)\nCREATE CONTRACT c2 (m SENT BY ANY)\n"
                "CREATE QUEUE q\nCREATE QUEUE q2")
    return session


def test_create_service_with_and_without_contracts(db: broker.Broker, two_contracts: Session) -> None:
    ok(two_contracts, "CREATE SERVICE [//t/only-initiates] ON QUEUE q\n"
                      "CREATE SERVICE [//t/target] AUTHORIZATION dbo ON QUEUE dbo.q (c1, [DEFAULT])")
    assert _contracts_of(db, "//t/only-initiates") == set()
    assert _contracts_of(db, "//t/target") == {"c1", "DEFAULT"}
    assert one(db, "sys.services", name="//t/target")["service_queue_id"] == _queue(db)["object_id"]


def test_create_service_with_a_contract_twice_is_8404(db: broker.Broker, two_contracts: Session) -> None:
    assert failure(two_contracts, "CREATE SERVICE s ON QUEUE q (c1, c1)").number == 8404
    assert "s" not in names(db, "sys.services")


def test_alter_service_adds_and_drops_contracts(db: broker.Broker, two_contracts: Session) -> None:
    ok(two_contracts, "CREATE SERVICE s ON QUEUE q (c1)\nALTER SERVICE s (ADD CONTRACT c2, DROP CONTRACT c1)")
    assert _contracts_of(db, "s") == {"c2"}


def test_alter_service_on_queue_moves_its_messages(db: broker.Broker, two_contracts: Session) -> None:
    ok(two_contracts, "CREATE SERVICE s ON QUEUE q ([DEFAULT])\n"
                      "DECLARE @h UNIQUEIDENTIFIER\n"
                      "BEGIN DIALOG @h FROM SERVICE s TO SERVICE 's'\n"
                      "SEND ON CONVERSATION @h (N'moved')")
    assert messages(db, "q") == [("DEFAULT", b"moved")]
    ok(two_contracts, "ALTER SERVICE s ON QUEUE dbo.q2")
    assert one(db, "sys.services", name="s")["service_queue_id"] == _queue(db, "q2")["object_id"]
    assert (messages(db, "q"), messages(db, "q2")) == ([], [("DEFAULT", b"moved")])


@pytest.mark.parametrize("change", ["", "ON QUEUE q"])
def test_alter_service_that_changes_nothing_is_8493(two_contracts: Session, change: str) -> None:
    ok(two_contracts, "CREATE SERVICE s ON QUEUE q (c1)")
    assert failure(two_contracts, f"ALTER SERVICE s {change}").number == 8493


def test_drop_service(db: broker.Broker, two_contracts: Session) -> None:
    ok(two_contracts, "CREATE SERVICE s ON QUEUE q (c1)\nGO\nDROP SERVICE s")
    assert "s" not in names(db, "sys.services")


# -- CREATE / ALTER / DROP ROUTE (spec 1.6) -----------------------------------------------------


def _route(db: broker.Broker, name: str = "r") -> dict[str, Any]:
    return one(db, "sys.routes", name=name)


def test_create_route_with_every_clause(db: broker.Broker, session: Session) -> None:
    ok(session, f"CREATE ROUTE r AUTHORIZATION dbo WITH SERVICE_NAME = '//far/Target', BROKER_INSTANCE = '{GUID}',\n"
                "    LIFETIME = 600, ADDRESS = 'TCP://far.example:4022', MIRROR_ADDRESS = 'TCP://mirror.example:4022'")
    row = _route(db)
    assert (row["remote_service_name"], row["broker_instance"].upper(), row["address"], row["mirror_address"]) == (
        "//far/Target", GUID, "TCP://far.example:4022", "TCP://mirror.example:4022")
    assert 500 < seconds_from_now(row["lifetime"]) <= 600


@pytest.mark.parametrize("address", ["LOCAL", "TRANSPORT"])
def test_create_route_with_only_an_address(db: broker.Broker, session: Session, address: str) -> None:
    ok(session, f"CREATE ROUTE r WITH ADDRESS = '{address}'")
    row = _route(db)
    assert (row["remote_service_name"], row["broker_instance"], row["lifetime"], row["address"]) == (
        None, None, None, address)


def test_alter_route_changes_only_the_clauses_given(db: broker.Broker, session: Session) -> None:
    ok(session, "CREATE ROUTE r WITH SERVICE_NAME = 's', ADDRESS = 'TCP://old.example:4022'")
    ok(session, "ALTER ROUTE r WITH ADDRESS = 'TCP://new.example:4022', LIFETIME = 60")
    row = _route(db)
    assert (row["remote_service_name"], row["address"]) == ("s", "TCP://new.example:4022")
    assert 0 < seconds_from_now(row["lifetime"]) <= 60


def test_drop_route(db: broker.Broker, session: Session) -> None:
    ok(session, "CREATE ROUTE r WITH ADDRESS = 'LOCAL'\nDROP ROUTE r")
    assert "r" not in names(db, "sys.routes")


@pytest.mark.parametrize(("clauses", "number"), [
    (f"BROKER_INSTANCE = '{GUID}', ADDRESS = 'TCP://h.example:4022'", 9662),
    ("ADDRESS = 'not an address'", 9744),
    ("SERVICE_NAME = 's', ADDRESS = 'TRANSPORT'", 9745),
    ("ADDRESS = ''", 9659),
    ("SERVICE_NAME = 's', ADDRESS = 'TCP://h.example:4022', MIRROR_ADDRESS = 'TCP://m.example:4022'", 9661),
    (f"SERVICE_NAME = 's', BROKER_INSTANCE = '{GUID}', ADDRESS = 'LOCAL', MIRROR_ADDRESS = 'TCP://m.example:1'", 9743),
    (f"SERVICE_NAME = 's', BROKER_INSTANCE = '{GUID}', ADDRESS = 'TCP://h.example:1', "
     "MIRROR_ADDRESS = 'TCP://h.example:1'", 9747),
    ("SERVICE_NAME = 's'", 102),  # no ADDRESS
    ("ADDRESS = 'LOCAL', BOGUS = 1", 102),
])
def test_create_route_errors(db: broker.Broker, session: Session, clauses: str, number: int) -> None:
    assert failure(session, f"CREATE ROUTE r WITH {clauses}").number == number
    assert "r" not in names(db, "sys.routes")


def test_alter_route_checks_the_route_as_altered(db: broker.Broker, session: Session) -> None:
    ok(session, "CREATE ROUTE r WITH SERVICE_NAME = 's', ADDRESS = 'TCP://h.example:4022'")
    assert failure(session, "ALTER ROUTE r WITH ADDRESS = 'TRANSPORT'").number == 9745
    assert _route(db)["address"] == "TCP://h.example:4022"


# -- CREATE / ALTER / DROP REMOTE SERVICE BINDING (spec 1.7) ------------------------------------


def test_remote_service_binding(db: broker.Broker, session: Session) -> None:
    ok(session, "CREATE REMOTE SERVICE BINDING b AUTHORIZATION dbo TO SERVICE '//far/Target' "
                "WITH USER = dbo, ANONYMOUS = ON")
    row = one(db, "sys.remote_service_bindings", name="b")
    assert (row["remote_service_name"], row["remote_principal_name"], row["is_anonymous_on"]) == (
        "//far/Target", "dbo", 1)
    ok(session, "ALTER REMOTE SERVICE BINDING b WITH ANONYMOUS = OFF")
    assert one(db, "sys.remote_service_bindings", name="b")["is_anonymous_on"] == 0
    ok(session, "DROP REMOTE SERVICE BINDING b")
    assert names(db, "sys.remote_service_bindings") == set()


def test_a_second_binding_for_one_service_is_9619(db: broker.Broker, session: Session) -> None:
    ok(session, "CREATE REMOTE SERVICE BINDING b TO SERVICE '//far/Target' WITH USER = dbo")
    assert failure(session, "CREATE REMOTE SERVICE BINDING b2 TO SERVICE '//far/Target' WITH USER = dbo").number == 9619
    assert names(db, "sys.remote_service_bindings") == {"b"}


# -- CREATE / ALTER / DROP BROKER PRIORITY (spec 1.8) -------------------------------------------


def _priority(db: broker.Broker, name: str = "p") -> tuple[Any, ...]:
    row = one(db, "sys.conversation_priorities", name=name)
    return row["service_contract_id"], row["local_service_id"], row["remote_service_name"], row["priority"]


def test_create_broker_priority_with_every_criterion(chat: broker.Broker, session: Session) -> None:
    ok(session, f"CREATE BROKER PRIORITY p FOR CONVERSATION SET (CONTRACT_NAME = {CONTRACT}, "
                f"LOCAL_SERVICE_NAME = {INITIATOR}, REMOTE_SERVICE_NAME = N'{TARGET}', PRIORITY_LEVEL = 8)")
    contract = one(chat, "sys.service_contracts", name=CONTRACT)["service_contract_id"]
    service = one(chat, "sys.services", name=INITIATOR)["service_id"]
    assert _priority(chat) == (contract, service, TARGET, 8)


@pytest.mark.parametrize("clause", [
    "", "SET (CONTRACT_NAME = ANY, LOCAL_SERVICE_NAME = ANY, REMOTE_SERVICE_NAME = ANY, PRIORITY_LEVEL = DEFAULT)",
])
def test_broker_priority_any_and_default(db: broker.Broker, session: Session, clause: str) -> None:
    ok(session, f"CREATE BROKER PRIORITY p FOR CONVERSATION {clause}")
    assert _priority(db) == (None, None, None, 5)


def test_alter_and_drop_broker_priority(db: broker.Broker, session: Session) -> None:
    ok(session, "CREATE BROKER PRIORITY p FOR CONVERSATION SET (REMOTE_SERVICE_NAME = 'far', PRIORITY_LEVEL = 8)")
    ok(session, "ALTER BROKER PRIORITY p FOR CONVERSATION SET (PRIORITY_LEVEL = 2)")
    assert _priority(db) == (None, None, "far", 2)
    ok(session, "DROP BROKER PRIORITY p")
    assert names(db, "sys.conversation_priorities") == set()


# -- ALTER DATABASE (spec 1.10) -----------------------------------------------------------------


def _database(db: broker.Broker) -> dict[str, Any]:
    [row] = db.catalog("sys.databases")
    return row


def test_disable_and_enable_broker(db: broker.Broker, session: Session) -> None:
    ok(session, f"ALTER DATABASE {DATABASE} SET DISABLE_BROKER")
    assert _database(db)["is_broker_enabled"] == 0
    ok(session, f"ALTER DATABASE {DATABASE} SET ENABLE_BROKER")
    assert _database(db)["is_broker_enabled"] == 1


def test_honor_broker_priority(db: broker.Broker, session: Session) -> None:
    ok(session, "ALTER DATABASE CURRENT SET HONOR_BROKER_PRIORITY ON")
    assert _database(db)["is_honor_broker_priority_on"] == 1
    ok(session, "ALTER DATABASE CURRENT SET HONOR_BROKER_PRIORITY OFF")
    assert _database(db)["is_honor_broker_priority_on"] == 0


def test_new_broker_removes_conversations_and_changes_the_guid(chat: broker.Broker, session: Session) -> None:
    open_dialog(chat)
    before = chat.service_broker_guid
    ok(session, f"ALTER DATABASE {DATABASE} SET NEW_BROKER")
    assert chat.service_broker_guid != before
    assert chat.catalog("sys.conversation_endpoints") == []
    assert _database(chat)["is_broker_enabled"] == 1


def test_error_broker_conversations_errors_every_conversation(chat: broker.Broker, session: Session) -> None:
    open_dialog(chat)
    ok(session, f"ALTER DATABASE {DATABASE} SET ERROR_BROKER_CONVERSATIONS")
    assert {row["state"] for row in chat.catalog("sys.conversation_endpoints")} == {"ER"}
    assert broker.ERROR in {name for name, _body in messages(chat, INITIATOR_QUEUE)}


@pytest.mark.parametrize("termination", [
    "WITH ROLLBACK IMMEDIATE",
    "WITH ROLLBACK AFTER 5",
    "WITH NO_WAIT",
])
def test_alter_database_termination_clauses(db: broker.Broker, session: Session, termination: str) -> None:
    ok(session, f"ALTER DATABASE {DATABASE} SET DISABLE_BROKER {termination}")
    assert _database(db)["is_broker_enabled"] == 0


@pytest.mark.parametrize(("script", "number"), [
    ("ALTER DATABASE Elsewhere SET ENABLE_BROKER", 911),
    (f"ALTER DATABASE {DATABASE} SET BOGUS_OPTION", 102),
])
def test_alter_database_errors(session: Session, script: str, number: int) -> None:
    assert failure(session, script).number == number


# -- BEGIN DIALOG [CONVERSATION] (spec 2.1) -----------------------------------------------------

BEGIN_DIALOG = f"BEGIN DIALOG @h FROM SERVICE {INITIATOR} TO SERVICE '{TARGET}'"
BEGIN = f"DECLARE @h UNIQUEIDENTIFIER\n{BEGIN_DIALOG}"


def _begun(db: broker.Broker, session: Session, script: str) -> dict[str, Any]:
    """Run a script that begins @h and selects it; the new initiator endpoint."""
    return endpoint(db, value(session, script + "\nSELECT @h"))


@pytest.mark.parametrize("keyword", ["DIALOG", "DIALOG CONVERSATION"])
def test_begin_dialog_makes_an_initiator_endpoint(chat: broker.Broker, session: Session, keyword: str) -> None:
    row = _begun(chat, session, BEGIN.replace("DIALOG", keyword) + f" ON CONTRACT {CONTRACT};")
    contract = one(chat, "sys.service_contracts", name=CONTRACT)["service_contract_id"]
    assert (row["is_initiator"], row["state"], row["far_service"], row["service_contract_id"]) == (
        1, "SO", TARGET, contract)


def test_begin_dialog_without_a_contract_uses_default(chat: broker.Broker, session: Session) -> None:
    assert _begun(chat, session, BEGIN)["service_contract_id"] == DEFAULT_CONTRACT_ID


def test_to_service_from_a_variable(chat: broker.Broker, session: Session) -> None:
    row = _begun(chat, session, f"DECLARE @to NVARCHAR(256) = N'{TARGET}', @h UNIQUEIDENTIFIER\n"
                                f"BEGIN DIALOG @h FROM SERVICE {INITIATOR} TO SERVICE @to")
    assert row["far_service"] == TARGET


@pytest.mark.parametrize("instance", ["'CURRENT DATABASE'", f"'{GUID}'"])
def test_to_service_with_a_broker_instance(chat: broker.Broker, session: Session, instance: str) -> None:
    row = _begun(chat, session, f"{BEGIN}, {instance}")
    expected = str(chat.service_broker_guid) if "CURRENT" in instance else GUID
    assert row["far_broker_instance"].upper() == expected.upper()


@pytest.mark.parametrize("separator", [", ", " "])
def test_lifetime_and_encryption_with_and_without_commas(chat: broker.Broker, session: Session,
                                                          separator: str) -> None:
    row = _begun(chat, session, f"{BEGIN} ON CONTRACT {CONTRACT} WITH LIFETIME = 600{separator}ENCRYPTION = OFF")
    assert 500 < seconds_from_now(row["lifetime"]) <= 600


def test_related_conversation_joins_its_group(chat: broker.Broker, session: Session) -> None:
    first = open_dialog(chat)
    row = _begun(chat, session, handles(first=first) + ", @h UNIQUEIDENTIFIER\n"
                                f"{BEGIN_DIALOG} WITH RELATED_CONVERSATION = @first, ENCRYPTION = ON")
    assert row["conversation_group_id"] == endpoint(chat, first)["conversation_group_id"]


def test_related_conversation_group_makes_that_group(chat: broker.Broker, session: Session) -> None:
    group = uuid.uuid4()
    row = _begun(chat, session, f"{BEGIN} WITH RELATED_CONVERSATION_GROUP = '{group}' LIFETIME = 60")
    assert row["conversation_group_id"] == group
    assert one(chat, "sys.conversation_groups", conversation_group_id=group)["service_id"] == row["service_id"]


@pytest.mark.parametrize(("script", "number"), [
    (f"DECLARE @h UNIQUEIDENTIFIER\nBEGIN DIALOG @h FROM SERVICE Nowhere TO SERVICE '{TARGET}'", 8423),
    (f"{BEGIN} ON CONTRACT Nowhere", 8425),
    (f"{BEGIN} WITH LIFETIME = 0", 8411),
])
def test_begin_dialog_errors(chat: broker.Broker, session: Session, script: str, number: int) -> None:
    assert failure(session, script).number == number
    assert chat.catalog("sys.conversation_endpoints") == []


def test_begin_dialog_with_a_null_lifetime_is_8406(chat: broker.Broker, session: Session) -> None:
    assert failure(session, f"{BEGIN} WITH LIFETIME = NULL").number == 8406
    assert chat.catalog("sys.conversation_endpoints") == []


# -- SEND (spec 2.2) ----------------------------------------------------------------------------


def test_send_one_message(chat: broker.Broker, session: Session) -> None:
    ok(session, f"{BEGIN} ON CONTRACT {CONTRACT}\nSEND ON CONVERSATION @h MESSAGE TYPE {REQUEST} (N'<a>1</a>');")
    assert messages(chat) == [(REQUEST, b"<a>1</a>")]


def test_send_on_a_parenthesised_list_of_handles(chat: broker.Broker, session: Session) -> None:
    first, second = open_dialog(chat), open_dialog(chat)
    ok(session, handles(a=first, b=second) + f"\nSEND ON CONVERSATION (@a, @b) MESSAGE TYPE {REQUEST} (N'<both/>')")
    assert [body for _type, body in messages(chat)].count(b"<both/>") == 2


def test_send_on_a_list_with_an_unknown_handle_sends_nothing(chat: broker.Broker, session: Session) -> None:
    known = open_dialog(chat)
    script = handles(a=known, b=uuid.uuid4()) + f"\nSEND ON CONVERSATION (@a, @b) MESSAGE TYPE {REQUEST} (N'<m/>')"
    assert failure(session, script).number == 8426
    assert b"<m/>" not in [body for _type, body in messages(chat)]


def test_send_without_message_type_or_body(chat: broker.Broker, session: Session) -> None:
    ok(session, f"{BEGIN}\nSEND ON CONVERSATION @h\nSEND ON CONVERSATION @h (0x00FF)\nSEND ON CONVERSATION @h (N'')")
    assert messages(chat) == [("DEFAULT", None), ("DEFAULT", b"\x00\xff"), ("DEFAULT", b"")]


def test_send_an_xml_variable(chat: broker.Broker, session: Session) -> None:
    ok(session, f"DECLARE @body XML = N'<x>1</x>', @h UNIQUEIDENTIFIER\n{BEGIN_DIALOG} ON CONTRACT {CONTRACT}\n"
                f"SEND ON CONVERSATION @h MESSAGE TYPE {REQUEST} (@body)")
    assert messages(chat) == [(REQUEST, b"<x>1</x>")]


@pytest.mark.parametrize(("script", "number"), [
    ("DECLARE @h UNIQUEIDENTIFIER\nSEND ON CONVERSATION @h (N'x')", 8418),  # a NULL handle
    ("DECLARE @h UNIQUEIDENTIFIER = NEWID()\nSEND ON CONVERSATION @h (N'x')", 8426),
    (f"{BEGIN}\nSEND ON CONVERSATION @h (NULL)", 8433),
    (f"{BEGIN}\nDECLARE @body VARBINARY(MAX)\nSEND ON CONVERSATION @h (@body)", 8433),
    (f"{BEGIN} ON CONTRACT {CONTRACT}\nSEND ON CONVERSATION @h MESSAGE TYPE Nowhere (N'x')", 8428),
    (f"{BEGIN} ON CONTRACT {CONTRACT}\nSEND ON CONVERSATION @h MESSAGE TYPE [DEFAULT] (N'x')", 8431),
    (f"{BEGIN} ON CONTRACT {CONTRACT}\nSEND ON CONVERSATION @h MESSAGE TYPE {REPLY} (N'x')", 8432),
])
def test_send_errors(chat: broker.Broker, session: Session, script: str, number: int) -> None:
    assert failure(session, script).number == number
    assert messages(chat) == []


# -- RECEIVE (spec 2.3, 3) ----------------------------------------------------------------------


def test_receive_star_returns_the_queue_columns(chat: broker.Broker, session: Session) -> None:
    handle = open_dialog(chat)
    outputs = ok(session, f"RECEIVE * FROM {TARGET_QUEUE}")
    [result] = results(outputs)
    assert result.columns == QUEUE_COLUMNS
    [row] = result.rows
    received = dict(zip(QUEUE_COLUMNS, row, strict=True))
    assert (received["conversation_handle"], received["message_type_name"], received["message_body"],
            received["service_name"], received["service_contract_name"], received["validation"]) == (
        target_handle(chat, handle), REQUEST, b"<a><b>7</b></a>", TARGET, CONTRACT, "X")
    assert outputs[-1] == RowsAffected(1)
    assert messages(chat) == []


def test_receive_a_column_list_with_aliases_and_expressions(chat: broker.Broker, session: Session) -> None:
    open_dialog(chat)
    script = ("RECEIVE message_type_name AS kind, body = message_body, message_sequence_number n,\n"
              "    CAST(message_body AS NVARCHAR(MAX)),\n"
              "    CAST(message_body AS XML).value('(/a/b)[1]', 'int') AS b\n"
              f"FROM dbo.{TARGET_QUEUE}")
    [result] = results(ok(session, script))
    assert result.columns == ("kind", "body", "n", "", "b")
    assert result.rows == ((REQUEST, b"<a><b>7</b></a>", 0, "<a><b>7</b></a>", 7),)


def test_receive_top(chat: broker.Broker, session: Session) -> None:
    for _ in range(3):
        open_dialog(chat)
    assert len(rows(session, f"RECEIVE TOP (1) message_body FROM {TARGET_QUEUE}")) == 1
    assert len(messages(chat)) == 2


def test_receive_where_conversation_handle(chat: broker.Broker, session: Session) -> None:
    open_dialog(chat, b"<first/>")
    second = target_handle(chat, open_dialog(chat, b"<second/>"))
    script = handles(h=second) + f"\nRECEIVE message_body FROM {TARGET_QUEUE} WHERE conversation_handle = @h"
    assert rows(session, script) == ((b"<second/>",),)
    assert messages(chat) == [(REQUEST, b"<first/>")]


def test_receive_where_conversation_group_id(chat: broker.Broker, session: Session) -> None:
    open_dialog(chat, b"<first/>")
    second = endpoint(chat, target_handle(chat, open_dialog(chat, b"<second/>")))
    script = (handles(g=second["conversation_group_id"])
              + f"\nRECEIVE message_body FROM {TARGET_QUEUE} WHERE conversation_group_id = @g")
    assert rows(session, script) == ((b"<second/>",),)


def test_receive_where_a_null_handle_is_8418(chat: broker.Broker, session: Session) -> None:
    open_dialog(chat)
    script = f"DECLARE @h UNIQUEIDENTIFIER\nRECEIVE * FROM {TARGET_QUEUE} WHERE conversation_handle = @h"
    assert failure(session, script).number == 8418
    assert len(messages(chat)) == 1


def test_receive_into_a_table_variable(chat: broker.Broker, session: Session) -> None:
    handle = target_handle(chat, open_dialog(chat))
    result = rows(session, "DECLARE @got TABLE (handle UNIQUEIDENTIFIER, kind NVARCHAR(256), body VARBINARY(MAX))\n"
                           "RECEIVE conversation_handle, message_type_name, message_body "
                           f"FROM {TARGET_QUEUE} INTO @got\n"
                           "SELECT handle, kind, body, @@ROWCOUNT FROM @got")
    assert result == ((handle, REQUEST, b"<a><b>7</b></a>", 1),)


def test_receive_into_variables(chat: broker.Broker, session: Session) -> None:
    handle = target_handle(chat, open_dialog(chat))
    outputs = ok(session, "DECLARE @h UNIQUEIDENTIFIER, @type NVARCHAR(256), @body VARBINARY(MAX)\n"
                          f"RECEIVE TOP (1) @h = conversation_handle, @type = message_type_name, @body = message_body "
                          f"FROM {TARGET_QUEUE}\n"
                          "SELECT @h, @type, CAST(@body AS XML).value('(/a/b)[1]', 'int'), @@ROWCOUNT")
    assert len(results(outputs)) == 1  # the assigning RECEIVE returns no result set
    assert results(outputs)[0].rows == ((handle, REQUEST, 7, 1),)


@pytest.mark.parametrize(("script", "number"), [
    (f"DECLARE @h UNIQUEIDENTIFIER\nRECEIVE TOP (1) @h = conversation_handle, message_body FROM {TARGET_QUEUE}", 8447),
    ("DECLARE @h UNIQUEIDENTIFIER, @t TABLE (h UNIQUEIDENTIFIER)\n"
     f"RECEIVE TOP (1) @h = conversation_handle FROM {TARGET_QUEUE} INTO @t", 8450),
])
def test_receive_assignment_errors(chat: broker.Broker, session: Session, script: str, number: int) -> None:
    open_dialog(chat)
    assert failure(session, script).number == number


@pytest.mark.parametrize("script", [
    f"DECLARE @h UNIQUEIDENTIFIER\nRECEIVE TOP (1) @h = conversation_handle, message_body FROM {TARGET_QUEUE}",
    f"DECLARE @h UNIQUEIDENTIFIER, @t TABLE (h UNIQUEIDENTIFIER)\nRECEIVE @h = conversation_handle FROM "
    f"{TARGET_QUEUE} INTO @t",
])
def test_a_receive_that_fails_its_assignment_check_receives_nothing(chat: broker.Broker, session: Session,
                                                                     script: str) -> None:
    open_dialog(chat)
    failure(session, script)
    assert len(messages(chat)) == 1


def test_rowcount_after_receive(chat: broker.Broker, session: Session) -> None:
    handle = open_dialog(chat)
    with chat.transaction() as tx:
        tx.send(handle, REQUEST, b"<again/>")  # one conversation group: RECEIVE takes both
    assert value(session, f"SET NOCOUNT ON\nRECEIVE message_body FROM {TARGET_QUEUE}\nSELECT @@ROWCOUNT") == 2


@pytest.mark.parametrize("statement", [
    f"RECEIVE * FROM {TARGET_QUEUE}",
    f"DECLARE @g UNIQUEIDENTIFIER\nGET CONVERSATION GROUP @g FROM {TARGET_QUEUE}",
    f"WAITFOR (RECEIVE * FROM {TARGET_QUEUE}), TIMEOUT 100",
])
def test_a_disabled_queue_is_9617(chat: broker.Broker, session: Session, statement: str) -> None:
    open_dialog(chat)
    ok(session, f"ALTER QUEUE {TARGET_QUEUE} WITH STATUS = OFF")
    assert failure(session, statement).number == 9617


# -- WAITFOR (spec 2.3, 2.4) --------------------------------------------------------------------


def test_waitfor_receive_times_out_with_an_empty_result(chat: broker.Broker, session: Session) -> None:
    started = time.monotonic()
    outputs = ok(session, f"WAITFOR (RECEIVE message_body FROM {TARGET_QUEUE}), TIMEOUT 300\nSELECT @@ROWCOUNT")
    assert time.monotonic() - started >= 0.3
    assert outputs[0] == ResultSet(("message_body",), ())
    assert outputs[1] == RowsAffected(0)
    assert results(outputs)[-1].rows == ((0,),)


def test_waitfor_receive_returns_a_message_that_is_there(chat: broker.Broker, session: Session) -> None:
    open_dialog(chat)
    assert rows(session, f"WAITFOR (RECEIVE TOP (1) message_body FROM {TARGET_QUEUE})") == ((b"<a><b>7</b></a>",),)


def test_waitfor_receive_wakes_for_a_message_sent_while_it_waits(chat: broker.Broker, session: Session) -> None:
    ok(session, "PRINT 'parse once'")  # the parser is built on first use: keep that out of the timing
    sender = threading.Thread(target=open_dialog, args=(chat, b"<late/>"))
    started = time.monotonic()
    sender.start()
    try:
        got = rows(session, f"WAITFOR (RECEIVE message_body FROM {TARGET_QUEUE}), TIMEOUT 60000")
    finally:
        sender.join()
    assert got == ((b"<late/>",),)
    assert time.monotonic() - started < 30


def test_get_conversation_group_returns_the_next_group(chat: broker.Broker, session: Session) -> None:
    group = endpoint(chat, target_handle(chat, open_dialog(chat)))["conversation_group_id"]
    for waiting in ("GET CONVERSATION GROUP @g FROM {q}", "WAITFOR (GET CONVERSATION GROUP @g FROM {q}), TIMEOUT 1000"):
        statement = waiting.format(q=TARGET_QUEUE)
        assert value(session, f"DECLARE @g UNIQUEIDENTIFIER\n{statement}\nSELECT @g") == group
    assert len(messages(chat)) == 1  # it only looks


def test_waitfor_get_conversation_group_sets_null_when_nothing_comes(chat: broker.Broker, session: Session) -> None:
    started = time.monotonic()
    got = value(session, "DECLARE @g UNIQUEIDENTIFIER = NEWID()\n"
                         f"WAITFOR (GET CONVERSATION GROUP @g FROM {TARGET_QUEUE}), TIMEOUT 200\nSELECT @g")
    assert got is None
    assert time.monotonic() - started >= 0.2


# -- MOVE CONVERSATION, END CONVERSATION, TIMER, GET_TRANSMISSION_STATUS (spec 2.5-2.8) -----------


def test_move_conversation(chat: broker.Broker, session: Session) -> None:
    first, second = open_dialog(chat), open_dialog(chat)
    group = endpoint(chat, first)["conversation_group_id"]
    ok(session, handles(h=second, g=group) + "\nMOVE CONVERSATION @h TO @g")
    assert endpoint(chat, second)["conversation_group_id"] == group


def test_move_conversation_to_a_group_that_does_not_exist_is_8439(chat: broker.Broker, session: Session) -> None:
    handle = open_dialog(chat)
    assert failure(session, handles(h=handle, g=uuid.uuid4()) + "\nMOVE CONVERSATION @h TO @g").number == 8439


def test_end_conversation_sends_end_dialog(chat: broker.Broker, session: Session) -> None:
    handle = open_dialog(chat)
    far = target_handle(chat, handle)
    ok(session, handles(h=handle) + "\nEND CONVERSATION @h;")
    assert [kind for kind, _body in messages(chat)] == [REQUEST, broker.END_DIALOG]
    assert endpoint(chat, far)["state"] == "DI"


def test_end_conversation_with_error_sends_an_error(chat: broker.Broker, session: Session) -> None:
    handle = open_dialog(chat)
    far = target_handle(chat, handle)
    ok(session, handles(h=handle) + "\nEND CONVERSATION @h WITH ERROR = 42 DESCRIPTION = N'it broke'")
    [(kind, body)] = [(kind, body) for kind, body in messages(chat) if kind != REQUEST]
    assert kind == broker.ERROR
    assert broker.parse_error(body) == (42, "it broke")
    assert endpoint(chat, far)["state"] == "ER"


def test_end_conversation_with_cleanup_tells_nobody(chat: broker.Broker, session: Session) -> None:
    handle = open_dialog(chat)
    far = target_handle(chat, handle)
    ok(session, handles(h=handle) + "\nEND CONVERSATION @h WITH CLEANUP")
    assert endpoints(chat, handle) == []
    assert messages(chat) == [(REQUEST, b"<a><b>7</b></a>")]
    assert endpoint(chat, far)["state"] == "CO"


@pytest.mark.parametrize(("ending", "number"), [
    ("END CONVERSATION @unknown", 8426),
    ("END CONVERSATION @missing", 8418),
    ("END CONVERSATION @h WITH ERROR = @missing_code DESCRIPTION = N'x'", 8419),
])
def test_end_conversation_errors(chat: broker.Broker, session: Session, ending: str, number: int) -> None:
    handle = open_dialog(chat)
    script = handles(h=handle, unknown=uuid.uuid4()) + ", @missing UNIQUEIDENTIFIER, @missing_code INT\n" + ending
    assert failure(session, script).number == number
    assert endpoint(chat, handle)["state"] == "CO"


def test_begin_conversation_timer_sets_the_dialog_timer(chat: broker.Broker, session: Session) -> None:
    handle = open_dialog(chat)
    assert endpoint(chat, handle)["dialog_timer"].year == 1900
    ok(session, handles(h=handle) + "\nBEGIN CONVERSATION TIMER (@h) TIMEOUT = 120;")
    assert 100 < seconds_from_now(endpoint(chat, handle)["dialog_timer"]) <= 120


def test_get_transmission_status_of_a_delivered_dialog_is_empty(chat: broker.Broker, session: Session) -> None:
    handle = open_dialog(chat)
    assert value(session, handles(h=handle) + "\nSELECT GET_TRANSMISSION_STATUS(@h)") == ""


def test_get_transmission_status_of_an_unknown_handle_is_empty(session: Session) -> None:
    assert value(session, "SELECT GET_TRANSMISSION_STATUS(NEWID())") == ""


# -- the procedural subset ----------------------------------------------------------------------


def test_declare_with_initial_values_set_and_select_assignment(session: Session) -> None:
    assert rows(session, "DECLARE @a INT = 1, @b NVARCHAR(10) = N'x', @c INT\n"
                         "SET @a = @a + 1\nSET @a += 10\n"
                         "SELECT @c = 7, @b = @b + N'y'\n"
                         "SELECT @a, @b, @c") == ((12, "xy", 7),)


def test_select_assignment_from_no_rows_keeps_the_value(chat: broker.Broker, session: Session) -> None:
    assert value(session, "DECLARE @id INT = 5\n"
                          "SELECT @id = service_id FROM sys.services WHERE name = 'Nowhere'\nSELECT @id") == 5


@pytest.mark.parametrize(("number", "branch"), [(1, "one"), (2, "other")])
def test_if_else(session: Session, number: int, branch: str) -> None:
    outputs = ok(session, f"IF {number} = 1\n    PRINT 'one'\nELSE\nBEGIN\n    PRINT 'other'\nEND")
    assert printed(outputs) == [branch]


def test_while_with_break_and_continue(session: Session) -> None:
    assert rows(session, "DECLARE @i INT = 0, @sum INT = 0\n"
                         "WHILE @i < 100\nBEGIN\n"
                         "    SET @i += 1\n"
                         "    IF @i = 3 CONTINUE\n"
                         "    IF @i > 5 BREAK\n"
                         "    SET @sum += @i\n"
                         "END\n"
                         "SELECT @i, @sum") == ((6, 12),)


def test_try_catch_reads_the_error_and_the_batch_goes_on(chat: broker.Broker, session: Session) -> None:
    outputs = ok(session, "BEGIN TRY\n"
                          "    DECLARE @h UNIQUEIDENTIFIER = NEWID()\n"
                          "    SEND ON CONVERSATION @h (N'x')\n"
                          "    PRINT 'not reached'\n"
                          "END TRY\n"
                          "BEGIN CATCH\n"
                          "    SELECT ERROR_NUMBER(), ERROR_MESSAGE()\n"
                          "END CATCH\n"
                          "PRINT 'after'")
    [(number, message)] = results(outputs)[0].rows
    assert number == 8426 and "is not found" in message
    assert printed(outputs) == ["after"]


def test_throw(session: Session) -> None:
    error = failure(session, "PRINT 'before'\nTHROW 50123, N'custom failure', 2\nPRINT 'after'")
    assert (error.number, error.message, error.state, error.level) == (50123, "custom failure", 2, 16)


def test_rethrow_in_catch_raises_the_caught_error(chat: broker.Broker, session: Session) -> None:
    outputs = session.run("BEGIN TRY\n"
                          "    DECLARE @h UNIQUEIDENTIFIER = NEWID()\n"
                          "    SEND ON CONVERSATION @h (N'x')\n"
                          "END TRY\n"
                          "BEGIN CATCH\n"
                          "    PRINT 'caught';\n"
                          "    THROW\n"
                          "END CATCH\n"
                          "PRINT 'not reached'")
    assert printed(outputs) == ["caught"]
    assert isinstance(outputs[-1], Failed) and outputs[-1].error.number == 8426


def test_raiserror_severity_10_prints_and_16_fails(session: Session) -> None:
    outputs = session.run("RAISERROR('note %d of %s', 10, 1, 5, 'five')\n"
                          "RAISERROR('it failed', 16, 1)\n"
                          "PRINT 'not reached'")
    assert outputs[0] == Printed("note 5 of five")
    assert isinstance(outputs[1], Failed) and len(outputs) == 2
    assert (outputs[1].error.number, outputs[1].error.message, outputs[1].error.level) == (50000, "it failed", 16)


def test_print(session: Session) -> None:
    assert printed(ok(session, "PRINT N'text'\nPRINT 42\nPRINT NULL")) == ["text", "42", ""]


def test_trancount_and_xact_state(session: Session) -> None:
    result = rows(session, "DECLARE @outside INT = XACT_STATE()\n"
                           "BEGIN TRANSACTION\nBEGIN TRAN\n"
                           "DECLARE @nested INT = @@TRANCOUNT, @inside INT = XACT_STATE()\n"
                           "COMMIT TRANSACTION\n"
                           "DECLARE @after_one INT = @@TRANCOUNT\n"
                           "COMMIT\n"
                           "SELECT @outside, @nested, @inside, @after_one, @@TRANCOUNT, XACT_STATE()")
    assert result == ((0, 2, 1, 1, 0, 0),)


def test_newid_and_getdate(session: Session) -> None:
    [(first, second, now)] = rows(session, "SELECT NEWID(), NEWID(), GETDATE()")
    assert isinstance(first, uuid.UUID) and first != second
    assert abs(now - datetime.now()) < timedelta(minutes=1)


def test_cast_and_convert(session: Session) -> None:
    assert rows(session, f"SELECT CAST(N'<r/>' AS XML), CONVERT(XML, N'<s/>'),\n"
                         "    CAST(12 AS NVARCHAR(5)) + N'x', CONVERT(VARCHAR(MAX), 0x616263),\n"
                         "    CAST('abc' AS VARBINARY(MAX)), CONVERT(VARBINARY(MAX), 'de'),\n"
                         f"    CAST('{GUID}' AS UNIQUEIDENTIFIER), CONVERT(UNIQUEIDENTIFIER, '{{{GUID}}}')") == (
        (Xml("<r/>"), Xml("<s/>"), "12x", "abc", b"abc", b"de", uuid.UUID(GUID), uuid.UUID(GUID)),)


@pytest.mark.parametrize("script", [
    "SELECT CAST('not a guid' AS UNIQUEIDENTIFIER)",
    "SELECT CONVERT(UNIQUEIDENTIFIER, 'zz')",
    "DECLARE @h UNIQUEIDENTIFIER = 'bad'",
])
def test_a_bad_guid_is_8169(session: Session, script: str) -> None:
    assert failure(session, script).number == 8169


def test_xml_value_of_a_variable(session: Session) -> None:
    assert value(session, "DECLARE @x XML = N'<a><b>3</b><b>4</b></a>'\n"
                          "SELECT @x.value('(/a/b)[2]', 'int')") == 4


@pytest.mark.parametrize(("delay", "seconds"), [
    ("'00:00:01'", 1.0),
    ("'00:00:00.200'", 0.2),
])
def test_waitfor_delay(session: Session, delay: str, seconds: float) -> None:
    started = time.monotonic()
    ok(session, f"WAITFOR DELAY {delay}")
    assert time.monotonic() - started >= seconds


# -- SELECT over queues and catalog views ---------------------------------------------------------


def test_select_from_a_queue_with_where(chat: broker.Broker, session: Session) -> None:
    open_dialog(chat, b"<one/>")
    handle = open_dialog(chat, b"<two/>")
    ok(session, handles(h=handle) + "\nEND CONVERSATION @h")
    assert rows(session, f"SELECT message_body FROM dbo.{TARGET_QUEUE} WHERE message_type_name = '{REQUEST}' "
                         "ORDER BY queuing_order") == ((b"<one/>",), (b"<two/>",))
    assert len(messages(chat)) == 3  # SELECT only looks


def test_select_from_a_queue_with_nolock(chat: broker.Broker, session: Session) -> None:
    open_dialog(chat)
    assert value(session, f"SELECT COUNT(*) FROM {TARGET_QUEUE} WITH (NOLOCK)") == 1


@pytest.mark.parametrize("hints", [
    "WITH (READPAST)", "WITH (NOLOCK, READUNCOMMITTED)", "WITH (HOLDLOCK)", "WITH (UPDLOCK)", "WITH (ROWLOCK)",
    "WITH (TABLOCK)", "WITH (XLOCK)", "WITH (READCOMMITTED)", "WITH (REPEATABLEREAD)", "WITH (SERIALIZABLE)",
    "WITH (NOWAIT)", "WITH (PAGLOCK)", "WITH (UPDLOCK ROWLOCK READPAST)", "with (nolock)", "(NOLOCK)", "q (NOLOCK)",
    "AS q WITH (NOLOCK)",
])
def test_table_hints_are_accepted_and_read_the_same_rows(chat: broker.Broker, session: Session, hints: str) -> None:
    open_dialog(chat)
    assert rows(session, f"SELECT message_type_name FROM {TARGET_QUEUE} {hints}") == ((REQUEST,),)


def test_table_hints_on_a_joined_catalog_view_inside_a_transaction(chat: broker.Broker, session: Session) -> None:
    open_dialog(chat)
    assert rows(session, "BEGIN TRAN\n"
                         "SELECT s.name FROM sys.conversation_endpoints e WITH (NOLOCK)\n"
                         "JOIN sys.services s (NOLOCK) ON e.service_id = s.service_id WHERE e.is_initiator = 1\n"
                         "COMMIT") == ((INITIATOR,),)


def test_an_unknown_table_hint_is_321_and_nothing_of_its_batch_runs(chat: broker.Broker, session: Session) -> None:
    outputs = session.run(f"PRINT 'compiled first'\nSELECT * FROM {TARGET_QUEUE} WITH (NOLOCK, QUICKLY)")
    [failed] = outputs
    assert isinstance(failed, Failed)
    assert (failed.error.number, failed.error.line) == (321, 2)
    assert failed.error.message.startswith("'QUICKLY' is not a recognized table hints option.")


@pytest.mark.parametrize(("hints", "near"), [("(NOLOCK, READPAST)", "READPAST"), ("(HOLDLOCK)", "HOLDLOCK"),
                                             ("(FORCESEEK)", "FORCESEEK")])
def test_table_hints_without_with_are_one_of_the_old_ones_alone(chat: broker.Broker, session: Session, hints: str,
                                                                near: str) -> None:
    error = failure(session, f"SELECT * FROM {TARGET_QUEUE} {hints}")
    assert error.number == 1018
    assert error.message.startswith(f"Incorrect syntax near '{near}'. If this is intended as a part of a table hint")


def test_select_from_catalog_views_with_where_order_by_desc_and_top(db: broker.Broker, session: Session) -> None:
    ok(session, "CREATE QUEUE a\nCREATE QUEUE b\nCREATE QUEUE c")
    assert rows(session, "SELECT TOP (2) name FROM sys.service_queues WHERE name <> 'c' ORDER BY name DESC") == (
        ("b",), ("a",))
    assert rows(session, "SELECT name AS queue FROM sys.service_queues WHERE is_receive_enabled = 1 AND name LIKE 'c%'"
                ) == (("c",),)


def test_select_top_without_parentheses(db: broker.Broker, session: Session) -> None:
    ok(session, "CREATE QUEUE a\nCREATE QUEUE b")
    assert rows(session, "SELECT TOP 1 name FROM sys.service_queues ORDER BY name DESC") == (("b",),)


def test_select_with_a_join(chat: broker.Broker, session: Session) -> None:
    open_dialog(chat)
    result = rows(session, "SELECT s.name, e.is_initiator, e.state\n"
                           "FROM sys.conversation_endpoints e JOIN sys.services s ON e.service_id = s.service_id\n"
                           "ORDER BY e.is_initiator DESC")
    assert result == ((INITIATOR, 1, "CO"), (TARGET, 0, "CO"))


def test_select_group_by_with_count(chat: broker.Broker, session: Session) -> None:
    open_dialog(chat)
    open_dialog(chat)
    ok(session, handles(h=open_dialog(chat)) + "\nEND CONVERSATION @h")
    assert rows(session, f"SELECT message_type_name, COUNT(*) AS n FROM {TARGET_QUEUE}\n"
                         "GROUP BY message_type_name ORDER BY n DESC") == ((REQUEST, 3), (broker.END_DIALOG, 1))


# -- script semantics: batches, transactions, errors --------------------------------------------


def test_an_error_ends_its_batch_and_the_next_batch_runs(chat: broker.Broker, session: Session) -> None:
    outputs = session.run("PRINT 'first'\n"
                          "DECLARE @h UNIQUEIDENTIFIER = NEWID()\n"
                          "SEND ON CONVERSATION @h (N'x')\n"
                          "PRINT 'not reached'\n"
                          "GO\n"
                          "PRINT 'next batch'")
    assert [type(output) for output in outputs] == [Printed, Failed, Printed]
    assert printed(outputs) == ["first", "next batch"]


SEND_THEN_FAIL = (f"BEGIN TRANSACTION\n{BEGIN} ON CONTRACT {CONTRACT}\n"
                  f"SEND ON CONVERSATION @h MESSAGE TYPE {REQUEST} (N'<held/>')\n"
                  "SEND ON CONVERSATION @h MESSAGE TYPE Nowhere\n"
                  "GO\n")


def test_a_transaction_a_failing_batch_began_stays_open(chat: broker.Broker, session: Session) -> None:
    outputs = session.run(SEND_THEN_FAIL + "SELECT @@TRANCOUNT\nCOMMIT")
    assert isinstance(outputs[0], Failed) and outputs[0].error.number == 8428
    assert results(outputs)[0].rows == ((1,),)
    assert messages(chat) == [(REQUEST, b"<held/>")]


def test_the_end_of_the_script_rolls_back_an_open_transaction(chat: broker.Broker, session: Session) -> None:
    outputs = session.run(SEND_THEN_FAIL + "SELECT @@TRANCOUNT")
    assert results(outputs)[0].rows == ((1,),)
    session.close()
    assert messages(chat) == []
    assert chat.catalog("sys.conversation_endpoints") == []


def test_a_receive_rolled_back_leaves_the_message(chat: broker.Broker, session: Session) -> None:
    open_dialog(chat)
    assert rows(session, f"BEGIN TRAN\nRECEIVE message_body FROM {TARGET_QUEUE}\nROLLBACK") == ((b"<a><b>7</b></a>",),)
    assert messages(chat) == [(REQUEST, b"<a><b>7</b></a>")]


def test_xact_abort_rolls_back_the_transaction_of_a_failing_batch(chat: broker.Broker, session: Session) -> None:
    outputs = session.run("SET XACT_ABORT ON\n" + SEND_THEN_FAIL + "SELECT @@TRANCOUNT\nIF @@TRANCOUNT > 0 COMMIT")
    assert results(outputs)[0].rows == ((0,),)
    assert messages(chat) == []


def test_xact_abort_dooms_the_transaction_of_a_caught_error(chat: broker.Broker, session: Session) -> None:
    assert rows(session, "SET XACT_ABORT ON\nBEGIN TRAN\n"
                         "BEGIN TRY\n"
                         "    DECLARE @h UNIQUEIDENTIFIER = NEWID()\n"
                         "    SEND ON CONVERSATION @h\n"
                         "END TRY\n"
                         "BEGIN CATCH\n"
                         "    SELECT XACT_STATE()\n"
                         "END CATCH\n"
                         "ROLLBACK") == ((-1,),)


def test_xact_abort_off_restores_the_default(chat: broker.Broker, session: Session) -> None:
    outputs = session.run("SET XACT_ABORT ON\nSET XACT_ABORT OFF\n" + SEND_THEN_FAIL + "SELECT @@TRANCOUNT\nCOMMIT")
    assert [output.error.number for output in outputs if isinstance(output, Failed)] == [8428]
    assert results(outputs)[0].rows == ((1,),)
    assert messages(chat) == [(REQUEST, b"<held/>")]


DOOMED = (f"SET XACT_ABORT ON\nBEGIN TRAN\n{BEGIN} ON CONTRACT {CONTRACT}\n"
          f"SEND ON CONVERSATION @h MESSAGE TYPE {REQUEST} (N'<doomed/>')\n"
          "BEGIN TRY\n    THROW 50001, 'failed', 1\nEND TRY\nBEGIN CATCH\n    PRINT XACT_STATE()\nEND CATCH\n")


def test_a_doomed_transaction_refuses_writes_and_commit_then_rolls_back_at_the_end_of_its_batch(
        chat: broker.Broker, session: Session) -> None:
    outputs = session.run(DOOMED + "BEGIN TRY\n    SEND ON CONVERSATION @h MESSAGE TYPE "
                          f"{REQUEST} (N'<more/>')\nEND TRY\nBEGIN CATCH\n    PRINT ERROR_NUMBER()\nEND CATCH\n"
                          "BEGIN TRY\n    COMMIT\nEND TRY\nBEGIN CATCH\n    PRINT ERROR_NUMBER()\nEND CATCH\n"
                          "SELECT COUNT(*) FROM sys.conversation_endpoints\n"
                          "GO\nSELECT @@TRANCOUNT")
    assert printed(outputs) == ["-1", "3930", "3930"]
    assert results(outputs)[0].rows == ((2,),)  # a doomed transaction still reads: both endpoints
    assert [output.error.number for output in outputs if isinstance(output, Failed)] == [3998]
    assert results(outputs)[1].rows == ((0,),)
    assert messages(chat) == [] and chat.catalog("sys.conversation_endpoints") == []


def test_a_doomed_transaction_rolls_back(chat: broker.Broker, session: Session) -> None:
    outputs = session.run(DOOMED + "ROLLBACK\nSELECT @@TRANCOUNT, XACT_STATE()")
    assert results(outputs)[0].rows == ((0, 0),)
    assert not [output for output in outputs if isinstance(output, Failed)]
    assert messages(chat) == []


def test_xact_abort_leaves_raiserror_and_syntax_errors_alone(chat: broker.Broker, session: Session) -> None:
    outputs = session.run("SET XACT_ABORT ON\nBEGIN TRAN\nRAISERROR('mine', 16, 1)\nGO\nSELECT @@TRANCOUNT\n"
                          "GO\nSELECT 1 +\nGO\nSELECT @@TRANCOUNT, XACT_STATE()\nTHROW 50001, 'this one', 1\n"
                          "GO\nSELECT @@TRANCOUNT")
    assert [output.error.number for output in outputs if isinstance(output, Failed)] == [50000, 102, 50001]
    assert [result.rows for result in results(outputs)] == [((1,),), ((1, 1),), ((0,),)]


def test_xact_abort_set_in_a_procedure_lasts_until_it_returns(chat: broker.Broker, session: Session) -> None:
    ok(session, "CREATE PROCEDURE Fails AS\nSET XACT_ABORT ON\nSET NOCOUNT ON\nTHROW 50001, 'inside', 1")
    ok(session, "CREATE PROCEDURE Sets AS SET XACT_ABORT ON")
    outputs = session.run("BEGIN TRAN\nEXEC Sets\nBEGIN TRY\n    THROW 50002, 'outside', 1\nEND TRY\n"
                          "BEGIN CATCH\n    SELECT XACT_STATE()\nEND CATCH\n"
                          "BEGIN TRY\n    EXEC Fails\nEND TRY\nBEGIN CATCH\n    SELECT XACT_STATE()\nEND CATCH\n"
                          "ROLLBACK")
    assert [result.rows for result in results(outputs)] == [((1,),), ((-1,),)]
    assert [type(output) for output in outputs].count(RowsAffected) == 2  # NOCOUNT ended with Fails


@pytest.mark.parametrize("script", [
    "SET ANSI_NULLS ON", "SET QUOTED_IDENTIFIER ON", "SET ANSI_NULLS, QUOTED_IDENTIFIER ON", "SET ANSI_PADDING ON",
    "SET ANSI_WARNINGS ON", "SET ARITHABORT ON", "SET ARITHABORT OFF", "SET CONCAT_NULL_YIELDS_NULL ON",
    "SET NUMERIC_ROUNDABORT OFF", "SET IMPLICIT_TRANSACTIONS OFF", "SET NOCOUNT OFF;", "set xact_abort on",
    "SET DEADLOCK_PRIORITY LOW", "SET DEADLOCK_PRIORITY HIGH", "SET DEADLOCK_PRIORITY -10",
    "DECLARE @p INT = 3; SET DEADLOCK_PRIORITY @p", "SET DEADLOCK_PRIORITY NORMAL",
    "SET TRANSACTION ISOLATION LEVEL READ UNCOMMITTED", "SET TRANSACTION ISOLATION LEVEL READ COMMITTED",
    "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ", "SET TRANSACTION ISOLATION LEVEL SNAPSHOT",
    "SET TRANSACTION ISOLATION LEVEL SERIALIZABLE",
])
def test_set_options_scripts_carry_are_accepted(session: Session, script: str) -> None:
    assert session.run(script + "\nPRINT 'after'") == [Printed("after")]


@pytest.mark.parametrize(("script", "number"), [
    ("SET ANSI_NULLS OFF", 40517), ("SET QUOTED_IDENTIFIER OFF", 40517), ("SET ANSI_PADDING OFF", 40517),
    ("SET ANSI_WARNINGS OFF", 40517), ("SET CONCAT_NULL_YIELDS_NULL OFF", 40517),
    ("SET NUMERIC_ROUNDABORT ON", 40517), ("SET IMPLICIT_TRANSACTIONS ON", 40517), ("SET ROWCOUNT 10", 40517),
    ("SET DATEFORMAT dmy", 40517), ("SET FMTONLY ON", 40517), ("SET NOCONT ON", 195), ("SET XACT_ABORTED ON", 195),
    ("SET LOCK_TIMEOUT -2", 102), ("SET DEADLOCK_PRIORITY 11", 102), ("SET DEADLOCK_PRIORITY SOMETIMES", 102),
    ("SET TRANSACTION ISOLATION LEVEL CHAOS", 102), ("SET NOCOUNT MAYBE", 102),
])
def test_set_options_that_would_change_meaning_are_refused(session: Session, script: str, number: int) -> None:
    assert failure(session, script).number == number


def test_set_lock_timeout_is_kept_for_the_session(session: Session) -> None:
    assert value(session, "SELECT @@LOCK_TIMEOUT") == -1
    ok(session, "SET LOCK_TIMEOUT 1800")
    assert value(session, "SELECT @@LOCK_TIMEOUT") == 1800


def test_ddl_in_a_transaction_rolls_back_with_it(db: broker.Broker, session: Session) -> None:
    assert rows(session, "BEGIN TRAN\nCREATE QUEUE q\nSELECT COUNT(*) FROM sys.service_queues WHERE name = 'q'\n"
                         "ROLLBACK") == ((1,),)
    assert "q" not in names(db, "sys.service_queues")


@pytest.mark.parametrize(("statement", "number"), [
    ("COMMIT", 3902), ("COMMIT TRANSACTION", 3902), ("ROLLBACK", 3903), ("ROLLBACK TRAN", 3903),
])
def test_commit_or_rollback_without_begin(session: Session, statement: str, number: int) -> None:
    assert failure(session, statement).number == number


def test_error_lines_count_from_the_start_of_the_script(chat: broker.Broker, session: Session) -> None:
    outputs = session.run("PRINT 1\n"                                      # 1
                          "GO\n"                                           # 2
                          "\n"                                             # 3
                          "-- a comment\n"                                 # 4
                          "DECLARE @h UNIQUEIDENTIFIER = NEWID()\n"        # 5
                          "SEND ON CONVERSATION @h (N'x')\n"               # 6
                          "GO\n"                                           # 7
                          "CREATE CONTRACT c\n"                            # 8
                          f"    ({REQUEST} SENT BY TARGET)\n"              # 9
                          "GO\n"                                           # 10
                          "THROW 50000, 'last', 1")                        # 11
    assert [(output.error.number, output.error.line) for output in outputs if isinstance(output, Failed)] == [
        (8426, 6), (8492, 8), (50000, 11)]


def test_a_syntax_error_runs_nothing_of_its_batch(db: broker.Broker, session: Session) -> None:
    outputs = session.run("CREATE QUEUE a\n"          # 1
                          "GO\n"                      # 2
                          "CREATE QUEUE b\n"          # 3
                          "PRINT 'not printed'\n"     # 4
                          "CREATE QUEUE c WITH STATUS = = OFF\n"  # 5
                          "CREATE QUEUE d\n"          # 6
                          "GO\n"                      # 7
                          "CREATE QUEUE e")           # 8
    [failed] = outputs
    assert isinstance(failed, Failed) and (failed.error.number, failed.error.line) == (102, 5)
    assert names(db, "sys.service_queues") == {"a", "e"}


def test_a_keyword_out_of_place_is_a_syntax_error(db: broker.Broker, session: Session) -> None:
    outputs = session.run("CREATE QUEUE a\nSELECT FROM\nGO\nCREATE QUEUE b")
    [failed] = outputs
    assert isinstance(failed, Failed) and failed.error.number in (102, 156) and failed.error.line == 2
    assert names(db, "sys.service_queues") == {"b"}


def test_go_with_a_count_repeats_its_batch(session: Session) -> None:
    assert printed(ok(session, "PRINT 'again'\nGO 3\nPRINT 'once'")) == ["again"] * 3 + ["once"]
