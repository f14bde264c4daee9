"""``broker create|alter route`` and ``broker create|alter remote-service-binding``,
named like the clauses of CREATE ROUTE and CREATE REMOTE SERVICE BINDING.

Routes are a database's (``--db``, or ``--instance`` with ``--database``) or, with
``--instance`` alone, the instance's own (SQL Server's msdb routes, for messages that
arrive from another instance). Remote service bindings are a database's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from cli.params import (
    ADDRESS,
    BROKER_INSTANCE,
    FAR_SERVICE,
    MIRROR_ADDRESS,
    ON_OFF,
    REMOTE_SERVICE_BINDING,
    ROUTE,
    ROUTE_LIFETIME,
    USER,
)
from cli.render import F
from cli.state import CliState, pass_state


def _route_options(*, creating: bool) -> Callable[[F], F]:
    """CREATE ROUTE's clauses as options; --address is required to create."""
    options = (
        click.option(
            "--address",
            type=ADDRESS,
            required=creating,
            metavar="ADDR",
            help="ADDRESS: LOCAL, TRANSPORT or TCP://host:port.",
        ),
        click.option(
            "--service",
            "service_name",
            type=FAR_SERVICE,
            metavar="S",
            help="SERVICE_NAME: the service the route leads to (case-sensitive); none = any service.",
        ),
        click.option(
            "--broker-instance",
            type=BROKER_INSTANCE,
            metavar="G",
            help="BROKER_INSTANCE: the service_broker_guid of the database that has the service "
            "(needs --service).",
        ),
        click.option(
            "--lifetime",
            type=ROUTE_LIFETIME,
            metavar="N",
            help="LIFETIME: the route expires N seconds from now; none = never.",
        ),
        click.option(
            "--mirror-address",
            type=MIRROR_ADDRESS,
            metavar="A",
            help="MIRROR_ADDRESS: the TCP address of the mirror (needs --service and --broker-instance).",
        ),
    )

    def decorate(command: F) -> F:
        for option in reversed(options):
            command = option(command)
        return command

    return decorate


def _clauses(**given: Any) -> dict[str, Any]:
    """The clauses given, by the names ``create_route`` takes."""
    return {clause: value for clause, value in given.items() if value is not None}


def _whose(state: CliState) -> str:
    """Whose routes a command changes, for its message."""
    return " of the instance" if state.on_instance_itself else ""


@click.command("route")
@click.argument("name", type=ROUTE)
@_route_options(creating=True)
@pass_state
def create_route(
    state: CliState,
    name: str,
    address: str,
    service_name: str | None,
    broker_instance: str | None,
    lifetime: int | None,
    mirror_address: str | None,
) -> None:
    """Create a route (CREATE ROUTE).

    A new conversation's messages go where the routes of the sending database lead
    (sys.routes); every database starts with AutoCreatedLocal (ADDRESS = LOCAL, any
    service). With --instance alone the route is the instance's own (msdb: for messages
    arriving from another instance). The errors are SQL Server's: 9662 a broker instance
    without a service, 9745 TRANSPORT with a service, 9744/9659/9660 a bad, empty or
    too-long address, 9661/9743/9747 a misused mirror address, 9746 a lifetime out of
    range.

    \b
    Example:
      broker create route ToTarget --service //TgtDB/2DBSample/TargetService --address LOCAL
      broker create route Expiring --address TCP://target.example:4022 --lifetime 3600
      broker --instance sqlite:///instance.db create route Inbound --address LOCAL
    """
    clauses = _clauses(service_name=service_name, broker_instance=broker_instance, lifetime=lifetime,
                       mirror_address=mirror_address)
    state.route_owner().create_route(name, address, **clauses)
    click.echo(f"created route {name}{_whose(state)}")


@click.command("route")
@click.argument("name", type=ROUTE)
@_route_options(creating=False)
@pass_state
def alter_route(
    state: CliState,
    name: str,
    address: str | None,
    service_name: str | None,
    broker_instance: str | None,
    lifetime: int | None,
    mirror_address: str | None,
) -> None:
    """Change a route (ALTER ROUTE).

    Options not given stay as they are; --lifetime starts again from now. A clause
    cannot go back to "any service" or "never expires": drop and create the route.

    \b
    Example:
      broker alter route ToTarget --address TCP://target.example:4022
      broker --instance sqlite:///instance.db alter route Inbound --lifetime 600
    """
    clauses = _clauses(address=address, service_name=service_name, broker_instance=broker_instance,
                       lifetime=lifetime, mirror_address=mirror_address)
    if not clauses:
        raise click.UsageError(
            "nothing to change: give --address, --service, --broker-instance, --lifetime and/or --mirror-address"
        )
    state.route_owner().alter_route(name, **clauses)
    click.echo(f"altered route {name}{_whose(state)}")


@click.command("remote-service-binding")
@click.argument("name", type=REMOTE_SERVICE_BINDING)
@click.option("--service", type=FAR_SERVICE, required=True, metavar="S",
              help="TO SERVICE: the remote service the binding is for (case-sensitive).")
@click.option("--user", type=USER, required=True, metavar="U",
              help="WITH USER: the user whose certificate dialogs to the service use.")
@click.option("--anonymous", type=ON_OFF, default="off", show_default=True,
              help="ANONYMOUS: the far side does not learn who the local user is.")
@pass_state
def create_remote_service_binding(state: CliState, name: str, service: str, user: str, anonymous: bool) -> None:
    """Create a remote service binding (CREATE REMOTE SERVICE BINDING).

    Stored and shown (sys.remote_service_bindings), one per remote service (9619);
    dialog security between instances uses it.

    \b
    Example:
      broker create remote-service-binding TargetBinding \\
        --service //TgtDB/2DBSample/TargetService --user TargetUser --anonymous on
    """
    state.db().create_remote_service_binding(name, service, user, anonymous=anonymous)
    click.echo(f"created remote service binding {name}")


@click.command("remote-service-binding")
@click.argument("name", type=REMOTE_SERVICE_BINDING)
@click.option("--user", type=USER, metavar="U", help="WITH USER: another user.")
@click.option("--anonymous", type=ON_OFF, help="ANONYMOUS: on or off.")
@pass_state
def alter_remote_service_binding(state: CliState, name: str, user: str | None, anonymous: bool | None) -> None:
    """Change a remote service binding's user or ANONYMOUS (ALTER REMOTE SERVICE BINDING).

    \b
    Example:
      broker alter remote-service-binding TargetBinding --user OtherUser --anonymous off
    """
    if user is None and anonymous is None:
        raise click.UsageError("nothing to change: give --user and/or --anonymous")
    state.db().alter_remote_service_binding(name, user=user, anonymous=anonymous)
    click.echo(f"altered remote service binding {name}")
