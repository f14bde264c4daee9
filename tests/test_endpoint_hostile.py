"""Hostile input to the Service Broker endpoint on TCP (issue 14: "bad input ... never
crash the endpoint and never reach a queue").

A *trusted* peer (a TLS client holding the initiator's certificate, which the target's
endpoint trusts) gets through the handshake and then sends what no endpoint would: random
bytes, truncated frames, absurd length prefixes, garbage after its HELLO, DATA frames with
hostile fields built by hand, a DATA frame with a wrong CRC, thousands of PINGs. Each
time the target's endpoint closes the connection (or drops the frame) with the reason in
``sys.dm_broker_connections``, nothing from the hostile peer reaches a queue, and the
endpoint still serves the real initiator instance afterwards. An *impostor* (a certificate
with the same subject as a trusted one, another key) never gets past the handshake.

Every test runs with the target's database on SQLite and on PostgreSQL. The random-bytes
test runs ``EXAMPLES`` examples; ``pytest -m slow`` runs ``LONG_EXAMPLES``.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import msgpack  # type: ignore[import-untyped]
import pytest
from hostile_peer import HostilePeer, connection_row, hello_frame, raw_frame
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pair_layouts import layouts, pair_of_instances
from support import (
    BETWEEN_CONTRACT,
    BETWEEN_INITIATOR_SERVICE,
    BETWEEN_REQUEST,
    BETWEEN_TARGET_QUEUE,
    BETWEEN_TARGET_SERVICE,
    wait_until,
)
from two_instances import Pair, trust_each_other

from broker.conversations.frames import MessageFrame
from broker.ddl.certificates import create_certificate
from broker.routing.matching import BROKER_NOT_FOUND, SERVICE_NOT_FOUND
from broker.transport.wire import (
    MAX_FRAME,
    MAX_NAME,
    CorruptFrame,
    Envelope,
    FrameDecoder,
    FrameType,
    Hello,
    Pong,
    ProtocolError,
    Receipts,
    encode_data,
    encode_ping,
)

DEADLINE_S = 30.0
EXAMPLES = 25
LONG_EXAMPLES = 2000
REAL_BODY = b"<m>from the real initiator</m>"
DAY_MS = 86_400_000


@pytest.fixture(params=layouts())
def pair(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Pair]:
    with pair_of_instances(request, tmp_path) as pair:
        trust_each_other(pair)
        yield pair


# -- helpers ---------------------------------------------------------------------------------------------


def trusted_peer(pair: Pair, **options: Any) -> HostilePeer:
    """A TLS client the target's endpoint lets in: it holds the initiator's certificate."""
    return HostilePeer(pair.target.port, pair.initiator.certificate, pair.initiator.key, pair.target.certificate,
                       **options)


def message(pair: Pair, **changes: Any) -> MessageFrame:
    """A first message of a new dialog to the target service, as the real initiator would send it."""
    frame = MessageFrame(
        message_id=1, conversation_id=uuid.uuid4(), from_initiator=True, from_service=BETWEEN_INITIATOR_SERVICE,
        from_broker=str(pair.initiator.db.service_broker_guid), to_service=BETWEEN_TARGET_SERVICE, to_broker="",
        contract=BETWEEN_CONTRACT, message_type=BETWEEN_REQUEST, sequence=0, kind="message",
        body=b"<m>from the hostile peer</m>", lifetime=datetime.now(UTC) + timedelta(days=1))
    return frame._replace(**changes)


def data(batch_id: int, *frames: MessageFrame) -> bytes:
    return encode_data(batch_id, [Envelope(frame, DAY_MS) for frame in frames])


def assert_nothing_arrived(pair: Pair) -> None:
    assert pair.target.db.queue_rows(BETWEEN_TARGET_QUEUE) == []
    assert pair.target.db.catalog("sys.conversation_endpoints") == []


def assert_a_real_peer_is_served(pair: Pair, before: list[bytes | None] | None = None) -> None:
    """The real initiator instance gets a message through the target's endpoint, and the
    target queue holds ``before`` (default: nothing) and that message."""
    with pair.initiator.inst.runtime():
        pair.begin(REAL_BODY.decode())
        expected = [*(before or []), REAL_BODY]
        wait_until(lambda: [m.message_body for m in pair.target.db.queue_rows(BETWEEN_TARGET_QUEUE)] == expected,
                   DEADLINE_S)
        wait_until(lambda: not pair.initiator.held(), DEADLINE_S)


def closed_row(pair: Pair, peer: HostilePeer) -> dict[str, Any]:
    """The connection's row once the runtime has written it CLOSED."""
    def closed() -> dict[str, Any] | None:
        row = connection_row(pair.target.inst, peer)
        return row if row is not None and row["state_desc"] == "CLOSED" else None

    row = wait_until(closed, DEADLINE_S)
    assert isinstance(row, dict)
    return row


def log_in(peer: HostilePeer) -> None:
    """Send a HELLO and wait until the endpoint has taken it (it answers the PING after it):
    what the peer sends next is read by a logged-in connection."""
    assert peer.send(hello_frame() + encode_ping(0))
    peer.read_until(lambda frames: Pong(0) in frames, "the PONG that follows the login")


def assert_refused(pair: Pair, sent: bytes, reason: str, *, logged_in: bool = True,
                   **options: Any) -> dict[str, Any]:
    """Send ``sent`` as a trusted peer (after logging in, or instead): the endpoint closes
    the connection, having answered nothing but its HELLO (and the login's PONG), and its
    connection row gives ``reason``."""
    with trusted_peer(pair, **options) as peer:
        if logged_in:
            log_in(peer)
        peer.send(sent)
        peer.read_until_closed()
        assert all(isinstance(frame, Hello) or frame == Pong(0) for frame in peer.frames), peer.frames
    row = closed_row(pair, peer)
    assert row["principal_name"] == "initiator instance"
    assert reason in (row["refusal"] or ""), row["refusal"]
    assert row["login_state_desc"] == ("ONLINE" if logged_in else "ERROR")
    if logged_in:
        assert row["refusal"].startswith("The connection failed: ")
    return row


# -- the wire layout -----------------------------------------------------------------------------------


def _sentinel_frame() -> tuple[MessageFrame, Envelope]:
    frame = MessageFrame(910001, uuid.UUID(int=0x5E5E), True, "from-svc", "from-broker", "to-svc", "to-broker",
                         "the-contract", "the-type", 910002, "message", b"the-body",
                         datetime(2222, 2, 22, tzinfo=UTC), 910005, 910006)
    return frame, Envelope(frame, 910003, 77, 910004)


def _field_positions() -> dict[str, int]:
    """Where each field sits in an encoded envelope, found from the encoder itself, so
    that the hostile envelopes below follow the wire format as it is."""
    frame, envelope = _sentinel_frame()
    [_, [fields]] = msgpack.unpackb(encode_data(1, [envelope])[9:], raw=False)
    wanted: dict[str, object] = {**frame._asdict(), "hops_remaining": 77, "time_to_live_ms": 910003,
                                 "time_consumed_ms": 910004}
    wanted["conversation_id"] = frame.conversation_id.bytes
    del wanted["lifetime"]
    positions = {name: next(i for i, field in enumerate(fields) if type(field) is type(value) and field == value)
                 for name, value in wanted.items()}
    lifetime = [i for i, field in enumerate(fields) if type(field) is int and field > 10**15]
    return {**positions, "lifetime": lifetime[0], "_count": len(fields)}


FIELDS = _field_positions()
_ENVELOPE_SIZE = FIELDS["_count"]
# The sentinel's envelope as the wire has it: valid, for a service no instance has.
[_, [_VALID_ENVELOPE]] = msgpack.unpackb(encode_data(1, [_sentinel_frame()[1]])[9:], raw=False)


# -- random bytes ----------------------------------------------------------------------------------------

_leaves = (st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats()
           | st.text(max_size=300) | st.binary(max_size=64))
_values = st.recursive(_leaves, lambda inner: st.lists(inner, max_size=20)
                       | st.dictionaries(st.text(max_size=12), inner, max_size=6), max_leaves=40)
_kinds = st.sampled_from(list(FrameType)) | st.integers(0, 255)
# DATA payloads shaped like the real one: the valid envelope with some of its fields
# replaced reaches the check of each field; arrays of any size, the check of the shape.
_envelopes = st.one_of(
    st.lists(st.booleans(), min_size=_ENVELOPE_SIZE, max_size=_ENVELOPE_SIZE).flatmap(
        lambda keep: st.tuples(*(st.just(v) if k else _leaves for v, k in zip(_VALID_ENVELOPE, keep, strict=True)))),
    st.integers(0, _ENVELOPE_SIZE + 2).flatmap(lambda size: st.lists(_leaves, min_size=size, max_size=size)),
)
_data_payloads = st.tuples(st.integers(0, 2**64 - 1), st.lists(_envelopes, min_size=1, max_size=3))
_hostile_chunks = st.one_of(
    st.binary(max_size=2048),  # noise
    st.builds(raw_frame, _kinds, st.binary(max_size=512)),  # a sane header, a random payload
    st.builds(lambda kind, value: raw_frame(kind, msgpack.packb(value)), _kinds, _values),
    st.builds(lambda value: raw_frame(FrameType.DATA, msgpack.packb(value)), _data_payloads),
    st.builds(lambda payload, crc: raw_frame(FrameType.DATA, payload, crc=crc),
              st.binary(max_size=256), st.integers(0, 2**32 - 1)),  # (almost always) a wrong CRC
)
_hostile_streams = st.tuples(st.booleans(), st.lists(_hostile_chunks, min_size=1, max_size=4).map(b"".join))


def fails_to_decode(sent: bytes) -> str | None:
    """The ProtocolError the endpoint's decoder meets in ``sent`` (it must then close the
    connection), or None when the bytes are frames, corrupt frames or incomplete."""
    try:
        FrameDecoder().feed(sent)
    except CorruptFrame:
        return None
    except ProtocolError as failure:
        return str(failure)
    return None


def throw_random_bytes(pair: Pair, examples: int) -> None:
    attacked: list[tuple[HostilePeer, str | None]] = []

    @settings(max_examples=examples, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(_hostile_streams)
    def attack(stream: tuple[bool, bytes]) -> None:
        logged_in, noise = stream
        failure = fails_to_decode(noise)
        with trusted_peer(pair) as peer:
            if logged_in:
                log_in(peer)
            peer.send(noise)
            if failure is not None:
                peer.read_until_closed()  # at once: the endpoint does not wait for more
            # Nothing the hostile peer sent is taken: at most refused (a service that is not here).
            assert not any(w.receipt.acknowledged for r in peer.of_type(Receipts) for w in r.receipts), peer.frames
        attacked.append((peer, failure))

    attack()
    assert_nothing_arrived(pair)
    recent = attacked[-50:]  # the endpoint keeps the rows of its last 100 closed connections

    def all_closed() -> bool:
        rows = [connection_row(pair.target.inst, peer) for peer, _ in recent]
        return all(row is not None and row["state_desc"] == "CLOSED" for row in rows)

    wait_until(all_closed, DEADLINE_S)
    for peer, failure in recent:
        row = connection_row(pair.target.inst, peer)
        assert row is not None and row["principal_name"] == "initiator instance"
        assert failure is None or row["refusal"], (failure, row)


def test_random_bytes_after_the_handshake_never_reach_a_queue(pair: Pair) -> None:
    with pair.target.inst.runtime():
        throw_random_bytes(pair, EXAMPLES)
        assert_a_real_peer_is_served(pair)


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_random_bytes_after_the_handshake_long_run(pair: Pair) -> None:
    with pair.target.inst.runtime():
        throw_random_bytes(pair, LONG_EXAMPLES)
        assert_a_real_peer_is_served(pair)


# -- broken framing --------------------------------------------------------------------------------------


def test_a_truncated_hello_then_close_is_refused(pair: Pair) -> None:
    with pair.target.inst.runtime():
        with trusted_peer(pair) as peer:
            peer.read_until(lambda frames: bool(frames), "its HELLO")  # the endpoint waits for ours
            assert peer.send(hello_frame()[:7])
        row = closed_row(pair, peer)
        assert "closed the connection during the login" in row["refusal"]
        assert row["login_state_desc"] != "ONLINE" and row["total_bytes_received"] == 7
        assert_nothing_arrived(pair)
        assert_a_real_peer_is_served(pair)


def test_a_truncated_data_frame_then_close_delivers_nothing(pair: Pair) -> None:
    sent = hello_frame() + data(1, message(pair))[:-5]  # the message is whole but for its last bytes
    with pair.target.inst.runtime():
        with trusted_peer(pair) as peer:
            peer.read_until(lambda frames: bool(frames), "its HELLO")
            assert peer.send(sent)
        row = closed_row(pair, peer)
        assert row["total_bytes_received"] == len(sent)  # all of it was read before the close
        assert row["login_state_desc"] == "ONLINE"
        assert_nothing_arrived(pair)
        assert_a_real_peer_is_served(pair)


@pytest.mark.parametrize("logged_in", [True, False], ids=["after-hello", "instead-of-hello"])
def test_a_length_prefix_of_2_to_the_32_minus_1_closes_at_once(pair: Pair, logged_in: bool) -> None:
    prefix = (2**32 - 1).to_bytes(4, "big")  # the prefix alone: the endpoint must not wait for 4 GiB
    with pair.target.inst.runtime():
        assert_refused(pair, prefix, f"a frame length of {2**32 - 1} bytes", logged_in=logged_in)
        assert_nothing_arrived(pair)
        assert_a_real_peer_is_served(pair)


@pytest.mark.parametrize("garbage, reason", [
    (b"GET / HTTP/1.1\r\nHost: broker\r\n\r\n", "a frame length of"),
    (bytes(64), "a frame length of 0 bytes"),
    (raw_frame(0x77, b"\x90"), "an unknown frame type 119"),
    (raw_frame(FrameType.DATA, b"\xc1"), "a malformed payload"),  # 0xc1: never used by MessagePack
    (raw_frame(FrameType.PING, msgpack.packb(-1)), "a PING token must be an integer"),
    (raw_frame(FrameType.DATA, msgpack.packb({"batch": 1})), "a DATA payload must be an array"),
], ids=["http", "zeros", "unknown-type", "not-msgpack", "negative-ping", "data-as-map"])
def test_a_hello_then_garbage_is_refused(pair: Pair, garbage: bytes, reason: str) -> None:
    with pair.target.inst.runtime():
        assert_refused(pair, garbage, reason)
        assert_nothing_arrived(pair)
        assert_a_real_peer_is_served(pair)


# -- hostile fields in DATA frames -----------------------------------------------------------------------


def hostile_data(pair: Pair, **fields: Any) -> bytes:
    """A DATA frame of two messages: a valid one, then one whose ``fields`` are replaced
    (``_drop``: remove that many fields from its end). The whole frame must be refused:
    not even the valid message may arrive."""
    [batch, envelopes] = msgpack.unpackb(data(5, message(pair, message_id=1), message(pair, message_id=2))[9:],
                                         raw=False)
    hostile = envelopes[1]
    for name, value in fields.items():
        if name == "_drop":
            del hostile[len(hostile) - value:]
        else:
            hostile[FIELDS[name]] = value
    return raw_frame(FrameType.DATA, msgpack.packb([batch, envelopes], use_bin_type=True))


def _invalid_utf8_name(pair: Pair) -> bytes:
    """A DATA frame whose to service is a MessagePack string that is not UTF-8."""
    frame = hostile_data(pair, to_service="QQQQQQQQ")
    return raw_frame(FrameType.DATA, frame[9:].replace(b"\xa8QQQQQQQQ", b"\xa8" + b"\xff" * 8))


HOSTILE_FIELDS: dict[str, tuple[Callable[[Pair], bytes], str]] = {
    "message-id-as-text": (lambda p: hostile_data(p, message_id="2"), "a message id must be an integer"),
    "initiator-flag-as-int": (lambda p: hostile_data(p, from_initiator=1), "the initiator flag must be a boolean"),
    "body-as-text": (lambda p: hostile_data(p, body="<m/>"), "a message body must be binary or nil"),
    "service-as-binary": (lambda p: hostile_data(p, to_service=BETWEEN_TARGET_SERVICE.encode()),
                          "the to service must be a string"),
    "conversation-as-text": (lambda p: hostile_data(p, conversation_id=str(uuid.uuid4())),
                             "a conversation id must be 16 bytes"),
    "negative-sequence": (lambda p: hostile_data(p, sequence=-1), "a message sequence number must be an integer"),
    "sequence-past-bigint": (lambda p: hostile_data(p, sequence=2**63), "a message sequence number must be"),
    "negative-message-id": (lambda p: hostile_data(p, message_id=-5), "a message id must be an integer"),
    "name-of-257": (lambda p: hostile_data(p, to_service="s" * (MAX_NAME + 1)), "the to service must be a string"),
    "name-of-7-mb": (lambda p: hostile_data(p, contract="c" * (7 << 20)), "the contract must be a string"),
    "name-of-10-mb": (lambda p: hostile_data(p, from_service="f" * (10 << 20)), "a frame length of"),
    "empty-service": (lambda p: hostile_data(p, to_service=""), "the to service must be a string of 1 to"),
    "name-not-utf8": (_invalid_utf8_name, "a malformed payload"),
    "conversation-of-3-bytes": (lambda p: hostile_data(p, conversation_id=b"abc"),
                                "a conversation id must be 16 bytes"),
    "lifetime-past-year-9999": (lambda p: hostile_data(p, lifetime=2**62), "a lifetime must be an integer"),
    "lifetime-before-year-1": (lambda p: hostile_data(p, lifetime=-(2**62)), "a lifetime must be an integer"),
    "lifetime-as-float": (lambda p: hostile_data(p, lifetime=1.5e15), "a lifetime must be an integer"),
    "unknown-kind": (lambda p: hostile_data(p, kind="surprise"), "a message kind must be one of"),
    "kind-as-int": (lambda p: hostile_data(p, kind=1), "a message kind must be one of"),
    "hops-past-tinyint": (lambda p: hostile_data(p, hops_remaining=256), "hops remaining must be an integer"),
    "negative-time-to-live": (lambda p: hostile_data(p, time_to_live_ms=-1), "a time to live must be an integer"),
    "envelope-short-a-field": (lambda p: hostile_data(p, _drop=1), f"an array of {_ENVELOPE_SIZE} fields"),
    "envelope-as-map": (lambda p: raw_frame(FrameType.DATA, msgpack.packb([1, [{"id": 1}]])),
                        "a DATA envelope must be an array"),
}


# Fields no database could store alike (SQLite would keep them, PostgreSQL would refuse the
# whole batch, the valid message with them, at every retry): the decoder refuses them.
STORED_AS_GIVEN = {
    "broker-instance-of-200": ({"from_broker": "b" * 200}, "from broker instance"),  # the column holds 128
    "nul-in-the-from-service": ({"from_service": "//InitDB/\x00/InitiatorService"}, "from service"),
}


@pytest.mark.parametrize("case", sorted(STORED_AS_GIVEN))
def test_a_field_no_database_can_store_is_refused_by_the_decoder(pair: Pair, case: str) -> None:
    changes, reason = STORED_AS_GIVEN[case]
    sent = data(9, message(pair, message_id=1), message(pair, message_id=2, **changes))
    with pair.target.inst.runtime():
        assert_refused(pair, sent, reason, timeout=3.0)
        assert_nothing_arrived(pair)


@pytest.mark.parametrize("case", sorted(HOSTILE_FIELDS))
def test_hostile_fields_in_a_data_frame_refuse_the_whole_frame(pair: Pair, case: str) -> None:
    build, reason = HOSTILE_FIELDS[case]
    sent = build(pair)
    assert len(sent) > MAX_FRAME or fails_to_decode(sent) is not None  # the case is hostile as meant
    with pair.target.inst.runtime():
        assert_refused(pair, sent, reason)
        assert_nothing_arrived(pair)
        assert_a_real_peer_is_served(pair)


def test_the_valid_twin_of_a_hostile_frame_is_taken(pair: Pair) -> None:
    """The control of the test above: the same two messages, unaltered, arrive."""
    sent = hostile_data(pair)
    with pair.target.inst.runtime():
        with trusted_peer(pair) as peer:
            peer.send(hello_frame() + sent)
            [answer] = peer.read_until(lambda frames: any(isinstance(f, Receipts) for f in frames),
                                       "the receipts")[1:]
        assert isinstance(answer, Receipts) and answer.batch_id == 5
        assert sorted((w.receipt.message_id, w.receipt.acknowledged) for w in answer.receipts) == [(1, True),
                                                                                                  (2, True)]
        assert len(pair.target.db.queue_rows(BETWEEN_TARGET_QUEUE)) == 2


# -- integrity and load ----------------------------------------------------------------------------------


def test_a_data_frame_with_a_wrong_crc_is_dropped_and_the_connection_lives(pair: Pair) -> None:
    dropped = data(3, message(pair, message_id=1, body=b"<m>corrupted</m>"))
    crc = int.from_bytes(dropped[5:9], "big")
    corrupted = dropped[:5] + (crc ^ 0x1).to_bytes(4, "big") + dropped[9:]
    with pair.target.inst.runtime():
        with trusted_peer(pair) as peer:
            log_in(peer)
            assert peer.send(corrupted + encode_ping(42))
            peer.read_until(lambda frames: Pong(42) in frames, "the PONG")  # the connection lives on
            # The same frame with its CRC right is taken: the CRC alone stopped it. A
            # connection applies its batches in the order they came, so once this one is
            # answered the corrupted one would have been applied too, had it been taken.
            assert peer.send(data(4, message(pair, message_id=2, body=b"<m>checked</m>")))
            peer.read_until(lambda frames: any(isinstance(f, Receipts) for f in frames), "the receipts")
            [receipts] = peer.of_type(Receipts)
            assert receipts.batch_id == 4
            assert [(w.receipt.message_id, w.receipt.acknowledged) for w in receipts.receipts] == [(2, True)]
            assert [m.message_body for m in pair.target.db.queue_rows(BETWEEN_TARGET_QUEUE)] == [b"<m>checked</m>"]
            row = wait_until(lambda: connection_row(pair.target.inst, peer), DEADLINE_S)
            assert isinstance(row, dict) and row["state_desc"] == "LOGGED_IN" and row["refusal"] is None
        assert_a_real_peer_is_served(pair, before=[b"<m>checked</m>"])


def test_thousands_of_pings_are_each_answered_and_the_endpoint_serves_on(pair: Pair) -> None:
    count = 5000
    with pair.target.inst.runtime():
        with trusted_peer(pair) as peer:
            assert peer.send(hello_frame() + b"".join(encode_ping(token) for token in range(count)))
            peer.read_until(lambda frames: len(frames) >= count + 1, f"{count} PONGs")
            assert peer.of_type(Pong) == [Pong(token) for token in range(count)]

            # The row is written every second from counters that move as frames go in
            # and out: one written between the last receive and the last PONG shows
            # every receive but not every send yet.
            def counted() -> dict[str, Any] | None:
                row = connection_row(pair.target.inst, peer)
                done = row is not None and row["total_receives"] >= count + 1 and row["total_sends"] >= count + 1
                return row if done else None

            row = wait_until(counted, DEADLINE_S)
            assert isinstance(row, dict) and row["state_desc"] == "LOGGED_IN"
        assert_nothing_arrived(pair)
        assert_a_real_peer_is_served(pair)


def test_pings_instead_of_a_hello_are_refused(pair: Pair) -> None:
    with pair.target.inst.runtime():
        assert_refused(pair, b"".join(encode_ping(token) for token in range(1000)), "did not introduce itself",
                       logged_in=False)
        assert_a_real_peer_is_served(pair)


# -- valid frames that claim what does not exist ---------------------------------------------------------


def test_a_valid_message_for_what_does_not_exist_is_refused_with_a_reason(pair: Pair) -> None:
    frames = [
        message(pair, message_id=11, to_service="//Nowhere/NoSuchService"),
        message(pair, message_id=12, to_broker=str(uuid.uuid4())),  # a database this instance does not serve
        # A reply on a dialog the target instance never began: nothing to deliver it to.
        message(pair, message_id=13, from_initiator=False, sequence=4),
    ]
    with pair.target.inst.runtime():
        with trusted_peer(pair) as peer:
            peer.send(hello_frame() + data(8, *frames))
            peer.read_until(lambda frames: any(isinstance(f, Receipts) for f in frames), "the receipts")
            [receipts] = peer.of_type(Receipts)
            by_id = {w.receipt.message_id: w.receipt for w in receipts.receipts}
            assert receipts.batch_id == 8 and sorted(by_id) == [11, 12, 13]
            assert (by_id[11].acknowledged, by_id[11].reason) == (False, SERVICE_NOT_FOUND)
            assert (by_id[12].acknowledged, by_id[12].reason) == (False, BROKER_NOT_FOUND)
            assert by_id[13].acknowledged and by_id[13].error is None  # taken and discarded
            assert_nothing_arrived(pair)
        assert_a_real_peer_is_served(pair)


# -- an impostor -----------------------------------------------------------------------------------------


def test_a_certificate_with_a_trusted_subject_but_another_key_is_refused(pair: Pair) -> None:
    impostor, impostor_key = create_certificate("initiator instance")  # the subject of the trusted one
    with pair.target.inst.runtime():
        try:
            peer = HostilePeer(pair.target.port, impostor, impostor_key, pair.target.certificate)
        except OSError:
            pass  # refused within the handshake itself (TLS 1.2)
        else:
            with peer:  # TLS 1.3: the client's side of the handshake ends before the endpoint checks it
                peer.send(hello_frame() + data(1, message(pair)))
                peer.read_until_closed()
                assert peer.frames == []  # not even the endpoint's HELLO
        wait_until(lambda: any(row["is_accept"] and "CERTIFICATE_VERIFY_FAILED" in (row["refusal"] or "")
                               for row in pair.target.inst.catalog("sys.dm_broker_connections")), DEADLINE_S)
        [row] = pair.target.inst.catalog("sys.dm_broker_connections", is_accept=True)
        assert row["state_desc"] == "CLOSED" and row["login_state_desc"] == "ERROR"
        assert row["total_bytes_received"] == 0
        assert_nothing_arrived(pair)
        assert_a_real_peer_is_served(pair)


def test_the_real_initiator_with_an_impostor_certificate_is_refused(pair: Pair) -> None:
    impostor, impostor_key = create_certificate("initiator instance")
    pair.initiator.inst.alter_endpoint(f"Endpoint{pair.initiator.port}", certificate=impostor,
                                       private_key=impostor_key)
    with pair.target.inst.runtime(), pair.initiator.inst.runtime():
        pair.begin()
        wait_until(lambda: any(str(row["transmission_status"]).startswith("Connection handshake failed")
                               for row in pair.initiator.held()), DEADLINE_S)
    assert_nothing_arrived(pair)
