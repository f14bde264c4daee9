"""The gate: every public verb's arguments are checked here before any SQL runs.

One function per kind of argument, with the ranges SQL Server uses (``int`` for
LIFETIME, timer timeouts and failure codes, ``bigint`` for TOP, ``sysname`` for object
names). Each returns the value as the verb uses it, or raises a numbered
:class:`~broker.errors.InvalidArgumentError` (a ``ValueError``) or
:class:`~broker.errors.ArgumentTypeError` (a ``TypeError``). The Python API calls them at
its face (``Broker``, ``Transaction``); the CLI's option types use the same limits.

This module imports nothing but the standard library and ``broker.errors``, so the CLI
can read the limits without loading SQLAlchemy.
"""

from __future__ import annotations

import math
import re
import uuid
from collections.abc import Collection, Iterable, Mapping
from datetime import datetime
from typing import Any

from broker.errors import (
    MISSING_OPTION,
    NOT_FINITE,
    OUT_OF_RANGE,
    UNKNOWN_OPTION,
    ArgumentTypeError,
    InvalidArgumentError,
)

TINYINT_MAX = 255
SMALLINT_MAX = 32_767
INT_MAX = 2_147_483_647
BIGINT_MAX = 9_223_372_036_854_775_807
SYSNAME = 128  # characters in an object name
NVARCHAR_256 = 256  # TO SERVICE, a route's SERVICE_NAME
MAX_BROKER_INSTANCE_BYTES = 256
FOREVER = -1  # a WAITFOR timeout that never ends


def _type_name(value: object) -> str:
    return "NULL" if value is None else type(value).__name__  # None is T-SQL's NULL, not a type


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def wrong_type(what: str, value: object, expected: str) -> ArgumentTypeError:
    return ArgumentTypeError(206, what=what, given=_type_name(value), expected=expected)


def out_of_range(what: str, value: object, rule: str, number: int = OUT_OF_RANGE) -> InvalidArgumentError:
    return InvalidArgumentError(number, what=what, rule=rule, value=_shown(value))


# -- text -----------------------------------------------------------------------------


def text(value: object, what: str, *, longest: int | None = None, empty: bool = True) -> str:
    """A ``str`` that every backend can store: no NUL, no lone surrogate, at most ``longest``.

    PostgreSQL's text columns cannot hold NUL, and a lone surrogate cannot be encoded
    for any driver, so neither may reach SQL.
    """
    if type(value) is not str:
        if not isinstance(value, str):
            raise wrong_type(what, value, "str")
        value = str(value)
    if not empty and not value:
        raise InvalidArgumentError(1038, what=what)
    if longest is not None and len(value) > longest:
        raise InvalidArgumentError(103, f"The {what} that starts with '{value[:32]}' is too long. "
                                        f"Maximum length is {longest}.", name=value[:longest])
    if "\x00" in value:
        raise InvalidArgumentError(102, f"The {what} may not contain the NUL character (U+0000).", near="\\0")
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InvalidArgumentError(
                102, f"The {what} holds a lone surrogate (U+{ord(value[exc.start]):04X}), which is not text.",
                near=value[max(0, exc.start - 8):exc.start]) from None
    return value


def optional_text(value: object, what: str, *, longest: int | None = None) -> str | None:
    return None if value is None else text(value, what, longest=longest)


def object_name(value: object, kind: str) -> str:
    """An object name (``sysname``): 1 to 128 characters, no NUL. One rule for every
    kind of object and every backend."""
    return text(value, f"{kind} name", longest=SYSNAME, empty=False)


def optional_object_name(value: object, kind: str) -> str | None:
    return None if value is None else object_name(value, kind)


# -- numbers --------------------------------------------------------------------------


def integer(value: object, what: str, *, sql_type: str = "int", minimum: int | None = None,
            maximum: int | None = None, below_minimum: int = OUT_OF_RANGE) -> int:
    """An ``int`` (not a bool) that fits ``sql_type`` and lies in [minimum, maximum]."""
    if type(value) is not int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise wrong_type(what, value, sql_type)
        value = int(value)
    top = {"tinyint": TINYINT_MAX, "smallint": SMALLINT_MAX, "int": INT_MAX, "bigint": BIGINT_MAX}[sql_type]
    floor = 0 if sql_type == "tinyint" else -top - 1
    if not floor <= value <= top:
        raise InvalidArgumentError(8115, what=what, type=sql_type)
    low = floor if minimum is None else minimum
    high = top if maximum is None else maximum
    if not low <= value <= high:
        rule = f"at least {low}" if high == top else f"from {low} to {high}"
        raise out_of_range(what, value, rule, number=below_minimum if value < low else OUT_OF_RANGE)
    return value


def seconds(value: object, what: str, *, maximum: int = INT_MAX) -> float:
    """A finite, non-negative number of seconds (``int`` or ``float``) up to ``maximum``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise wrong_type(what, value, "a number of seconds")
    if isinstance(value, float) and not math.isfinite(value):
        raise InvalidArgumentError(NOT_FINITE, what=what, value=_shown(value))
    if value < 0:
        raise out_of_range(what, value, "a number of seconds >= 0")
    if value > maximum:
        raise InvalidArgumentError(8115, what=what, type="int")
    return float(value)


def interval(value: object, what: str) -> float:
    """A period for a background loop: finite seconds > 0."""
    period = seconds(value, what)
    if period <= 0:
        raise out_of_range(what, value, "a number of seconds > 0")
    return period


def wait_time(value: object, what: str = "the WAITFOR timeout") -> float | None:
    """A WAITFOR timeout: None (do not wait), seconds >= 0, or -1 (forever)."""
    if value is None:
        return None
    if value == FOREVER and not isinstance(value, bool):
        return FOREVER
    return seconds(value, what, maximum=INT_MAX // 1000)  # TIMEOUT is milliseconds in an int


def top(value: object) -> int | None:
    """RECEIVE's TOP (n): None (all of the group's messages) or a ``bigint`` >= 0."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float):
            raise InvalidArgumentError(1060)
        raise wrong_type("TOP", value, "bigint")
    if value < 0:
        raise InvalidArgumentError(1014)
    if value > BIGINT_MAX:
        raise InvalidArgumentError(8115, what="TOP", type="bigint")
    return int(value)


def flag(value: object, what: str) -> bool:
    """ON / OFF given as a ``bool`` (0 and 1 are taken too, as T-SQL's ``bit``)."""
    if isinstance(value, bool):
        return value
    if type(value) is int and value in (0, 1):
        return bool(value)
    raise wrong_type(what, value, "bool (ON or OFF)")


# -- identifiers ----------------------------------------------------------------------


def optional_guid(value: object, what: str) -> uuid.UUID | str | None:
    """A ``uniqueidentifier``: a ``uuid.UUID``, its text, or None; anything else is 206.

    Text that is not a uuid is left to the verb, which reports it with its own number
    (8426 for an unknown handle, 8436 for an unknown group), as SQL Server does.
    """
    if value is None or isinstance(value, (uuid.UUID, str)):
        return value
    raise wrong_type(what, value, "uniqueidentifier")


def queue_name(value: object) -> str:
    """A queue's name as T-SQL writes it: ``[dbo.|[dbo].][Queue]``, returned without the
    ``dbo`` schema and the brackets, ``]]`` inside them read as ``]`` (queues live in the
    one schema ``dbo``)."""
    name = text(value, "queue name", empty=False)
    schema = _DBO.match(name)
    if schema is not None:
        name = name[schema.end():]
    if len(name) >= 2 and name[0] == "[" and name[-1] == "]" and "]" not in name[1:-1].replace("]]", ""):
        name = name[1:-1].replace("]]", "]")
    if not name:
        raise InvalidArgumentError(1038, what="queue name")
    return name


_DBO = re.compile(r"(?:dbo|\[dbo\])\.", re.IGNORECASE)


def target_service(value: object) -> str:
    """BEGIN DIALOG's TO SERVICE: ``nvarchar(256)``, not empty; otherwise 8412."""
    if value is not None and not isinstance(value, str):
        raise wrong_type("TO SERVICE", value, "nvarchar(256)")
    if not value or len(value) > NVARCHAR_256:
        raise InvalidArgumentError(8412, name=_shown(value))
    try:
        return text(value, "TO SERVICE")
    except InvalidArgumentError:
        raise InvalidArgumentError(8412, name=_shown(value)) from None


def broker_instance(value: object) -> str | None:
    """BEGIN DIALOG's broker instance: a guid's text or ``'CURRENT DATABASE'``, at most
    256 bytes (8413)."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise wrong_type("broker instance", value, "nvarchar(256)")
    try:
        checked = text(value, "broker instance")
    except InvalidArgumentError:
        raise InvalidArgumentError(8413, name=_shown(value)) from None
    if len(checked.encode("utf-16-le")) > MAX_BROKER_INSTANCE_BYTES:
        raise InvalidArgumentError(8413, name=_shown(value))
    return checked


def lifetime(value: object) -> int | None:
    """A dialog LIFETIME: None (the longest) or seconds from 1 to an ``int``'s largest (8411)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise wrong_type("LIFETIME", value, "int")
    if not 1 <= value <= INT_MAX:
        raise InvalidArgumentError(8411, value=_shown(value))
    return int(value)


# -- message bodies and error descriptions ----------------------------------------------

MAX_BODY_BYTES = 2_147_483_647  # varbinary(max)
MAX_DESCRIPTION = 3000  # END CONVERSATION ... DESCRIPTION is nvarchar(3000)
# Characters XML 1.0 cannot carry (its production Char): an Error message's description
# must survive the trip through the Error body's XML.
_NOT_XML_CHAR = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def xml_text(value: str) -> str:
    """``value`` with every character XML 1.0 cannot carry replaced by U+FFFD."""
    return _NOT_XML_CHAR.sub("\ufffd", value)


def body(value: object) -> bytes | None:
    """A message body as bytes (``varbinary(max)``): ``str`` is sent as UTF-8."""
    if type(value) is bytes or value is None:  # the usual cases first: once per message
        payload = value
    elif isinstance(value, str):
        try:
            payload = value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InvalidArgumentError(
                102, f"The message body holds a lone surrogate (U+{ord(value[exc.start]):04X}), "
                     "which cannot be sent as UTF-8.", near=value[max(0, exc.start - 8):exc.start]) from None
    elif isinstance(value, (bytes, bytearray, memoryview)):
        payload = bytes(value)
    else:
        raise wrong_type("message body", value, "varbinary(max) (bytes or str)")
    if payload is not None and len(payload) > MAX_BODY_BYTES:
        raise InvalidArgumentError(8459)
    return payload


def failure(code: object, description: object) -> tuple[int | None, str | None]:
    """END CONVERSATION WITH ERROR's code (an ``int`` > 0) and description (text XML can carry)."""
    if code is None and description is None:
        return None, None
    if code is None:
        raise InvalidArgumentError(8419)
    if description is None:  # an empty description is fine: SQL Server asks only for non-NULL
        raise InvalidArgumentError(8422)
    if isinstance(code, bool) or not isinstance(code, int):
        raise wrong_type("the failure code", code, "int")
    if code > INT_MAX or code < -INT_MAX - 1:
        raise InvalidArgumentError(8115, what="the failure code", type="int")
    if code <= 0:
        raise InvalidArgumentError(8419, "END CONVERSATION WITH ERROR needs a positive error code; "
                                         "negative codes are reserved for the broker.")
    if not isinstance(description, str):
        raise wrong_type("the failure description", description, "nvarchar(3000)")
    if len(description) > MAX_DESCRIPTION:
        raise InvalidArgumentError(8419, "The error description is longer than 3000 characters.")
    bad = _NOT_XML_CHAR.search(description)
    if bad is not None:
        raise InvalidArgumentError(9420, what="the failure description", char=f"U+{ord(bad.group()):04X}")
    return int(code), description


# -- option sets -----------------------------------------------------------------------


def options(given: Mapping[str, Any], known: Collection[str], statement: str) -> None:
    """Refuse keyword options ``statement`` does not have (a ``TypeError``, as Python's own)."""
    unknown = sorted(str(name) for name in given if name not in known)
    if unknown:
        raise ArgumentTypeError(UNKNOWN_OPTION, statement=statement, names=", ".join(unknown),
                                known=", ".join(sorted(known)))


def required(given: Mapping[str, Any], names: Collection[str], statement: str) -> None:
    missing = [name for name in names if name not in given]
    if missing:
        raise InvalidArgumentError(MISSING_OPTION, statement=statement, names=" and ".join(m.upper() for m in missing))


def mapping(value: object, what: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise wrong_type(what, value, "a mapping of options")
    return value


# -- catalog filters -------------------------------------------------------------------


def column_value(value: object, column: str, kind: str | None) -> None:
    """A value a catalog view's column is compared with (``db.catalog(view, column=value)``).

    ``kind`` is ``"guid"``, ``"time"`` or ``"binary"`` for the columns read back as
    ``uuid.UUID``, ``datetime`` and ``bytes``; a guid column takes a UUID or its text
    (else SQL Server's 8169). Only a binary column takes ``bytes``.
    """
    if value is None:
        return
    if (kind == "binary") != isinstance(value, (bytes, bytearray)):
        raise wrong_type(column, value, "varbinary" if kind == "binary" else
                         "a column value (str, int, float, bool, UUID or datetime)")
    if kind == "binary":
        return
    if kind == "guid":
        if isinstance(value, str):
            try:
                uuid.UUID(value)
            except ValueError:
                raise InvalidArgumentError(8169, "Conversion failed when converting from a character string "
                                                 f"to uniqueidentifier ({column}).") from None
        elif not isinstance(value, uuid.UUID):
            raise wrong_type(column, value, "uniqueidentifier")
    elif kind == "time":
        if not isinstance(value, datetime):
            raise wrong_type(column, value, "datetime")
    elif isinstance(value, bool):
        return
    elif isinstance(value, int):
        integer(value, column, sql_type="bigint")
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidArgumentError(NOT_FINITE, what=column, value=_shown(value))
    elif isinstance(value, str):
        text(value, column)
    else:
        raise wrong_type(column, value, "a column value (str, int, float, bool, UUID or datetime)")


# -- DDL options -----------------------------------------------------------------------

ACTIVATION_OPTIONS = ("status", "procedure_name", "max_queue_readers", "execute_as")
PRIORITY_OPTIONS = ("contract_name", "local_service_name", "remote_service_name", "priority_level")
QUEUE_OPTIONS = ("status", "retention", "activation", "poison_message_handling")
VALIDATIONS = ("NONE", "EMPTY", "WELL_FORMED_XML", "VALID_XML")
DIRECTIONS = ("INITIATOR", "TARGET", "ANY")


def choice(value: object, what: str, choices: Collection[str]) -> str:
    """One of ``choices`` (a T-SQL keyword, any case), returned in upper case."""
    if not isinstance(value, str):
        raise wrong_type(what, value, " | ".join(choices))
    keyword = value.upper()
    if keyword not in choices:
        raise InvalidArgumentError(102, f"{what} must be one of {', '.join(choices)}; got {_shown(value)}.",
                                   near=_shown(value))
    return keyword


def activation(value: object, *, creating: bool) -> dict[str, Any] | None:
    """A queue's ACTIVATION options, checked; None is ``ACTIVATION (DROP)``."""
    if value is None:
        return None
    given = mapping(value, "ACTIVATION")
    options(given, ACTIVATION_OPTIONS, "ACTIVATION")
    if creating:
        required(given, ("procedure_name", "max_queue_readers"), "CREATE QUEUE ... WITH ACTIVATION")
    checked: dict[str, Any] = {}
    if "status" in given:
        checked["status"] = flag(given["status"], "ACTIVATION STATUS")
    if "procedure_name" in given:
        checked["procedure_name"] = text(given["procedure_name"], "PROCEDURE_NAME", longest=776, empty=False)
    if "max_queue_readers" in given:
        checked["max_queue_readers"] = integer(given["max_queue_readers"], "MAX_QUEUE_READERS",
                                               sql_type="smallint", minimum=0)
    if "execute_as" in given:
        checked["execute_as"] = text(given["execute_as"], "EXECUTE AS", longest=SYSNAME, empty=False)
    return checked


def queue_options(given: Mapping[str, Any], *, creating: bool) -> dict[str, Any]:
    """CREATE / ALTER QUEUE's options (``status``, ``retention``, ``activation``,
    ``poison_message_handling``), checked."""
    options(given, QUEUE_OPTIONS, "CREATE QUEUE" if creating else "ALTER QUEUE")
    checked: dict[str, Any] = {}
    for name, value in given.items():
        if name == "activation":
            checked[name] = activation(value, creating=creating)
        else:
            checked[name] = flag(value, name.upper())
    return checked


def priority_options(given: Mapping[str, Any], *, altering: bool) -> dict[str, Any]:
    """CREATE / ALTER BROKER PRIORITY's options, checked: a criterion is a name, None or
    ``"ANY"``; PRIORITY_LEVEL is 1 to 10, None or ``"DEFAULT"``."""
    statement = "ALTER BROKER PRIORITY" if altering else "CREATE BROKER PRIORITY"
    options(given, PRIORITY_OPTIONS, statement)
    if altering and not given:
        raise InvalidArgumentError(MISSING_OPTION, statement=statement,
                                   names="at least one of " + ", ".join(PRIORITY_OPTIONS))
    checked: dict[str, Any] = {}
    for name, value in given.items():
        if name == "priority_level":
            is_default = value is None or (isinstance(value, str) and value.upper() == "DEFAULT")
            checked[name] = None if is_default else integer(
                value, "PRIORITY_LEVEL", sql_type="tinyint", minimum=1, maximum=10)
        elif name == "remote_service_name":
            checked[name] = None if value is None else text(value, "REMOTE_SERVICE_NAME")
        else:
            checked[name] = optional_text(value, name.upper())
    return checked


def contract_messages(value: object) -> list[tuple[str, str]]:
    """CREATE CONTRACT's (message type, SENT BY) pairs, from a mapping or pairs."""
    if isinstance(value, Mapping):
        pairs = list(value.items())
    elif isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise wrong_type("the contract's messages", value, "a mapping of message type to SENT BY")
    else:
        pairs = list(value)
    checked = []
    for pair in pairs:
        if not isinstance(pair, tuple) or len(pair) != 2:
            raise wrong_type("a contract message", pair, "a (message type, SENT BY) pair")
        type_name, direction = pair
        checked.append((text(type_name, "message type name"), choice(direction, "SENT BY", DIRECTIONS)))
    return checked


def names(value: object, what: str) -> list[str]:
    """A list of names given as one ``str`` or an iterable of them (a service's contracts)."""
    if isinstance(value, str):
        return [text(value, what)]
    if isinstance(value, bytes) or not isinstance(value, Iterable):
        raise wrong_type(what, value, "a name or a list of names")
    return [text(item, what) for item in value]


# -- routes -----------------------------------------------------------------------------

ROUTE_OPTIONS = ("service_name", "broker_instance", "lifetime", "address", "mirror_address")


def route_options(given: Mapping[str, Any], *, creating: bool) -> dict[str, Any]:
    """CREATE / ALTER ROUTE's clauses, checked for type and length (the addresses and
    how the clauses go together are the DDL's to check). ALTER needs at least one."""
    statement = "CREATE ROUTE" if creating else "ALTER ROUTE"
    options(given, ROUTE_OPTIONS, statement)
    if creating:
        required(given, ("address",), statement)
    elif not given:
        raise InvalidArgumentError(MISSING_OPTION, statement=statement,
                                   names="at least one of " + ", ".join(ROUTE_OPTIONS).upper())
    checked: dict[str, Any] = {}
    for name, value in given.items():
        if name == "lifetime":
            checked[name] = None if value is None else route_lifetime(value)
        elif value is None and name != "address":
            checked[name] = None
        else:
            longest = 128 if name == "broker_instance" else NVARCHAR_256 if name == "service_name" else None
            checked[name] = text(value, name.upper(), longest=longest)  # addresses: the DDL says 9660
    return checked


def route_lifetime(value: object) -> int:
    """A route's LIFETIME: seconds from 1 to an ``int``'s largest (9746)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise wrong_type("LIFETIME", value, "int")
    if not 1 <= value <= INT_MAX:
        raise InvalidArgumentError(9746, f"The LIFETIME of a route must be from 1 to {INT_MAX} seconds; "
                                         f"got {_shown(value)}.")
    return int(value)
