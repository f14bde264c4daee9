"""Schema commands over ``broker.storage.schema`` (Alembic): init, upgrade, downgrade, current, history.

``broker.storage.schema`` (and through it SQLAlchemy and Alembic) loads when one of them runs.
Alembic's refusals (an unknown revision, a relative one past head or base, ...) print one
line and exit 1; a database of a later release is error 948, a damaged version table 211.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import click

from cli.params import REVISION
from cli.render import emit, json_option
from cli.state import CliState, must_exist, pass_state

if TYPE_CHECKING:
    from sqlalchemy import Engine


@click.command()
@pass_state
def init(state: CliState) -> None:
    """Create the database if needed and bring its catalog to head.

    \b
    Example:
      broker --db sqlite:///app.db init
    """
    from broker.storage import schema

    _migrate(state, schema.upgrade, "head")


# A step ("+1", and "-1", which is refused as no upgrade) is a REVISION, not an unknown
# option, as in Alembic's own command line.
@click.command(context_settings={"ignore_unknown_options": True})
@click.argument("revision", type=REVISION, default="head")
@pass_state
def upgrade(state: CliState, revision: str) -> None:
    """Upgrade the catalog to REVISION (default: head): an id, head, or a step up such as +1.

    \b
    Example:
      broker upgrade
      broker upgrade 0001
      broker upgrade +1
    """
    from broker.storage import schema

    _migrate(state, schema.upgrade, revision)


# A step down ("-1") is a REVISION, not an unknown option, as in Alembic's own command line.
@click.command(context_settings={"ignore_unknown_options": True})
@click.argument("revision", type=REVISION)
@pass_state
@must_exist
def downgrade(state: CliState, revision: str) -> None:
    """Downgrade the catalog to REVISION: an id, base, or a step down such as -1.

    "base" removes every broker table, queues included.

    \b
    Example:
      broker downgrade -1
      broker downgrade base
    """
    from broker.storage import schema

    _migrate(state, schema.downgrade, revision)


@click.command()
@pass_state
@must_exist
def current(state: CliState) -> None:
    """Print the catalog revision of the database.

    "base" means no broker catalog yet; "(head)" marks the newest revision.

    \b
    Example:
      broker current
    """
    from broker.storage import schema

    revision = schema.current_revision(state.engine())
    click.echo(f"{_shown(revision)}{' (head)' if revision == schema.HEAD_REVISION else ''}")


@click.command()
@json_option
def history(as_json: bool) -> None:
    """List the catalog revisions this version ships, oldest first.

    \b
    Example:
      broker history --json
    """
    from broker.storage import schema

    with _alembic_refusals():
        revisions = schema.history()
    rows = [{"revision": rev, "down_revision": down, "message": message} for rev, down, message in revisions]
    emit(rows, ["revision", "down_revision", "message"], as_json=as_json)


def _migrate(state: CliState, step: Callable[[Engine, str], None], revision: str) -> None:
    """Upgrade or downgrade the database to ``revision``, then print the revision it is at."""
    from broker.storage import schema

    engine = state.engine()
    with _alembic_refusals():
        step(engine, revision)
    click.echo(f"database at revision {_shown(schema.current_revision(engine))}")


@contextmanager
def _alembic_refusals() -> Iterator[None]:
    """Alembic's CommandError (an unknown revision, ...) as one line and exit 1."""
    from alembic.util.exc import CommandError

    try:
        yield
    except CommandError as exc:
        raise click.ClickException(str(exc)) from exc


def _shown(revision: str | None) -> str:
    return revision if revision is not None else "base"


COMMANDS = (init, upgrade, downgrade, current, history)
