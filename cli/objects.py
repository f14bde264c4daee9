"""CREATE / ALTER / DROP of broker objects: message types, contracts, queues, services,
broker priorities; ALTER DATABASE's broker options."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from broker import arguments
from broker.errors import InvalidArgumentError
from cli.endpoints import alter_endpoint, create_endpoint
from cli.params import (
    CONTRACT,
    FAR_SERVICE,
    MESSAGE_TYPE,
    OBJECT,
    ON_OFF,
    PRIORITY,
    PRIORITY_LEVEL,
    QUEUE,
    SCHEMA_COLLECTION,
    SERVICE,
    FilePath,
    read_at_most,
)
from cli.queues import alter_queue, create_queue
from cli.render import F
from cli.routes import (
    alter_remote_service_binding,
    alter_route,
    create_remote_service_binding,
    create_route,
)
from cli.state import CliState, pass_state

VALIDATIONS = ("NONE", "EMPTY", "WELL_FORMED_XML", "VALID_XML")
DIRECTIONS = ("INITIATOR", "TARGET", "ANY")


@click.group()
def create() -> None:
    """Create a broker object.

    Message types, contracts, queues, services, XML schema collections, broker
    priorities, routes, remote service bindings and (with --instance) the instance's
    Service Broker endpoint.

    \b
    Example:
      broker create queue TargetQueue1DB
      broker create service //AWDB/1DBSample/TargetService --queue TargetQueue1DB
      broker create route ToTarget --service //TgtDB/2DBSample/TargetService --address LOCAL
      broker --instance sqlite:///instance.db create endpoint InstTargetEndpoint --port 4022 \\
        --certificate InstTargetEndpoint.crt --key InstTargetEndpoint.key --trust InstInitiatorEndpoint.crt
    """


@create.command("message-type")
@click.argument("name", type=MESSAGE_TYPE)
@click.option(
    "--validation",
    type=click.Choice(VALIDATIONS, case_sensitive=False),
    default="NONE",
    show_default=True,
    help="What a message body must be.",
)
@click.option("--schema-collection", type=SCHEMA_COLLECTION, help="XML schema collection for VALID_XML.")
@pass_state
def create_message_type(
    state: CliState, name: str, validation: str, schema_collection: str | None
) -> None:
    """Create a message type (CREATE MESSAGE TYPE).

    VALID_XML checks bodies against an XML schema collection (broker create
    xml-schema-collection), named by --schema-collection.

    \b
    Example:
      broker create message-type //AWDB/1DBSample/RequestMessage --validation WELL_FORMED_XML
      broker create message-type //app/Order --validation VALID_XML --schema-collection OrderSchemas
    """
    state.db().create_message_type(
        name, validation=validation.upper(), schema_collection=schema_collection
    )
    click.echo(f"created message type {name}")


@create.command("contract")
@click.argument("name", type=CONTRACT)
@click.option(
    "--message",
    "messages",
    multiple=True,
    required=True,
    metavar="TYPE:DIRECTION",
    help="A message type and who sends it: INITIATOR, TARGET or ANY. Repeatable.",
)
@pass_state
def create_contract(state: CliState, name: str, messages: tuple[str, ...]) -> None:
    """Create a contract (CREATE CONTRACT).

    Each --message names a message type and who may send it.

    \b
    Example:
      broker create contract //AWDB/1DBSample/SampleContract \\
        --message //AWDB/1DBSample/RequestMessage:INITIATOR \\
        --message //AWDB/1DBSample/ReplyMessage:TARGET
    """
    state.db().create_contract(name, _message_usages(messages))
    click.echo(f"created contract {name}")


def _message_usages(messages: tuple[str, ...]) -> dict[str, str]:
    usages: dict[str, str] = {}
    for item in messages:
        # Message type names may hold colons (http://...): the direction follows the last.
        message_type, _, direction = item.rpartition(":")
        if not message_type or direction.upper() not in DIRECTIONS:
            raise click.BadParameter(
                f"{item!r} is not TYPE:INITIATOR, TYPE:TARGET or TYPE:ANY", param_hint="'--message'"
            )
        try:
            arguments.object_name(message_type, "message type")
        except InvalidArgumentError as exc:
            raise click.BadParameter(exc.message, param_hint="'--message'") from None
        if message_type in usages:
            raise click.BadParameter(
                f"message type {message_type!r} is given twice", param_hint="'--message'"
            )
        usages[message_type] = direction.upper()
    return usages


create.add_command(create_queue)
create.add_command(create_route)
create.add_command(create_remote_service_binding)
create.add_command(create_endpoint)


@create.command("service")
@click.argument("name", type=SERVICE)
@click.option("--queue", type=QUEUE, required=True, help="The queue that receives the service's messages.")
@click.option(
    "--contract",
    "contracts",
    type=CONTRACT,
    multiple=True,
    help="A contract the service accepts as a target. Repeatable; none = initiate only.",
)
@pass_state
def create_service(state: CliState, name: str, queue: str, contracts: tuple[str, ...]) -> None:
    """Create a service on a queue (CREATE SERVICE).

    \b
    Example:
      broker create service //AWDB/1DBSample/TargetService --queue TargetQueue1DB \\
        --contract //AWDB/1DBSample/SampleContract
    """
    state.db().create_service(name, queue, contracts=contracts)
    click.echo(f"created service {name}")


@create.command("xml-schema-collection")
@click.argument("name", type=SCHEMA_COLLECTION)
@click.option(
    "--file",
    "xsd_file",
    type=FilePath(exists=True, dir_okay=False, path_type=Path),
    required=True,
    help="An XSD document.",
)
@pass_state
def create_xml_schema_collection(state: CliState, name: str, xsd_file: Path) -> None:
    """Create an XML schema collection from an XSD file.

    VALID_XML message types validate their bodies against it.

    \b
    Example:
      broker create xml-schema-collection OrderSchemas --file order.xsd
    """
    with xsd_file.open("rb") as file:
        document = read_at_most(file, arguments.MAX_BODY_BYTES)  # an xml value's limit, as a body's
    if document is None:
        raise click.BadParameter(f"{click.format_filename(str(xsd_file))!r} holds more than "
                                 f"{arguments.MAX_BODY_BYTES} bytes, the most an xml value can", param_hint="'--file'")
    state.db().create_xml_schema_collection(name, document)
    click.echo(f"created XML schema collection {name}")


def _priority_options(command: F) -> F:
    """The criteria and level of a broker priority, as options."""
    options = (
        click.option("--contract", type=CONTRACT, help="Contract of the conversations it applies to, or ANY."),
        click.option("--local-service", type=SERVICE, help="Service of the endpoint on this side, or ANY."),
        click.option(
            "--remote-service", type=FAR_SERVICE, help="Service at the other end (case-sensitive), or ANY."
        ),
        click.option(
            "--level", type=PRIORITY_LEVEL, help="1 (lowest) to 10 (highest), or DEFAULT (5)."
        ),
    )
    for option in reversed(options):
        command = option(command)
    return command


def _priority_settings(
    contract: str | None,
    local_service: str | None,
    remote_service: str | None,
    level: int | str | None,
) -> dict[str, Any]:
    """The options given, by the names ``create_broker_priority`` takes."""
    given = {
        "contract_name": contract,
        "local_service_name": local_service,
        "remote_service_name": remote_service,
        "priority_level": level,
    }
    return {option: value for option, value in given.items() if value is not None}


@create.command("priority")
@click.argument("name", type=PRIORITY)
@_priority_options
@pass_state
def create_priority(
    state: CliState,
    name: str,
    contract: str | None,
    local_service: str | None,
    remote_service: str | None,
    level: int | str | None,
) -> None:
    """Create a broker priority (CREATE BROKER PRIORITY).

    Conversation endpoints created afterwards whose contract and services match get its
    level. Criteria not given match ANY; the level defaults to 5.

    \b
    Example:
      broker create priority UrgentOrders --contract //AWDB/1DBSample/SampleContract \\
        --local-service //AWDB/1DBSample/TargetService --level 8
    """
    state.db().create_broker_priority(
        name, **_priority_settings(contract, local_service, remote_service, level)
    )
    click.echo(f"created priority {name}")


@click.group()
def alter() -> None:
    """Change an existing object (ALTER).

    \b
    Example:
      broker alter queue TargetQueue1DB --status off
      broker alter priority UrgentOrders --level 9
      broker alter service //AWDB/1DBSample/TargetService --queue NewQueue
      broker alter database --new-broker
      broker alter route ToTarget --address TCP://target.example:4022
    """


alter.add_command(alter_queue)
alter.add_command(alter_route)
alter.add_command(alter_remote_service_binding)
alter.add_command(alter_endpoint)


@alter.command("priority")
@click.argument("name", type=PRIORITY)
@_priority_options
@pass_state
def alter_priority(
    state: CliState,
    name: str,
    contract: str | None,
    local_service: str | None,
    remote_service: str | None,
    level: int | str | None,
) -> None:
    """Change a broker priority (ALTER BROKER PRIORITY).

    Options not given stay as they are; ANY widens a criterion again. Existing
    conversation endpoints keep the priority they were created with.

    \b
    Example:
      broker alter priority UrgentOrders --level 9 --local-service ANY
    """
    changes = _priority_settings(contract, local_service, remote_service, level)
    if not changes:
        raise click.UsageError(
            "nothing to change: give --contract, --local-service, --remote-service and/or --level"
        )
    state.db().alter_broker_priority(name, **changes)
    click.echo(f"altered priority {name}")


@alter.command("message-type")
@click.argument("name", type=MESSAGE_TYPE)
@click.option(
    "--validation",
    type=click.Choice(VALIDATIONS, case_sensitive=False),
    required=True,
    help="What a message body must be from now on.",
)
@click.option("--schema-collection", type=SCHEMA_COLLECTION, help="XML schema collection for VALID_XML.")
@pass_state
def alter_message_type(state: CliState, name: str, validation: str, schema_collection: str | None) -> None:
    """Change a message type's validation (ALTER MESSAGE TYPE).

    Messages delivered from now on are checked against it; messages already in a queue
    are not checked again.

    \b
    Example:
      broker alter message-type //AWDB/1DBSample/RequestMessage --validation NONE
    """
    state.db().alter_message_type(name, validation.upper(), schema_collection)
    click.echo(f"altered message type {name}")


@alter.command("service")
@click.argument("name", type=SERVICE)
@click.option("--queue", type=QUEUE, help="A new queue: the service's messages move to it.")
@click.option(
    "--add-contract",
    "add_contracts",
    type=CONTRACT,
    multiple=True,
    help="A contract the service accepts from now on as a target. Repeatable.",
)
@click.option(
    "--drop-contract",
    "drop_contracts",
    type=CONTRACT,
    multiple=True,
    help="A contract new dialogs may no longer use; existing ones go on. Repeatable.",
)
@pass_state
def alter_service(
    state: CliState,
    name: str,
    queue: str | None,
    add_contracts: tuple[str, ...],
    drop_contracts: tuple[str, ...],
) -> None:
    """Move a service to another queue or change its contracts (ALTER SERVICE).

    \b
    Example:
      broker alter service //AWDB/1DBSample/TargetService --queue NewQueue \\
        --add-contract //AWDB/1DBSample/OtherContract
    """
    state.db().alter_service(name, queue=queue, add_contracts=add_contracts, drop_contracts=drop_contracts)
    click.echo(f"altered service {name}")


@alter.command("database")
@click.option("--enable-broker", is_flag=True, help="ENABLE_BROKER: deliver messages again.")
@click.option("--disable-broker", is_flag=True, help="DISABLE_BROKER: hold messages in the transmission queue.")
@click.option(
    "--new-broker",
    is_flag=True,
    help="NEW_BROKER: a new service_broker_guid; every conversation is removed, far sides are not told.",
)
@click.option(
    "--error-broker-conversations",
    is_flag=True,
    help="ERROR_BROKER_CONVERSATIONS: end every conversation with an error (after a restore).",
)
@click.option(
    "--honor-broker-priority",
    type=ON_OFF,
    help="HONOR_BROKER_PRIORITY: send the transmission queue in priority order.",
)
@pass_state
def alter_database(
    state: CliState,
    enable_broker: bool,
    disable_broker: bool,
    new_broker: bool,
    error_broker_conversations: bool,
    honor_broker_priority: bool | None,
) -> None:
    """Change the database's broker options (ALTER DATABASE ... SET).

    One of --enable-broker, --disable-broker, --new-broker and
    --error-broker-conversations, and/or --honor-broker-priority.

    \b
    Example:
      broker alter database --new-broker
      broker alter database --enable-broker --honor-broker-priority on
    """
    chosen = [
        option
        for option, given in (
            ("ENABLE_BROKER", enable_broker),
            ("DISABLE_BROKER", disable_broker),
            ("NEW_BROKER", new_broker),
            ("ERROR_BROKER_CONVERSATIONS", error_broker_conversations),
        )
        if given
    ]
    if len(chosen) > 1:
        raise click.UsageError(
            "give at most one of --enable-broker, --disable-broker, --new-broker and --error-broker-conversations"
        )
    if not chosen and honor_broker_priority is None:
        raise click.UsageError(
            "nothing to change: give --enable-broker, --disable-broker, --new-broker, "
            "--error-broker-conversations and/or --honor-broker-priority"
        )
    db = state.db()
    for option in chosen:
        if option == "NEW_BROKER":
            click.echo(f"altered database: NEW_BROKER (service_broker_guid {db.new_broker()})")
            continue
        if option == "ERROR_BROKER_CONVERSATIONS":
            db.error_broker_conversations()
        else:
            db.set_broker_enabled(option == "ENABLE_BROKER")
        click.echo(f"altered database: {option}")
    if honor_broker_priority is not None:
        db.set_honor_broker_priority(honor_broker_priority)
        click.echo(f"altered database: HONOR_BROKER_PRIORITY {'ON' if honor_broker_priority else 'OFF'}")


# kind -> the Broker method that drops it
DROPPABLE = {
    "message-type": "drop_message_type",
    "contract": "drop_contract",
    "queue": "drop_queue",
    "service": "drop_service",
    "priority": "drop_broker_priority",
    "route": "drop_route",
    "remote-service-binding": "drop_remote_service_binding",
    "endpoint": "drop_endpoint",
}


@click.command()
@click.argument("kind", type=click.Choice(tuple(DROPPABLE)))
@click.argument("name", type=OBJECT)
@pass_state
def drop(state: CliState, kind: str, name: str) -> None:
    """Drop a message type, contract, queue, service, broker priority, route, remote
    service binding or the instance's endpoint.

    A route is the database's, or with --instance alone the instance's own. The
    endpoint is the instance's (--instance).

    \b
    Example:
      broker drop service //AWDB/1DBSample/TargetService
      broker drop queue TargetQueue1DB
      broker drop priority UrgentOrders
      broker drop route ToTarget
      broker --instance sqlite:///instance.db drop route Inbound
      broker --instance sqlite:///instance.db drop endpoint InstTargetEndpoint
    """
    owner = state.route_owner() if kind == "route" else state.instance() if kind == "endpoint" else state.db()
    getattr(owner, DROPPABLE[kind])(name)
    whose = " of the instance" if kind == "route" and state.on_instance_itself else ""
    click.echo(f"dropped {kind.replace('-', ' ')} {name}{whose}")


COMMANDS = (create, alter, drop)
