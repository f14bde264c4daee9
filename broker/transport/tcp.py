"""The Service Broker endpoint on TCP: frames between instances over mutual TLS (spec 1.9, 7.5).

A :class:`TcpEndpoint` runs an asyncio loop in a thread of its own. It listens on the
endpoint's port (while its state is STARTED) and dials other instances' endpoints on
demand; every connection is TLS with a certificate on both sides, and a peer is accepted
only if its certificate is one the endpoint trusts (``trusted_peers``, GRANT CONNECT's
counterpart): a peer with no certificate, an unknown or expired one, or plain TCP fails
the handshake, is logged, and is shown in ``sys.dm_broker_connections`` with the reason.
Nothing it sends is read.

After the handshake each side sends a HELLO (``transport.wire``; the two ends of a
connection are ``transport.links``). Then the dialling side
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

Two instances share one connection, whichever dialled it (``links.Connection``): an
endpoint sends on a connection its peer dialled when that peer said in its HELLO that it
listens at the address a route names, and dials otherwise. Should both dial at once,
each side sends on the connection the lower instance id dialled, and the other falls
idle. Receipts and pings never queue behind bulk data. The side that dialled closes a
connection no batch crossed for ``links.IDLE_S``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import logging
import socket
import ssl
import threading
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, NamedTuple

from broker.conversations.frames import Delivery, MessageFrame, Receipt
from broker.routing.addresses import TcpAddress
from broker.storage.connection_states import ConnectionState, LoginState
from broker.transport.batching import batches
from broker.transport.links import HANDSHAKE_TIMEOUT_S, RECEIPT_TIMEOUT_S, Connection, reason_of, refused
from broker.transport.records import ConnectionInfo, ForwardedMessage, forwarded_message
from broker.transport.seam import Answer, TransportError, receipts_of
from broker.transport.wire import (
    Data,
    Encryption,
    Envelope,
    WireReceipt,
)

log = logging.getLogger("broker.transport")

CONNECT_TIMEOUT_S = 10.0
CLOSE_WAIT_S = 2.0
# A batch's receipts come by then, or its connection has failed (dialling, the handshake
# and the receipts each time out): waiting longer is waiting for a stopped loop.
ANSWER_DEADLINE_S = CONNECT_TIMEOUT_S + HANDSHAKE_TIMEOUT_S + RECEIPT_TIMEOUT_S


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
        self._live: set[Connection] = set()  # open, logged in or logging in
        self._peers: dict[str, list[Connection]] = {}  # logged in, by the peer's instance, oldest first
        self._found_at: dict[TcpAddress, str] = {}  # the instance a route's address leads to
        self._listening: dict[tuple[str, int], str] = {}  # where a peer that dialled in listens
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
        """Send ``envelopes`` in DATA batches, in order, on one connection (the fragments of
        a large message go one after another); the receipts, by the database that gave
        them. TransportError when no batch was answered."""
        answered: dict[str, list[Receipt]] = {}
        connection: Connection | None = None
        for batch in batches(envelopes):
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

    async def _connection(self, address: TcpAddress) -> Connection:
        """The connection to send to ``address`` on: the one its instance shares with
        this one (dialled by either), else a new one."""
        lock = self._dialling.setdefault(address, asyncio.Lock())
        async with lock:
            peer = self._found_at.get(address) or await self._listener_at(address)
            shared = self._shared_with(peer) if peer is not None else None
            if peer is not None and shared is not None:
                self._found_at[address] = peer
                return shared
            dialled = await self._dial(address)
            assert dialled.peer is not None
            self._found_at[address] = dialled.peer.instance_id
            return self._shared_with(dialled.peer.instance_id) or dialled

    async def _listener_at(self, address: TcpAddress) -> str | None:
        """The instance that dialled in saying it listens at ``address``, if any."""
        if not self._listening:
            return None
        try:
            found = await asyncio.get_running_loop().getaddrinfo(address.host, address.port, type=socket.SOCK_STREAM)
        except OSError:
            return None
        for *_, sockaddr in found:
            peer = self._listening.get((str(sockaddr[0]), address.port))
            if peer is not None:
                return peer
        return None

    def _shared_with(self, peer: str) -> Connection | None:
        """The connection to send to ``peer`` on: of the open ones, the one the lower
        instance id dialled, the oldest of those, so that both ends choose the same one
        when both dialled at once."""
        connections = [c for c in self._peers.get(peer, ()) if c.open]
        return min(connections, key=lambda c: c.dialler) if connections else None

    async def _dial(self, address: TcpAddress) -> Connection:
        info = self._track(ConnectionInfo(f"{address.host}:{address.port}", is_accept=False))
        info.state = ConnectionState.CONNECTING
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(
                address.host, address.port, ssl=self.settings.client_context, server_hostname=address.host,
                ssl_handshake_timeout=HANDSHAKE_TIMEOUT_S), CONNECT_TIMEOUT_S + HANDSHAKE_TIMEOUT_S)
        except ssl.SSLError as failure:
            raise self._failed(info, f"Connection handshake failed: {reason_of(failure)}") from None
        except (OSError, TimeoutError) as failure:
            raise self._failed(info, f"Connection attempt failed with error: '{reason_of(failure)}'.") from None
        connection = Connection(self, info, reader, writer, dialled=True)
        self._live.add(connection)
        try:
            await connection.log_in()
        except TransportError as failure:
            self._live.discard(connection)
            raise self._failed(info, failure.status) from None
        self._joined(connection)
        return connection

    def _joined(self, connection: Connection) -> None:
        """A connection logged in: it carries this instance's batches for its peer from
        now on, and, when the peer dialled, says where the peer listens."""
        peer = connection.peer
        assert peer is not None
        self._peers.setdefault(peer.instance_id, []).append(connection)
        if not connection.dialled and peer.listen_port:
            self._listening[(peer.listen_host or connection.source_host, peer.listen_port)] = peer.instance_id

    def forget(self, connection: Connection) -> None:
        """A connection closed (``Connection.close``)."""
        self._live.discard(connection)
        if connection.peer is not None:
            shared = self._peers.get(connection.peer.instance_id, [])
            if connection in shared:
                shared.remove(connection)

    def listening_at(self) -> tuple[str, int]:
        """Where this endpoint listens, as its HELLO says: its LISTENER_IP ("" for ALL)
        and port (0 when it does not listen)."""
        if self.settings.listen is None:
            return "", 0
        return self.settings.listen[0], self.port or 0

    def _failed(self, info: ConnectionInfo, status: str) -> TransportError:
        log.warning("endpoint %s: %s (%s)", self.settings.name, status, info.address)
        info.closed(status)
        return TransportError(status)

    # -- accepting ---------------------------------------------------------------------------

    async def _accept(self, transport: asyncio.BaseTransport) -> None:
        """Shake hands on an accepted connection (paused since it was accepted), then serve it."""
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
            transport.close()
            refused(self, info, f"Connection handshake failed: {reason_of(failure)}")
            return
        except asyncio.CancelledError:
            tls = None
        if tls is None:  # cancelled, or closed as the handshake began: the endpoint is stopping
            transport.close()
            info.closed()
            return
        protocol.connection_made(tls)
        writer = asyncio.StreamWriter(tls, protocol, reader, loop)
        connection = Connection(self, info, reader, writer, dialled=False, source_host=str(peer[0]))
        self._live.add(connection)
        try:
            await connection.log_in()
        except TransportError as failure:
            self._live.discard(connection)
            refused(self, info, failure.status)
            return
        except asyncio.CancelledError:
            connection.close(None)
            return
        self._joined(connection)
        try:
            await connection.serve()
        except asyncio.CancelledError:
            pass  # the endpoint is stopping
        finally:
            await _closed(writer)

    async def apply_batch(
        self, batch: Data, applying: asyncio.Lock,
    ) -> tuple[list[WireReceipt], list[Coroutine[Any, Any, list[WireReceipt]]]]:
        """Apply one DATA batch to this instance's databases (under ``applying``, so a
        connection's batches apply in the order they came): their receipts, and the
        forwards of what the instance's routes send on, still to be awaited (each gives
        the receipts of the instance it forwarded to). A fragment is applied, answered
        and forwarded like a whole message."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        live = {(e.frame.message_id, e.frame.fragment): e for e in batch.envelopes
                if e.hops_remaining > 0 and e.time_consumed_ms < e.time_to_live_ms}
        async with applying:
            arrived = await loop.run_in_executor(self._appliers, self._inbound, [e.frame for e in live.values()])
        receipts = [WireReceipt(receipt, delivery.broker_instance) for delivery in arrived.deliveries
                    for receipt in delivery.receipts]
        elapsed_ms = int((loop.time() - started) * 1000)
        return receipts, [self._forward(address, [live[f.message_id, f.fragment] for f in frames], elapsed_ms)
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
            # Stop accepting, and let the connections just accepted make their transports
            # (one pass) and reach _Incoming, which makes them tasks of ours (a second),
            # before the server closes: a transport made after the close fails in the
            # server's bookkeeping (Python 3.11), and asyncio drops it with its socket open.
            loop = asyncio.get_running_loop()
            for sock in self._server.sockets:
                loop.remove_reader(sock.fileno())
            for _ in range(2):
                await asyncio.sleep(0)
            self._server.close()
        live = list(self._live)
        for connection in live:
            connection.close(None)
        accepted = list(self._accepted)
        for task in accepted:
            task.cancel()
        await asyncio.gather(*accepted, *(_closed(c.writer) for c in live), return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
        # Whatever is still under way (a delivery dialling out) ends now: its caller gets
        # a TransportError rather than waiting for a loop that no longer runs.
        others = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        for task in others:
            task.cancel()
        await asyncio.gather(*others, return_exceptions=True)


class _Incoming(asyncio.Protocol):
    """An accepted connection until TLS takes it over. Reading is paused at once, so the
    peer's first bytes (its ClientHello) stay for the handshake: a stream reader would
    have taken them."""

    def __init__(self, endpoint: TcpEndpoint) -> None:
        self._endpoint = endpoint

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        transport.pause_reading()
        # Known to the endpoint from now until it ends: one stopping before the task first
        # runs cancels it, and a task cancelled before it could close its connection
        # closes it here (else the socket stays open until the garbage collector finds it).
        accepted = self._endpoint._accepted
        task = asyncio.get_running_loop().create_task(self._endpoint._accept(transport))
        accepted.add(task)

        def ended(task: asyncio.Task[None]) -> None:
            accepted.discard(task)
            if task.cancelled():
                transport.close()

        task.add_done_callback(ended)


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


def _bound(server: asyncio.Server) -> str:
    return ", ".join(str(sock.getsockname()) for sock in server.sockets)
