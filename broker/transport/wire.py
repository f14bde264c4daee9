"""The bytes of the Service Broker endpoint protocol between instances (spec 7.5), sans IO.

A frame on the wire is ``u32 length`` (big-endian, of what follows) | ``u8 type`` |
``u32 crc32`` of the payload | payload; the payload is MessagePack. The types:

- ``HELLO`` (:class:`Hello`): who is speaking, sent first by each side of a connection.
- ``DATA`` (:class:`Data`): a batch of :class:`Envelope` s, each one message or one
  fragment of one (the dialog protocol's frame, whose fragment numbers it carries) with
  the header fields of ``sys.dm_broker_forwarded_messages``; bodies travel as raw
  bytes, never re-encoded.
- ``RECEIPTS`` (:class:`Receipts`): the destination's answers to a batch, one per
  envelope, each naming the database (broker instance) that gave it; the answer to a
  fragment says how many of its message's fragments that database holds.
- ``PING`` / ``PONG`` (:class:`Ping`, :class:`Pong`): a token, echoed.
- ``ERROR`` (:class:`ErrorFrame`): a refusal (e.g. the peer is not trusted); the sender
  closes the connection after it.

The ``encode_*`` functions make whole frames. :class:`FrameDecoder` turns the bytes of a
stream, as they come, back into frames, and checks every field's type and range: it faces
the network. Nothing here does IO, takes locks or touches a database.
"""

from __future__ import annotations

import struct
import uuid
import zlib
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from enum import IntEnum
from typing import Literal, NamedTuple, TypeAlias, get_args

import msgpack  # type: ignore[import-untyped]

from broker.arguments import BIGINT_MAX, INT_MAX, TINYINT_MAX, out_of_range
from broker.conversations.frames import BrokerErrorNote, Kind, MessageFrame, Receipt

PROTOCOL_VERSION = 2  # 2: fragments are answered one by one (``Receipt.fragments_held``)
MAX_FRAME = 8 * 1024 * 1024  # bounds a frame's length prefix: a larger one is a protocol error
MAX_NAME = 256  # characters in a service, contract, message type or endpoint name
MAX_BROKER = 128  # characters in a broker instance (a GUID's 36, stored as nvarchar(128))
MAX_TEXT = 4000  # characters in a transmission status or an error description (nvarchar(4000))
U64_MAX = 2**64 - 1
INT_MIN = -INT_MAX - 1

Encryption = Literal["REQUIRED", "SUPPORTED", "DISABLED"]


class FrameType(IntEnum):
    # Two bits set in each: a single flipped bit never turns one type into another (the
    # CRC covers only the payload), it makes an unknown type.
    HELLO = 0b0011
    DATA = 0b0101
    RECEIPTS = 0b0110
    PING = 0b1001
    PONG = 0b1010
    ERROR = 0b1100


class ProtocolError(Exception):
    """The stream is unusable (a bad length prefix, an unknown frame type, a malformed
    payload or a field of the wrong type or range): close the connection."""


class CorruptFrame(ProtocolError):
    """One or more frames failed their CRC. Their length was sane, so the decoder skipped
    them and stays usable. ``frames`` holds the good frames decoded in the same call, in
    order; the caller acknowledges nothing of the skipped ones, and the sender's retry
    covers them."""

    def __init__(self, skipped: int, frames: list[Frame]) -> None:
        super().__init__(f"{skipped} frame(s) failed their CRC check and were skipped")
        self.skipped = skipped
        self.frames = frames


# -- frames --------------------------------------------------------------------------------------------------


class Hello(NamedTuple):
    """The first frame each side sends: who it is and how its endpoint is set."""

    version: int  # PROTOCOL_VERSION of the sender
    instance_id: str  # the sending broker instance (the process that serves several databases)
    endpoint: str  # the sender's endpoint name
    encryption: Encryption  # the sender's ENCRYPTION setting
    forwarding: bool  # MESSAGE_FORWARDING = ENABLED
    # Where the sender listens, so that the side it dialled sends back on this connection
    # instead of dialling another: its LISTENER_IP ("": ALL, take the connection's source
    # address) and port (0: it does not listen).
    listen_host: str = ""
    listen_port: int = 0


class Envelope(NamedTuple):
    """One message (or fragment of one: ``frame.fragment`` of ``frame.fragments``) with
    its transport header, as ``sys.dm_broker_forwarded_messages`` shows it."""

    frame: MessageFrame
    time_to_live_ms: int  # what remains of the message's time to live; 0: discarded
    hops_remaining: int = 32  # decremented at each forward; 0: discarded
    time_consumed_ms: int = 0  # increased by the time spent at each hop


class WireReceipt(NamedTuple):
    """A receipt and the broker instance of the database that gave it ("" when none did)."""

    receipt: Receipt
    broker_instance: str


class Data(NamedTuple):
    batch_id: int
    envelopes: tuple[Envelope, ...]


class Receipts(NamedTuple):
    batch_id: int  # the DATA batch these answer
    receipts: tuple[WireReceipt, ...]


class Ping(NamedTuple):
    token: int


class Pong(NamedTuple):
    token: int  # the PING's


class ErrorFrame(NamedTuple):
    number: int
    text: str


Frame: TypeAlias = Hello | Data | Receipts | Ping | Pong | ErrorFrame

# -- encoding ------------------------------------------------------------------------------------------------

_HEADER = struct.Struct(">IBI")  # length, type, crc32
_PREFIX = struct.Struct(">I")
_AFTER_LENGTH = _HEADER.size - _PREFIX.size  # the type and the CRC, counted by the length
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def _frame(kind: FrameType, payload: object) -> bytes:
    packed: bytes = msgpack.packb(payload, use_bin_type=True)  # a Packer per call: threads may encode at once
    length = _AFTER_LENGTH + len(packed)
    if length > MAX_FRAME:
        raise out_of_range(f"a {kind.name} frame", f"{length} bytes", f"at most {MAX_FRAME} bytes (MAX_FRAME)")
    return _HEADER.pack(length, kind, zlib.crc32(packed)) + packed


def _micros(moment: datetime) -> int:
    """Microseconds since the epoch; a naive moment is UTC, as the broker stores it."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return (moment - _EPOCH) // _MICROSECOND


def encode_hello(hello: Hello) -> bytes:
    """A HELLO frame. The encoders trust their (typed) arguments: the decoder is the gate."""
    return _frame(FrameType.HELLO, {"version": hello.version, "instance": hello.instance_id,
                                    "endpoint": hello.endpoint, "encryption": hello.encryption,
                                    "forwarding": hello.forwarding, "listen_host": hello.listen_host,
                                    "listen_port": hello.listen_port})


def encode_data(batch_id: int, envelopes: Sequence[Envelope]) -> bytes:
    """A DATA frame carrying ``envelopes``; 59002 (InvalidArgumentError) if it would exceed
    MAX_FRAME: the caller sends smaller batches or fragments."""
    return _frame(FrameType.DATA, (batch_id, [
        (f.message_id, f.conversation_id.bytes, f.from_initiator, f.from_service, f.from_broker, f.to_service,
         f.to_broker, f.contract, f.message_type, f.sequence, f.kind, f.body, _micros(f.lifetime),
         f.fragment, e.hops_remaining, e.time_to_live_ms, e.time_consumed_ms, f.fragments)
        for e in envelopes for f in (e.frame,)]))


def encode_receipts(batch_id: int, receipts: Sequence[WireReceipt]) -> bytes:
    """A RECEIPTS frame answering the DATA batch ``batch_id``."""
    return _frame(FrameType.RECEIPTS, (batch_id, [
        (r.message_id, r.acknowledged, r.reason, None if r.error is None else (r.error.code, r.error.description),
         w.broker_instance, r.fragments_held)
        for w in receipts for r in (w.receipt,)]))


def encode_ping(token: int) -> bytes:
    return _frame(FrameType.PING, token)


def encode_pong(token: int) -> bytes:
    return _frame(FrameType.PONG, token)


def encode_error(number: int, text: str) -> bytes:
    """An ERROR frame: the refusal the sender gives before it closes the connection."""
    return _frame(FrameType.ERROR, (number, text))


# -- decoding: fields ----------------------------------------------------------------------------------------

_MIN_MICROS = _micros(datetime.min.replace(tzinfo=UTC))
_MAX_MICROS = _micros(datetime.max.replace(tzinfo=UTC))
_KINDS: frozenset[str] = frozenset(get_args(Kind))
_ENCRYPTIONS: frozenset[str] = frozenset(get_args(Encryption))
_ENVELOPE_FIELDS = 18
_RECEIPT_FIELDS = 6


def _shown(value: object) -> str:
    """``value`` for an error message, bounded: a hostile payload is never repr'd whole."""
    if isinstance(value, str | bytes):
        return repr(value[:40]) + ("..." if len(value) > 40 else "")
    if isinstance(value, tuple):
        return f"an array of {len(value)}"
    if isinstance(value, dict):
        return f"a map of {len(value)}"
    if value is None or isinstance(value, bool | int | float):
        return repr(value)
    return type(value).__name__  # a MessagePack extension type or timestamp


def _integer(value: object, what: str, lowest: int, highest: int) -> int:
    # ``type(...) is int`` leaves out bool, which MessagePack keeps apart from integers.
    if type(value) is not int or not lowest <= value <= highest:
        raise ProtocolError(f"{what} must be an integer from {lowest} to {highest}; got {_shown(value)}")
    return value


def _flag(value: object, what: str) -> bool:
    if type(value) is not bool:
        raise ProtocolError(f"{what} must be a boolean; got {_shown(value)}")
    return value


def _text(value: object, what: str, longest: int, *, empty: bool = True) -> str:
    # No NUL: PostgreSQL's text cannot hold one, so a name with one would be refused there
    # (and taken by SQLite): every backend must see the same message.
    if type(value) is not str or len(value) > longest or not (empty or value) or "\x00" in value:
        rule = f"a string of {'0' if empty else '1'} to {longest} characters without NUL"
        raise ProtocolError(f"{what} must be {rule}; got {_shown(value)}")
    return value


def _array(value: object, what: str, size: int | None = None) -> tuple[object, ...]:
    if type(value) is not tuple or (size is not None and len(value) != size):
        expected = "an array" if size is None else f"an array of {size} fields"
        raise ProtocolError(f"{what} must be {expected}; got {_shown(value)}")
    return value


def _conversation(value: object, seen: dict[bytes, uuid.UUID]) -> uuid.UUID:
    # A batch holds many messages of few conversations: build each UUID once.
    if type(value) is not bytes or len(value) != 16:
        raise ProtocolError(f"a conversation id must be 16 bytes; got {_shown(value)}")
    found = seen.get(value)
    if found is None:
        found = seen[value] = uuid.UUID(bytes=value)
    return found


class _Seen:
    """What one DATA batch has already decoded: a batch holds many messages of few
    conversations, services and lifetimes, so each is checked and built once."""

    __slots__ = ("conversations", "names", "brokers", "lifetimes")

    def __init__(self) -> None:
        self.conversations: dict[bytes, uuid.UUID] = {}
        self.names: set[object] = set()  # passed _text(..., MAX_NAME, empty=False)
        self.brokers: set[object] = set()  # passed _text(..., MAX_BROKER)
        self.lifetimes: dict[object, datetime] = {}


def _fast_envelope(item: object, seen: _Seen) -> Envelope | None:
    """The envelope ``item`` holds when every field is what the common case sends (and
    each is checked as :func:`_envelope` checks it); None: let :func:`_envelope` decide."""
    if type(item) is not tuple or len(item) != _ENVELOPE_FIELDS:
        return None
    (message_id, conversation_id, from_initiator, from_service, from_broker, to_service, to_broker, contract,
     message_type, sequence, kind, body, lifetime, fragment, hops, time_to_live, time_consumed, fragments,
     ) = item
    # Types first: a hostile field may be unhashable (a map), and must not reach a set.
    texts = (from_service, to_service, contract, message_type, from_broker, to_broker)
    if (type(conversation_id) is not bytes or type(lifetime) is not int or type(kind) is not str
            or any(type(text) is not str for text in texts)):
        return None
    names, brokers = seen.names, seen.brokers
    conversation = seen.conversations.get(conversation_id)
    moment = seen.lifetimes.get(lifetime)
    if (conversation is None or moment is None or kind not in _KINDS
            or from_service not in names or to_service not in names or contract not in names
            or message_type not in names or from_broker not in brokers or to_broker not in brokers
            or type(message_id) is not int or not 0 <= message_id <= BIGINT_MAX
            or type(sequence) is not int or not 0 <= sequence <= BIGINT_MAX
            or type(from_initiator) is not bool or (body is not None and type(body) is not bytes)
            or type(fragments) is not int or fragments != 1 or type(fragment) is not int or fragment != 0
            or type(hops) is not int or not 0 <= hops <= TINYINT_MAX
            or type(time_to_live) is not int or not 0 <= time_to_live <= BIGINT_MAX
            or type(time_consumed) is not int or not 0 <= time_consumed <= BIGINT_MAX):
        return None
    return Envelope(MessageFrame(message_id, conversation, from_initiator, from_service, from_broker, to_service,
                                 to_broker, contract, message_type, sequence,
                                 kind,  # type: ignore[arg-type]  # one of _KINDS, checked above
                                 body, moment),
                    time_to_live, hops, time_consumed)


def _envelope(item: object, seen: _Seen) -> Envelope:
    fast = _fast_envelope(item, seen)
    if fast is not None:
        return fast
    (message_id, conversation_id, from_initiator, from_service, from_broker, to_service, to_broker, contract,
     message_type, sequence, kind, body, lifetime, fragment, hops, time_to_live, time_consumed, fragments,
     ) = _array(item, "a DATA envelope", _ENVELOPE_FIELDS)
    if type(kind) is not str or kind not in _KINDS:
        raise ProtocolError(f"a message kind must be one of {sorted(_KINDS)}; got {_shown(kind)}")
    if body is not None and type(body) is not bytes:
        raise ProtocolError(f"a message body must be binary or nil; got {_shown(body)}")
    frame = MessageFrame(
        _integer(message_id, "a message id", 0, BIGINT_MAX),
        _conversation(conversation_id, seen.conversations),
        _flag(from_initiator, "the initiator flag"),
        _text(from_service, "the from service", MAX_NAME, empty=False),
        _text(from_broker, "the from broker instance", MAX_BROKER),
        _text(to_service, "the to service", MAX_NAME, empty=False),
        _text(to_broker, "the to broker instance", MAX_BROKER),
        _text(contract, "the contract", MAX_NAME, empty=False),
        _text(message_type, "the message type", MAX_NAME, empty=False),
        _integer(sequence, "a message sequence number", 0, BIGINT_MAX),
        kind,  # type: ignore[arg-type]  # one of _KINDS, checked above
        body,
        _EPOCH + _integer(lifetime, "a lifetime", _MIN_MICROS, _MAX_MICROS) * _MICROSECOND,
        _integer(fragment, "a fragment number", 0, INT_MAX),
        _integer(fragments, "a fragment count", 1, INT_MAX),
    )
    if frame.fragment >= frame.fragments:
        raise ProtocolError(f"fragment {frame.fragment} of a message in {frame.fragments} fragment(s)")
    seen.names.update((frame.from_service, frame.to_service, frame.contract, frame.message_type))
    seen.brokers.update((frame.from_broker, frame.to_broker))
    seen.lifetimes[lifetime] = frame.lifetime
    return Envelope(frame, _integer(time_to_live, "a time to live", 0, BIGINT_MAX),
                    _integer(hops, "hops remaining", 0, TINYINT_MAX),
                    _integer(time_consumed, "a time consumed", 0, BIGINT_MAX))


def _wire_receipt(item: object) -> WireReceipt:
    message_id, acknowledged, reason, error, broker_instance, held = _array(item, "a receipt", _RECEIPT_FIELDS)
    note = None
    if error is not None:
        code, description = _array(error, "a receipt's error", 2)
        note = BrokerErrorNote(_integer(code, "an error code", INT_MIN, INT_MAX),
                               _text(description, "an error description", MAX_TEXT))
    receipt = Receipt(_integer(message_id, "a message id", 0, BIGINT_MAX), _flag(acknowledged, "acknowledged"),
                      _text(reason, "a transmission status", MAX_TEXT), note,
                      None if held is None else _integer(held, "the fragments held", 0, INT_MAX))
    return WireReceipt(receipt, _text(broker_instance, "a receipt's broker instance", MAX_BROKER))


# -- decoding: payloads --------------------------------------------------------------------------------------


def _hello(payload: object) -> Hello:
    # Keys a later version adds are ignored, so that its HELLO still decodes and the
    # version check can answer it; a missing key is an error, but for where the sender
    # listens (an endpoint that does not say is reached by dialling it).
    if type(payload) is not dict:
        raise ProtocolError(f"a HELLO payload must be a map; got {_shown(payload)}")
    try:
        version, instance, endpoint, encryption, forwarding = (
            payload[key] for key in ("version", "instance", "endpoint", "encryption", "forwarding"))
    except KeyError as missing:
        raise ProtocolError(f"a HELLO payload lacks {missing}") from None
    if type(encryption) is not str or encryption not in _ENCRYPTIONS:
        raise ProtocolError(f"ENCRYPTION must be one of {sorted(_ENCRYPTIONS)}; got {_shown(encryption)}")
    return Hello(_integer(version, "the protocol version", 0, 0xFFFF),
                 _text(instance, "the instance id", MAX_NAME, empty=False),
                 _text(endpoint, "the endpoint name", MAX_NAME, empty=False),
                 encryption,  # type: ignore[arg-type]  # one of _ENCRYPTIONS, checked above
                 _flag(forwarding, "the forwarding flag"),
                 _text(payload.get("listen_host", ""), "the listener address", MAX_NAME),
                 _integer(payload.get("listen_port", 0), "the listener port", 0, 0xFFFF))


def _data(payload: object) -> Data:
    batch_id, envelopes = _array(payload, "a DATA payload", 2)
    seen = _Seen()
    return Data(_integer(batch_id, "a batch id", 0, U64_MAX),
                tuple(_envelope(item, seen) for item in _array(envelopes, "a DATA batch")))


def _receipts(payload: object) -> Receipts:
    batch_id, receipts = _array(payload, "a RECEIPTS payload", 2)
    return Receipts(_integer(batch_id, "a batch id", 0, U64_MAX),
                    tuple(map(_wire_receipt, _array(receipts, "a RECEIPTS batch"))))


def _ping(payload: object) -> Ping:
    return Ping(_integer(payload, "a PING token", 0, U64_MAX))


def _pong(payload: object) -> Pong:
    return Pong(_integer(payload, "a PONG token", 0, U64_MAX))


def _error(payload: object) -> ErrorFrame:
    number, text = _array(payload, "an ERROR payload", 2)
    return ErrorFrame(_integer(number, "an error number", INT_MIN, INT_MAX), _text(text, "an error text", MAX_TEXT))


_DECODERS: dict[int, Callable[[object], Frame]] = {
    FrameType.HELLO: _hello, FrameType.DATA: _data, FrameType.RECEIPTS: _receipts,
    FrameType.PING: _ping, FrameType.PONG: _pong, FrameType.ERROR: _error,
}


def _unpack(payload: memoryview) -> object:
    # use_list=False: arrays come back as tuples, which _array accepts (lists are never
    # produced). The size limits default to the payload's length, so a hostile count
    # never allocates more than the frame already holds.
    try:
        return msgpack.unpackb(payload, raw=False, use_list=False, strict_map_key=True)
    except Exception as failure:  # whatever the bytes make msgpack raise, the stream is unusable
        raise ProtocolError(f"a malformed payload: {failure}") from None


class FrameDecoder:
    """Turns the bytes of one connection, fed in pieces of any size, into frames.

    It buffers at most one incomplete frame (at most MAX_FRAME bytes once its prefix is
    read) beside what the caller feeds. A :class:`ProtocolError` leaves it unusable: every
    later ``feed`` raises again, and the caller closes the connection. A
    :class:`CorruptFrame` does not: the frame was skipped and decoding goes on.
    """

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._failure: ProtocolError | None = None

    def feed(self, data: bytes) -> list[Frame]:
        """The frames completed by ``data``, in order (none while a frame is incomplete).

        Raises :class:`CorruptFrame` (holding this call's good frames) when a frame fails
        its CRC, :class:`ProtocolError` when the stream is unusable."""
        if self._failure is not None:
            raise ProtocolError(f"the stream already failed: {self._failure}")
        self._buffer += data
        try:
            frames, skipped = self._frames()
        except ProtocolError as failure:
            self._failure = failure
            self._buffer = bytearray()
            raise
        if skipped:
            raise CorruptFrame(skipped, frames)
        return frames

    def _frames(self) -> tuple[list[Frame], int]:
        buffer = self._buffer
        frames: list[Frame] = []
        skipped = 0
        start = 0
        with memoryview(buffer) as view:
            while len(buffer) - start >= _HEADER.size:
                length, kind, crc = _HEADER.unpack_from(buffer, start)
                if not _AFTER_LENGTH <= length <= MAX_FRAME:
                    raise ProtocolError(f"a frame length of {length} bytes is outside {_AFTER_LENGTH}..{MAX_FRAME}")
                decode = _DECODERS.get(kind)
                if decode is None:
                    raise ProtocolError(f"an unknown frame type {kind}")
                end = start + _PREFIX.size + length
                if len(buffer) < end:
                    break
                with view[start + _HEADER.size:end] as payload:  # released, so the buffer can shrink
                    if zlib.crc32(payload) == crc:
                        frames.append(decode(_unpack(payload)))
                    else:
                        skipped += 1
                start = end
            # A prefix alone is checked before the rest arrives: a bad one fails at once.
            if _PREFIX.size <= len(buffer) - start < _HEADER.size:
                (length,) = _PREFIX.unpack_from(buffer, start)
                if not _AFTER_LENGTH <= length <= MAX_FRAME:
                    raise ProtocolError(f"a frame length of {length} bytes is outside {_AFTER_LENGTH}..{MAX_FRAME}")
        del buffer[:start]
        return frames, skipped
