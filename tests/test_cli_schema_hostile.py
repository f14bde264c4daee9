"""Hostile input to the schema commands and to ``broker import``, on SQLite and PostgreSQL.

Relative revisions that walk past head or base, a version table that holds several rows or
a later release's revision, ``downgrade -1`` and ``upgrade -1``, and import lines with no end: each refused in
one line on stderr with exit 1 (a number where the broker has one), the database unchanged.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from sqlalchemy import text

import broker
from broker.storage import schema
from broker.storage.engine import create_broker_engine
from cli import importing
from cli.main import cli

BROKER_SCRIPT = Path(sys.executable).with_name("broker")
HEAD = schema.HEAD_REVISION
ORDER = [revision for revision, _down, _doc in schema.history()]  # oldest to head
ONE_DOWN, TWO_DOWN = ORDER[-2], ORDER[-3]
PAST_ENDS = ("head+1", f"{HEAD}+1", "0001+20", "base+20", "head-20", "-20", "+1")
MEMORY_LIMIT = 1_500_000_000  # bytes of address space for a broker process fed an endless line


def invoke(url: str, *args: str, input: bytes | None = None) -> Result:
    return CliRunner().invoke(cli, ["--db", url, *args], input=input)


def refused(result: Result, start: str) -> str:
    """The one stderr line of a refusal (exit 1) that starts with ``start``."""
    assert result.exit_code == 1, (result.exit_code, result.stdout, result.stderr)
    assert "Traceback" not in result.stdout + result.stderr
    [line] = result.stderr.splitlines()
    assert line.startswith(start), line
    return line


def revisions(url: str) -> list[str]:
    engine = create_broker_engine(url)
    try:
        with engine.connect() as conn:
            return sorted(schema.stored_revisions(conn))
    finally:
        engine.dispose()


def store_revisions(url: str, *stored: str) -> None:
    """Write ``stored`` into the version table by hand, as a damaged or newer database has it."""
    engine = create_broker_engine(url)
    try:
        with engine.begin() as conn:
            conn.execute(text(f"DELETE FROM {schema.VERSION_TABLE}"))
            for revision in stored:
                conn.execute(text(f"INSERT INTO {schema.VERSION_TABLE} VALUES (:r)"), {"r": revision})
    finally:
        engine.dispose()


@pytest.fixture
def url(db_url: str) -> str:
    """A database at head."""
    assert invoke(db_url, "init").exit_code == 0
    return db_url


# -- relative revisions ------------------------------------------------------------------


@pytest.mark.parametrize("command", ["upgrade", "downgrade"])
def test_relative_revision_past_head_or_base_is_refused(url: str, command: str) -> None:
    for revision in PAST_ENDS:
        line = refused(invoke(url, command, "--", revision), "error: Relative revision ")
        assert "walks past" in line, line
        assert revisions(url) == [HEAD]


def test_relative_upgrade_to_base_is_refused(url: str) -> None:
    """Alembic asserts on an upgrade whose relative target is base (0001-1)."""
    for revision in ("0001-1", "0003-3"):
        refused(invoke(url, "upgrade", "--", revision), f"error: Relative revision '{revision}' leads to base")
    assert revisions(url) == [HEAD]


def test_downgrade_takes_a_step_down_as_its_argument(url: str) -> None:
    assert invoke(url, "downgrade", "-1").stdout == f"database at revision {ONE_DOWN}\n"
    assert invoke(url, "downgrade", "--", "-1").stdout == f"database at revision {TWO_DOWN}\n"
    assert invoke(url, "upgrade", "+2").stdout == f"database at revision {HEAD}\n"


def test_upgrade_takes_a_step_down_as_its_argument_and_refuses_it(url: str) -> None:
    """``upgrade -1`` was click's "No such option"; Alembic's own command line takes -1 as the
    revision, and a step down is no upgrade: one line saying which command takes it."""
    for args in (("upgrade", "-1"), ("upgrade", "--", "-1")):
        line = refused(invoke(url, *args), f"error: Relative revision '-1' steps down from {HEAD}, ")
        assert line.endswith("and an upgrade only goes up: downgrade -1"), line
    assert invoke(url, "downgrade", "-2").stdout == f"database at revision {TWO_DOWN}\n"
    line = refused(invoke(url, "downgrade", "+1"), f"error: Relative revision '+1' steps up from {TWO_DOWN}")
    assert line.endswith("a downgrade only goes down: upgrade +1"), line
    assert revisions(url) == [TWO_DOWN]
    assert invoke(url, "upgrade", "+2").stdout == f"database at revision {HEAD}\n"


@pytest.mark.parametrize("command", ["upgrade", "downgrade"])
def test_an_option_the_schema_commands_lack_is_still_a_usage_error(url: str, command: str) -> None:
    result = invoke(url, command, "--sql")
    assert result.exit_code == 2, (result.stdout, result.stderr)
    assert result.stderr.startswith(f"error: No such option '--sql'. See 'broker {command} --help'."), result.stderr
    assert revisions(url) == [HEAD]


# -- a damaged or newer version table ------------------------------------------------------


def test_several_revisions_in_the_version_table_are_211(url: str) -> None:
    store_revisions(url, HEAD, "0012")
    for args in (("status",), ("current",), ("upgrade",), ("init",), ("downgrade", "-1"), ("downgrade", "base")):
        line = refused(invoke(url, *args), "error 211: ")
        assert f"holds several revisions ({HEAD}, 0012)" in line or f"(0012, {HEAD})" in line, line
    assert revisions(url) == ["0012", HEAD]


def test_a_later_releases_revision_is_948_for_every_step(url: str) -> None:
    store_revisions(url, "0099")
    for args in (("status",), ("upgrade",), ("init",), ("downgrade", "base"), ("downgrade", "-1")):
        refused(invoke(url, *args), "error 948: The database cannot be opened because it is version 0099.")
    assert revisions(url) == ["0099"]
    engine = create_broker_engine(url)
    try:
        with engine.connect() as conn:
            assert conn.dialect.has_table(conn, "sb_database")  # downgrade base dropped nothing
    finally:
        engine.dispose()


# -- broker import: lines with no end ----------------------------------------------------


@pytest.fixture
def service(url: str) -> str:
    assert invoke(url, "create", "queue", "Q").exit_code == 0
    assert invoke(url, "create", "service", "//S", "--queue", "Q", "--contract", "DEFAULT").exit_code == 0
    return "//S"


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def test_import_of_an_endless_line_ends_at_once(url: str, service: str) -> None:
    """/dev/zero has no newline: the first megabyte shows it holds no JSON object."""
    process = subprocess.run(
        [str(BROKER_SCRIPT), "--db", url, "import", service, "/dev/zero", "--from", service],
        capture_output=True, text=True, timeout=120, check=False, preexec_fn=_limited,
    )
    assert process.returncode == 1, process.stderr
    assert process.stderr.splitlines() == [
        "error: /dev/zero line 1: not JSON (Expecting value: line 1 column 1 (char 0)) "
        "(0 messages imported before its batch)"
    ]


def test_import_refuses_a_line_past_the_longest_export_with_8459(
    url: str, service: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A line read in several pieces imports; one past the cap is 8459 naming its line."""
    monkeypatch.setattr(importing, "MAX_LINE_BYTES", 4 << 20)
    long_body = "a" * (3 << 20)  # more than one piece of a line, less than the cap
    lines = [json.dumps({"message_body": long_body}), json.dumps({"message_body": long_body * 2}), "{}"]
    result = invoke(url, "import", service, "-", "--from", service, input="\n".join(lines).encode())
    line = refused(result, "error 8459: stdin line 2 is longer than 4,194,304 bytes")
    assert line.endswith("(1 message imported before its batch)"), line
    db = broker.connect(url)
    try:
        assert [m.message_body for m in db.queue_rows("Q")] == [long_body.encode()]
    finally:
        db.dispose()
