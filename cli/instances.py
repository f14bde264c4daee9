"""``broker --instance URL database add|remove|list``: the member databases of an instance;
``broker --instance URL failover NAME``: a mirrored member becomes the principal here."""

from __future__ import annotations

from typing import Any

import click

from broker.errors import BAD_URL, InvalidArgumentError
from cli.params import DATABASE, URL
from cli.render import emit, json_option
from cli.state import CliState, pass_state

_LIST_COLUMNS = ("name", "database_id", "is_broker_enabled", "service_broker_guid", "url")


@click.group("database")
def database() -> None:
    """The databases of an instance (--instance URL): add, remove, list.

    A member is a broker database of its own, SQLite or PostgreSQL (one instance may
    mix them); the instance's runtime (broker --instance URL run) moves messages between
    its members. --database NAME then picks a member for the other commands.

    \b
    Example:
      broker --instance sqlite:///instance.db database add TargetDB sqlite:///target.db
      broker --instance sqlite:///instance.db database list
      broker --instance sqlite:///instance.db --database TargetDB show services
    """


@database.command("add")
@click.argument("name", type=DATABASE)
@click.argument("url", type=URL)
@click.option("--mirror", is_flag=True,
              help="Serve it as the mirror of the same database, which another instance serves as principal.")
@pass_state
def add(state: CliState, name: str, url: str, mirror: bool) -> None:
    """Attach the database at URL to the instance as NAME, creating and upgrading it.

    A SQLite file's path is stored absolute. A database that is a member already (the
    same file or server database, under any URL) is refused (error 1801). A database
    whose broker instance
    (service_broker_guid) an enabled member already has is attached with its broker
    disabled (error 9773 is logged), as SQL Server attaches a copy: give it a new one
    with `broker --instance URL --database NAME alter database --new-broker`.

    --mirror attaches the database as the mirror of a principal another instance serves
    (the same database, which both open): this instance leaves it alone until
    `broker --instance URL failover NAME` makes it the principal here.

    \b
    Example:
      broker --instance sqlite:///instance.db database add TargetDB sqlite:///target.db
      broker --instance sqlite:///instance.db database add InitiatorDB \\
        postgresql+psycopg://db.example/initiator
      broker --instance sqlite:///mirror-instance.db database add TargetDB \\
        postgresql+psycopg://db.example/target --mirror
    """
    inst = state.instance()
    try:
        added = inst.add_database(name, url, mirror=mirror)
    except InvalidArgumentError as exc:
        if exc.number != BAD_URL:
            raise
        raise click.BadParameter(exc.message, param_hint="'URL'") from None
    shown = added.engine.url.render_as_string(hide_password=True)
    enabled = bool(added.catalog("sys.databases")[0]["is_broker_enabled"])
    note = " as MIRROR" if mirror else "" if enabled else ": its broker is DISABLED (9773)"
    click.echo(f"added database {name} ({shown}){note}")


@database.command("remove")
@click.argument("name", type=DATABASE)
@pass_state
def remove(state: CliState, name: str) -> None:
    """Detach the database NAME from the instance; its data stays where it is.

    \b
    Example:
      broker --instance sqlite:///instance.db database remove TargetDB
    """
    state.instance().remove_database(name)
    click.echo(f"removed database {name}")


@database.command("list")
@json_option
@pass_state
def list_(state: CliState, as_json: bool) -> None:
    """List the instance's databases (sys.databases) with their URLs (passwords hidden).

    \b
    Example:
      broker --instance sqlite:///instance.db database list --json
    """
    inst = state.instance()
    members = inst.databases
    rows: list[dict[str, Any]] = [
        {**row, "url": members[row["name"]].engine.url.render_as_string(hide_password=True)}
        for row in inst.catalog("sys.databases")
    ]
    emit(rows, _LIST_COLUMNS, as_json=as_json)


@click.command("failover")
@click.argument("name", type=DATABASE)
@pass_state
def failover(state: CliState, name: str) -> None:
    """Make this instance the principal of the mirrored database NAME (--instance URL).

    ALTER DATABASE NAME SET PARTNER FORCE_SERVICE_ALLOW_DATA_LOSS, run on the instance
    that serves NAME as mirror: the database records this instance as its principal and
    the partner as its mirror. Both runtimes follow within a transmitter pass; senders
    switch to this instance's endpoint when the partner refuses their messages. Errors:
    911 no such database, 1416 not mirrored, 1455 already the principal here.

    \b
    Example:
      broker --instance sqlite:///mirror-instance.db failover TargetDB
    """
    inst = state.instance()
    inst.failover(name)
    click.echo(f"database {name} is now the PRINCIPAL on this instance")


COMMANDS = (database, failover)
