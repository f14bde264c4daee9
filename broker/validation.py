"""Message body validation at delivery (VALIDATION = NONE | EMPTY | WELL_FORMED_XML | VALID_XML).

Parsing is hardened: no entity expansion, no network access, no DTD loading, so a body
from an untrusted sender cannot make the broker read files or URLs.
"""

from __future__ import annotations

from lxml import etree

from broker.catalog import Catalog, MessageTypeInfo
from broker.errors import BrokerError

_PARSER = etree.XMLParser(resolve_entities=False, no_network=True, load_dtd=False, huge_tree=False)


def compile_schema(xsd: str) -> etree.XMLSchema:
    """Compile an XSD document; a bad one raises BrokerError."""
    try:
        return etree.XMLSchema(etree.fromstring(xsd.encode("utf-8"), _PARSER))
    except (etree.XMLSyntaxError, etree.XMLSchemaParseError) as exc:
        raise BrokerError(0, f"the XML schema collection is not a valid XSD: {exc}") from None


def body_failure(catalog: Catalog, message_type: MessageTypeInfo, body: bytes | None) -> str | None:
    """Why ``body`` fails the message type's validation, or None when it passes."""
    if message_type.validation == "N":
        return None
    empty = body is None or len(body) == 0
    if message_type.validation == "E":
        return None if empty else "the message type requires an empty body"
    if empty:
        return "the message type requires an XML body"
    try:
        document = etree.fromstring(body, _PARSER)
    except etree.XMLSyntaxError as exc:
        return f"the body is not well-formed XML: {exc}"
    if message_type.xml_collection_id is None:
        return None
    schema = catalog.xml_schema(message_type.xml_collection_id)
    if schema.validate(document):
        return None
    return f"the body is not valid against its schema collection: {schema.error_log.last_error}"
