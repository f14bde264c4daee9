"""``broker sql``: Service Broker T-SQL scripts run as ``sqlcmd`` runs them (``broker.sql``).

A script comes from ``-c``, from ``-f`` files (run in order, in one session) or from
standard input; on a terminal, a ``1>`` prompt gathers each batch until ``GO``. Outputs
print as they happen: result sets, ``(n rows affected)``, PRINT text, and each error as
``Msg N, Level L, State S, Line X`` and its message on stderr. ``broker.sql`` (lark,
lxml) loads only when the command runs.
"""

from __future__ import annotations

import codecs
import contextlib
import json
import re
import sys
import uuid
from collections.abc import Iterator, Sequence
from datetime import datetime
from decimal import Decimal
from typing import IO, TYPE_CHECKING, Any

import click

from broker import arguments
from cli.params import InputFile, Text, read_at_most
from cli.render import jsonable
from cli.state import CliState, pass_state

if TYPE_CHECKING:
    from broker.sql.outputs import Output, ResultSet
    from broker.sql.session import Session

# A line that ends a batch at the prompt, as broker.sql's batches see one: GO, optionally
# with a count (the session runs the batch that many times) and a comment.
GO_LINE = re.compile(r"[ \t]*GO(?:[ \t]+\d+)?[ \t]*(?:--.*)?", re.IGNORECASE)
ENDS_THE_PROMPT = ("exit", "quit")
UTF16_BOMS = (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)


class Shown:
    """Prints each output of a script as it comes (the session's ``on_output``) and
    remembers whether a batch failed.

    As a table (``sqlcmd``'s form) everything but errors goes to stdout; as JSON Lines
    only the rows do, and PRINT text and row counts go to stderr.
    """

    def __init__(self, *, jsonl: bool) -> None:
        self.jsonl = jsonl
        self.failed = False

    def __call__(self, output: Output) -> None:
        from broker.sql.outputs import Failed, Printed, ResultSet, RowsAffected

        match output:
            case ResultSet():
                for line in (json_lines if self.jsonl else table_lines)(output):
                    click.echo(line)
            case RowsAffected(count=count):
                click.echo(rows_affected(count) if self.jsonl else f"\n{rows_affected(count)}", err=self.jsonl)
            case Printed(text=text):
                click.echo(text, err=self.jsonl)
            case Failed(error=error):
                self.failed = True
                click.echo(f"{error.header()}\n{error.message}", err=True)


def rows_affected(count: int) -> str:
    """``(1 row affected)``, ``(2 rows affected)``."""
    return f"({count} {'row' if count == 1 else 'rows'} affected)"


# -- a result set as a table ------------------------------------------------------------------


def table_lines(result: ResultSet) -> Iterator[str]:
    """Column names, a line of dashes, then the rows; numbers right-aligned, NULL as NULL."""
    cells = [[cell(value) for value in row] for row in result.rows]
    widths = [max([1, len(name), *(len(row[i]) for row in cells)]) for i, name in enumerate(result.columns)]
    yield _joined(name.ljust(width) for name, width in zip(result.columns, widths, strict=True))
    yield _joined("-" * width for width in widths)
    for row, texts in zip(result.rows, cells, strict=True):
        yield _joined(_aligned(value, text, width) for value, text, width in zip(row, texts, widths, strict=True))


def cell(value: Any) -> str:
    """A value as ``sqlcmd`` shows it: NULL, binary as ``0x`` hex, GUIDs upper-case."""
    if value is None:
        return "NULL"
    if isinstance(value, bytes):
        return "0x" + value.hex().upper()
    if isinstance(value, uuid.UUID):
        return str(value).upper()
    if isinstance(value, datetime):
        return value.isoformat(sep=" ")
    return str(value)


def _aligned(value: Any, text: str, width: int) -> str:
    return text.rjust(width) if isinstance(value, int | float | Decimal) else text.ljust(width)


def _joined(texts: Iterator[str]) -> str:
    return " ".join(texts).rstrip()


# -- a result set as JSON Lines -----------------------------------------------------------------


def json_lines(result: ResultSet) -> Iterator[str]:
    """One JSON object per row, keyed by column name (see :func:`keys`)."""
    names = keys(result.columns)
    for row in result.rows:
        yield json.dumps(dict(zip(names, map(json_value, row), strict=True)))


def keys(columns: Sequence[str]) -> list[str]:
    """The JSON keys of a result set's columns: an unnamed column, or a name an earlier
    column took, is ``columnN`` (N its position, from 1)."""
    named: list[str] = []
    for position, name in enumerate(columns, start=1):
        named.append(name if name and name not in named else f"column{position}")
    return named


def json_value(value: Any) -> Any:
    """A value as JSON, as the other commands print them (``cli.render.jsonable``: GUIDs
    and times as strings, binary as UTF-8 text or ``0x`` hex); a decimal is a number when
    a float holds it exactly, else its digits as a string; XML is its text."""
    if isinstance(value, Decimal):
        number = float(value)
        return number if Decimal(repr(number)) == value else str(value)
    if value is None or isinstance(value, int | float | str | bytes | uuid.UUID | datetime):
        return jsonable(value)
    return str(value)


# -- where the script comes from ------------------------------------------------------------------


def script_text(data: bytes, source: str) -> str:
    """A script's bytes as text: UTF-8 (a BOM allowed) or UTF-16 with its BOM, as SQL
    Server's tools save scripts. Anything else is a usage error."""
    utf16 = data.startswith(UTF16_BOMS)
    try:
        return data.decode("utf-16" if utf16 else "utf-8-sig")
    except UnicodeDecodeError as exc:
        raise click.UsageError(f"{source} is not {'UTF-16' if utf16 else 'UTF-8'} text (byte {exc.start})") from None


def scripts_given(text: str | None, files: Sequence[IO[bytes]], stdin: IO[bytes]) -> list[str] | None:
    """The scripts to run, in order, or None for the prompt (standard input is a terminal)."""
    if text is not None and files:
        raise click.UsageError("give -c or -f, not both")
    if text is not None:
        return [text]
    if files:
        return [script_text(_read_script(file, file.name), file.name) for file in files]
    if stdin.isatty():
        return None
    return [script_text(_read_script(stdin, "standard input"), "standard input")]


def _read_script(file: IO[bytes], source: str) -> bytes:
    """A script's bytes, up to nvarchar(max)'s 2 GB (the largest value there is): a usage
    error past it, read no further (``-f /dev/zero`` ends)."""
    data = read_at_most(file, arguments.MAX_BODY_BYTES)
    if data is None:
        raise click.UsageError(f"{source} holds more than {arguments.MAX_BODY_BYTES} bytes, the most a script can")
    return data


def prompt(session: Session) -> None:
    """``sqlcmd``'s prompt: numbered lines (``1>``, ``2>``...) gathered into a batch that a
    ``GO`` line runs; ``exit`` or ``quit`` ends it, and so does the end of input (after
    running the lines typed since the last GO)."""
    with contextlib.suppress(ImportError):  # not on every platform
        import readline  # noqa: F401 - importing it gives input() line editing and history
    lines: list[str] = []
    while True:
        try:
            line = input(f"{len(lines) + 1}> ")
        except EOFError:
            click.echo()
            break
        if line.strip().lower() in ENDS_THE_PROMPT:
            return
        lines.append(line)
        if GO_LINE.fullmatch(line):
            session.run("\n".join(lines))
            lines = []
    if lines:
        session.run("\n".join(lines))


def open_session(state: CliState, shown: Shown) -> Session:
    """A session on the database the command line names; with --instance, USE can switch
    to the instance's other databases, and without --database it starts in master (the
    instance catalog), as sqlcmd does on a server."""
    from broker.sql.session import Session

    if state.on_instance_itself:
        inst = state.instance()
        return Session(inst.msdb, on_output=shown, instance=inst, database_name="master")
    if state.on_instance:
        return Session(state.db(), on_output=shown, instance=state.instance(), database_name=state.database_name)
    return Session(state.db(), on_output=shown)


@click.command("sql")
@click.option("-c", "--command", "text", type=Text("script"), metavar="TEXT", help="The script to run.")
@click.option(
    "-f",
    "--file",
    "files",
    type=InputFile("rb"),
    multiple=True,
    metavar="FILE",
    help="A script file to run; several run in order, in one session.",
)
@click.option(
    "--format",
    "format_",
    type=click.Choice(["table", "jsonl"]),
    default="table",
    show_default=True,
    help="Result sets as tables, or one JSON object per row (PRINT text and row counts then go to stderr).",
)
@pass_state
def sql(state: CliState, text: str | None, files: tuple[IO[bytes], ...], format_: str) -> None:
    """Run Service Broker T-SQL, as sqlcmd does.

    The script comes from -c, from -f files, or from standard input; on a terminal a
    prompt reads batches (1>, 2>, ... then GO; exit or quit to leave). Batches are
    separated by GO lines (GO 3 runs one three times). Variables end with their batch;
    a transaction stays open across batches until COMMIT, ROLLBACK or the end of the
    script, which rolls it back. A batch that fails prints its error (Msg N, Level L,
    State S, Line X) on stderr and the next batch runs; the exit status is then 1.

    With --instance and no --database the session starts in master, the instance
    catalog (USE moves to a member; master and msdb are the catalog).

    \b
    Example:
      broker sql -c "SELECT name FROM sys.service_queues"
      broker sql -f setup.sql -f send.sql
      broker sql --format jsonl < receive.sql
      broker sql
    """
    scripts = scripts_given(text, files, sys.stdin.buffer)
    shown = Shown(jsonl=format_ == "jsonl")
    session = open_session(state, shown)
    try:
        if scripts is None:
            prompt(session)
        else:
            for script in scripts:
                session.run(script)
    finally:
        session.close()
    if shown.failed:
        click.get_current_context().exit(1)


COMMANDS = (sql,)
