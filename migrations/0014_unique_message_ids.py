"""Transmission queue ids are never used twice, and never run out.

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-28

A transmitter reads messages in one transaction, sends them, and settles them by
``message_id`` in a later one. On SQLite the id was an ``INTEGER PRIMARY KEY`` without
AUTOINCREMENT, which takes the largest id plus one: once the queue drained, a new
message got the id of one sent before. Two runtimes serving one database then lost
messages: one settled (deleted, or delivered again) by id a message the other had
already settled, and so removed the new message that had taken its id. The table is
made again with AUTOINCREMENT (its rows and indexes kept), as the queue tables already
are. On PostgreSQL the ids came from a sequence (never reused) but were 32-bit, which a
busy broker runs through: ``message_id`` and ``sb_forwarded_messages.forwarded_id`` are
now bigint, their sequences too.
"""

from __future__ import annotations

from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | None = None
depends_on: str | None = None

_COLUMNS = (
    ("message_id", "INTEGER NOT NULL CONSTRAINT pk_sb_transmission_queue PRIMARY KEY {autoincrement}"),
    ("conversation_handle", "VARCHAR(36) NOT NULL"),
    ("to_conversation_handle", "VARCHAR(36)"),
    ("to_service_name", "VARCHAR(256) NOT NULL"),
    ("to_broker_instance", "VARCHAR(128)"),
    ("from_service_name", "VARCHAR(256) NOT NULL"),
    ("service_contract_id", "INTEGER NOT NULL"),
    ("enqueue_time", "DATETIME NOT NULL"),
    ("message_sequence_number", "BIGINT NOT NULL"),
    ("message_type_id", "INTEGER NOT NULL"),
    ("is_conversation_error", "BOOLEAN NOT NULL"),
    ("is_end_of_dialog", "BOOLEAN NOT NULL"),
    ("message_body", "BLOB"),
    ("transmission_status", "VARCHAR(4000) NOT NULL"),
    ("priority", "SMALLINT NOT NULL"),
    ("next_attempt_time", "DATETIME"),
    ("attempts", "INTEGER DEFAULT '0' NOT NULL"),
    ("fragments_held", "INTEGER DEFAULT '0' NOT NULL"),
    ("fragments_held_by", "VARCHAR(128)"),
)
_INDEXES = (
    "CREATE INDEX ix_sb_transmission_queue_handle_seq ON sb_transmission_queue "
    "(conversation_handle, message_sequence_number)",
    "CREATE INDEX ix_sb_transmission_queue_next_attempt_time ON sb_transmission_queue (next_attempt_time)",
    "CREATE INDEX ix_sb_transmission_queue_handle_due ON sb_transmission_queue "
    "(conversation_handle, next_attempt_time)",
    "CREATE INDEX ix_sb_transmission_queue_parked_due ON sb_transmission_queue (next_attempt_time) "
    "WHERE to_conversation_handle IS NOT NULL",
)
# PostgreSQL: (table, column) whose ids come from a sequence
_SERIAL = (("sb_transmission_queue", "message_id"), ("sb_forwarded_messages", "forwarded_id"))


def _remake_sqlite_table(autoincrement: str) -> None:
    """Make the SQLite table again with its rows: copied aside, the table dropped and
    created anew under its own name (no RENAME: SQLite would check the views that name
    it while it is missing), copied back. With AUTOINCREMENT, SQLite starts its counter
    at the largest id copied back."""
    op.execute("CREATE TEMPORARY TABLE sb_transmission_queue_copy AS SELECT * FROM sb_transmission_queue")
    op.execute("DROP TABLE sb_transmission_queue")
    columns = ", ".join(f"{name} {definition}" for name, definition in _COLUMNS)
    op.execute(f"CREATE TABLE sb_transmission_queue ({columns.format(autoincrement=autoincrement)})")
    names = ", ".join(name for name, _definition in _COLUMNS)
    op.execute(f"INSERT INTO sb_transmission_queue ({names}) SELECT {names} FROM sb_transmission_queue_copy "
               "ORDER BY message_id")
    op.execute("DROP TABLE sb_transmission_queue_copy")
    for index in _INDEXES:
        op.execute(index)


def _retype_postgres_ids(sql_type: str) -> None:
    """Retype the id columns and their sequences. PostgreSQL retypes no column a view
    uses, so the views reading them are dropped first and made again from their own
    definitions, with their owner and grants. One block the server runs, so that
    ``alembic upgrade --sql`` writes it too. A view of the user's own on those views
    blocks it (``cannot drop view``): the upgrade then rolls back whole."""
    for table, column in _SERIAL:
        op.execute(f"""DO $$
DECLARE
    kept record;
    granted record;
BEGIN
    CREATE TEMPORARY TABLE broker_kept_views AS
        SELECT DISTINCT view.oid::regclass::text AS name, pg_get_viewdef(view.oid) AS definition,
               view.relowner AS owner, view.relacl AS acl
        FROM pg_depend dependency
        JOIN pg_rewrite rule ON rule.oid = dependency.objid
        JOIN pg_class view ON view.oid = rule.ev_class
        WHERE dependency.refobjid = '{table}'::regclass AND view.oid <> dependency.refobjid;
    FOR kept IN SELECT * FROM broker_kept_views LOOP
        EXECUTE 'DROP VIEW ' || kept.name;
    END LOOP;
    ALTER TABLE {table} ALTER COLUMN {column} TYPE {sql_type};
    ALTER SEQUENCE {table}_{column}_seq AS {sql_type};
    FOR kept IN SELECT * FROM broker_kept_views LOOP
        EXECUTE 'CREATE VIEW ' || kept.name || ' AS ' || kept.definition;
        EXECUTE 'ALTER VIEW ' || kept.name || ' OWNER TO ' || quote_ident(pg_get_userbyid(kept.owner));
        FOR granted IN SELECT * FROM aclexplode(kept.acl) WHERE grantee <> kept.owner LOOP
            EXECUTE 'GRANT ' || granted.privilege_type || ' ON ' || kept.name || ' TO '
                || CASE granted.grantee WHEN 0 THEN 'PUBLIC' ELSE quote_ident(pg_get_userbyid(granted.grantee)) END
                || CASE WHEN granted.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END;
        END LOOP;
    END LOOP;
    DROP TABLE broker_kept_views;
END $$""")


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        _retype_postgres_ids("BIGINT")
    else:
        _remake_sqlite_table("AUTOINCREMENT")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        _retype_postgres_ids("INTEGER")
    else:
        _remake_sqlite_table("")
