"""Prepared statements for the hot path: SEND and RECEIVE.

A SQLAlchemy Core statement is compiled once per dialect into the driver's SQL, and each
execution goes straight to the DBAPI cursor of the transaction's connection, applying
the column types' own bind and result processors (so a ``GUID`` is still text on SQLite
and ``uuid`` on PostgreSQL). The driver caches the prepared statement by its SQL text.
This skips SQLAlchemy's per-execution work (cache-key generation, result objects), which
otherwise costs several times what SQLite itself spends on a one-message transaction.

The statements run inside the transaction the SQLAlchemy connection has begun; callers
make sure it has (``TxContext`` begins it before anything else runs).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

from sqlalchemy.engine import Connection, Dialect
from sqlalchemy.sql import ClauseElement, Insert
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.expression import Executable
from sqlalchemy.types import LargeBinary, String, TypeDecorator, TypeEngine

from broker.storage.pending import INFO_KEY, Pending, flush

Processor = Callable[[Any], Any] | None


class _MultiRowInsert:
    """A one-row INSERT with positional parameters, repeated as a multi-row INSERT.

    SQLite then runs one statement for many rows instead of one per row, and updates an
    AUTOINCREMENT counter once; it inserts the rows of a VALUES list in the order they
    are listed. (psycopg's ``executemany`` already pipelines its statements.)

    A statement takes at most 64 rows (fewer when they have many columns: SQLite builds
    before 3.32 allow 999 parameters), and at most ``BUDGET`` bytes of blob and text
    values unless it holds one row: SQLite copies every bound value, so a statement's
    values are in memory twice until it has run.
    """

    MAX_PARAMETERS = 999
    BUDGET = 1 << 20

    __slots__ = ("_head", "_row", "_max_rows", "_sized", "_sql")

    def __init__(self, head: str, row: str, columns: int, sized: tuple[int, ...]) -> None:
        self._head, self._row = head, row
        self._max_rows = 1 << min(6, (self.MAX_PARAMETERS // max(1, columns)).bit_length() - 1)
        self._sized = sized  # positions of the blob and unbounded text values in a row
        self._sql: dict[int, str] = {}

    @classmethod
    def of(cls, statement: ClauseElement, sql: str, order: tuple[str, ...] | None,
           types: dict[str, TypeEngine[Any]]) -> _MultiRowInsert | None:
        """The multi-row form of ``statement``, or None when it has none."""
        head, values, row = sql.rpartition(" VALUES ")
        if not (isinstance(statement, Insert) and order is not None and values and row.startswith("(")
                and row.endswith(")") and "(" not in row[1:]):
            return None
        sized = tuple(i for i, name in enumerate(order) if _unbounded(types[name]))
        return cls(head + values, row, len(order), sized)

    def execute(self, cursor: Any, parameters: list[Sequence[Any]]) -> None:
        start, total = 0, len(parameters)
        while start < total:
            size = self._rows_from(parameters, start)
            cursor.execute(self._sql_for(size), [v for row in parameters[start:start + size] for v in row])
            start += size

    def _rows_from(self, parameters: list[Sequence[Any]], start: int) -> int:
        # Powers of two: a handful of statement texts per table for the driver's cache.
        size = min(self._max_rows, 1 << ((len(parameters) - start).bit_length() - 1))
        sized = self._sized
        while size > 1 and sized and sum(
            len(row[i]) for row in parameters[start:start + size] for i in sized if row[i] is not None
        ) > self.BUDGET:
            size >>= 1
        return size

    def _sql_for(self, rows: int) -> str:
        sql = self._sql.get(rows)
        if sql is None:
            sql = self._sql[rows] = self._head + ", ".join([self._row] * rows)
        return sql


def _unbounded(type_: TypeEngine[Any]) -> bool:
    """Whether a column's values can be large: blobs and text without a length."""
    impl = type_.impl_instance if isinstance(type_, TypeDecorator) else type_
    return isinstance(impl, LargeBinary) or (isinstance(impl, String) and impl.length is None)


class _Compiled:
    __slots__ = ("sql", "parameters", "results", "_multirow")

    def __init__(self, statement: ClauseElement, dialect: Dialect, positions: dict[str, int] | None) -> None:
        compiled = statement.compile(dialect=dialect)
        assert isinstance(compiled, SQLCompiler)
        self.sql = compiled.string
        if "POSTCOMPILE" in self.sql:
            raise ValueError("a prepared statement cannot hold an expanding IN (...) list: " + self.sql)
        # Positional paramstyles (SQLite's qmark) need the values in this order; named
        # ones (psycopg's pyformat) take a mapping.
        order = tuple(compiled.positiontup) if compiled.positiontup else None
        named = {name: bind for bind, name in compiled.bind_names.items()}
        self._multirow = _MultiRowInsert.of(statement, self.sql, order, {n: b.type for n, b in named.items()})
        binds: dict[str, Processor] = {
            name: bind.type.dialect_impl(dialect).bind_processor(dialect) for name, bind in named.items()
        }
        # Literals in the statement (``status == 1``, ``LIMIT 1``) compile to parameters
        # too; they carry their own values.
        defaults = {name: bind.effective_value for name, bind in named.items() if not bind.required}
        self.parameters = _parameter_builder(order, binds, defaults, positions)
        columns = getattr(statement, "selected_columns", None)
        if columns is None:
            returning = getattr(statement, "_returning", ())
            columns = returning
        processors = [column.type.dialect_impl(dialect).result_processor(dialect, None) for column in columns]
        # None when no column needs converting (on SQLite the uuid and time columns do).
        self.results = _row_converter(processors)

    def rows(self, raw: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
        convert = self.results
        return raw if convert is None else [convert(row) for row in raw]

    def execute_many(self, cursor: Any, parameters: list[Any]) -> None:
        """Run once per parameter set (an INSERT of many rows: see ``_MultiRowInsert``)."""
        if self._multirow is None or len(parameters) == 1:
            cursor.executemany(self.sql, parameters)
        else:
            self._multirow.execute(cursor, parameters)


def _parameter_builder(
    order: tuple[str, ...] | None, binds: dict[str, Processor], defaults: dict[str, Any],
    positions: dict[str, int] | None,
) -> Callable[[Any], Sequence[Any] | dict[str, Any]]:
    """A function from the caller's values to the driver's parameters: a list in
    ``order`` for positional paramstyles (SQLite's qmark), else a dict (psycopg).
    The caller's values are a mapping by bind name, or with ``positions`` a sequence
    (the name's index in it).

    Generated once per statement, as ``collections.namedtuple`` does: it runs for every
    row SEND writes, where a loop over names and processors would cost more than the
    INSERT itself. Processors take None like any value (SQLAlchemy calls them so too).
    """
    names = order if order is not None else tuple(binds)
    namespace: dict[str, Any] = {}
    items = []
    for index, name in enumerate(names):
        if positions is not None and name in positions:
            value = f"v[{positions[name]}]"
        elif name in defaults:  # a literal; by keyword, a caller may still pass a value
            namespace[f"d{index}"] = defaults[name]
            value = f"d{index}" if positions is not None else f"v.get({name!r}, d{index})"
        else:
            value = f"v[{name!r}]"
        if binds.get(name) is not None:
            namespace[f"p{index}"] = binds[name]
            value = f"p{index}({value})"
        items.append(value if order is not None else f"{name!r}: {value}")
    body = f"[{', '.join(items)}]" if order is not None else f"{{{', '.join(items)}}}"
    exec(f"def build(v):\n    return {body}\n", namespace)  # noqa: S102 - names are SQLAlchemy's bind names
    return cast(Callable[[Any], Sequence[Any] | dict[str, Any]], namespace["build"])


def _row_converter(processors: list[Processor]) -> Callable[[tuple[Any, ...]], tuple[Any, ...]] | None:
    """A function applying the result processors to one row (generated, see above)."""
    if all(process is None for process in processors):
        return None
    namespace: dict[str, Any] = {}
    items = []
    for index, process in enumerate(processors):
        if process is None:
            items.append(f"r[{index}]")
        else:
            namespace[f"p{index}"] = process
            items.append(f"p{index}(r[{index}])")
    exec(f"def convert(r):\n    return ({', '.join(items)},)\n", namespace)  # noqa: S102 - column positions only
    return cast(Callable[[tuple[Any, ...]], tuple[Any, ...]], namespace["convert"])


class Prepared:
    """One statement, compiled on first use for each dialect.

    ``flush=False`` is for reads that the held-back writes cannot change: endpoint
    reads, since every endpoint with a held-back change is kept in ``Pending`` and
    served from there (see ``broker.conversations.endpoints``). Everything else flushes first.

    ``positional`` names the binds in the order a caller passes their values as one
    tuple per row (``defer``, ``execute_many``) instead of as keywords: cheaper for a
    row made once per message.
    """

    __slots__ = ("_statement", "_by_dialect", "_flush", "_positions")

    def __init__(self, statement: Executable, *, flush: bool = True, positional: Sequence[str] | None = None) -> None:
        self._statement = statement
        self._by_dialect: dict[str, _Compiled] = {}
        self._flush = flush
        self._positions = None if positional is None else {name: i for i, name in enumerate(positional)}

    def _compiled(self, dialect: Dialect) -> _Compiled:
        compiled = self._by_dialect.get(dialect.name)
        if compiled is None:
            compiled = _Compiled(self._statement, dialect, self._positions)  # type: ignore[arg-type]
            self._by_dialect[dialect.name] = compiled
        return compiled

    def all(self, conn: Connection, **values: Any) -> list[tuple[Any, ...]]:
        """Execute and return every row, type-processed."""
        compiled = self._compiled(conn.dialect)
        cursor = _cursor(conn, flush_first=self._flush)
        cursor.execute(compiled.sql, compiled.parameters(values))
        return compiled.rows(cursor.fetchall())

    def first(self, conn: Connection, **values: Any) -> tuple[Any, ...] | None:
        rows = self.all(conn, **values)
        return rows[0] if rows else None

    def scalar(self, conn: Connection, **values: Any) -> Any:
        row = self.first(conn, **values)
        return None if row is None else row[0]

    def run(self, conn: Connection, **values: Any) -> int:
        """Execute a statement that returns no rows; the number of rows it changed."""
        compiled = self._compiled(conn.dialect)
        cursor = _cursor(conn, flush_first=True)
        cursor.execute(compiled.sql, compiled.parameters(values))
        return int(cursor.rowcount)

    def run_many(self, conn: Connection, values: Sequence[Mapping[str, Any]]) -> None:
        """Execute once per parameter set (the driver's executemany)."""
        self.execute_many(conn, values, flush_first=True)

    def defer(self, kept: Pending, values: tuple[Any, ...]) -> None:
        """Run later in the transaction of ``kept``, batched with its like (see
        ``broker.storage.pending``); ``values`` in the statement's ``positional`` order."""
        rows = kept.inserts.get(self)
        if rows is None:
            kept.inserts[self] = [values]
        else:
            rows.append(values)

    def execute_many(self, conn: Connection, values: Sequence[Any], *, flush_first: bool = False) -> None:
        """executemany, by default without flushing first (the flush itself uses it);
        ``values`` are mappings, or tuples for a ``positional`` statement."""
        if not values:
            return
        compiled = self._compiled(conn.dialect)
        compiled.execute_many(_cursor(conn, flush_first), [compiled.parameters(v) for v in values])


def _cursor(conn: Connection, flush_first: bool = False) -> Any:
    """A cursor of the connection's DBAPI connection, kept on the connection's info,
    after writing what ``broker.storage.pending`` holds back if ``flush_first``."""
    info = conn.info  # one lookup: it goes through three SQLAlchemy properties
    if flush_first:
        buffer: Pending | None = info.get(INFO_KEY)
        if buffer is not None and buffer.holds_writes():
            flush(conn)
    cursor = info.get("broker_cursor")
    if cursor is None:
        cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
        info["broker_cursor"] = cursor
    return cursor
