"""The broker's own message types and the body of an Error message (spec 5)."""

from __future__ import annotations

import re
from xml.sax.saxutils import escape

from broker import arguments
from broker.conversations.validation import XmlRefused, parse_xml
from broker.errors import NOT_AN_ERROR_BODY, ArgumentTypeError, InvalidArgumentError

ERROR = "http://schemas.microsoft.com/SQL/ServiceBroker/Error"
END_DIALOG = "http://schemas.microsoft.com/SQL/ServiceBroker/EndDialog"
DIALOG_TIMER = "http://schemas.microsoft.com/SQL/ServiceBroker/DialogTimer"
DEFAULT = "DEFAULT"

# Ids of the built-in message types and contract (seeded by the first migration).
ERROR_ID = 1
END_DIALOG_ID = 2
DIALOG_TIMER_ID = 5
DEFAULT_MESSAGE_TYPE_ID = 14
DEFAULT_CONTRACT_ID = 6

# Broker-generated error codes (the negated SQL Server error number).
LIFETIME_EXPIRED = -8489
CONTRACT_NOT_SUPPORTED = -8408
VALIDATION_FAILED = -9615
REMOTE_SERVICE_DROPPED = -8470
TYPE_NOT_IN_CONTRACT = -8498

_ERROR_NS = ERROR
_INT = re.compile(r"\s*[+-]?[0-9]+\s*")  # xs:int's lexical form (int() takes more: "1_0", "١")
_INT_RANGE = range(-(2**31), 2**31)


def error_body(code: int, description: str) -> bytes:
    """The XML body of an Error message, as SQL Server writes it (UTF-8 here).

    A character XML 1.0 cannot carry (a control character in a service's name quoted in
    a broker error) becomes U+FFFD, so every Error body parses at the far side; END
    CONVERSATION refuses such a description before it gets here (``arguments.failure``).
    """
    number = arguments.integer(code, "the error code")
    text = arguments.xml_text(arguments.text(description, "the error description"))
    return (
        '<?xml version="1.0"?>'
        f'<Error xmlns="{_ERROR_NS}">'
        f"<Code>{number}</Code>"
        # A carriage return is written as a reference: a parser turns a literal one into \n.
        f"<Description>{escape(text, {chr(13): '&#13;'})}</Description>"
        "</Error>"
    ).encode()


def parse_error(body: bytes | str | None) -> tuple[int, str]:
    """Return ``(code, description)`` from the body of an Error message.

    Raises ArgumentTypeError (206) for an argument that is not bytes or str, and
    InvalidArgumentError (NOT_AN_ERROR_BODY) for anything that is not an Error body.
    """
    if not isinstance(body, (bytes, str)):
        raise ArgumentTypeError(206, given=type(body).__name__, expected="varbinary(max)",
                                what="the body of an Error message")
    try:
        root = parse_xml(body.encode("utf-8") if isinstance(body, str) else body)
    except (UnicodeError, XmlRefused) as exc:
        raise InvalidArgumentError(NOT_AN_ERROR_BODY, reason=str(exc)) from None
    if root.tag != f"{{{_ERROR_NS}}}Error":
        raise InvalidArgumentError(NOT_AN_ERROR_BODY, reason=f"its root is <{root.tag}>, not <Error>")
    ns = {"e": _ERROR_NS}
    code = root.findtext("e:Code", namespaces=ns)
    description = root.findtext("e:Description", namespaces=ns)
    if code is None or not _INT.fullmatch(code) or int(code) not in _INT_RANGE:
        raise InvalidArgumentError(NOT_AN_ERROR_BODY, reason=f"its <Code> is {code!r}, not an int")
    return int(code), description or ""
