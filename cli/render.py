"""Printing rows: rich tables on a terminal, tab-separated text otherwise, or JSON.

Message bodies print as text when they are UTF-8 and as ``0x...`` hex otherwise
(SQL Server's notation for varbinary). rich loads only when output goes to a terminal.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import IO, TYPE_CHECKING, Any, TypeVar

import click

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

    import broker

F = TypeVar("F", bound=Callable[..., Any])


def json_option(command: F) -> F:
    """Add the ``--json`` flag every listing takes."""
    return click.option(
        "--json", "as_json", is_flag=True, help="Print a JSON array instead of a table."
    )(command)


def plural(count: int, noun: str) -> str:
    """``1 message``, ``2 messages``."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


def body_text(body: bytes | None) -> str | None:
    """A message body as text: UTF-8 decoded, or ``0x`` hex when it is not UTF-8."""
    if body is None:
        return None
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        return "0x" + body.hex().upper()


def jsonable(value: Any) -> Any:
    """A catalog or message value as JSON: ids as strings, times in ISO 8601."""
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, bytes):
        return body_text(value)
    return value


def message_dict(message: broker.Message) -> dict[str, Any]:
    """The RECEIVE columns of one message, by name."""
    return dataclasses.asdict(message)


@dataclasses.dataclass(frozen=True)
class Listing:
    """Rows to print under chosen columns, with an optional title."""

    rows: Sequence[Mapping[str, Any]]
    columns: Sequence[str]
    title: str | None = None


def terminal_console(*, stderr: bool = False) -> Console | None:
    """A rich console when stdout (or stderr) is a terminal as rich sees it, else None."""
    if not _may_be_terminal(sys.stderr if stderr else sys.stdout):
        return None  # rich would say the same: not worth importing it
    from rich.console import Console

    console = Console(stderr=stderr)
    return console if console.is_terminal else None


def _may_be_terminal(stream: IO[str]) -> bool:
    """False only where rich's ``Console.is_terminal`` is False too: no terminal and
    neither of the variables that make rich treat a pipe as one."""
    if "TTY_COMPATIBLE" in os.environ or "FORCE_COLOR" in os.environ:
        return True
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


def rich_table(listing: Listing) -> Table:
    """A listing as a rich table (for a terminal)."""
    from rich.table import Table
    from rich.text import Text

    table = Table(title=listing.title, title_justify="left")
    for column in listing.columns:
        table.add_column(column, overflow="fold")  # wrap long names, never cut them
    for row in listing.rows:
        table.add_row(*(Text(_cell(row.get(c))) for c in listing.columns))
    return table


def plain_lines(listing: Listing) -> Iterator[str]:
    """A listing as tab-separated lines (for pipes): ``# title``, the header, one line per row."""
    if listing.title is not None:
        yield f"# {listing.title}"
    yield "\t".join(listing.columns)
    for row in listing.rows:
        yield "\t".join(_flat(_cell(row.get(c))) for c in listing.columns)


def emit(
    rows: Iterable[Mapping[str, Any]],
    columns: Sequence[str],
    *,
    as_json: bool,
    title: str | None = None,
) -> None:
    """Print ``rows``: every key as JSON, or the chosen ``columns`` as a table."""
    rows = list(rows)
    if as_json:
        click.echo(json.dumps([{k: jsonable(v) for k, v in row.items()} for row in rows], indent=2))
        return
    listing = Listing(rows, columns, title)
    console = terminal_console()
    if console is not None:
        console.print(rich_table(listing))
        return
    for line in plain_lines(listing):
        click.echo(line)


def flush_stdout() -> None:
    """Push what was printed to stdout out now, so a failed write (a full disk, a closed
    pipe) raises here, while the caller can still undo its work."""
    sys.stdout.flush()


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, datetime):
        return value.isoformat(sep=" ", timespec="seconds")
    return str(jsonable(value))


def _flat(text: str) -> str:
    # One row per line in tab-separated output.
    return " ".join(text.split()) if any(c in text for c in "\t\r\n") else text
