"""Endpoint certificates (``broker.ddl.certificates``) and the proof that mutual TLS with
them admits exactly the trusted peers: real TLS handshakes on loopback, one connection
each, the server in a thread.

A trusted pair connects both ways and each side learns the other's certificate; an
unknown certificate, one that only shares a trusted one's name, an expired one, one not
yet valid, one issued by a trusted peer's key, a client without a certificate and plain
TCP are all refused.
"""

from __future__ import annotations

import hashlib
import socket
import ssl
import threading
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from broker.ddl import certificates
from broker.ddl.certificates import create_certificate, tls_contexts
from broker.errors import BrokerError

TIMEOUT = 10.0


@dataclass(frozen=True)
class Party:
    """An endpoint's certificate and key, PEM."""

    certificate: bytes
    key: bytes

    def contexts(self, *trusted: Party) -> tuple[ssl.SSLContext, ssl.SSLContext]:
        return tls_contexts(self.certificate, self.key, [peer.certificate for peer in trusted])


def party(name: str, **options: object) -> Party:
    return Party(*create_certificate(name, **options))  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def alice() -> Party:
    return party("InstInitiatorEndpoint")


@pytest.fixture(scope="module")
def bob() -> Party:
    return party("InstTargetEndpoint")


@dataclass
class Outcome:
    """What each side of one connection saw: None if it exchanged its message, else why not."""

    server: str | None
    client: str | None
    server_saw: bytes | None = None  # the client's certificate (DER) as the server got it
    client_saw: bytes | None = None
    version: str | None = None

    @property
    def connected(self) -> bool:
        return self.server is None and self.client is None


def connect(server_context: ssl.SSLContext, client_context: ssl.SSLContext | None) -> Outcome:
    """One connection on loopback: the client says ping, the server answers pong.
    ``client_context`` None is plain TCP."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(TIMEOUT)
    outcome = Outcome(server="no connection", client="not run")

    def serve() -> None:
        try:
            raw, _ = listener.accept()
            raw.settimeout(TIMEOUT)
            with server_context.wrap_socket(raw, server_side=True) as tls:
                outcome.server_saw = tls.getpeercert(binary_form=True)
                if tls.recv(4) != b"ping":
                    raise ConnectionError("no ping")
                tls.sendall(b"pong")
            outcome.server = None
        except (OSError, ConnectionError) as exc:
            outcome.server = f"{type(exc).__name__}: {exc}"

    thread = threading.Thread(target=serve)
    thread.start()
    try:
        raw = socket.create_connection(listener.getsockname(), timeout=TIMEOUT)
        if client_context is None:
            with raw:
                raw.sendall(b"ping\r\n")
                outcome.client = "plain TCP" if raw.recv(4) != b"pong" else None
        else:
            with client_context.wrap_socket(raw) as tls:
                outcome.client_saw = tls.getpeercert(binary_form=True)
                outcome.version = tls.version()
                tls.sendall(b"ping")
                answer = tls.recv(4)  # TLS 1.3: a refused client certificate shows here
                outcome.client = None if answer == b"pong" else f"answer {answer!r}"
    except OSError as exc:
        outcome.client = f"{type(exc).__name__}: {exc}"
    finally:
        thread.join(TIMEOUT * 2)
        listener.close()
    assert not thread.is_alive()
    return outcome


def der(pem: bytes) -> bytes:
    return x509.load_pem_x509_certificate(pem).public_bytes(serialization.Encoding.DER)


# -- the TLS proofs ----------------------------------------------------------------------


def test_a_trusted_pair_connects_both_ways_and_each_side_knows_the_other(alice: Party, bob: Party) -> None:
    alice_server, alice_client = alice.contexts(bob)
    bob_server, bob_client = bob.contexts(alice)
    for server, client, (dialer, acceptor) in ((alice_server, bob_client, (bob, alice)),
                                               (bob_server, alice_client, (alice, bob))):
        outcome = connect(server, client)
        assert outcome.connected, outcome
        assert outcome.server_saw == der(dialer.certificate)
        assert outcome.client_saw == der(acceptor.certificate)
        assert outcome.version in ("TLSv1.2", "TLSv1.3")
        # What the transport pins and names a peer by, from what the handshake gave it:
        assert hashlib.sha256(outcome.server_saw).hexdigest() == certificates.thumbprint(dialer.certificate)


def test_openssls_strict_checking_takes_the_certificates_too(alice: Party, bob: Party) -> None:
    server, _ = alice.contexts(bob)
    _, client = bob.contexts(alice)
    for context in (server, client):
        context.verify_flags |= ssl.VERIFY_X509_STRICT
    assert connect(server, client).connected


def test_tls_1_2_is_the_least_and_is_taken(alice: Party, bob: Party) -> None:
    server, _ = alice.contexts(bob)
    _, client = bob.contexts(alice)
    assert server.minimum_version == client.minimum_version == ssl.TLSVersion.TLSv1_2
    client.maximum_version = ssl.TLSVersion.TLSv1_2
    outcome = connect(server, client)
    assert outcome.connected and outcome.version == "TLSv1.2", outcome


def test_an_unknown_certificate_is_refused_either_way(alice: Party, bob: Party) -> None:
    stranger = party("Stranger")
    alice_server, alice_client = alice.contexts(bob)
    stranger_server, stranger_client = stranger.contexts(alice)  # it trusts alice; alice does not trust it
    dialing_in = connect(alice_server, stranger_client)
    assert dialing_in.server is not None and "CERTIFICATE_VERIFY_FAILED" in dialing_in.server, dialing_in
    assert dialing_in.server_saw is None
    answering = connect(stranger_server, alice_client)
    assert answering.client is not None, answering
    assert "certificate verify failed" in answering.client


def test_a_certificate_that_only_shares_a_trusted_name_is_refused(alice: Party, bob: Party) -> None:
    impostor = party("InstTargetEndpoint")  # bob's name, another key
    alice_server, alice_client = alice.contexts(bob)
    impostor_server, impostor_client = impostor.contexts(alice)
    assert "CERTIFICATE_VERIFY_FAILED" in str(connect(alice_server, impostor_client).server)
    assert "CERTIFICATE_VERIFY_FAILED" in str(connect(impostor_server, alice_client).client)


def test_an_expired_certificate_is_refused_even_when_trusted(alice: Party) -> None:
    expired = party("Expired", days=1, start_date=datetime.now(UTC) - timedelta(days=10))
    assert x509.load_pem_x509_certificate(expired.certificate).not_valid_after_utc < datetime.now(UTC)
    alice_server, alice_client = alice.contexts(expired)
    expired_server, expired_client = expired.contexts(alice)
    dialing_in = connect(alice_server, expired_client)
    assert dialing_in.server is not None and "expired" in dialing_in.server, dialing_in
    answering = connect(expired_server, alice_client)
    assert answering.client is not None and "expired" in answering.client, answering


def test_a_certificate_not_yet_valid_is_refused(alice: Party) -> None:
    early = party("Early", start_date=datetime.now(UTC) + timedelta(days=2))
    alice_server, _ = alice.contexts(early)
    _, early_client = early.contexts(alice)
    outcome = connect(alice_server, early_client)
    assert outcome.server is not None and "not yet valid" in outcome.server, outcome


def signed(subject: str, *, by: Party | None = None, ca: bool | None = None) -> Party:
    """A new key and a certificate for ``subject`` signed by ``by``'s key (self-signed
    without ``by``), with a BasicConstraints CA flag when ``ca`` is given."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    now = datetime.now(UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name if by is None else x509.load_pem_x509_certificate(by.certificate).subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=1))
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH, ExtendedKeyUsageOID.SERVER_AUTH]),
                       critical=False)
    )
    if ca is not None:
        builder = builder.add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    signer = key if by is None else serialization.load_pem_private_key(by.key, password=None)
    certificate = builder.sign(signer, hashes.SHA256())  # type: ignore[arg-type]
    return Party(certificate.public_bytes(serialization.Encoding.PEM), certificates.canonical_key_pem(key))


def test_a_trusted_peer_cannot_vouch_for_another_certificate(alice: Party, bob: Party) -> None:
    """Certificates are not CAs (BasicConstraints CA:FALSE): one that bob's key signed is
    not bob, though alice trusts bob. Were bob's certificate a CA, it would pass."""
    mallory = signed("Mallory", by=bob)
    alice_server, _ = alice.contexts(bob)
    _, mallory_client = Party(mallory.certificate + bob.certificate, mallory.key).contexts(alice)
    outcome = connect(alice_server, mallory_client)
    assert outcome.server is not None and "invalid CA certificate" in outcome.server, outcome

    authority = signed("Authority", ca=True)  # the same trick with a trusted CA passes
    vouched = signed("Mallory", by=authority)
    trusting_server, _ = alice.contexts(authority)
    _, vouched_client = Party(vouched.certificate + authority.certificate, vouched.key).contexts(alice)
    assert connect(trusting_server, vouched_client).connected


def test_a_client_without_a_certificate_is_refused(alice: Party, bob: Party) -> None:
    alice_server, _ = alice.contexts(bob)
    anonymous = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    anonymous.check_hostname = False
    anonymous.load_verify_locations(cadata=alice.certificate.decode())
    outcome = connect(alice_server, anonymous)
    assert outcome.server is not None and "PEER_DID_NOT_RETURN_A_CERTIFICATE" in outcome.server, outcome
    assert outcome.server_saw is None


def test_plain_tcp_is_refused(alice: Party, bob: Party) -> None:
    alice_server, _ = alice.contexts(bob)
    outcome = connect(alice_server, None)
    assert outcome.server is not None and "WRONG_VERSION_NUMBER" in outcome.server, outcome
    assert outcome.client is not None  # no pong


def test_an_endpoint_that_trusts_no_one_admits_no_one(alice: Party, bob: Party) -> None:
    lonely_server, lonely_client = alice.contexts()
    bob_server, bob_client = bob.contexts(alice)
    assert "CERTIFICATE_VERIFY_FAILED" in str(connect(lonely_server, bob_client).server)
    assert "CERTIFICATE_VERIFY_FAILED" in str(connect(bob_server, lonely_client).client)


def test_a_key_pair_tls_cannot_use_is_15297(alice: Party, bob: Party) -> None:
    with pytest.raises(BrokerError) as error:
        tls_contexts(alice.certificate, bob.key, [bob.certificate])
    assert error.value.number == 15297


# -- making and reading certificates -----------------------------------------------------


def test_a_new_certificate_names_its_subject_and_is_fit_for_pinning() -> None:
    before = datetime.now(UTC)
    pem, key_pem = create_certificate("//TgtDB/Endpoint", days=30)
    certificate = x509.load_pem_x509_certificate(pem)
    assert certificates.principal_of(pem) == "//TgtDB/Endpoint"
    assert certificate.issuer == certificate.subject
    assert certificate.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is False
    usage = certificate.extensions.get_extension_for_class(x509.KeyUsage).value
    assert usage.digital_signature and not usage.key_cert_sign
    purposes = certificate.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert set(purposes) == {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH}
    assert certificate.not_valid_before_utc <= before
    assert timedelta(days=29) < certificate.not_valid_after_utc - before <= timedelta(days=30)
    assert b"ENCRYPTED" not in key_pem and key_pem.startswith(b"-----BEGIN PRIVATE KEY-----")
    certificates.check_key_pair(pem, key_pem)


@pytest.mark.parametrize(("arguments", "number"), [
    ({"name": ""}, 1038), ({"name": "x" * 129}, 103), ({"name": 5}, 206),
    ({"name": "n", "days": 0}, 59002), ({"name": "n", "days": "1"}, 206), ({"name": "n", "start_date": "now"}, 206),
    ({"name": "x" * 65}, 103),  # X.509 bounds a common name to 64 characters
    # moments a certificate cannot hold: before 1950, past 9999 (the default expiry too)
    ({"name": "n", "start_date": datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=5)))}, 59002),
    ({"name": "n", "start_date": datetime(1949, 1, 1), "expiry_date": datetime(1950, 6, 1)}, 59002),
    ({"name": "n", "start_date": datetime.max}, 59002),
    ({"name": "n", "expiry_date": datetime.max.replace(tzinfo=timezone(timedelta(hours=-5)))}, 59002),
])
def test_create_certificate_checks_its_arguments(arguments: dict[str, object], number: int) -> None:
    with pytest.raises(BrokerError) as error:
        create_certificate(**arguments)  # type: ignore[arg-type]
    assert error.value.number == number


def test_read_pem_takes_content_or_a_file(tmp_path: Path, alice: Party) -> None:
    path = tmp_path / "alice.crt"
    path.write_bytes(alice.certificate)
    assert certificates.read_pem(alice.certificate) == alice.certificate
    assert certificates.read_pem(alice.certificate.decode()) == alice.certificate
    assert certificates.read_pem(str(path)) == alice.certificate
    assert certificates.read_pem(path) == alice.certificate


@pytest.mark.parametrize("source", ["missing.crt", "folder"])
def test_a_file_that_cannot_be_read_is_15208_naming_it(tmp_path: Path, source: str) -> None:
    (tmp_path / "folder").mkdir()
    for given in (tmp_path / source, str(tmp_path / source)):
        with pytest.raises(BrokerError) as error:
            certificates.read_pem(given)
        assert error.value.number == 15208
        assert source in error.value.message and "not valid or does not exist" in error.value.message


@pytest.mark.parametrize(("source", "number"), [(42, 206), (None, 206), ("a\x00b", 102), ("", 1038)])
def test_read_pem_refuses_what_is_neither_content_nor_a_file_name(source: object, number: int) -> None:
    with pytest.raises(BrokerError) as error:
        certificates.read_pem(source)  # type: ignore[arg-type]
    assert error.value.number == number


def test_load_certificate_takes_exactly_one_certificate(alice: Party, bob: Party) -> None:
    assert certificates.load_certificate(alice.certificate).subject == x509.load_pem_x509_certificate(
        alice.certificate).subject
    for bad in (b"", b"not a certificate", alice.key, alice.certificate + bob.certificate,
                alice.certificate.replace(b"M", b"N", 3)):
        with pytest.raises(BrokerError) as error:
            certificates.load_certificate(bad)
        assert error.value.number == 15208, bad


def test_a_key_that_is_not_the_certificates_is_15297(alice: Party, bob: Party) -> None:
    with pytest.raises(BrokerError) as error:
        certificates.check_key_pair(alice.certificate, bob.key)
    assert error.value.number == 15297 and "InstInitiatorEndpoint" in error.value.message
    with pytest.raises(BrokerError) as garbage:
        certificates.check_key_pair(alice.certificate, b"-----BEGIN PRIVATE KEY-----\nxx\n-----END PRIVATE KEY-----\n")
    assert garbage.value.number == 15208


def test_the_thumbprint_is_the_sha256_of_the_der(alice: Party, bob: Party) -> None:
    print_ = certificates.thumbprint(alice.certificate)
    assert print_ == hashlib.sha256(der(alice.certificate)).hexdigest() and len(print_) == 64
    assert print_ != certificates.thumbprint(bob.certificate)
