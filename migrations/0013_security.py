"""Security objects: master keys, users, logins, certificates and permissions.

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-26

``broker sql`` runs the statements of SQL Server's transport and dialog security (the
between-instances tutorial: CREATE MASTER KEY, CREATE USER, CREATE LOGIN, CREATE
CERTIFICATE, GRANT). Every broker database keeps its own; an instance catalog keeps
master's, whose certificates and logins decide what the endpoint presents and whom it
trusts. The views show them with SQL Server's columns: sys.symmetric_keys,
sys.database_principals and sys.server_principals (with their built-in principals),
sys.certificates, sys.database_permissions and sys.server_permissions; and
sys.remote_service_bindings' remote_principal_id is now its user's (NULL for a user the
database does not have; it was 1, dbo's, for every binding).
"""

from __future__ import annotations

import sqlalchemy as sa

from alembic import op
from broker.storage.types import GUID, UTCDateTime

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | None = None
depends_on: str | None = None

_BIT = "CASE WHEN {0} THEN 1 ELSE 0 END"


def _builtin(rows: list[tuple[str, int, str, str]], columns: str) -> str:
    """Built-in principals (name, id, type, type_desc), dated like the database itself."""
    return "\n    UNION ALL ".join(
        f"SELECT '{name}' AS name, {number} AS principal_id, '{kind}' AS type, '{desc}' AS type_desc, {columns} "
        "FROM sb_database" for name, number, kind, desc in rows)


_DATABASE_PRINCIPAL_COLUMNS = """{schema} AS default_schema_name, {created} AS create_date,
           {modified} AS modify_date, NULL AS owning_principal_id, NULL AS sid, 0 AS is_fixed_role,
           {auth} AS authentication_type,
           CASE {auth} WHEN 1 THEN 'INSTANCE' ELSE 'NONE' END AS authentication_type_desc,
           NULL AS default_language_name, NULL AS default_language_lcid,
           0 AS allow_encrypted_value_modifications"""

_DATABASE_PRINCIPALS = f"""
    {_builtin([("public", 0, "R", "DATABASE_ROLE"), ("dbo", 1, "S", "SQL_USER"), ("guest", 2, "S", "SQL_USER"),
               ("INFORMATION_SCHEMA", 3, "S", "SQL_USER"), ("sys", 4, "S", "SQL_USER")],
              _DATABASE_PRINCIPAL_COLUMNS.format(schema="NULL", created="create_date", modified="create_date",
                                                 auth="0"))}
    UNION ALL
    SELECT name, principal_id, type,
           CASE type WHEN 'C' THEN 'CERTIFICATE_MAPPED_USER' ELSE 'SQL_USER' END AS type_desc,
           {_DATABASE_PRINCIPAL_COLUMNS.format(
               schema="CASE type WHEN 'C' THEN NULL ELSE 'dbo' END", created="create_date", modified="modify_date",
               auth="CASE WHEN login_name IS NULL THEN 0 ELSE 1 END")}
    FROM sb_database_principals"""

_SERVER_PRINCIPAL_COLUMNS = """NULL AS sid, 0 AS is_disabled, {created} AS create_date, {modified} AS modify_date,
           'master' AS default_database_name, NULL AS default_language_name, NULL AS credential_id,
           NULL AS owning_principal_id, 0 AS is_fixed_role"""

_SERVER_PRINCIPALS = f"""
    {_builtin([("sa", 1, "S", "SQL_LOGIN"), ("public", 2, "R", "SERVER_ROLE")],
              _SERVER_PRINCIPAL_COLUMNS.format(created="create_date", modified="create_date"))}
    UNION ALL
    SELECT name, principal_id, type,
           CASE type WHEN 'C' THEN 'CERTIFICATE_MAPPED_LOGIN' ELSE 'SQL_LOGIN' END AS type_desc,
           {_SERVER_PRINCIPAL_COLUMNS.format(created="create_date", modified="modify_date")}
    FROM sb_server_principals"""

_CERTIFICATES = f"""
    SELECT name, certificate_id, principal_id, pvt_key_encryption_type,
           CASE pvt_key_encryption_type WHEN 'MK' THEN 'ENCRYPTED_BY_MASTER_KEY'
                WHEN 'PW' THEN 'ENCRYPTED_BY_PASSWORD' ELSE 'NO_PRIVATE_KEY' END AS pvt_key_encryption_type_desc,
           {_BIT.format("is_active_for_begin_dialog")} AS is_active_for_begin_dialog,
           issuer_name, cert_serial_number, NULL AS sid, NULL AS string_sid, subject, expiry_date, start_date,
           thumbprint, NULL AS attested_by, pvt_key_last_backup_date, key_length
    FROM sb_certificates"""

_SYMMETRIC_KEYS = """
    SELECT name, 1 AS principal_id, symmetric_key_id, 256 AS key_length, 'A3' AS key_algorithm,
           'AES_256' AS algorithm_desc, create_date, modify_date, key_guid, NULL AS key_thumbprint,
           NULL AS provider_type, NULL AS cryptographic_provider_guid, NULL AS cryptographic_provider_algid
    FROM sb_symmetric_keys"""


def _permissions(classes: dict[int, str], where: str) -> str:
    described = " ".join(f"WHEN {number} THEN '{desc}'" for number, desc in classes.items())
    return f"""
    SELECT class, CASE class {described} END AS class_desc, major_id, 0 AS minor_id, grantee_principal_id,
           1 AS grantor_principal_id, type, permission_name, 'G' AS state, 'GRANT' AS state_desc
    FROM sb_permissions WHERE {where}"""


_VIEWS = {
    "symmetric_keys": _SYMMETRIC_KEYS,
    "database_principals": _DATABASE_PRINCIPALS,
    "server_principals": _SERVER_PRINCIPALS,
    "certificates": _CERTIFICATES,
    "database_permissions": _permissions({0: "DATABASE", 17: "SERVICE"}, "class <> 105"),
    "server_permissions": _permissions({105: "ENDPOINT"}, "class = 105"),
}


# sys.remote_service_bindings before this revision (0005's) and from it on.
_BINDINGS_BEFORE = """
    SELECT name, remote_service_binding_id, 1 AS principal_id, remote_service_name,
           0 AS service_contract_id, 1 AS remote_principal_id, user_name AS remote_principal_name,
           CASE WHEN is_anonymous_on THEN 1 ELSE 0 END AS is_anonymous_on
    FROM sb_remote_service_bindings"""
_BINDINGS = """
    SELECT b.name, b.remote_service_binding_id, 1 AS principal_id, b.remote_service_name,
           0 AS service_contract_id, u.principal_id AS remote_principal_id, b.user_name AS remote_principal_name,
           CASE WHEN b.is_anonymous_on THEN 1 ELSE 0 END AS is_anonymous_on
    FROM sb_remote_service_bindings b LEFT JOIN sb_database_principals u ON u.name_key = lower(b.user_name)"""


def _view_name(name: str) -> str:
    return f'sys."{name}"' if op.get_bind().dialect.name == "postgresql" else f'"sys.{name}"'


def _principals(table: str) -> None:
    op.create_table(
        table,
        sa.Column("principal_id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("name_key", sa.String(length=128), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("type", sa.String(length=1), nullable=False),
        *([sa.Column("login_name", sa.String(length=128), nullable=True)] if table == "sb_database_principals"
          else []),
        sa.Column("certificate_id", sa.Integer(), nullable=True),
        sa.Column("create_date", UTCDateTime(), nullable=False),
        sa.Column("modify_date", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("principal_id", name=op.f(f"pk_{table}")),
        sa.UniqueConstraint("name_key", name=op.f(f"uq_{table}_name_key")),
    )


def upgrade() -> None:
    op.create_table(
        "sb_symmetric_keys",
        sa.Column("symmetric_key_id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("key_guid", GUID(), nullable=False),
        sa.Column("create_date", UTCDateTime(), nullable=False),
        sa.Column("modify_date", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("symmetric_key_id", name=op.f("pk_sb_symmetric_keys")),
        sa.UniqueConstraint("name", name=op.f("uq_sb_symmetric_keys_name")),
    )
    _principals("sb_database_principals")
    _principals("sb_server_principals")
    op.create_table(
        "sb_certificates",
        sa.Column("certificate_id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("name_key", sa.String(length=128), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("principal_id", sa.Integer(), nullable=False),
        sa.Column("subject", sa.String(length=4000), nullable=False),
        sa.Column("issuer_name", sa.String(length=4000), nullable=False),
        sa.Column("cert_serial_number", sa.String(length=64), nullable=False),
        sa.Column("thumbprint", sa.LargeBinary(), nullable=False),
        sa.Column("start_date", UTCDateTime(), nullable=False),
        sa.Column("expiry_date", UTCDateTime(), nullable=False),
        sa.Column("key_length", sa.Integer(), nullable=False),
        sa.Column("certificate", sa.Text(), nullable=False),
        sa.Column("private_key", sa.Text(), nullable=True),
        sa.Column("pvt_key_encryption_type", sa.String(length=2), nullable=False),
        sa.Column("is_active_for_begin_dialog", sa.Boolean(), nullable=False),
        sa.Column("pvt_key_last_backup_date", UTCDateTime(), nullable=True),
        sa.Column("create_date", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("certificate_id", name=op.f("pk_sb_certificates")),
        sa.UniqueConstraint("name_key", name=op.f("uq_sb_certificates_name_key")),
        sa.UniqueConstraint("thumbprint", name=op.f("uq_sb_certificates_thumbprint")),
    )
    op.create_table(
        "sb_permissions",
        sa.Column("class", sa.SmallInteger(), nullable=False),
        sa.Column("major_id", sa.Integer(), nullable=False),
        sa.Column("grantee_principal_id", sa.Integer(), nullable=False),
        sa.Column("type", sa.String(length=4), nullable=False),
        sa.Column("permission_name", sa.String(length=128), nullable=False),
        sa.PrimaryKeyConstraint("class", "major_id", "grantee_principal_id", "type", name=op.f("pk_sb_permissions")),
    )
    for name, body in _VIEWS.items():
        op.execute(f"CREATE VIEW {_view_name(name)} AS {body.strip()}")
    _replace_view("remote_service_bindings", _BINDINGS)


def _replace_view(name: str, body: str) -> None:
    op.execute(f"DROP VIEW {_view_name(name)}")
    op.execute(f"CREATE VIEW {_view_name(name)} AS {body.strip()}")


def downgrade() -> None:
    _replace_view("remote_service_bindings", _BINDINGS_BEFORE)
    for name in reversed(_VIEWS):
        op.execute(f"DROP VIEW {_view_name(name)}")
    for table in ("sb_permissions", "sb_certificates", "sb_server_principals", "sb_database_principals",
                  "sb_symmetric_keys"):
        op.drop_table(table)
