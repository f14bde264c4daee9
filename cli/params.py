"""Option types: T-SQL clause values (``on|off``, a priority level, EXECUTE AS) and values
checked against the ranges of their SQL types before the API sees them.

A value out of range is a usage error (exit 2). The rules are the gate's own
(``broker.arguments``): object names are ``sysname``, counts fit an ``int``, times are
finite numbers of seconds, so the command line and the Python API refuse the same values.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Callable
from typing import IO, Any, TypeVar

import click

from broker import arguments
from broker.arguments import INT_MAX, SYSNAME
from broker.ddl import endpoint_options
from broker.errors import ArgumentTypeError, InvalidArgumentError

T = TypeVar("T")


def _gated(
    type_: click.ParamType,  # type: ignore[type-arg]  # generic only in newer click
    check: Callable[[], T],
    param: click.Parameter | None,
    ctx: click.Context | None,
) -> T:
    """``check()``, with the gate's refusal turned into a usage error."""
    try:
        return check()
    except (InvalidArgumentError, ArgumentTypeError) as exc:
        type_.fail(exc.message, param, ctx)


class OnOff(click.ParamType):  # type: ignore[type-arg]  # generic only in newer click
    """``on`` / ``off`` (any case) as a bool, like ``STATUS = ON`` in T-SQL."""

    name = "on|off"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> bool:
        if isinstance(value, bool):
            return value
        text = str(value).lower()
        if text not in ("on", "off"):
            self.fail(f"{value!r} is not 'on' or 'off'", param, ctx)
        return text == "on"


ON_OFF = OnOff()


class PriorityLevel(click.ParamType):  # type: ignore[type-arg]  # generic only in newer click
    """An integer or ``DEFAULT`` (any case), like ``PRIORITY_LEVEL = 8`` in T-SQL.

    Only the column's type (``tinyint``) is checked here; the range (1 to 10) is the
    library's to check.
    """

    name = "level"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int | str:
        if isinstance(value, int):
            return value
        text = str(value)
        if text.upper() == "DEFAULT":
            return "DEFAULT"
        try:
            number = int(text)
        except ValueError:
            self.fail(f"{value!r} is not a number or DEFAULT", param, ctx)
        return _gated(self, lambda: arguments.integer(number, "the priority level", sql_type="tinyint"), param, ctx)


PRIORITY_LEVEL = PriorityLevel()


class ExecuteAs(click.ParamType):  # type: ignore[type-arg]  # generic only in newer click
    """``SELF`` or ``OWNER`` (any case, stored upper-case) or a user name, as in
    ``EXECUTE AS { SELF | OWNER | 'user_name' }``."""

    name = "SELF|OWNER|USER"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        text = str(value)
        if not text:
            self.fail("give SELF, OWNER or a user name", param, ctx)
        if text.upper() in ("SELF", "OWNER"):
            return text.upper()
        return _gated(self, lambda: arguments.object_name(text, "user"), param, ctx)


EXECUTE_AS = ExecuteAs()


class Name(click.ParamType):  # type: ignore[type-arg]  # generic only in newer click
    """An object name: 1 to ``longest`` characters (``sysname``: 128), no NUL, valid text."""

    name = "name"

    def __init__(self, kind: str, longest: int = SYSNAME) -> None:
        self.kind = kind
        self.longest = longest

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        what = f"{self.kind} name"
        return _gated(self, lambda: arguments.text(value, what, longest=self.longest, empty=False), param, ctx)


class Text(click.ParamType):  # type: ignore[type-arg]  # generic only in newer click
    """Text every backend can store: no NUL, no lone surrogate; at most ``longest`` characters."""

    name = "text"

    def __init__(self, what: str, longest: int | None = None) -> None:
        self.what = what
        self.longest = longest

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        return _gated(self, lambda: arguments.text(value, self.what, longest=self.longest), param, ctx)


class Body(click.ParamType):  # type: ignore[type-arg]  # generic only in newer click
    """A message body given as text, as the bytes the shell passed (UTF-8 normally)."""

    name = "text"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> bytes:
        if isinstance(value, bytes):
            return value
        try:
            # surrogateescape gives back the exact bytes of an argument that is not UTF-8
            return str(value).encode("utf-8", "surrogateescape")
        except UnicodeEncodeError:
            self.fail("the body is not text: give it with --body-file", param, ctx)


BODY = Body()


class Seconds(click.ParamType):  # type: ignore[type-arg]  # generic only in newer click
    """A finite number of seconds from ``minimum`` up to the largest ``int``."""

    name = "seconds"

    def __init__(self, minimum: float = 0.0) -> None:
        self.minimum = minimum

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        number = click.FLOAT.convert(value, param, ctx)
        checked = _gated(self, lambda: arguments.seconds(number, "the number of seconds"), param, ctx)
        if checked < self.minimum:
            self.fail(f"{value} is less than the least allowed, {self.minimum:g}", param, ctx)
        return checked


class RouteLifetime(click.ParamType):  # type: ignore[type-arg]  # generic only in newer click
    """A route's LIFETIME: whole seconds from 1 up to the largest ``int`` (the gate's 9746)."""

    name = "seconds"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        number = click.INT.convert(value, param, ctx)
        return _gated(self, lambda: arguments.route_lifetime(number), param, ctx)


ROUTE_LIFETIME = RouteLifetime()


class WaitTime(click.ParamType):  # type: ignore[type-arg]  # generic only in newer click
    """A WAITFOR timeout: seconds (finite, >= 0) or -1 to wait forever."""

    name = "seconds"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        number = click.FLOAT.convert(value, param, ctx)
        waited = _gated(self, lambda: arguments.wait_time(number, "--wait"), param, ctx)
        assert waited is not None  # None only for None
        return waited


WAIT_TIME = WaitTime()


class Revision(click.ParamType):  # type: ignore[type-arg]  # generic only in newer click
    """A catalog revision as Alembic names one: an id, ``head``, ``base``, ``+1``, ``-1``, ``branch@head``.

    Anything else that starts with ``-`` is an option the command does not have (``upgrade``
    and ``downgrade`` take unknown options as their argument, so that ``-1`` is one).
    Alembic asserts (rather than reports) that no part around ``@`` is empty.
    """

    name = "revision"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        text = _gated(self, lambda: arguments.text(value, "revision", longest=SYSNAME), param, ctx)
        if not all(text.split("@")):
            self.fail(f"{value!r} is no revision: give an id, head, base or a step such as +1", param, ctx)
        if text.startswith("-") and not text[1:].isdigit():  # taken as an argument only to let -1 through
            raise click.NoSuchOption(text, ctx=ctx)
        return text


REVISION = Revision()


def count_range(minimum: int = 1) -> click.IntRange:
    """How many of something (messages, rows, events): ``minimum`` up to the largest ``int``."""
    return click.IntRange(minimum, INT_MAX)


def _path_text(
    type_: click.ParamType,  # type: ignore[type-arg]  # generic only in newer click
    value: Any,
    param: click.Parameter | None,
    ctx: click.Context | None,
) -> None:
    """Refuse a file name the operating system cannot take (NUL, invalid text) as a usage error."""
    if isinstance(value, str):
        try:
            encoded = os.fsencode(value)
        except UnicodeError:
            type_.fail(f"{value!r} is not a valid file name", param, ctx)
        if b"\x00" in encoded:
            type_.fail(f"{value!r} holds the NUL character, which no file name can", param, ctx)


class FilePath(click.Path):
    """``click.Path`` that refuses names no file can have, instead of failing in ``os.stat``."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        _path_text(self, value, param, ctx)
        return super().convert(value, param, ctx)


class InputFile(click.File):
    """``click.File`` that refuses names no file can have, instead of failing in ``open``."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        _path_text(self, value, param, ctx)
        return super().convert(value, param, ctx)


READ_CHUNK = 1 << 20  # bytes per read of a file given on the command line


def read_at_most(file: IO[bytes], limit: int) -> bytes | None:
    """All of ``file``, or None when it holds more than ``limit`` bytes. At most ``limit``
    + 1 bytes are read (a regular file's size is looked at first), so an endless stream
    such as ``/dev/zero`` ends too instead of filling the memory."""
    with contextlib.suppress(OSError, ValueError):  # no descriptor (a test's stream): just read
        info = os.fstat(file.fileno())
        if stat.S_ISREG(info.st_mode) and info.st_size - file.tell() > limit:
            return None
    parts, size = [], 0
    while part := file.read(min(READ_CHUNK, limit + 1 - size)):
        parts.append(part)
        size += len(part)
        if size > limit:
            return None
    return b"".join(parts)


class EndpointValue(click.ParamType):  # type: ignore[type-arg]  # generic only in newer click
    """A value of CREATE ENDPOINT checked by the endpoint's gate (``broker.ddl.endpoint_options``):
    LISTENER_PORT (1024 to 32767), LISTENER_IP (ALL or an address), MESSAGE_FORWARD_SIZE (MB >= 1)."""

    def __init__(self, name: str, check: Callable[[object], object], number: bool) -> None:
        self.name = name
        self.check = check
        self.number = number

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        given = click.INT.convert(value, param, ctx) if self.number else value
        return _gated(self, lambda: self.check(given), param, ctx)


LISTENER_PORT = EndpointValue("port", endpoint_options.listener_port, number=True)
LISTENER_IP = EndpointValue("ip", lambda value: endpoint_options.listener_ip(value) or endpoint_options.ALL,
                            number=False)
FORWARD_SIZE = EndpointValue("megabytes", endpoint_options.forward_size, number=True)


# Names by the kind of object they name (the kind shows in the error).
MESSAGE_TYPE = Name("message type")
CONTRACT = Name("contract")
QUEUE = Name("queue")
SERVICE = Name("service")
FAR_SERVICE = Name("service", longest=arguments.NVARCHAR_256)  # TO SERVICE: a service of any broker
PRIORITY = Name("broker priority")
SCHEMA_COLLECTION = Name("XML schema collection")
OBJECT = Name("object")
ROUTE = Name("route")
REMOTE_SERVICE_BINDING = Name("remote service binding")
USER = Name("user")
DATABASE = Name("database")
ENDPOINT = Name("endpoint")
CERTIFICATE = Name("certificate")
# CREATE ROUTE's clauses: BROKER_INSTANCE is nvarchar(128); the addresses are the DDL's
# to check (9659 empty, 9660 too long, 9744 not LOCAL, TRANSPORT or TCP://host:port).
BROKER_INSTANCE = Text("BROKER_INSTANCE", longest=SYSNAME)
ADDRESS = Text("ADDRESS")
MIRROR_ADDRESS = Text("MIRROR_ADDRESS")
URL = Text("database URL")
