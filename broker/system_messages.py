"""The broker's own message types and the body of an Error message (spec 5)."""

from __future__ import annotations

from xml.sax.saxutils import escape

from lxml import etree

from broker.errors import BrokerError

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

_ERROR_NS = ERROR
_PARSER = etree.XMLParser(resolve_entities=False, no_network=True)


def error_body(code: int, description: str) -> bytes:
    """The XML body of an Error message, as SQL Server writes it (UTF-8 here)."""
    return (
        '<?xml version="1.0"?>'
        f'<Error xmlns="{_ERROR_NS}">'
        f"<Code>{int(code)}</Code>"
        f"<Description>{escape(description)}</Description>"
        "</Error>"
    ).encode()


def parse_error(body: bytes | str | None) -> tuple[int, str]:
    """Return ``(code, description)`` from the body of an Error message."""
    if body is None:
        raise BrokerError(0, "an Error message always has a body")
    data = body.encode("utf-8") if isinstance(body, str) else bytes(body)
    try:
        root = etree.fromstring(data, _PARSER)
    except etree.XMLSyntaxError as exc:
        raise BrokerError(0, f"not an Error message body: {exc}") from None
    ns = {"e": _ERROR_NS}
    code = root.findtext("e:Code", namespaces=ns)
    description = root.findtext("e:Description", namespaces=ns)
    if code is None:
        raise BrokerError(0, "not an Error message body: no <Code> element")
    return int(code), description or ""
