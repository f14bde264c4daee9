"""The fault-injecting proxy of the network tests, against a real echo server on loopback."""

from __future__ import annotations

import datetime
import ipaddress
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from faultproxy import FaultKind, FaultProxy
from support import wait_until

Connect = Callable[[], socket.socket]

DEADLINE = 10.0
QUIET = 0.3  # how long a read waits to show that nothing arrives


class EchoServer:
    """A plain TCP (or TLS) echo server in threads; records what each connection received and how it ended."""

    def __init__(self, context: ssl.SSLContext | None = None) -> None:
        self.context = context
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address: tuple[str, int] = self.listener.getsockname()[:2]
        self.lock = threading.Condition()
        self.received: list[bytearray] = []
        self.endings: list[str] = []  # "eof", "reset" or "ssl: <reason>", one per ended connection
        self.connections: list[socket.socket] = []
        self.threads: list[threading.Thread] = []
        self.closing = False
        self.acceptor = threading.Thread(target=self._accept, name="echo-accept")
        self.acceptor.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            if self.closing:  # close() connected to wake us
                conn.close()
                return
            with self.lock:
                self.connections.append(conn)
                self.received.append(bytearray())
                index = len(self.received) - 1
                thread = threading.Thread(target=self._echo, args=(conn, index), name="echo")
                self.threads.append(thread)
                self.lock.notify_all()
            thread.start()

    def _echo(self, conn: socket.socket, index: int) -> None:
        ending = "eof"
        stream = conn
        try:
            if self.context is not None:
                stream = self.context.wrap_socket(conn, server_side=True)  # takes over conn's descriptor
                with self.lock:
                    self.connections[index] = stream
            while data := stream.recv(65536):
                with self.lock:
                    self.received[index] += data
                    self.lock.notify_all()
                stream.sendall(data)
        except ssl.SSLError as error:
            ending = f"ssl: {error.reason}"
        except ConnectionResetError:
            ending = "reset"
        except OSError:
            ending = "error"
        finally:
            stream.close()
            with self.lock:
                self.endings.append(ending)
                self.lock.notify_all()

    def wait(self, condition: Callable[[], object], what: str) -> None:
        with self.lock:
            if not self.lock.wait_for(condition, DEADLINE):
                raise AssertionError(f"echo server: {what} not within {DEADLINE}s")

    def close(self) -> None:
        self.closing = True
        socket.create_connection(self.address, timeout=DEADLINE).close()  # closing the listener wakes no accept()
        self.acceptor.join(DEADLINE)
        self.listener.close()
        with self.lock:
            for conn in self.connections:
                try:
                    conn.shutdown(socket.SHUT_RDWR)  # wakes a recv() still blocked on a live connection
                except OSError:
                    pass
            threads = list(self.threads)
        for thread in threads:
            thread.join(DEADLINE)
        assert not self.acceptor.is_alive() and not any(t.is_alive() for t in threads)


@pytest.fixture
def echo() -> Iterator[EchoServer]:
    server = EchoServer()
    yield server
    server.close()


@pytest.fixture
def proxy(echo: EchoServer) -> Iterator[FaultProxy]:
    with FaultProxy(echo.address, seed=7) as started:
        yield started


@pytest.fixture
def connect(proxy: FaultProxy) -> Iterator[Connect]:
    """Opens client sockets to the proxy; closes them after the test."""
    opened: list[socket.socket] = []

    def open_one() -> socket.socket:
        sock = socket.create_connection(proxy.address, timeout=DEADLINE)
        opened.append(sock)
        return sock

    yield open_one
    for sock in opened:
        sock.close()


def recv_exactly(sock: socket.socket, n: int) -> bytes:
    """Read ``n`` bytes, failing if the stream ends first or they do not come within the deadline."""
    sock.settimeout(DEADLINE)
    data = bytearray()
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise AssertionError(f"stream ended after {len(data)} of {n} bytes: {bytes(data)!r}")
        data += chunk
    return bytes(data)


def assert_quiet(sock: socket.socket) -> None:
    """Nothing arrives on ``sock`` for a short while."""
    sock.settimeout(QUIET)
    with pytest.raises(TimeoutError):
        sock.recv(1)


def ended(sock: socket.socket) -> str:
    """How the proxy ended ``sock``'s connection: ``"reset"`` or ``"eof"``."""
    sock.settimeout(DEADLINE)
    try:
        while sock.recv(65536):
            pass
    except ConnectionResetError:
        return "reset"
    return "eof"


def ended_at_once(address: tuple[str, int]) -> str:
    """How a connection the proxy ends without forwarding it ended: ``"reset"`` or ``"eof"``."""
    try:
        sock = socket.create_connection(address, timeout=DEADLINE)
    except ConnectionResetError:  # a reset quick enough to beat connect() itself
        return "reset"
    with sock:
        return ended(sock)


def exchange(sock: socket.socket, chunk: bytes) -> bytes:
    """Send one chunk and read back as many bytes as came back for it (echo, no length change expected)."""
    sock.sendall(chunk)
    return recv_exactly(sock, len(chunk))


# -- plain forwarding ---------------------------------------------------------------------


def test_bytes_pass_unchanged_both_ways(proxy: FaultProxy, echo: EchoServer, connect: Connect) -> None:
    payload = bytes(range(256)) * 4096  # 1 MiB, many reads
    sock = connect()
    sender = threading.Thread(target=sock.sendall, args=(payload,))
    sender.start()
    assert recv_exactly(sock, len(payload)) == payload
    sender.join(DEADLINE)
    assert bytes(echo.received[0]) == payload
    stats = proxy.stats
    assert (stats.connections, stats.open) == (1, 1)
    assert stats.bytes_to_target == stats.bytes_to_client == len(payload)
    assert stats.faults == {}


def test_half_close_passes_through(proxy: FaultProxy, echo: EchoServer, connect: Connect) -> None:
    sock = connect()
    sock.sendall(b"last words")
    sock.shutdown(socket.SHUT_WR)
    assert recv_exactly(sock, 10) == b"last words"
    assert ended(sock) == "eof"
    echo.wait(lambda: echo.endings == ["eof"], "a clean end")
    wait_until(lambda: proxy.stats.open == 0, DEADLINE)


def test_several_connections_are_independent(proxy: FaultProxy, echo: EchoServer, connect: Connect) -> None:
    socks = [connect() for _ in range(5)]
    proxy.wait_for_connections(5, DEADLINE)
    for i, sock in enumerate(socks):
        sock.sendall(f"connection {i}".encode())
    for i, sock in enumerate(socks):
        assert recv_exactly(sock, len(f"connection {i}")) == f"connection {i}".encode()
    assert proxy.stats.open == 5


def test_wait_for_connections_times_out(proxy: FaultProxy, connect: Connect) -> None:
    connect()
    proxy.wait_for_connections(1, DEADLINE)
    with pytest.raises(TimeoutError, match="1 of 2"):
        proxy.wait_for_connections(2, 0.05)


def test_unreachable_target_resets_the_client() -> None:
    with socket.create_server(("127.0.0.1", 0)) as closed:
        nowhere = closed.getsockname()[:2]
    with FaultProxy(nowhere) as proxy:
        assert ended_at_once(proxy.address) == "reset"
        assert proxy.stats.failed_dials == 1


# -- controls ------------------------------------------------------------------------------


def test_cut_resets_both_sides_of_every_connection(proxy: FaultProxy, echo: EchoServer, connect: Connect) -> None:
    socks = [connect() for _ in range(3)]
    for sock in socks:
        assert exchange(sock, b"ping") == b"ping"
    proxy.cut()
    assert [ended(sock) for sock in socks] == ["reset"] * 3
    echo.wait(lambda: len(echo.endings) == 3, "three ended connections")
    assert echo.endings == ["reset"] * 3
    assert proxy.stats.open == 0
    # The proxy still serves new connections.
    assert exchange(connect(), b"again") == b"again"


def test_refuse_accepts_and_resets_without_dialling(proxy: FaultProxy, echo: EchoServer, connect: Connect) -> None:
    proxy.refuse(True)
    assert ended_at_once(proxy.address) == "reset"
    proxy.wait_for_connections(1, DEADLINE)
    assert (proxy.stats.connections, proxy.stats.refused) == (1, 1)
    proxy.refuse(False)
    assert exchange(connect(), b"welcome") == b"welcome"
    assert len(echo.received) == 1  # the refused connection never reached the target


def test_pause_holds_bytes_in_order_until_resume(proxy: FaultProxy, echo: EchoServer, connect: Connect) -> None:
    sock = connect()
    assert exchange(sock, b"before") == b"before"
    proxy.pause()
    for part in (b"one,", b"two,", b"three"):
        sock.sendall(part)
    assert_quiet(sock)
    assert bytes(echo.received[0]) == b"before"  # nothing reached the target either
    proxy.resume()
    assert recv_exactly(sock, len(b"one,two,three")) == b"one,two,three"
    assert bytes(echo.received[0]) == b"beforeone,two,three"


def moved_past(proxy: FaultProxy, count: int) -> bool:
    return proxy.stats.bytes_to_target > count


def test_pause_and_resume_while_traffic_flows(proxy: FaultProxy, connect: Connect) -> None:
    payload = bytes(range(251)) * 8000  # about 2 MB, a prime period so that a lost or swapped chunk shows
    sock = connect()
    received = bytearray()

    def receive() -> None:
        received.extend(recv_exactly(sock, len(payload)))

    receiver = threading.Thread(target=receive)
    receiver.start()
    sender = threading.Thread(target=sock.sendall, args=(payload,))
    sender.start()
    for _ in range(20):
        proxy.pause()
        moved = proxy.stats.bytes_to_target
        proxy.resume()
        if moved == len(payload):
            break
        wait_until(partial(moved_past, proxy, moved), DEADLINE)
    sender.join(DEADLINE)
    receiver.join(DEADLINE)
    assert bytes(received) == payload


def test_set_faults_rejects_bad_arguments(proxy: FaultProxy) -> None:
    with pytest.raises(ValueError, match="corrupt"):
        proxy.set_faults(corrupt=1.5)
    with pytest.raises(ValueError, match="drop_connection_after_bytes"):
        proxy.set_faults(drop_connection_after_bytes=-1)
    with pytest.raises(ValueError, match="direction"):
        proxy.set_faults(direction="sideways")  # type: ignore[arg-type]


# -- faults --------------------------------------------------------------------------------


def test_corrupt_flips_bits_but_keeps_the_length(proxy: FaultProxy, echo: EchoServer, connect: Connect) -> None:
    proxy.set_faults(corrupt=1.0, direction="to_target")
    sock = connect()
    sent = b"x" * 100
    got = exchange(sock, sent)
    assert got != sent and len(got) == len(sent)
    assert 1 <= sum(a != b for a, b in zip(got, sent, strict=True)) <= 3
    assert bytes(echo.received[0]) == got  # corrupted on the way in; the way back (to_client) is clean
    assert proxy.stats.faults == {"corrupt": 1}


def test_direction_filter_spares_the_other_direction(proxy: FaultProxy, echo: EchoServer, connect: Connect) -> None:
    proxy.set_faults(corrupt=1.0, direction="to_client")
    sock = connect()
    got = exchange(sock, b"y" * 100)
    assert bytes(echo.received[0]) == b"y" * 100
    assert got != b"y" * 100


def test_duplicate_repeats_a_chunk(proxy: FaultProxy, echo: EchoServer, connect: Connect) -> None:
    proxy.set_faults(duplicate=1.0, direction="to_target")
    sock = connect()
    sock.sendall(b"hello")
    assert recv_exactly(sock, 10) == b"hellohello"
    assert proxy.stats.faults == {"duplicate": 1}
    assert proxy.stats.bytes_to_target == 10


def test_reorder_swaps_two_chunks(proxy: FaultProxy, echo: EchoServer, connect: Connect) -> None:
    proxy.set_faults(reorder=1.0, direction="to_target")
    sock = connect()
    sock.sendall(b"first.")
    # Read and held: what is sent next is a chunk of its own.
    wait_until(lambda: proxy.stats.faults.get("reorder") == 1, DEADLINE)
    assert_quiet(sock)
    sock.sendall(b"second.")
    assert recv_exactly(sock, 13) == b"second.first."
    # The overtaking chunk is never held itself; the one after is.
    sock.sendall(b"third.")
    wait_until(lambda: proxy.stats.faults.get("reorder") == 2, DEADLINE)
    sock.shutdown(socket.SHUT_WR)  # the end of the stream releases a held chunk
    assert recv_exactly(sock, 6) == b"third."
    assert bytes(echo.received[0]) == b"second.first.third."


def test_cut_fault_resets_instead_of_forwarding(proxy: FaultProxy, echo: EchoServer, connect: Connect) -> None:
    proxy.set_faults(cut=1.0, direction="to_target")
    sock = connect()
    sock.sendall(b"never delivered")
    assert ended(sock) == "reset"
    echo.wait(lambda: echo.endings == ["reset"], "a reset")
    assert bytes(echo.received[0]) == b""
    assert proxy.stats.faults == {"cut": 1}


def test_drop_after_bytes_truncates_the_stream(proxy: FaultProxy, echo: EchoServer, connect: Connect) -> None:
    proxy.set_faults(drop_connection_after_bytes=8, direction="to_target")
    sock = connect()
    assert exchange(sock, b"12345") == b"12345"
    sock.sendall(b"67890")
    assert ended(sock) == "eof"  # a FIN, not a reset; the echo of "678" came too late to pass
    echo.wait(lambda: len(echo.endings) == 1, "the end of the connection")
    assert bytes(echo.received[0]) == b"12345678"
    assert proxy.stats.faults == {"drop": 1}


def fault_pattern(target: tuple[str, int], seed: int) -> list[bool]:
    """Which of 40 one-chunk exchanges a proxy with ``seed`` and corrupt=0.5 corrupted."""
    with FaultProxy(target, seed=seed) as proxy, socket.create_connection(proxy.address, timeout=DEADLINE) as sock:
        proxy.set_faults(corrupt=0.5, direction="to_target")
        pattern = [exchange(sock, b"z" * 64) != b"z" * 64 for _ in range(40)]
        assert proxy.stats.faults.get("corrupt", 0) == sum(pattern)
        return pattern


def test_faults_are_deterministic_for_a_seed(echo: EchoServer) -> None:
    first = fault_pattern(echo.address, seed=1)
    assert 0 < sum(first) < len(first)
    assert fault_pattern(echo.address, seed=1) == first
    assert fault_pattern(echo.address, seed=2) != first


def test_stop_is_prompt_and_leaves_nothing_behind(echo: EchoServer) -> None:
    proxy = FaultProxy(echo.address).start()
    address = proxy.address
    socks = [socket.create_connection(address, timeout=DEADLINE) for _ in range(3)]
    proxy.wait_for_connections(3, DEADLINE)
    proxy.pause()  # a stalled proxy stops as promptly
    socks[0].sendall(b"held")
    threads = {t.name for t in threading.enumerate()}
    assert "faultproxy" in threads
    started = time.monotonic()
    proxy.stop()
    assert time.monotonic() - started < 2.0
    assert "faultproxy" not in {t.name for t in threading.enumerate()}
    assert [ended(sock) for sock in socks] == ["reset"] * 3
    for sock in socks:
        sock.close()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(address, timeout=DEADLINE)
    echo.wait(lambda: len(echo.endings) == 3, "three ended connections")
    proxy.stop()  # idempotent


# -- TLS -----------------------------------------------------------------------------------


def self_signed(directory: Path) -> tuple[Path, Path]:
    """A throwaway key and self-signed certificate for 127.0.0.1; (certificate, key) PEM files."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "faultproxy test")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


@pytest.fixture
def tls_contexts(tmp_path: Path) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """(server, client) contexts around a throwaway self-signed certificate."""
    cert, key = self_signed(tmp_path)
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(cert, key)
    return server_context, ssl.create_default_context(cafile=str(cert))


@pytest.fixture
def tls_echo(tls_contexts: tuple[ssl.SSLContext, ssl.SSLContext]) -> Iterator[EchoServer]:
    server = EchoServer(tls_contexts[0])
    yield server
    server.close()


SECRET = b"secret " * 500


@pytest.mark.parametrize("kind", ["corrupt", "duplicate", "reorder"])
def test_a_faulty_tls_stream_fails_instead_of_delivering(kind: FaultKind, tls_echo: EchoServer,
                                                         tls_contexts: tuple[ssl.SSLContext, ssl.SSLContext]) -> None:
    with FaultProxy(tls_echo.address, seed=3) as proxy:
        raw = socket.create_connection(proxy.address, timeout=DEADLINE)
        with tls_contexts[1].wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            assert exchange(tls, b"clean") == b"clean"  # the handshake and a record pass a clean proxy
            proxy.set_faults(**{kind: 1.0}, direction="to_target")  # type: ignore[arg-type]
            tls.sendall(SECRET)
            wait_until(lambda: proxy.stats.faults.get(kind, 0) >= 1, DEADLINE)
            if kind == "reorder":  # the held record goes out behind the next one
                tls.sendall(b"overtaking")
            echoed = bytearray()
            with pytest.raises((ssl.SSLError, ConnectionResetError)):
                while chunk := tls.recv(65536):
                    echoed += chunk
        tls_echo.wait(lambda: len(tls_echo.endings) == 1, "the TLS connection to end")
        assert tls_echo.endings[0].startswith("ssl: ")  # the record layer caught it...
        # ...and no altered byte got through. A duplicate's first copy is the genuine record: it may pass.
        delivered = bytes(tls_echo.received[0])
        assert delivered == b"clean" or (kind == "duplicate" and delivered == b"clean" + SECRET)
        assert SECRET.startswith(bytes(echoed))


def test_a_corrupted_tls_handshake_fails(tls_echo: EchoServer,
                                         tls_contexts: tuple[ssl.SSLContext, ssl.SSLContext]) -> None:
    with FaultProxy(tls_echo.address, seed=1) as proxy:
        proxy.set_faults(corrupt=1.0)
        raw = socket.create_connection(proxy.address, timeout=DEADLINE)
        with pytest.raises(ssl.SSLError), tls_contexts[1].wrap_socket(raw, server_hostname="127.0.0.1"):
            pass
        raw.close()
        tls_echo.wait(lambda: len(tls_echo.endings) == 1, "the TLS connection to end")
        assert tls_echo.received == [bytearray()]
