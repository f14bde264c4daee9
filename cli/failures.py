"""Every failure of a command as one line on stderr, and its exit status.

A usage error (a bad option value, a missing argument, a bad ``--db`` URL) exits 2; a
:class:`broker.BrokerError` prints ``error <number>: <text>`` and exits 1; anything else
that escapes (a database failure, an OSError, a bug) is one line too and exits 1.
``--debug`` (or ``BROKER_DEBUG=1``) prints the traceback instead.
"""

from __future__ import annotations

import sys
import traceback

import click

from broker.errors import DATABASE_FAILURE, BrokerError
from broker.storage.driver_errors import as_broker_error

# What click (8.2 and later) raises for ``broker`` or ``broker create`` alone.
_BARE_COMMAND = getattr(click.exceptions, "NoArgsIsHelpError", ())
# DB-API modules the broker drives (their exceptions derive from ``module.Error``)
DRIVERS = ("sqlite3", "psycopg")


def report(exc: Exception, *, debug: bool) -> int:
    """Print what went wrong; return the exit status."""
    if isinstance(exc, _BARE_COMMAND):  # a group with no command: its help, as click prints it
        exc.show()
        return int(exc.exit_code)
    if isinstance(exc, click.UsageError):
        command = exc.ctx.command_path if exc.ctx is not None else "broker"
        text = exc.format_message()
        _echo(f"error: {text}{'' if text.endswith(('.', '?', '!')) else '.'} See '{command} --help'.")
        return exc.exit_code
    if isinstance(exc, click.ClickException):
        _echo(f"error: {exc.format_message()}")
        return exc.exit_code
    if isinstance(exc, click.Abort):  # Ctrl-C
        _echo("Aborted!")
        return 1
    if debug:
        traceback.print_exception(exc)
        return 1
    _echo(describe(exc))
    return 1


def describe(exc: Exception) -> str:
    """The line for a failure that is not click's: numbered when it is the broker's."""
    if _is_database_failure(exc):  # SQL Server's number where there is one, else every line of the driver's
        numbered = as_broker_error(exc)
        exc = numbered if numbered.number != DATABASE_FAILURE else BrokerError(
            DATABASE_FAILURE, reason=_joined(str(getattr(exc, "orig", None) or exc)))
    if isinstance(exc, BrokerError):
        return f"error {exc.number}: {exc.message}" if exc.number else f"error: {exc.message}"
    if isinstance(exc, OSError):
        return f"error: {exc}"
    return (f"error: unexpected {type(exc).__name__}: {_joined(str(exc))} "
            "(run again with --debug to see the traceback)")


def _is_database_failure(exc: Exception) -> bool:
    """A failure the database reported: through SQLAlchemy (a DBAPIError) or from a driver
    used directly (a DB-API ``Error``). Only loaded modules are asked: what is not loaded
    cannot have failed."""
    alchemy = sys.modules.get("sqlalchemy.exc")
    if alchemy is not None and isinstance(exc, alchemy.DBAPIError):
        return True
    return any(
        (driver := sys.modules.get(name)) is not None and isinstance(exc, driver.Error) for name in DRIVERS
    )


def _joined(text: str) -> str:
    return " ".join(line.strip() for line in text.splitlines() if line.strip())


def _echo(text: str) -> None:
    """One line on stderr: a message's lines joined, characters that would break the line
    or a terminal shown escaped."""
    click.echo("".join(c if c.isprintable() else repr(c)[1:-1] for c in _joined(text)), err=True)
