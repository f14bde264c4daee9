"""A connection between two Service Broker endpoints (spec 7.5): one per pair of
instances, whichever dialled it, carrying both directions.

After TLS and the HELLOs (which say where each side listens, so that the side that was
dialled sends back on the same connection instead of dialling its own), each side sends
DATA batches, each answered by a future of its RECEIPTS, and has its endpoint apply the
other's (``TcpEndpoint.apply_batch``), at most ``ANSWERING_AT_ONCE`` at once, answering
each. Receipts, PINGs and PONGs never queue behind bulk data: they are written at once,
while DATA waits for the socket's buffer to drain. :class:`Connection` counts what it
carries in its ``ConnectionInfo`` (what ``sys.dm_broker_connections`` shows). The
endpoint itself (listening, dialling, choosing a connection per peer, the loop's
thread) is ``transport.tcp``.
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
IDLE_S = 90.0  # a connection no batch crossed this long is closed by the side that dialled it
READ_SIZE = 1 << 16
PING_EVERY_S = 2.0  # while batches wait for receipts
# What a receipt or a ping may queue behind in the socket's buffer, beside the DATA frame
# being written: the next DATA batch waits until the buffer is below it.
DATA_AHEAD_BYTES = 1 << 20
UNREAD_ANSWERS_BYTES = 16 << 20  # answers the peer leaves unread: past this, it is not read either
ANSWERING_AT_ONCE = 8  # DATA batches of one connection being applied at once; more wait to be read
SILENCE_S = 10.0  # a peer silent this long while batches wait has failed
INCOMPATIBLE = 59031


class Connection:
    """One connection between two endpoints, whichever dialled it: each side sends DATA
    batches, each answered by a future of its RECEIPTS, and applies and answers the
    other's. Receipts, pings and pongs are written at once; a DATA batch waits until at
    most ``DATA_AHEAD_BYTES`` of the socket's buffer is still unsent, so what answers the
    peer never queues behind more than that and the frame being written."""

    def __init__(self, endpoint: TcpEndpoint, info: ConnectionInfo, reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter, *, dialled: bool, source_host: str = "") -> None:
        self.endpoint = endpoint
        self.info = info
        self.reader = reader
        self.writer = writer
        self.decoder = FrameDecoder()
        self.peer: Hello | None = None
        self.ahead: list[object] = []  # frames read with the peer's HELLO
        loop = asyncio.get_running_loop()
        self.dialled = dialled
        self.source_host = source_host  # the peer's address, when it dialled
        self.open = True
        self.waiting: dict[int, asyncio.Future[tuple[WireReceipt, ...]]] = {}
        self.answering: set[asyncio.Task[None]] = set()
        self.applying = asyncio.Lock()  # the peer's batches apply one after another, in order
        # Batches being applied at once: a peer that floods waits to be read, so there is
        # no unbounded backlog. A batch holds its slot while it is applied, not while what
        # it forwards waits for other instances: reading goes on, and a routing loop ends
        # by its hop count instead of filling every slot (forwarding is bounded by
        # MESSAGE_FORWARD_SIZE).
        self._slots = asyncio.Semaphore(ANSWERING_AT_ONCE)
        self._data_turn = asyncio.Lock()  # DATA goes out in the order it was requested
        self.heard = loop.time()  # when the peer last sent anything
        self.active = loop.time()  # when a batch last went either way
        self._tasks: list[asyncio.Task[None]] = []
        self._idle: asyncio.TimerHandle | None = None
        writer.transport.set_write_buffer_limits(high=DATA_AHEAD_BYTES)

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
        listen_host, listen_port = self.endpoint.listening_at()
        self.send(encode_hello(Hello(PROTOCOL_VERSION, settings.instance_id, settings.name, settings.encryption,
                                     settings.forwarding, listen_host, listen_port)))
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

    @property
    def dialler(self) -> str:
        """The instance that dialled this connection (known once logged in)."""
        assert self.peer is not None
        return self.endpoint.settings.instance_id if self.dialled else self.peer.instance_id

    async def log_in(self) -> None:
        """Identify the peer and exchange HELLOs; a TransportError with the reason when
        the two cannot talk (the socket is dropped; the caller records the reason)."""
        self.identify()
        try:
            await self.hello()
        except (TransportError, ProtocolError, OSError, TimeoutError) as failure:
            self.open = False
            self.writer.transport.abort()
            raise (failure if isinstance(failure, TransportError) else TransportError(
                f"Connection handshake failed: {reason_of(failure)}")) from None
        loop = asyncio.get_running_loop()
        self._tasks.append(loop.create_task(self._ping()))
        if self.dialled:  # the side that dialled closes the connection once it is idle
            self._tasks.append(loop.create_task(self.serve()))
            self._rearm()

    async def request(self, batch_id: int, envelopes: Sequence[Envelope]) -> tuple[WireReceipt, ...]:
        """Send one batch and wait for its receipts."""
        if not self.open:
            raise TransportError(self.info.refusal or "The connection to the remote endpoint was closed.")
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[tuple[WireReceipt, ...]] = loop.create_future()
        self.waiting[batch_id] = answer
        self.active = loop.time()
        try:
            async with self._data_turn:
                await self.writer.drain()  # down to the buffer's low mark
                if not self.open:
                    raise TransportError(self.info.refusal or "The connection to the remote endpoint was closed.")
                self.send(encode_data(batch_id, envelopes), len(envelopes))
            return await asyncio.wait_for(answer, RECEIPT_TIMEOUT_S)
        except (OSError, TimeoutError) as failure:
            self.close(_receiving_failed(failure))
            raise TransportError(self.info.refusal or "The connection failed.") from None
        finally:
            self.waiting.pop(batch_id, None)
            self.active = loop.time()

    async def serve(self) -> None:
        """Read the peer's frames until the connection ends: DATA is applied and answered
        (a task per batch; local applies keep their order), RECEIPTS settle the batches
        waiting, PINGs are answered from the loop, so a peer busy in its databases still
        answers."""
        loop = asyncio.get_running_loop()
        reason: str | None = None
        try:
            while self.open:
                frames = await self.frames()
                if not frames and self.reader.at_eof():
                    if self.waiting:
                        reason = _receiving_failed(ConnectionError("the remote endpoint closed the connection"))
                    return
                self.heard = loop.time()
                for frame in frames:
                    if isinstance(frame, Data):
                        self.info.total_fragments_received += len(frame.envelopes)
                        self.active = self.heard
                        await self._slots.acquire()
                        task = loop.create_task(self._answer(frame))
                        self.answering.add(task)
                        task.add_done_callback(self.answering.discard)
                    elif isinstance(frame, Receipts):
                        self.info.total_fragments_received += len(frame.receipts)
                        answer = self.waiting.get(frame.batch_id)
                        if answer is not None and not answer.done():
                            answer.set_result(frame.receipts)
                    elif isinstance(frame, Ping):
                        self.send(encode_pong(frame.token))
                    elif isinstance(frame, ErrorFrame):
                        reason = f"The remote endpoint closed the connection: {frame.text}"
                        return
                if self.writer.transport.get_write_buffer_size() > UNREAD_ANSWERS_BYTES:
                    await self.writer.drain()  # a peer that does not read its answers stops being read
        except (ProtocolError, OSError) as failure:
            # The side that dialled words it as its batches' transmission status; the
            # side that was dialled, as a connection it accepted that failed.
            reason = _receiving_failed(failure) if self.dialled else f"The connection failed: {reason_of(failure)}"
        finally:
            self.close(reason)

    async def _answer(self, batch: Data) -> None:
        try:
            receipts, forwards = await self.endpoint.apply_batch(batch, self.applying)
        finally:
            self._slots.release()
        for forwarded in await asyncio.gather(*forwards):
            receipts += forwarded
        if self.open:
            self.send(encode_receipts(batch.batch_id, receipts), len(receipts))
            self.active = asyncio.get_running_loop().time()

    async def _ping(self) -> None:
        """While batches wait for receipts, PING every ``PING_EVERY_S``: a peer that sends
        nothing back for ``SILENCE_S`` (a stalled network, a host gone) fails the
        connection, and its batches go again later."""
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

    def _rearm(self, after: float | None = None) -> None:
        if self.open:
            self._idle = asyncio.get_running_loop().call_later(IDLE_S if after is None else after,
                                                               self._close_if_idle)

    def _close_if_idle(self) -> None:
        idle_for = asyncio.get_running_loop().time() - self.active
        if self.waiting or self.answering or idle_for < IDLE_S:
            self._rearm(max(0.05, IDLE_S - idle_for))
        else:
            self.close(None)

    def close(self, reason: str | None) -> None:
        """Drop the connection: batches waiting fail (they go again later), batches being
        answered are abandoned (their sender sends them again; the duplicates are
        acknowledged), and the endpoint forgets it."""
        if not self.open:
            return
        self.open = False
        if reason is not None:
            log.warning("endpoint %s: %s (%s)", self.endpoint.settings.name, reason, self.info.address)
        for answer in self.waiting.values():
            if not answer.done():
                answer.set_exception(TransportError(reason or "The connection was closed."))
        if self._idle is not None:
            self._idle.cancel()
        for task in (*self._tasks, *self.answering):
            if task is not asyncio.current_task():
                task.cancel()
        # Aborted, not closed: a graceful TLS close waits for a peer that may be gone.
        self.writer.transport.abort()
        self.info.closed(reason)
        self.endpoint.forget(self)


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
