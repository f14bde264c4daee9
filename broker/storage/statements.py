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
from sqlalchemy.sql import ClauseElement, Delete, Insert, Select, Update
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.expression import Executable
from sqlalchemy.sql.util import find_tables
from sqlalchemy.types import LargeBinary, String, TypeDecorator, TypeEngine

from broker.storage.pending import INFO_KEY, Pending, flush, pending, write_held

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


def _values_row(sql: str) -> tuple[str, str, str] | None:
    """``INSERT ... VALUES (row) [RETURNING ...]`` as (head with VALUES, row, tail)."""
    head, values, rest = sql.partition(" VALUES ")
    if not values or not rest.startswith("("):
        return None
    depth = 0
    for end, char in enumerate(rest):
        depth += (char == "(") - (char == ")")
        if depth == 0:
            return head + values, rest[:end + 1], rest[end + 1:]
    return None


def _unbounded(type_: TypeEngine[Any]) -> bool:
    """Whether a column's values can be large: blobs and text without a length."""
    impl = type_.impl_instance if isinstance(type_, TypeDecorator) else type_
    return isinstance(impl, LargeBinary) or (isinstance(impl, String) and impl.length is None)


class _Compiled:
    __slots__ = ("sql", "parameters", "results", "_multirow", "reads", "target", "alone", "values_row")

    def __init__(self, statement: ClauseElement, dialect: Dialect, positions: dict[str, int] | None) -> None:
        compiled = statement.compile(dialect=dialect)
        assert isinstance(compiled, SQLCompiler)
        self.sql = compiled.string
        self.reads = isinstance(statement, Select)  # a SELECT (pg_notify): no write of its own
        # The table a write changes, and whether it reads no other table and returns
        # nothing: then it may run in one statement with held-back writes to other
        # tables (``held_as_one``), its row count read back.
        self.target: str | None = None
        self.alone = False
        # An INSERT's SQL as (before, one row of VALUES, after): several rows go in one
        # VALUES list, inserted in the order listed (``held_as_one``).
        self.values_row = _values_row(self.sql) if isinstance(statement, Insert) else None
        if isinstance(statement, (Insert, Update, Delete)):
            self.target = statement.table.name  # type: ignore[union-attr]
            self.alone = (not isinstance(statement, Insert) and not statement._returning
                          and {t.name for t in find_tables(statement, include_crud=True)} == {self.target})
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

    ``held_back_on`` names a dialect on which ``run`` and ``run_many`` hold the write back
    (``defer``) instead of executing it: for writes whose row count nobody reads, that
    nothing before the next flush reads back.
    """

    __slots__ = ("_statement", "_by_dialect", "_flush", "_positions", "_held_back_on")

    def __init__(self, statement: Executable, *, flush: bool = True, positional: Sequence[str] | None = None,
                 held_back_on: str | None = None) -> None:
        self._statement = statement
        self._by_dialect: dict[str, _Compiled] = {}
        self._flush = flush
        self._positions = None if positional is None else {name: i for i, name in enumerate(positional)}
        self._held_back_on = held_back_on

    def _compiled(self, dialect: Dialect) -> _Compiled:
        compiled = self._by_dialect.get(dialect.name)
        if compiled is None:
            compiled = _Compiled(self._statement, dialect, self._positions)  # type: ignore[arg-type]
            self._by_dialect[dialect.name] = compiled
        return compiled

    def all(self, conn: Connection, **values: Any) -> list[tuple[Any, ...]]:
        """Execute and return every row, type-processed."""
        compiled = self._compiled(conn.dialect)
        cursor = _execute(conn, compiled.sql, compiled.parameters(values), self._flush)
        return compiled.rows(cursor.fetchall())

    def first(self, conn: Connection, **values: Any) -> tuple[Any, ...] | None:
        rows = self.all(conn, **values)
        return rows[0] if rows else None

    def scalar(self, conn: Connection, **values: Any) -> Any:
        row = self.first(conn, **values)
        return None if row is None else row[0]

    def run(self, conn: Connection, **values: Any) -> int:
        """Execute a statement that returns no rows; the number of rows it changed (-1:
        held back, see ``held_back_on``)."""
        if self._held_back_on == conn.dialect.name:
            self.defer(pending(conn), values)  # type: ignore[arg-type]
            return -1
        compiled = self._compiled(conn.dialect)
        if compiled.alone and conn.dialect.name == "postgresql" and _holds_writes(conn):
            together = held_as_one(conn, pending(conn), then=(compiled, compiled.parameters(values)))
            if together is not None:
                cursor = _cursor(conn)
                cursor.execute(*together)
                return int(cursor.fetchone()[0])
        cursor = _execute(conn, compiled.sql, compiled.parameters(values), True)
        return int(cursor.rowcount)

    def run_many(self, conn: Connection, values: Sequence[Mapping[str, Any]]) -> None:
        """Execute once per parameter set (the driver's executemany)."""
        if self._held_back_on == conn.dialect.name:
            kept = pending(conn)
            for one in values:
                self.defer(kept, one)  # type: ignore[arg-type]
            return
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
        parameters = [compiled.parameters(v) for v in values]
        if flush_first and conn.dialect.name == "postgresql" and _holds_writes(conn):
            driver = conn.connection.dbapi_connection
            with driver.pipeline():  # type: ignore[union-attr]
                write_held(conn, pending(conn))
                compiled.execute_many(_cursor(conn), parameters)
            return
        compiled.execute_many(_cursor(conn, flush_first), parameters)


def _holds_writes(conn: Connection) -> bool:
    buffer: Pending | None = conn.info.get(INFO_KEY)
    return buffer is not None and buffer.holds_writes()


def _execute(conn: Connection, sql: str, parameters: Any, flush_first: bool) -> Any:
    """Execute on the connection's cursor, after writing what ``broker.storage.pending``
    holds back if ``flush_first``; the cursor holding the result.

    PostgreSQL: the held-back writes and the statement go in one pipeline (one round
    trip instead of two); the statement's result is on a second cursor, since the
    writes' results arrive on the first.
    """
    info = conn.info
    if flush_first:
        buffer: Pending | None = info.get(INFO_KEY)
        if buffer is not None and buffer.holds_writes():
            if conn.dialect.name == "postgresql":
                reader = info.get("broker_reader")
                if reader is None:
                    reader = info["broker_reader"] = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
                together = held_as_one(conn, buffer)
                with reader.connection.pipeline():
                    if together is None:
                        write_held(conn, buffer)
                    else:
                        _cursor(conn).execute(*together)
                    reader.execute(sql, parameters)
                return reader
            flush(conn)
    cursor = _cursor(conn)
    cursor.execute(sql, parameters)
    return cursor


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


# PostgreSQL: at most this many held-back rows go in one statement (``held_as_one``);
# more are written by one ``executemany`` per statement, in a pipeline.
HELD_AS_ONE_MAX_ROWS = 32
_held_sql: dict[tuple[tuple[int, int], ...], str] = {}


def held_as_one(conn: Connection, buffer: Pending,
                then: tuple[_Compiled, Any] | None = None) -> tuple[str, dict[str, Any]] | None:
    """PostgreSQL: the writes ``buffer`` holds back as one statement and its parameters,
    taken out of the buffer; None (the buffer left alone) when they are too many.

    ``then``: a write (``_Compiled.alone``) and its parameters to run in the same
    statement, whose row count the statement returns; None when a held-back write
    changes its table (it would not see that change: every part of one statement reads
    the same snapshot).

    Each held-back statement is a data-modifying common table expression: an INSERT
    with all its rows in one VALUES list, inserted (and numbered by the table's serial
    column) in the order they were held back; any other statement once per row (a
    SELECT, ``pg_notify``, is read by the main query so that it runs). One execution,
    one prepared statement per mix of statements and row counts, where one
    ``executemany`` per statement in a pipeline costs psycopg several times the CPU.
    PostgreSQL runs the expressions in no promised order: the writes are to disjoint
    rows (one write-back per endpoint; the deletes and updates of received rows touch
    rows that were there before the transaction's held-back inserts, since reading the
    queue flushes them first), and two statements that write one table where an
    INSERT's order counts are not put together (None).
    """
    from broker.storage.rows import write_back_rows  # rows imports this module

    groups: list[tuple[Prepared, list[Any]]] = list(buffer.inserts.items())
    if buffer.dirty:
        groups.append(write_back_rows(list(buffer.dirty.values())))
    if sum(len(rows) for _, rows in groups) > HELD_AS_ONE_MAX_ROWS:
        return None
    dialect = conn.dialect
    compiled = [statement._compiled(dialect) for statement, _ in groups]
    if then is not None and any(c.target == then[0].target for c in compiled):
        return None
    inserted = [c.target for c in compiled if c.values_row is not None]
    if len(set(inserted)) < len(inserted) or any(
            c.values_row is None and c.target is not None and c.target in inserted for c in compiled):
        return None  # the order of writes to one table from two statements would be lost
    buffer.inserts = {}
    buffer.dirty.clear()
    key = tuple((id(c), len(rows)) for c, (_, rows) in zip(compiled, groups, strict=True))
    if then is not None:
        key += ((id(then[0]), -1),)
    parameters: dict[str, Any] = {}
    for g, (c, (_, rows)) in enumerate(zip(compiled, groups, strict=True)):
        for r, values in enumerate(rows):
            prefix = f"w{g}_{r}_"
            for name, value in c.parameters(values).items():  # type: ignore[union-attr]
                parameters[prefix + name] = value
    if then is not None:
        for name, value in then[1].items():
            parameters["then_" + name] = value
    sql = _held_sql.get(key)
    if sql is None:
        parts, read = [], []
        for g, (c, (_, rows)) in enumerate(zip(compiled, groups, strict=True)):
            if c.values_row is not None:  # one INSERT, its rows in order
                head, row, tail = c.values_row
                listed = ", ".join(row.replace("%(", f"%(w{g}_{r}_") for r in range(len(rows)))
                parts.append(f"w{g} AS ({head}{listed}{tail})")
                continue
            for r in range(len(rows)):
                name = f"w{g}_{r}"
                parts.append(f"{name} AS ({c.sql.replace('%(', '%(' + name + '_')})")
                if c.reads:
                    read.append(name)
        if then is None:
            result = "1"
        else:
            parts.append(f"w_then AS ({then[0].sql.replace('%(', '%(then_')} RETURNING 1)")
            result = "(SELECT count(*) FROM w_then)"
        sql = "WITH " + ", ".join(parts) + f" SELECT {result}" + (" FROM " + ", ".join(read) if read else "")
        if len(_held_sql) < 1024:
            _held_sql[key] = sql
    return sql, parameters
