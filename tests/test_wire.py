"""The endpoint's wire format (issue 14): frames round-trip, and hostile bytes only ever
give frames, ``ProtocolError`` or ``CorruptFrame`` (``broker.transport.wire``).

Pure functions, no database: nothing here runs per backend.
"""

from __future__ import annotations

import gc
import struct
import tracemalloc
import uuid
import zlib
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import msgpack  # type: ignore[import-untyped]
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.arguments import BIGINT_MAX, INT_MAX
from broker.conversations.frames import BrokerErrorNote, MessageFrame, Receipt
from broker.errors import OUT_OF_RANGE, InvalidArgumentError
from broker.transport.wire import (
    MAX_BROKER,
    MAX_FRAME,
    MAX_NAME,
    MAX_TEXT,
    PROTOCOL_VERSION,
    U64_MAX,
    CorruptFrame,
    Data,
    Envelope,
    ErrorFrame,
    Frame,
    FrameDecoder,
    FrameType,
    Hello,
    Ping,
    Pong,
    ProtocolError,
    Receipts,
    WireReceipt,
    encode_data,
    encode_error,
    encode_hello,
    encode_ping,
    encode_pong,
    encode_receipts,
)

EXAMPLES = 200
HEADER = 9  # u32 length, u8 type, u32 crc32

LIFETIME = datetime(2030, 5, 17, 8, 30, 15, 123456, tzinfo=UTC)
UNICODE = "//Adventure-Works.com/Überweisung/日本語/🚀"
LONGEST = "🚀" * MAX_NAME  # characters, not bytes
LONGEST_BROKER = "🚀" * MAX_BROKER


def message(**changes: Any) -> MessageFrame:
    frame = MessageFrame(
        message_id=7, conversation_id=uuid.UUID("6f1c1e2a-8f0e-4d3c-9b1a-2c3d4e5f6a7b"), from_initiator=True,
        from_service="//Adventure-Works.com/Expenses", from_broker=str(uuid.UUID(int=1)),
        to_service="//Adventure-Works.com/Expenses/Target", to_broker="",
        contract="//Adventure-Works.com/Expenses/ExpenseSubmission",
        message_type="//Adventure-Works.com/Expenses/SubmitExpense", sequence=0, kind="message",
        body=b"<Expense>1</Expense>", lifetime=LIFETIME)
    return frame._replace(**changes)


def envelope(**changes: Any) -> Envelope:
    return Envelope(message(**changes), time_to_live_ms=86_400_000)


def raw_frame(kind: int, payload: bytes) -> bytes:
    """A frame around any payload, with its right CRC."""
    return struct.pack(">IBI", 5 + len(payload), kind, zlib.crc32(payload)) + payload


def packed_frame(kind: int, value: object) -> bytes:
    return raw_frame(kind, msgpack.packb(value, use_bin_type=True))


def decode(data: bytes) -> list[Frame]:
    return FrameDecoder().feed(data)


def feed_pieces(pieces: Iterable[bytes]) -> list[Frame]:
    decoder = FrameDecoder()
    return [frame for piece in pieces for frame in decoder.feed(piece)]


def split(data: bytes, cuts: Iterable[int]) -> list[bytes]:
    points = sorted({min(cut, len(data)) for cut in cuts} | {0, len(data)})
    return [data[a:b] for a, b in zip(points, points[1:], strict=False)]


def encode(frame: Frame) -> bytes:
    """The encoder of any decoded frame: whatever the decoder accepts, encoding reproduces."""
    match frame:
        case Hello():
            return encode_hello(frame)
        case Data(batch_id, envelopes):
            return encode_data(batch_id, envelopes)
        case Receipts(batch_id, receipts):
            return encode_receipts(batch_id, receipts)
        case Ping(token):
            return encode_ping(token)
        case Pong(token):
            return encode_pong(token)
        case ErrorFrame(number, text):
            return encode_error(number, text)


# -- round trips ---------------------------------------------------------------------------------------------

HELLOS = [
    Hello(PROTOCOL_VERSION, str(uuid.uuid4()), "BrokerEndpoint", "REQUIRED", False),
    Hello(0, "x", "e", "SUPPORTED", True),
    Hello(0xFFFF, LONGEST, UNICODE, "DISABLED", True),
]

ENVELOPES = [
    envelope(),
    envelope(body=b""),
    envelope(body=None, kind="end", message_type="http://schemas.microsoft.com/SQL/ServiceBroker/EndDialog"),
    envelope(kind="error", from_initiator=False, body=b"\x00\xff" * 500),
    envelope(sequence=BIGINT_MAX, message_id=BIGINT_MAX),
    envelope(from_service=UNICODE, to_service=UNICODE, contract=UNICODE, message_type=UNICODE),
    envelope(from_service=LONGEST, to_service=LONGEST, from_broker=LONGEST_BROKER, to_broker=LONGEST_BROKER,
             contract=LONGEST, message_type=LONGEST),
    envelope(lifetime=datetime(1, 1, 1, tzinfo=UTC)),
    envelope(lifetime=datetime.max.replace(tzinfo=UTC)),
    Envelope(message(fragment=INT_MAX - 1, fragments=INT_MAX), time_to_live_ms=0, hops_remaining=0,
             time_consumed_ms=BIGINT_MAX),
    Envelope(message(fragment=3, fragments=4), time_to_live_ms=BIGINT_MAX, hops_remaining=255, time_consumed_ms=12),
]

RECEIPTS = [
    WireReceipt(Receipt(0, True), ""),
    WireReceipt(Receipt(BIGINT_MAX, False, "The target service name could not be found."), str(uuid.uuid4())),
    WireReceipt(Receipt(5, True, "", BrokerErrorNote(-8408, "Target service 'x' does not support contract 'y'.")),
                LONGEST_BROKER),
    WireReceipt(Receipt(6, True, "", BrokerErrorNote(-INT_MAX - 1, "")), ""),
    WireReceipt(Receipt(7, False, "é" * MAX_TEXT, BrokerErrorNote(INT_MAX, "ü" * MAX_TEXT)), UNICODE),
    WireReceipt(Receipt(8, False, fragments_held=0), str(uuid.uuid4())),
    WireReceipt(Receipt(9, False, fragments_held=INT_MAX), ""),
]

ROUND_TRIPS: list[tuple[bytes, Frame]] = [
    *((encode_hello(h), h) for h in HELLOS),
    (encode_data(0, []), Data(0, ())),
    (encode_data(U64_MAX, ENVELOPES), Data(U64_MAX, tuple(ENVELOPES))),
    *((encode_data(n, [e]), Data(n, (e,))) for n, e in enumerate(ENVELOPES)),
    (encode_receipts(0, []), Receipts(0, ())),
    (encode_receipts(U64_MAX, RECEIPTS), Receipts(U64_MAX, tuple(RECEIPTS))),
    (encode_ping(0), Ping(0)),
    (encode_ping(U64_MAX), Ping(U64_MAX)),
    (encode_pong(0), Pong(0)),
    (encode_pong(U64_MAX), Pong(U64_MAX)),
    (encode_error(9727, "The peer is not trusted."), ErrorFrame(9727, "The peer is not trusted.")),
    (encode_error(-INT_MAX - 1, ""), ErrorFrame(-INT_MAX - 1, "")),
    (encode_error(INT_MAX, UNICODE * 10), ErrorFrame(INT_MAX, UNICODE * 10)),
]
STREAM = b"".join(data for data, _ in ROUND_TRIPS)
FRAMES = [frame for _, frame in ROUND_TRIPS]


@pytest.mark.parametrize(("data", "expected"), ROUND_TRIPS)
def test_every_frame_round_trips(data: bytes, expected: Frame) -> None:
    (frame,) = decode(data)
    assert frame == expected
    assert type(frame) is type(expected)  # Ping and Pong are equal tuples: the type tells them apart


def test_decoded_fields_have_their_python_types() -> None:
    (frame,) = decode(encode_data(1, [envelope(lifetime=datetime(2030, 1, 1, 12))]))  # naive: UTC
    assert isinstance(frame, Data)
    decoded = frame.envelopes[0].frame
    assert decoded.lifetime == datetime(2030, 1, 1, 12, tzinfo=UTC) and decoded.lifetime.tzinfo is UTC
    assert type(decoded.conversation_id) is uuid.UUID and type(decoded.body) is bytes


def test_a_body_travels_as_raw_bytes() -> None:
    body = b"\x93\xc4\x01" * 1000  # looks like MessagePack: must come back untouched
    data = encode_data(1, [envelope(body=body)])
    assert body in data
    (frame,) = decode(data)
    assert isinstance(frame, Data) and frame.envelopes[0].frame.body == body


def test_the_header_is_length_type_and_crc_of_the_payload() -> None:
    data = encode_ping(5)
    length, kind, crc = struct.unpack_from(">IBI", data)
    assert length == len(data) - 4 and kind == FrameType.PING and crc == zlib.crc32(data[HEADER:])


def test_a_frame_larger_than_max_frame_is_refused_by_the_encoder() -> None:
    with pytest.raises(InvalidArgumentError) as raised:
        encode_data(1, [envelope(body=bytes(MAX_FRAME))])
    assert raised.value.number == OUT_OF_RANGE
    assert len(encode_data(1, [envelope(body=bytes(MAX_FRAME - 1024))])) <= MAX_FRAME + 4


# -- splitting -----------------------------------------------------------------------------------------------


def test_byte_by_byte_gives_the_same_frames() -> None:
    assert feed_pieces(STREAM[i:i + 1] for i in range(len(STREAM))) == FRAMES


def test_an_incomplete_frame_waits_for_the_rest() -> None:
    decoder = FrameDecoder()
    data = encode_ping(1)
    assert decoder.feed(data[:-1]) == []
    assert decoder.feed(b"") == []
    assert decoder.feed(data[-1:] + data[:3]) == [Ping(1)]
    assert decoder.feed(data[3:]) == [Ping(1)]


@settings(max_examples=EXAMPLES, deadline=None, database=None)
@given(st.lists(st.integers(0, len(STREAM)), max_size=40))
def test_random_splits_give_the_same_frames(cuts: list[int]) -> None:
    assert feed_pieces(split(STREAM, cuts)) == FRAMES


# -- corrupt frames ------------------------------------------------------------------------------------------


def flip(data: bytes, bit: int) -> bytes:
    changed = bytearray(data)
    changed[bit // 8] ^= 1 << bit % 8
    return bytes(changed)


@settings(max_examples=EXAMPLES, deadline=None, database=None)
@given(st.integers(0, len(FRAMES) - 1), st.data())
def test_a_flipped_payload_or_crc_bit_skips_only_that_frame(victim: int, data: st.DataObject) -> None:
    frames = [encode for encode, _ in ROUND_TRIPS]
    start = sum(map(len, frames[:victim]))
    bit = data.draw(st.integers((start + 5) * 8, (start + len(frames[victim])) * 8 - 1), label="bit")
    with pytest.raises(CorruptFrame) as raised:
        decode(flip(STREAM, bit))
    assert raised.value.skipped == 1
    assert raised.value.frames == FRAMES[:victim] + FRAMES[victim + 1:]


@pytest.mark.parametrize("kind", list(FrameType))
@pytest.mark.parametrize("bit", range(8))
def test_a_flipped_type_bit_makes_an_unknown_type(kind: FrameType, bit: int) -> None:
    data = next(data for data, _ in ROUND_TRIPS if data[4] == kind)
    with pytest.raises(ProtocolError, match="unknown frame type"):
        decode(flip(data, 4 * 8 + bit))


def test_the_decoder_goes_on_after_a_corrupt_frame() -> None:
    decoder = FrameDecoder()
    bad = flip(encode_ping(1), HEADER * 8 + 3)
    with pytest.raises(CorruptFrame) as raised:
        decoder.feed(bad + encode_ping(2)[:4])
    assert raised.value.frames == []
    assert decoder.feed(encode_ping(2)[4:] + encode_pong(3)) == [Ping(2), Pong(3)]
    with pytest.raises(CorruptFrame) as raised:
        decoder.feed(encode_ping(4) + bad + bad + encode_ping(5))
    assert raised.value.skipped == 2 and raised.value.frames == [Ping(4), Ping(5)]
    assert isinstance(raised.value, ProtocolError)


# -- hostile input -------------------------------------------------------------------------------------------


def peak_memory(action: Callable[[], object]) -> int:
    """The most memory ``action`` held at once, in bytes. The collector is off meanwhile:
    the finalizers of other code's garbage would count too."""
    gc.disable()
    tracemalloc.start()
    try:
        action()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
        gc.enable()


def hostile(pieces: Sequence[bytes]) -> list[Frame]:
    """Feed ``pieces``: only frames, ProtocolError or CorruptFrame may come out, memory stays
    bounded by what was fed, and every frame the decoder accepts encodes back to itself."""
    decoder = FrameDecoder()
    frames: list[Frame] = []

    def feed() -> None:
        try:
            for piece in pieces:
                try:
                    frames.extend(decoder.feed(piece))
                except CorruptFrame as corrupt:
                    frames.extend(corrupt.frames)
        except ProtocolError:
            pass

    # The slack covers CPython's table of interned strings, which msgpack grows by a map
    # key now and then (about 2 MiB at once); an allocation by a hostile length prefix or
    # element count would be 8 MiB or more.
    assert peak_memory(feed) < 4 * 1024 * 1024 + 8 * sum(map(len, pieces))
    for frame in frames:
        assert decode(encode(frame)) == [frame]
    return frames


@settings(max_examples=EXAMPLES, deadline=None, database=None)
@given(st.binary(max_size=200), st.lists(st.integers(0, 200), max_size=10))
def test_random_bytes(data: bytes, cuts: list[int]) -> None:
    hostile(split(data, cuts))


@settings(max_examples=EXAMPLES, deadline=None, database=None)
@given(st.sampled_from(list(FrameType)), st.binary(max_size=200))
def test_random_payloads_with_a_good_crc(kind: FrameType, payload: bytes) -> None:
    hostile([raw_frame(kind, payload)])


MSGPACK_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), U64_MAX) | st.floats() | st.text(max_size=10)
    | st.binary(max_size=20) | st.sampled_from([b"\x01" * 16, "x" * (MAX_NAME + 1), 2**63, -1, "message", "end"]),
    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(st.text(max_size=10), inner, max_size=6),
    max_leaves=30)


@settings(max_examples=EXAMPLES, deadline=None, database=None)
@given(st.sampled_from(list(FrameType)), MSGPACK_VALUES)
def test_random_msgpack_values_with_a_good_crc(kind: FrameType, value: object) -> None:
    hostile([packed_frame(kind, value)])


def envelope_fields() -> list[object]:
    (frame,) = msgpack.unpackb(encode_data(1, [envelope()])[HEADER:])[1]
    return list(frame)


@settings(max_examples=EXAMPLES, deadline=None, database=None)
@given(st.integers(0, 17), MSGPACK_VALUES)
def test_one_hostile_envelope_field(field: int, value: object) -> None:
    fields = envelope_fields()
    fields[field] = value
    hostile([packed_frame(FrameType.DATA, [1, [fields]])])


@settings(max_examples=EXAMPLES, deadline=None, database=None)
@given(st.integers(0, len(STREAM) * 8 - 1), st.lists(st.integers(0, len(STREAM)), max_size=10))
def test_any_flipped_bit(bit: int, cuts: list[int]) -> None:
    hostile(split(flip(STREAM, bit), cuts))


@settings(max_examples=EXAMPLES, deadline=None, database=None)
@given(st.integers(0, len(STREAM) - 1))
def test_a_truncated_stream_gives_the_complete_frames_before_the_cut(cut: int) -> None:
    frames = hostile([STREAM[:cut]])
    assert frames == FRAMES[:len(frames)]
    assert sum(map(len, (data for data, _ in ROUND_TRIPS[:len(frames) + 1]))) > cut


@pytest.mark.parametrize("length", [0, 4, MAX_FRAME + 1, 2**32 - 1])
def test_a_length_prefix_out_of_range_fails_at_once(length: int) -> None:
    def feed_prefix() -> None:
        with pytest.raises(ProtocolError, match="frame length"):
            FrameDecoder().feed(struct.pack(">I", length))  # the prefix alone: no waiting for the rest

    assert peak_memory(feed_prefix) < 64 * 1024


def test_a_maximum_length_prefix_buffers_only_what_arrived() -> None:
    def feed_start() -> None:
        assert FrameDecoder().feed(struct.pack(">IBI", MAX_FRAME, FrameType.DATA, 0) + bytes(1024)) == []

    assert peak_memory(feed_start) < 64 * 1024


def test_a_hostile_element_count_allocates_nothing() -> None:
    def feed_count() -> None:
        with pytest.raises(ProtocolError, match="malformed"):  # 2**32 - 1 envelopes, in 7 bytes
            decode(raw_frame(FrameType.DATA, b"\x92\x01\xdd\xff\xff\xff\xff"))

    assert peak_memory(feed_count) < 64 * 1024


def test_the_error_about_a_huge_field_does_not_copy_it() -> None:
    fields = envelope_fields()
    fields[FIELDS.index("kind")] = b"\x00" * (4 * 1024 * 1024)  # its repr would be 16 MiB
    data = packed_frame(FrameType.DATA, [1, [fields]])

    def feed_huge() -> None:
        with pytest.raises(ProtocolError, match="message kind") as raised:
            decode(data)
        assert len(str(raised.value)) < 300

    assert peak_memory(feed_huge) < 2 * len(data) + 64 * 1024


def test_an_unknown_frame_type_is_a_protocol_error() -> None:
    with pytest.raises(ProtocolError, match="unknown frame type 99"):
        decode(raw_frame(99, msgpack.packb(1)))


def test_a_protocol_error_leaves_the_decoder_unusable() -> None:
    decoder = FrameDecoder()
    with pytest.raises(ProtocolError):
        decoder.feed(packed_frame(FrameType.PING, -1) + encode_ping(1))
    with pytest.raises(ProtocolError, match="already failed"):
        decoder.feed(encode_ping(2))


def test_trailing_bytes_in_a_payload_are_a_protocol_error() -> None:
    with pytest.raises(ProtocolError, match="malformed"):
        decode(raw_frame(FrameType.PING, msgpack.packb(1) + msgpack.packb(2)))


# -- every field is checked ----------------------------------------------------------------------------------

FIELDS = ["message_id", "conversation_id", "from_initiator", "from_service", "from_broker", "to_service",
          "to_broker", "contract", "message_type", "sequence", "kind", "body", "lifetime", "fragment",
          "hops_remaining", "time_to_live_ms", "time_consumed_ms", "fragments"]
TOO_LONG = "x" * (MAX_NAME + 1)

BAD_ENVELOPE_FIELDS = [
    ("message_id", -1), ("message_id", True), ("message_id", 1.0), ("message_id", "7"), ("message_id", 2**63),
    ("conversation_id", b"\x01" * 15), ("conversation_id", b"\x01" * 17), ("conversation_id", "x" * 16),
    ("conversation_id", None),
    ("from_initiator", 1), ("from_initiator", None),
    ("from_service", ""), ("from_service", TOO_LONG), ("from_service", b"svc"), ("from_service", None),
    ("from_broker", TOO_LONG), ("from_broker", "b" * (MAX_BROKER + 1)), ("from_broker", 1),
    ("from_service", "//a/\x00/b"), ("contract", "\x00"),
    ("to_service", ""), ("to_service", TOO_LONG), ("to_service", ["x"]),
    ("to_broker", TOO_LONG), ("to_broker", None),
    ("contract", ""), ("contract", TOO_LONG), ("message_type", ""), ("message_type", {"a": 1}),
    ("sequence", -1), ("sequence", False), ("sequence", 2**63), ("sequence", 0.0),
    ("kind", "bogus"), ("kind", "MESSAGE"), ("kind", 1), ("kind", None), ("kind", {}), ("kind", ["end"]),
    ("body", "text"), ("body", 1), ("body", [b"x"]),
    ("lifetime", 2**63 - 1), ("lifetime", -(2**63)), ("lifetime", "2030-01-01"), ("lifetime", 1.5),
    ("fragment", -1), ("fragment", INT_MAX + 1), ("fragment", None), ("fragment", 1),  # not below fragments (1)
    ("fragments", 0), ("fragments", INT_MAX + 1), ("fragments", None),
    ("hops_remaining", -1), ("hops_remaining", 256), ("hops_remaining", True),
    ("time_to_live_ms", -1), ("time_to_live_ms", 2**63), ("time_consumed_ms", -1), ("time_consumed_ms", "0"),
]


@pytest.mark.parametrize(("field", "value"), BAD_ENVELOPE_FIELDS)
def test_a_bad_envelope_field_is_a_protocol_error(field: str, value: object) -> None:
    fields = envelope_fields()
    fields[FIELDS.index(field)] = value
    with pytest.raises(ProtocolError) as raised:
        decode(packed_frame(FrameType.DATA, [1, [fields]]))
    assert type(raised.value) is ProtocolError


@pytest.mark.parametrize("payload", [
    [1], [1, [], 2], [-1, []], [2**64 - 1 + 0, {}], {"batch": 1}, None, [1, [[1, 2, 3]]],
])
def test_a_bad_data_payload_is_a_protocol_error(payload: object) -> None:
    with pytest.raises(ProtocolError):
        decode(packed_frame(FrameType.DATA, payload))


def test_an_envelope_with_a_missing_or_extra_field_is_a_protocol_error() -> None:
    fields = envelope_fields()
    for changed in (fields[:-1], [*fields, 0]):
        with pytest.raises(ProtocolError, match="18 fields"):
            decode(packed_frame(FrameType.DATA, [1, [changed]]))


GOOD_RECEIPT = [3, True, "", None, "", None]
BAD_RECEIPTS = [
    [-1, True, "", None, "", None], [3, 1, "", None, "", None], [3, True, None, None, "", None],
    [3, True, "x" * (MAX_TEXT + 1), None, "", None], [3, True, "", [-8408], "", None],
    [3, True, "", [-8408, None], "", None], [3, True, "", [2**31, "x"], "", None],
    [3, True, "", [-(2**31) - 1, "x"], "", None], [3, True, "", ["-8408", "x"], "", None],
    [3, True, "", [-8408, "x" * (MAX_TEXT + 1)], "", None], [3, True, "", None, TOO_LONG, None],
    [3, True, "", None, None, None], [3, False, "", None, "", -1], [3, False, "", None, "", INT_MAX + 1],
    [3, False, "", None, "", True], [3, False, "", None, "", "2"],
    [3, True, "", None, ""], [*GOOD_RECEIPT, 0], 3,
]


@pytest.mark.parametrize("receipt", BAD_RECEIPTS)
def test_a_bad_receipt_is_a_protocol_error(receipt: object) -> None:
    assert decode(packed_frame(FrameType.RECEIPTS, [1, [GOOD_RECEIPT]])) == [Receipts(1, (WireReceipt(
        Receipt(3, True), ""),))]
    with pytest.raises(ProtocolError):
        decode(packed_frame(FrameType.RECEIPTS, [1, [GOOD_RECEIPT, receipt]]))


GOOD_HELLO: dict[object, object] = {
    "version": 1, "instance": "i", "endpoint": "e", "encryption": "SUPPORTED", "forwarding": False}


def test_a_hello_ignores_keys_a_later_version_adds() -> None:
    (frame,) = decode(packed_frame(FrameType.HELLO, {**GOOD_HELLO, "version": 2, "compression": "zstd"}))
    assert frame == Hello(2, "i", "e", "SUPPORTED", False)


@pytest.mark.parametrize("changes", [
    {"version": -1}, {"version": 2**16}, {"version": "1"}, {"instance": ""}, {"instance": TOO_LONG},
    {"endpoint": None}, {"endpoint": ""}, {"encryption": "required"}, {"encryption": "ON"}, {"encryption": True},
    {"encryption": ["REQUIRED"]},
    {"forwarding": 0}, {"forwarding": "ENABLED"},
])
def test_a_bad_hello_field_is_a_protocol_error(changes: dict[object, object]) -> None:
    with pytest.raises(ProtocolError):
        decode(packed_frame(FrameType.HELLO, {**GOOD_HELLO, **changes}))


@pytest.mark.parametrize("payload", [
    {key: value for key, value in GOOD_HELLO.items() if key != "forwarding"}, [1, "i", "e", "SUPPORTED", False],
    {**GOOD_HELLO, 1: 2}, None,
])
def test_a_malformed_hello_is_a_protocol_error(payload: object) -> None:
    with pytest.raises(ProtocolError):
        decode(packed_frame(FrameType.HELLO, payload))


@pytest.mark.parametrize("kind", [FrameType.PING, FrameType.PONG])
@pytest.mark.parametrize("token", [-1, True, 1.0, "1", None, [1], b"\x00" * 8])
def test_a_bad_token_is_a_protocol_error(kind: FrameType, token: object) -> None:
    with pytest.raises(ProtocolError):
        decode(packed_frame(kind, token))


@pytest.mark.parametrize("payload", [
    [1], [1, "x", 2], ["9727", "x"], [2**31, "x"], [-(2**31) - 1, "x"], [1, None], [1, "x" * (MAX_TEXT + 1)], "x",
])
def test_a_bad_error_frame_is_a_protocol_error(payload: object) -> None:
    with pytest.raises(ProtocolError):
        decode(packed_frame(FrameType.ERROR, payload))


def test_ordinary_values_decode_as_their_encoders_made_them() -> None:
    # The lifetime is microseconds since the epoch, UTC.
    fields = envelope_fields()
    assert fields[12] == (LIFETIME - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)
    assert fields[1] == message().conversation_id.bytes
