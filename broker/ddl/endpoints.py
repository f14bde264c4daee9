"""CREATE / ALTER / DROP ENDPOINT ... FOR SERVICE_BROKER (spec 1.9), and the endpoint's
configuration as the runtime reads it.

The endpoint is a row of ``sb_endpoints`` in an instance catalog; an instance has at
most one (7862). It authenticates with a certificate only: a certificate and its
private key are required, and it accepts the peers whose certificates it was given
(``trusted_peers``, GRANT CONNECT's counterpart). Certificates, keys and peers arrive as
PEM content or file paths; :func:`read_pems` reads and parses them before the
transaction, the verbs check what needs the catalog (names, the one endpoint, the key
pair once ALTER has merged old and new) inside it.

Each verb runs in the caller's transaction, locks the catalog's one ``sb_database`` row
first (so two concurrent CREATEs cannot both find no endpoint), checks before it writes
and ends with ``ctx.catalog_changed()``, which tells a running runtime to read the
endpoint again.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field
from typing import Any, cast

from sqlalchemy import Table, delete, insert, select, update

from broker.ddl import certificate_store, certificates, principals
from broker.ddl.endpoint_options import ALGORITHM, Encryption, EndpointState, missing_authentication
from broker.ddl.names import row_named
from broker.ddl.objects import next_id
from broker.errors import BrokerError
from broker.storage.context import TxContext
from broker.storage.models import BrokerDatabase, ServiceBrokerEndpoint

endpoints = cast(Table, ServiceBrokerEndpoint.__table__)
ONE_ENDPOINT_ONLY = 7862
NOT_FOUND = 15151
# An option -> its column (the PEM options are stored as text).
_COLUMNS = {"port": "port", "listener_ip": "listener_ip", "state": "state", "certificate": "certificate",
            "private_key": "private_key", "trusted_peers": "trusted_peers", "encryption": "encryption",
            "message_forwarding": "message_forwarding", "message_forward_size": "message_forward_size"}
_DEFAULTS = {"listener_ip": None, "state": "STARTED", "certificate": None, "private_key": None, "trusted_peers": b"",
             "encryption": "REQUIRED", "message_forwarding": False, "message_forward_size": 10}


@dataclass(frozen=True, slots=True)
class EndpointConfig:
    """The instance's Service Broker endpoint, as its runtime serves it."""

    endpoint_id: int
    name: str
    port: int
    listener_ip: str | None  # None: every address (LISTENER_IP = ALL)
    state: EndpointState  # STARTED, STOPPED or DISABLED
    certificate: bytes  # PEM
    private_key: bytes = field(repr=False)  # PEM, unencrypted
    trusted_peers: tuple[bytes, ...]  # one PEM certificate each
    encryption: Encryption  # REQUIRED, SUPPORTED or DISABLED
    algorithm: str  # AES
    message_forwarding: bool
    message_forward_size: int  # megabytes

    def tls_contexts(self) -> tuple[ssl.SSLContext, ssl.SSLContext]:
        """(server, client) ``ssl.SSLContext`` of this endpoint (``certificates.tls_contexts``)."""
        return certificates.tls_contexts(self.certificate, self.private_key, self.trusted_peers)

    @property
    def principal(self) -> str:
        """Who this endpoint is to its peers: its certificate's subject name."""
        return certificates.principal_of(self.certificate)

    def trusted_principals(self) -> dict[str, str]:
        """The trusted peers' principals by certificate thumbprint (SHA-256 hex)."""
        return {certificates.thumbprint(pem): certificates.principal_of(pem) for pem in self.trusted_peers}


def read_pems(options: dict[str, Any]) -> dict[str, Any]:
    """``options`` (checked by ``endpoint_options``) with the certificate, the private key
    and the trusted peers read from their sources and parsed: PEM bytes each, the peers
    concatenated without duplicates. Bad content or an unreadable file is 15208."""
    read = dict(options)
    if read.get("certificate") is not None:
        pem = certificates.read_pem(read["certificate"], "certificate")
        read["certificate"] = certificates.canonical_pem(certificates.load_certificate(pem))
    if read.get("private_key") is not None:
        pem = certificates.read_pem(read["private_key"], "private key")
        read["private_key"] = certificates.canonical_key_pem(certificates.load_private_key(pem))
    if "trusted_peers" in read:
        peers: dict[bytes, None] = {}  # ordered, without duplicates
        for source in read["trusted_peers"]:
            pem = certificates.read_pem(source, "trusted peer certificate")
            for peer in certificates.load_certificates(pem, "trusted peer certificate"):
                peers[certificates.canonical_pem(peer)] = None
        read["trusted_peers"] = b"".join(peers)
    return read


def create_endpoint(ctx: TxContext, name: str, options: dict[str, Any]) -> None:
    """CREATE ENDPOINT name STATE = ... AS TCP (LISTENER_PORT, LISTENER_IP) FOR SERVICE_BROKER
    (AUTHENTICATION = CERTIFICATE, ENCRYPTION, MESSAGE_FORWARDING, MESSAGE_FORWARD_SIZE).

    ``options`` come from ``read_pems``. A name taken is 2714 (SQL Server's endpoint
    names are the server's, as this instance's are), a second endpoint 7862.
    """
    _lock_catalog(ctx)
    existing = ctx.conn.execute(select(endpoints.c.name)).scalars().all()
    if name in existing:
        raise BrokerError(2714, f"There is already an endpoint named '{name}' in the instance.")
    if existing:
        raise BrokerError(ONE_ENDPOINT_ONLY, f"An endpoint of the requested type already exists ('{existing[0]}'). "
                                             "Only one endpoint of this type is supported. Use ALTER ENDPOINT or "
                                             "DROP the existing endpoint and execute the CREATE ENDPOINT statement.")
    values = _checked({**_DEFAULTS, **options})
    now = ctx.now()
    ctx.conn.execute(insert(endpoints).values(
        endpoint_id=next_id(ctx, endpoints.c.endpoint_id), name=name, encryption_algorithm=ALGORITHM,
        create_date=now, modify_date=now, **values))
    ctx.catalog_changed()


def alter_endpoint(ctx: TxContext, name: str, options: dict[str, Any]) -> None:
    """ALTER ENDPOINT name ...: the options given change, the others stay; the result is
    checked as CREATE checks it (a new certificate needs its own key). 15151 if there
    is no such endpoint."""
    _lock_catalog(ctx)
    row = row_named(ctx, endpoints, name)
    if row is None:
        raise BrokerError(NOT_FOUND, kind="endpoint", name=name)
    current = {option: getattr(row, column) for option, column in _COLUMNS.items()}
    for pem in ("certificate", "private_key", "trusted_peers"):
        current[pem] = current[pem].encode("ascii")
    values = _checked({**current, **options})
    ctx.conn.execute(update(endpoints).where(endpoints.c.endpoint_id == row.endpoint_id)
                     .values(modify_date=ctx.now(), **values))
    ctx.catalog_changed()


def drop_endpoint(ctx: TxContext, name: str) -> None:
    """DROP ENDPOINT name (15151 if there is none), and the permissions granted on it."""
    _lock_catalog(ctx)
    row = row_named(ctx, endpoints, name)
    endpoint_id = None if row is None else row.endpoint_id
    if endpoint_id is None:
        raise BrokerError(NOT_FOUND, f"Cannot drop the endpoint '{name}', because it does not exist or you do "
                                     "not have permission.")
    ctx.conn.execute(delete(endpoints).where(endpoints.c.endpoint_id == endpoint_id))
    principals.drop_permissions_on(ctx, principals.ENDPOINT, endpoint_id)
    ctx.catalog_changed()


def endpoint_config(ctx: TxContext) -> EndpointConfig | None:
    """The instance's Service Broker endpoint (None if it has none), read in the caller's
    transaction. It trusts the peers it was given and the certificates of master whose
    login has CONNECT on it (``certificate_store.trusted_by``)."""
    row = ctx.conn.execute(select(endpoints)).first()
    if row is None:
        return None
    peers = certificates.load_certificates(row.trusted_peers.encode("ascii")) if row.trusted_peers else []
    trusted = dict.fromkeys([*(certificates.canonical_pem(peer) for peer in peers),
                             *certificate_store.trusted_by(ctx, row.endpoint_id)])
    return EndpointConfig(
        endpoint_id=row.endpoint_id, name=row.name, port=row.port, listener_ip=row.listener_ip,
        state=cast(EndpointState, row.state),
        certificate=row.certificate.encode("ascii"), private_key=row.private_key.encode("ascii"),
        trusted_peers=tuple(trusted),
        encryption=cast(Encryption, row.encryption),
        algorithm=row.encryption_algorithm, message_forwarding=bool(row.message_forwarding),
        message_forward_size=row.message_forward_size,
    )


def _checked(values: dict[str, Any]) -> dict[str, Any]:
    """The columns of an endpoint's options, checked together: a certificate and its own
    private key (59050 without them, 15297 for a key of another certificate), usable by
    TLS with the trusted peers."""
    certificate, key = values["certificate"], values["private_key"]
    if certificate is None or key is None:
        missing = "a certificate and its private key" if certificate is None and key is None else (
            "a certificate" if certificate is None else "the certificate's private key")
        raise missing_authentication(missing)
    certificates.check_key_pair(certificate, key)
    peers = certificates.load_certificates(values["trusted_peers"]) if values["trusted_peers"] else []
    certificates.tls_contexts(certificate, key, [certificates.canonical_pem(peer) for peer in peers])
    columns = {column: values[option] for option, column in _COLUMNS.items()}
    for pem in ("certificate", "private_key", "trusted_peers"):
        columns[pem] = columns[pem].decode("ascii")
    return columns


def _lock_catalog(ctx: TxContext) -> None:
    """Serialize endpoint DDL: on PostgreSQL a row lock held to the end of the
    transaction; SQLite's write lock is held already."""
    ctx.conn.execute(select(BrokerDatabase.database_id).with_for_update()).all()
