"""Hostile T-SQL: random token soup, random characters and every truncation of real
scripts give a clean numbered error (or run), never a crash, and leave the database whole."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import text

import broker
from broker.sql.outputs import Failed, Output
from broker.sql.session import Session

SCRIPTS = Path(__file__).parent / "sql_scripts"
# Scripts without a WAITFOR: a truncation that cut its TIMEOUT off would wait forever.
TRUNCATED = [SCRIPTS / "single_database" / "1_objects.sql", SCRIPTS / "single_database" / "5_cleanup.sql",
             SCRIPTS / "internal_activation" / "1_objects.sql"]

TOKENS = [
    "SELECT", "FROM", "WHERE", "DECLARE", "SET", "@h", "@x", "@@ROWCOUNT", "UNIQUEIDENTIFIER", "INT", "NVARCHAR(10)",
    "XML", "BEGIN", "END", "TRANSACTION", "COMMIT", "ROLLBACK", "DIALOG", "CONVERSATION", "SEND", "ON", "RECEIVE",
    "TOP", "(", ")", ",", ";", "=", "+", "-", "*", "/", "'", "N'x'", "'<a/>'", "[q]", "[//s]", "q", "QUEUE",
    "CREATE", "ALTER", "DROP", "SERVICE", "CONTRACT", "MESSAGE", "TYPE", "ROUTE", "WITH", "STATUS", "OFF",
    "ACTIVATION", "PROCEDURE_NAME", "IF", "ELSE", "WHILE", "BREAK", "TRY", "CATCH", "THROW", "PRINT", "CAST",
    "AS", "NULL", "1", "0", "-1", "2147483648", "1e400", "0x00", "GO", "\n", "EXEC", "PROCEDURE", "RETURN",
    "END CONVERSATION @h", "BEGIN DIALOG @h FROM SERVICE [s] TO SERVICE 's'", "GET CONVERSATION GROUP @g FROM q",
    ".value('(/a)[1]', 'int')", "NEWID()", "TIMEOUT", "CLEANUP", "ERROR", "DESCRIPTION", "--", "/*", "*/",
    # security statements, table hints, SET options (no file names: BACKUP would write them)
    "CERTIFICATE", "MASTER KEY", "USER", "LOGIN", "GRANT", "REVOKE", "::", "AUTHORIZATION", "PASSWORD",
    "ENCRYPTION BY PASSWORD = N'x'", "WITHOUT LOGIN", "SUBJECT", "ENDPOINT", "CONNECT", "WITH (NOLOCK)", "(NOLOCK)",
    "XACT_ABORT", "LOCK_TIMEOUT", "ISOLATION LEVEL",
]


def _check(outputs: list[Output]) -> None:
    for output in outputs:
        if isinstance(output, Failed):
            assert output.error.number > 0 and output.error.message
            assert output.error.line >= 0


def _intact(db: broker.Broker) -> None:
    """Every catalog view reads, and SQLite's own check finds nothing wrong."""
    for view in ("sys.service_queues", "sys.services", "sys.conversation_endpoints", "sys.transmission_queue"):
        db.catalog(view)
    if db.engine.url.get_backend_name() == "sqlite":
        with db.engine.connect() as conn:
            assert conn.execute(text("PRAGMA integrity_check")).scalar() == "ok"


@pytest.fixture
def fuzzed(db: broker.Broker) -> broker.Broker:
    db.create_queue("q")
    db.create_service("s", "q", ["DEFAULT"])
    return db


FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                         HealthCheck.too_slow])


@FUZZ
@given(st.lists(st.sampled_from(TOKENS), max_size=40))
def test_token_soup_fails_cleanly(fuzzed: broker.Broker, tokens: list[str]) -> None:
    script = " ".join(tokens).replace("WAITFOR", "")
    with Session(fuzzed, database_name="fuzz") as session:
        _check(session.run(script))
    _intact(fuzzed)


@FUZZ
@given(st.text(max_size=200))
def test_random_text_fails_cleanly(fuzzed: broker.Broker, script: str) -> None:
    with Session(fuzzed, database_name="fuzz") as session:
        _check(session.run(script.replace("WAITFOR", "")))
    _intact(fuzzed)


@pytest.mark.parametrize("path", TRUNCATED, ids=lambda path: f"{path.parent.name}/{path.name}")
def test_every_truncation_of_a_real_script_fails_cleanly(db: broker.Broker, path: Path) -> None:
    script = path.read_text(encoding="utf-8")
    cuts = sorted(set(range(0, len(script), max(1, len(script) // 60))) | {len(script) - 1})
    for cut in cuts:
        with Session(db, database_name="tutorial") as session:
            _check(session.run(script[:cut]))
    _intact(db)
    # Whatever the truncations left behind, the whole script still runs or fails cleanly.
    with Session(db, database_name="tutorial") as session:
        _check(session.run(script))
    _intact(db)
