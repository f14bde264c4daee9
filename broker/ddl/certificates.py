"""Certificates for the Service Broker endpoint (AUTHENTICATION = CERTIFICATE), and the
TLS contexts that authenticate with them.

SQL Server trusts a peer's endpoint when the peer proves it holds the private key of a
certificate installed locally (no chain to a certificate authority). Here the same holds
through mutual TLS: each side's trust store holds exactly the certificates it was given
(``trusted_peers``), pinned. :func:`create_certificate` makes what such pinning needs: a
self-signed certificate that is not a CA (``BasicConstraints CA:FALSE``, so a trusted
peer's key cannot vouch for a third certificate), with a key usage of digital signatures
and the extended key usages of both a TLS server and a TLS client (every endpoint both
accepts and dials). The TLS proofs are in ``tests/test_certificates.py``.

Nothing here touches a database: the endpoint DDL (``broker.ddl.endpoints``) and the
runtime's transport use these functions.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import ssl
import stat
import tempfile
from collections.abc import Iterable
from contextlib import suppress
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from broker import arguments
from broker.errors import MISSING_OPTION, OUT_OF_RANGE, BrokerError, InvalidArgumentError

# What a PEM is given as: its content (bytes, or a str holding "-----BEGIN") or a file path.
PemSource = str | bytes | os.PathLike[str]
FilePath = str | os.PathLike[str]

INVALID_FILE = 15208
INVALID_KEY_DATA = 15297
_INVALID_FILE_TEXT = ("The certificate, asymmetric key, or private key file is not valid or does not exist; "
                      "or you do not have permissions for it.")
_INVALID_DATA_TEXT = "The certificate, asymmetric key, or private key data is invalid."
LONGEST_VALIDITY_DAYS = 36_525  # a hundred years
# The most read from a certificate or key file. One certificate or key is a few KB, and a
# PEM bundle of trusted peers some tens of KB; the cap keeps a wrong path (a device, a
# huge file) from exhausting memory, with room to spare for any real file.
LARGEST_FILE = 1 << 20  # 1 MiB
# A new certificate is valid from a few minutes back, so that a peer whose clock runs a
# little behind accepts it at once.
_CLOCK_SKEW = timedelta(minutes=5)
# The moments an X.509 validity can name (UTCTime from 1950, GeneralizedTime to 9999).
_FIRST_VALID = datetime(1950, 1, 1, tzinfo=UTC)
_LAST_VALID = datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)


def create_certificate(name: str, *, days: int = 365, start_date: datetime | None = None,
                       expiry_date: datetime | None = None) -> tuple[bytes, bytes]:
    """A new key pair and a self-signed certificate whose subject is ``CN=name``:
    (certificate PEM, private key PEM, unencrypted PKCS#8).

    CREATE CERTIFICATE ... WITH SUBJECT, START_DATE, EXPIRY_DATE: valid from ``start_date``
    (default: now) until ``expiry_date`` (default: ``days`` days later; 15297 if it is
    not after the start). The key is EC P-256, which TLS 1.2 and 1.3 take.
    """
    # X.509 bounds a common name to 64 characters (SQL Server on Linux enforces it too).
    name = arguments.text(name, "certificate subject", longest=64, empty=False)
    days = arguments.integer(days, "the certificate's days of validity", minimum=1, maximum=LONGEST_VALIDITY_DAYS)
    start = datetime.now(UTC) - _CLOCK_SKEW if start_date is None else _validity_moment("START_DATE", start_date)
    if expiry_date is not None:
        end = _validity_moment("EXPIRY_DATE", expiry_date)
    elif start <= _LAST_VALID - timedelta(days=days):
        end = start + timedelta(days=days)
    else:
        raise InvalidArgumentError(OUT_OF_RANGE, f"The EXPIRY_DATE, {days} days after the START_DATE, would lie past "
                                                 f"{_LAST_VALID:%Y-%m-%d}: give an EXPIRY_DATE.")
    if end <= start:
        raise BrokerError(INVALID_KEY_DATA, f"{_INVALID_DATA_TEXT} The EXPIRY_DATE ({end:%Y-%m-%d %H:%M:%S}) must "
                                            f"come after the START_DATE ({start:%Y-%m-%d %H:%M:%S}).")
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    key_id = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
    certificate = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                                     data_encipherment=False, key_agreement=False, key_cert_sign=False,
                                     crl_sign=False, encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                       critical=False)
        .add_extension(key_id, critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(key_id), critical=False)
        .sign(key, hashes.SHA256())
    )
    return canonical_pem(certificate), canonical_key_pem(key)


def certificate_and_key(*, subject: str | None, certificate: PemSource | None, private_key: PemSource | None,
                        private_key_password: str | None, start_date: datetime | None,
                        expiry_date: datetime | None) -> tuple[bytes, bytes | None]:
    """CREATE CERTIFICATE's certificate and private key (PEM; the key unencrypted, or None
    when a certificate comes without one): a new pair WITH SUBJECT, or one FROM FILE
    (PEM or DER, content or a path) WITH PRIVATE KEY (FILE, DECRYPTION BY PASSWORD).
    A key that is not the certificate's is 15297; files that cannot be read, 15208."""
    if (subject is None) == (certificate is None):
        raise InvalidArgumentError(MISSING_OPTION, statement="CREATE CERTIFICATE",
                                   names="SUBJECT (a new certificate) or FROM FILE (an imported one), not both")
    if certificate is None:
        if private_key is not None:
            raise _invalid_file("a new certificate makes its own private key: give no private key file")
        return create_certificate(arguments.text(subject, "SUBJECT"), start_date=start_date, expiry_date=expiry_date)
    pem = certificate_pem(read_pem(certificate, "certificate"))
    if private_key is None:
        return pem, None
    password = None if private_key_password is None else arguments.text(private_key_password, "DECRYPTION BY PASSWORD")
    key = canonical_key_pem(load_private_key(read_pem(private_key, "private key"), password))
    check_key_pair(pem, key)
    return pem, key


def write_new_file(path: FilePath, data: bytes, *, private: bool = False) -> None:
    """BACKUP CERTIFICATE's files: a new file (never one that exists: 15240), mode 0600
    for a private key. A file that cannot be written whole is removed (it is this call's)."""
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600 if private else 0o644)
    except (OSError, ValueError) as exc:  # ValueError: a NUL in the name
        raise _cannot_write(path, getattr(exc, "strerror", None) or str(exc)) from None
    try:
        with os.fdopen(descriptor, "wb") as out:
            out.write(data)
    except OSError as exc:
        _remove_quietly(path)  # O_EXCL made it ours: a partial file is no backup
        raise _cannot_write(path, exc.strerror or str(exc)) from None


def write_backup(certificate_file: FilePath, certificate_der: bytes,
                 private_key: tuple[FilePath, bytes] | None = None) -> None:
    """BACKUP CERTIFICATE, all or nothing: the certificate's file and, WITH PRIVATE KEY,
    the key's (its file and its encrypted PEM, mode 0600), both new.

    Both destinations are checked before either is written (15240 for one that exists,
    whose folder does not, or that names the other). Should the key's file still fail,
    the certificate's file, made by this call, is removed: a retry then finds no file in
    its way. A file that existed before is never written or removed.
    """
    destinations = [certificate_file] if private_key is None else [certificate_file, private_key[0]]
    for path in destinations:
        _refuse_destination(path)
    if len(destinations) == 2 and os.path.abspath(destinations[0]) == os.path.abspath(destinations[1]):
        raise _cannot_write(destinations[1], "the certificate and its private key cannot share a file")
    write_new_file(certificate_file, certificate_der)
    if private_key is None:
        return
    try:
        write_new_file(*private_key, private=True)
    except BaseException:
        _remove_quietly(certificate_file)
        raise


def _refuse_destination(path: FilePath) -> None:
    """15240 for a BACKUP destination that is taken (a file, a folder, even a dangling
    link) or whose folder does not exist: found before anything is written."""
    name = os.fspath(path)
    if "\0" in name:
        raise _cannot_write(path, "the file name holds a NUL character")
    if os.path.lexists(name):
        raise _cannot_write(path, "the file exists")
    if not os.path.isdir(os.path.dirname(os.path.abspath(name))):
        raise _cannot_write(path, "its folder does not exist")


def _cannot_write(path: FilePath, reason: str) -> BrokerError:
    return BrokerError(15240, f"Cannot write into file '{os.fspath(path)}'. Verify that you have write "
                              "permissions, that the file path is valid, and that the file does not already "
                              f"exist. ({reason})")


def _remove_quietly(path: FilePath) -> None:
    """Remove a file this module created; failing to is not the error to report."""
    with suppress(OSError):
        os.unlink(path)


def read_pem(value: PemSource, what: str = "certificate") -> bytes:
    """PEM content from ``value``: ``bytes`` are the content, a ``str`` holding
    ``-----BEGIN`` is the content, any other ``str`` or a path-like names a file.

    A file that is missing or cannot be read, is not a regular file, or is larger than
    :data:`LARGEST_FILE` is 15208. Nothing is parsed here.
    """
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, str):
        if "-----BEGIN" in value:
            return arguments.text(value, what).encode("utf-8")
        path: str | os.PathLike[str] = arguments.text(value, f"the {what} file name", empty=False)
    elif isinstance(value, os.PathLike):
        path = value
    else:
        raise arguments.wrong_type(what, value, "PEM content (bytes or str) or a file path")
    try:
        return _read_regular_file(path, what)
    except (OSError, ValueError) as exc:  # ValueError: a NUL in the name
        raise _invalid_file(f"{what} file {os.fspath(path)!r}: {getattr(exc, 'strerror', None) or exc}") from None


def _read_regular_file(path: FilePath, what: str) -> bytes:
    """The content of the regular file ``path``, at most :data:`LARGEST_FILE` bytes
    (15208 for anything else). Never blocks: a FIFO, a device or a folder is refused
    before it is opened."""
    if not stat.S_ISREG(os.stat(path).st_mode):
        raise _invalid_file(f"{what} file {os.fspath(path)!r}: not a regular file")
    # O_NONBLOCK and the fstat guard against the path turning into a FIFO after the stat.
    with os.fdopen(os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY), "rb") as file:
        if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
            raise _invalid_file(f"{what} file {os.fspath(path)!r}: not a regular file")
        data = file.read(LARGEST_FILE + 1)  # one byte more tells a file over the cap
    if len(data) > LARGEST_FILE:
        raise _invalid_file(f"{what} file {os.fspath(path)!r}: larger than {LARGEST_FILE:,} bytes, "
                            "more than any certificate or key")
    return data


def load_certificate(pem: bytes, what: str = "certificate") -> x509.Certificate:
    """The one certificate that ``pem`` holds (15208 for anything else)."""
    certificates = load_certificates(pem, what)
    if len(certificates) != 1:
        raise _invalid_file(f"the {what} holds {len(certificates)} certificates, not one")
    return certificates[0]


def load_certificates(pem: bytes, what: str = "certificate") -> list[x509.Certificate]:
    """Every certificate of a PEM text (one or more; 15208 if there is none or one is bad)."""
    try:
        return x509.load_pem_x509_certificates(pem)
    except (ValueError, TypeError) as exc:
        raise _invalid_file(f"the {what} is not PEM certificate text: {_first_line(exc)}") from None


def load_private_key(pem: bytes, password: str | None = None) -> PrivateKeyTypes:
    """The private key that ``pem`` holds, unencrypted or encrypted with ``password``
    (15208 otherwise, and for a wrong password)."""
    try:
        return serialization.load_pem_private_key(pem, password=None if password is None else password.encode())
    except (ValueError, TypeError, NotImplementedError) as exc:
        kind = "unencrypted PEM key text" if password is None else "PEM key text this password decrypts"
        raise _invalid_file(f"the private key is not {kind}: {_first_line(exc)}") from None


def encrypted_key_pem(private_key_pem: bytes, password: str) -> bytes:
    """A private key as PKCS#8 PEM encrypted with ``password`` (BACKUP CERTIFICATE ...
    WITH PRIVATE KEY (ENCRYPTION BY PASSWORD = ...))."""
    encryption = serialization.BestAvailableEncryption(password.encode())
    return load_private_key(private_key_pem).private_bytes(serialization.Encoding.PEM,
                                                           serialization.PrivateFormat.PKCS8, encryption)


def certificate_pem(data: bytes, what: str = "certificate") -> bytes:
    """One certificate, PEM or DER (SQL Server's .cer files), as canonical PEM (15208
    for anything else)."""
    if b"-----BEGIN" in data:
        return canonical_pem(load_certificate(data, what))
    try:
        return canonical_pem(x509.load_der_x509_certificate(data))
    except ValueError as exc:
        raise _invalid_file(f"the {what} is neither PEM nor DER certificate data: {_first_line(exc)}") from None


def der_of(pem: bytes) -> bytes:
    """A certificate's DER form: what BACKUP CERTIFICATE writes, as SQL Server does."""
    return load_certificate(pem).public_bytes(serialization.Encoding.DER)


@dataclass(frozen=True, slots=True)
class Facts:
    """What sys.certificates shows of a certificate."""

    subject: str
    issuer: str
    serial_number: str  # hex
    sha1: bytes  # SQL Server's thumbprint: the SHA-1 of the DER form
    start: datetime
    expiry: datetime
    key_length: int


def facts_of(pem: bytes) -> Facts:
    certificate = load_certificate(pem)
    der = certificate.public_bytes(serialization.Encoding.DER)
    key = certificate.public_key()
    return Facts(subject=principal_of(pem), issuer=_common_name(certificate.issuer),
                 serial_number=format(certificate.serial_number, "x"), sha1=hashlib.sha1(der).digest(),
                 start=certificate.not_valid_before_utc, expiry=certificate.not_valid_after_utc,
                 key_length=getattr(key, "key_size", 0))


def check_key_pair(certificate_pem: bytes, private_key_pem: bytes) -> None:
    """Refuse a private key that is not the certificate's own (15297)."""
    certificate = load_certificate(certificate_pem)
    key = load_private_key(private_key_pem)
    spki = serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    if certificate.public_key().public_bytes(*spki) != key.public_key().public_bytes(*spki):
        raise BrokerError(INVALID_KEY_DATA, f"{_INVALID_DATA_TEXT} The private key is not the key of the "
                                            f"certificate '{principal_of(certificate_pem)}'.")


def thumbprint(pem: bytes) -> str:
    """The SHA-256 of the certificate's DER encoding, in lower-case hex: what pins it."""
    der = load_certificate(pem).public_bytes(serialization.Encoding.DER)
    return hashlib.sha256(der).hexdigest()


def principal_of(pem: bytes) -> str:
    """The certificate's subject common name (the whole subject if it has none): the
    principal a connection authenticated with it runs as."""
    return _common_name(load_certificate(pem).subject)


def _common_name(name: x509.Name) -> str:
    names = name.get_attributes_for_oid(NameOID.COMMON_NAME)
    value = names[0].value if names else name.rfc4514_string()
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def canonical_pem(certificate: x509.Certificate) -> bytes:
    """A certificate as PEM, in one canonical form (comparable, storable)."""
    return certificate.public_bytes(serialization.Encoding.PEM)


def canonical_key_pem(key: PrivateKeyTypes) -> bytes:
    """A private key as unencrypted PKCS#8 PEM, whatever PEM form it came in."""
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def tls_contexts(certificate_pem: bytes, private_key_pem: bytes,
                 trusted_peers: Iterable[bytes]) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """(server, client) TLS contexts of an endpoint: TLS 1.2 at least, each presenting
    the endpoint's certificate and requiring the peer's, which must be one of
    ``trusted_peers`` (pinned: there is no CA and no host name to check).

    With no trusted peer every connection is refused. A key pair OpenSSL will not use is
    15297.
    """
    peers = b"".join(trusted_peers).decode("ascii", "replace")
    contexts = []
    for protocol in (ssl.PROTOCOL_TLS_SERVER, ssl.PROTOCOL_TLS_CLIENT):
        context = ssl.SSLContext(protocol)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.check_hostname = False  # the peer is who its pinned certificate says
        context.verify_mode = ssl.CERT_REQUIRED
        _load_chain(context, certificate_pem, private_key_pem)
        if peers.strip():
            context.load_verify_locations(cadata=peers)
        contexts.append(context)
    return contexts[0], contexts[1]


def _load_chain(context: ssl.SSLContext, certificate_pem: bytes, private_key_pem: bytes) -> None:
    """``load_cert_chain`` takes files only: the key goes to a private temporary folder
    encrypted with a one-time password, and is deleted once loaded."""
    password = secrets.token_bytes(32)
    key = load_private_key(private_key_pem)
    encrypted = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.BestAvailableEncryption(password))
    with tempfile.TemporaryDirectory(prefix="broker-endpoint-") as folder:  # mode 0700
        certificate_file, key_file = Path(folder, "certificate.pem"), Path(folder, "key.pem")
        certificate_file.write_bytes(certificate_pem)
        key_file.write_bytes(encrypted)
        try:
            context.load_cert_chain(str(certificate_file), str(key_file), password=password)
        except ssl.SSLError as exc:
            raise BrokerError(INVALID_KEY_DATA, f"{_INVALID_DATA_TEXT} TLS cannot use this certificate and "
                                                f"key: {exc.reason or exc}.") from None


def _invalid_file(reason: str) -> BrokerError:
    return BrokerError(INVALID_FILE, f"{_INVALID_FILE_TEXT} ({reason})")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _aware(moment: datetime) -> datetime:
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def _validity_moment(clause: str, moment: object) -> datetime:
    """START_DATE or EXPIRY_DATE as UTC, within what an X.509 validity can hold (59002)."""
    if not isinstance(moment, datetime):
        raise arguments.wrong_type(clause, moment, "datetime")
    try:
        utc = _aware(moment)
    except OverflowError:  # an offset that moves it past year 1 or 9999
        utc = None
    if utc is None or not _FIRST_VALID <= utc <= _LAST_VALID:
        raise InvalidArgumentError(OUT_OF_RANGE, f"The {clause} {moment} lies outside what a certificate can hold: "
                                                 f"{_FIRST_VALID:%Y-%m-%d} to {_LAST_VALID:%Y-%m-%d %H:%M:%S} UTC.")
    return utc
