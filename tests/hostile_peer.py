"""A hostile peer of a Service Broker endpoint, for the network tests (issue 14).

:class:`HostilePeer` is a blocking TLS client that presents a certificate of the test's
choosing (one the endpoint trusts, or an impostor), then writes whatever bytes the test
gives it and decodes what the endpoint answers. :func:`raw_frame` builds frames by hand,
with any type, payload and CRC, so that a test can send what the encoders never make.
"""

from __future__ import annotations

import socket
import struct
import time
import zlib
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any

import broker
from broker.ddl.certificates import tls_contexts
from broker.transport.wire import PROTOCOL_VERSION, Frame, FrameDecoder, Hello, encode_hello

_HEADER = struct.Struct(">IBI")  # length (of what follows it), type, crc32 of the payload
_AFTER_LENGTH = 5  # the type and the CRC, counted by the length


def raw_frame(kind: int, payload: bytes, *, crc: int | None = None, length: int | None = None) -> bytes:
    """A frame of type ``kind`` around ``payload``: its CRC and length prefix are right
    unless given."""
    return _HEADER.pack(_AFTER_LENGTH + len(payload) if length is None else length, kind,
                        zlib.crc32(payload) if crc is None else crc) + payload


def hello_frame() -> bytes:
    """A HELLO any endpoint with ENCRYPTION = REQUIRED takes."""
    return encode_hello(Hello(PROTOCOL_VERSION, "hostile-instance", "HostileEndpoint", "REQUIRED", False))


class HostilePeer:
    """A TLS connection to the endpoint on ``port`` of 127.0.0.1, presenting ``certificate``
    (with ``key``) and trusting the endpoint's certificate ``trusts``.

    ``frames`` holds every frame read from the endpoint so far; ``closed`` says whether the
    endpoint closed the connection (a clean close, a reset or a TLS alert), and
    ``failure`` what the client saw when it did not close cleanly.
    """

    def __init__(self, port: int, certificate: bytes, key: bytes, trusts: bytes, *, timeout: float = 10.0) -> None:
        _, client = tls_contexts(certificate, key, [trusts])
        raw = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        try:
            self.tls = client.wrap_socket(raw, server_hostname="127.0.0.1")
        except BaseException:
            raw.close()
            raise
        self.address = f"127.0.0.1:{self.tls.getsockname()[1]}"  # as the endpoint's connection row shows it
        self.timeout = timeout
        self.frames: list[Frame] = []
        self.closed = False
        self.failure: str | None = None
        self._decoder = FrameDecoder()

    def __enter__(self) -> HostilePeer:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        self.tls.close()

    def send(self, data: bytes) -> bool:
        """Write ``data``; False if the endpoint closed the connection meanwhile."""
        try:
            self.tls.sendall(data)
        except OSError as failure:  # ssl.SSLError too
            self.closed, self.failure = True, str(failure)
            return False
        return True

    def read_until(self, wanted: Callable[[Sequence[Frame]], bool], what: str) -> list[Frame]:
        """Read until ``wanted(self.frames)`` holds; AssertionError if the endpoint closes
        first or does not answer within the timeout."""
        deadline = time.monotonic() + self.timeout
        while not wanted(self.frames):
            if not self._read(deadline):
                raise AssertionError(f"the endpoint closed the connection before {what}: {self.failure}")
        return self.frames

    def read_until_closed(self) -> list[Frame]:
        """Read until the endpoint closes the connection; AssertionError if it keeps it
        open past the timeout."""
        deadline = time.monotonic() + self.timeout
        while self._read(deadline):
            pass
        return self.frames

    def of_type(self, kind: type[Any]) -> list[Any]:
        return [frame for frame in self.frames if isinstance(frame, kind)]

    def _read(self, deadline: float) -> bool:
        """Read once; False when the connection is closed."""
        if self.closed:
            return False
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise AssertionError(f"the endpoint kept the connection open for {self.timeout} s")
        self.tls.settimeout(remaining)
        try:
            data = self.tls.recv(1 << 16)
        except TimeoutError:
            raise AssertionError(f"the endpoint kept the connection open for {self.timeout} s") from None
        except OSError as failure:  # a reset, or a TLS alert (a refused certificate)
            self.closed, self.failure = True, str(failure)
            return False
        if not data:
            self.closed = True
            return False
        self.frames += self._decoder.feed(data)
        return True


def connection_row(inst: broker.Instance, peer: HostilePeer) -> dict[str, Any] | None:
    """The endpoint's ``sys.dm_broker_connections`` row of ``peer``'s connection, if written."""
    rows = inst.catalog("sys.dm_broker_connections", address=peer.address, is_accept=True)
    return rows[0] if rows else None
