"""The Service Broker endpoint on TCP: frames between instances over mutual TLS (spec 1.9, 7.5).

A :class:`TcpEndpoint` runs an asyncio loop in a thread of its own. It listens on the
endpoint's port (while its state is STARTED) and dials other instances' endpoints on
demand; every connection is TLS with a certificate on both sides, and a peer is accepted
only if its certificate is one the endpoint trusts (``trusted_peers``, GRANT CONNECT's
counterpart): a peer with no certificate, an unknown or expired one, or plain TCP fails
the handshake, is logged, and is shown in ``sys.dm_broker_connections`` with the reason.
Nothing it sends is read.

After the handshake each side sends a HELLO (``transport.wire``). Then the dialling side
sends DATA batches and the accepting side answers each with the receipts of the
databases that took the messages, once they have committed (``inbound``: the runtime's
``Inbound.apply``). Batches of one connection are applied one after another, in the
order they came, so a dialog's messages keep their order. The dialling side is the
:class:`~broker.transport.seam.NetworkTransport` the transmitter uses: :meth:`submit`
sends a batch without waiting (several batches ride one connection at once, each
answered in turn) and gives the future of its receipts, which fails with a
``TransportError`` and a transmission status. A connection that fails drops every batch
in flight on it: those messages have no receipt and go again after a back-off; a batch
the destination already committed is acknowledged again as duplicates. So a lost, cut
or corrupted connection loses nothing and delivers nothing twice.

Each direction has its own connection: an instance dials for what it sends and answers
on what it accepts, so receipts and pings never queue behind its own bulk data. An
outbound connection idle for ``IDLE_S`` is closed.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import logging
import ssl
import threading
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, NamedTuple

from cryptography import x509
from cryptography.hazmat.primitives import hashes

from broker.conversations.frames import Delivery, MessageFrame, Receipt
from broker.routing.addresses import TcpAddress
from broker.storage.connection_states import ConnectionEncryption, ConnectionState, LoginState
from broker.transport.fragments import REASSEMBLY_BYTES, Reassembly, batches, fragmented
from broker.transport.records import ConnectionInfo, ForwardedMessage, forwarded_message
from broker.transport.seam import Answer, TransportError, receipts_of
from broker.transport.wire import (
    PROTOCOL_VERSION,
    CorruptFrame,
    Data,
    Encryption,
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

log = logging.getLogger("broker.transport")

CONNECT_TIMEOUT_S = 10.0
HANDSHAKE_TIMEOUT_S = 10.0  # the TLS handshake and the HELLOs
RECEIPT_TIMEOUT_S = 120.0  # a batch not answered by then: the connection is dropped
IDLE_S = 90.0  # an outbound connection with nothing in flight this long is closed
READ_SIZE = 1 << 16
CLOSE_WAIT_S = 2.0
PING_EVERY_S = 2.0  # while batches wait for receipts
ANSWERING_AT_ONCE = 8  # DATA batches of one connection being applied at once; more wait to be read
SILENCE_S = 10.0  # a peer silent this long while batches wait has failed
# A batch's receipts come by then, or its connection has failed (dialling, the handshake
# and the receipts each time out): waiting longer is waiting for a stopped loop.
ANSWER_DEADLINE_S = CONNECT_TIMEOUT_S + HANDSHAKE_TIMEOUT_S + RECEIPT_TIMEOUT_S
INCOMPATIBLE = 59031



@dataclass(frozen=True)
class EndpointSettings:
    """What the endpoint needs of its definition (``ddl.endpoints``) and of its instance."""

    name: str
    instance_id: str  # the instance catalog's broker instance: who this endpoint speaks for
    server_context: ssl.SSLContext
    client_context: ssl.SSLContext
    listen: tuple[str, int] | None  # host and port to listen on; None: dial only
    trusted_thumbprints: tuple[str, ...] = ()  # the trusted peers' certificates, in order
    encryption: Encryption = "REQUIRED"
    forwarding: bool = False
    forward_size: int = 10 << 20  # MESSAGE_FORWARD_SIZE: bytes of bodies held for forwarding at once


class Arrived(NamedTuple):
    """What the instance did with a batch of frames from another instance."""

    deliveries: Sequence[Delivery]  # the receipts of the databases that took frames, and refusals
    onward: Mapping[TcpAddress, Sequence[MessageFrame]]  # frames its routes send to another instance


Inbound = Callable[[Sequence[MessageFrame]], Arrived]


class TcpEndpoint:
    """The endpoint of one instance: listens, dials, and carries frames both ways."""

    def __init__(self, settings: EndpointSettings, inbound: Inbound) -> None:
        self.settings = settings
        self._inbound = inbound
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="broker-endpoint", daemon=True)
        self._server: asyncio.Server | None = None
        self._outbound: dict[TcpAddress, _Outbound] = {}
        self._dialling: dict[TcpAddress, asyncio.Lock] = {}
        self._accepted: set[asyncio.Task[None]] = set()
        self._connections: list[ConnectionInfo] = []
        self._lock = threading.Lock()
        self._batches = itertools.count(1)
        self._forwarding: dict[int, ForwardedMessage] = {}  # in flight, by a key of its own
        self._forwarded_keys = itertools.count()
        self._forwarding_bytes = 0
        # Databases are written on threads of their own: the loop only moves bytes.
        self._appliers = concurrent.futures.ThreadPoolExecutor(4, thread_name_prefix="broker-endpoint-apply")

    # -- life ----------------------------------------------------------------------------

    def start(self) -> TcpEndpoint:
        """Start the loop and, when the endpoint listens, bind its port (an OSError if
        the port is taken, raised here)."""
        self._thread.start()
        if self.settings.listen is not None:
            host, port = self.settings.listen
            try:
                server = asyncio.run_coroutine_threadsafe(
                    self._loop.create_server(lambda: _Incoming(self), host or None, port, reuse_address=True),
                    self._loop).result()
            except BaseException:
                self.stop()
                raise
            self._server = server
            log.info("endpoint %s listening on %s", self.settings.name, _bound(server))
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Close every connection and the listener, and stop the loop."""
        if not self._thread.is_alive():
            return
        try:
            asyncio.run_coroutine_threadsafe(self._close_all(), self._loop).result(timeout)
        except (TimeoutError, concurrent.futures.TimeoutError):
            log.warning("endpoint %s: connections did not close within %.0f s", self.settings.name, timeout)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout)
        self._appliers.shutdown(wait=False, cancel_futures=True)
        self._loop.close()

    @property
    def port(self) -> int | None:
        """The port it listens on (None when it does not)."""
        if self._server is None or not self._server.sockets:
            return None
        return int(self._server.sockets[0].getsockname()[1])

    def connections(self) -> list[ConnectionInfo]:
        """A copy of every connection it has now and the ones that closed lately."""
        with self._lock:
            return [replace(info) for info in self._connections]

    def forwarded(self) -> list[ForwardedMessage]:
        """The messages it holds now, on their way to another instance."""
        with self._lock:
            return list(self._forwarding.values())

    # -- the network transport -------------------------------------------------------------

    def deliver(self, address: TcpAddress, frames: Sequence[MessageFrame]) -> Sequence[Delivery]:
        """Send ``frames`` to the endpoint at ``address``; the receipts of the databases
        that took them, by database. Blocks until they come (``RECEIPT_TIMEOUT_S``)."""
        return receipts_of(self.submit(address, frames), ANSWER_DEADLINE_S)

    def submit(self, address: TcpAddress, frames: Sequence[MessageFrame]) -> Answer:
        """Start sending ``frames`` to the endpoint at ``address``; the future of the
        receipts. Does not block: batches for one address share its connection, each
        going while the earlier ones wait for their receipts (pipelined), in the order
        they were submitted."""
        sending = self._deliver(address, frames)
        try:
            return asyncio.run_coroutine_threadsafe(sending, self._loop)
        except RuntimeError:  # the loop is closed: the endpoint has stopped
            sending.close()
            stopped: Answer = concurrent.futures.Future()
            stopped.set_exception(TransportError("The endpoint stopped."))
            return stopped

    async def _deliver(self, address: TcpAddress, frames: Sequence[MessageFrame]) -> list[Delivery]:
        now = datetime.now(UTC)
        remaining: dict[datetime, int] = {}  # a batch holds few dialogs, so few lifetimes
        for frame in frames:
            if frame.lifetime not in remaining:
                remaining[frame.lifetime] = _time_to_live_ms(frame.lifetime, now)
        return await self._send(address, [Envelope(f, remaining[f.lifetime]) for f in frames])

    async def _send(self, address: TcpAddress, envelopes: Sequence[Envelope]) -> list[Delivery]:
        """Send ``envelopes`` in DATA batches, a large message in fragments after the
        whole ones (so it holds none of them up); the receipts, by the database that gave
        them. TransportError when no batch was answered."""
        answered: dict[str, list[Receipt]] = {}
        connection: _Outbound | None = None
        for batch in batches(fragmented(envelopes)):
            try:
                connection = connection or await self._connection(address)
                receipts = await connection.request(next(self._batches), batch)
            except TransportError:
                if not answered:
                    raise
                break  # what was answered settles; the rest goes again later
            for wire in receipts:
                answered.setdefault(wire.broker_instance, []).append(wire.receipt)
        return [Delivery(instance, tuple(receipts)) for instance, receipts in answered.items()]

    async def _forward(self, address: TcpAddress, envelopes: Sequence[Envelope],
                       elapsed_ms: int) -> list[WireReceipt]:
        """Forward messages the instance's routes send on (spec 8.7): each hop takes one
        from ``hops_remaining`` and adds the time spent here to ``time_consumed``; a
        message past either limit, or that would take the bodies held for forwarding past
        MESSAGE_FORWARD_SIZE, is dropped. The messages are held in memory only, and this
        instance acknowledges nothing: the receipts returned are the final destination's
        (none for what was dropped or could not go on: the sender tries again)."""
        onward: list[Envelope] = []
        held: list[int] = []
        size = 0
        for envelope in envelopes:
            hops, consumed = envelope.hops_remaining - 1, envelope.time_consumed_ms + elapsed_ms
            body = len(envelope.frame.body or b"")
            if hops <= 0 or consumed >= envelope.time_to_live_ms:
                log.info("dropped a message to forward: its hops or its time to live ran out")
            elif self._forwarding_bytes + size + body > self.settings.forward_size:
                log.info("dropped a message to forward: MESSAGE_FORWARD_SIZE would be exceeded")
            else:
                size += body
                onward.append(envelope._replace(hops_remaining=hops, time_consumed_ms=consumed))
        if not onward:
            return []
        with self._lock:
            self._forwarding_bytes += size
            for envelope in onward:
                key = next(self._forwarded_keys)
                held.append(key)
                self._forwarding[key] = forwarded_message(envelope, address)
        try:
            deliveries = await self._send(address, onward)
        except TransportError as failure:
            log.info("could not forward %d message(s) to %s: %s", len(onward), address, failure.status)
            deliveries = []
        finally:
            with self._lock:
                self._forwarding_bytes -= size
                for key in held:
                    del self._forwarding[key]
        return [WireReceipt(receipt, delivery.broker_instance) for delivery in deliveries
                for receipt in delivery.receipts]

    async def _connection(self, address: TcpAddress) -> _Outbound:
        lock = self._dialling.setdefault(address, asyncio.Lock())
        async with lock:
            connection = self._outbound.get(address)
            if connection is not None and connection.open:
                return connection
            info = self._track(ConnectionInfo(f"{address.host}:{address.port}", is_accept=False))
            info.state = ConnectionState.CONNECTING
            try:
                reader, writer = await asyncio.wait_for(asyncio.open_connection(
                    address.host, address.port, ssl=self.settings.client_context, server_hostname=address.host,
                    ssl_handshake_timeout=HANDSHAKE_TIMEOUT_S), CONNECT_TIMEOUT_S + HANDSHAKE_TIMEOUT_S)
            except ssl.SSLError as failure:
                raise self._failed(info, f"Connection handshake failed: {_reason(failure)}") from None
            except (OSError, TimeoutError) as failure:
                raise self._failed(info, f"Connection attempt failed with error: '{_reason(failure)}'.") from None
            connection = _Outbound(self, info, reader, writer)
            try:
                await connection.log_in()
            except TransportError as failure:
                info.closed(failure.status)
                raise
            self._outbound[address] = connection
            return connection

    def _failed(self, info: ConnectionInfo, status: str) -> TransportError:
        log.warning("endpoint %s: %s (%s)", self.settings.name, status, info.address)
        info.closed(status)
        return TransportError(status)

    # -- accepting ---------------------------------------------------------------------------

    async def _accept(self, transport: asyncio.BaseTransport) -> None:
        """Shake hands on an accepted connection (paused since it was accepted), then serve it."""
        task = asyncio.current_task()
        assert task is not None
        self._accepted.add(task)
        peer = transport.get_extra_info("peername") or ("?", 0)
        info = self._track(ConnectionInfo(f"{peer[0]}:{peer[1]}", is_accept=True))
        info.state = ConnectionState.CONNECTING
        info.login_state = LoginState.WAIT_VALIDATION
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(loop=loop)
        protocol = asyncio.StreamReaderProtocol(reader, loop=loop)
        try:
            tls = await loop.start_tls(transport, protocol, self.settings.server_context,  # type: ignore[arg-type]
                                       server_side=True, ssl_handshake_timeout=HANDSHAKE_TIMEOUT_S)
        except (ssl.SSLError, OSError, TimeoutError, ConnectionError) as failure:
            self._accepted.discard(task)
            transport.close()
            _refused(self, info, f"Connection handshake failed: {_reason(failure)}")
            return
        except asyncio.CancelledError:
            self._accepted.discard(task)
            transport.close()
            info.closed()
            return
        assert tls is not None
        protocol.connection_made(tls)
        writer = asyncio.StreamWriter(tls, protocol, reader, loop)
        try:
            await _Accepted(self, info, reader, writer).serve()
        except asyncio.CancelledError:
            pass  # the endpoint is stopping
        finally:
            self._accepted.discard(task)
            info.closed()
            await _closed(writer)

    async def _apply(self, batch: Data, applying: asyncio.Lock,
                     reassembly: Reassembly) -> tuple[list[WireReceipt], list[Coroutine[Any, Any, list[WireReceipt]]]]:
        """Apply one DATA batch to this instance's databases (under ``applying``, so a
        connection's batches apply in the order they came): their receipts, and the
        forwards of what the instance's routes send on, still to be awaited (each gives
        the receipts of the instance it forwarded to). A message in fragments is taken,
        and answered, with the batch that brings its last fragment (``reassembly``)."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        live = {e.frame.message_id: e for e in reassembly.whole(batch.envelopes)
                if e.hops_remaining > 0 and e.time_consumed_ms < e.time_to_live_ms}
        async with applying:
            arrived = await loop.run_in_executor(self._appliers, self._inbound, [e.frame for e in live.values()])
        receipts = [WireReceipt(receipt, delivery.broker_instance) for delivery in arrived.deliveries
                    for receipt in delivery.receipts]
        elapsed_ms = int((loop.time() - started) * 1000)
        return receipts, [self._forward(address, [live[f.message_id] for f in frames], elapsed_ms)
                          for address, frames in arrived.onward.items()]

    # -- bookkeeping ---------------------------------------------------------------------------

    def _track(self, info: ConnectionInfo) -> ConnectionInfo:
        with self._lock:
            # Closed connections stay visible for a while; the oldest go first.
            closed = [c for c in self._connections if c.state == ConnectionState.CLOSED]
            if len(closed) > 100:
                self._connections.remove(closed[0])
            self._connections.append(info)
        return info

    async def _close_all(self) -> None:
        if self._server is not None:
            self._server.close()
        outbound = list(self._outbound.values())
        for connection in outbound:
            connection.close(None)
        accepted = list(self._accepted)
        for task in accepted:
            task.cancel()
        await asyncio.gather(*accepted, *(_closed(c.writer) for c in outbound), return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
        # Whatever is still under way (a delivery dialling out) ends now: its caller gets
        # a TransportError rather than waiting for a loop that no longer runs.
        others = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        for task in others:
            task.cancel()
        await asyncio.gather(*others, return_exceptions=True)


class _Link:
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


class _Outbound(_Link):
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
                f"Connection handshake failed: {_reason(failure)}") from None
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


class _Accepted(_Link):
    """A connection another endpoint dialled: DATA in, RECEIPTS out."""

    def __init__(self, endpoint: TcpEndpoint, info: ConnectionInfo, reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter) -> None:
        super().__init__(endpoint, info, reader, writer)
        self.applying = asyncio.Lock()
        self.reassembly = Reassembly(REASSEMBLY_BYTES)

    async def serve(self) -> None:
        self.identify()
        try:
            await self.hello()
        except (TransportError, ProtocolError, OSError, TimeoutError) as failure:
            _refused(self.endpoint, self.info,
                     failure.status if isinstance(failure, TransportError) else _reason(failure))
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
            self.info.closed(f"The connection failed: {_reason(failure)}")
        finally:
            for task in answering:
                task.cancel()

    async def _answer(self, batch: Data, slot: asyncio.Semaphore) -> None:
        try:
            receipts, forwards = await self.endpoint._apply(batch, self.applying, self.reassembly)
        finally:
            slot.release()
        for forwarded in await asyncio.gather(*forwards):
            receipts += forwarded
        if not self.writer.is_closing():
            self.send(encode_receipts(batch.batch_id, receipts), len(receipts))
            await self.writer.drain()



class _Incoming(asyncio.Protocol):
    """An accepted connection until TLS takes it over. Reading is paused at once, so the
    peer's first bytes (its ClientHello) stay for the handshake: a stream reader would
    have taken them."""

    def __init__(self, endpoint: TcpEndpoint) -> None:
        self._endpoint = endpoint

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        transport.pause_reading()
        asyncio.get_running_loop().create_task(self._endpoint._accept(transport))


def _refused(endpoint: TcpEndpoint, info: ConnectionInfo, reason: str) -> None:
    log.warning("endpoint %s refused a connection from %s: %s", endpoint.settings.name, info.address, reason)
    info.closed(reason)


def _incompatible(mine: str, theirs: str) -> str | None:
    """Why two ENCRYPTION settings cannot talk (REQUIRED against DISABLED), or None."""
    if {mine, theirs} == {"REQUIRED", "DISABLED"}:
        return f"The endpoint's ENCRYPTION is {mine} and its peer's is {theirs}: they cannot talk."
    return None


def _time_to_live_ms(lifetime: datetime, now: datetime) -> int:
    """What remains of a message's time to live, in milliseconds, within the wire's range."""
    return max(0, min(2**31 - 1, int((lifetime - now).total_seconds() * 1000)))


async def _closed(writer: asyncio.StreamWriter) -> None:
    """Close a connection and wait (briefly) until its transport is gone."""
    writer.close()
    try:
        await asyncio.wait_for(writer.wait_closed(), CLOSE_WAIT_S)
    except (OSError, TimeoutError, ssl.SSLError):
        writer.transport.abort()  # a peer that does not finish the close: let it go


def _receiving_failed(failure: BaseException) -> str:
    """SQL Server's transmission status for a connection that failed while in use (9755)."""
    return f"An error occurred while receiving data: '{_reason(failure)}'."


def _reason(failure: BaseException) -> str:
    if isinstance(failure, ssl.SSLError):
        return failure.reason or str(failure)
    if isinstance(failure, OSError) and failure.errno is not None:
        return f"{failure.errno}({failure.strerror})"
    return str(failure) or type(failure).__name__


def _bound(server: asyncio.Server) -> str:
    return ", ".join(str(sock.getsockname()) for sock in server.sockets)
