"""Schema commands over ``broker.schema`` (Alembic): init, upgrade, downgrade, current, history."""

from __future__ import annotations

import click

from broker import schema as broker_schema
from cli.render import emit, json_option
from cli.state import CliState, pass_state


@click.command()
@pass_state
def init(state: CliState) -> None:
    """Create the database if needed and bring its catalog to head.

    \b
    Example:
      broker --db sqlite:///app.db init
    """
    _upgrade_to(state, "head")


@click.command()
@click.argument("revision", default="head")
@pass_state
def upgrade(state: CliState, revision: str) -> None:
    """Upgrade the catalog to REVISION (default: head).

    \b
    Example:
      broker upgrade
      broker upgrade 0001
    """
    _upgrade_to(state, revision)


@click.command()
@click.argument("revision")
@pass_state
def downgrade(state: CliState, revision: str) -> None:
    """Downgrade the catalog to REVISION.

    "base" removes every broker table, queues included.

    \b
    Example:
      broker downgrade base
    """
    engine = state.engine()
    broker_schema.downgrade(engine, revision)
    click.echo(f"database at revision {_shown(broker_schema.current_revision(engine))}")


@click.command()
@pass_state
def current(state: CliState) -> None:
    """Print the catalog revision of the database.

    "base" means no broker catalog yet; "(head)" marks the newest revision.

    \b
    Example:
      broker current
    """
    engine = state.engine()
    revision = broker_schema.current_revision(engine)
    head = broker_schema.head_revision()
    click.echo(f"{_shown(revision)}{' (head)' if revision == head else ''}")


@click.command()
@json_option
def history(as_json: bool) -> None:
    """List the catalog revisions this version ships, oldest first.

    \b
    Example:
      broker history --json
    """
    rows = [
        {"revision": rev, "down_revision": down, "message": message}
        for rev, down, message in broker_schema.history()
    ]
    emit(rows, ["revision", "down_revision", "message"], as_json=as_json)


def _upgrade_to(state: CliState, revision: str) -> None:
    engine = state.engine()
    broker_schema.upgrade(engine, revision)
    click.echo(f"database at revision {_shown(broker_schema.current_revision(engine))}")


def _shown(revision: str | None) -> str:
    return revision if revision is not None else "base"


COMMANDS = (init, upgrade, downgrade, current, history)
