"""CREATE / BACKUP / DROP CERTIFICATE: the certificates a database keeps (sys.certificates),
and whom an instance's endpoint trusts because of them.

A certificate is made here (a new key pair: ``certificates.create_certificate``) or
imported (FROM FILE, with or without its private key). A private key needs the
database's master key (15581) unless a password protects it (ENCRYPTION BY PASSWORD); it
is kept as ``sb_endpoints`` keeps the endpoint's, unencrypted (docs/endpoints.md).

In an instance catalog (master) certificates are transport security's: the endpoint
presents the one its AUTHENTICATION = CERTIFICATE names, and trusts a peer that presents
a certificate of master whose login has CONNECT on the endpoint, as SQL Server decides
it: the login of the user that owns the certificate (CREATE USER ... FOR LOGIN, then
CREATE CERTIFICATE ... AUTHORIZATION that user), or a login made FROM CERTIFICATE
(:func:`trusted_by`). In a member database they are dialog security's: kept and shown,
not used to encrypt (docs/sql.md).

Each function runs in the caller's transaction.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

from sqlalchemy import Table, delete, insert, or_, select, update

from broker.ddl import certificates
from broker.ddl.principals import ENDPOINT, NO_MASTER_KEY, certificate_id_of, has_master_key, user_id
from broker.errors import BrokerError
from broker.storage.context import TxContext
from broker.storage.models import (
    Certificate,
    DatabasePrincipal,
    Permission,
    ServerPrincipal,
    ServiceBrokerEndpoint,
)

_certificates = cast(Table, Certificate.__table__)
_users = cast(Table, DatabasePrincipal.__table__)
_logins = cast(Table, ServerPrincipal.__table__)
_permissions = cast(Table, Permission.__table__)
_endpoints = cast(Table, ServiceBrokerEndpoint.__table__)

FIRST_CERTIFICATE_ID = 256
DBO = 1
PUBLIC_LOGIN = 2
_CONNECT = "CO"


@dataclass(frozen=True, slots=True)
class StoredCertificate:
    """A certificate as the database keeps it: PEM, and its private key if it has one."""

    name: str
    certificate: bytes
    private_key: bytes | None


def create_certificate(ctx: TxContext, name: str, owner: str | None, certificate: bytes, private_key: bytes | None,
                       *, password_protected: bool, active_for_begin_dialog: bool) -> None:
    """Keep ``certificate`` (PEM) as ``name``, owned by the user ``owner`` (None: dbo;
    15151 for a user the database does not have), with its ``private_key`` (PEM,
    unencrypted) or none. 15232 if the name or the certificate is here already; 15581 for
    a private key without a master key or a password."""
    owner_id = DBO if owner is None else user_id(ctx, owner)
    if owner_id is None:
        raise BrokerError(15151, kind="user", name=owner)
    key = name.casefold()
    facts = certificates.facts_of(certificate)
    taken = ctx.conn.execute(select(_certificates.c.name).where(
        or_(_certificates.c.name_key == key, _certificates.c.thumbprint == facts.sha1))).first()
    if taken is not None:
        raise BrokerError(15232, f"A certificate with name '{name}' already exists or this certificate already has "
                                 "been added to the database.")
    if private_key is not None and not password_protected and not has_master_key(ctx):
        raise BrokerError(NO_MASTER_KEY, "Please create a master key in the database or open the master key in the "
                                         "session before performing this operation.")
    encryption = "NA" if private_key is None else ("PW" if password_protected else "MK")
    highest = ctx.conn.execute(select(_certificates.c.certificate_id).order_by(
        _certificates.c.certificate_id.desc())).scalar()
    ctx.conn.execute(insert(_certificates).values(
        certificate_id=max((highest or 0) + 1, FIRST_CERTIFICATE_ID), name_key=key, name=name, principal_id=owner_id,
        subject=facts.subject, issuer_name=facts.issuer, cert_serial_number=facts.serial_number,
        thumbprint=facts.sha1, start_date=facts.start, expiry_date=facts.expiry, key_length=facts.key_length,
        certificate=certificate.decode("ascii"),
        private_key=None if private_key is None else private_key.decode("ascii"),
        pvt_key_encryption_type=encryption, is_active_for_begin_dialog=active_for_begin_dialog,
        create_date=ctx.now()))


def stored(ctx: TxContext, name: str) -> StoredCertificate:
    """Certificate ``name`` (15151 if there is none)."""
    row = ctx.conn.execute(select(_certificates).where(_certificates.c.name_key == name.casefold())).first()
    if row is None:
        raise BrokerError(15151, kind="certificate", name=name)
    return StoredCertificate(row.name, row.certificate.encode("ascii"),
                             None if row.private_key is None else row.private_key.encode("ascii"))


def backed_up(ctx: TxContext, name: str) -> None:
    """BACKUP CERTIFICATE ... WITH PRIVATE KEY wrote the key: sys.certificates says when."""
    ctx.conn.execute(update(_certificates).where(_certificates.c.name_key == name.casefold())
                     .values(pvt_key_last_backup_date=ctx.now()))


def drop_certificate(ctx: TxContext, name: str) -> None:
    """DROP CERTIFICATE: 15151 if there is none; 15352 while a user or a login is mapped
    to it or the endpoint presents it."""
    try:
        certificate_id = certificate_id_of(ctx, name)
    except BrokerError:
        raise BrokerError(15151, f"Cannot drop the certificate '{name}', because it does not exist or you do not "
                                 "have permission.") from None
    pem = stored(ctx, name).certificate.decode("ascii")
    mapped = any(ctx.conn.execute(select(table.c.principal_id).where(table.c.certificate_id == certificate_id)
                                  ).first() is not None for table in (_users, _logins))
    presented = ctx.conn.execute(select(_endpoints.c.endpoint_id).where(_endpoints.c.certificate == pem)
                                 ).first() is not None
    if mapped or presented:
        raise BrokerError(15352, "The certificate cannot be dropped because one or more entities are either signed "
                                 "or encrypted using it.")
    ctx.conn.execute(delete(_certificates).where(_certificates.c.certificate_id == certificate_id))


def trusted_by(ctx: TxContext, endpoint_id: int) -> list[bytes]:
    """The certificates (PEM) of master whose login has CONNECT on the endpoint: the
    login of the user owning one, or a login mapped to one; CONNECT granted to public
    counts for every such login. In certificate id order."""
    granted = set(ctx.conn.execute(select(_permissions.c.grantee_principal_id).where(
        _permissions.c["class"] == ENDPOINT, _permissions.c.major_id == endpoint_id,
        _permissions.c.type == _CONNECT)).scalars())
    if not granted:
        return []
    logins = {row.name_key: row for row in ctx.conn.execute(select(_logins))}
    every = PUBLIC_LOGIN in granted
    allowed_logins = {key for key, row in logins.items() if every or row.principal_id in granted}
    by_login = {row.certificate_id for row in logins.values()
                if row.certificate_id is not None and row.name_key in allowed_logins}
    owners = {row.principal_id for row in ctx.conn.execute(select(_users))
              if row.login_name is not None and row.login_name.casefold() in allowed_logins}
    rows = ctx.conn.execute(select(_certificates.c.certificate_id, _certificates.c.principal_id,
                                   _certificates.c.certificate).order_by(_certificates.c.certificate_id))
    return [row.certificate.encode("ascii") for row in rows
            if row.certificate_id in by_login or row.principal_id in owners]
