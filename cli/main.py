"""The ``broker`` command: a thin click face over the Python API (``broker.connect``).

Every command opens the database named by ``--db`` (or ``BROKER_URL``), runs one API
call or one transaction, and prints the result. Whatever goes wrong prints one line on
stderr and never a traceback (``cli.failures``): a :class:`broker.BrokerError` is
``error <number>: <text>`` and exits 1, usage errors exit 2; ``--debug`` shows the
traceback. Command modules import SQLAlchemy, Alembic and rich only when they run, so
``broker --help`` starts fast.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import click

from cli import bulk, conversations, demo, failures, listen, objects, run, schema, show, spark_demo, status
from cli.state import DEFAULT_URL, CliState


class BrokerGroup(click.Group):
    """The top-level group: every failure is one line on stderr and an exit status."""

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        if not standalone_mode:  # the caller reports failures itself
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        state = CliState()
        try:
            outcome = super().main(args, prog_name, complete_var, False, obj=state, **extra)
        except Exception as exc:  # the last word on every failure: one line, never a traceback
            sys.exit(failures.report(exc, debug=state.debug))
        # Not standalone, click hands back the status of ctx.exit() (e.g. --help: 0).
        sys.exit(outcome if isinstance(outcome, int) else 0)


@click.group("broker", cls=BrokerGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--db",
    "url",
    envvar="BROKER_URL",
    default=DEFAULT_URL,
    show_default=True,
    help="Database URL (SQLAlchemy form); also read from BROKER_URL.",
)
@click.option(
    "--debug",
    is_flag=True,
    envvar="BROKER_DEBUG",
    help="Show the traceback of a failure instead of one line; also BROKER_DEBUG=1.",
)
@click.version_option(package_name="servicebroker")
@click.pass_context
def cli(ctx: click.Context, url: str, debug: bool) -> None:
    """SQL Server Service Broker on SQLite or PostgreSQL.

    \b
    Start with the tutorial conversation:
      broker demo
    Then look around:
      broker status
      broker --db sqlite:///app.db show services
    """
    state = ctx.ensure_object(CliState)
    state.url, state.debug = url, debug
    ctx.call_on_close(state.close)


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
