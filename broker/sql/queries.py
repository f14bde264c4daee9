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
from collections.abc import Iterable, Iterator, Mapping, Sequence
from decimal import Decimal
from typing import TYPE_CHECKING, Any, TypeVar, overload

from sqlalchemy import text

from broker.conversations.messages import Message
from broker.inspection import CATALOG_VIEWS, VIEW_COLUMN_TYPES
from broker.sql import nodes as n
from broker.sql import values
from broker.sql.errors import SqlError
from broker.sql.expressions import AGGREGATES, INVALID_COLUMN, Evaluator, Scope, aggregate_key, column_value
from broker.storage.types import UTCDateTime

if TYPE_CHECKING:
    from broker.database import Broker
    from broker.storage.context import TxContext
    from broker.transaction import Transaction

INVALID_OBJECT = 208
COLUMN_COUNT = 213
OPERAND_TYPE_INVALID = 8117
ASSIGN_AND_RETRIEVE = 141
NOT_IN_GROUP = 8120
RECEIVE_ASSIGN_AND_RETRIEVE = 8447
RECEIVE_ASSIGN_INTO = 8450

QUEUE_COLUMNS = tuple(field.name for field in dataclasses.fields(Message))
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
    columns, plan = _plan(items, [row], QUEUE_COLUMNS)
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
    if isinstance(expr, tuple):
        for child in expr:
            yield from _nodes(child)
        return
    if not isinstance(expr, n.Expr):
        return
    yield expr
    if isinstance(expr, (n.Subquery, n.Exists)) or not dataclasses.is_dataclass(expr):
        return
    for field in dataclasses.fields(expr):
        yield from _nodes(getattr(expr, field.name))


def project_messages(items: list[n.SelectItem], messages: list[Message], evaluator: Evaluator,
                     into: str | None) -> Projected:
    """A RECEIVE's column list over the messages it took: (columns, rows, assignments)."""
    check_receive_list(items, into)
    assigning = [item for item in items if item.variable is not None]
    rows = [_message_row(message) for message in messages]
    columns, projected = _project(items, rows, evaluator, QUEUE_COLUMNS)
    assignments = [(item.variable, item.operator) for item in assigning if item.variable is not None]
    return columns, projected, assignments


def _message_row(message: Message) -> Row:
    return {name: _typed(name, getattr(message, name)) for name in QUEUE_COLUMNS}


def _typed(column: str, value: Any) -> Any:
    """A column's value as T-SQL sees it (a BIGINT column's integers are ``BigInt``)."""
    return values.BigInt(value) if column in _BIGINT_COLUMNS and isinstance(value, int) else value


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
    columns, plan = _plan(select.items, rows, names)
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


def _filtered(tx: Transaction, db: Broker, select: n.Select, evaluator: Evaluator) -> tuple[list[Row],
                                                                                           tuple[str, ...]]:
    """The rows of FROM that WHERE keeps, grouped when the SELECT groups or aggregates."""
    rows, names = _from(tx, db, select.sources, evaluator)
    if select.where is not None:
        rows = [row for row in rows if evaluator.condition(select.where, row)]
    if select.group_by or _has_aggregate(select):
        rows = _group(select, rows, evaluator)
    return rows, names


def _top(select: n.Select, rows: list[T], evaluator: Evaluator) -> list[T]:
    if select.top is None:
        return rows
    return rows[:values.top_count(evaluator.value(select.top))]


def _from(tx: Transaction, db: Broker, sources: list[n.FromItem], evaluator: Evaluator) -> tuple[list[Row],
                                                                                                tuple[str, ...]]:
    """The joined rows of the FROM clause, keyed ``alias.column`` and ``column``; no FROM: one empty row."""
    if not sources:
        return [{}], ()
    rows: list[Row] | None = None
    names: list[str] = []
    for item in sources:
        joined, columns = _source(tx, db, item.source, evaluator)
        names += columns
        for join in item.joins:
            right, right_columns = _source(tx, db, join.source, evaluator)
            names += right_columns
            joined = _join(joined, right, right_columns, join, evaluator)
        rows = joined if rows is None else [{**left, **row} for left in rows for row in joined]
    return rows or [], tuple(names)


def _join(left: list[Row], right: list[Row], right_columns: list[str], join: n.Join,
          evaluator: Evaluator) -> list[Row]:
    result: list[Row] = []
    empty = {key: None for row in right[:1] for key in row}
    for row in left:
        matched = False
        for other in right:
            combined = {**row, **other}
            if join.condition is None or evaluator.condition(join.condition, combined):
                result.append(combined)
                matched = True
        if not matched and join.kind == "LEFT":
            result.append({**row, **(empty or {column: None for column in right_columns})})
    return result


def _source(tx: Transaction, db: Broker, source: n.TableSource, evaluator: Evaluator) -> tuple[list[Row], list[str]]:
    if source.derived is not None:
        names, derived = _evaluate(tx, db, source.derived, evaluator)
        plain = [dict(zip(names, row, strict=True)) for row in derived]
        return [_keyed(row, source.alias) for row in plain], list(names)
    if source.variable is not None:
        table = evaluator.scope.table(source.variable)
        declared = [name for name, _type in table.columns]
        return [_keyed(row, source.alias or source.variable) for row in table.rows], declared
    assert source.name is not None
    sql_name, alias = _sql_name(tx, db, source.name)
    columns, rows = tx.read(lambda ctx: _read_all(ctx, sql_name))
    return [_keyed(row, source.alias or alias) for row in rows], columns


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


def _sql_name(tx: Transaction, db: Broker, name: tuple[str, ...]) -> tuple[str, str]:
    """The SQL name of a catalog view, a queue's view or a table, and its default alias."""
    parts = [part for part in name if part]
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
    if isinstance(expr, n.Call) and expr.name[-1].upper() in AGGREGATES:
        yield expr
        return
    if isinstance(expr, (n.Subquery, n.Exists)) or not dataclasses.is_dataclass(expr):
        return
    for field in dataclasses.fields(expr):
        value = getattr(expr, field.name)
        children = value if isinstance(value, tuple) else (value,)
        for child in children:
            if isinstance(child, tuple):
                for inner in child:
                    yield from _aggregates(inner)
            elif isinstance(child, n.Expr):
                yield from _aggregates(child)


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
        return len(found)
    if not found:
        return None
    if name in ("SUM", "AVG"):
        for value in found:
            if not isinstance(value, (int, float, Decimal)):
                raise SqlError(OPERAND_TYPE_INVALID, f"Operand data type {values.type_of(value)} is invalid for "
                                                     f"{name.lower()} operator.")
    if name == "SUM":
        return sum(found)
    if name == "AVG":
        total = sum(found)
        return total // len(found) if isinstance(total, int) else total / len(found)
    ordered = sorted(found, key=functools.cmp_to_key(_compare))
    return ordered[0] if name == "MIN" else ordered[-1]


# -- projection and order -----------------------------------------------------------------


def _project(items: list[n.SelectItem], rows: list[Row], evaluator: Evaluator,
             names: Iterable[str]) -> tuple[tuple[str, ...], list[tuple[Any, ...]]]:
    columns, plan = _plan(items, rows, names)
    projected = [tuple(evaluator.value(expr, row) for _, expr in plan) for row in rows]
    return columns, projected


def _plan(items: list[n.SelectItem], rows: list[Row],
          names: Iterable[str]) -> tuple[tuple[str, ...], list[tuple[str, n.Expr]]]:
    """The columns of a select list and the expression of each (``*`` expanded)."""
    columns: list[str] = []
    plan: list[tuple[str, n.Expr]] = []
    for item in items:
        if item.expr is None:
            prefix = f"{item.table.lower()}." if item.table else ""
            for name in dict.fromkeys(names):
                if item.table and not any(f"{prefix}{name.lower()}" in row for row in rows[:1]):
                    continue
                columns.append(name)
                plan.append((name, n.Column((item.table, name) if item.table else (name,))))
            continue
        label = item.alias or (item.expr.parts[-1] if isinstance(item.expr, n.Column) else "")
        columns.append(label)
        plan.append((label, item.expr))
    return tuple(columns), plan


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
