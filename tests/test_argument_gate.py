"""The classes of hostile input issue 18 found, one test each, on every backend.

Values past a column's range, wrong types, Error descriptions XML cannot carry, names
with NUL or longer than PostgreSQL's identifiers, and database failures: each gives a
numbered ``BrokerError`` before any SQL runs, and nothing is written.
"""

from __future__ import annotations

import ast
import math
import time
import uuid
from pathlib import Path

import pytest
from support import (
    CONTRACT,
    INITIATOR_QUEUE,
    REQUEST,
    TARGET_QUEUE,
    TARGET_SERVICE,
    endpoint,
    open_dialog,
    target_handle,
)

import broker
from broker.arguments import BIGINT_MAX, INT_MAX

ROOT = Path(__file__).resolve().parent.parent


def number_of(call: object) -> int:
    assert callable(call)
    with pytest.raises(broker.BrokerError) as info:
        call()
    return info.value.number


# -- 3. values past a column's range -------------------------------------------------------


@pytest.mark.parametrize(("top", "number"), [(BIGINT_MAX + 1, 8115), (2**100, 8115), (-1, 1014), (1.5, 1060),
                                             (True, 206), ("5", 206)])
def test_receive_top_outside_bigint_is_numbered(tutorial: broker.Broker, top: object, number: int) -> None:
    open_dialog(tutorial)
    with tutorial.transaction() as tx:
        assert number_of(lambda: tx.receive(TARGET_QUEUE, top=top)) == number
        assert len(tx.receive(TARGET_QUEUE, top=BIGINT_MAX)) == 1  # the largest bigint is fine


@pytest.mark.parametrize(("timeout", "number"), [(1e12, 8115), (1e30, 8115), (2**63, 8115), (INT_MAX + 1, 8115),
                                                 (math.nan, 59001), (math.inf, 59001), (-math.inf, 59001),
                                                 (-1, 59002), (None, 206), ("5", 206)])
def test_timer_timeout_outside_int_is_numbered(tutorial: broker.Broker, timeout: object, number: int) -> None:
    handle = open_dialog(tutorial)
    unset = endpoint(tutorial, handle)["dialog_timer"]  # type: ignore[index]
    with tutorial.transaction() as tx:
        assert number_of(lambda: tx.begin_conversation_timer(handle, timeout)) == number
    assert endpoint(tutorial, handle)["dialog_timer"] == unset  # type: ignore[index]


@pytest.mark.parametrize("timeout", [math.nan, math.inf, -math.inf, -2, -0.5, 1e30, "1", True])
def test_a_waitfor_timeout_that_is_not_a_time_fails_at_once(tutorial: broker.Broker, timeout: object) -> None:
    started = time.monotonic()
    with tutorial.transaction() as tx:
        with pytest.raises(broker.BrokerError) as info:
            tx.receive(INITIATOR_QUEUE, timeout=timeout)  # an empty queue: a real wait would not return
        with pytest.raises(broker.BrokerError):
            tx.get_conversation_group(INITIATOR_QUEUE, timeout=timeout)
    assert info.value.number in (59001, 59002, 8115, 206)
    assert time.monotonic() - started < 5


@pytest.mark.parametrize(("code", "number"), [(2**31, 8115), (2**63, 8115), (0, 8419), (-5, 8419),
                                              (1.0, 206), (True, 206)])
def test_failure_code_is_a_positive_int(tutorial: broker.Broker, code: object, number: int) -> None:
    target = target_handle(tutorial, open_dialog(tutorial))
    with tutorial.transaction() as tx:
        assert number_of(lambda: tx.end_conversation(target, error=code, description="x")) == number
    assert endpoint(tutorial, target)["state"] == "CO"  # type: ignore[index]
    with tutorial.transaction() as tx:
        tx.end_conversation(target, error=INT_MAX, description="the largest int is fine")


@pytest.mark.parametrize("lifetime", [0, -1, INT_MAX + 1, 2**63])
def test_lifetime_outside_int_is_8411(tutorial: broker.Broker, lifetime: int) -> None:
    with tutorial.transaction() as tx:
        assert number_of(lambda: tx.begin_dialog("//AWDB/1DBSample/InitiatorService", TARGET_SERVICE, CONTRACT,
                                                 lifetime=lifetime)) == 8411


# -- 4. wrong types reach no internals ------------------------------------------------------


@pytest.mark.parametrize("queue", [None, 5, b"TargetQueue1DB", ["TargetQueue1DB"], object()])
def test_a_queue_that_is_not_a_name_is_206(tutorial: broker.Broker, queue: object) -> None:
    with tutorial.transaction() as tx:
        with pytest.raises(TypeError) as info:
            tx.receive(queue)  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            tx.get_conversation_group(queue)  # type: ignore[arg-type]
    assert isinstance(info.value, broker.BrokerError) and info.value.number == 206
    with pytest.raises(TypeError):
        tutorial.queue_rows(queue)  # type: ignore[arg-type]


@pytest.mark.parametrize("handle", [5, 1.5, b"x", object(), [5]])
def test_a_handle_that_is_not_a_uniqueidentifier_is_206(tutorial: broker.Broker, handle: object) -> None:
    with tutorial.transaction() as tx:
        assert number_of(lambda: tx.send(handle, REQUEST, b"<x/>")) == 206
        assert number_of(lambda: tx.end_conversation(handle)) in (206, 8426)


def test_a_handle_given_as_text_still_works(tutorial: broker.Broker) -> None:
    handle = open_dialog(tutorial)
    with tutorial.transaction() as tx:
        tx.send(str(handle), REQUEST, b"<again/>")
        assert number_of(lambda: tx.send(str(handle) + "\x00", REQUEST, b"<x/>")) == 8426


def test_unknown_options_are_type_errors(tutorial: broker.Broker) -> None:
    with pytest.raises(TypeError) as info:
        tutorial.alter_queue(TARGET_QUEUE, stauts=False)
    assert isinstance(info.value, broker.BrokerError) and info.value.number == 59003
    assert "stauts" in info.value.message
    with pytest.raises(TypeError):
        tutorial.create_queue("Q2", activation={"procedure": "m:f"})
    assert tutorial.catalog("sys.service_queues", name="Q2") == []


# -- 5. an Error message its receiver can read -----------------------------------------------


@pytest.mark.parametrize("description", ["a\x00b", "bell\x07", "\ufffe", "\ud800"])
def test_a_description_xml_cannot_carry_is_refused_and_nothing_is_sent(
    tutorial: broker.Broker, description: str
) -> None:
    initiator = open_dialog(tutorial)
    target = target_handle(tutorial, initiator)
    with tutorial.transaction() as tx:
        assert number_of(lambda: tx.end_conversation(target, error=50, description=description)) == 9420
    assert tutorial.queue_rows(INITIATOR_QUEUE) == []
    assert endpoint(tutorial, target)["state"] == "CO"  # type: ignore[index]


@pytest.mark.parametrize("description", ["tab\there", "two\r\nlines\r", "  spaced  ", "é😀", "<&>\"'", "x" * 3000])
def test_every_accepted_description_reaches_the_far_side_unchanged(tutorial: broker.Broker, description: str) -> None:
    initiator = open_dialog(tutorial)
    with tutorial.transaction() as tx:
        tx.end_conversation(target_handle(tutorial, initiator), error=50, description=description)
    [message] = tutorial.queue_rows(INITIATOR_QUEUE)
    assert broker.parse_error(message.message_body) == (50, description)


def test_a_broker_error_naming_a_service_with_a_control_character_still_parses(tutorial: broker.Broker) -> None:
    odd = "//odd\x01service"
    tutorial.create_queue("OddQueue")
    tutorial.create_service(odd, "OddQueue")  # takes no contract: the dialog errors with -8408
    with tutorial.transaction() as tx:
        handle = tx.begin_dialog("//AWDB/1DBSample/InitiatorService", odd, CONTRACT)
        tx.send(handle, REQUEST, b"<x/>")
    [message] = tutorial.queue_rows(INITIATOR_QUEUE)
    code, description = broker.parse_error(message.message_body)
    assert code == -8408 and "//odd\ufffdservice" in description


# -- 7. no error without a number ------------------------------------------------------------


def test_no_broker_error_is_raised_without_a_number() -> None:
    unnumbered = []
    for path in [*ROOT.joinpath("broker").rglob("*.py"), *ROOT.joinpath("cli").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")).endswith(
                    "Error") and node.args and isinstance(node.args[0], ast.Constant) and node.args[0].value == 0):
                unnumbered.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert unnumbered == []


# -- 8. names: one rule on every backend -----------------------------------------------------


@pytest.mark.parametrize("kind", ["message_type", "contract", "service", "queue", "broker_priority",
                                  "xml_schema_collection"])
@pytest.mark.parametrize(("name", "number"), [("a\x00b", 102), ("", 1038), ("n" * 129, 103), ("\ud800", 102),
                                              (5, 206)])
def test_object_names_follow_sysname_on_every_backend(db: broker.Broker, kind: str, name: object,
                                                      number: int) -> None:
    create = {
        "message_type": lambda: db.create_message_type(name),  # type: ignore[arg-type]
        "contract": lambda: db.create_contract(name, {"DEFAULT": "ANY"}),  # type: ignore[arg-type]
        "service": lambda: db.create_service(name, "Q"),  # type: ignore[arg-type]
        "queue": lambda: db.create_queue(name),  # type: ignore[arg-type]
        "broker_priority": lambda: db.create_broker_priority(name),  # type: ignore[arg-type]
        "xml_schema_collection": lambda: db.create_xml_schema_collection(  # type: ignore[arg-type]
            name, '<xs:schema xmlns:xs="http://www.w3.org/2001/XMLSchema"/>'),
    }[kind]
    db.create_queue("Q")
    assert number_of(create) == number
    assert number_of(lambda: getattr(db, f"drop_{kind}")(name)) in (number, 3701) if kind != "xml_schema_collection" \
        else True


def test_queue_names_that_share_postgres_identifier_bytes_both_work(db: broker.Broker) -> None:
    first, second = "q" * 63 + "_first", "q" * 63 + "_second"
    for name in (first, second):
        db.create_queue(name)
        db.create_service(f"//svc/{name[-6:]}", name, ["DEFAULT"])
    with db.transaction() as tx:
        for name in (first, second):
            handle = tx.begin_dialog(f"//svc/{name[-6:]}", f"//svc/{name[-6:]}")
            tx.send(handle, "DEFAULT", name.encode())
    for name in (first, second):
        [row] = db.queue_rows(name)
        assert row.message_body == name.encode()
        assert db.queue_counts(name.upper()) == {1: 1}  # case-insensitive, like SQL Server
    assert number_of(lambda: db.create_queue(first.upper())) == 2714
    with db.transaction() as tx:
        assert [m.message_body for m in tx.receive(second)] == [second.encode()]
    db.drop_service("//svc/_first")
    db.drop_queue(first)
    assert [m.message_body for m in db.queue_rows(second)] == []
    with pytest.raises(broker.BrokerError):
        db.queue_rows(first)


def test_a_queue_named_with_many_bytes_per_character_works(db: broker.Broker) -> None:
    name = "é" * 40 + "😀" * 20  # 160 bytes of UTF-8 in 60 characters
    db.create_queue(name)
    assert db.queue_rows(name) == []
    assert [q["name"] for q in db.catalog("sys.service_queues") if q["name"] == name] == [name]
    db.drop_queue(name)


def test_a_queue_is_found_with_its_schema_and_brackets(tutorial: broker.Broker) -> None:
    open_dialog(tutorial)
    with tutorial.transaction() as tx:
        assert len(tx.receive(f"dbo.[{TARGET_QUEUE}]")) == 1


# -- database failures -----------------------------------------------------------------------


def test_a_statement_the_database_refuses_is_numbered_and_dooms_the_transaction(tutorial: broker.Broker) -> None:
    handle = open_dialog(tutorial)
    with pytest.raises(broker.BrokerError) as info:
        with tutorial.transaction() as tx:
            tx.send(handle, REQUEST, b"<first/>")
            with pytest.raises(broker.BrokerError) as refused:
                tx.query("SELECT no_such_column FROM no_such_table")
            assert refused.value.number == 59020
            tx.send(handle, REQUEST, b"<second/>")
    assert info.value.number == 3930
    assert len(tutorial.queue_rows(TARGET_QUEUE)) == 1  # the doomed transaction's SEND is gone


def test_a_catalog_filter_of_the_wrong_type_is_numbered(tutorial: broker.Broker) -> None:
    assert number_of(lambda: tutorial.catalog("sys.conversation_endpoints", conversation_handle="nope")) == 8169
    assert number_of(lambda: tutorial.catalog("sys.conversation_endpoints", conversation_handle=5)) == 206
    assert number_of(lambda: tutorial.catalog("sys.conversation_endpoints", lifetime="tomorrow")) == 206
    assert number_of(lambda: tutorial.catalog("sys.services", name=object())) == 206
    assert number_of(lambda: tutorial.catalog(5)) == 206  # type: ignore[arg-type]
    assert tutorial.catalog("sys.conversation_endpoints", conversation_handle=str(uuid.uuid4())) == []


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
def test_a_lock_wait_that_runs_out_in_a_prepared_statement_is_1222(db_url: str) -> None:
    from sqlalchemy import create_engine, text

    db = broker.connect(db_url, connect_args={"options": "-c lock_timeout=200"})
    try:
        db.create_queue("T")
        db.create_service("//t", "T", ["DEFAULT"])
        db.create_queue("I")
        db.create_service("//i", "I")
        with db.transaction() as tx:
            handle = tx.begin_dialog("//i", "//t")
        other = create_engine(db_url)
        with other.connect() as holder:  # another session holds the endpoint's row lock
            holder.execute(text("SELECT 1 FROM sb_conversation_endpoints WHERE conversation_handle = :h FOR UPDATE"),
                           {"h": handle})
            with pytest.raises(broker.BrokerError) as info:
                with db.transaction() as tx:
                    tx.send(handle, body=b"x")  # runs on the driver's cursor (a prepared statement)
            holder.rollback()
        other.dispose()
        assert info.value.number == 1222
    finally:
        db.dispose()


def test_a_null_where_a_value_is_needed_is_named_null(tutorial: broker.Broker) -> None:
    handle = open_dialog(tutorial)
    with tutorial.transaction() as tx:
        with pytest.raises(broker.BrokerError) as info:
            tx.begin_conversation_timer(handle, None)
    assert info.value.number == 206 and "NULL is incompatible" in info.value.message
