"""Evaluating T-SQL expressions and conditions in Python.

Variables, system variables (``@@ROWCOUNT``, ``@@TRANCOUNT``, ...), the scalar functions
scripts use, CAST/CONVERT, CASE and the XML methods. A column is read from the current
row: a RECEIVE's message or a row a SELECT fetched. Aggregates are not here: a SELECT
that has them runs as SQL (``broker.sql.queries``).
"""

from __future__ import annotations

import math
import re
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from broker.sql import dates, like, moments, precedence, values, xml_methods
from broker.sql import nodes as n
from broker.sql.errors import SqlError, overflow

if TYPE_CHECKING:
    from broker.sql.session import Session

UNDECLARED = 137
INVALID_COLUMN = 207
UNKNOWN_FUNCTION = 195
DIVIDE_BY_ZERO = 8134
ARGUMENT_COUNT = 174
SUBQUERY_ROWS = 512
SUBQUERY_COLUMNS = 116
BAD_LENGTH_LEFT_RIGHT = 536
BAD_LENGTH_SUBSTRING = 537
LOB_TOO_LARGE = 7119
# The largest value of a MAX type: 2 GB, of bytes (VARBINARY(MAX)) or UTF-16 code units
# (NVARCHAR(MAX)); characters here, each at least one of those.
LOB_LIMIT = 2_147_483_647
REPLICATE_LIMIT = 8000


@dataclass
class Scalar:
    """A declared scalar variable: its type and value."""
    type: n.TypeName
    value: Any = None


@dataclass
class TableVariable:
    """A declared table variable: its columns and rows."""
    columns: list[tuple[str, n.TypeName]]
    rows: list[dict[str, Any]] = field(default_factory=list)


class Scope:
    """The variables of one batch (or one procedure call), by case-insensitive name."""

    def __init__(self) -> None:
        self.variables: dict[str, Scalar | TableVariable] = {}
        self._declared_by: dict[str, object] = {}

    def declare(self, name: str, variable: Scalar | TableVariable, line: int,
                statement: object = None) -> Scalar | TableVariable:
        """Declare ``name``; the variable now in place. A declaration belongs to the batch,
        not to a run of its statement: the same DECLARE run again (in a loop) keeps the
        variable and its value; another DECLARE of the name is error 134."""
        key = name.casefold()
        if key in self.variables:
            if statement is not None and self._declared_by.get(key) is statement:
                return self.variables[key]
            raise SqlError(134, f"The variable name '{name}' has already been declared. Variable names must be "
                                "unique within a query batch or stored procedure.", line=line)
        self.variables[key] = variable
        self._declared_by[key] = statement
        return variable

    def scalar(self, name: str) -> Scalar:
        variable = self.variables.get(name.casefold())
        if not isinstance(variable, Scalar):
            raise SqlError(UNDECLARED, f'Must declare the scalar variable "{name}".')
        return variable

    def table(self, name: str) -> TableVariable:
        variable = self.variables.get(name.casefold())
        if not isinstance(variable, TableVariable):
            raise SqlError(1087, f'Must declare the table variable "{name}".')
        return variable

    def assign(self, name: str, value: Any) -> None:
        variable = self.scalar(name)
        variable.value = values.convert(value, variable.type, declared=True)


class Evaluator:
    """Evaluates expressions for one session: its scope, its system variables and the row at hand."""

    def __init__(self, session: Session, scope: Scope, outer: Mapping[str, Any] | None = None) -> None:
        self.session = session
        # The row of the query around a subquery: a column the subquery's own row lacks is
        # read there (a correlated subquery, WHERE s.x = q.object_id).
        self.outer = outer
        self.scope = scope

    def value(self, expr: n.Expr, row: Mapping[str, Any] | None = None) -> Any:
        method = getattr(self, "_" + type(expr).__name__.lower())
        return method(expr, row)

    def condition(self, expr: n.Expr, row: Mapping[str, Any] | None = None) -> bool:
        return values.truth(self.value(expr, row))

    # -- leaves ---------------------------------------------------------------------------

    def _literal(self, expr: n.Literal, _row: Mapping[str, Any] | None) -> Any:
        return expr.value

    def _variable(self, expr: n.Variable, _row: Mapping[str, Any] | None) -> Any:
        return self.scope.scalar(expr.name).value

    def _systemvariable(self, expr: n.SystemVariable, _row: Mapping[str, Any] | None) -> Any:
        return self.session.system_variable(expr.name)

    def _column(self, expr: n.Column, row: Mapping[str, Any] | None) -> Any:
        found, value = column_value(row, expr.parts)
        if not found and self.outer is not None:
            found, value = column_value(self.outer, expr.parts)
        if not found:
            if expr.parts[-1].upper() == "CURRENT_TIMESTAMP" and len(expr.parts) == 1:
                return moments.now()  # ANSI's spelling of GETDATE(), written without parentheses
            raise SqlError(INVALID_COLUMN, f"Invalid column name '{expr.parts[-1]}'.")
        return value

    # -- operators ------------------------------------------------------------------------

    def _negate(self, expr: n.Negate, row: Mapping[str, Any] | None) -> Any:
        operand = self.value(expr.operand, row)
        if operand is None:
            return None
        number = _number(operand)
        return values.integer_result(-number, number) if isinstance(number, int) else -number

    def _arithmetic(self, expr: n.Arithmetic, row: Mapping[str, Any] | None) -> Any:
        return arithmetic(expr.op, self.value(expr.left, row), self.value(expr.right, row))

    def _compare(self, expr: n.Compare, row: Mapping[str, Any] | None) -> bool | None:
        return values.compare(expr.op, self.value(expr.left, row), self.value(expr.right, row))

    def _logical(self, expr: n.Logical, row: Mapping[str, Any] | None) -> bool | None:
        left = self.value(expr.left, row)
        if expr.op == "AND":
            if left is False:
                return False
            right = self.value(expr.right, row)
            if right is False:
                return False
            return None if left is None or right is None else True
        if left is True:
            return True
        right = self.value(expr.right, row)
        if right is True:
            return True
        return None if left is None or right is None else False

    def _not(self, expr: n.Not, row: Mapping[str, Any] | None) -> bool | None:
        operand = self.value(expr.operand, row)
        return None if operand is None else not operand

    def _isnull(self, expr: n.IsNull, row: Mapping[str, Any] | None) -> bool:
        return (self.value(expr.operand, row) is None) != expr.negated

    def _like(self, expr: n.Like, row: Mapping[str, Any] | None) -> bool | None:
        result = like.like(self.value(expr.operand, row), self.value(expr.pattern, row))
        return None if result is None else result != expr.negated

    def _inlist(self, expr: n.InList, row: Mapping[str, Any] | None) -> bool | None:
        operand = self.value(expr.operand, row)
        outcomes = [values.compare("=", operand, self.value(item, row)) for item in expr.items]
        result = True if True in outcomes else (None if None in outcomes else False)
        return None if result is None else result != expr.negated

    def _between(self, expr: n.Between, row: Mapping[str, Any] | None) -> bool | None:
        operand = self.value(expr.operand, row)
        low = values.compare(">=", operand, self.value(expr.low, row))
        high = values.compare("<=", operand, self.value(expr.high, row))
        result = None if low is None or high is None else (low and high)
        return None if result is None else result != expr.negated

    def _exists(self, expr: n.Exists, row: Mapping[str, Any] | None) -> bool:
        return bool(self.session.query_rows(expr.select, self.scope, self._around(row)))

    def _subquery(self, expr: n.Subquery, row: Mapping[str, Any] | None) -> Any:
        rows = self.session.query_rows(expr.select, self.scope, self._around(row))
        if len(expr.select.items) > 1 or rows and len(rows[0]) > 1:
            raise SqlError(SUBQUERY_COLUMNS, "Only one expression can be specified in the select list when the "
                                             "subquery is not introduced with EXISTS.")
        if len(rows) > 1:
            raise SqlError(SUBQUERY_ROWS, "Subquery returned more than 1 value. This is not permitted when the "
                                          "subquery follows =, !=, <, <= , >, >= or when the subquery is used "
                                          "as an expression.")
        return next(iter(rows[0].values())) if rows else None

    def _around(self, row: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
        """What a subquery of this row sees around it: the row, then the rows around it."""
        if self.outer is None:
            return row
        return self.outer if row is None else {**self.outer, **row}

    def _case(self, expr: n.Case, row: Mapping[str, Any] | None) -> Any:
        subject = self.value(expr.subject, row) if expr.subject is not None else None
        for when, result in expr.whens:
            holds = (values.compare("=", subject, self.value(when, row)) if expr.subject is not None
                     else self.value(when, row))
            if holds is True:
                return self._typed(expr, self.value(result, row))
        return self._typed(expr, self.value(expr.default, row)) if expr.default is not None else None

    def _iif(self, expr: n.Iif, row: Mapping[str, Any] | None) -> Any:
        return self._typed(expr, self.value(expr.then if self.condition(expr.condition, row) else expr.otherwise, row))

    def _typed(self, expr: n.Expr, value: Any) -> Any:
        """The value of a CASE, IIF, COALESCE or ISNULL in its result type."""
        return precedence.as_result(value, precedence.expression_type(expr, self.scope))

    def _cast(self, expr: n.Cast, row: Mapping[str, Any] | None) -> Any:
        values.check_cast_type(expr.type)  # TRY_CAST too: a type that does not exist is no failed conversion
        operand = self.value(expr.operand, row)
        style = None if expr.style is None else self._style(self.value(expr.style, row))
        if style is None and expr.style is not None:
            return None  # CONVERT with a NULL style is NULL
        if expr.lenient:
            try:
                return values.convert(operand, expr.type, style=style)
            except SqlError:
                return None
        return values.convert(operand, expr.type, style=style)

    @staticmethod
    def _style(value: Any) -> int | None:
        """CONVERT's style: an integer (8116 for any other type)."""
        if value is None:
            return None
        if not isinstance(value, int):
            raise SqlError(8116, f"Argument data type {values.type_of(value)} is invalid for argument 3 of "
                                 "convert function.")
        return value

    def _method(self, expr: n.Method, row: Mapping[str, Any] | None) -> Any:
        return self._xml_method(self.value(expr.target, row), expr.name, [self.value(a, row) for a in expr.args])

    def _xml_method(self, target: Any, name: str, args: list[Any]) -> Any:
        method = name.lower()
        if method == "value" and len(args) == 2:
            return xml_methods.xml_value(target, args[0], args[1])
        if method == "query" and len(args) == 1:
            return xml_methods.xml_query(target, args[0])
        if method == "exist" and len(args) == 1:
            return xml_methods.xml_exist(target, args[0])
        raise SqlError(227, f'"{name}" is not a valid function, property, or field.')

    def _call(self, expr: n.Call, row: Mapping[str, Any] | None) -> Any:
        if len(expr.name) > 1:
            # column.value(...) or @v.value(...) reads as a dotted call: a method on what the prefix names.
            prefix, method = expr.name[:-1], expr.name[-1]
            found, target = column_value(row, prefix)
            if found:
                return self._xml_method(target, method, [self.value(arg, row) for arg in expr.args])
        name = expr.name[-1].upper()
        if name in AGGREGATES and row is not None and aggregate_key(expr) in row:
            return row[aggregate_key(expr)]  # computed for its group by the query
        special = _LAZY.get(name)
        if special is not None:
            return special(self, expr, row)
        function = _FUNCTIONS.get(name)
        if function is None:
            if name in AGGREGATES:
                raise SqlError(UNKNOWN_FUNCTION, f"The aggregate {name} needs a FROM clause here.")
            raise SqlError(UNKNOWN_FUNCTION, f"'{expr.name[-1]}' is not a recognized built-in function name.")
        arity, body = function
        if name in _DATEPART_FIRST and expr.args:
            args = [dates.datepart_keyword(name, expr.args[0]), *(self.value(arg, row) for arg in expr.args[1:])]
        else:
            args = [self.value(arg, row) for arg in expr.args]
        if arity is not None and len(args) not in arity:
            raise SqlError(ARGUMENT_COUNT, f"The {name.lower()} function requires {_arity_text(arity)} argument(s).")
        return body(self.session, args)


def column_value(row: Mapping[str, Any] | None, parts: tuple[str, ...]) -> tuple[bool, Any]:
    """The value of ``[alias.]column`` in a row keyed by lower-case ``alias.column`` and ``column``."""
    if row is None:
        return False, None
    key = ".".join(part.lower() for part in parts[-2:])
    if key in row:
        return True, row[key]
    return False, None


def _number(value: Any, named: str = "DECIMAL") -> Any:
    """A number, text read as one (every digit); ``named`` is the type a failure names."""
    if isinstance(value, (int, float, Decimal)):
        return value
    if isinstance(value, str):
        for integer_type in ("INT", "BIGINT"):
            try:
                return values.convert(value, n.TypeName(integer_type))
            except SqlError:
                pass
        return values.exact_number(value, named)  # every digit: no DECIMAL(18, 0) rounding
    raise SqlError(8117, f"Operand data type {values.type_of(value)} is invalid for arithmetic operators.")


def arithmetic(op: str, left: Any, right: Any) -> Any:
    if left is None or right is None:
        return None
    if op == "+":
        if isinstance(left, (str, values.Xml)) and isinstance(right, (str, values.Xml)):
            return _within_lob_limit(str(left), str(right))
        if isinstance(left, bytes) and isinstance(right, bytes):
            return _within_lob_limit(left, right)
    if isinstance(left, datetime) or isinstance(right, datetime):
        return _datetime_arithmetic(op, left, right)
    # Text beside an integer is converted to int by SQL Server: its failure names int.
    named = next(("BIGINT" if isinstance(x, values.BigInt) else "INT" for x in (left, right)
                  if isinstance(x, int) and not isinstance(x, bool)), "DECIMAL")
    a, b = _number(left, named), _number(right, named)
    if isinstance(a, float) or isinstance(b, float):
        result = _float_arithmetic(op, float(a), float(b))
        if math.isinf(result) or math.isnan(result):
            raise overflow("float")
        return result
    if isinstance(a, Decimal) or isinstance(b, Decimal):
        return _exact_arithmetic(op, Decimal(a), Decimal(b))
    return values.integer_result(_integer_arithmetic(op, a, b), a, b)


def _within_lob_limit(left: str | bytes, right: str | bytes) -> Any:
    """A concatenation, refused past the 2 GB a MAX type holds."""
    _check_lob_size(len(left) + len(right))
    return left + right  # type: ignore[operator]


def _check_lob_size(size: int) -> None:
    """7119 for a value past the 2 GB a MAX type holds, before it is made: it would
    otherwise grow until the process runs out of memory."""
    if size > LOB_LIMIT:
        raise SqlError(LOB_TOO_LARGE, f"Attempting to grow LOB beyond maximum allowed size of {LOB_LIMIT:,} bytes.")


def _datetime_arithmetic(op: str, left: Any, right: Any) -> datetime:
    """datetime + or - a number of days (either side for +), and datetime - datetime: the
    difference as a moment after 1900-01-01, as SQL Server's DATETIME does."""
    moment, days = (left, right) if isinstance(left, datetime) else (right, left)
    if isinstance(left, values.Date) or isinstance(right, values.Date):
        # A DATE takes no arithmetic: DATEADD moves it.
        if isinstance(days, datetime):
            raise SqlError(8117, f"Operand data type date is invalid for {_OPERATOR_NAMES[op]} operator.")
        raise SqlError(206, f"Operand type clash: date is incompatible with {values.type_of(days)}")
    if isinstance(left, datetime) and isinstance(right, datetime) and op == "-":
        return datetime(1900, 1, 1) + (moments.naive(left) - moments.naive(right))
    if op not in "+-" or isinstance(days, datetime) or (op == "-" and moment is right):
        raise SqlError(8117, f"Operand data type datetime is invalid for {_OPERATOR_NAMES[op]} operator.")
    try:
        offset = timedelta(days=float(_number(days)))
        return moments.naive(moment) + (offset if op == "+" else -offset)
    except OverflowError:
        raise overflow("datetime") from None


_OPERATOR_NAMES = {"+": "add", "-": "subtract", "*": "multiply", "/": "divide", "%": "modulo"}


def _exact_arithmetic(op: str, a: Decimal, b: Decimal) -> Decimal:
    """DECIMAL arithmetic with every digit up to 38 (8115 past them)."""
    if op in "/%" and b == 0:
        raise SqlError(DIVIDE_BY_ZERO, "Divide by zero error encountered.")
    if op == "/":
        return values.exact_quotient(a, b)
    context = values.EXACT_CONTEXT
    result = (context.add(a, b) if op == "+" else context.subtract(a, b) if op == "-"
              else context.multiply(a, b) if op == "*" else context.remainder(a, b))
    return values.exact_result(result)


def _integer_arithmetic(op: str, a: int, b: int) -> int:
    """T-SQL's integer operators: division truncates toward zero, and the remainder
    takes the dividend's sign."""
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op == "*":
        return a * b
    if b == 0:
        raise SqlError(DIVIDE_BY_ZERO, "Divide by zero error encountered.")
    quotient = abs(a) // abs(b)
    quotient = quotient if (a >= 0) == (b >= 0) else -quotient
    return quotient if op == "/" else a - b * quotient


def _float_arithmetic(op: str, a: float, b: float) -> float:
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op == "*":
        return a * b
    if b == 0:
        raise SqlError(DIVIDE_BY_ZERO, "Divide by zero error encountered.")
    return a / b if op == "/" else math.fmod(a, b)


def _replicate(value: Any, count: Any) -> str | None:
    """REPLICATE: a string that is not of a MAX type stops at 8,000 bytes in SQL Server; here
    at 8,000 characters, which also keeps a hostile count from exhausting memory."""
    text = _s(value)
    times = int(count)
    if times < 0:
        return None  # SQL Server's REPLICATE gives NULL for a negative count
    if text and times > REPLICATE_LIMIT // len(text) + 1:
        times = REPLICATE_LIMIT // len(text) + 1
    return (text * times)[:REPLICATE_LIMIT]


def _arity_text(arity: range) -> str:
    return str(arity.start) if len(arity) == 1 else f"{arity.start} to {arity.stop - 1}"


def _isnull(evaluator: Evaluator, expr: n.Call, row: Mapping[str, Any] | None) -> Any:
    if len(expr.args) != 2:
        raise SqlError(ARGUMENT_COUNT, "The isnull function requires 2 argument(s).")
    first = evaluator.value(expr.args[0], row)
    return evaluator._typed(expr, first if first is not None else evaluator.value(expr.args[1], row))


def _coalesce(evaluator: Evaluator, expr: n.Call, row: Mapping[str, Any] | None) -> Any:
    if len(expr.args) < 2:
        raise SqlError(189, "The coalesce function requires 2 to n arguments.")
    for arg in expr.args:
        value = evaluator.value(arg, row)
        if value is not None:
            return evaluator._typed(expr, value)
    return None


def _transmission_status(evaluator: Evaluator, expr: n.Call, row: Mapping[str, Any] | None) -> Any:
    if len(expr.args) != 1:
        raise SqlError(ARGUMENT_COUNT, "The get_transmission_status function requires 1 argument(s).")
    return evaluator.session.transmission_status(evaluator.value(expr.args[0], row))


_LAZY: dict[str, Callable[[Evaluator, n.Call, Mapping[str, Any] | None], Any]] = {
    "ISNULL": _isnull,
    "COALESCE": _coalesce,
    "GET_TRANSMISSION_STATUS": _transmission_status,
}


def _text_or_none(function: Callable[..., Any]) -> Callable[[Session, list[Any]], Any]:
    def run(_session: Session, args: list[Any]) -> Any:
        if any(arg is None for arg in args):
            return None
        return function(*args)
    return run


def _s(value: Any) -> str:
    return values.convert(value, n.TypeName("NVARCHAR", -1))  # type: ignore[no-any-return]


def _substring(text: Any, start: Any, length: Any) -> str:
    if int(length) < 0:
        raise SqlError(BAD_LENGTH_SUBSTRING, "Invalid length parameter passed to the LEFT or SUBSTRING function.")
    begin = int(start) - 1
    end = begin + int(length)
    return _s(text)[max(begin, 0):max(end, 0)]


def _left_or_right(name: str) -> Callable[[Any, Any], str]:
    def cut(text: Any, length: Any) -> str:
        count = int(length)
        if count < 0:
            raise SqlError(BAD_LENGTH_LEFT_RIGHT, f"Invalid length parameter passed to the {name} function.")
        value = _s(text)
        return value[:count] if name == "left" else value[len(value) - min(count, len(value)):]
    return cut


def _charindex(needle: Any, haystack: Any, start: Any = 1) -> int:
    """The 1-based position of ``needle`` in ``haystack`` under the case-insensitive
    collation, from ``start``; 0 when absent or empty. Compared a character at a time:
    casefolding a whole string can change its length (ß is ss), and so the position."""
    wanted, text = _s(needle), _s(haystack)
    if not wanted:
        return 0
    found = re.compile(re.escape(wanted), re.IGNORECASE).search(text, max(int(start) - 1, 0))
    return 0 if found is None else found.start() + 1


def _replace(text: Any, pattern: Any, replacement: Any) -> str:
    """REPLACE under the case-insensitive collation; an empty pattern changes nothing."""
    wanted, value, instead = _s(pattern), _s(text), _s(replacement)
    if not wanted:
        return value
    finder = re.compile(re.escape(wanted), re.IGNORECASE)
    if len(instead) > len(wanted):  # the result's size, checked before it is made
        _check_lob_size(len(value) + sum(1 for _ in finder.finditer(value)) * (len(instead) - len(wanted)))
    return finder.sub(lambda _match: instead, value)


def _upper(text: Any) -> str:
    """UPPER: a character whose capital is two (ß) stays as it is, as in SQL Server."""
    return "".join(upper if len(upper := char.upper()) == 1 else char for char in _s(text))


def _absolute(number: Any) -> Any:
    """ABS: of an integer, in its type (ABS of INT's lowest value overflows, 8115)."""
    return values.integer_result(abs(number), number) if isinstance(number, int) else abs(number)


def _character(code: Any, highest: int) -> str | None:
    """CHAR(n) / NCHAR(n): the character of that code, NULL outside the type's codes."""
    number = values.convert(code, n.TypeName("INT"))
    return chr(number) if 0 <= number <= highest else None


def _datalength(value: Any) -> int:
    """The bytes a value takes: its text as UTF-8 (the bytes SEND would carry), and the
    storage size of the other types."""
    if isinstance(value, (str, bytes, values.Xml)):
        return len(values.convert(value, n.TypeName("VARBINARY", -1)))
    if isinstance(value, values.Date):
        return 3
    if isinstance(value, values.BigInt) or isinstance(value, (float, datetime)):
        return 8
    if isinstance(value, int):
        return 4
    if isinstance(value, uuid.UUID):
        return 16
    digits = len(value.as_tuple().digits)  # DECIMAL: by its precision, as SQL Server stores it
    return 5 if digits <= 9 else 9 if digits <= 19 else 13 if digits <= 28 else 17


def _session_value(read: Callable[[Session], Any]) -> Callable[[Session, list[Any]], Any]:
    return lambda session, _args: read(session)


_DATEPART_FIRST = {"DATEADD", "DATEDIFF"}  # their first argument is a datepart keyword, never a value
_NONE = range(0, 1)
_ONE = range(1, 2)
_TWO = range(2, 3)
AGGREGATES = {"COUNT", "SUM", "MIN", "MAX", "AVG", "COUNT_BIG"}


def aggregate_key(call: n.Call) -> str:
    """Where a grouped row keeps the value of one aggregate call of its query."""
    return f"#aggregate{id(call)}"

_FUNCTIONS: dict[str, tuple[range | None, Callable[[Session, list[Any]], Any]]] = {
    "NEWID": (_NONE, lambda _s_, _a: uuid.uuid4()),
    "GETDATE": (_NONE, lambda _s_, _a: moments.now()),
    "SYSDATETIME": (_NONE, lambda _s_, _a: moments.now("DATETIME2")),
    "CURRENT_TIMESTAMP": (_NONE, lambda _s_, _a: moments.now()),
    "GETUTCDATE": (_NONE, lambda _s_, _a: moments.utc_now()),
    "SYSUTCDATETIME": (_NONE, lambda _s_, _a: moments.utc_now("DATETIME2")),
    "CHAR": (_ONE, _text_or_none(lambda v: _character(v, 255))),
    "NCHAR": (_ONE, _text_or_none(lambda v: _character(v, 0x10FFFF))),
    "ASCII": (_ONE, _text_or_none(lambda v: ord(_s(v)[0]) if _s(v) else None)),
    "UNICODE": (_ONE, _text_or_none(lambda v: ord(_s(v)[0]) if _s(v) else None)),
    "LEN": (_ONE, _text_or_none(lambda v: len(_s(v).rstrip(" ")))),
    "DATALENGTH": (_ONE, _text_or_none(_datalength)),
    "UPPER": (_ONE, _text_or_none(_upper)),
    "LOWER": (_ONE, _text_or_none(lambda v: _s(v).lower())),
    "LTRIM": (_ONE, _text_or_none(lambda v: _s(v).lstrip(" "))),
    "RTRIM": (_ONE, _text_or_none(lambda v: _s(v).rstrip(" "))),
    "TRIM": (_ONE, _text_or_none(lambda v: _s(v).strip(" "))),
    "LEFT": (_TWO, _text_or_none(_left_or_right("left"))),
    "RIGHT": (_TWO, _text_or_none(_left_or_right("right"))),
    "SUBSTRING": (range(3, 4), _text_or_none(_substring)),
    "REPLACE": (range(3, 4), _text_or_none(_replace)),
    "CHARINDEX": (range(2, 4), _text_or_none(_charindex)),
    "REPLICATE": (_TWO, _text_or_none(_replicate)),
    "CONCAT": (range(2, 255), lambda _s_, args: "".join(_s(arg) for arg in args if arg is not None)),
    "ABS": (_ONE, _text_or_none(lambda v: _absolute(_number(v)))),
    "NULLIF": (_TWO, lambda _s_, args: None if values.compare("=", args[0], args[1]) else args[0]),
    "DATEADD": (range(3, 4), _text_or_none(dates.dateadd)),
    "DATEDIFF": (range(3, 4), _text_or_none(dates.datediff)),
    "ERROR_NUMBER": (_NONE, _session_value(lambda s: s.caught("number"))),
    "ERROR_MESSAGE": (_NONE, _session_value(lambda s: s.caught("message"))),
    "ERROR_SEVERITY": (_NONE, _session_value(lambda s: s.caught("level"))),
    "ERROR_STATE": (_NONE, _session_value(lambda s: s.caught("state"))),
    "ERROR_LINE": (_NONE, _session_value(lambda s: s.caught("line"))),
    "ERROR_PROCEDURE": (_NONE, _session_value(lambda s: s.caught("procedure"))),
    "XACT_STATE": (_NONE, _session_value(lambda s: s.xact_state())),
    "DB_NAME": (range(0, 2), _session_value(lambda s: s.database_name)),
    "SCOPE_IDENTITY": (_NONE, lambda _s_, _a: None),
}
