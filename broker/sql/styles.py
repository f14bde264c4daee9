"""CONVERT's styles, as Microsoft's "CAST and CONVERT (Transact-SQL)" documents them:
how a datetime, a date, a float or a binary value is written as text, and how text is
read back as a datetime or as binary.

A datetime style without the century (1 to 14 but for 9 and 13) writes the year in two
digits; one read back is 19yy from 50 and 20yy under it (SQL Server's two-digit year
cutoff, 2049). A date read in a style whose order is day first (103, 104, 105 ...) or
year first (111, 112 ...) is read in that order, whatever DATEFORMAT would say.
"""

from __future__ import annotations

import re
from datetime import datetime

from broker.sql import moments
from broker.sql.errors import SqlError

NOT_A_DATETIME_STYLE = 281
STYLE_NOT_SUPPORTED = 9809
CONVERSION_ERROR = 8114
NOT_THE_STYLE = 9807

_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
# Each date style with the century (the one without is 100 less) and its date part:
# the order of day, month and year and the character between them.
_DATES = {101: ("mdy", "/"), 102: ("ymd", "."), 103: ("dmy", "/"), 104: ("dmy", "."), 105: ("dmy", "-"),
          110: ("mdy", "-"), 111: ("ymd", "/"), 112: ("ymd", "")}
# Styles that are the same with and without 100 (and their other numbers): always the century.
_SAME = {0: 100, 9: 109, 13: 113, 20: 120, 21: 121, 25: 121, 24: 108}
_DATETIME_STYLES = (set(_DATES) | {style - 100 for style in _DATES} | set(_SAME) | set(_SAME.values())
                    | {106, 6, 107, 7, 108, 8, 114, 14, 22, 23, 126, 127, 130, 131})
_HIJRI = {130, 131}
# Styles of month names or of the time alone: text in them has no numeric date (nor in 112's digits).
_NO_NUMERIC_DATE = {6, 7, 8, 9, 12, 13, 14, 24, 100, 106, 107, 108, 109, 112, 113, 114}
# Significant digits of the float styles that always write an exponent (126: an older name of 2).
_FLOAT_DIGITS = {1: 8, 2: 16, 126: 16}


def datetime_text(moment: datetime, style: int) -> str:
    """A datetime written in ``style``: 281 for a number that is no datetime style."""
    if style not in _DATETIME_STYLES:
        raise SqlError(NOT_A_DATETIME_STYLE, f"{style} is not a valid style number when converting from datetime "
                                             "to a character string.")
    if style in _HIJRI:
        raise SqlError(STYLE_NOT_SUPPORTED, f"The style {style} is not supported for conversions from datetime to "
                                            "nvarchar: the Hijri calendar is not kept here.")
    style = _SAME.get(style, style)
    full = style if style >= 100 or style in (22, 23) else style + 100  # 22 and 23 have no other number
    year = f"{moment.year:04d}" if style >= 100 or style == 23 else f"{moment.year % 100:02d}"
    millis = f"{moment.microsecond // 1000:03d}"
    clock = f"{moment.hour:02d}:{moment.minute:02d}:{moment.second:02d}"
    month = _MONTHS[moment.month - 1]
    iso_date = f"{moment.year:04d}-{moment.month:02d}-{moment.day:02d}"
    hour, half = moment.hour % 12 or 12, "AM" if moment.hour < 12 else "PM"
    if full in _DATES:
        order, between = _DATES[full]
        parts = {"d": f"{moment.day:02d}", "m": f"{moment.month:02d}", "y": year}
        return between.join(parts[letter] for letter in order)
    written = {
        100: f"{month} {moment.day:2d} {year} {hour:2d}:{moment.minute:02d}{half}",
        106: f"{moment.day:02d} {month} {year}",
        107: f"{month} {moment.day:02d}, {year}",
        108: clock,
        109: f"{month} {moment.day:2d} {year} {hour:2d}:{moment.minute:02d}:{moment.second:02d}:{millis}{half}",
        113: f"{moment.day:02d} {month} {year} {clock}:{millis}",
        114: f"{clock}:{millis}",
        120: f"{iso_date} {clock}",
        121: f"{iso_date} {clock}.{millis}",
        22: f"{moment.month:02d}/{moment.day:02d}/{year} {hour:2d}:{moment.minute:02d}:{moment.second:02d} {half}",
        23: iso_date,
    }
    if full in written:
        return written[full]
    # 126 and 127 (ISO 8601): without the milliseconds when they are 0; a datetime has no zone to show.
    return f"{iso_date}T{clock}" + (f".{millis}" if moment.microsecond // 1000 else "")


def date_text(day: datetime, style: int | None, target: str) -> str:
    """A DATE written in ``style`` (None, as CAST writes it: yyyy-mm-dd), its date alone:
    8114 for a style of the time alone, 281 for 14, 114 and a number that is no style."""
    style = 23 if style is None else _SAME.get(style, style)
    if style not in _DATETIME_STYLES or style == 114 or style == 14:
        raise SqlError(NOT_A_DATETIME_STYLE, f"{style} is not a valid style number when converting from date to a "
                                             "character string.")
    if style in (8, 108):
        raise SqlError(CONVERSION_ERROR, f"Error converting data type date to {target.lower()}.")
    month = _MONTHS[day.month - 1]
    if style in (100, 109):
        return f"{month} {day.day:2d} {day.year:04d}"
    if style == 113:
        return f"{day.day:02d} {month} {day.year:04d}"
    return datetime_text(day, 1 if style == 22 else 23 if style in (120, 121, 126, 127) else style)


def read_datetime(text: str, style: int, type_name: str) -> datetime:
    """Text read as a ``type_name`` in ``style``: a numeric date in the style's order of
    day, month and year, the rest as without a style (241 when it is no date). A number
    that is no datetime style is 9809, but DATETIME and SMALLDATETIME (SQL Server's older
    parser) read it as 112; a style of names or of the time alone reads no numeric date
    (241 for those two, 9807 for the others)."""
    legacy = type_name in ("DATETIME", "SMALLDATETIME")
    if style not in _DATETIME_STYLES and legacy:
        style = 112
    elif style not in _DATETIME_STYLES or style in _HIJRI:
        raise SqlError(STYLE_NOT_SUPPORTED, f"The style {style} is not supported for conversions from nvarchar to "
                                            f"{type_name.lower()}.")
    full = style + 100 if style < 100 else style
    order = _DATES.get(full, ("mdy", ""))[0]
    stripped = text.strip()
    numeric = re.fullmatch(r"(\d{1,4})([/.-])(\d{1,2})\2(\d{1,4})(.*)", stripped, re.DOTALL)
    if numeric is not None and style in _NO_NUMERIC_DATE:
        if legacy:
            raise SqlError(moments.DATE_FAILED, "Conversion failed when converting date and/or time from character "
                                                "string.")
        raise SqlError(NOT_THE_STYLE, f"The input character string does not follow style {style}, either change "
                                      "the input character string or use a different style.")
    if numeric is not None:
        first, _between, second, third, rest = numeric.groups()
        fields = dict(zip("ymd" if len(first) > 2 else order, (first, second, third), strict=True))
        stripped = f"{_year(fields['y'])}-{int(fields['m']):02d}-{int(fields['d']):02d}{rest}"
    elif re.fullmatch(r"\d{6}", stripped):  # yymmdd
        stripped = f"{_year(stripped[:2])}-{stripped[2:4]}-{stripped[4:]}"
    return moments.moment(stripped.replace(",", " "), type_name)


def _year(digits: str) -> str:
    if len(digits) > 2:
        return f"{int(digits):04d}"
    year = int(digits)
    return str(year + (2000 if year < 50 else 1900))


def float_text(value: float, style: int = 0) -> str:
    """A float written in ``style``: 0 (and any style not below) at most 6 significant
    digits, scientific when needed; 1 and 2 (and 126) always scientific with 8 and 16
    digits; 3 the 17 that tell every float apart. An exponent has three digits (1.23457e+008)."""
    if style in _FLOAT_DIGITS:
        text = format(value, f".{_FLOAT_DIGITS[style] - 1}e")
    else:
        text = format(value, ".17g" if style == 3 else ".6g")
    mantissa, e, exponent = text.partition("e")
    return f"{mantissa}e{exponent[0]}{int(exponent[1:]):03d}" if e else text


def whole_bytes(data: bytes, style: int, length: int) -> bytes:
    """The bytes whose hexadecimal (styles 1 and 2) fits in ``length`` characters: a
    short target takes whole bytes only (CONVERT(VARCHAR(3), 0x0A0B, 1) is '0x')."""
    if style not in (1, 2):
        return data
    return data[:max(length - (2 if style == 1 else 0), 0) // 2]


def binary_text(data: bytes, style: int, target: str) -> str:
    """Bytes written as text: 0 each byte a character, 1 hexadecimal after 0x, 2 without it."""
    if style == 0:
        return data.decode("utf-8", errors="replace")
    if style in (1, 2):
        return ("0x" if style == 1 else "") + data.hex().upper()
    raise SqlError(STYLE_NOT_SUPPORTED, f"The style {style} is not supported for conversions from varbinary to "
                                        f"{target.lower()}.")


def read_binary(text: str, style: int, target: str) -> bytes:
    """Text read as bytes: 0 each character's bytes, 1 hexadecimal digits after 0x, 2
    without the 0x; an odd number of digits or another character is 8114."""
    if style == 0:
        return text.encode("utf-8")
    if style not in (1, 2):
        raise SqlError(STYLE_NOT_SUPPORTED, f"The style {style} is not supported for conversions from nvarchar to "
                                            f"{target.lower()}.")
    digits = text[2:] if style == 1 and text[:2].lower() == "0x" else None if style == 1 else text
    if digits is None or len(digits) % 2 or re.fullmatch(r"[0-9A-Fa-f]*", digits) is None:
        raise SqlError(CONVERSION_ERROR, f"Error converting data type nvarchar to {target.lower()}.")
    return bytes.fromhex(digits)
