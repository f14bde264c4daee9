"""The result type of CASE, IIF, COALESCE and ISNULL, by SQL Server's "Data type
precedence (Transact-SQL)".

A value here carries no declared type, so the type of an expression is read from what
the script wrote: a literal, a variable's declaration, a CAST, a function whose result
type is fixed, or a CASE of those. CASE, IIF and COALESCE give the type of highest
precedence among their results, converting the one they return to it (``CASE WHEN c
THEN 'x' ELSE 1 END`` is 245 when it returns 'x'); ISNULL gives its first argument's type
and length. An expression whose type cannot be read so (a column, most functions) adds
none: its value is returned as it is.
"""

from __future__ import annotations

from collections.abc import Iterable
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from broker.sql import nodes as n
from broker.sql import values
from broker.sql.errors import SqlError

if TYPE_CHECKING:
    from broker.sql.expressions import Scope

# Highest first; DECIMAL and NUMERIC are one type.
_ORDER = ("SQL_VARIANT", "XML", "DATETIMEOFFSET", "DATETIME2", "DATETIME", "SMALLDATETIME", "DATE", "FLOAT",
          "REAL", "DECIMAL", "MONEY", "SMALLMONEY", "BIGINT", "INT", "SMALLINT", "TINYINT", "BIT", "NTEXT", "TEXT",
          "IMAGE", "UNIQUEIDENTIFIER", "NVARCHAR", "NCHAR", "VARCHAR", "CHAR", "VARBINARY", "BINARY")
_RANK = {name: rank for rank, name in enumerate(_ORDER)} | {"NUMERIC": _ORDER.index("DECIMAL"),
                                                             "SYSNAME": _ORDER.index("NVARCHAR")}
_MAX_TEXT = n.TypeName("NVARCHAR", -1)
# Functions whose result has one type whatever their arguments.
_FUNCTION_TYPES = {
    **dict.fromkeys(("GETDATE", "GETUTCDATE", "CURRENT_TIMESTAMP"), n.TypeName("DATETIME")),
    **dict.fromkeys(("SYSDATETIME", "SYSUTCDATETIME"), n.TypeName("DATETIME2")),
    **dict.fromkeys(("LEN", "DATALENGTH", "CHARINDEX", "DATEDIFF", "ASCII", "UNICODE", "ERROR_NUMBER",
                     "ERROR_SEVERITY", "ERROR_STATE", "ERROR_LINE", "XACT_STATE"), n.TypeName("INT")),
    **dict.fromkeys(("UPPER", "LOWER", "LTRIM", "RTRIM", "TRIM", "LEFT", "RIGHT", "SUBSTRING", "REPLACE",
                     "REPLICATE", "CONCAT", "CHAR", "NCHAR", "ERROR_MESSAGE", "ERROR_PROCEDURE", "DB_NAME"),
                    _MAX_TEXT),
    "NEWID": n.TypeName("UNIQUEIDENTIFIER"),
}


def expression_type(expr: n.Expr | None, scope: Scope) -> n.TypeName | None:
    """The type of ``expr`` as the script wrote it, its length resolved; None when it
    cannot be read without evaluating it (or when it is NULL, which has none here)."""
    if isinstance(expr, n.Literal):
        return _literal_type(expr)
    if isinstance(expr, n.Variable):
        try:
            declared = scope.scalar(expr.name).type
        except SqlError:  # undeclared: 137 when it is evaluated
            return None
        return _sized(declared, values.DECLARED_DEFAULT_LENGTH)
    if isinstance(expr, n.Cast):
        return _sized(expr.type, values.CAST_DEFAULT_LENGTH)
    if isinstance(expr, n.Case):
        return highest(expression_type(result, scope) for result in (*(r for _, r in expr.whens), expr.default))
    if isinstance(expr, n.Iif):
        return highest((expression_type(expr.then, scope), expression_type(expr.otherwise, scope)))
    if isinstance(expr, n.Call) and len(expr.name) == 1:
        name = expr.name[0].upper()
        if name == "ISNULL" and expr.args:
            return expression_type(expr.args[0], scope)
        if name == "COALESCE":
            return highest(expression_type(arg, scope) for arg in expr.args)
        if name == "DATEADD" and len(expr.args) == 3:  # the type of the date it adds to (text: DATETIME)
            added_to = expression_type(expr.args[2], scope)
            return added_to if added_to is not None and added_to.name in values.DATETIME else n.TypeName("DATETIME")
        return _FUNCTION_TYPES.get(name)
    return None


def highest(types: Iterable[n.TypeName | None]) -> n.TypeName | None:
    """The type of highest precedence among ``types`` (those known): a string or binary
    one without a length (a result whose type is not known may be longer than every known
    one, and none is cut), the DECIMAL with the most digits after the point."""
    known = [found for found in types if found is not None and found.name in _RANK]
    if not known:
        return None
    rank = min(_RANK[found.name] for found in known)
    same = [found for found in known if _RANK[found.name] == rank]
    top = same[0]
    if top.name in values.CHARACTER or top.name in values.BINARY:
        return n.TypeName(top.name, -1)
    if top.name in ("DECIMAL", "NUMERIC"):
        return n.TypeName("NUMERIC", values.MAX_PRECISION, max(found.scale or 0 for found in same))
    return top


def as_result(value: Any, result: n.TypeName | None) -> Any:
    """``value`` converted to a CASE's (or COALESCE's, ISNULL's) result type."""
    if result is None or value is None:
        return value
    if result.name in ("DECIMAL", "NUMERIC") and isinstance(value, Decimal):
        return value  # already exact: its own digits, not rounded to the widest scale
    return values.convert(value, result)


def _literal_type(literal: n.Literal) -> n.TypeName | None:
    value = literal.value
    if value is None:
        return None
    if isinstance(value, str):
        return n.TypeName("NVARCHAR" if literal.unicode else "VARCHAR", max(len(value), 1))
    if isinstance(value, bytes):
        return n.TypeName("VARBINARY", max(len(value), 1))
    if isinstance(value, float):
        return n.TypeName("FLOAT")
    if isinstance(value, Decimal):
        exponent = value.as_tuple().exponent
        return n.TypeName("NUMERIC", values.MAX_PRECISION, -exponent if isinstance(exponent, int) and exponent < 0
                          else 0)
    if isinstance(value, int):
        return n.TypeName("BIGINT" if isinstance(value, values.BigInt) else "INT")
    return None


def _sized(declared: n.TypeName, default_length: int) -> n.TypeName:
    """A declared type with the length it has when none is written."""
    if declared.length is None and (declared.name in values.CHARACTER or declared.name in values.BINARY):
        length = 128 if declared.name == "SYSNAME" else default_length
        return n.TypeName(declared.name, length, declared.scale)
    return declared
