"""The two ends of a connection between Service Broker endpoints (spec 7.5): the HELLOs,
then DATA one way and RECEIPTS the other.

:class:`Outbound` is a connection an endpoint dialled: it sends DATA batches, each
answered by a future of its RECEIPTS, PINGs while batches wait, and closes when idle.
:class:`Accepted` is one another endpoint dialled: it reads DATA batches and has its
endpoint apply them (``TcpEndpoint.apply_batch``), at most ``ANSWERING_AT_ONCE`` at once,
answering each. Both count what they carry in their ``ConnectionInfo`` (what
``sys.dm_broker_connections`` shows). The endpoint itself (listening, dialling, the
loop's thread) is ``transport.tcp``.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import ssl
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from cryptography import x509
from cryptography.hazmat.primitives import hashes

from broker.storage.connection_states import ConnectionEncryption, ConnectionState, LoginState
from broker.transport.records import ConnectionInfo
from broker.transport.seam import TransportError
from broker.transport.wire import (
    PROTOCOL_VERSION,
    CorruptFrame,
    Data,
    Envelope,
    ErrorFrame,
    FrameDecoder,
    Hello,
    Ping,
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

if TYPE_CHECKING:
    from broker.transport.tcp import TcpEndpoint

log = logging.getLogger("broker.transport")

HANDSHAKE_TIMEOUT_S = 10.0  # the TLS handshake and the HELLOs
RECEIPT_TIMEOUT_S = 120.0  # a batch not answered by then: the connection is dropped
IDLE_S = 90.0  # an outbound connection with nothing in flight this long is closed
READ_SIZE = 1 << 16
PING_EVERY_S = 2.0  # while batches wait for receipts
ANSWERING_AT_ONCE = 8  # DATA batches of one connection being applied at once; more wait to be read
SILENCE_S = 10.0  # a peer silent this long while batches wait has failed
INCOMPATIBLE = 59031


class Link:
    """What both ends of a connection share: the HELLOs, framing and counting."""

    def __init__(self, endpoint: TcpEndpoint, info: ConnectionInfo, reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter) -> None:
        self.endpoint = endpoint
        self.info = info
        self.reader = reader
        self.writer = writer
        self.decoder = FrameDecoder()
        self.peer: Hello | None = None
        self.ahead: list[object] = []  # frames read with the peer's HELLO

    def identify(self) -> None:
        """Record the peer's certificate and the cipher of a connection that shook hands."""
        tls = self.writer.get_extra_info("ssl_object")
        der = tls.getpeercert(binary_form=True) if tls is not None else None
        if der:
            certificate = x509.load_der_x509_certificate(der)
            names = certificate.subject.get_attributes_for_oid(x509.NameOID.COMMON_NAME)
            self.info.principal_name = str(names[0].value) if names else certificate.subject.rfc4514_string()
            trusted = self.endpoint.settings.trusted_thumbprints
            peer = certificate.fingerprint(hashes.SHA256()).hex()
            self.info.peer_certificate_id = trusted.index(peer) + 1 if peer in trusted else None
        cipher = tls.cipher() if tls is not None else None
        self.info.encryption_algorithm = (ConnectionEncryption.AES if cipher and "AES" in cipher[0]
                                          else ConnectionEncryption.NONE)
        self.info.state = ConnectionState.CONNECTED
        self.info.login_state = LoginState.WAIT_ARBITRATION

    def send(self, data: bytes, messages: int = 0) -> None:
        self.writer.write(data)
        self.info.total_bytes_sent += len(data)
        self.info.total_sends += 1
        self.info.total_fragments_sent += messages
        self.info.touched()

    async def frames(self) -> list[object]:
        """The next frames from the peer (waits for at least one byte; [] while a frame
        is incomplete, and at the end of the stream). A corrupted frame is skipped
        (logged): its sender retries."""
        if self.ahead:
            ahead, self.ahead = self.ahead, []
            return ahead
        data = await self.reader.read(READ_SIZE)
        if not data:
            return []
        self.info.total_bytes_received += len(data)
        self.info.touched()
        try:
            frames: list[object] = list(self.decoder.feed(data))
        except CorruptFrame as corrupt:
            log.warning("endpoint %s: %s from %s", self.endpoint.settings.name, corrupt, self.info.address)
            frames = list(corrupt.frames)
        self.info.total_receives += len(frames)
        return frames

    async def hello(self) -> None:
        """Send our HELLO, read the peer's, and check that the two endpoints can talk."""
        settings = self.endpoint.settings
        self.send(encode_hello(Hello(PROTOCOL_VERSION, settings.instance_id, settings.name, settings.encryption,
                                     settings.forwarding)))
        deadline = asyncio.get_running_loop().time() + HANDSHAKE_TIMEOUT_S
        while self.peer is None:
            remaining = deadline - asyncio.get_running_loop().time()
            frames = await asyncio.wait_for(self.frames(), max(0.0, remaining))
            if not frames:
                if self.reader.at_eof():
                    # With TLS 1.3 a peer that refuses our certificate does so after our side
                    # of the handshake has finished: we see the connection close instead.
                    raise TransportError("Connection handshake failed: the remote endpoint closed the connection "
                                         "during the login (does it trust this endpoint's certificate?).")
                continue
            first, self.ahead = frames[0], frames[1:]
            if isinstance(first, ErrorFrame):
                raise TransportError(f"The remote endpoint refused the connection: {first.text}")
            if not isinstance(first, Hello):
                raise TransportError("Connection handshake failed: the peer did not introduce itself.")
            self.peer = first
        refusal = _incompatible(settings.encryption, self.peer.encryption)
        if refusal is None and self.peer.version != PROTOCOL_VERSION:
            refusal = f"The peer speaks protocol version {self.peer.version}; this endpoint speaks {PROTOCOL_VERSION}."
        if refusal is not None:
            self.send(encode_error(INCOMPATIBLE, refusal))
            raise TransportError(f"Connection handshake failed: {refusal}")
        self.info.state = ConnectionState.LOGGED_IN
        self.info.login_state = LoginState.ONLINE
        self.info.login_time = datetime.now(UTC)


class Outbound(Link):
    """A connection this endpoint dialled: DATA out, RECEIPTS back."""

    def __init__(self, endpoint: TcpEndpoint, info: ConnectionInfo, reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter) -> None:
        super().__init__(endpoint, info, reader, writer)
        self.waiting: dict[int, asyncio.Future[tuple[WireReceipt, ...]]] = {}
        self.open = True
        self.reading: asyncio.Task[None] | None = None
        self.idle: asyncio.TimerHandle | None = None
        self.heard = asyncio.get_running_loop().time()  # when the peer last sent anything
        self.pinging: asyncio.Task[None] | None = None

    async def log_in(self) -> None:
        self.identify()
        try:
            await self.hello()
        except (TransportError, ProtocolError, OSError, TimeoutError) as failure:
            self.close(None)
            raise failure if isinstance(failure, TransportError) else TransportError(
                f"Connection handshake failed: {reason_of(failure)}") from None
        self.reading = asyncio.get_running_loop().create_task(self._read())
        self.pinging = asyncio.get_running_loop().create_task(self._ping())
        self._rearm()

    async def _ping(self) -> None:
        """While batches wait for receipts, PING every ``PING_EVERY_S``: a peer that sends
        nothing back for ``SILENCE_S`` (a stalled network, a host gone) fails the
        connection, and its batches go again later. A peer busy applying a large batch
        still answers: the PONGs come from its loop, not its databases."""
        loop = asyncio.get_running_loop()
        tokens = itertools.count()
        while self.open:
            await asyncio.sleep(PING_EVERY_S)
            if not self.waiting:
                self.heard = loop.time()
                continue
            if loop.time() - self.heard > SILENCE_S:
                self.close(_receiving_failed(TimeoutError(f"the remote endpoint sent nothing for {SILENCE_S:g} s")))
                return
            self.send(encode_ping(next(tokens)))

    async def request(self, batch_id: int, envelopes: Sequence[Envelope]) -> tuple[WireReceipt, ...]:
        """Send one batch and wait for its receipts."""
        if not self.open:
            raise TransportError(self.info.refusal or "The connection to the remote endpoint was closed.")
        answer: asyncio.Future[tuple[WireReceipt, ...]] = asyncio.get_running_loop().create_future()
        self.waiting[batch_id] = answer
        self.send(encode_data(batch_id, envelopes), len(envelopes))
        try:
            await self.writer.drain()
            return await asyncio.wait_for(answer, RECEIPT_TIMEOUT_S)
        except (OSError, TimeoutError) as failure:
            self.close(_receiving_failed(failure))
            raise TransportError(self.info.refusal or "The connection failed.") from None
        finally:
            self.waiting.pop(batch_id, None)
            self._rearm()

    async def _read(self) -> None:
        try:
            while True:
                frames = await self.frames()
                if not frames and self.reader.at_eof():
                    self.close("An error occurred while receiving data: 'the remote endpoint closed the connection'.")
                    return
                self.heard = asyncio.get_running_loop().time()
                for frame in frames:
                    if isinstance(frame, Receipts):
                        self.info.total_fragments_received += len(frame.receipts)
                        answer = self.waiting.get(frame.batch_id)
                        if answer is not None and not answer.done():
                            answer.set_result(frame.receipts)
                    elif isinstance(frame, ErrorFrame):
                        self.close(f"The remote endpoint closed the connection: {frame.text}")
                        return
        except (ProtocolError, OSError) as failure:
            self.close(_receiving_failed(failure))

    def _rearm(self) -> None:
        if self.idle is not None:
            self.idle.cancel()
        if self.open:
            self.idle = asyncio.get_running_loop().call_later(IDLE_S, self._close_if_idle)

    def _close_if_idle(self) -> None:
        if not self.waiting:
            self.close(None)

    def close(self, reason: str | None) -> None:
        if not self.open:
            return
        self.open = False
        if reason is not None:
            log.warning("endpoint %s: %s (%s)", self.endpoint.settings.name, reason, self.info.address)
        for answer in self.waiting.values():
            if not answer.done():
                answer.set_exception(TransportError(reason or "The connection was closed."))
        if self.idle is not None:
            self.idle.cancel()
        for task in (self.reading, self.pinging):
            if task is not None and task is not asyncio.current_task():
                task.cancel()
        # Aborted, not closed: a graceful TLS close waits for a peer that may be gone.
        self.writer.transport.abort()
        self.info.closed(reason)


class Accepted(Link):
    """A connection another endpoint dialled: DATA in, RECEIPTS out."""

    def __init__(self, endpoint: TcpEndpoint, info: ConnectionInfo, reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter) -> None:
        super().__init__(endpoint, info, reader, writer)
        self.applying = asyncio.Lock()

    async def serve(self) -> None:
        self.identify()
        try:
            await self.hello()
        except (TransportError, ProtocolError, OSError, TimeoutError) as failure:
            refused(self.endpoint, self.info,
                     failure.status if isinstance(failure, TransportError) else reason_of(failure))
            return
        answering: set[asyncio.Task[None]] = set()
        # Batches being applied at once: a peer that floods waits to be read, so there is
        # no unbounded backlog. A batch holds its slot while it is applied, not while what
        # it forwards waits for other instances: reading goes on, and a routing loop
        # ends by its hop count instead of filling every slot (forwarding is bounded by
        # MESSAGE_FORWARD_SIZE).
        slots = asyncio.Semaphore(ANSWERING_AT_ONCE)
        try:
            while True:
                frames = await self.frames()
                if not frames and self.reader.at_eof():
                    return
                for frame in frames:
                    if isinstance(frame, Data):
                        # Each batch is answered by a task of its own; local applies keep their order.
                        self.info.total_fragments_received += len(frame.envelopes)
                        await slots.acquire()
                        task = asyncio.get_running_loop().create_task(self._answer(frame, slots))
                        answering.add(task)
                        task.add_done_callback(answering.discard)
                    elif isinstance(frame, Ping):
                        self.send(encode_pong(frame.token))
                        await self.writer.drain()  # a peer that never reads stops being read
                    elif isinstance(frame, ErrorFrame):
                        self.info.closed(f"The remote endpoint closed the connection: {frame.text}")
                        return
        except (ProtocolError, OSError) as failure:
            self.info.closed(f"The connection failed: {reason_of(failure)}")
        finally:
            for task in answering:
                task.cancel()

    async def _answer(self, batch: Data, slot: asyncio.Semaphore) -> None:
        try:
            receipts, forwards = await self.endpoint.apply_batch(batch, self.applying)
        finally:
            slot.release()
        for forwarded in await asyncio.gather(*forwards):
            receipts += forwarded
        if not self.writer.is_closing():
            self.send(encode_receipts(batch.batch_id, receipts), len(receipts))
            await self.writer.drain()


def refused(endpoint: TcpEndpoint, info: ConnectionInfo, reason: str) -> None:
    """Log a connection the endpoint refused and record why (``sys.dm_broker_connections``)."""
    log.warning("endpoint %s refused a connection from %s: %s", endpoint.settings.name, info.address, reason)
    info.closed(reason)


def _incompatible(mine: str, theirs: str) -> str | None:
    """Why two ENCRYPTION settings cannot talk (REQUIRED against DISABLED), or None."""
    if {mine, theirs} == {"REQUIRED", "DISABLED"}:
        return f"The endpoint's ENCRYPTION is {mine} and its peer's is {theirs}: they cannot talk."
    return None


def _receiving_failed(failure: BaseException) -> str:
    """SQL Server's transmission status for a connection that failed while in use (9755)."""
    return f"An error occurred while receiving data: '{reason_of(failure)}'."


def reason_of(failure: BaseException) -> str:
    """A failure as a transmission status quotes it: the SSL reason, the errno, the text."""
    if isinstance(failure, ssl.SSLError):
        return failure.reason or str(failure)
    if isinstance(failure, OSError) and failure.errno is not None:
        return f"{failure.errno}({failure.strerror})"
    return str(failure) or type(failure).__name__
