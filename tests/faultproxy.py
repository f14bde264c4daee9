"""A fault-injecting TCP proxy for the network tests (issue 14).

``FaultProxy`` listens on a free loopback port and forwards every connection it accepts to
one target, both directions, on an asyncio loop in a thread of its own. While traffic flows,
another thread can cut every connection, refuse new ones, stall the bytes, or turn on
per-chunk faults (corrupt, duplicate, reorder, cut, drop after N bytes).

A *chunk* is what one read from a socket returned (at most 64 KiB): the proxy has no idea of
the protocol's frames, so a fault hits whatever the kernel handed it. Faults are drawn from a
``random.Random`` per connection and direction, seeded from the proxy's ``seed``, the
connection's number and the direction: the same seed and the same sequence of chunks give
the same faults whatever the other connections do.

On a TLS stream every corrupt, duplicate or reorder fault breaks the record layer: a record's
MAC no longer checks (TLS authenticates each record together with its sequence number, so a
replayed or overtaking record fails as surely as a flipped bit). The peer's ``ssl`` raises
and the connection fails; no altered byte ever reaches the application (the genuine first
copy of a duplicated chunk may). That is the point: the protocol above must notice the
failed connection, reconnect and retransmit.
"""

from __future__ import annotations

import asyncio
import random
import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Literal

Direction = Literal["both", "to_target", "to_client"]
FaultKind = Literal["corrupt", "duplicate", "reorder", "cut", "drop"]

CHUNK = 65536
CONTROL_TIMEOUT = 10.0  # how long a control call waits for the proxy's loop before giving up


@dataclass(frozen=True)
class Faults:
    """The per-chunk faults in force; probabilities are per chunk, in [0, 1]."""

    corrupt: float = 0.0
    duplicate: float = 0.0
    reorder: float = 0.0
    cut: float = 0.0
    drop_connection_after_bytes: int | None = None
    direction: Direction = "both"

    def applies_to(self, direction: Direction) -> bool:
        return self.direction in ("both", direction)


@dataclass(frozen=True)
class ProxyStats:
    """A snapshot of what the proxy has done since it was made.

    ``connections`` counts every accepted connection, refused ones included; ``open`` those
    being forwarded now. Bytes are counted as written to the other side (a duplicated chunk
    counts twice). ``faults`` maps each fault kind to how often it was injected; ``cut`` there
    counts per-chunk cuts only, not calls of ``FaultProxy.cut()``.
    """

    connections: int = 0
    refused: int = 0
    failed_dials: int = 0
    open: int = 0
    bytes_to_target: int = 0
    bytes_to_client: int = 0
    faults: dict[FaultKind, int] = field(default_factory=dict)


def _reset(writer: asyncio.StreamWriter | None) -> None:
    """Close ``writer``'s socket at once with an RST (SO_LINGER 0), dropping unsent bytes."""
    if writer is None or writer.transport.is_closing():
        return
    sock = writer.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:  # already gone: abort() below is all that is left to do
            pass
    writer.transport.abort()


def _corrupt(data: bytes, seed: int) -> bytes:
    """``data`` with one to three bytes xor-ed with a non-zero mask: never equal to ``data``."""
    rng = random.Random(seed)
    out = bytearray(data)
    for position in rng.sample(range(len(out)), min(len(out), rng.randint(1, 3))):
        out[position] ^= rng.randint(1, 255)
    return bytes(out)


class _Link:
    """One proxied connection: the client's side, the target's side once dialled, and the task serving it."""

    def __init__(self, number: int, client: asyncio.StreamWriter, seed: int) -> None:
        self.client = client
        self.target: asyncio.StreamWriter | None = None
        self.task = asyncio.current_task()
        self.closed = False
        self.was_reset = False
        self.forwarded = 0  # bytes read and let through while faults applied (drop_connection_after_bytes)
        self.rngs: dict[Direction, random.Random] = {
            d: random.Random(f"{seed}:{number}:{d}") for d in ("to_target", "to_client")
        }

    def reset(self) -> None:
        """Close both sides with an RST and stop serving. Idempotent."""
        self.closed = self.was_reset = True
        _reset(self.client)
        _reset(self.target)
        if self.task is not None and self.task is not asyncio.current_task():
            self.task.cancel()

    def close(self) -> None:
        """Close both sides after their pending bytes are sent (FIN, not RST). Idempotent."""
        self.closed = True
        for writer in (self.client, self.target):
            if writer is not None:
                writer.close()


class FaultProxy:
    """A TCP proxy from ``address`` (127.0.0.1, a free port) to ``target`` that injects faults on demand.

    ``start()`` binds the port and runs the proxy in a background thread with its own asyncio
    loop; ``stop()`` (or leaving the ``with`` block) resets every connection, closes the port
    and joins the thread. All controls are thread-safe and may be called while traffic flows;
    ``cut()``, ``pause()`` and ``resume()`` return once the proxy's loop has applied them.
    """

    def __init__(self, target: tuple[str, int], *, seed: int = 0) -> None:
        self.target = target
        self.seed = seed
        self._lock = threading.Condition()
        self._faults = Faults()
        self._refusing = False
        self._paused = False
        self._connections = 0
        self._refused = 0
        self._failed_dials = 0
        self._bytes: dict[Direction, int] = {"to_target": 0, "to_client": 0}
        self._fault_counts: dict[FaultKind, int] = {}
        self._links: set[_Link] = set()
        self._address: tuple[str, int] | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._flowing: asyncio.Event | None = None
        self._stopping: asyncio.Event | None = None
        self._error: BaseException | None = None

    # -- lifecycle ------------------------------------------------------------------------

    @property
    def address(self) -> tuple[str, int]:
        """Where clients connect: ``("127.0.0.1", port)``; set once started."""
        if self._address is None:
            raise RuntimeError("the proxy is not started")
        return self._address

    def start(self) -> FaultProxy:
        """Bind a free loopback port and start forwarding; returns once the port listens."""
        if self._thread is not None:
            raise RuntimeError("the proxy is already started")
        ready = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(ready,), name="faultproxy", daemon=True)
        self._thread.start()
        ready.wait()
        if self._error is not None:
            self._thread.join()
            self._thread = None
            raise RuntimeError("the proxy could not start") from self._error
        return self

    def stop(self) -> None:
        """Reset every connection, close the port and join the thread. Idempotent.

        Raises ``RuntimeError`` if the proxy's loop failed while it ran (a bug in the proxy).
        """
        thread, loop, stopping = self._thread, self._loop, self._stopping
        if thread is None:
            return
        if loop is not None and stopping is not None:
            try:
                loop.call_soon_threadsafe(stopping.set)
            except RuntimeError:  # the loop has already closed
                pass
        thread.join(CONTROL_TIMEOUT)
        if thread.is_alive():
            raise RuntimeError("the proxy's thread did not stop")
        self._thread = None
        if self._error is not None:
            raise RuntimeError("the proxy's loop failed") from self._error

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    # -- controls -------------------------------------------------------------------------

    def cut(self) -> None:
        """Reset every open connection, both sides, at once (RST: bytes in flight are lost).

        On TLS the peers see a connection reset, never a clean close_notify. New connections
        are still accepted.
        """
        self._on_loop(self._reset_all)

    def refuse(self, on: bool) -> None:
        """While on, accept new connections and reset them at once, without dialling the target.

        A client sees the reset at its first read or write, or already in ``connect()``.
        """
        with self._lock:
            self._refusing = on

    def pause(self) -> None:
        """Stall: forward nothing more, in either direction, until ``resume()``.

        Bytes are kept in order (in the proxy and, beyond one chunk, in the kernel's buffers,
        so senders feel back-pressure). Connections stay open: a peer sees a silent link.
        """
        with self._lock:
            self._paused = True
        self._on_loop(self._sync_flowing)

    def resume(self) -> None:
        """End a stall: everything held is forwarded, in order."""
        with self._lock:
            self._paused = False
        self._on_loop(self._sync_flowing)

    def set_faults(self, *, corrupt: float = 0.0, duplicate: float = 0.0, reorder: float = 0.0, cut: float = 0.0,
                   drop_connection_after_bytes: int | None = None, direction: Direction = "both") -> None:
        """Replace the per-chunk faults (no arguments: none); they apply from the next chunk read.

        For each chunk forwarded in ``direction``:

        * ``cut``: probability of resetting the connection (both sides) instead of forwarding it;
        * ``corrupt``: of xor-ing one to three of its bytes (on TLS: a bad record MAC);
        * ``duplicate``: of sending it twice (on TLS: the second copy is a replayed record, a bad MAC);
        * ``reorder``: of holding it and sending it after the next chunk of that direction
          (or at the end of the stream); the chunk that overtakes it is never held itself.
          On TLS: records out of sequence, a bad MAC.
        * ``drop_connection_after_bytes``: once this many bytes were forwarded on a connection
          (in ``direction``, both directions summed, counted before any duplication), forward
          no more and close both sides gracefully (FIN): the peer sees a truncated stream.
        """
        for name, p in (("corrupt", corrupt), ("duplicate", duplicate), ("reorder", reorder), ("cut", cut)):
            if not 0.0 <= p <= 1.0:
                raise ValueError(f"{name} must be a probability in [0, 1], not {p!r}")
        if drop_connection_after_bytes is not None and drop_connection_after_bytes < 0:
            raise ValueError(f"drop_connection_after_bytes must be >= 0, not {drop_connection_after_bytes!r}")
        if direction not in ("both", "to_target", "to_client"):
            raise ValueError(f"direction must be 'both', 'to_target' or 'to_client', not {direction!r}")
        with self._lock:
            self._faults = Faults(corrupt, duplicate, reorder, cut, drop_connection_after_bytes, direction)

    @property
    def stats(self) -> ProxyStats:
        """A consistent snapshot of the counters."""
        with self._lock:
            open_links = sum(not link.closed for link in self._links)
            return ProxyStats(self._connections, self._refused, self._failed_dials, open_links,
                              self._bytes["to_target"], self._bytes["to_client"], dict(self._fault_counts))

    def wait_for_connections(self, n: int, timeout: float) -> None:
        """Block until ``n`` connections in all (refused ones included) have been accepted.

        Raises ``TimeoutError`` after ``timeout`` seconds.
        """
        with self._lock:
            if not self._lock.wait_for(lambda: self._connections >= n, timeout):
                raise TimeoutError(f"{self._connections} of {n} connections accepted within {timeout}s")

    # -- the loop's side ------------------------------------------------------------------

    def _on_loop(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` on the proxy's loop and wait for it; nothing to do when the proxy is not running."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        done = threading.Event()

        def call() -> None:
            try:
                fn()
            finally:
                done.set()

        try:
            loop.call_soon_threadsafe(call)
        except RuntimeError:  # the loop closed meanwhile: nothing is left to control
            return
        deadline = time.monotonic() + CONTROL_TIMEOUT
        while not done.wait(0.05):  # a loop that stops meanwhile never runs ``call``: nothing is left to control
            if not thread.is_alive():
                return
            if time.monotonic() > deadline:
                raise RuntimeError("the proxy's loop did not answer")

    def _sync_flowing(self) -> None:
        if self._flowing is None:
            return
        with self._lock:
            paused = self._paused
        if paused:
            self._flowing.clear()
        else:
            self._flowing.set()

    def _reset_all(self) -> None:
        with self._lock:
            links = list(self._links)
        for link in links:
            link.reset()

    def _run(self, ready: threading.Event) -> None:
        try:
            asyncio.run(self._main(ready))
        except BaseException as error:  # reported by start() or stop()
            self._error = error
            ready.set()
        finally:
            self._loop = None

    async def _main(self, ready: threading.Event) -> None:
        # The loop is published first: a pause() from now on reaches it, whatever the order.
        self._loop = asyncio.get_running_loop()
        self._flowing = asyncio.Event()
        self._stopping = asyncio.Event()
        self._sync_flowing()
        server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        host, port = server.sockets[0].getsockname()[:2]
        self._address = (host, port)
        ready.set()
        try:
            await self._stopping.wait()
        finally:
            server.close()
            self._reset_all()
            with self._lock:
                tasks = [link.task for link in self._links if link.task is not None]
            await asyncio.gather(*tasks, return_exceptions=True)
            await server.wait_closed()

    async def _serve(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        with self._lock:
            self._connections += 1
            number = self._connections
            refusing = self._refusing
            if refusing:
                self._refused += 1
            self._lock.notify_all()
        if refusing:
            _reset(client_writer)
            return
        link = _Link(number, client_writer, self.seed)
        with self._lock:
            self._links.add(link)
        try:
            try:
                target_reader, link.target = await asyncio.open_connection(*self.target)
            except OSError:  # the client learns it as it would from a refusing target: a reset
                with self._lock:
                    self._failed_dials += 1
                link.reset()
                return
            await asyncio.gather(
                self._pump(link, "to_target", client_reader, link.target),
                self._pump(link, "to_client", target_reader, client_writer),
            )
        except asyncio.CancelledError:  # reset by cut() or stop(): the link is already closed
            pass
        finally:
            with self._lock:
                self._links.discard(link)
            # Again, for a target dialled while a reset was under way; otherwise both streams ended: close.
            if link.was_reset:
                link.reset()
            else:
                link.close()

    async def _pump(self, link: _Link, direction: Direction, reader: asyncio.StreamReader,
                    writer: asyncio.StreamWriter) -> None:
        """Forward one direction of ``link`` until end of stream, applying the faults in force."""
        assert self._flowing is not None
        rng = link.rngs[direction]
        held: bytes | None = None  # a reordered chunk, waiting for the next one
        try:
            while not link.closed:
                data = await reader.read(CHUNK)
                await self._flowing.wait()
                if link.closed:
                    return
                if not data:  # end of stream: a held chunk goes out before the half-close
                    if held is not None:
                        self._write(writer, direction, held)
                    if writer.can_write_eof():
                        writer.write_eof()
                    return
                with self._lock:
                    faults = self._faults
                hold = None
                if faults.applies_to(direction):  # a chunk that overtakes a held one is not held itself
                    hold = self._inject(link, direction, writer, rng, faults, data, may_hold=held is None)
                    if link.closed:
                        return
                else:
                    self._write(writer, direction, data)
                if held is not None:
                    self._write(writer, direction, held)
                held = hold
                await writer.drain()
        except OSError:  # one side failed: the other side learns it the same way
            link.reset()

    def _inject(self, link: _Link, direction: Direction, writer: asyncio.StreamWriter, rng: random.Random,
                faults: Faults, data: bytes, *, may_hold: bool) -> bytes | None:
        """Forward ``data`` with the faults that ``rng`` draws; return it if it is to be held (reordered)."""
        # The same draws for every chunk whatever fires, so one fault's probability shifts no other draw.
        cut, corrupt, duplicate, reorder = (rng.random() for _ in range(4))
        corruption_seed = rng.getrandbits(32)
        if cut < faults.cut:
            self._count("cut")
            link.reset()
            return None
        dropping = False
        if faults.drop_connection_after_bytes is not None:
            room = max(0, faults.drop_connection_after_bytes - link.forwarded)
            dropping = len(data) >= room
            data = data[:room]
        link.forwarded += len(data)
        if data and corrupt < faults.corrupt:
            self._count("corrupt")
            data = _corrupt(data, corruption_seed)
        if data and duplicate < faults.duplicate:
            self._count("duplicate")
            data = data + data
        if dropping:
            self._write(writer, direction, data)
            self._count("drop")
            link.close()
            return None
        if may_hold and reorder < faults.reorder:
            self._count("reorder")
            return data
        self._write(writer, direction, data)
        return None

    def _write(self, writer: asyncio.StreamWriter, direction: Direction, data: bytes) -> None:
        if not data:
            return
        with self._lock:  # counted first: write() may hand the bytes to the peer before it returns
            self._bytes[direction] += len(data)
        writer.write(data)

    def _count(self, kind: FaultKind) -> None:
        with self._lock:
            self._fault_counts[kind] = self._fault_counts.get(kind, 0) + 1
