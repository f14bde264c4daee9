"""``broker demo``: the request/reply tutorial of spec 12.1, told step by step.

Microsoft's tutorial "Completing a Conversation in a Single Database", with its names:
an initiator service sends a request, the target replies and ends the conversation,
the initiator receives the reply and ends its side. Each step says what the catalog
and the queues show afterwards. A second run first drops the objects of the first.
``--between-databases`` plays the next tutorial instead (``cli.demo_between``),
``--between-instances`` the one after it (``cli.demo_instances``).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path

import click
from click.core import ParameterSource

import broker
from cli.params import FilePath
from cli.render import plural
from cli.state import DEFAULT_URL, CliState

REQUEST_TYPE = "//AWDB/1DBSample/RequestMessage"
REPLY_TYPE = "//AWDB/1DBSample/ReplyMessage"
CONTRACT = "//AWDB/1DBSample/SampleContract"
TARGET_SERVICE = "//AWDB/1DBSample/TargetService"
INITIATOR_SERVICE = "//AWDB/1DBSample/InitiatorService"
TARGET_QUEUE = "TargetQueue1DB"
INITIATOR_QUEUE = "InitiatorQueue1DB"
REQUEST_BODY = "<RequestMsg>Message for Target service.</RequestMsg>"
REPLY_BODY = "<ReplyMsg>Message for Initiator service.</ReplyMsg>"
WAIT_SECONDS = 1  # the tutorial's WAITFOR (RECEIVE ...), TIMEOUT 1000

# What an earlier run left, in an order in which each drop is allowed.
_DEMO_OBJECTS = (
    ("sys.services", "drop_service", (TARGET_SERVICE, INITIATOR_SERVICE)),
    ("sys.service_queues", "drop_queue", (TARGET_QUEUE, INITIATOR_QUEUE)),
    ("sys.service_contracts", "drop_contract", (CONTRACT,)),
    ("sys.service_message_types", "drop_message_type", (REQUEST_TYPE, REPLY_TYPE)),
)


@click.command()
@click.option(
    "--between-databases",
    is_flag=True,
    help='Play "Completing a Conversation Between Databases": two databases of one instance.',
)
@click.option(
    "--between-instances",
    is_flag=True,
    help='Play "Completing a Conversation Between Instances": two instances, each run by a `broker run` process.',
)
@click.option(
    "--folder",
    type=FilePath(exists=True, file_okay=False, path_type=Path),
    help="With --between-databases or --between-instances: where the SQLite files go "
    "(default: the --db file's folder).",
)
@click.pass_context
def demo(ctx: click.Context, between_databases: bool, between_instances: bool, folder: Path | None) -> None:
    """Play the request/reply tutorial, step by step.

    Creates the tutorial's message types, contract, queues and services
    (//AWDB/1DBSample/...), sends a request, replies, and ends the conversation,
    showing the queues and sys.conversation_endpoints along the way. The objects
    stay afterwards for you to look at; running it again starts over.

    --between-databases plays the tutorial "Completing a Conversation Between
    Databases" instead (//BothDB/2DBSample/...): databases TargetDB and InitiatorDB in
    one instance, SQLite files TargetDB.db, InitiatorDB.db and the instance catalog
    instance.db in --folder (default: the folder of the --db file, or the current
    one). The instance's runtime runs in this process and carries the request and the
    reply between the two databases.

    --between-instances plays "Completing a Conversation Between Instances"
    (//BothDB/2InstSample/...): two instances on loopback, target-instance.db with
    database InstTargetDB and initiator-instance.db with InstInitiatorDB, in --folder
    (default as above). It makes a certificate for each instance's endpoint, creates
    the endpoints on free ports, the routes and the remote service bindings, then
    starts a `broker --instance URL run` process for each instance (their logs:
    target-run.log, initiator-run.log) and carries the conversation through them over
    TLS. The processes are stopped at the end, whatever happens.

    \b
    Example:
      broker demo
      broker --db sqlite:///tutorial.db demo
      broker demo --between-databases
      broker demo --between-databases --folder /tmp/tutorial
      broker demo --between-instances --folder /tmp/tutorial
    """
    state: CliState = ctx.obj
    if between_databases and between_instances:
        raise click.UsageError("give --between-databases or --between-instances, not both")
    if not (between_databases or between_instances):
        if ctx.get_parameter_source("folder") is ParameterSource.COMMANDLINE:
            raise click.UsageError("--folder goes with --between-databases or --between-instances")
        single_database(state)
        return
    if state.on_instance:
        raise click.UsageError(
            "demo --between-databases makes an instance of its own (instance.db in --folder): leave out --instance"
            if between_databases
            else "demo --between-instances makes two instances of its own (target-instance.db and "
            "initiator-instance.db in --folder): leave out --instance"
        )
    where = folder if folder is not None else _folder_of(state.url)
    if between_databases:
        from cli import demo_between

        demo_between.play(where)
    else:
        from cli import demo_instances

        demo_instances.play(where)


def _folder_of(url: str) -> Path:
    """The folder of a SQLite ``--db`` file; the current folder for any other database."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):
        return Path()
    if parsed.get_backend_name() != "sqlite" or not parsed.database or parsed.database.startswith("file:"):
        return Path()
    return Path(parsed.database).parent


def single_database(state: CliState) -> None:
    """The tutorial "Completing a Conversation in a Single Database" on the database."""
    db = state.db()
    shown_url = state.shown_url()
    click.echo(f'Tutorial "Completing a Conversation in a Single Database" on {shown_url}\n')
    _enable_broker(db)
    _create_objects(db)
    conversation_id = _initiator_sends_request(db)
    _target_replies_and_ends(db, conversation_id)
    _initiator_receives_and_ends(db, conversation_id)

    same_db = (
        " (with the same --instance and --database)" if state.on_instance
        else "" if state.url == DEFAULT_URL
        else " (with the same --db or BROKER_URL)"
    )
    click.echo(f"\nDone. The objects stay in place; look at them{same_db} with")
    for command in ("show services", "show endpoints", "status"):
        click.echo(f"  broker {command}")
    click.echo("Running the demo again starts over.")


def _enable_broker(db: broker.Broker) -> None:
    db.set_broker_enabled(True)
    enabled = db.catalog("sys.databases")[0]["is_broker_enabled"]
    say(1, f"Enabled Service Broker: sys.databases.is_broker_enabled = {int(enabled)}.")
    if drop_earlier_run(db):
        more("Dropped the objects an earlier run of the demo had left.")


def _create_objects(db: broker.Broker) -> None:
    for name in (REQUEST_TYPE, REPLY_TYPE):
        db.create_message_type(name, validation="WELL_FORMED_XML")
    say(2, "Created two message types whose bodies must be well-formed XML:")
    more(f"{REQUEST_TYPE} and {REPLY_TYPE}.")

    db.create_contract(CONTRACT, {REQUEST_TYPE: "INITIATOR", REPLY_TYPE: "TARGET"})
    say(3, f"Created contract {CONTRACT}:")
    more("the request is SENT BY INITIATOR, the reply SENT BY TARGET.")

    db.create_queue(TARGET_QUEUE)
    db.create_service(TARGET_SERVICE, TARGET_QUEUE, contracts=[CONTRACT])
    say(4, f"Created queue {TARGET_QUEUE} and service {TARGET_SERVICE} on it,")
    more("the target of the contract.")

    db.create_queue(INITIATOR_QUEUE)
    db.create_service(INITIATOR_SERVICE, INITIATOR_QUEUE)
    say(5, f"Created queue {INITIATOR_QUEUE} and service {INITIATOR_SERVICE} on it")
    more("(no contract: it can only initiate).")


def _initiator_sends_request(db: broker.Broker) -> uuid.UUID:
    """Step 6: BEGIN DIALOG and SEND in one transaction; returns the conversation id."""
    with db.transaction() as tx:
        handle = tx.begin_dialog(INITIATOR_SERVICE, TARGET_SERVICE, CONTRACT, encryption=False)
        tx.send(handle, message_type=REQUEST_TYPE, body=REQUEST_BODY.encode())
    conversation_id = _conversation_id(db, handle)
    say(6, f"Began a dialog from {INITIATOR_SERVICE} to {TARGET_SERVICE}:")
    more(f"handle {handle}, conversation id {conversation_id}.")
    more(f"Sent the request and committed: {REQUEST_BODY}")
    show_queue(db, TARGET_QUEUE)
    pending = plural(len(db.catalog("sys.transmission_queue")), "message")
    more(f"sys.transmission_queue holds {pending}: a local service gets its messages directly.")
    _show_endpoints(db, conversation_id)
    return conversation_id


def _target_replies_and_ends(db: broker.Broker, conversation_id: uuid.UUID) -> None:
    """Step 7: RECEIVE the request, SEND the reply, END CONVERSATION, in one transaction."""
    with db.transaction() as tx:
        request = reply_and_end(tx, TARGET_QUEUE, REQUEST_TYPE, REPLY_TYPE)
    say(7, f"The target received the request on its own handle {request.conversation_handle}:")
    more(text(request.message_body))
    more("It sent the reply, ended its side of the conversation and committed.")
    show_queue(db, TARGET_QUEUE)
    show_queue(db, INITIATOR_QUEUE)
    _show_endpoints(db, conversation_id)


def _initiator_receives_and_ends(db: broker.Broker, conversation_id: uuid.UUID) -> None:
    """Step 8: RECEIVE the reply and END CONVERSATION, in one transaction."""
    with db.transaction() as tx:
        reply = receive_one(tx, INITIATOR_QUEUE, REPLY_TYPE)
        tx.end_conversation(reply.conversation_handle)
    say(8, f"The initiator received the reply on handle {reply.conversation_handle}:")
    more(text(reply.message_body))
    more("It ended the conversation and committed; END CONVERSATION discarded the EndDialog.")
    show_queue(db, INITIATOR_QUEUE)
    _show_endpoints(db, conversation_id)


def say(step: int, sentence: str) -> None:
    click.echo(f"{step}. {sentence}")


def more(sentence: str) -> None:
    click.echo(f"   {sentence}")


def text(body: bytes | None) -> str:
    return (body or b"").decode("utf-8")


def drop_earlier_run(
    db: broker.Broker,
    objects: tuple[tuple[str, str, tuple[str, ...]], ...] = _DEMO_OBJECTS,
    cleanup: Callable[[], None] | None = None,
) -> bool:
    """Drop the ``objects`` (view, drop method, names) an earlier run left; True if any.
    ``cleanup`` runs first when there is something to drop."""
    present = {view: {row["name"] for row in db.catalog(view)} for view, _, _ in objects}
    if not any(name in present[view] for view, _, names in objects for name in names):
        return False
    if cleanup is not None:
        cleanup()
    for view, drop, names in objects:
        for name in names:
            if name in present[view]:
                getattr(db, drop)(name)
    return True


def cleanup_conversations(db: broker.Broker, service: str) -> Callable[[], None]:
    """A ``cleanup`` for :func:`drop_earlier_run`: END CONVERSATION WITH CLEANUP for what
    an earlier (or interrupted) run left on ``service``."""

    def clean() -> None:
        ids = [row["service_id"] for row in db.catalog("sys.services", name=service)]
        for endpoint in db.catalog("sys.conversation_endpoints"):
            if endpoint["service_id"] in ids:
                with db.transaction() as tx:
                    tx.end_conversation(endpoint["conversation_handle"], cleanup=True)

    return clean


def reply_and_end(tx: broker.Transaction, queue: str, request_type: str, reply_type: str) -> broker.Message:
    """Step 7 of both tutorials, in ``tx``: RECEIVE the request, SEND the reply, END
    CONVERSATION; the request."""
    request = receive_one(tx, queue, request_type)
    tx.send(request.conversation_handle, message_type=reply_type, body=REPLY_BODY.encode())
    tx.end_conversation(request.conversation_handle)
    return request


def receive_one(tx: broker.Transaction, queue: str, expected_type: str) -> broker.Message:
    """WAITFOR (RECEIVE TOP (1) ...), TIMEOUT 1000, the message of ``expected_type``."""
    messages = tx.receive(queue, 1, timeout=WAIT_SECONDS)
    if not messages or messages[0].message_type_name != expected_type:
        got = messages[0].message_type_name if messages else "nothing"
        raise click.ClickException(f"expected {expected_type} on {queue}, received {got}")
    return messages[0]


def _conversation_id(db: broker.Broker, handle: uuid.UUID) -> uuid.UUID:
    endpoint = next(
        e
        for e in db.catalog("sys.conversation_endpoints")
        if e["conversation_handle"] == handle
    )
    conversation_id: uuid.UUID = endpoint["conversation_id"]
    return conversation_id


def show_queue(db: broker.Broker, queue: str) -> None:
    rows = db.queue_rows(queue)
    more(f"{queue} holds {plural(len(rows), 'message')}{':' if rows else '.'}")
    for row in rows:
        ready = " = ready" if row.status == 1 else ""
        more(
            f"  {row.message_type_name} (sequence {row.message_sequence_number}, "
            f"status {row.status}{ready}, validation {row.validation})"
        )


def _show_endpoints(db: broker.Broker, conversation_id: uuid.UUID) -> None:
    sides = {
        bool(e["is_initiator"]): e
        for e in db.catalog("sys.conversation_endpoints")
        if e["conversation_id"] == conversation_id
    }
    states = [
        f"{side} {sides[is_initiator]['state']} ({sides[is_initiator]['state_desc']})"
        if is_initiator in sides
        else f"{side} endpoint gone"
        for is_initiator, side in ((True, "initiator"), (False, "target"))
    ]
    more(f"sys.conversation_endpoints: {', '.join(states)}.")
