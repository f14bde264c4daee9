"""SELECT's part of the tree-to-``nodes`` transformer: its items, sources, joins, table
hints, grouping and order."""

from __future__ import annotations

from typing import Any

from lark import Token, v_args

from broker.sql import nodes as n
from broker.sql.errors import SqlError
from broker.sql.expression_syntax import ExpressionBuild
from broker.sql.syntax import (
    Clause,
    Name,
    ObjectName,
    line_of,
    of_type,
    present,
    statement,
    token_kinds,
)

UNKNOWN_TABLE_HINT = 321
HINT_NEEDS_WITH = 1018
# SQL Server's table hints that take no argument. Every read here is a snapshot or runs
# in the script's transaction, which takes no table locks: each is accepted and changes
# nothing (docs/sql.md).
TABLE_HINTS = frozenset({
    "NOLOCK", "READUNCOMMITTED", "READCOMMITTED", "READCOMMITTEDLOCK", "REPEATABLEREAD", "SERIALIZABLE",
    "SNAPSHOT", "HOLDLOCK", "UPDLOCK", "XLOCK", "ROWLOCK", "PAGLOCK", "TABLOCK", "TABLOCKX", "NOWAIT",
    "READPAST", "NOEXPAND", "FORCESEEK", "FORCESCAN",
})
# The hints SQL Server still takes without WITH, one alone: ``FROM t (NOLOCK)``.
HINTS_WITHOUT_WITH = frozenset({
    "NOLOCK", "READUNCOMMITTED", "UPDLOCK", "REPEATABLEREAD", "SERIALIZABLE", "READCOMMITTED", "TABLOCK",
    "TABLOCKX", "PAGLOCK", "ROWLOCK", "NOWAIT", "READPAST", "XLOCK", "SNAPSHOT", "NOEXPAND",
})


class QueryBuild(ExpressionBuild):
    """One method per SELECT rule of the grammar (on the expressions' ones: TOP n reads a number)."""

    # -- select ---------------------------------------------------------------------------

    def all_columns(self, _children: list[Any]) -> n.SelectItem:
        return n.SelectItem(None)

    def table_columns(self, children: list[Any]) -> n.SelectItem:
        return n.SelectItem(None, table=str(children[0]))

    def assign_column(self, children: list[Any]) -> n.SelectItem:
        variable, op, value = children
        return n.SelectItem(value, variable=str(variable), operator=str(op))

    def assign_op(self, children: list[Token]) -> str:
        return str(children[0])

    def aliased_column_first(self, children: list[Any]) -> n.SelectItem:
        alias, value = children
        return n.SelectItem(value, alias=str(alias))

    def column(self, children: list[Any]) -> n.SelectItem:
        value = children[0]
        alias = children[-1]
        return n.SelectItem(value, alias=str(alias) if alias is not None else None)

    def top(self, children: list[Any]) -> n.Expr:
        expressions: list[n.Expr] = of_type(children, n.Expr)
        if expressions:
            return expressions[0]
        number = next(child for child in children if isinstance(child, Token) and child.type == "NUMBER")
        return self.number([number])

    def table(self, children: list[Any]) -> n.TableSource:
        name, alias = of_type(children, ObjectName)[0], next((child for child in children if type(child) is Name), None)
        return n.TableSource(tuple(name), alias=None if alias is None else str(alias))

    @v_args(meta=True)
    def table_hints(self, meta: Any, children: list[Any]) -> Clause:
        """WITH (hint, ...): checked, then dropped (a snapshot read takes no locks: docs/sql.md)."""
        for hint in of_type(children, Name):
            if hint.upper() not in TABLE_HINTS:
                raise SqlError(UNKNOWN_TABLE_HINT, f"'{hint}' is not a recognized table hints option. If it is "
                                                   "intended as a parameter to a table-valued function or to the "
                                                   "CHANGETABLE function, ensure that your database compatibility "
                                                   "mode is set to 90.", line=line_of(meta, self.offset))
        return Clause("hints", None)

    @v_args(meta=True)
    def table_hints_without_with(self, meta: Any, children: list[Any]) -> Clause:
        """The old form, ``FROM t (NOLOCK)``: one hint of those SQL Server still takes so (1018 otherwise)."""
        hints = of_type(children, Name)
        if len(hints) > 1 or hints[0].upper() not in HINTS_WITHOUT_WITH:
            near = hints[1] if len(hints) > 1 else hints[0]
            raise SqlError(HINT_NEEDS_WITH, f"Incorrect syntax near '{near}'. If this is intended as a part of a "
                                            "table hint, A WITH keyword and parenthesis are now required. See SQL "
                                            "Server Books Online for proper syntax.", line=line_of(meta, self.offset))
        return Clause("hints", None)

    def table_variable(self, children: list[Any]) -> n.TableSource:
        values = present(children)
        return n.TableSource(None, alias=str(values[1]) if len(values) > 1 else None, variable=str(values[0]))

    def derived_table(self, children: list[Any]) -> n.TableSource:
        values = present(children)
        return n.TableSource(None, alias=str(values[-1]), derived=values[0])

    def inner_join(self, children: list[Any]) -> n.Join:
        values = present(children)
        return n.Join("INNER", values[0], values[1])

    def left_join(self, children: list[Any]) -> n.Join:
        values = present(children)
        return n.Join("LEFT", values[0], values[1])

    def cross_join(self, children: list[Any]) -> n.Join:
        return n.Join("CROSS", present(children)[0], None)

    def from_item(self, children: list[Any]) -> n.FromItem:
        return n.FromItem(children[0], list(children[1:]))

    def order_item(self, children: list[Any]) -> tuple[n.Expr, bool]:
        return children[0], "DESC" in token_kinds(children)

    def select_options(self, children: list[Any]) -> Clause:
        return Clause("options", (children[0] is not None, children[1]))

    def into_clause(self, children: list[Any]) -> Clause:
        variables = [str(child) for child in children if isinstance(child, Token) and child.type == "VARIABLE"]
        return Clause("into", variables[0] if variables else None)

    def from_clause(self, children: list[Any]) -> Clause:
        return Clause("from", of_type(children, n.FromItem))

    def where_clause(self, children: list[Any]) -> Clause:
        return Clause("where", next(iter(of_type(children, n.Expr)), None))

    having_clause = where_clause

    def group_clause(self, children: list[Any]) -> Clause:
        return Clause("group", of_type(children, n.Expr))

    def order_clause(self, children: list[Any]) -> Clause:
        return Clause("order", [child for child in children if isinstance(child, tuple)])

    @statement
    def select(self, children: list[Any], _meta: Any) -> n.Select:
        clauses = of_type(children, Clause)
        distinct, top = clauses[0].value
        into, sources, where, group_by, having, order_by = (clause.value for clause in clauses[1:])
        return n.Select(of_type(children, n.SelectItem), top=top, distinct=distinct, into=into, sources=sources,
                        where=where, group_by=group_by, having=having, order_by=order_by)
