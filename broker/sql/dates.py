"""DATEADD and DATEDIFF as SQL Server computes them.

The datepart is a bare word (``DATEADD(day, 1, @t)``), never a value. DATEADD moves a
moment by a whole number of parts (a fraction is truncated), keeping the day of the
month where it can and else taking the month's last day; DATEDIFF counts the part's
boundaries crossed between two moments (midnight for ``day``, Sunday for ``week``), not
the elapsed time.
"""

from __future__ import annotations

import calendar
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from broker.sql import moments, values
from broker.sql import nodes as n
from broker.sql.errors import SqlError, overflow

_DATETIME = n.TypeName("DATETIME")
_DATETIME2 = n.TypeName("DATETIME2")
_INT_MIN, _INT_MAX = -2**31, 2**31 - 1

# Each datepart's abbreviations, as SQL Server spells them, to one name.
_PARTS = {
    **dict.fromkeys(("year", "yy", "yyyy"), "year"),
    **dict.fromkeys(("quarter", "qq", "q"), "quarter"),
    **dict.fromkeys(("month", "mm", "m"), "month"),
    **dict.fromkeys(("dayofyear", "dy", "y", "day", "dd", "d", "weekday", "dw", "w"), "day"),
    **dict.fromkeys(("week", "wk", "ww"), "week"),
    **dict.fromkeys(("hour", "hh"), "hour"),
    **dict.fromkeys(("minute", "mi", "n"), "minute"),
    **dict.fromkeys(("second", "ss", "s"), "second"),
    **dict.fromkeys(("millisecond", "ms"), "millisecond"),
    **dict.fromkeys(("microsecond", "mcs"), "microsecond"),
}
_MONTHS = {"year": 12, "quarter": 3, "month": 1}
_STEP = {"day": timedelta(days=1), "week": timedelta(weeks=1), "hour": timedelta(hours=1),
         "minute": timedelta(minutes=1), "second": timedelta(seconds=1),
         "millisecond": timedelta(milliseconds=1), "microsecond": timedelta(microseconds=1)}
# Microseconds per part, for the parts DATEDIFF counts from a fixed origin.
_MICROS = {"hour": 3_600_000_000, "minute": 60_000_000, "second": 1_000_000, "millisecond": 1_000,
           "microsecond": 1}


def datepart_keyword(function: str, arg: n.Expr) -> str:
    """The datepart a call names: a bare word, as in SQL Server; anything else (a
    string, a variable) is 1023, as there."""
    if isinstance(arg, n.Column) and len(arg.parts) == 1:
        return arg.parts[0]
    raise SqlError(1023, f"Invalid parameter 1 specified for {function.lower()}.")


def dateadd(part: str, amount: Any, moment: Any) -> datetime:
    """``moment`` moved by ``amount`` (truncated to an int) of ``part``; 517 when the
    result is outside the datetime range."""
    unit = _part(part, "dateadd")
    count = values.convert(_truncated(amount), n.TypeName("INT"))
    start = _moment(moment, _DATETIME)
    try:
        if unit in _MONTHS:
            month_index = start.year * 12 + start.month - 1 + count * _MONTHS[unit]
            year, month = divmod(month_index, 12)
            day = min(start.day, calendar.monthrange(year, month + 1)[1])
            moved = start.replace(year=year, month=month + 1, day=day)
        else:
            moved = start + _STEP[unit] * count
    except (OverflowError, ValueError):
        raise SqlError(517, "Adding a value to a 'datetime' column caused an overflow.") from None
    if isinstance(moment, values.Date):  # a DATE stays one, moved by days and longer parts only
        if unit not in _MONTHS and unit not in ("day", "week"):
            raise SqlError(9810, f"The datepart {unit} is not supported by date function dateadd for data "
                                 "type date.")
        return values.Date(moved.year, moved.month, moved.day)
    if not isinstance(moment, datetime):  # text or a number: the DATETIME it was read as
        return moments.kept(moved, "DATETIME")
    return moved


def datediff(part: str, first: Any, second: Any) -> int:
    """How many ``part`` boundaries lie between ``first`` and ``second`` (negative when
    ``second`` is earlier); 535 when that does not fit in an int."""
    unit = _part(part, "datediff")
    a, b = _moment(first, _DATETIME2), _moment(second, _DATETIME2)
    if unit in _MONTHS:
        step = _MONTHS[unit]
        result = (b.year * 12 + b.month - 1) // step - (a.year * 12 + a.month - 1) // step
    elif unit == "day":
        result = b.toordinal() - a.toordinal()
    elif unit == "week":
        result = b.toordinal() // 7 - a.toordinal() // 7  # ordinals divisible by 7 are Sundays
    else:
        result = _micros(b) // _MICROS[unit] - _micros(a) // _MICROS[unit]
    if not _INT_MIN <= result <= _INT_MAX:
        raise SqlError(535, "The datediff function resulted in an overflow. The number of dateparts separating "
                            "two date/time instances is too large. Try to use datediff with a less precise datepart.")
    return result


def _moment(value: Any, text_as: n.TypeName) -> datetime:
    """A date argument: a datetime as it is (a DATETIME2 keeps its microseconds), text read
    as ``text_as`` (DATEADD reads it as a DATETIME, DATEDIFF as a DATETIME2) and a number of
    days as a DATETIME, as SQL Server types them."""
    if isinstance(value, datetime) and not isinstance(value, values.Date):
        return moments.naive(value)
    converted: datetime = values.convert(value, text_as if isinstance(value, str) else _DATETIME)
    return converted


def _part(part: str, function: str) -> str:
    unit = _PARTS.get(part.lower())
    if unit is None:
        raise SqlError(155, f"'{part}' is not a recognized {function} option.")
    return unit


def _truncated(amount: Any) -> Any:
    """A number with its fraction dropped toward zero, as DATEADD takes it."""
    if isinstance(amount, float | Decimal):
        try:
            return int(amount)
        except (OverflowError, ValueError):  # infinite or not a number
            raise overflow("int") from None
    return amount


def _micros(moment: datetime) -> int:
    return ((moment.toordinal() * 86_400 + moment.hour * 3600 + moment.minute * 60 + moment.second) * 1_000_000
            + moment.microsecond)
