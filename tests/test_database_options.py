"""ALTER DATABASE's broker options (spec 1.10, 12.5 item 20): NEW_BROKER,
ERROR_BROKER_CONVERSATIONS, HONOR_BROKER_PRIORITY, and ``db.service_broker_guid``."""

from __future__ import annotations

import uuid

import pytest
from click.testing import CliRunner, Result
from support import (
    CONTRACT,
    INITIATOR_QUEUE,
    INITIATOR_SERVICE,
    REQUEST,
    TARGET_QUEUE,
    TARGET_SERVICE,
    endpoint,
    open_dialog,
    target_handle,
)

import broker
from broker.ddl import database_options
from cli.main import cli

RESTORED = (-9719, "The database for this conversation endpoint is attached or restored.")


def database_row(db: broker.Broker) -> dict[str, object]:
    [row] = db.catalog("sys.databases")
    return row


def state(db: broker.Broker, handle: uuid.UUID) -> str | None:
    row = endpoint(db, handle)
    return None if row is None else str(row["state"])


def errors_of(db: broker.Broker, queue: str, handle: uuid.UUID) -> list[tuple[int, str]]:
    """The (code, description) of every Error message queued for ``handle``."""
    return [broker.parse_error(m.message_body) for m in db.queue_rows(queue)
            if m.conversation_handle == handle and m.message_type_name == broker.ERROR]


def alter_database(db_url: str, *options: str, expect: int = 0) -> Result:
    result = CliRunner().invoke(cli, ["--db", db_url, "alter", "database", *options])
    assert result.exit_code == expect, (result.stdout, result.stderr)
    return result


# -- service_broker_guid -----------------------------------------------------------------


def test_the_guid_is_the_one_sys_databases_shows(db: broker.Broker) -> None:
    guid = db.service_broker_guid
    assert isinstance(guid, uuid.UUID)
    assert database_row(db)["service_broker_guid"] == guid


def test_the_guid_is_read_from_the_database_each_time(db: broker.Broker, db_url: str) -> None:
    other = broker.connect(db_url)
    try:
        before = other.service_broker_guid
        made = db.new_broker()
        assert other.service_broker_guid == made != before
    finally:
        other.dispose()


# -- NEW_BROKER ----------------------------------------------------------------------------


def test_new_broker_removes_every_conversation_and_tells_nobody(tutorial: broker.Broker) -> None:
    db = tutorial
    db.alter_queue(TARGET_QUEUE, retention=True)
    delivered = open_dialog(db, b"<delivered/>")
    reply_from = target_handle(db, delivered)
    with db.transaction() as tx:  # a timer, and a message the initiator received
        tx.begin_conversation_timer(delivered, timeout=3600)
        tx.send(reply_from, "//AWDB/1DBSample/ReplyMessage", b"<reply/>")
    with db.transaction() as tx:
        tx.begin_dialog(INITIATOR_SERVICE, TARGET_SERVICE, CONTRACT)  # SO: nothing sent yet
    db.set_broker_enabled(False)
    held = open_dialog(db, b"<held/>")  # waits in the transmission queue
    before = db.service_broker_guid
    assert db.catalog("sys.transmission_queue") and db.queue_rows(TARGET_QUEUE) and db.queue_rows(INITIATOR_QUEUE)

    made = db.new_broker()

    assert made != before and db.service_broker_guid == made
    assert database_row(db)["service_broker_guid"] == made
    assert database_row(db)["is_broker_enabled"] == 1
    for view in ("sys.conversation_endpoints", "sys.conversation_groups", "sys.transmission_queue"):
        assert db.catalog(view) == [], view
    assert db.queue_rows(TARGET_QUEUE) == [] and db.queue_rows(INITIATOR_QUEUE) == []  # no EndDialog, no Error
    with db.transaction() as tx:
        for handle in (delivered, held):
            with pytest.raises(broker.ConversationNotFoundError):
                tx.send(handle, REQUEST, b"<late/>")
    # The objects stay and the broker delivers again, under its new guid.
    fresh = open_dialog(db, b"<fresh/>")
    assert [m.message_body for m in db.queue_rows(TARGET_QUEUE)] == [b"<fresh/>"]
    assert endpoint(db, fresh)["far_broker_instance"] == str(made)  # type: ignore[index]


def test_new_broker_in_a_failed_transaction_changes_nothing(tutorial: broker.Broker) -> None:
    db = tutorial
    handle = open_dialog(db)
    before = db.service_broker_guid

    class Abort(Exception):
        pass

    with pytest.raises(Abort), db.transaction() as tx:
        tx.run(database_options.new_broker)
        raise Abort
    assert db.service_broker_guid == before
    assert state(db, handle) == "CO" and len(db.queue_rows(TARGET_QUEUE)) == 1


# -- ERROR_BROKER_CONVERSATIONS ----------------------------------------------------------


def test_error_broker_conversations_ends_every_open_dialog_with_error_9719(tutorial: broker.Broker) -> None:
    db = tutorial
    conversing = open_dialog(db, b"<unread/>")  # both sides CO, the request still queued
    with db.transaction() as tx:
        started = tx.begin_dialog(INITIATOR_SERVICE, TARGET_SERVICE, CONTRACT)  # SO
    disconnected = open_dialog(db)
    with db.transaction() as tx:  # the target ends: the initiator is DI, the target closed
        tx.end_conversation(target_handle(db, disconnected))
    errored = open_dialog(db)
    with db.transaction() as tx:  # the target ends with an error: the initiator is ER
        tx.end_conversation(target_handle(db, errored), error=7, description="broken")
    ending = open_dialog(db)
    ending_target = target_handle(db, ending)
    db.set_broker_enabled(False)
    held = open_dialog(db, b"<never sent/>")  # waits in the transmission queue
    with db.transaction() as tx:  # DO: its EndDialog waits in the transmission queue
        tx.end_conversation(ending)
    assert state(db, ending) == "DO" and len(db.catalog("sys.transmission_queue")) == 2
    guid = db.service_broker_guid

    db.error_broker_conversations()

    assert db.service_broker_guid == guid
    assert database_row(db)["is_broker_enabled"] == 1
    assert db.catalog("sys.transmission_queue") == []  # nothing untransmitted is sent now
    conversing_target = target_handle(db, conversing)
    for handle, queue in ((conversing, INITIATOR_QUEUE), (conversing_target, TARGET_QUEUE),
                          (started, INITIATOR_QUEUE), (disconnected, INITIATOR_QUEUE), (held, INITIATOR_QUEUE),
                          (ending_target, TARGET_QUEUE)):
        assert state(db, handle) == "ER", handle
        assert errors_of(db, queue, handle) == [RESTORED], handle
    assert errors_of(db, INITIATOR_QUEUE, errored) == [(7, "broken")]  # ER already: no second Error
    assert state(db, ending) is None  # DO can no longer be acknowledged: closed (initiators go)
    # The request still queued stays, behind the Error in receive order.
    with db.transaction() as tx:
        received = tx.receive(TARGET_QUEUE, conversation_handle=conversing_target)
        assert [m.message_type_name for m in received] == [broker.ERROR, REQUEST]
        with pytest.raises(broker.BrokerError) as refused:
            tx.send(conversing_target, "//AWDB/1DBSample/ReplyMessage", b"<reply/>")
        assert refused.value.number == 8429
        tx.end_conversation(conversing_target)
    assert state(db, conversing_target) == "CD"


def test_error_broker_conversations_holds_the_error_of_a_queue_that_is_off(tutorial: broker.Broker) -> None:
    db = tutorial
    handle = open_dialog(db)
    db.alter_queue(INITIATOR_QUEUE, status=False)
    db.error_broker_conversations()
    assert state(db, handle) == "ER"
    [parked] = db.catalog("sys.transmission_queue")  # a broker message for the initiator's own queue
    assert parked["is_conversation_error"] == 1
    db.alter_queue(INITIATOR_QUEUE, status=True)
    assert db.catalog("sys.transmission_queue") == []
    assert errors_of(db, INITIATOR_QUEUE, handle) == [RESTORED]


# -- HONOR_BROKER_PRIORITY -----------------------------------------------------------------


def test_honor_broker_priority_is_stored_and_shown(db: broker.Broker, db_url: str) -> None:
    assert database_row(db)["is_honor_broker_priority_on"] == 0
    db.set_honor_broker_priority(True)
    other = broker.connect(db_url)
    try:
        assert database_row(other)["is_honor_broker_priority_on"] == 1
        db.set_honor_broker_priority(False)
        assert database_row(other)["is_honor_broker_priority_on"] == 0
    finally:
        other.dispose()


@pytest.mark.parametrize("value", ["ON", None, 2, 1.0])
def test_options_take_only_on_or_off(db: broker.Broker, value: object) -> None:
    for verb in (db.set_honor_broker_priority, db.set_broker_enabled):
        with pytest.raises(broker.ArgumentTypeError) as refused:
            verb(value)  # type: ignore[arg-type]
        assert refused.value.number == 206
    assert database_row(db)["is_honor_broker_priority_on"] == 0


# -- the command line ----------------------------------------------------------------------


def test_cli_alter_database(tutorial: broker.Broker, db_url: str) -> None:
    db = tutorial
    handle = open_dialog(db)
    before = db.service_broker_guid

    assert alter_database(db_url, "--disable-broker").stdout == "altered database: DISABLE_BROKER\n"
    assert database_row(db)["is_broker_enabled"] == 0
    assert alter_database(db_url, "--enable-broker", "--honor-broker-priority", "on").stdout == (
        "altered database: ENABLE_BROKER\naltered database: HONOR_BROKER_PRIORITY ON\n")
    assert (database_row(db)["is_broker_enabled"], database_row(db)["is_honor_broker_priority_on"]) == (1, 1)
    alter_database(db_url, "--error-broker-conversations")
    assert state(db, handle) == "ER"
    made = alter_database(db_url, "--new-broker").stdout
    assert made == f"altered database: NEW_BROKER (service_broker_guid {db.service_broker_guid})\n"
    assert db.service_broker_guid != before and db.catalog("sys.conversation_endpoints") == []


@pytest.mark.parametrize("options", [(), ("--new-broker", "--enable-broker"), ("--honor-broker-priority", "maybe")])
def test_cli_alter_database_usage_errors(db: broker.Broker, db_url: str, options: tuple[str, ...]) -> None:
    before = db.service_broker_guid
    result = alter_database(db_url, *options, expect=2)
    assert len(result.stderr.splitlines()) == 1 and result.stderr.startswith("error: ")
    assert db.service_broker_guid == before
