"""Dates and times in T-SQL: as SQL Server reads them from text and numbers, the moments
GETDATE() and GETUTCDATE() give, and WAITFOR's time of day. A moment is a ``datetime``
without a zone (SQL Server's ``datetime``); one read from a column the broker keeps in
UTC is held in UTC."""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

from broker.sql.errors import SqlError, overflow

DATE_FAILED = 241


def naive(value: datetime) -> datetime:
    """A datetime as T-SQL holds it: without a zone (a zoned one, read from a column the
    broker keeps in UTC, in UTC)."""
    return value if value.tzinfo is None else value.astimezone(UTC).replace(tzinfo=None)


def moment(value: Any, name: str) -> datetime:
    """``value`` as a moment of type ``name``: 241 for text that is none, 242 for one
    outside the type's range, 8115 for a number of days outside it."""
    if isinstance(value, datetime):
        return naive(value)
    if isinstance(value, date):
        return datetime(value.year, value.month, value.day)
    if isinstance(value, str):
        parsed = _parsed_moment(value)
        if parsed is not None:
            if not _in_range(parsed, name):
                raise _out_of_range(name)
            return parsed
    if isinstance(value, (int, float, Decimal)):
        try:
            counted = datetime(1900, 1, 1) + timedelta(days=float(value))
        except (OverflowError, ValueError):  # beyond year 9999
            raise overflow(name) from None
        if not _in_range(counted, name):  # before 1753 (DATETIME), 1900 or after 2079 (SMALLDATETIME)
            raise overflow(name)
        return counted
    raise SqlError(DATE_FAILED, "Conversion failed when converting date and/or time from character string.")


OUT_OF_RANGE_DATE = 242


def _in_range(moment: datetime, name: str) -> bool:
    low, high = _DATETIME_RANGES.get(name, (datetime.min, datetime.max))
    return low <= moment <= high


def _out_of_range(name: str) -> SqlError:
    return SqlError(OUT_OF_RANGE_DATE, f"The conversion of a nvarchar data type to a {name.lower()} data type "
                                       "resulted in an out-of-range value.")

_DATETIME_RANGES = {"DATETIME": (datetime(1753, 1, 1), datetime.max),
                    "SMALLDATETIME": (datetime(1900, 1, 1), datetime(2079, 6, 6, 23, 59, 59))}
# Dates and times as SQL Server reads them from text (us_english, DATEFORMAT mdy): ISO
# forms and the unseparated yyyymmdd with a time or not, month/day/year, the default
# style "Jan 2 2020 10:00AM", "02 Jan 2020 10:00:00:000" (style 13), and a time of day
# alone (on 1900-01-01).
_MOMENT_PATTERNS = (
    "%Y-%m-%d %H:%M:%S.%f", "%Y-%m-%d %H:%M:%S", "%Y-%m-%d %H:%M", "%Y-%m-%d",
    "%Y%m%d %H:%M:%S.%f", "%Y%m%d %H:%M:%S", "%Y%m%d %H:%M", "%Y%m%d",
    "%m/%d/%Y %H:%M:%S.%f", "%m/%d/%Y %H:%M:%S", "%m/%d/%Y %H:%M", "%m/%d/%Y",
    "%Y-%m-%d %I:%M:%S %p", "%Y-%m-%d %I:%M %p",
    "%b %d %Y %I:%M%p", "%b %d %Y %I:%M:%S%p", "%b %d %Y %I:%M:%S.%f%p", "%b %d %Y %H:%M:%S", "%b %d %Y",
    "%d %b %Y %H:%M:%S.%f", "%d %b %Y %H:%M:%S", "%d %b %Y %H:%M", "%d %b %Y", "%B %d %Y", "%d %B %Y",
    "%H:%M:%S.%f", "%H:%M:%S", "%H:%M")
# What ISO 8601 may end with that these patterns do not read: a zone (Z, +02:00), which
# converting to a type without one drops, as SQL Server's does; a seventh fraction digit.
_ZONE = re.compile(r"(?:Z|[+-]\d{2}:?\d{2})$", re.IGNORECASE)
_FRACTION = re.compile(r"(\.\d{6})\d+")
# hh:mi:ss:mmm, the milliseconds after a colon (styles 9, 13, 14): '10:00:00:5' is 5 ms.
_COLON_MILLISECONDS = re.compile(r"(\d:\d{2}:\d{2}):(\d{1,3})(?!\d)")


def _parsed_moment(value: str) -> datetime | None:
    text = " ".join(re.sub(r"(?<=\d)T(?=\d)", " ", value.strip()).split())  # ISO's T, not OCT's
    if not text:
        return datetime(1900, 1, 1)  # '' (or blanks) is SQL Server's day 0, as 0 is
    if re.search(r"\d", text[:1] or "") and ":" in text:
        text = _ZONE.sub("", text).strip()
    text = _FRACTION.sub(r"\1", text)
    text = _COLON_MILLISECONDS.sub(lambda match: f"{match.group(1)}.{match.group(2):0>3}", text)
    for pattern in _MOMENT_PATTERNS:
        try:
            parsed = datetime.strptime(text, pattern)
        except ValueError:
            continue
        return parsed if pattern[0] != "%H" else datetime(1900, 1, 1, parsed.hour, parsed.minute, parsed.second,
                                                          parsed.microsecond)
    return None


_TIME_OF_DAY = re.compile(r"\s*(\d{1,2}):(\d{1,2})(?::(\d{1,2})(?:[.:](\d{1,3}))?)?\s*")
WAITFOR_TIME_SYNTAX = 148


def waitfor_time(value: Any, *, delay: bool) -> timedelta:
    """The time of day WAITFOR DELAY / TIME takes, as a time since midnight: a string
    ``hh:mm[[:ss].mss]`` or a datetime. DELAY refuses a date part (it would wait days);
    TIME ignores it. Anything else (NULL, a number, a bad string) is 148."""
    at: datetime | None = None
    if isinstance(value, str):
        match = _TIME_OF_DAY.fullmatch(value)
        if match is not None:
            hours, minutes, seconds, millis = (int(part or 0) for part in match.groups())
            millis *= 10 ** (3 - len(match.group(4) or "000"))  # '.5' is 500 ms
            if hours < 24 and minutes < 60 and seconds < 60:
                return timedelta(hours=hours, minutes=minutes, seconds=seconds, milliseconds=millis)
        else:
            try:
                at = moment(value, "DATETIME")
            except SqlError:
                at = None
    elif isinstance(value, datetime):
        at = value
    if at is None or delay and at.date() != date(1900, 1, 1):
        raise SqlError(WAITFOR_TIME_SYNTAX, "Incorrect time syntax in time string used with WAITFOR.")
    return at - datetime.combine(at.date(), datetime.min.time())


def now(name: str = "DATETIME") -> datetime:
    """GETDATE() (a DATETIME) or SYSDATETIME() (``name`` DATETIME2): local time without a zone."""
    return kept(datetime.now(), name)


def utc_now(name: str = "DATETIME") -> datetime:
    """GETUTCDATE() (a DATETIME) or SYSUTCDATETIME() (``name`` DATETIME2)."""
    return kept(datetime.now(UTC).replace(tzinfo=None), name)


def kept(moment: datetime, name: str) -> datetime:
    """``moment`` as type ``name`` keeps it: a DATETIME in 1/300 s, shown in milliseconds as
    .000, .003 or .007 (the nearest, half up: .999 is the next second), a SMALLDATETIME in
    minutes (29.999 s and more round up); the others as they are. 242 when rounding up
    passes the type's last moment."""
    try:
        if name == "DATETIME":
            ticks = (moment.microsecond * 3 + 5000) // 10_000  # the nearest 1/300 s
            moment = moment.replace(microsecond=0) + timedelta(milliseconds=(ticks * 10 + 1) // 3)
        elif name == "SMALLDATETIME":
            up = moment.second * 1000 + moment.microsecond // 1000 >= 29_999
            moment = moment.replace(second=0, microsecond=0) + timedelta(minutes=up)
    except OverflowError:  # past 9999-12-31
        raise _out_of_range(name) from None
    if not _in_range(moment, name):
        raise _out_of_range(name)
    return moment
