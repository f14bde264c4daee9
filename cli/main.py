"""The ``broker`` command: a thin click face over the Python API (``broker.connect``).

Every command opens the database named by ``--db`` (or ``BROKER_URL``), runs one API
call or one transaction, and prints the result. A :class:`broker.BrokerError` prints
one line, ``error <number>: <text>``, on stderr and exits 1; usage errors exit 2.
"""

from __future__ import annotations

from typing import Any

import click
from alembic.util.exc import CommandError
from sqlalchemy.exc import SQLAlchemyError

import broker
from cli import bulk, conversations, demo, listen, objects, run, schema, show, spark_demo, status
from cli.state import DEFAULT_URL, CliState


class BrokerGroup(click.Group):
    """A group that turns library failures into one line on stderr and exit status 1."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except broker.BrokerError as exc:
            _fail(
                ctx, f"error {exc.number}: {exc.message}" if exc.number else f"error: {exc.message}"
            )
        except (SQLAlchemyError, CommandError) as exc:
            _fail(ctx, f"error: {_first_line(getattr(exc, 'orig', None) or exc)}")


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def _fail(ctx: click.Context, line: str) -> None:
    click.echo(line, err=True)
    ctx.exit(1)


@click.group(cls=BrokerGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--db",
    "url",
    envvar="BROKER_URL",
    default=DEFAULT_URL,
    show_default=True,
    help="Database URL (SQLAlchemy form); also read from BROKER_URL.",
)
@click.version_option(package_name="servicebroker")
@click.pass_context
def cli(ctx: click.Context, url: str) -> None:
    """SQL Server Service Broker on SQLite or PostgreSQL.

    \b
    Start with the tutorial conversation:
      broker demo
    Then look around:
      broker status
      broker --db sqlite:///app.db show services
    """
    state = CliState(url)
    ctx.call_on_close(state.close)
    ctx.obj = state


for _command in (
    *schema.COMMANDS,
    *objects.COMMANDS,
    *conversations.COMMANDS,
    *show.COMMANDS,
    *status.COMMANDS,
    *bulk.COMMANDS,
    *run.COMMANDS,
    *listen.COMMANDS,
    *spark_demo.COMMANDS,
    demo.demo,
):
    cli.add_command(_command)


def main() -> None:
    """Console-script entry point."""
    cli()


if __name__ == "__main__":
    main()
