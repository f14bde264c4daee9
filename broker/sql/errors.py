"""Errors of T-SQL scripts: SQL Server's numbers, levels and the line they were raised on."""

from __future__ import annotations

from broker.errors import BrokerError

INCORRECT_SYNTAX = 102


class SqlError(BrokerError):
    """A failure while parsing or running a T-SQL batch, shown as ``sqlcmd`` shows it:
    ``Msg 8426, Level 16, State 1, Line 7`` followed by the message."""

    def __init__(self, number: int, message: str, *, line: int = 0, level: int = 16, state: int = 1,
                 procedure: str | None = None, from_raiserror: bool = False) -> None:
        super().__init__(number, message)
        self.line = line
        self.level = level
        self.state = state
        self.procedure = procedure
        # RAISERROR's errors leave the transaction alone even with XACT_ABORT ON (SQL Server's rule).
        self.from_raiserror = from_raiserror
        # Whether it rolls back (or dooms, when caught) the open transaction: SET XACT_ABORT
        # as it was where the error happened (the session stamps it; None until then).
        self.xact_abort: bool | None = None

    @classmethod
    def of(cls, error: BrokerError, line: int, procedure: str | None = None) -> SqlError:
        """The statement-level form of an engine error, at the statement's line."""
        if isinstance(error, SqlError):
            if not error.line:
                error.line = line
            return error
        result = cls(error.number, error.message, line=line, procedure=procedure)
        result.__cause__ = error
        return result

    def header(self) -> str:
        where = f", Procedure {self.procedure}" if self.procedure else ""
        return f"Msg {self.number}, Level {self.level}, State {self.state}{where}, Line {self.line}"

    def __str__(self) -> str:
        return f"{self.header()}\n{self.message}"


class ControlFlow(Exception):  # noqa: N818 - a signal, not an error
    """BREAK, CONTINUE and RETURN unwinding the statement runner."""


class BreakLoop(ControlFlow):
    pass


class ContinueLoop(ControlFlow):
    pass


class ReturnFromBatch(ControlFlow):
    def __init__(self, value: object = None) -> None:
        super().__init__()
        self.value = value


def overflow(type_name: str) -> SqlError:
    """8115: a value past what ``type_name`` holds."""
    return SqlError(8115, f"Arithmetic overflow error converting expression to data type {type_name.lower()}.")
