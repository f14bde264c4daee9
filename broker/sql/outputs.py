"""What running a script produces, in order: result sets, messages, row counts and errors."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from broker.sql.errors import SqlError


@dataclass(frozen=True)
class ResultSet:
    """The rows of a SELECT or RECEIVE: column names (an unnamed one is ``""``) and row tuples."""
    columns: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]


@dataclass(frozen=True)
class Printed:
    """A PRINT, or a RAISERROR of severity 10 or less: text for the user, not an error."""
    text: str


@dataclass(frozen=True)
class RowsAffected:
    """``(n rows affected)`` after a statement that returned or changed rows (none under SET NOCOUNT ON)."""
    count: int


@dataclass(frozen=True)
class Failed:
    """An error that ended its batch; the script goes on with the next batch."""
    error: SqlError


Output = ResultSet | Printed | RowsAffected | Failed
