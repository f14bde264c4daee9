"""The clauses DDL statements share, checked as SQL Server checks them: ``NAME = value``
options (each known and given once), ON / OFF switches, and statements only an instance
runs."""

from __future__ import annotations

from typing import Any

from broker.sql import nodes as n
from broker.sql.errors import SqlError
from broker.sql.expressions import Evaluator
from broker.sql.values import written

INCORRECT_SYNTAX = 102
DUPLICATE_OPTION = 1055
NEEDS_INSTANCE = 40517


def syntax_error(near: str) -> SqlError:
    return SqlError(INCORRECT_SYNTAX, f"Incorrect syntax near '{near}'.")


def options_of(statement: n.Ddl | list[n.Option], known: dict[str, str], evaluator: Evaluator) -> dict[str, Any]:
    """``NAME = value`` options by their verb keyword (``known`` maps T-SQL name to keyword)."""
    given = statement.clauses.get("options", []) if isinstance(statement, n.Ddl) else statement
    found: dict[str, Any] = {}
    for option in given:
        keyword = known.get(option.name)
        if keyword is None:
            raise syntax_error(option.name)
        if keyword in found:
            raise SqlError(DUPLICATE_OPTION, f"'{option.name}' option is specified more than once.")
        found[keyword] = value_of(option.value, evaluator)
    return found


def value_of(value: Any, evaluator: Evaluator) -> Any:
    """An option's value: an expression evaluated, a bare word as its text, ON/OFF as a flag."""
    if isinstance(value, n.Expr):
        return evaluator.value(value)
    return value


def switch(value: Any, what: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, n.Literal):
        raise syntax_error(written(value.value))
    raise syntax_error(what if value is None or isinstance(value, n.Expr) else written(value))


def needs_instance(instance: Any | None, statement: str) -> Any:
    """The instance an instance's statement runs on (40517 when the session has none)."""
    if instance is None:
        raise SqlError(NEEDS_INSTANCE, f"{statement} is an instance's statement: run the script with an instance "
                                       "(broker --instance URL sql).")
    return instance
