"""Message body validation (VALIDATION = NONE | EMPTY | WELL_FORMED_XML | VALID_XML) and
XML schema collections.

Bodies come from senders the broker does not trust, so XML is taken as SQL Server's xml
type takes it and no further: no DTD (SQL Server's error 6359), elements at most 128
levels deep (its error 6335), no entity expansion, and nothing loaded from a file or the
network. Large documents are fine: libxml2's huge mode lifts its 10 MB text-node limit.

A schema collection is self-contained, as in SQL Server: one or more ``<xs:schema>``
documents, one after another, that import each other by namespace alone. A
``schemaLocation`` on an include, import, redefine or override is refused, and libxml2
gets the collection's own documents from memory through a resolver that refuses every
other URL.
"""

from __future__ import annotations

import codecs
import re
import threading
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from lxml import etree

from broker.errors import EXTERNAL_SCHEMA_REFERENCE, INVALID_SCHEMA, BrokerError, InvalidArgumentError

if TYPE_CHECKING:  # the catalog needs SQLAlchemy, which Error bodies (parse_error) do without
    from broker.storage.catalog import Catalog, MessageTypeInfo

XS = "http://www.w3.org/2001/XMLSchema"
MAX_DEPTH = 128  # levels of nested elements, the root being level 1 (SQL Server's error 6335)

# The shortest document that nests deeper than MAX_DEPTH: MAX_DEPTH "<a>...</a>" around an
# "<a/>", at least one byte a character. A shorter body needs no depth check, which keeps
# the check off the small bodies whose validation must stay fast.
_SHORTEST_TOO_DEEP = MAX_DEPTH * len("<a></a>") + len("<a/>")
_TOO_DEEP = etree.XPath("boolean(/*" + "/*" * MAX_DEPTH + ")")

_REFERENCES = tuple(f"{{{XS}}}{kind}" for kind in ("include", "import", "redefine", "override"))
# Where libxml2 finds the collection's documents: URLs only the collection's resolver serves.
_IN_MEMORY = "urn:servicebroker:xml-schema-collection:"
_XML_DECLARATION = re.compile(r"\A\ufeff?\s*<\?xml\s.*?\?>", re.DOTALL)
_DECLARED_ENCODING = re.compile(rb"\A\s*<\?xml\s[^>]*?encoding\s*=\s*[\"']([A-Za-z][A-Za-z0-9._-]*)[\"']")
# UTF-32's marks first: little-endian UTF-32's begins with UTF-16's.
_BYTE_ORDER_MARKS = ((codecs.BOM_UTF32_LE, "utf-32"), (codecs.BOM_UTF32_BE, "utf-32"), (codecs.BOM_UTF8, "utf-8-sig"),
                     (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16"))


class XmlRefused(Exception):
    """XML the broker does not take; its message says what the XML is ("not well-formed XML: ...")."""


class _ExternalReference(Exception):
    """Raised by the resolver for a URL it does not hold (lxml re-raises it from the parse)."""


class _InMemory(etree.Resolver):  # type: ignore[misc]  # lxml has no type stubs here
    """Serves the documents it holds, and nothing else: no file, no socket."""

    def __init__(self, documents: Mapping[str, bytes]) -> None:
        super().__init__()
        self._documents = documents

    def resolve(self, system_url: str, public_id: str, context: Any) -> Any:
        document = self._documents.get(system_url)
        if document is None:
            raise _ExternalReference(system_url)
        return self.resolve_string(document, context)


def _new_parser(documents: Mapping[str, bytes]) -> etree.XMLParser:
    # no_network and the resolver each keep libxml2 off the network; the resolver also
    # keeps it off the disk (a DOCTYPE's external subset, a parameter entity, an xs:include).
    parser = etree.XMLParser(resolve_entities=False, no_network=True, load_dtd=False, huge_tree=True,
                             collect_ids=False)
    parser.resolvers.add(_InMemory(documents))
    return parser


_parsers = threading.local()


def parse_xml(data: bytes) -> etree._Element:
    """The root of ``data`` parsed as SQL Server's xml type takes it; XmlRefused otherwise."""
    # A feed parser per thread: etree.fromstring() releases the GIL around the parse,
    # which costs a fifth of a small body's validation.
    try:
        parser = _parsers.parser
    except AttributeError:
        parser = _parsers.parser = _new_parser({})
    try:
        parser.feed(data)
        root = parser.close()
    except BaseException as exc:
        _parsers.parser = _new_parser({})  # the failed parser may still hold part of the document
        if isinstance(exc, _ExternalReference):
            raise XmlRefused(f"XML that refers to '{exc}', which the broker never loads") from None
        if isinstance(exc, etree.LxmlError):
            raise XmlRefused(f"not well-formed XML: {exc}") from None
        raise
    if root.getroottree().docinfo.internalDTD is not None:
        raise XmlRefused("XML with a DTD, which the xml type does not allow (SQL Server's error 6359)")
    if len(data) >= _SHORTEST_TOO_DEEP and _TOO_DEEP(root):
        raise XmlRefused(f"XML nested more than {MAX_DEPTH} levels deep, the most the xml type allows "
                         "(SQL Server's error 6335)")
    return root


def body_failure(catalog: Catalog, message_type: MessageTypeInfo, body: bytes | None) -> str | None:
    """Why ``body`` fails the message type's validation, or None when it passes.

    Never raises: whatever goes wrong while parsing or validating is the body's fault, so
    that the sender gets Error -9615 instead of an exception out of SEND or ALTER QUEUE.
    """
    if message_type.validation == "N":
        return None
    if message_type.validation == "E":
        return None if not body else "The message type requires an empty body."
    if not body:
        return "The message type requires an XML body."
    try:
        document = parse_xml(body)
    except XmlRefused as exc:
        return f"The body is {exc}."
    if message_type.xml_collection_id is None:
        return None
    try:
        schema = _collection(catalog, message_type.xml_collection_id)
        if schema.validate(document):
            return None
        return f"The body is not valid against its schema collection: {schema.error_log.last_error}."
    except BrokerError as exc:  # a collection stored before collections had to be self-contained
        return f"The schema collection cannot be used: {exc.message}"
    except etree.LxmlError as exc:
        return f"The body cannot be validated against its schema collection: {exc}."


def _collection(catalog: Catalog, collection_id: int) -> etree.XMLSchema:
    """The compiled schema of a collection, compiled once per catalog snapshot."""
    schema: etree.XMLSchema | None = catalog.compiled_schemas.get(collection_id)
    if schema is None:
        schema = compile_schema(*catalog.schema_collections[collection_id])
        catalog.compiled_schemas[collection_id] = schema
    return schema


def compile_schema(name: str, xsd: str | bytes) -> etree.XMLSchema:
    """Compile the schema collection ``name``: ``xsd`` holds one or more ``<xs:schema>`` documents.

    Raises InvalidArgumentError: EXTERNAL_SCHEMA_REFERENCE for an include, import, redefine
    or override with a schemaLocation, INVALID_SCHEMA for anything else libxml2 refuses.
    """
    schemas = _schema_documents(name, xsd)
    for schema in schemas:
        for reference in schema.iter(*_REFERENCES):
            location = reference.get("schemaLocation")
            if location is not None:
                raise InvalidArgumentError(EXTERNAL_SCHEMA_REFERENCE, name=name,
                                           reference=f"'{location}' (xs:{etree.QName(reference).localname})")
    main, documents = _assemble(schemas)
    try:
        return etree.XMLSchema(etree.fromstring(main, _new_parser(documents)))
    except etree.XMLSchemaParseError as exc:
        raise InvalidArgumentError(INVALID_SCHEMA, name=name, reason=str(exc)) from None


def _schema_documents(name: str, xsd: str | bytes) -> list[etree._Element]:
    """The ``<xs:schema>`` documents of a collection's text, parsed like a body."""
    try:
        text = xml_text(xsd) if isinstance(xsd, bytes) else xsd
        # SQL Server takes several documents one after another: parse them as the
        # children of one element (which also leaves no room for a DOCTYPE).
        wrapped = f"<collection>{_XML_DECLARATION.sub('', text, count=1)}</collection>".encode()
        collection = parse_xml(wrapped)
    except (UnicodeError, LookupError, XmlRefused) as exc:
        raise InvalidArgumentError(INVALID_SCHEMA, name=name, reason=str(exc)) from None
    schemas = [child for child in collection if isinstance(child.tag, str)]
    stray = [t for t in [collection.text, *(child.tail for child in collection)] if t and t.strip()]
    wrong = [child.tag for child in schemas if child.tag != f"{{{XS}}}schema"]
    if stray or wrong or not schemas:
        reason = (f"text outside its schema documents: {stray[0].strip()[:40]!r}" if stray
                  else f"<{wrong[0]}> is not an <xs:schema> document" if wrong
                  else "it holds no <xs:schema> document")
        raise InvalidArgumentError(INVALID_SCHEMA, name=name, reason=reason)
    return schemas


def xml_text(data: bytes) -> str:
    """XML bytes as text, in the encoding their byte order mark or XML declaration gives
    (UTF-8 when neither does), as an XML parser reads them."""
    for mark, codec in _BYTE_ORDER_MARKS:
        if data.startswith(mark):
            return data.decode(codec)
    declared = _DECLARED_ENCODING.match(data)
    return data.decode(declared.group(1).decode("ascii") if declared else "utf-8")


def _assemble(schemas: list[etree._Element]) -> tuple[bytes, dict[str, bytes]]:
    """The collection as libxml2 compiles it: a main schema and the documents it loads.

    The main schema imports every namespace of the collection. A namespace is served as a
    schema that includes the collection's documents of that namespace: libxml2 loads only
    the first of several imports of one namespace.
    """
    by_namespace: dict[str | None, list[bytes]] = {}
    for schema in schemas:
        by_namespace.setdefault(schema.get("targetNamespace"), []).append(etree.tostring(schema, with_tail=False))
    documents: dict[str, bytes] = {}
    main = _schema(f"urn:uuid:{uuid.uuid4()}")  # its own namespace, so it can import every other
    for n, (namespace, texts) in enumerate(by_namespace.items()):
        hub = _schema(namespace)
        for m, text in enumerate(texts):
            location = f"{_IN_MEMORY}{n}/{m}"
            documents[location] = text
            etree.SubElement(hub, f"{{{XS}}}include", schemaLocation=location)
        location = f"{_IN_MEMORY}{n}"
        documents[location] = etree.tostring(hub)
        imported = etree.SubElement(main, f"{{{XS}}}import", schemaLocation=location)
        if namespace is not None:
            imported.set("namespace", namespace)
    return etree.tostring(main), documents


def _schema(namespace: str | None) -> etree._Element:
    schema = etree.Element(f"{{{XS}}}schema", nsmap={"xs": XS})
    if namespace is not None:
        schema.set("targetNamespace", namespace)
    return schema
