"""What the endpoint shows of itself: its connections (``sys.dm_broker_connections``) and
the messages it is forwarding (``sys.dm_broker_forwarded_messages``). The endpoint keeps
these records in memory; the runtime writes them to the instance catalog
(``runtime.connections``)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime

from broker.routing.addresses import TcpAddress
from broker.storage.connection_states import ConnectionEncryption, ConnectionState, LoginState
from broker.transport.wire import Envelope


@dataclass
class ConnectionInfo:
    """One connection, as ``sys.dm_broker_connections`` shows it."""

    address: str  # the peer's host:port
    is_accept: bool  # the peer dialled this endpoint
    connection_id: uuid.UUID = field(default_factory=uuid.uuid4)
    state: ConnectionState = ConnectionState.NEW
    login_state: LoginState = LoginState.INITIAL
    connect_time: datetime = field(default_factory=lambda: datetime.now(UTC))
    login_time: datetime | None = None
    last_activity_time: datetime = field(default_factory=lambda: datetime.now(UTC))
    principal_name: str | None = None  # the subject of the peer's certificate
    peer_certificate_id: int | None = None  # which trusted peer's certificate it is (1, 2, ...)
    encryption_algorithm: ConnectionEncryption = ConnectionEncryption.NONE
    total_bytes_sent: int = 0
    total_bytes_received: int = 0
    total_sends: int = 0  # frames written
    total_receives: int = 0  # frames read
    total_fragments_sent: int = 0  # messages, fragments and receipts sent
    total_fragments_received: int = 0  # messages, fragments and receipts received
    refusal: str | None = None  # why the connection was refused or failed

    def touched(self) -> None:
        self.last_activity_time = datetime.now(UTC)

    def closed(self, refusal: str | None = None) -> None:
        if self.state != ConnectionState.CLOSED:
            self.state = ConnectionState.CLOSED
            if refusal is not None:
                self.refusal = refusal
                if self.login_state != LoginState.ONLINE:
                    self.login_state = LoginState.ERROR


@dataclass(frozen=True)
class ForwardedMessage:
    """A message held in memory while it is forwarded, as ``sys.dm_broker_forwarded_messages``
    shows it."""

    conversation_id: uuid.UUID
    is_initiator: bool
    to_service_name: str
    to_broker_instance: str
    from_service_name: str
    from_broker_instance: str
    adjacent_broker_address: str
    message_sequence_number: int
    message_fragment_number: int
    hops_remaining: int
    time_to_live: int  # seconds, as SQL Server shows it
    time_consumed: int
    message_id: int


def forwarded_message(envelope: Envelope, address: TcpAddress) -> ForwardedMessage:
    frame = envelope.frame
    return ForwardedMessage(
        frame.conversation_id, frame.from_initiator, frame.to_service, frame.to_broker, frame.from_service,
        frame.from_broker, str(address), frame.sequence, frame.fragment, envelope.hops_remaining,
        envelope.time_to_live_ms // 1000, envelope.time_consumed_ms // 1000, frame.message_id)
