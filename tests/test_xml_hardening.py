"""Hostile XML (issue 18): schema collections, message bodies and Error bodies.

* A schema collection is self-contained: an include, import, redefine or override with a
  schemaLocation is refused with 59008, and nothing is read from a file or the network
  when a collection compiles or a body validates. Two probes prove it: a canary FIFO,
  whose writer knows whether anything ever opened it (and which declares the only
  element a test body uses), and a TCP listener on 127.0.0.1 that must see no connection.
* A collection holds one or more ``<xs:schema>`` documents, importing each other by
  namespace.
* Whatever a body holds, SEND, delivery and ALTER QUEUE ... STATUS = ON never raise: a body
  that fails gets Error -9615 to its sender and is not delivered. DTDs are refused (SQL
  Server's 6359), and so are more than 128 levels of nesting (6335); large bodies pass.
* ``broker.parse_error`` raises only numbered errors.
"""

from __future__ import annotations

import codecs
import contextlib
import os
import socket
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from xml.sax.saxutils import escape

import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st
from sqlalchemy import text

import broker
from broker.errors import EXTERNAL_SCHEMA_REFERENCE, INVALID_SCHEMA, NOT_AN_ERROR_BODY

XS = "http://www.w3.org/2001/XMLSchema"
XSI = "http://www.w3.org/2001/XMLSchema-instance"
MESSAGE = "//h/Message"
CONTRACT = "//h/Contract"
TARGET = "//h/Target"
INITIATOR = "//h/Initiator"
TARGET_QUEUE = "HardenedTarget"
INITIATOR_QUEUE = "HardenedInitiator"
COLLECTION = "//h/Schemas"
# Any content under <r>; <Order> holds one positive <Qty>.
SCHEMA = f"""<xs:schema xmlns:xs="{XS}">
  <xs:element name="r"/>
  <xs:element name="Order">
    <xs:complexType><xs:sequence><xs:element name="Qty" type="xs:positiveInteger"/></xs:sequence></xs:complexType>
  </xs:element>
</xs:schema>"""
SECRET_SCHEMA = f'<xs:schema xmlns:xs="{XS}"><xs:element name="Secret"/></xs:schema>'.encode()
SECRET_DTD = b'<!ENTITY secret "SECRET">'
LOL = b'<!DOCTYPE lolz [<!ENTITY lol "lol">' + b"".join(
    b'<!ENTITY lol%d "%s">' % (i, (b"&lol%s;" % (str(i - 1).encode() if i > 1 else b"")) * 10) for i in range(1, 10)
) + b"]>"
VALIDATIONS = ["NONE", "EMPTY", "WELL_FORMED_XML", "VALID_XML"]


# -- probes ----------------------------------------------------------------------------


class Canary:
    """A FIFO whose writer serves ``content`` and records whether anything opened it.

    Opening a FIFO for reading is what releases its writer, so ``opened`` tells that the
    file was opened at all; a reader that parsed the content to its end waited for the
    writer to close, which it does after setting ``opened``.
    """

    def __init__(self, path: Path, content: bytes) -> None:
        os.mkfifo(path)
        self.path = path
        self.opened = threading.Event()
        self._writer = threading.Thread(target=self._serve, args=(content,), daemon=True)
        self._writer.start()

    def _serve(self, content: bytes) -> None:
        with open(self.path, "wb") as fifo:  # blocks until a reader opens the FIFO
            self.opened.set()
            with contextlib.suppress(BrokenPipeError):
                fifo.write(content)

    def close(self) -> None:
        """Release the writer (by opening the FIFO ourselves) and wait for it to end."""
        reader = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
        self._writer.join()
        os.close(reader)


@pytest.fixture
def canary_xsd(tmp_path: Path) -> Iterator[Canary]:
    canary = Canary(tmp_path / "canary.xsd", SECRET_SCHEMA)
    yield canary
    canary.close()


@pytest.fixture
def canary_dtd(tmp_path: Path) -> Iterator[Canary]:
    canary = Canary(tmp_path / "canary.dtd", SECRET_DTD)
    yield canary
    canary.close()


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    """A TCP listener on 127.0.0.1. A client's connect() completes in the kernel's
    backlog, so ``connections`` sees every attempt made before it, without a wait."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        server.setblocking(False)
        yield server


def connections(server: socket.socket) -> int:
    count = 0
    while True:
        try:
            client, _ = server.accept()
        except BlockingIOError:
            return count
        client.close()
        count += 1


def url(server: socket.socket) -> str:
    return f"http://127.0.0.1:{server.getsockname()[1]}/x.xsd"


# -- helpers ---------------------------------------------------------------------------


def make_objects(db: broker.Broker, validation: str, schema: str = SCHEMA, *, target_on: bool = True) -> None:
    """A message type of ``validation`` sent from INITIATOR to TARGET."""
    collection = None
    if validation == "VALID_XML":
        db.create_xml_schema_collection(COLLECTION, schema)
        collection = COLLECTION
    db.create_message_type(MESSAGE, validation, collection)
    db.create_contract(CONTRACT, {MESSAGE: "INITIATOR"})
    db.create_queue(TARGET_QUEUE, status=target_on)
    db.create_service(TARGET, TARGET_QUEUE, [CONTRACT])
    db.create_queue(INITIATOR_QUEUE)
    db.create_service(INITIATOR, INITIATOR_QUEUE)


def send(db: broker.Broker, body: bytes | None) -> uuid.UUID:
    with db.transaction() as tx:
        handle: uuid.UUID = tx.begin_dialog(INITIATOR, TARGET, CONTRACT)
        tx.send(handle, MESSAGE, body)
    return handle


def outcome(db: broker.Broker, handle: uuid.UUID) -> str:
    """'delivered' or 'refused' (Error -9615 at the initiator, nothing at the target); both
    queues are drained, so that every call sees only its own dialog."""
    with db.transaction() as tx:
        delivered = tx.receive(TARGET_QUEUE)
        errors = tx.receive(INITIATOR_QUEUE, conversation_handle=handle)
    if delivered:
        assert [m.message_type_name for m in delivered] == [MESSAGE] and errors == []
        return "delivered"
    [error] = errors
    assert error.message_type_name == broker.ERROR
    assert broker.parse_error(error.message_body)[0] == -9615
    return "refused"


def assert_refused(db: broker.Broker, handle: uuid.UUID) -> None:
    assert outcome(db, handle) == "refused"
    assert db.catalog("sys.transmission_queue") == []


def create_fails(db: broker.Broker, number: int, xsd: str | bytes) -> broker.BrokerError:
    with pytest.raises(ValueError) as raised:  # InvalidArgumentError: a BrokerError and a ValueError
        db.create_xml_schema_collection(COLLECTION, xsd)
    assert isinstance(raised.value, broker.BrokerError)
    assert raised.value.number == number, raised.value
    assert db.catalog("sys.xml_schema_collections", name=COLLECTION) == []
    return raised.value


def schema_with(reference: str, namespace: str | None = None) -> str:
    target = f' targetNamespace="{namespace}"' if namespace else ""
    return f'<xs:schema xmlns:xs="{XS}"{target}>{reference}<xs:element name="r"/></xs:schema>'


# -- 1. self-contained schema collections ----------------------------------------------


@pytest.mark.parametrize("kind", ["include", "redefine", "override", "import"])
@pytest.mark.parametrize("location", ["absolute", "file URL", "relative"])
def test_a_schema_location_on_disk_is_refused_and_never_opened(
    db: broker.Broker, canary_xsd: Canary, monkeypatch: pytest.MonkeyPatch, kind: str, location: str
) -> None:
    monkeypatch.chdir(canary_xsd.path.parent)
    where = {"absolute": str(canary_xsd.path), "file URL": canary_xsd.path.as_uri(), "relative": "canary.xsd"}
    namespace = ' namespace="urn:elsewhere"' if kind == "import" else ""
    error = create_fails(db, EXTERNAL_SCHEMA_REFERENCE,
                         schema_with(f'<xs:{kind}{namespace} schemaLocation="{where[location]}"/>'))
    assert where[location] in error.message and f"xs:{kind}" in error.message
    assert not canary_xsd.opened.is_set()


def test_a_system_file_is_refused_with_a_number(db: broker.Broker) -> None:
    create_fails(db, EXTERNAL_SCHEMA_REFERENCE, schema_with('<xs:include schemaLocation="/etc/passwd"/>'))


@pytest.mark.parametrize("kind", ["include", "import", "redefine", "override"])
def test_a_schema_location_on_the_network_is_refused_and_never_connected(
    db: broker.Broker, listener: socket.socket, kind: str
) -> None:
    namespace = ' namespace="urn:elsewhere"' if kind == "import" else ""
    reference = f'<xs:{kind}{namespace} schemaLocation="{url(listener)}"/>'
    create_fails(db, EXTERNAL_SCHEMA_REFERENCE, schema_with(reference))
    # An import without a location names a namespace only: nothing to fetch, nothing fetched.
    db.create_xml_schema_collection(COLLECTION, schema_with(f'<xs:import namespace="{url(listener)}"/>', "urn:t"))
    assert connections(listener) == 0


def test_a_collection_stored_before_the_rule_reads_nothing_and_refuses_its_bodies(
    db: broker.Broker, canary_xsd: Canary
) -> None:
    # A collection whose text includes the canary, as an older version could store it:
    # the only declaration of <Secret> is in the canary, so a body <Secret/> that passed
    # would prove the canary was read.
    make_objects(db, "NONE")
    db.create_xml_schema_collection(COLLECTION, SCHEMA)
    with db.transaction() as tx:
        tx.connection.execute(text("UPDATE sb_xml_schema_collections SET schema_text = :xsd WHERE name = :name"), {
            "xsd": schema_with(f'<xs:include schemaLocation="{canary_xsd.path}"/>'), "name": COLLECTION})
    db.create_message_type("//h/Valid", "VALID_XML", COLLECTION)  # DDL: the catalog is read again
    db.create_contract("//h/ValidContract", {"//h/Valid": "INITIATOR"})
    db.create_service("//h/ValidTarget", TARGET_QUEUE, ["//h/ValidContract"])
    with db.transaction() as tx:
        handle = tx.begin_dialog(INITIATOR, "//h/ValidTarget", "//h/ValidContract")
        tx.send(handle, "//h/Valid", b"<Secret/>")
    assert_refused(db, handle)
    assert not canary_xsd.opened.is_set()


def test_a_collection_holds_several_schema_documents(db: broker.Broker) -> None:
    # SQL Server's CREATE XML SCHEMA COLLECTION takes several documents one after another.
    # urn:a imports urn:b by namespace alone; urn:b's type and element come from two
    # documents; one document has no namespace.
    orders = f"""<?xml version="1.0" encoding="UTF-8"?>
    <xs:schema xmlns:xs="{XS}" xmlns:b="urn:b" targetNamespace="urn:a" elementFormDefault="qualified">
      <xs:import namespace="urn:b"/>
      <xs:element name="Order"><xs:complexType><xs:sequence>
        <xs:element ref="b:Qty"/>
      </xs:sequence></xs:complexType></xs:element>
    </xs:schema>
    <!-- the quantity, in two documents -->
    <xs:schema xmlns:xs="{XS}" xmlns:b="urn:b" targetNamespace="urn:b">
      <xs:element name="Qty" type="b:Quantity"/>
    </xs:schema>
    <xs:schema xmlns:xs="{XS}" targetNamespace="urn:b">
      <xs:simpleType name="Quantity"><xs:restriction base="xs:positiveInteger"/></xs:simpleType>
    </xs:schema>
    <xs:schema xmlns:xs="{XS}"><xs:element name="Ping"/></xs:schema>
    """
    make_objects(db, "VALID_XML", orders)
    bodies = {
        b'<Order xmlns="urn:a"><Qty xmlns="urn:b">3</Qty></Order>': "delivered",
        b"<Ping/>": "delivered",
        b'<Order xmlns="urn:a"><Qty xmlns="urn:b">0</Qty></Order>': "refused",
        b'<Order xmlns="urn:a"><Qty>3</Qty></Order>': "refused",
        b'<Qty xmlns="urn:b">x</Qty>': "refused",
    }
    assert {body: outcome(db, send(db, body)) for body in bodies} == bodies


@pytest.mark.parametrize("xsd", [
    "", "not xml", "<a/>", f'<xs:schema xmlns:xs="{XS}"/> trailing text',
    f'<!DOCTYPE xs:schema><xs:schema xmlns:xs="{XS}"/>',
    f'<xs:schema xmlns:xs="{XS}"><xs:element name="a" type="NoSuchType"/></xs:schema>',
    # A namespace the collection does not hold: nothing to import it from.
    f'<xs:schema xmlns:xs="{XS}" xmlns:o="urn:o"><xs:import namespace="urn:o"/><xs:element ref="o:x"/></xs:schema>',
    b"\xff\xfe not UTF-8", "\ud800",
])
def test_an_invalid_collection_is_refused_with_a_number(db: broker.Broker, xsd: str | bytes) -> None:
    create_fails(db, INVALID_SCHEMA, xsd)


# -- 2. validation never escapes -------------------------------------------------------

DTD_BODIES = [
    b'<!DOCTYPE r [<!ENTITY x "y">]><r>&x;</r>',  # raised XMLSchemaValidateError out of SEND
    b"<!DOCTYPE r><r/>",
    b'<!DOCTYPE r SYSTEM "urn:x"><r/>',
    LOL + b"<r>&lol9;</r>",
    LOL + b'<r a="&lol9;"/>',
]


@pytest.mark.parametrize("validation", ["WELL_FORMED_XML", "VALID_XML"])
@pytest.mark.parametrize("body", DTD_BODIES)
def test_a_dtd_is_refused_with_9615(db: broker.Broker, validation: str, body: bytes) -> None:
    make_objects(db, validation)
    assert_refused(db, send(db, body))


def test_held_bodies_are_validated_when_the_queue_turns_on(db: broker.Broker) -> None:
    make_objects(db, "VALID_XML", target_on=False)
    bad = [send(db, body) for body in DTD_BODIES]
    good = send(db, b"<Order><Qty>1</Qty></Order>")
    assert len(db.catalog("sys.transmission_queue")) == len(DTD_BODIES) + 1
    db.alter_queue(TARGET_QUEUE, status=True)
    [queue] = db.catalog("sys.service_queues", name=TARGET_QUEUE)
    assert queue["is_receive_enabled"] == queue["is_enqueue_enabled"] == 1
    assert db.catalog("sys.transmission_queue") == []
    [delivered] = db.queue_rows(TARGET_QUEUE)
    assert delivered.message_body == b"<Order><Qty>1</Qty></Order>"
    assert outcome(db, good) == "delivered"
    for handle in bad:
        assert_refused(db, handle)


def test_a_body_reads_no_file(db: broker.Broker, canary_dtd: Canary) -> None:
    make_objects(db, "WELL_FORMED_XML")
    path = canary_dtd.path
    for body in [f'<!DOCTYPE r [<!ENTITY % p SYSTEM "{path}"> %p;]><r>&secret;</r>',
                 f'<!DOCTYPE r SYSTEM "{path}"><r>&secret;</r>',
                 f'<!DOCTYPE r [<!ENTITY e SYSTEM "{path}">]><r>&e;</r>']:
        assert_refused(db, send(db, body.encode()))
    assert not canary_dtd.opened.is_set()


def test_validation_reads_no_file_and_connects_nowhere(
    db: broker.Broker, canary_xsd: Canary, listener: socket.socket
) -> None:
    # Schema location hints in a body are not followed: <Secret> is declared only in the
    # canary (and at the listener's address), so a body of it fails validation.
    make_objects(db, "VALID_XML")
    for location in [str(canary_xsd.path), url(listener)]:
        hinted = f'xmlns:xsi="{XSI}" xsi:noNamespaceSchemaLocation="{location}"'
        assert_refused(db, send(db, f"<Secret {hinted}/>".encode()))
        assert outcome(db, send(db, f"<r {hinted}/>".encode())) == "delivered"
        assert_refused(db, send(db, f'<!DOCTYPE r SYSTEM "{location}"><r/>'.encode()))
        assert_refused(db, send(db, f'<!DOCTYPE r [<!ENTITY % p SYSTEM "{location}"> %p;]><r/>'.encode()))
    assert not canary_xsd.opened.is_set()
    assert connections(listener) == 0


# -- 3. large bodies, amplification, depth ---------------------------------------------


@pytest.mark.parametrize("validation", ["WELL_FORMED_XML", "VALID_XML"])
def test_a_20_mb_text_node_is_delivered(db: broker.Broker, validation: str) -> None:
    make_objects(db, validation)
    body = b"<r>" + b"x" * 20_000_000 + b"</r>"
    with db.transaction() as tx:
        handle = tx.begin_dialog(INITIATOR, TARGET, CONTRACT)
        tx.send(handle, MESSAGE, body)
    with db.transaction() as tx:
        [message] = tx.receive(TARGET_QUEUE)
    assert message.message_body == body


@pytest.mark.parametrize("body", [
    b'<r a="' + b"x" * 12_000_000 + b'"/>',  # one attribute value past libxml2's default 10 MB limit
    b"<r>" + b"&lt;a&gt; " * 3_000_000 + b"</r>",  # 12 million characters of text from entity references
])
def test_large_bodies_without_a_dtd_are_delivered(db: broker.Broker, body: bytes) -> None:
    make_objects(db, "WELL_FORMED_XML")
    assert outcome(db, send(db, body)) == "delivered"


@pytest.mark.parametrize("validation", ["WELL_FORMED_XML", "VALID_XML"])
def test_nesting_stops_at_128_levels(db: broker.Broker, validation: str) -> None:
    make_objects(db, validation)
    assert outcome(db, send(db, b"<r>" + b"<a>" * 127 + b"</a>" * 127 + b"</r>")) == "delivered"
    for depth in [129, 300, 5_000]:
        assert_refused(db, send(db, b"<r>" + b"<a>" * (depth - 1) + b"</a>" * (depth - 1) + b"</r>"))


def test_quadratic_blowup_is_refused(db: broker.Broker) -> None:
    make_objects(db, "WELL_FORMED_XML")
    entity = b'<!DOCTYPE r [<!ENTITY a "' + b"x" * 50_000 + b'">]>'
    assert_refused(db, send(db, entity + b"<r>" + b"&a;" * 50_000 + b"</r>"))
    assert_refused(db, send(db, entity + b'<r b="' + b"&a;" * 50_000 + b'"/>'))


# -- 4. broker.parse_error -------------------------------------------------------------

ERROR_NS = broker.ERROR


@pytest.mark.parametrize("value", [None, 5, 1.5, bytearray(b"<x/>"), ["<x/>"]])
def test_parse_error_refuses_a_wrong_type_with_206(value: object) -> None:
    with pytest.raises(TypeError) as raised:
        broker.parse_error(value)  # type: ignore[arg-type]
    assert isinstance(raised.value, broker.BrokerError) and raised.value.number == 206


@pytest.mark.parametrize("body", [
    b"", "", b"<a>", b"\x00", "\ud800", b"<Error/>", f'<Other xmlns="{ERROR_NS}"><Code>1</Code></Other>',
    *(f'<Error xmlns="{ERROR_NS}"><Code>{code}</Code></Error>' for code in ["", "x", "1.5", "1_0", "١", "2147483648"]),
    f'<!DOCTYPE Error [<!ENTITY c "1">]><Error xmlns="{ERROR_NS}"><Code>&c;</Code></Error>',
    LOL + f'<Error xmlns="{ERROR_NS}"><Code>1</Code><Description>&lol9;</Description></Error>'.encode(),
])
def test_parse_error_refuses_what_is_not_an_error_body_with_59006(body: bytes | str) -> None:
    with pytest.raises(ValueError) as raised:
        broker.parse_error(body)
    assert isinstance(raised.value, broker.BrokerError) and raised.value.number == NOT_AN_ERROR_BODY


def test_parse_error_takes_codes_across_int() -> None:
    for code in [-(2**31), 2**31 - 1, 0]:
        assert broker.parse_error(f'<Error xmlns="{ERROR_NS}"><Code> {code} </Code></Error>') == (code, "")


@settings(max_examples=100, deadline=None, database=None)
@given(st.one_of(st.binary(max_size=300), st.text(max_size=300), st.integers(-(2**20), 2**20), st.none()))
def test_parse_error_raises_only_numbered_errors(value: object) -> None:
    try:
        code, description = broker.parse_error(value)  # type: ignore[arg-type]
    except broker.BrokerError as exc:
        assert exc.number in (206, NOT_AN_ERROR_BODY)
    else:
        assert isinstance(code, int) and isinstance(description, str)


# -- property: any body is delivered or refused with -9615 -----------------------------

# Mostly well-formed XML, with a hostile part now and then.
_NAMES = st.sampled_from(["r", "r", "r", "Order", "Qty", "a", "a", "x:y", "1"])
_SAFE_TEXT = st.text(st.characters(exclude_categories=("Cs", "Cc", "Cn")), max_size=12).map(
    lambda text: escape(text, {'"': "&quot;"}))
_SAFE_ATTRIBUTES = st.dictionaries(st.sampled_from(["a", "b"]), _SAFE_TEXT, max_size=2)
_ATTRIBUTES = st.one_of(
    _SAFE_ATTRIBUTES, _SAFE_ATTRIBUTES, _SAFE_ATTRIBUTES,
    st.dictionaries(st.sampled_from(["a", "xmlns", "xmlns:x", "xsi:type"]), st.text(max_size=12), max_size=2),
)
_LEAVES = st.one_of(_SAFE_TEXT, _SAFE_TEXT, _SAFE_TEXT, st.sampled_from([
    "&amp;", "<![CDATA[<&]]>", "<!-- c -->", "<?pi x?>", "&x;", "&#0;", "&#x10FFFF;", "]]>", "<", "&lol9;", "\x00"]),
    st.text(max_size=12))  # any character, some that XML 1.0 cannot carry


def _element(name: str, attributes: dict[str, str], children: list[str]) -> str:
    listed = "".join(f' {key}="{value}"' for key, value in attributes.items())
    return f"<{name}{listed}>{''.join(children)}</{name}>"


_ELEMENTS = st.recursive(
    st.one_of(_LEAVES, st.builds(_element, _NAMES, _ATTRIBUTES, st.just([]))),
    lambda children: st.builds(_element, _NAMES, _ATTRIBUTES, st.lists(children, max_size=3)),
    max_leaves=12,
)
_PROLOGS = st.one_of(st.just(""), st.just('<?xml version="1.0"?>'), st.sampled_from([
    '<?xml version="1.0" encoding="UTF-16"?>', "<!DOCTYPE r>", '<!DOCTYPE r [<!ENTITY x "y">]>', LOL.decode(),
    '<!DOCTYPE r SYSTEM "/etc/passwd">']))
_ROOTS = st.builds(_element, _NAMES, _ATTRIBUTES, st.lists(_ELEMENTS, max_size=3))
_DEEP = st.integers(120, 140).map(lambda depth: "<r>" * depth + "</r>" * depth)
_DOCUMENTS = st.builds(lambda prolog, root: prolog + root, _PROLOGS, st.one_of(_ROOTS, _DEEP))
_ENCODED = st.builds(lambda text, encoding: text.encode(encoding, "surrogatepass"),
                     _DOCUMENTS, st.sampled_from(["utf-8", "utf-16"]))
_BODIES = st.one_of(st.none(), st.binary(max_size=200), _ENCODED)


@pytest.fixture(params=VALIDATIONS)
def validation(request: pytest.FixtureRequest, db: broker.Broker) -> str:
    make_objects(db, request.param)
    return str(request.param)


def holds_dtd(body: bytes) -> bool:
    """Whether a generated body declares a DTD (its XML is UTF-8, or UTF-16 with a BOM)."""
    utf16 = body[:2] in (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)
    return "<!DOCTYPE" in body.decode("utf-16" if utf16 else "utf-8", "replace")


@settings(max_examples=60, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(body=_BODIES)
@example(body=DTD_BODIES[0]).via("issue 18")
@example(body=DTD_BODIES[1]).via("issue 18")
def test_any_body_is_delivered_or_refused_with_9615(db: broker.Broker, validation: str, body: bytes | None) -> None:
    result = outcome(db, send(db, body))
    event(result)  # --hypothesis-show-statistics shows how many of each
    if validation == "NONE":
        assert result == "delivered"
    elif validation == "EMPTY":
        assert result == ("delivered" if not body else "refused")
    elif not body or holds_dtd(body):
        assert result == "refused"
    assert db.catalog("sys.transmission_queue") == []


@pytest.mark.parametrize(("encoding", "mark"), [
    ("UTF-16", b""), ("ISO-8859-1", b""), ("UTF-8", codecs.BOM_UTF8), ("UTF-32", b""),
])
def test_a_schema_collection_given_as_bytes_is_read_in_its_own_encoding(db: broker.Broker, encoding: str,
                                                                        mark: bytes) -> None:
    xsd = (f'<?xml version="1.0" encoding="{encoding}"?>'
           f'<xs:schema xmlns:xs="http://www.w3.org/2001/XMLSchema"><xs:element name="café" type="xs:string"/>'
           "</xs:schema>")
    db.create_xml_schema_collection("Encoded", mark + xsd.encode(encoding))
    db.create_message_type("//encoded", "VALID_XML", "Encoded")
    db.create_queue("Q")
    db.create_contract("//c", {"//encoded": "ANY"})
    db.create_service("//s", "Q", ["//c"])
    with db.transaction() as tx:
        tx.send(tx.begin_dialog("//s", "//s", "//c"), "//encoded", "<café>x</café>".encode())
        tx.send(tx.begin_dialog("//s", "//s", "//c"), "//encoded", b"<cafe>x</cafe>")  # not of the schema
    arrived = [(m.message_type_name, m.message_body) for m in db.queue_rows("Q")]
    assert ("//encoded", "<café>x</café>".encode()) in arrived
    assert ("//encoded", b"<cafe>x</cafe>") not in arrived  # refused with an Error message instead


def test_a_schema_collection_declaring_an_unknown_encoding_is_59007(db: broker.Broker) -> None:
    xsd = b'<?xml version="1.0" encoding="no-such-encoding"?><xs:schema xmlns:xs="http://www.w3.org/2001/XMLSchema"/>'
    with pytest.raises(broker.BrokerError) as info:
        db.create_xml_schema_collection("Unknown", xsd)
    assert info.value.number == INVALID_SCHEMA
