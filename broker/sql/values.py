"""T-SQL values in Python: the data types a script declares, CAST/CONVERT between them,
and comparison under the default case-insensitive collation (LIKE: ``broker.sql.like``;
dates read from text: ``broker.sql.moments``; the XML type's methods:
``broker.sql.xml_methods``).

A value is ``None`` (NULL), ``int`` (INT, SMALLINT, TINYINT and BIT), :class:`BigInt`
(BIGINT), ``Decimal``, ``float``,
``str`` (the character types), ``bytes`` (BINARY/VARBINARY), ``uuid.UUID``
(UNIQUEIDENTIFIER), ``datetime`` or :class:`Xml`. Strings become bytes as UTF-8, the
encoding the Python API sends ``str`` bodies in (SQL Server 2019's UTF-8 collations do
the same; its default collations would send N'...' as UTF-16, see docs/sql.md).
"""

from __future__ import annotations

import math
import re
import struct
import uuid
from dataclasses import dataclass
from datetime import datetime
from decimal import ROUND_DOWN, ROUND_HALF_UP, Context, Decimal, InvalidOperation, localcontext
from typing import Any

from lxml import etree

from broker.sql import moments, styles
from broker.sql.errors import SqlError, overflow
from broker.sql.nodes import TypeName

CONVERSION_FAILED = 245
UNIQUEIDENTIFIER_FAILED = 8169
XML_PARSING = 9400
UNKNOWN_TYPE = 2715
TOP_NOT_INTEGER = 1060
UNDEFINED_TYPE = 243
TOO_PRECISE = 2750
BAD_LENGTH = 1001
TOO_LONG = 2717
MAX_PRECISION = 38
# Room for the digits of any DECIMAL(38, s) operation before its result is checked
# (Python's default context keeps 28 and would round silently).
EXACT_CONTEXT = Context(prec=2 * MAX_PRECISION + 2)
_CHARACTER_LIMITS = {"VARCHAR": 8000, "CHAR": 8000, "NVARCHAR": 4000, "NCHAR": 4000, "VARBINARY": 8000,
                     "BINARY": 8000}
# Numbers as SQL Server reads them from text: ASCII digits, no underscores, no 'inf'.
_INTEGER_TEXT = re.compile(r"\s*[+-]?[0-9]+\s*")
_NUMBER_TEXT = re.compile(r"\s*[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?\s*")

INTEGER_RANGES = {"BIT": (0, 1), "TINYINT": (0, 255), "SMALLINT": (-32_768, 32_767),
                  "INT": (-2_147_483_648, 2_147_483_647),
                  "BIGINT": (-9_223_372_036_854_775_808, 9_223_372_036_854_775_807)}
INT_LOW, INT_HIGH = INTEGER_RANGES["INT"]
CHARACTER = {"NVARCHAR", "VARCHAR", "NCHAR", "CHAR", "SYSNAME", "NTEXT", "TEXT"}
BINARY = {"VARBINARY", "BINARY", "IMAGE"}
DATETIME = {"DATETIME", "DATETIME2", "SMALLDATETIME", "DATETIMEOFFSET", "DATE"}
EXACT = {"DECIMAL", "NUMERIC", "MONEY", "SMALLMONEY"}
APPROXIMATE = {"FLOAT", "REAL"}
# SQL Server's types that scripts here cannot use (a CAST to one is 243, said so).
_NOT_HERE = {"TIME", "HIERARCHYID", "GEOGRAPHY", "GEOMETRY", "ROWVERSION", "TIMESTAMP", "CURSOR"}
# MONEY and SMALLMONEY: their precision and scale, and their largest magnitude.
_EXACT_SHAPES = {"MONEY": (19, 4), "SMALLMONEY": (10, 4)}
_MONEY_LIMITS = {"MONEY": Decimal("922337203685477.5807"), "SMALLMONEY": Decimal("214748.3647")}
KNOWN = (set(INTEGER_RANGES) | CHARACTER | BINARY | DATETIME | EXACT | APPROXIMATE
         | {"UNIQUEIDENTIFIER", "XML", "SQL_VARIANT"})

# A declared variable without a length holds one character (SQL Server's rule); CAST and
# CONVERT without one give 30.
DECLARED_DEFAULT_LENGTH = 1
CAST_DEFAULT_LENGTH = 30


class BigInt(int):
    """A BIGINT value. Integer arithmetic gives BIGINT when either side is one, else INT,
    and overflows its type's range (8115) as SQL Server's does."""

    __slots__ = ()


class Date(datetime):
    """A DATE value: a day, at its midnight. It is written without a time, and DATEADD
    keeps it a DATE."""

    __slots__ = ()


@dataclass(frozen=True)
class Xml:
    """A value of the XML type: well-formed text, parsed on demand for its methods."""

    text: str

    def __str__(self) -> str:
        return self.text

    def tree(self) -> etree._Element:
        return parse_xml(self.text.encode("utf-8"))


def check_type(type_name: TypeName, line: int) -> None:
    """A declared type: one SQL Server knows (2715), with a length or precision it takes."""
    if type_name.name not in KNOWN:
        raise SqlError(UNKNOWN_TYPE, f"Column, parameter, or variable #1: Cannot find data type {type_name.name}.",
                       line=line)
    check_size(type_name, line)


def check_cast_type(type_name: TypeName) -> None:
    """The type of a CAST or CONVERT: one SQL Server knows (243), with a size it takes."""
    if type_name.name in _NOT_HERE:
        raise SqlError(UNDEFINED_TYPE, f"Type {type_name.name} is one of SQL Server's this T-SQL does not have "
                                       "(docs/sql.md lists those it has).")
    if type_name.name not in KNOWN:
        raise SqlError(UNDEFINED_TYPE, f"Type {type_name.name} is not a defined system type.")
    check_size(type_name)


def check_size(type_name: TypeName, line: int = 0) -> None:
    """A length of 1 to the type's limit (1001, 2717), a precision of 1 to 38 (2750)."""
    length = type_name.length
    if type_name.name in EXACT and length is not None and not 1 <= length <= MAX_PRECISION:
        raise SqlError(TOO_PRECISE, f"Column or parameter #1: Specified column precision {length} is greater than "
                                    f"the maximum precision of {MAX_PRECISION}.", line=line)
    limit = _CHARACTER_LIMITS.get(type_name.name)
    if limit is None or length is None or length == -1:
        return
    if length < 1:
        raise SqlError(BAD_LENGTH, f"Line {line or 1}: Length or precision specification {length} is invalid.",
                       line=line)
    if length > limit:
        raise SqlError(TOO_LONG, f"The size ({length}) given to the type '{type_name.name.lower()}' exceeds the "
                                 f"maximum allowed for any data type ({limit}).", line=line)


def type_of(value: object) -> str:
    """The SQL Server type name of a value, as error messages show it."""
    if value is None:
        return "NULL"
    if isinstance(value, BigInt):
        return "bigint"
    if isinstance(value, bool) or isinstance(value, int):
        return "int"
    if isinstance(value, Decimal):
        return "numeric"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "nvarchar"
    if isinstance(value, bytes):
        return "varbinary"
    if isinstance(value, uuid.UUID):
        return "uniqueidentifier"
    if isinstance(value, datetime):
        return "date" if isinstance(value, Date) else "datetime"
    if isinstance(value, Xml):
        return "xml"
    return type(value).__name__


def parse_xml(data: bytes) -> etree._Element:
    parser = etree.XMLParser(resolve_entities=False, no_network=True, load_dtd=False)
    try:
        return etree.fromstring(data, parser)
    except etree.XMLSyntaxError as exc:
        line, column = exc.position if exc.position else (1, 1)
        raise SqlError(XML_PARSING, f"XML parsing: line {line}, character {column}, {exc.msg}") from None


def convert(value: Any, target: TypeName, *, declared: bool = False, style: int | None = None) -> Any:
    """``value`` as ``target``: CAST, CONVERT (in ``style``, ``broker.sql.styles``; None:
    the type's default), and assignment to a declared variable. A style a value's type
    has none of is ignored."""
    if value is None:
        return None
    name = target.name
    if name in INTEGER_RANGES:
        return _integer(value, name)
    if name in CHARACTER:
        length = target.length if target.length is not None else (
            DECLARED_DEFAULT_LENGTH if declared else CAST_DEFAULT_LENGTH)
        if name == "SYSNAME":
            length = 128
        if length == -1 or name in ("NTEXT", "TEXT"):
            return styled_text(value, style, name)
        text = styled_text(styles.whole_bytes(value, style or 0, length) if isinstance(value, bytes) else value,
                           style, name)
        if len(text) > length and isinstance(value, (int, Decimal, float)):
            # A number is never cut: an integer too long for CHAR or VARCHAR is '*', any other is 8115.
            if not isinstance(value, int) or name not in ("CHAR", "VARCHAR"):
                raise overflow(name)
            text = "*"
        return text[:length].ljust(length) if name in ("CHAR", "NCHAR") else text[:length]  # CHAR(n) pads
    if name in BINARY:
        data = styles.read_binary(value, style or 0, name) if isinstance(value, str) else _bytes(value)
        length = target.length if target.length is not None else (1 if declared else CAST_DEFAULT_LENGTH)
        if length == -1 or name == "IMAGE":
            return data
        return data[:length].ljust(length, b"\0") if name == "BINARY" else data[:length]
    if name == "UNIQUEIDENTIFIER":
        return _guid(value)
    if name == "XML":
        return as_xml(value)
    if name in EXACT:
        return _decimal(value, target)
    if name in APPROXIMATE:
        return _float(value, name)
    if name in DATETIME:
        if isinstance(value, str) and style:
            value = styles.read_datetime(value, style, name)
        return _datetime(value, name)
    return value  # SQL_VARIANT


def styled_text(value: Any, style: int | None, target: str) -> str:
    """A value as text in a CONVERT style (None: its type's default): a date's, a
    datetime's, a float's or binary's; the one text of the other types."""
    if isinstance(value, Date):
        return styles.date_text(value, style, target)
    if isinstance(value, datetime):
        return styles.datetime_text(moments.naive(value), style or 0)
    if isinstance(value, float):
        return styles.float_text(value, style or 0)
    if isinstance(value, bytes):
        return styles.binary_text(value, style or 0, target)
    return text_of(value)


def _float(value: Any, name: str) -> float:
    if isinstance(value, str) and _NUMBER_TEXT.fullmatch(value) is None:
        raise _not_a_number(value, name)  # Python would read '1_000', 'inf' and other digits
    try:
        number = float(value.strip() if isinstance(value, str) else value)
    except (TypeError, ValueError):
        raise _failed(value, name.lower()) from None
    if not math.isfinite(number):
        raise overflow(name)
    return number


def _not_a_number(value: Any, name: str) -> SqlError:
    """CAST or CONVERT of text that is no number to a DECIMAL, NUMERIC, FLOAT or REAL:
    SQL Server's 8114 (245 is the integer types', and arithmetic's)."""
    target = "numeric" if name in ("DECIMAL", "NUMERIC") else name.lower()
    return SqlError(styles.CONVERSION_ERROR, f"Error converting data type {type_of(value)} to {target}.")


def _failed(value: Any, type_name: str) -> SqlError:
    kind = type_of(value)
    return SqlError(CONVERSION_FAILED, f"Conversion failed when converting the {kind} value '{value}' "
                                       f"to data type {type_name}.")


def _integer(value: Any, name: str) -> int:
    if isinstance(value, bool):
        number = int(value)
    elif isinstance(value, int):
        number = value
    elif isinstance(value, (Decimal, float)):
        number = int(value)
    elif isinstance(value, str):
        stripped = value.strip()
        if name == "BIT" and stripped.upper() in ("TRUE", "FALSE"):
            return 1 if stripped.upper() == "TRUE" else 0
        if not stripped:
            return 0  # SQL Server reads '' (or blanks) as 0 for the integer types
        if _INTEGER_TEXT.fullmatch(stripped) is None:
            raise _failed(value, name.lower())
        number = int(stripped)
    elif isinstance(value, bytes):
        number = int.from_bytes(value[-8:], "big", signed=True) if value else 0
    else:
        raise _failed(value, name.lower())
    if name == "BIT":
        return 1 if number else 0
    low, high = INTEGER_RANGES[name]
    if not low <= number <= high:
        raise overflow(name)
    return BigInt(number) if name == "BIGINT" else number


def integer_result(number: int, *operands: int) -> int:
    """The result of integer arithmetic on ``operands``: BIGINT when one of them is (or
    holds a value only BIGINT can), else INT; 8115 past the type's range."""
    wide = any(isinstance(x, BigInt) or not INT_LOW <= x <= INT_HIGH for x in operands)
    return _integer(number, "BIGINT" if wide else "INT")


def exact_number(value: Any, type_name: str) -> Decimal:
    """``value`` read as an exact number, every digit kept (245 when it is not one)."""
    if isinstance(value, str) and _NUMBER_TEXT.fullmatch(value) is None:
        raise _failed(value, type_name.lower())
    try:
        number = Decimal(value.strip() if isinstance(value, str) else str(value))
    except InvalidOperation:
        raise _failed(value, type_name.lower()) from None
    if not number.is_finite():  # 'NaN', 'Infinity': Python reads them, SQL Server does not
        raise _failed(value, type_name.lower())
    return number


def _decimal(value: Any, target: TypeName) -> Decimal:
    """``value`` as DECIMAL(p, s) (18, 0 when not given), MONEY or SMALLMONEY: rounded to
    the scale, 8115 when it has more whole digits than the type holds."""
    try:
        number = exact_number(value, target.name)
    except SqlError as failure:  # text that is no number: CAST's own 8114, not arithmetic's 245
        if not isinstance(value, str) or failure.number != CONVERSION_FAILED:
            raise
        raise _not_a_number(value, target.name) from None
    precision, scale = _EXACT_SHAPES.get(target.name) or (target.length or 18, target.scale or 0)
    try:
        # SQL Server rounds half away from zero (Python's default is to the even digit).
        number = number.quantize(Decimal(1).scaleb(-scale), rounding=ROUND_HALF_UP, context=EXACT_CONTEXT)
    except InvalidOperation:  # more digits than even DECIMAL(38) holds
        raise overflow(target.name) from None
    limit = _MONEY_LIMITS.get(target.name)
    if abs(number) >= Decimal(10) ** (precision - scale) or (limit is not None and abs(number) > limit):
        raise overflow(target.name)
    return number


def exact_result(number: Decimal) -> Decimal:
    """The result of DECIMAL arithmetic: 8115 past 38 digits (SQL Server's largest precision)."""
    if number.is_finite() and number.adjusted() < MAX_PRECISION:
        return number
    raise overflow("numeric")


def exact_quotient(a: Decimal, b: Decimal) -> Decimal:
    """DECIMAL division with SQL Server's result scale: at least 6, else the dividend's
    scale plus the divisor's precision plus one (so 1.0 / 3 is 0.333333), truncated."""
    scale = max(6, _scale(a) + _precision(b) + 1)
    with localcontext(EXACT_CONTEXT):
        quotient = (a / b).quantize(Decimal(1).scaleb(-scale), rounding=ROUND_DOWN)
    return exact_result(quotient)


def _scale(number: Decimal) -> int:
    exponent = number.as_tuple().exponent
    return max(-exponent, 0) if isinstance(exponent, int) else 0


def _precision(number: Decimal) -> int:
    return max(len(number.as_tuple().digits), _scale(number))


def top_count(value: Any) -> int:
    """The row count of TOP (n): a whole number, not negative (1060)."""
    if isinstance(value, (float, Decimal)) and value != int(value) or value is None:
        raise SqlError(TOP_NOT_INTEGER, "The number of rows in the TOP clause must be an integer.")
    count: int = convert(value, TypeName("BIGINT"))
    if count < 0:
        raise SqlError(TOP_NOT_INTEGER, "The number of rows in the TOP clause must be an integer.")
    return count


def text_of(value: Any) -> str:
    """A value as text (CAST to NVARCHAR(MAX)), as SQL Server writes it."""
    if isinstance(value, str):
        return value
    if isinstance(value, uuid.UUID):
        return str(value).upper()
    if isinstance(value, (datetime, float, bytes)):
        return styled_text(value, None, "NVARCHAR")  # a datetime in style 0: 'Jan  2 2020 10:00AM'
    if isinstance(value, Decimal):
        return format(value, "f")  # never scientific: 0.0000001, not 1E-7
    return str(value)


def _bytes(value: Any) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, (str, Xml)):
        return str(value).encode("utf-8")
    if isinstance(value, uuid.UUID):
        return value.bytes_le  # SQL Server's byte order for uniqueidentifier
    if isinstance(value, bool) or isinstance(value, int):
        wide = isinstance(value, BigInt) or not INT_LOW <= value <= INT_HIGH
        return value.to_bytes(8 if wide else 4, "big", signed=True)
    if isinstance(value, float):
        return struct.pack(">d", value)
    raise _failed(value, "varbinary")


def _guid(value: Any) -> uuid.UUID:
    if isinstance(value, uuid.UUID):
        return value
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("{") and text.endswith("}"):
            text = text[1:-1]
        if re.fullmatch(r"[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}", text[:36]):
            return uuid.UUID(text[:36])
    elif isinstance(value, bytes) and len(value) >= 16:
        return uuid.UUID(bytes_le=value[:16])
    raise SqlError(UNIQUEIDENTIFIER_FAILED, "Conversion failed when converting from a character string to "
                                            "uniqueidentifier.")


_DECLARED_ENCODING = re.compile(r"""^(\s*<\?xml[^>]*?)\s+encoding\s*=\s*(['"])[^'"]*\2""")


def as_xml(value: Any) -> Xml:
    if isinstance(value, Xml):
        return value
    if isinstance(value, (str, bytes)):
        if isinstance(value, str):  # text is UTF-8 here, whatever its declaration says (N'... encoding="utf-16"')
            value = _DECLARED_ENCODING.sub(r"\1", value)
        data = value.encode("utf-8") if isinstance(value, str) else value
        if not data.strip():
            return Xml("")
        parse_xml(data)
        return Xml(data.decode("utf-8", errors="replace") if isinstance(value, bytes) else value)
    raise _failed(value, "xml")


def _datetime(value: Any, name: str) -> datetime:
    moment = moments.moment(value, name)
    if name == "DATE":
        return Date(moment.year, moment.month, moment.day)
    return moments.kept(datetime.combine(moment.date(), moment.time()), name)  # not a Date: it has its time


def written(value: Any) -> str:
    """A value as a script writes it, for an error's "near '...'" (never Python's repr)."""
    if value is None:
        return "NULL"
    if isinstance(value, str) and not value.isidentifier():
        return f"'{value}'"
    return str(value)


def sql_type(text: str) -> TypeName:
    """A type written as a string, as the XML ``value()`` method takes it: ``'nvarchar(100)'``."""
    match = re.fullmatch(r"\s*\[?(\w+)\]?\s*(?:\(\s*(max|\d+)\s*(?:,\s*(\d+)\s*)?\))?\s*", text, re.IGNORECASE)
    if match is None or match.group(1).upper() not in KNOWN:
        raise SqlError(UNKNOWN_TYPE, f"Cannot find data type {text.strip()}.")
    length, scale = match.group(2), match.group(3)
    size = None if length is None else (-1 if length.lower() == "max" else int(length))
    return TypeName(match.group(1).upper(), size, None if scale is None else int(scale))


# -- comparison -------------------------------------------------------------------------


def _comparable(left: Any, right: Any) -> tuple[Any, Any]:
    """Both sides in one type, by SQL Server's precedence (number over string, guid over string)."""
    if isinstance(left, str) and isinstance(right, str):
        return left.rstrip(" ").casefold(), right.rstrip(" ").casefold()  # trailing blanks, not tabs
    if isinstance(left, datetime) and isinstance(right, datetime):
        return moments.naive(left), moments.naive(right)
    if isinstance(left, str) != isinstance(right, str):
        other = right if isinstance(left, str) else left
        text = left if isinstance(left, str) else right
        if isinstance(other, uuid.UUID):
            converted: Any = _guid(text)
        elif isinstance(other, bool) or isinstance(other, int):
            converted = _integer(text, "BIGINT") if _INTEGER_TEXT.fullmatch(text) else exact_number(
                text, "INT")  # read leniently, as a number; named as SQL Server converts it, to int
        elif isinstance(other, (Decimal, float)):
            converted = exact_number(text, "DECIMAL")
        elif isinstance(other, datetime):
            converted = _datetime(text, "DATETIME")
        else:
            return left, right
        return (converted, right) if isinstance(left, str) else (left, converted)
    if isinstance(left, float) or isinstance(right, float):
        return float(left), float(right)
    return left, right


# The order SQL Server compares a uniqueidentifier's bytes in (as it stores them, the first
# three groups little-endian): the last six first, then the fourth group, the third, ...
_GUID_ORDER = (10, 11, 12, 13, 14, 15, 8, 9, 6, 7, 4, 5, 0, 1, 2, 3)


def _guid_key(value: uuid.UUID) -> bytes:
    stored = value.bytes_le
    return bytes(stored[index] for index in _GUID_ORDER)


def compare(op: str, left: Any, right: Any) -> bool | None:
    """A comparison with NULL giving unknown (None)."""
    if left is None or right is None:
        return None
    a, b = _comparable(left, right)
    if isinstance(a, uuid.UUID) and isinstance(b, uuid.UUID):
        a, b = _guid_key(a), _guid_key(b)
    try:
        if op == "=":
            return bool(a == b)
        if op == "<>":
            return bool(a != b)
        if op == "<":
            return bool(a < b)
        if op == ">":
            return bool(a > b)
        if op == "<=":
            return bool(a <= b)
        return bool(a >= b)
    except TypeError:
        raise SqlError(402, f"The data types {type_of(left)} and {type_of(right)} are incompatible in the "
                            f"{op} operator.") from None


def truth(value: Any) -> bool:
    """Whether a condition holds: unknown (None) does not."""
    return value is True
