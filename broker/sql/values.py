"""T-SQL values in Python: the data types a script declares, CAST/CONVERT between them,
comparison under the default case-insensitive collation, and the XML type's methods.

A value is ``None`` (NULL), ``int`` (INT, SMALLINT, TINYINT and BIT), :class:`BigInt`
(BIGINT), ``Decimal``, ``float``,
``str`` (the character types), ``bytes`` (BINARY/VARBINARY), ``uuid.UUID``
(UNIQUEIDENTIFIER), ``datetime`` or :class:`Xml`. Strings become bytes as UTF-8, the
encoding the Python API sends ``str`` bodies in (SQL Server 2019's UTF-8 collations do
the same; its default collations would send N'...' as UTF-16, see docs/sql.md).
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from typing import Any

from lxml import etree

from broker.sql.errors import SqlError
from broker.sql.nodes import TypeName

CONVERSION_FAILED = 245
UNIQUEIDENTIFIER_FAILED = 8169
ARITHMETIC_OVERFLOW = 8115
XML_PARSING = 9400
UNKNOWN_TYPE = 2715
DATE_FAILED = 241
TOP_NOT_INTEGER = 1060

INTEGER_RANGES = {"BIT": (0, 1), "TINYINT": (0, 255), "SMALLINT": (-32_768, 32_767),
                  "INT": (-2_147_483_648, 2_147_483_647),
                  "BIGINT": (-9_223_372_036_854_775_808, 9_223_372_036_854_775_807)}
INT_LOW, INT_HIGH = INTEGER_RANGES["INT"]
CHARACTER = {"NVARCHAR", "VARCHAR", "NCHAR", "CHAR", "SYSNAME", "NTEXT", "TEXT"}
BINARY = {"VARBINARY", "BINARY", "IMAGE"}
DATETIME = {"DATETIME", "DATETIME2", "SMALLDATETIME", "DATETIMEOFFSET", "DATE"}
EXACT = {"DECIMAL", "NUMERIC", "MONEY", "SMALLMONEY"}
APPROXIMATE = {"FLOAT", "REAL"}
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


@dataclass(frozen=True)
class Xml:
    """A value of the XML type: well-formed text, parsed on demand for its methods."""

    text: str

    def __str__(self) -> str:
        return self.text

    def tree(self) -> etree._Element:
        return parse_xml(self.text.encode("utf-8"))


def check_type(type_name: TypeName, line: int) -> None:
    if type_name.name not in KNOWN:
        raise SqlError(UNKNOWN_TYPE, f"Column, parameter, or variable #1: Cannot find data type {type_name.name}.",
                       line=line)


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
        return "datetime"
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


def convert(value: Any, target: TypeName, *, declared: bool = False) -> Any:
    """``value`` as ``target``: CAST, CONVERT, and assignment to a declared variable."""
    if value is None:
        return None
    name = target.name
    if name in INTEGER_RANGES:
        return _integer(value, name)
    if name in CHARACTER:
        text = _text(value)
        length = target.length if target.length is not None else (
            DECLARED_DEFAULT_LENGTH if declared else CAST_DEFAULT_LENGTH)
        if name == "SYSNAME":
            length = 128
        return text if length in (-1, None) or name in ("NTEXT", "TEXT") else text[:length]
    if name in BINARY:
        data = _bytes(value)
        length = target.length if target.length is not None else (1 if declared else CAST_DEFAULT_LENGTH)
        return data if length == -1 or name == "IMAGE" else data[:length]
    if name == "UNIQUEIDENTIFIER":
        return _guid(value)
    if name == "XML":
        return _xml(value)
    if name in EXACT:
        return _decimal(value, target)
    if name in APPROXIMATE:
        try:
            return float(value if not isinstance(value, str) else value.strip())
        except (TypeError, ValueError):
            raise _failed(value, name.lower()) from None
    if name in DATETIME:
        return _datetime(value, name)
    return value  # SQL_VARIANT


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
        if not re.fullmatch(r"[+-]?\d+", stripped):
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
        raise SqlError(ARITHMETIC_OVERFLOW, f"Arithmetic overflow error converting expression to data type "
                                            f"{name.lower()}.")
    return BigInt(number) if name == "BIGINT" else number


def integer_result(number: int, *operands: int) -> int:
    """The result of integer arithmetic on ``operands``: BIGINT when one of them is (or
    holds a value only BIGINT can), else INT; 8115 past the type's range."""
    wide = any(isinstance(x, BigInt) or not INT_LOW <= x <= INT_HIGH for x in operands)
    return _integer(number, "BIGINT" if wide else "INT")


def exact_number(value: Any, type_name: str) -> Decimal:
    """``value`` read as an exact number, every digit kept (245 when it is not one)."""
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
    number = exact_number(value, target.name)
    precision, scale = _EXACT_SHAPES.get(target.name) or (target.length or 18, target.scale or 0)
    try:
        # SQL Server rounds half away from zero (Python's default is to the even digit).
        number = number.quantize(Decimal(1).scaleb(-scale), rounding=ROUND_HALF_UP)
    except InvalidOperation:  # more digits than Python's decimal context holds
        raise _overflow(target.name) from None
    limit = _MONEY_LIMITS.get(target.name)
    if abs(number) >= Decimal(10) ** (precision - scale) or (limit is not None and abs(number) > limit):
        raise _overflow(target.name)
    return number


def _overflow(name: str) -> SqlError:
    return SqlError(ARITHMETIC_OVERFLOW, f"Arithmetic overflow error converting expression to data type "
                                        f"{name.lower()}.")


def top_count(value: Any) -> int:
    """The row count of TOP (n): a whole number, not negative (1060)."""
    if isinstance(value, (float, Decimal)) and value != int(value) or value is None:
        raise SqlError(TOP_NOT_INTEGER, "The number of rows in the TOP clause must be an integer.")
    count: int = convert(value, TypeName("BIGINT"))
    if count < 0:
        raise SqlError(TOP_NOT_INTEGER, "The number of rows in the TOP clause must be an integer.")
    return count


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, uuid.UUID):
        return str(value).upper()
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S.") + f"{value.microsecond // 1000:03d}"
    if isinstance(value, float):
        return repr(value)
    return str(value)


def _bytes(value: Any) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, (str, Xml)):
        return str(value).encode("utf-8")
    if isinstance(value, uuid.UUID):
        return value.bytes_le  # SQL Server's byte order for uniqueidentifier
    if isinstance(value, bool) or isinstance(value, int):
        return value.to_bytes(4 if -2**31 <= value < 2**31 else 8, "big", signed=True)
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


def _xml(value: Any) -> Xml:
    if isinstance(value, Xml):
        return value
    if isinstance(value, (str, bytes)):
        data = value.encode("utf-8") if isinstance(value, str) else value
        if not data.strip():
            return Xml("")
        parse_xml(data)
        return Xml(data.decode("utf-8", errors="replace") if isinstance(value, bytes) else value)
    raise _failed(value, "xml")


def _datetime(value: Any, name: str) -> datetime:
    if isinstance(value, datetime):
        return value
    if isinstance(value, date):
        return datetime(value.year, value.month, value.day)
    if isinstance(value, str):
        text = value.strip().replace("T", " ")
        # ISO forms, then us_english's month/day/year (SET DATEFORMAT mdy, SQL Server's default).
        for pattern in ("%Y-%m-%d %H:%M:%S.%f", "%Y-%m-%d %H:%M:%S", "%Y-%m-%d %H:%M", "%Y-%m-%d", "%Y%m%d",
                        "%m/%d/%Y %H:%M:%S", "%m/%d/%Y %H:%M", "%m/%d/%Y", "%H:%M:%S.%f", "%H:%M:%S", "%H:%M"):
            try:
                parsed = datetime.strptime(text, pattern)
            except ValueError:
                continue
            return parsed if pattern[0] != "%H" else datetime(1900, 1, 1, parsed.hour, parsed.minute, parsed.second)
    if isinstance(value, (int, float, Decimal)):
        try:
            return datetime(1900, 1, 1) + timedelta(days=float(value))
        except (OverflowError, ValueError):  # beyond year 9999
            raise _overflow(name) from None
    raise SqlError(DATE_FAILED, "Conversion failed when converting date and/or time from character string.")


_TIME_OF_DAY = re.compile(r"\s*(\d{1,2}):(\d{1,2})(?::(\d{1,2})(?:[.:](\d{1,3}))?)?\s*")
WAITFOR_TIME_SYNTAX = 148


def waitfor_time(value: Any, *, delay: bool) -> timedelta:
    """The time of day WAITFOR DELAY / TIME takes, as a time since midnight: a string
    ``hh:mm[[:ss].mss]`` or a datetime. DELAY refuses a date part (it would wait days);
    TIME ignores it. Anything else (NULL, a number, a bad string) is 148."""
    moment: datetime | None = None
    if isinstance(value, str):
        match = _TIME_OF_DAY.fullmatch(value)
        if match is not None:
            hours, minutes, seconds, millis = (int(part or 0) for part in match.groups())
            millis *= 10 ** (3 - len(match.group(4) or "000"))  # '.5' is 500 ms
            if hours < 24 and minutes < 60 and seconds < 60:
                return timedelta(hours=hours, minutes=minutes, seconds=seconds, milliseconds=millis)
        else:
            try:
                moment = _datetime(value, "DATETIME")
            except SqlError:
                moment = None
    elif isinstance(value, datetime):
        moment = value
    if moment is None or delay and moment.date() != date(1900, 1, 1):
        raise SqlError(WAITFOR_TIME_SYNTAX, "Incorrect time syntax in time string used with WAITFOR.")
    return moment - datetime.combine(moment.date(), datetime.min.time())


def written(value: Any) -> str:
    """A value as a script writes it, for an error's "near '...'" (never Python's repr)."""
    if value is None:
        return "NULL"
    if isinstance(value, str) and not value.isidentifier():
        return f"'{value}'"
    return str(value)


def now() -> datetime:
    """GETDATE(): local time without a zone, like SQL Server's datetime."""
    return datetime.now()


def utc_now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


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
        return left.rstrip().casefold(), right.rstrip().casefold()
    if isinstance(left, str) != isinstance(right, str):
        other = right if isinstance(left, str) else left
        text = left if isinstance(left, str) else right
        if isinstance(other, uuid.UUID):
            converted: Any = _guid(text)
        elif isinstance(other, bool) or isinstance(other, int):
            converted = _integer(text, "BIGINT") if re.fullmatch(r"\s*[+-]?\d+\s*", text) else exact_number(
                text, "DECIMAL")
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


def compare(op: str, left: Any, right: Any) -> bool | None:
    """A comparison with NULL giving unknown (None)."""
    if left is None or right is None:
        return None
    a, b = _comparable(left, right)
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


def like(value: Any, pattern: Any) -> bool | None:
    if value is None or pattern is None:
        return None
    regex = ""
    text = _text(pattern)
    index = 0
    while index < len(text):
        char = text[index]
        if char == "%":
            regex += ".*"
        elif char == "_":
            regex += "."
        elif char == "[":
            end = text.find("]", index + 1)
            if end == -1:
                regex += re.escape(char)
            else:
                body = text[index + 1:end]
                regex += "[" + ("^" + re.escape(body[1:]) if body.startswith("^") else re.escape(body)) + "]"
                index = end
        else:
            regex += re.escape(char)
        index += 1
    return re.fullmatch(regex, _text(value).rstrip(), re.IGNORECASE | re.DOTALL) is not None


def truth(value: Any) -> bool:
    """Whether a condition holds: unknown (None) does not."""
    return value is True


def xml_value(xml: Any, path: Any, type_text: Any) -> Any:
    """``xml.value('(/a)[1]', 'nvarchar(100)')``: the first node the XPath selects, as that type."""
    if xml is None:
        return None
    target = sql_type(_text(type_text))
    found = _select(xml, path)
    if not found:
        return None
    first = found[0]
    text = first if isinstance(first, str) else (first.xpath("string()") if hasattr(first, "xpath") else str(first))
    return convert(str(text), target)


def xml_query(xml: Any, path: Any) -> Xml | None:
    if xml is None:
        return None
    found = _select(xml, path)
    return Xml("".join(etree.tostring(item, encoding="unicode") if hasattr(item, "tag") else str(item)
                       for item in found))


def xml_exist(xml: Any, path: Any) -> int | None:
    if xml is None:
        return None
    return 1 if _select(xml, path) else 0


def _select(xml: Any, path: Any) -> list[Any]:
    document = xml if isinstance(xml, Xml) else _xml(xml)
    if not document.text.strip():
        return []
    try:
        result = etree.ElementTree(document.tree()).xpath(_text(path))
    except etree.XPathError as exc:
        raise SqlError(2389, f"XQuery [value()]: {exc}") from None
    if isinstance(result, list):
        return result
    if isinstance(result, bool):
        return [str(int(result))] if result else []
    return [str(result)]
