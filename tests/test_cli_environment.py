"""What the ``broker`` command finds around it: a database that is not there, URL variables
set but empty, an export stopped by a signal, and Alembic's offline mode (``--sql``).

* ``current`` and ``downgrade`` on a SQLite file that is not there are error 911 and
  create nothing; ``init``, ``create``, ``sql`` and the other commands still create it, as
  ``broker.connect`` does. PostgreSQL databases are never created: the server's refusal
  is the error.
* ``BROKER_URL=""`` (and ``--db ""``, ``BROKER_INSTANCE=""``, ``BROKER_DATABASE=""``) is a
  usage error naming the variable or option, not the default database.
* ``broker export`` stopped by SIGTERM, SIGHUP or SIGINT removes its temporary file; one
  left by SIGKILL is removed by the next export, and a live export's is left alone.
* ``alembic upgrade START:END --sql`` writes SQL for SQLite and PostgreSQL, and a range it
  cannot write fails in one line naming the revision.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from conftest import BACKENDS, POSTGRES_URL
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from support import wait_until

import broker
from broker.storage import schema
from cli.main import cli

REPOSITORY = Path(__file__).resolve().parent.parent
ALEMBIC_SCRIPT = Path(sys.executable).with_name("alembic")
QUEUE = "ExportQueue"
SERVICE = "//environment/Target"
PROCESS_TIMEOUT_S = 60


def invoke(*args: str, env: dict[str, str | None] | None = None) -> Result:
    clean: dict[str, str | None] = {"BROKER_URL": None, "BROKER_INSTANCE": None, "BROKER_DATABASE": None}
    return CliRunner().invoke(cli, list(args), env={**clean, **(env or {})})


def one_line(result: Result, status: int) -> str:
    """The one stderr line of a failure with exit ``status``, never a traceback."""
    assert result.exit_code == status, (result.exit_code, result.stdout, result.stderr)
    assert "Traceback" not in result.stdout + result.stderr
    [line] = result.stderr.splitlines()
    return line


# -- a database that is not there ---------------------------------------------------------


@pytest.fixture(params=BACKENDS)
def missing_url(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The URL of a database that does not exist (PostgreSQL: a name no database has; the
    test checks that none was made under it, and drops it if one was)."""
    monkeypatch.chdir(tmp_path)
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'missing.db'}"
        return
    if POSTGRES_URL is None:
        pytest.skip("BROKER_TEST_POSTGRES_URL is not set: no PostgreSQL server to test on")
    name = f"broker_missing_{uuid.uuid4().hex[:12]}"
    yield make_url(POSTGRES_URL).set(database=name).render_as_string(hide_password=False)
    admin = create_engine(POSTGRES_URL, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        admin.dispose()


def database_exists(url: str) -> bool:
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        return Path(str(parsed.database)).exists()
    assert POSTGRES_URL is not None
    admin = create_engine(POSTGRES_URL)
    try:
        with admin.connect() as conn:
            return bool(conn.execute(text("SELECT 1 FROM pg_database WHERE datname = :name"),
                                     {"name": parsed.database}).scalar())
    finally:
        admin.dispose()


@pytest.mark.parametrize("args", [["current"], ["downgrade", "base"], ["downgrade", "-1"]], ids=" ".join)
def test_current_and_downgrade_create_no_database(missing_url: str, tmp_path: Path,
                                                              args: list[str]) -> None:
    line = one_line(invoke("--db", missing_url, *args), 1)
    if missing_url.startswith("sqlite"):
        assert line == (f"error 911: Database '{tmp_path / 'missing.db'}' does not exist. Make sure that the "
                        "name is entered correctly (broker init creates a database).")
        assert list(tmp_path.iterdir()) == []  # no database, -wal, -shm, -lock, -runtimes, nor out.jsonl
    else:  # the server refuses: a PostgreSQL database is never created
        name = make_url(missing_url).database
        assert line.startswith(f'error 4060: Cannot open database "{name}" requested by the login.'), line
    assert not database_exists(missing_url)


def test_an_instance_or_member_that_is_not_there_is_911(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    instance = f"sqlite:///{tmp_path / 'instance.db'}"
    assert one_line(invoke("--instance", instance, "current"), 1).startswith("error 911: Database '")
    assert list(tmp_path.iterdir()) == []
    member = tmp_path / "member.db"
    assert invoke("--instance", instance, "database", "add", "M", f"sqlite:///{member}").exit_code == 0
    for companion in tmp_path.glob("member.db*"):
        companion.unlink()
    line = one_line(invoke("--instance", instance, "--database", "M", "current"), 1)
    assert line.startswith(f"error 911: Database '{member}' does not exist."), line
    assert not member.exists()


@pytest.mark.parametrize("args", [["init"], ["upgrade"], ["create", "queue", "Q"], ["sql", "-c", "PRINT 'x'"]],
                         ids=" ".join)
def test_a_command_that_sets_a_database_up_creates_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      args: list[str]) -> None:
    monkeypatch.chdir(tmp_path)
    url = f"sqlite:///{tmp_path / 'new.db'}"
    assert invoke("--db", url, *args).exit_code == 0
    assert invoke("--db", url, "current").stdout == f"{schema.HEAD_REVISION} (head)\n"


def test_database_add_creates_the_instance_and_the_member(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    instance = f"sqlite:///{tmp_path / 'instance.db'}"
    assert invoke("--instance", instance, "database", "add", "M", f"sqlite:///{tmp_path / 'm.db'}").exit_code == 0
    assert (tmp_path / "instance.db").exists() and (tmp_path / "m.db").exists()


# -- URL variables set but empty ----------------------------------------------------------


@pytest.mark.parametrize(("env", "option"), [({"BROKER_URL": ""}, "--db"), ({"BROKER_INSTANCE": ""}, "--instance"),
                                             ({"BROKER_DATABASE": "", "BROKER_INSTANCE": "sqlite:///i.db"},
                                              "--database")],
                         ids=["BROKER_URL", "BROKER_INSTANCE", "BROKER_DATABASE"])
def test_a_variable_set_but_empty_is_a_usage_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   env: dict[str, str | None], option: str) -> None:
    monkeypatch.chdir(tmp_path)
    variable = next(iter(env))
    for args in (["status"], ["init"], ["history"]):
        line = one_line(invoke(*args, env=env), 2)
        assert line.startswith(f"error: Invalid value for '{option}': {variable} is set but empty"), line
    assert list(tmp_path.iterdir()) == []  # not the default broker.db


def test_an_empty_broker_database_is_no_matter_without_an_instance(tmp_path: Path) -> None:
    """BROKER_DATABASE is read only with --instance: empty beside --db, it changes nothing."""
    url = f"sqlite:///{tmp_path / 'one.db'}"
    assert invoke("--db", url, "init", env={"BROKER_DATABASE": ""}).exit_code == 0
    result = invoke("--db", url, "current", env={"BROKER_DATABASE": ""})
    assert result.exit_code == 0 and result.stdout == f"{schema.HEAD_REVISION} (head)\n", result.stderr


@pytest.mark.parametrize("option", ["--db", "--instance"])
def test_an_option_given_empty_is_a_usage_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, option: str) -> None:
    monkeypatch.chdir(tmp_path)
    line = one_line(invoke(option, "", "status"), 2)
    assert line.startswith(f"error: Invalid value for '{option}': it is empty"), line
    assert list(tmp_path.iterdir()) == []


def test_the_command_line_wins_over_a_variable_set_but_empty(db_url: str) -> None:
    broker.connect(db_url).dispose()
    result = invoke("--db", db_url, "current", env={"BROKER_URL": ""})
    assert result.exit_code == 0 and result.stdout == f"{schema.HEAD_REVISION} (head)\n", result.stderr


# -- broker export stopped by a signal ------------------------------------------------------

# The export of a subprocess stops at its first message and waits for a signal, its
# temporary file open: BROKER_TEST_HELD is touched then.
HELD_EXPORT = """
import os, signal, sys
from pathlib import Path
from cli import bulk

def held(message):
    Path(os.environ["BROKER_TEST_HELD"]).touch()
    while True:
        signal.pause()

bulk.message_line = held
from cli.main import cli
cli(sys.argv[1:])
"""


@pytest.fixture
def queue_url(db_url: str) -> str:
    """A database whose queue holds one message."""
    db = broker.connect(db_url)
    try:
        db.create_queue(QUEUE)
        db.create_service(SERVICE, QUEUE, ["DEFAULT"])
        with db.transaction() as tx:
            tx.send(tx.begin_dialog(SERVICE, SERVICE), body=b"<exported/>")
    finally:
        db.dispose()
    return db_url


@pytest.fixture
def started() -> Iterator[list[subprocess.Popen[str]]]:
    """The processes a test starts, killed at its end if they still run (a failed test)."""
    processes: list[subprocess.Popen[str]] = []
    yield processes
    for process in processes:
        if process.poll() is None:
            process.kill()
            process.communicate()


def held_export(started: list[subprocess.Popen[str]], url: str, target: Path, held: Path) -> subprocess.Popen[str]:
    """An export to ``target`` held at its first message, once it is (its temporary file made)."""
    process = subprocess.Popen(
        [sys.executable, "-c", HELD_EXPORT, "--db", url, "export", QUEUE, str(target)],
        env={**os.environ, "BROKER_TEST_HELD": str(held)}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, cwd=target.parent,
    )
    started.append(process)
    wait_until(lambda: held.exists() or process.poll() is not None, timeout=PROCESS_TIMEOUT_S)
    assert process.poll() is None, process.communicate()
    return process


def temporaries(folder: Path) -> list[str]:
    return sorted(path.name for path in folder.iterdir() if path.name.startswith(".broker-"))


@pytest.mark.parametrize(("sig", "status"), [(signal.SIGTERM, 143), (signal.SIGHUP, 129), (signal.SIGINT, 1)],
                         ids=["SIGTERM", "SIGHUP", "SIGINT"])
def test_an_export_ended_by_a_signal_removes_its_temporary_file(queue_url: str, tmp_path: Path,
                                                                started: list[subprocess.Popen[str]],
                                                                sig: signal.Signals, status: int) -> None:
    folder = tmp_path / "exports"
    folder.mkdir()
    target = folder / "out.jsonl"
    target.write_text("the export of yesterday\n")
    process = held_export(started, queue_url, target, tmp_path / "held")
    assert [name.endswith(".tmp") for name in temporaries(folder)] == [True]
    process.send_signal(sig)
    _, stderr = process.communicate(timeout=PROCESS_TIMEOUT_S)
    assert process.returncode == status, stderr
    assert "Traceback" not in stderr
    assert temporaries(folder) == []
    assert target.read_text() == "the export of yesterday\n"


def test_an_export_after_a_sigkill_removes_the_stale_file_and_leaves_a_live_one(
    queue_url: str, tmp_path: Path, started: list[subprocess.Popen[str]]
) -> None:
    folder = tmp_path / "exports"
    folder.mkdir()
    killed = held_export(started, queue_url, folder / "killed.jsonl", tmp_path / "held-killed")
    [stale] = temporaries(folder)
    killed.kill()
    killed.communicate(timeout=PROCESS_TIMEOUT_S)
    assert temporaries(folder) == [stale]  # SIGKILL leaves it

    live = held_export(started, queue_url, folder / "live.jsonl", tmp_path / "held-live")
    [live_file] = set(temporaries(folder)) - {stale}
    target = folder / "out.jsonl"
    result = invoke("--db", queue_url, "export", QUEUE, str(target))
    assert result.exit_code == 0, result.stderr
    [line] = target.read_text().splitlines()
    assert json.loads(line)["message_body"] == "<exported/>"
    assert temporaries(folder) == [live_file]  # the stale one removed, the live one left

    live.send_signal(signal.SIGTERM)
    live.communicate(timeout=PROCESS_TIMEOUT_S)
    assert temporaries(folder) == []


# -- alembic upgrade --sql -----------------------------------------------------------------

OFFLINE_URLS = {"sqlite": "sqlite:///offline.db",
                "postgresql": "postgresql+psycopg://nobody@127.0.0.1:1/offline"}  # nothing listens: never reached


def alembic(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k != "BROKER_URL"}
    return subprocess.run([str(ALEMBIC_SCRIPT), "-c", str(REPOSITORY / "alembic.ini"), *args],
                          env={**clean, **(env or {})}, cwd=tmp_path, capture_output=True, text=True,
                          timeout=PROCESS_TIMEOUT_S, check=False)


@pytest.mark.parametrize("dialect", list(OFFLINE_URLS))
def test_offline_sql_is_written_for_each_dialect(tmp_path: Path, dialect: str) -> None:
    done = alembic(tmp_path, "-x", f"url={OFFLINE_URLS[dialect]}", "upgrade", "0004:head", "--sql")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert f" -> {schema.HEAD_REVISION}\n" in done.stdout  # down to the last revision
    assert "CREATE VIEW" in done.stdout and done.stdout.rstrip().endswith("COMMIT;")
    quoted_view = 'sys."' if dialect == "postgresql" else '"sys.'
    assert quoted_view in done.stdout  # the dialect asked for, not alembic.ini's SQLite
    assert list(tmp_path.iterdir()) == []  # no database was opened


@pytest.mark.parametrize(("dialect", "span", "revision"), [
    ("sqlite", "head", "0001"),  # its seed's timestamp: no SQLite literal of the broker's type
    ("postgresql", "head", "0004"),  # the first that reads rows
    ("sqlite", "0003:0004", "0004"),
    ("postgresql", "0003:0004", "0004"),
])
def test_offline_sql_that_cannot_be_written_fails_in_one_line(tmp_path: Path, dialect: str, span: str,
                                                              revision: str) -> None:
    done = alembic(tmp_path, "upgrade", span, "--sql", env={"BROKER_URL": OFFLINE_URLS[dialect]})
    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    [failed] = [line for line in done.stdout.splitlines() if line.startswith("FAILED:")]
    assert failed.startswith(f"FAILED: revision {revision} cannot be written as SQL offline"), failed
    assert failed.endswith(f"alembic upgrade {revision}:head --sql"), failed
    assert list(tmp_path.iterdir()) == []


def test_offline_sql_refuses_broker_url_set_but_empty(tmp_path: Path) -> None:
    done = alembic(tmp_path, "upgrade", "head", "--sql", env={"BROKER_URL": ""})
    assert done.returncode != 0
    assert "FAILED: BROKER_URL is set but empty" in done.stdout + done.stderr
    assert list(tmp_path.iterdir()) == []
