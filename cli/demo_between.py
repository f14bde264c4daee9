"""``broker demo --between-databases``: the tutorial of spec 12.2, told step by step.

Microsoft's tutorial "Completing a Conversation Between Databases", with its names: two
databases of one instance, TargetDB and InitiatorDB (SQLite files in one folder, with
the instance catalog next to them), each with the same message types and contract;
the initiator's service in one, the target's in the other. The request goes from
InitiatorDB to TargetDB and the reply comes back, moved by the instance's runtime
(its transmitter), which runs in this process from step 6 on. A second run first drops
the objects of the first.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from pathlib import Path

import click

import broker
from cli.demo import cleanup_conversations, drop_earlier_run, more, receive_one, reply_and_end, say, show_queue, text
from cli.render import plural

REQUEST_TYPE = "//BothDB/2DBSample/RequestMessage"
REPLY_TYPE = "//BothDB/2DBSample/ReplyMessage"
CONTRACT = "//BothDB/2DBSample/SimpleContract"
TARGET_SERVICE = "//TgtDB/2DBSample/TargetService"
INITIATOR_SERVICE = "//InitDB/2DBSample/InitiatorService"
TARGET_QUEUE = "TargetQueue2DB"
INITIATOR_QUEUE = "InitiatorQueue2DB"
TARGET_DB = "TargetDB"
INITIATOR_DB = "InitiatorDB"
INSTANCE_FILE = "instance.db"
REQUEST_BODY = "<RequestMsg>Message for Target service.</RequestMsg>"
DELIVERY_SECONDS = 30.0  # how long the demo waits for the runtime to move a message
CHECK_SECONDS = 0.02

# What an earlier run left in each database, in an order in which each drop is allowed.
_TARGET_OBJECTS = (
    ("sys.services", "drop_service", (TARGET_SERVICE,)),
    ("sys.service_queues", "drop_queue", (TARGET_QUEUE,)),
    ("sys.service_contracts", "drop_contract", (CONTRACT,)),
    ("sys.service_message_types", "drop_message_type", (REQUEST_TYPE, REPLY_TYPE)),
)
_INITIATOR_OBJECTS = (
    ("sys.services", "drop_service", (INITIATOR_SERVICE,)),
    ("sys.service_queues", "drop_queue", (INITIATOR_QUEUE,)),
    *_TARGET_OBJECTS[2:],
)


def sqlite_url(folder: Path, file: str) -> str:
    """``sqlite:///`` URL of ``file`` in ``folder`` (relative when the folder is ``.``)."""
    return f"sqlite:///{file if folder == Path() else folder / file}"


def play(folder: Path) -> None:
    """The whole tutorial, in the SQLite files of ``folder``."""
    instance_url = sqlite_url(folder, INSTANCE_FILE)
    click.echo(f'Tutorial "Completing a Conversation Between Databases" in the instance {instance_url}\n')
    inst = broker.instance(instance_url)
    try:
        target, initiator = _open_databases(inst, folder)
        _create_target_objects(target)
        _create_initiator_objects(initiator)
        _show_routes(target, initiator)
        handle, conversation_id = _initiator_sends_request(initiator)
        with inst.runtime():
            _runtime_delivers_request(target, initiator, handle)
            _target_replies_and_ends(target, initiator, conversation_id)
            _initiator_receives_and_ends(target, initiator, conversation_id)
        more("Stopped the instance's runtime.")
    finally:
        inst.dispose()

    click.echo("\nDone. The databases and their objects stay in place; look at them with")
    for command in (
        "status",
        "database list",
        f"--database {TARGET_DB} show endpoints",
        f"--database {INITIATOR_DB} show routes",
    ):
        click.echo(f"  broker --instance {instance_url} {command}")
    click.echo("Running the demo again starts over.")


def _open_databases(inst: broker.Instance, folder: Path) -> tuple[broker.Broker, broker.Broker]:
    """Step 1: TargetDB and InitiatorDB in the instance, brokers enabled, earlier runs undone."""
    members = inst.databases
    opened = []
    for name in (TARGET_DB, INITIATOR_DB):
        path = (folder / f"{name}.db").resolve()
        current = members.get(name)
        if current is not None and Path(current.engine.url.database or "").resolve() != path:
            inst.remove_database(name)  # a member of that name elsewhere: the demo's files replace it
            current = None
        database = current if current is not None else inst.add_database(name, sqlite_url(folder, f"{name}.db"))
        database.set_broker_enabled(True)
        opened.append(database)
    target, initiator = opened
    where = "the current folder" if folder == Path() else folder
    say(1, f"Added two databases to the instance: {TARGET_DB} and {INITIATOR_DB}, SQLite files in {where}.")
    rows = {row["name"]: row for row in inst.catalog("sys.databases")}
    for name in (TARGET_DB, INITIATOR_DB):
        row = rows[name]
        more(f"sys.databases: {name} is_broker_enabled = {int(row['is_broker_enabled'])}, "
             f"service_broker_guid {row['service_broker_guid']}")
    more("Each database has a broker instance of its own: routing tells them apart by it.")
    earlier = [
        drop_earlier_run(target, _TARGET_OBJECTS, cleanup_conversations(target, TARGET_SERVICE)),
        drop_earlier_run(initiator, _INITIATOR_OBJECTS, cleanup_conversations(initiator, INITIATOR_SERVICE)),
    ]
    if any(earlier):
        more("Dropped the objects an earlier run of the demo had left.")
    return target, initiator


def _create_message_types_and_contract(db: broker.Broker) -> None:
    for name in (REQUEST_TYPE, REPLY_TYPE):
        db.create_message_type(name, validation="WELL_FORMED_XML")
    db.create_contract(CONTRACT, {REQUEST_TYPE: "INITIATOR", REPLY_TYPE: "TARGET"})


def _create_target_objects(target: broker.Broker) -> None:
    _create_message_types_and_contract(target)
    target.create_queue(TARGET_QUEUE)
    target.create_service(TARGET_SERVICE, TARGET_QUEUE, contracts=[CONTRACT])
    say(2, f"In {TARGET_DB}: message types {REQUEST_TYPE} and {REPLY_TYPE}")
    more(f"(well-formed XML), contract {CONTRACT} (the request SENT BY INITIATOR,")
    more(f"the reply SENT BY TARGET), queue {TARGET_QUEUE} and service {TARGET_SERVICE}")
    more("on it, the target of the contract.")


def _create_initiator_objects(initiator: broker.Broker) -> None:
    _create_message_types_and_contract(initiator)
    initiator.create_queue(INITIATOR_QUEUE)
    initiator.create_service(INITIATOR_SERVICE, INITIATOR_QUEUE)
    say(3, f"In {INITIATOR_DB}: the same message types and contract (each database needs its own),")
    more(f"queue {INITIATOR_QUEUE} and service {INITIATOR_SERVICE} on it")
    more("(no contract: it can only initiate).")


def _show_routes(target: broker.Broker, initiator: broker.Broker) -> None:
    """Step 4: no route to create; AutoCreatedLocal leads to the other database."""
    say(4, "No route to create: each database's sys.routes holds only")
    for name, db in ((TARGET_DB, target), (INITIATOR_DB, initiator)):
        routes = ", ".join(f"{r['name']} (ADDRESS = {r['address']})" for r in db.catalog("sys.routes"))
        more(f"  {name}: {routes}")
    more("A LOCAL route with no service name matches every service: a message goes to the")
    more("database of the instance that has its target service.")


def _initiator_sends_request(initiator: broker.Broker) -> tuple[uuid.UUID, uuid.UUID]:
    """Step 5: BEGIN DIALOG and SEND in InitiatorDB; the request waits for the transmitter."""
    with initiator.transaction() as tx:
        handle = tx.begin_dialog(INITIATOR_SERVICE, TARGET_SERVICE, CONTRACT, encryption=False)
        tx.send(handle, message_type=REQUEST_TYPE, body=REQUEST_BODY.encode())
    [endpoint] = initiator.catalog("sys.conversation_endpoints", conversation_handle=handle)
    conversation_id: uuid.UUID = endpoint["conversation_id"]
    say(5, f"In {INITIATOR_DB}: began a dialog from {INITIATOR_SERVICE}")
    more(f"to {TARGET_SERVICE} (ENCRYPTION = OFF):")
    more(f"handle {handle}, conversation id {conversation_id}.")
    more(f"Sent the request and committed: {REQUEST_BODY}")
    waiting = initiator.catalog("sys.transmission_queue")
    if len(waiting) != 1:
        raise click.ClickException(f"expected the request in {INITIATOR_DB}'s transmission queue, "
                                   f"found {plural(len(waiting), 'message')}")
    more(f"{INITIATOR_DB}'s sys.transmission_queue holds it, transmission_status:")
    more(f'  "{waiting[0]["transmission_status"]}"')
    more(f"{INITIATOR_DB} alone does not have the target service; the instance's transmitter")
    more("routes the message with every database of the instance, and it does not run yet.")
    with initiator.transaction() as tx:
        reason = tx.get_transmission_status(handle)
    more(f"GET_TRANSMISSION_STATUS says {'the same' if reason == waiting[0]['transmission_status'] else repr(reason)}.")
    _show_endpoints(initiator, handle)
    return handle, conversation_id


def _runtime_delivers_request(target: broker.Broker, initiator: broker.Broker, handle: uuid.UUID) -> None:
    """Step 6: the runtime runs; the request reaches TargetDB and is acknowledged."""
    say(6, "Started the instance's runtime in this process: every database's scheduler and")
    more("the transmitter, which moves messages between the databases as they commit.")
    _wait_for(
        f"deliver the request to {TARGET_DB}",
        lambda: target.queue_counts(TARGET_QUEUE).get(1) == 1 and not initiator.catalog("sys.transmission_queue"),
    )
    more(f"It delivered the request to {TARGET_DB} in one transaction there; once that committed,")
    more(f"the acknowledgement removed it from {INITIATOR_DB}'s transmission queue (now empty).")
    show_queue(target, TARGET_QUEUE)
    [endpoint] = initiator.catalog("sys.conversation_endpoints", conversation_handle=handle)
    same = endpoint["far_broker_instance"] == str(target.service_broker_guid)
    more(f"The initiator's far_broker_instance is now {endpoint['far_broker_instance']},")
    more(f"{TARGET_DB}'s service_broker_guid{'' if same else ' (NOT: something is wrong)'}: "
         "the first acknowledgement named it.")


def _target_replies_and_ends(target: broker.Broker, initiator: broker.Broker, conversation_id: uuid.UUID) -> None:
    """Step 7: TargetDB receives, replies and ends; the reply and EndDialog travel back."""
    with target.transaction() as tx:
        request = reply_and_end(tx, TARGET_QUEUE, REQUEST_TYPE, REPLY_TYPE)
    say(7, f"In {TARGET_DB}: received the request on the target's own handle {request.conversation_handle}:")
    more(text(request.message_body))
    more("Sent the reply, ended the target's side of the conversation and committed.")
    _wait_for(
        f"bring the reply and the EndDialog to {INITIATOR_DB}",
        lambda: sum(initiator.queue_counts(INITIATOR_QUEUE).values()) == 2
        and not target.catalog("sys.transmission_queue")
        and _state(target, conversation_id) == "CD",
    )
    more(f"The transmitter took both to {INITIATOR_DB}; its acknowledgement closed the target's side.")
    show_queue(initiator, INITIATOR_QUEUE)
    _show_both_endpoints(target, initiator, conversation_id)


def _initiator_receives_and_ends(target: broker.Broker, initiator: broker.Broker, conversation_id: uuid.UUID) -> None:
    """Step 8: InitiatorDB receives the reply and ends its side."""
    with initiator.transaction() as tx:
        reply = receive_one(tx, INITIATOR_QUEUE, REPLY_TYPE)
        tx.end_conversation(reply.conversation_handle)
    say(8, f"In {INITIATOR_DB}: received the reply on handle {reply.conversation_handle}:")
    more(text(reply.message_body))
    more("Ended the conversation and committed; END CONVERSATION discarded the EndDialog")
    more(f"and sent nothing: the target's side had ended. {INITIATOR_DB}'s transmission queue holds "
         f"{plural(len(initiator.catalog('sys.transmission_queue')), 'message')}.")
    show_queue(initiator, INITIATOR_QUEUE)
    _show_both_endpoints(target, initiator, conversation_id)


def _wait_for(what: str, condition: Callable[[], bool]) -> None:
    """Wait until the runtime has done ``what`` (``condition()`` holds), or fail."""
    deadline = time.monotonic() + DELIVERY_SECONDS
    while not condition():
        if time.monotonic() > deadline:
            raise click.ClickException(f"the runtime did not {what} within {DELIVERY_SECONDS:g} seconds")
        time.sleep(CHECK_SECONDS)


def _state(db: broker.Broker, conversation_id: uuid.UUID) -> str | None:
    rows = db.catalog("sys.conversation_endpoints", conversation_id=conversation_id)
    return str(rows[0]["state"]) if rows else None


def _describe(db: broker.Broker, conversation_id: uuid.UUID) -> str:
    rows = db.catalog("sys.conversation_endpoints", conversation_id=conversation_id)
    return f"{rows[0]['state']} ({rows[0]['state_desc']})" if rows else "endpoint gone"


def _show_endpoints(initiator: broker.Broker, handle: uuid.UUID) -> None:
    [endpoint] = initiator.catalog("sys.conversation_endpoints", conversation_handle=handle)
    far = endpoint["far_broker_instance"]
    more(f"sys.conversation_endpoints in {INITIATOR_DB}: initiator {endpoint['state']} ({endpoint['state_desc']}), "
         f"far_broker_instance {'not known yet' if far is None else far}.")


def _show_both_endpoints(target: broker.Broker, initiator: broker.Broker, conversation_id: uuid.UUID) -> None:
    more(f"sys.conversation_endpoints: initiator {_describe(initiator, conversation_id)} in {INITIATOR_DB}, "
         f"target {_describe(target, conversation_id)} in {TARGET_DB}.")
