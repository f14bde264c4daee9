"""SELECT over queues, catalog views, table variables and the database's own tables,
and the column lists of RECEIVE.

Each source is read whole in the statement's transaction (a queue through its view, a
catalog view through ``sys.*``), then joined, filtered, grouped, ordered and projected
here, with the same expression evaluator every other statement uses: ``.value()`` on a
message body, CAST to XML and the like work in every clause, on every backend, with T-SQL's
rules (case-insensitive comparison, NULL as unknown). Scripts read small result sets;
a large queue is better read through ``broker peek`` or the Python API.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any, TypeGuard, TypeVar, overload

from sqlalchemy import text

from broker.conversations.messages import Message
from broker.inspection import CATALOG_VIEWS, VIEW_COLUMN_TYPES
from broker.sql import moments, values
from broker.sql import nodes as n
from broker.sql.errors import SqlError
from broker.sql.expressions import AGGREGATES, INVALID_COLUMN, Evaluator, Scope, aggregate_key, arithmetic, column_value
from broker.storage.types import UTCDateTime

if TYPE_CHECKING:
    from broker.database import Broker
    from broker.storage.context import TxContext
    from broker.transaction import Transaction

INVALID_OBJECT = 208
AMBIGUOUS_COLUMN = 209
TOO_MANY_PREFIXES = 117
CROSS_DATABASE = 40515
COLUMN_COUNT = 213
OPERAND_TYPE_INVALID = 8117
ASSIGN_AND_RETRIEVE = 141
NOT_IN_GROUP = 8120
HAVING_NOT_IN_GROUP = 8121
ORDER_NOT_IN_GROUP = 8127
RECEIVE_ASSIGN_AND_RETRIEVE = 8447
RECEIVE_ASSIGN_INTO = 8450

QUEUE_COLUMNS = tuple(field.name for field in dataclasses.fields(Message))
# A column of FROM as ``*`` names it: the alias that qualifies it (None: none does) and its name.
Named = tuple[str | None, str]
_QUEUE_NAMES: list[Named] = [(None, column) for column in QUEUE_COLUMNS]
_COLUMN_TYPES = {**VIEW_COLUMN_TYPES, "message_enqueue_time": UTCDateTime()}
# The columns SQL Server types BIGINT: integer arithmetic on them is BIGINT's, not INT's.
_BIGINT_COLUMNS = frozenset({
    "queuing_order", "message_sequence_number", "message_id", "send_sequence", "receive_sequence",
    "end_dialog_sequence", "system_sequence", "first_out_of_order_sequence", "last_out_of_order_sequence",
    "total_bytes_sent", "total_bytes_received", "total_fragments_sent", "total_fragments_received",
    "total_sends", "total_receives"})
_PLAIN_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

# (columns, rows, assignments); an assigning SELECT's rows are evaluated as they are read.
Projected = tuple[tuple[str, ...], Iterable[tuple[Any, ...]], list[tuple[str, str]]]
Row = dict[str, Any]
T = TypeVar("T")
S = TypeVar("S", bound=Sequence[Any])


# -- RECEIVE ------------------------------------------------------------------------------


def check_receive_list(items: list[n.SelectItem], into: str | None) -> None:
    """A RECEIVE's column list may assign variables or return columns, not both (8447),
    and assignments take no INTO (8450): checked before it takes any message."""
    assigning = [item for item in items if item.variable is not None]
    if assigning and len(assigning) != len(items):
        raise SqlError(RECEIVE_ASSIGN_AND_RETRIEVE, "A RECEIVE statement that assigns a value to a variable must "
                                                    "not be combined with data retrieval operations.")
    if assigning and into is not None:
        raise SqlError(RECEIVE_ASSIGN_INTO, "A RECEIVE statement that assigns a value to a variable must not "
                                            "have an INTO clause.")


def check_receive(items: list[n.SelectItem], into: str | None, scope: Scope) -> None:
    """What SQL Server checks when it compiles a RECEIVE, checked before it takes any
    message (a failing statement must leave the queue as it was): the column list
    (8447, 8450), its variables (137), columns (207), and the INTO table (1087, 213)."""
    check_receive_list(items, into)
    row: Row = dict.fromkeys(QUEUE_COLUMNS)
    columns, plan = _plan(items, _QUEUE_NAMES)
    for item in items:
        if item.variable is not None:
            scope.scalar(item.variable)
    for _label, expr in plan:
        for node in _nodes(expr):
            if isinstance(node, n.Variable):
                scope.scalar(node.name)
            elif isinstance(node, n.Column) and not column_value(row, node.parts)[0]:
                raise SqlError(INVALID_COLUMN, f"Invalid column name '{node.parts[-1]}'.")
    if into is not None and len(scope.table(into).columns) != len(columns):
        raise SqlError(COLUMN_COUNT, "Column name or number of supplied values does not match table definition.")


def _nodes(expr: Any) -> Iterable[n.Expr]:
    """``expr`` and the expressions inside it, not those of a subquery (its own scope)."""
    for node in _exprs(expr):
        yield node
        yield from _nodes(tuple(_children(node)))


def _exprs(value: Any) -> Iterator[n.Expr]:
    """The expressions ``value`` holds: itself, those of a (nested) tuple, or none."""
    if isinstance(value, tuple):
        for item in value:
            yield from _exprs(item)
    elif isinstance(value, n.Expr):
        yield value


def _children(expr: n.Expr) -> Iterator[n.Expr]:
    """The expressions directly inside ``expr``; none of a subquery's (its own scope)."""
    if isinstance(expr, (n.Subquery, n.Exists)) or not dataclasses.is_dataclass(expr):
        return
    for field in dataclasses.fields(expr):
        yield from _exprs(getattr(expr, field.name))


def project_messages(items: list[n.SelectItem], messages: list[Message], evaluator: Evaluator,
                     into: str | None) -> Projected:
    """A RECEIVE's column list over the messages it took: (columns, rows, assignments)."""
    check_receive_list(items, into)
    assigning = [item for item in items if item.variable is not None]
    rows = [_message_row(message) for message in messages]
    columns, projected = _project(items, rows, evaluator, _QUEUE_NAMES)
    assignments = [(item.variable, item.operator) for item in assigning if item.variable is not None]
    return columns, projected, assignments


def _message_row(message: Message) -> Row:
    return {name: _typed(name, getattr(message, name)) for name in QUEUE_COLUMNS}


def _typed(column: str, value: Any) -> Any:
    """A column's value as T-SQL sees it: a BIGINT column's integers are ``BigInt``, and
    a datetime (kept zoned, in UTC) is naive UTC, as GETUTCDATE() and literals are."""
    if isinstance(value, datetime):
        return moments.naive(value)
    return values.BigInt(value) if column in _BIGINT_COLUMNS and isinstance(value, int) else value


def local_object(name: tuple[str, ...], database: str) -> tuple[str, ...]:
    """The ``[schema.]object`` of a ``[[[server.]database.]schema.]object`` name, which
    must be in the session's database: a database here reaches no other one, so a server
    or another database is refused (40515, as Azure SQL Database does), never read from here."""
    if len(name) > 4:
        raise SqlError(TOO_MANY_PREFIXES, f"The object name '{'.'.join(name)}' contains more than the maximum "
                                          "number of prefixes. The maximum is 3.")
    if len(name) == 4 or (len(name) == 3 and name[0].casefold() != database.casefold()):
        raise SqlError(CROSS_DATABASE, f"Reference to database and/or server name in '{'.'.join(name)}' is not "
                                       "supported in this version of SQL Server.")
    return name[-2:]


# -- SELECT -------------------------------------------------------------------------------


def run_select_statement(tx: Transaction, db: Broker, select: n.Select, evaluator: Evaluator) -> Projected:
    """A SELECT statement: its result set, or the values it assigns to variables."""
    assigning = [item for item in select.items if item.variable is not None]
    if assigning and len(assigning) != len(select.items):
        raise SqlError(ASSIGN_AND_RETRIEVE, "A SELECT statement that assigns a value to a variable must not be "
                                            "combined with data-retrieval operations.")
    assignments = [(item.variable, item.operator) for item in assigning if item.variable is not None]
    if assignments:
        return (*_evaluate_lazily(tx, db, select, evaluator), assignments)
    columns, rows = _evaluate(tx, db, select, evaluator)
    return columns, rows, assignments


def run_select(tx: Transaction, db: Broker, select: n.Select, evaluator: Evaluator) -> tuple[tuple[str, ...],
                                                                                            list[Row]]:
    """A SELECT used as a subquery or in EXISTS: its rows as dicts by column name."""
    columns, rows = _evaluate(tx, db, select, evaluator)
    return columns, [dict(zip(columns, row, strict=True)) for row in rows]


def _evaluate(tx: Transaction, db: Broker, select: n.Select, evaluator: Evaluator) -> tuple[tuple[str, ...],
                                                                                          list[tuple[Any, ...]]]:
    rows, names = _filtered(tx, db, select, evaluator)
    columns, projected = _project(select.items, rows, evaluator, names)
    if select.order_by:
        projected = _order(select, columns, rows, projected, evaluator)
    if select.distinct:
        projected = _distinct(projected)
    return columns, _top(select, projected, evaluator)


def _evaluate_lazily(tx: Transaction, db: Broker, select: n.Select,
                     evaluator: Evaluator) -> tuple[tuple[str, ...], Iterator[tuple[Any, ...]]]:
    """An assigning SELECT: each row's values are evaluated when the row is read, after the
    previous row's assignments, so ``SELECT @s = @s + name ... ORDER BY name`` accumulates
    as in SQL Server."""
    rows, names = _filtered(tx, db, select, evaluator)
    columns, plan = _plan(select.items, names)
    outputs: list[Sequence[Any]] = [_Outputs(plan, row, evaluator) for row in rows]
    if select.order_by:
        outputs = _order(select, columns, rows, outputs, evaluator)
    if select.distinct:
        outputs = list(_distinct([tuple(out) for out in outputs]))
    return columns, (tuple(out) for out in _top(select, outputs, evaluator))


class _Outputs(Sequence[Any]):
    """One row's select-list values, each evaluated when it is read."""

    def __init__(self, plan: list[tuple[str, n.Expr]], row: Row, evaluator: Evaluator) -> None:
        self._exprs = [expr for _, expr in plan]
        self._row = row
        self._evaluator = evaluator

    def __len__(self) -> int:
        return len(self._exprs)

    @overload
    def __getitem__(self, index: int) -> Any: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[Any]: ...

    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            return [self._evaluator.value(expr, self._row) for expr in self._exprs[index]]
        return self._evaluator.value(self._exprs[index], self._row)


def _filtered(tx: Transaction, db: Broker, select: n.Select, evaluator: Evaluator) -> tuple[list[Row], list[Named]]:
    """The rows of FROM that WHERE keeps, grouped when the SELECT groups or aggregates,
    and the columns ``*`` names."""
    rows, tables = _from(tx, db, select, evaluator)
    names = [(table.alias, column) for table in tables for column in table.columns]
    if select.where is not None:
        rows = [row for row in rows if evaluator.condition(select.where, row)]
    if select.group_by or _has_aggregate(select):
        _check_grouped(select, names, tables)
        rows = _group(select, rows, evaluator)
    return rows, names


def _top(select: n.Select, rows: list[T], evaluator: Evaluator) -> list[T]:
    if select.top is None:
        return rows
    return rows[:values.top_count(evaluator.value(select.top))]


@dataclasses.dataclass(frozen=True)
class _Table:
    """One table of FROM, read whole: its rows (keyed by ``_keyed``), the alias that
    qualifies its columns, the name an error shows it by, and its columns in order."""
    rows: list[Row]
    alias: str | None
    shown: str
    columns: list[str]

    def null_row(self) -> Row:
        """What a LEFT JOIN gives for this table when no row matches: NULL in every column."""
        return _keyed(dict.fromkeys(self.columns), self.alias)


def _from(tx: Transaction, db: Broker, select: n.Select, evaluator: Evaluator) -> tuple[list[Row], list[_Table]]:
    """The joined rows of the FROM clause, keyed ``alias.column`` and ``column``, and its
    tables; no FROM: one empty row. Every table is read, and the statement's unqualified
    columns checked against them (209), before any join condition runs."""
    if not select.sources:
        return [{}], []
    items = [(_source(tx, db, item.source, evaluator),
              [(join, _source(tx, db, join.source, evaluator)) for join in item.joins]) for item in select.sources]
    tables = [table for first, joins in items for table in (first, *(right for _, right in joins))]
    _check_unambiguous(select, tables)
    rows: list[Row] | None = None
    for first, joins in items:
        joined = first.rows
        for join, right in joins:
            joined = _join(joined, right, join, evaluator)
        rows = joined if rows is None else [{**left, **row} for left in rows for row in joined]
    return rows or [], tables


def _join(left: list[Row], right: _Table, join: n.Join, evaluator: Evaluator) -> list[Row]:
    result: list[Row] = []
    for row in left:
        matched = False
        for other in right.rows:
            combined = {**row, **other}
            if join.condition is None or evaluator.condition(join.condition, combined):
                result.append(combined)
                matched = True
        if not matched and join.kind == "LEFT":
            result.append({**row, **right.null_row()})
    return result


def _check_unambiguous(select: n.Select, tables: list[_Table]) -> None:
    """209 for a column the statement names without a table that more than one table of
    FROM has (a joined row holds the last one's value under the bare name). ``*`` names
    each column by its table; ORDER BY may name a select-list column by its label."""
    counts = Counter(column.lower() for table in tables for column in table.columns)
    ambiguous = {column for column, count in counts.items() if count > 1}
    if not ambiguous:
        return
    labels = Counter(_label(item).lower() for item in select.items if item.expr is not None)
    ordering = [expr for expr, _ in select.order_by if not (isinstance(expr, n.Column) and len(expr.parts) == 1
                                                            and labels[expr.parts[0].lower()] == 1)]
    conditions = [join.condition for item in select.sources for join in item.joins]
    exprs = [item.expr for item in select.items] + [select.where, *select.group_by, select.having, *ordering]
    for node in _nodes(tuple(exprs + conditions)):
        name = _bare_column(node)
        if name is not None and name.lower() in ambiguous:
            raise SqlError(AMBIGUOUS_COLUMN, f"Ambiguous column name '{name}'.")


def _bare_column(node: n.Expr) -> str | None:
    """The column ``node`` names without a table (as ``name`` or ``name.value(...)``), if it does."""
    if isinstance(node, n.Column) and len(node.parts) == 1:
        return node.parts[0]
    if isinstance(node, n.Call) and len(node.name) == 2:
        return node.name[0]
    return None


def _source(tx: Transaction, db: Broker, source: n.TableSource, evaluator: Evaluator) -> _Table:
    if source.derived is not None:
        names, derived = _evaluate(tx, db, source.derived, evaluator)
        plain = [dict(zip(names, row, strict=True)) for row in derived]
        return _Table([_keyed(row, source.alias) for row in plain], source.alias, source.alias or "", list(names))
    if source.variable is not None:
        table = evaluator.scope.table(source.variable)
        alias = source.alias or source.variable
        declared = [name for name, _type in table.columns]
        return _Table([_keyed(row, alias) for row in table.rows], alias, alias, declared)
    assert source.name is not None
    local = local_object(source.name, evaluator.session.database_name)
    sql_name, default_alias = _sql_name(tx, db, source.name, local)
    columns, rows = tx.read(lambda ctx: _read_all(ctx, sql_name))
    alias = source.alias or default_alias
    shown = source.alias or ".".join(part for part in local if part)
    return _Table([_keyed(row, alias) for row in rows], alias, shown, columns)


def _read_all(ctx: TxContext, sql_name: str) -> tuple[list[str], list[Row]]:
    query = text(f"SELECT * FROM {sql_name}").columns(**_COLUMN_TYPES)
    result = ctx.conn.execute(query)
    columns = list(result.keys())
    return columns, [{column: _typed(column, value) for column, value in zip(columns, row, strict=True)}
                     for row in result]


def _keyed(row: Mapping[str, Any], alias: str | None) -> Row:
    keyed = {name.lower(): value for name, value in row.items()}
    if alias:
        keyed.update({f"{alias.lower()}.{name.lower()}": value for name, value in row.items()})
    return keyed


def _sql_name(tx: Transaction, db: Broker, name: tuple[str, ...], local: tuple[str, ...]) -> tuple[str, str]:
    """The SQL name of a catalog view, a queue's view or a table (``local``, the
    ``[schema.]object`` of ``name``), and its default alias."""
    parts = [part for part in local if part]
    last = parts[-1]
    backend = db.state.backend
    quote = db.engine.dialect.identifier_preparer.quote_identifier
    if len(parts) >= 2 and parts[-2].lower() == "sys":
        if last.lower() not in CATALOG_VIEWS:
            raise SqlError(INVALID_OBJECT, f"Invalid object name '{'.'.join(name)}'.")
        return backend.catalog_view(last.lower()), last
    queue = tx.read(lambda ctx: ctx.catalog.queue_named(last))
    if queue is not None:
        return quote(backend.queue_view_name(queue.name, queue.id)), last
    if _PLAIN_NAME.match(last) is None:
        raise SqlError(INVALID_OBJECT, f"Invalid object name '{'.'.join(name)}'.")
    exists = tx.read(lambda ctx: backend.object_name_taken(ctx.conn, last))
    if not exists:
        raise SqlError(INVALID_OBJECT, f"Invalid object name '{'.'.join(name)}'.")
    return quote(last), last


# -- grouping -----------------------------------------------------------------------------


def _aggregates(expr: Any) -> Iterable[n.Call]:
    """The aggregate calls in an expression (not inside a subquery)."""
    for node in _exprs(expr):
        if _is_aggregate(node):
            yield node
        else:
            yield from _aggregates(tuple(_children(node)))


def _is_aggregate(expr: n.Expr) -> TypeGuard[n.Call]:
    return isinstance(expr, n.Call) and expr.name[-1].upper() in AGGREGATES


def _check_grouped(select: n.Select, names: list[Named], tables: list[_Table]) -> None:
    """A column outside every aggregate and GROUP BY expression, which a group has no one
    value of: 8120 in the select list, 8121 in HAVING, 8127 in ORDER BY (which may also
    name a select-list column by its label or position)."""
    columns, plan = _plan(select.items, names)
    labels = {column.lower() for column in columns if column}
    ordering: list[n.Expr | None] = [
        expr for expr, _ in select.order_by
        if not (isinstance(expr, n.Literal) and isinstance(expr.value, int))
        and not (isinstance(expr, n.Column) and len(expr.parts) == 1 and expr.parts[0].lower() in labels)]
    clauses: list[tuple[str, list[n.Expr | None], int]] = [
        ("'{}' is invalid in the select list", [expr for _, expr in plan], NOT_IN_GROUP),
        ("'{}' is invalid in the HAVING clause", [select.having], HAVING_NOT_IN_GROUP),
        ('"{}" is invalid in the ORDER BY clause', ordering, ORDER_NOT_IN_GROUP)]
    for where, exprs, number in clauses:
        for column in _ungrouped(tuple(exprs), select.group_by):
            shown = _shown_column(column, tables)
            if shown is not None:  # a column no table has is 207, when it is evaluated
                raise SqlError(number, f"Column {where.format(shown)} because it is not contained in either an "
                                       "aggregate function or the GROUP BY clause.")


def _ungrouped(expr: Any, group_by: list[n.Expr]) -> Iterator[n.Column]:
    """The columns of ``expr`` neither inside an aggregate nor part of a GROUP BY expression."""
    for node in _exprs(expr):
        if _is_aggregate(node) or any(_same(node, grouped) for grouped in group_by):
            continue
        if isinstance(node, n.Column):
            yield node
        else:
            yield from _ungrouped(tuple(_children(node)), group_by)


def _same(expr: n.Expr, grouped: n.Expr) -> bool:
    """Whether ``expr`` is the GROUP BY expression ``grouped``; a column may be named with
    its table in one and without in the other."""
    if isinstance(expr, n.Column) and isinstance(grouped, n.Column):
        mine = [part.lower() for part in expr.parts[-2:]]
        theirs = [part.lower() for part in grouped.parts[-2:]]
        return mine[-1] == theirs[-1] and (len(mine) == 1 or len(theirs) == 1 or mine == theirs)
    return expr == grouped


def _shown_column(column: n.Column, tables: list[_Table]) -> str | None:
    """``table.column`` as an error names a column of FROM; None if no table has it."""
    name = column.parts[-1].lower()
    qualifier = column.parts[-2].lower() if len(column.parts) > 1 else None
    for table in tables:
        if qualifier is not None and (table.alias or "").lower() != qualifier:
            continue
        for own in table.columns:
            if own.lower() == name:
                return f"{table.shown}.{own}" if table.shown else own
    return None


def _has_aggregate(select: n.Select) -> bool:
    expressions = [item.expr for item in select.items] + [expr for expr, _ in select.order_by] + [select.having]
    return any(True for expr in expressions for _ in _aggregates(expr))


def _group(select: n.Select, rows: list[Row], evaluator: Evaluator) -> list[Row]:
    """One row per group, carrying the values of its aggregate calls."""
    groups: dict[tuple[Any, ...], list[Row]] = {}
    for row in rows:
        key = tuple(_group_key(evaluator.value(expr, row)) for expr in select.group_by)
        groups.setdefault(key, []).append(row)
    if not select.group_by and not groups:
        groups[()] = []  # an aggregate over no rows still gives one row
    calls = [call for item in select.items for call in _aggregates(item.expr)]
    calls += [call for expr, _ in select.order_by for call in _aggregates(expr)]
    calls += list(_aggregates(select.having))
    result = []
    for members in groups.values():
        row = dict(members[0]) if members else {}
        for call in calls:
            row[aggregate_key(call)] = _aggregate(call, members, evaluator)
        if select.having is None or evaluator.condition(select.having, row):
            result.append(row)
    return result


def _group_key(value: Any) -> Any:
    return value.rstrip().casefold() if isinstance(value, str) else value


def _aggregate(call: n.Call, rows: list[Row], evaluator: Evaluator) -> Any:
    name = call.name[-1].upper()
    if call.star:
        return len(rows)
    if len(call.args) != 1:
        raise SqlError(174, f"The {name.lower()} function requires 1 argument(s).")
    found = [value for row in rows if (value := evaluator.value(call.args[0], row)) is not None]
    if call.distinct:
        found = list({_group_key(value): value for value in found}.values())
    if name in ("COUNT", "COUNT_BIG"):
        return len(found) if name == "COUNT" else values.BigInt(len(found))
    if not found:
        return None
    if name in ("SUM", "AVG"):
        for value in found:
            if not isinstance(value, (int, float, Decimal)):
                raise SqlError(OPERAND_TYPE_INVALID, f"Operand data type {values.type_of(value)} is invalid for "
                                                     f"{name.lower()} operator.")
        total = sum(found)
        if all(isinstance(value, int) for value in found):  # INT's, or BIGINT's when one is (8115 past it)
            total = values.integer_result(total, *found)
        if name == "SUM":
            return total
        # AVG of integers: an integer truncated toward zero (T-SQL's integer division).
        return arithmetic("/", total, len(found)) if isinstance(total, int) else total / len(found)
    ordered = sorted(found, key=functools.cmp_to_key(_compare))
    return ordered[0] if name == "MIN" else ordered[-1]


# -- projection and order -----------------------------------------------------------------


def _project(items: list[n.SelectItem], rows: list[Row], evaluator: Evaluator,
             names: list[Named]) -> tuple[tuple[str, ...], list[tuple[Any, ...]]]:
    columns, plan = _plan(items, names)
    projected = [tuple(evaluator.value(expr, row) for _, expr in plan) for row in rows]
    return columns, projected


def _plan(items: list[n.SelectItem], names: list[Named]) -> tuple[tuple[str, ...], list[tuple[str, n.Expr]]]:
    """The columns of a select list and the expression of each: ``*`` is every column of
    every table, each read through its table (two tables' ``a`` are two columns)."""
    columns: list[str] = []
    plan: list[tuple[str, n.Expr]] = []
    for item in items:
        if item.expr is None:
            for alias, name in names:
                if item.table and (alias or "").lower() != item.table.lower():
                    continue
                columns.append(name)
                plan.append((name, n.Column((alias, name) if alias else (name,))))
            continue
        columns.append(_label(item))
        plan.append((_label(item), item.expr))
    return tuple(columns), plan


def _label(item: n.SelectItem) -> str:
    """The column name of a select-list expression: its alias, a column's name, or none."""
    return item.alias or (item.expr.parts[-1] if isinstance(item.expr, n.Column) else "")


def _order(select: n.Select, columns: tuple[str, ...], rows: list[Row], projected: list[S],
           evaluator: Evaluator) -> list[S]:
    aliases = {column.lower(): index for index, column in enumerate(columns) if column}

    def keys(pair: tuple[Row, Sequence[Any]]) -> list[Any]:
        row, out = pair
        found = []
        for expr, _descending in select.order_by:
            if isinstance(expr, n.Literal) and isinstance(expr.value, int):
                if not 1 <= expr.value <= len(out):
                    raise SqlError(108, f"The ORDER BY position number {expr.value} is out of range of the number "
                                        "of items in the select list.")
                found.append(out[expr.value - 1])
            elif isinstance(expr, n.Column) and len(expr.parts) == 1 and expr.parts[0].lower() in aliases:
                found.append(out[aliases[expr.parts[0].lower()]])
            else:
                found.append(evaluator.value(expr, row))
        return found

    keyed = [(keys(pair), pair[1]) for pair in zip(rows, projected, strict=True)]
    directions = [descending for _, descending in select.order_by]

    def compare(a: tuple[list[Any], Any], b: tuple[list[Any], Any]) -> int:
        for left, right, descending in zip(a[0], b[0], directions, strict=True):
            outcome = _compare(left, right)
            if outcome:
                return -outcome if descending else outcome
        return 0

    return [out for _, out in sorted(keyed, key=functools.cmp_to_key(compare))]


def _compare(left: Any, right: Any) -> int:
    """Ordering as SQL Server sorts: NULL first, then by value."""
    if left is None or right is None:
        return (left is not None) - (right is not None)
    if values.compare("<", left, right):
        return -1
    return 1 if values.compare(">", left, right) else 0


def _distinct(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    seen: dict[tuple[Any, ...], tuple[Any, ...]] = {}
    for row in rows:
        seen.setdefault(tuple(_group_key(value) for value in row), row)
    return list(seen.values())
