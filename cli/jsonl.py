"""The JSON Lines format of ``broker export`` and ``broker import``: one message per line.

A line holds the RECEIVE columns by name (ids as strings, times in ISO 8601).
``message_body`` is the body as text when it is UTF-8 and base64 otherwise;
``message_body_encoding`` says which: ``"utf-8"``, ``"base64"``, or null for no body.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
from typing import Any

import broker
from cli.render import jsonable

BODY_ENCODING = "message_body_encoding"


def message_line(message: broker.Message) -> dict[str, Any]:
    """A message as one exported JSON object: the RECEIVE columns, in their order."""
    line: dict[str, Any] = {}
    for column, value in dataclasses.asdict(message).items():
        if column == "message_body":
            line[column], line[BODY_ENCODING] = _encoded(value)
        else:
            line[column] = jsonable(value)
    return line


def _encoded(body: bytes | None) -> tuple[str | None, str | None]:
    if body is None:
        return None, None
    try:
        return body.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        return base64.b64encode(body).decode("ascii"), "base64"


def message_body(line: dict[str, Any]) -> bytes | None:
    """The body of a line as bytes; ValueError says what is wrong with it."""
    body, encoding = line.get("message_body"), line.get(BODY_ENCODING)
    if body is None:
        return None
    if not isinstance(body, str):
        raise ValueError("message_body is not a string")
    if encoding in (None, "utf-8"):
        return body.encode("utf-8")
    if encoding == "base64":
        try:
            return base64.b64decode(body, validate=True)
        except binascii.Error:
            raise ValueError("message_body is not base64") from None
    raise ValueError(f"{BODY_ENCODING} {encoding!r} is not 'utf-8' or 'base64'")
