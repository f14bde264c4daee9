"""The ``broker`` command: a thin click face over the Python API (``broker.connect``).

Every command opens the database named by ``--db`` (or ``BROKER_URL``), runs one API
call or one transaction, and prints the result. Whatever goes wrong prints one line on
stderr and never a traceback (``cli.failures``): a :class:`broker.BrokerError` is
``error <number>: <text>`` and exits 1, usage errors exit 2; ``--debug`` shows the
traceback. Command modules import SQLAlchemy, Alembic and rich only when they run, so
``broker --help`` starts fast.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Any

import click
from click.core import ParameterSource

from cli import (
    bulk,
    certificates,
    conversations,
    demo,
    failures,
    instances,
    listen,
    objects,
    run,
    schema,
    show,
    spark_demo,
    sql,
    status,
)
from cli.params import DATABASE
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


def _not_empty(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """Refuse an option given empty, or its variable set but empty (which click takes as
    unset, so that BROKER_URL="" silently meant the default database)."""
    if value == "":
        raise click.BadParameter("it is empty: give a value or leave the option out", ctx, param)
    variable = getattr(param, "envvar", None)
    if (isinstance(variable, str) and os.environ.get(variable) == ""
            and ctx.get_parameter_source(param.name or "") == ParameterSource.DEFAULT
            and not (param.name == "database_name" and ctx.params.get("instance_url") is None)):
        # (BROKER_DATABASE is read only with --instance, which is processed before it)
        raise click.BadParameter(f"{variable} is set but empty: unset it, or set it to a value", ctx, param)
    return value


@click.group("broker", cls=BrokerGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--db",
    "url",
    envvar="BROKER_URL",
    callback=_not_empty,
    default=DEFAULT_URL,
    show_default=True,
    help="Database URL (SQLAlchemy form); also read from BROKER_URL.",
)
@click.option(
    "--instance",
    "instance_url",
    envvar="BROKER_INSTANCE",
    callback=_not_empty,
    metavar="URL",
    help="Instance catalog URL, instead of --db: its databases, routes, run and status; "
    "also read from BROKER_INSTANCE.",
)
@click.option(
    "--database",
    "database_name",
    envvar="BROKER_DATABASE",
    callback=_not_empty,
    type=DATABASE,
    metavar="NAME",
    help="With --instance: the member database that the other commands work on; "
    "also read from BROKER_DATABASE.",
)
@click.option(
    "--debug",
    is_flag=True,
    envvar="BROKER_DEBUG",
    help="Show the traceback of a failure instead of one line; also BROKER_DEBUG=1.",
)
@click.version_option(package_name="servicebroker")
@click.pass_context
def cli(
    ctx: click.Context, url: str, instance_url: str | None, database_name: str | None, debug: bool
) -> None:
    """SQL Server Service Broker on SQLite or PostgreSQL.

    --db names one database. --instance names an instance (several databases served
    together): `database`, `run`, `status` and the route commands then act on the whole
    instance, and --database NAME picks the member the other commands work on. Give
    --db or --instance, not both (when one is on the command line and the other in the
    environment, the command line wins). A SQLite file that is not there is created by
    every command but current and downgrade, which say error 911.

    \b
    Start with the tutorial conversation:
      broker demo
      broker demo --between-databases
      broker demo --between-instances
    Then look around:
      broker status
      broker --db sqlite:///app.db show services
      broker --instance sqlite:///instance.db status
      broker --instance sqlite:///instance.db --database TargetDB show services
    """
    state = ctx.ensure_object(CliState)
    state.url, state.debug = url, debug
    state.instance_url, state.database_name = _target(ctx, instance_url, database_name)
    ctx.call_on_close(state.close)


_GIVEN = (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT)


def _target(ctx: click.Context, instance_url: str | None, database_name: str | None) -> tuple[str | None, str | None]:
    """The instance and member the command line means: (None, None) for ``--db``.

    ``--db`` and ``--instance`` from the same place (both on the command line, or both
    in the environment) is a usage error; from different places, the command line's wins.
    ``--database`` goes with ``--instance`` only.
    """
    db_source = ctx.get_parameter_source("url")
    instance_source = ctx.get_parameter_source("instance_url")
    if instance_url is not None and db_source in _GIVEN:
        if db_source == instance_source:
            if db_source == ParameterSource.COMMANDLINE:
                raise click.UsageError("give --db or --instance, not both")
            raise click.UsageError("BROKER_URL and BROKER_INSTANCE are both set: unset one, or give --db or --instance")
        if db_source == ParameterSource.COMMANDLINE:
            instance_url = None  # --db on the command line over BROKER_INSTANCE
    if instance_url is None:
        if database_name is not None and ctx.get_parameter_source("database_name") == ParameterSource.COMMANDLINE:
            raise click.UsageError("--database picks a member of an instance: give --instance URL too")
        return None, None
    return instance_url, database_name


for _command in (
    *schema.COMMANDS,
    *objects.COMMANDS,
    *conversations.COMMANDS,
    *show.COMMANDS,
    *status.COMMANDS,
    *bulk.COMMANDS,
    *instances.COMMANDS,
    *run.COMMANDS,
    *listen.COMMANDS,
    *spark_demo.COMMANDS,
    *certificates.COMMANDS,
    *sql.COMMANDS,
    demo.demo,
):
    cli.add_command(_command)


def main() -> None:
    """Console-script entry point."""
    cli()


if __name__ == "__main__":
    main()
