"""SET options of a T-SQL session: which ones scripts may carry, and what each does here.

Scripts from SQL Server's tools begin with ``SET ANSI_NULLS ON``, ``SET QUOTED_IDENTIFIER
ON``, ``SET NOCOUNT ON`` and their kin. A session runs with SQL Server's defaults for the
options that change how text is read or values are computed; setting one of them to that
default is accepted, the other way is refused (40517) rather than misread. ``NOCOUNT`` and
``XACT_ABORT`` do what they do in SQL Server; ``LOCK_TIMEOUT`` and ``DEADLOCK_PRIORITY``
are kept (``@@LOCK_TIMEOUT`` reads the first) and change no wait; ``TRANSACTION ISOLATION
LEVEL`` is accepted and changes nothing (docs/sql.md says why). A name SQL Server has no
SET option for is its error 195, found while the batch compiles.

As in SQL Server, options a stored procedure sets are restored when it returns.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from broker.sql import nodes as n
from broker.sql import values
from broker.sql.errors import SqlError

NOT_A_SET_OPTION = 195
UNSUPPORTED = 40517
INCORRECT_SYNTAX = 102

# SQL Server's SET statements that take one word after SET (STATISTICS IO and the
# others of two words, and IDENTITY_INSERT t, are not in the grammar at all).
SQL_SERVER_OPTIONS = frozenset({
    "ANSI_DEFAULTS", "ANSI_NULL_DFLT_OFF", "ANSI_NULL_DFLT_ON", "ANSI_NULLS", "ANSI_PADDING", "ANSI_WARNINGS",
    "ARITHABORT", "ARITHIGNORE", "CONCAT_NULL_YIELDS_NULL", "CONTEXT_INFO", "CURSOR_CLOSE_ON_COMMIT", "DATEFIRST",
    "DATEFORMAT", "DEADLOCK_PRIORITY", "FIPS_FLAGGER", "FMTONLY", "FORCEPLAN", "IMPLICIT_TRANSACTIONS", "LANGUAGE",
    "LOCK_TIMEOUT", "NOCOUNT", "NOEXEC", "NUMERIC_ROUNDABORT", "OFFSETS", "PARSEONLY", "QUERY_GOVERNOR_COST_LIMIT",
    "QUOTED_IDENTIFIER", "REMOTE_PROC_TRANSACTIONS", "ROWCOUNT", "SHOWPLAN_ALL", "SHOWPLAN_TEXT", "SHOWPLAN_XML",
    "TEXTSIZE", "XACT_ABORT",
})
# ON/OFF options whose value here is fixed: the one the session runs with. ARITHABORT
# takes both: with ANSI_WARNINGS ON (fixed) its OFF changes nothing in SQL Server either.
FIXED = {
    "ANSI_NULLS": True, "QUOTED_IDENTIFIER": True, "ANSI_PADDING": True, "ANSI_WARNINGS": True,
    "CONCAT_NULL_YIELDS_NULL": True, "NUMERIC_ROUNDABORT": False, "IMPLICIT_TRANSACTIONS": False,
}
SWITCHES = frozenset({"NOCOUNT", "XACT_ABORT", "ARITHABORT", *FIXED})
DEADLOCK_PRIORITIES = {"LOW": -5, "NORMAL": 0, "HIGH": 5}


def check_name(name: str, line: int) -> str:
    """An option's name as the batch compiles: upper case, or 195 for a name SQL Server
    has no SET option for."""
    upper = name.upper()
    if upper not in SQL_SERVER_OPTIONS:
        raise SqlError(NOT_A_SET_OPTION, f"'{name}' is not a recognized SET option.", line=line, level=15)
    return upper


@dataclass
class Options:
    """The SET options of one session that change something (the rest are checked only)."""

    nocount: bool = False
    xact_abort: bool = False
    lock_timeout: int = -1  # milliseconds; -1: wait for ever (SQL Server's default)
    deadlock_priority: int = 0

    def copy(self) -> Options:
        return Options(self.nocount, self.xact_abort, self.lock_timeout, self.deadlock_priority)

    def restore(self, saved: Options) -> None:
        self.nocount, self.xact_abort = saved.nocount, saved.xact_abort
        self.lock_timeout, self.deadlock_priority = saved.lock_timeout, saved.deadlock_priority

    def switch(self, name: str, on: bool) -> None:
        """SET name ON | OFF (``name`` checked by :func:`check_name`)."""
        if name not in SWITCHES:
            raise _unsupported(f"SET {name}")
        if name in FIXED and FIXED[name] != on:
            fixed = "ON" if FIXED[name] else "OFF"
            raise _unsupported(f"SET {name} {'ON' if on else 'OFF'}", f"scripts run with {name} {fixed}")
        if name == "NOCOUNT":
            self.nocount = on
        elif name == "XACT_ABORT":
            self.xact_abort = on

    def set(self, name: str, value: Any) -> None:
        """SET LOCK_TIMEOUT n, SET DEADLOCK_PRIORITY LOW | NORMAL | HIGH | n, SET
        TRANSACTION ISOLATION LEVEL ... (``value``: the level's words)."""
        if name in SWITCHES:
            raise SqlError(INCORRECT_SYNTAX, f"Incorrect syntax near '{value}'. SET {name} takes ON or OFF.")
        if name == "LOCK_TIMEOUT":
            timeout = values.convert(value, n.TypeName("INT"))
            if timeout is None or timeout < -1:
                raise SqlError(INCORRECT_SYNTAX, f"Incorrect syntax near '{values.written(timeout)}'. LOCK_TIMEOUT "
                                                 "takes -1 (wait for ever), 0 or a number of milliseconds.")
            self.lock_timeout = timeout
        elif name == "DEADLOCK_PRIORITY":
            self.deadlock_priority = _deadlock_priority(value)
        elif name != "TRANSACTION ISOLATION LEVEL":
            raise _unsupported(f"SET {name}")


def _deadlock_priority(value: Any) -> int:
    if isinstance(value, str) and value.upper() in DEADLOCK_PRIORITIES:
        return DEADLOCK_PRIORITIES[value.upper()]
    priority: int | None = values.convert(value, n.TypeName("INT")) if not isinstance(value, str) else None
    if priority is None or not -10 <= priority <= 10:
        raise SqlError(INCORRECT_SYNTAX, f"Incorrect syntax near '{values.written(value)}'. DEADLOCK_PRIORITY "
                                         "takes LOW, NORMAL, HIGH or a number from -10 to 10.")
    return priority


def _unsupported(statement: str, why: str = "the option does not apply here") -> SqlError:
    return SqlError(UNSUPPORTED, f"{statement} is not supported here: {why} (docs/sql.md).")
