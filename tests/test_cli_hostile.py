"""Hostile input through the ``broker`` command (issue 18), on SQLite and PostgreSQL.

Whatever the input, a command prints one line on stderr and never a traceback: a usage
error exits 2 and says where the help is, a broker error exits 1 as ``error <number>:
<text>``, and anything unexpected exits 1 too. ``--debug`` (or ``BROKER_DEBUG=1``) shows
the traceback instead. A committed baseline (a queue holding one message) stays as it
was, and on SQLite ``PRAGMA integrity_check`` stays ok.

Also here: opening a database refuses bad URLs and files with numbered errors, and the
command starts without SQLAlchemy, Alembic or rich until it needs them.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError

import broker
from broker import arguments
from broker.arguments import BIGINT_MAX, INT_MAX, SMALLINT_MAX
from broker.errors import BAD_URL, DATABASE_FAILURE, DRIVER_MISSING, ArgumentTypeError, InvalidArgumentError
from broker.storage import schema
from broker.storage.engine import create_broker_engine
from cli import status as status_command
from cli.main import cli

INITIATOR = "//hostile/Initiator"
TARGET = "//hostile/Target"
SCRATCH = "//hostile/Scratch"
BASELINE_QUEUE = "BaselineQueue"
SCRATCH_QUEUE = "ScratchQueue"
BASELINE_BODY = b"<baseline>committed before the hostile input</baseline>"
UNKNOWN_HANDLE = "6F9619FF-8B86-D011-B42D-00C04FC964FF"
BROKER_SCRIPT = Path(sys.executable).with_name("broker")
EXAMPLES = 8  # per option, per backend: the suite stays quick
LONG_EXAMPLES = 200  # pytest -m slow tests/test_cli_hostile.py


# -- the world: a baseline the hostile input must not harm -----------------------------


@dataclass(frozen=True)
class World:
    url: str
    db: broker.Broker
    baseline: list[tuple[object, ...]]
    instance_url: str  # an instance catalog (a SQLite file) for the --instance commands

    def intact(self) -> None:
        """The baseline queue holds exactly what was committed, and SQLite's file is sound."""
        assert rows_of(self.db) == self.baseline
        database = make_url(self.url)
        if database.get_backend_name() == "sqlite":
            with sqlite3.connect(str(database.database)) as conn:
                assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)


def rows_of(db: broker.Broker) -> list[tuple[object, ...]]:
    return [
        (m.conversation_handle, m.message_sequence_number, m.message_type_name, m.message_body, m.status)
        for m in db.queue_rows(BASELINE_QUEUE)
    ]


@pytest.fixture
def world(db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    """Three services: the initiator's, the target's on the baseline queue (one message
    committed on it) and a scratch one that hostile sends may reach."""
    monkeypatch.chdir(tmp_path)  # files that a hostile value names land here
    for forcing in ("FORCE_COLOR", "TTY_COMPATIBLE"):
        monkeypatch.delenv(forcing, raising=False)
    db = broker.connect(db_url)
    for queue in ("InitiatorQueue", BASELINE_QUEUE, SCRATCH_QUEUE):
        db.create_queue(queue)
    db.create_service(INITIATOR, "InitiatorQueue")
    db.create_service(TARGET, BASELINE_QUEUE, ["DEFAULT"])
    db.create_service(SCRATCH, SCRATCH_QUEUE, ["DEFAULT"])
    with db.transaction() as tx:
        tx.send(tx.begin_dialog(INITIATOR, TARGET), body=BASELINE_BODY)
    baseline = rows_of(db)
    assert [row[3] for row in baseline] == [BASELINE_BODY]
    yield World(db_url, db, baseline, f"sqlite:///{tmp_path / 'instance.db'}")
    db.dispose()


def invoke(world: World, *args: str, input: str | bytes | None = None) -> Result:
    return CliRunner().invoke(cli, ["--db", world.url, *args], input=input)


# -- what every outcome must look like ---------------------------------------------------


def well_behaved(result: Result) -> str | None:
    """Check the outcome of any input; return the error line (None on success)."""
    assert "Traceback" not in result.stdout + result.stderr, result.stderr
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    if result.exit_code == 0:
        return None
    assert result.exit_code in (1, 2), (result.exit_code, result.stderr)
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    [line] = lines
    assert line.startswith("error"), line
    assert not line.startswith("error: unexpected "), line  # a bug escaped
    if result.exit_code == 2:
        assert line.startswith("error: ") and line.endswith(" --help'."), line
    return line


def usage_error(result: Result) -> str:
    line = well_behaved(result)
    assert result.exit_code == 2 and line is not None, (result.exit_code, result.stderr)
    return line


def broker_error(result: Result, number: int) -> str:
    line = well_behaved(result)
    assert result.exit_code == 1 and line is not None, (result.exit_code, result.stderr)
    assert line.startswith(f"error {number}: "), line
    return line


# -- known cases -------------------------------------------------------------------------

SEND = ("send", "--from", INITIATOR, "--to", SCRATCH)

USAGE_ERRORS: list[tuple[str, ...]] = [
    ("receive", SCRATCH_QUEUE, "--top", str(BIGINT_MAX + 1)),
    ("receive", SCRATCH_QUEUE, "--top", "99999999999999999999"),
    ("receive", SCRATCH_QUEUE, "--top", "0"),
    ("receive", SCRATCH_QUEUE, "--top", "1.5"),
    *(("receive", SCRATCH_QUEUE, "--wait", wait) for wait in ("nan", "inf", "-inf", "-5", "1e30", "soon")),
    *(("timer", UNKNOWN_HANDLE, seconds) for seconds in ("1e30", "nan", "inf", "-1", str(INT_MAX + 1))),
    *(("end", UNKNOWN_HANDLE, "--error", code, "--description", "d") for code in ("99999999999", "-99999999999")),
    ("end", "not-a-handle"),
    ("end", "\x00"),
    (*SEND, "--count", "99999999999999"),
    (*SEND, "--count", "0"),
    (*SEND, "--batch", str(INT_MAX + 1)),
    (*SEND, "--body", "\ud800"),
    (*SEND, "--body-file", "a\x00b"),
    ("send", "--from", "\x00", "--to", SCRATCH),
    ("send", "--from", INITIATOR, "--to", "x" * (arguments.NVARCHAR_256 + 1)),
    ("send", "--from", INITIATOR, "--to", SCRATCH, "--type", ""),
    *(("create", "queue", "Q", "--activation-procedure", "m:f", "--max-queue-readers", readers)
      for readers in (str(SMALLINT_MAX + 1), "-1", "99999999999999999999")),
    *(("create", "queue", name) for name in ("", "\x00", "a\x00b", "\ud800", "q" * (arguments.SYSNAME + 1))),
    ("create", "service", "s" * 10_000, "--queue", SCRATCH_QUEUE),
    ("create", "contract", "C", "--message", "a\x00b:INITIATOR"),
    ("create", "priority", "P", "--level", "99999"),
    ("create", "queue", "Q", "--execute-as", "u" * (arguments.SYSNAME + 1)),
    ("create", "xml-schema-collection", "X", "--file", "a\x00b"),
    ("alter", "queue", SCRATCH_QUEUE, "--max-queue-readers", str(SMALLINT_MAX + 1)),
    ("drop", "queue", ""),
    ("show", "nothing"),
    ("receive", ""),
    ("peek", "Q\x00"),
    *(("status", "--watch", "--interval", interval, "--iterations", "1") for interval in ("nan", "inf", "-1")),
    ("status", "--watch", "--iterations", str(INT_MAX + 1)),
    *(("run", "--poll", poll) for poll in ("nan", "inf", "0", "1e30")),
    ("listen", SCRATCH_QUEUE, "--count", "0"),
    ("export", BASELINE_QUEUE, "out.jsonl", "--page-size", "0"),
    ("export", BASELINE_QUEUE, "a\x00b"),
    ("import", SCRATCH, "-", "--from", INITIATOR, "--batch", str(INT_MAX + 1)),
    ("spark-demo", "--orders", str(INT_MAX + 1)),
    ("nosuchcommand",),
    ("receive", SCRATCH_QUEUE, "--nosuch"),
    ("create", "route", "R"),
    ("create", "route", "", "--address", "LOCAL"),
    ("create", "route", "R", "--address", "a\x00b"),
    *(("create", "route", "R", "--address", "LOCAL", "--lifetime", lifetime)
      for lifetime in ("0", "-1", str(INT_MAX + 1), "1.5", "99999999999999999999")),
    ("create", "route", "R", "--address", "LOCAL", "--service", "//s", "--broker-instance", "g" * 129),
    ("create", "route", "R", "--address", "LOCAL", "--service", "s" * (arguments.NVARCHAR_256 + 1)),
    ("alter", "route", "AutoCreatedLocal"),
    ("drop", "route", ""),
    ("create", "remote-service-binding", "B", "--service", "//s", "--user", "U", "--anonymous", "maybe"),
    ("create", "remote-service-binding", "B", "--service", "//s"),
    ("create", "remote-service-binding", "B", "--service", "//s", "--user", "u" * (arguments.SYSNAME + 1)),
    ("alter", "remote-service-binding", "B"),
    ("database", "list"),
    ("--database", "TargetDB", "status"),
    ("demo", "--folder", "."),
    ("demo", "--between-databases", "--folder", "no-such-folder"),
    ("demo", "--between-instances", "--folder", "no-such-folder"),
    ("demo", "--between-databases", "--between-instances"),
]


def test_a_bad_value_is_a_usage_error(world: World) -> None:
    for args in USAGE_ERRORS:
        result = invoke(world, *args)
        assert result.exit_code == 2, (args, result.stderr)
        usage_error(result)
    world.intact()


@pytest.mark.parametrize("args", [[], ["create"]], ids=["broker", "broker create"])
def test_a_group_given_no_command_prints_its_help(args: list[str]) -> None:
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2 and result.stderr.startswith(f"Usage: {' '.join(['broker', *args])} ")
    assert "Commands:" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize(
    "url",
    [
        "",
        "nonsense",
        "foo://x",
        "mysql://u@h/db",
        "postgresql+asyncpg://u@h/db",
        "sqlite+aiosqlite:///x.db",
        "sqlite://",
        "sqlite:///:memory:",
        "sqlite:///file::memory:?cache=shared",
        "sqlite:///a\x00b.db",
        "x" * 10_000,
    ],
)
def test_a_url_of_the_wrong_form_is_a_usage_error(url: str) -> None:
    result = CliRunner().invoke(cli, ["--db", url, "status"])
    line = usage_error(result)
    assert "'--db'" in line and line.endswith("See 'broker --help'."), line


def test_a_folder_that_is_not_there_is_error_5120_naming_it(tmp_path: Path) -> None:
    folder = tmp_path / "no" / "such" / "folder"
    line = broker_error(CliRunner().invoke(cli, ["--db", f"sqlite:///{folder / 'x.db'}", "init"]), 5120)
    assert f"create it first (mkdir -p {folder})" in line
    assert not (tmp_path / "no").exists()  # the broker creates the file, never its folder


@pytest.mark.parametrize("blocker", ["a regular file", "a folder", "not a database"])
def test_a_file_sqlite_cannot_open_is_error_5120(tmp_path: Path, blocker: str) -> None:
    (tmp_path / "file").write_text("not a folder")
    (tmp_path / "junk.db").write_text("this is not a SQLite database, it is text")
    path = {"a regular file": tmp_path / "file" / "x.db", "a folder": tmp_path,
            "not a database": tmp_path / "junk.db"}[blocker]
    broker_error(CliRunner().invoke(cli, ["--db", f"sqlite:///{path}", "status"]), 5120)


def test_a_missing_driver_is_error_59010_with_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "psycopg", None)  # import psycopg now fails
    result = CliRunner().invoke(cli, ["--db", "postgresql+psycopg://u@127.0.0.1/db", "status"])
    assert "pip install 'servicebroker[postgres]'" in broker_error(result, DRIVER_MISSING)


def test_a_server_that_is_not_there_is_a_numbered_database_failure() -> None:
    result = CliRunner().invoke(cli, ["--db", "postgresql+psycopg://u@127.0.0.1:1/db", "status"])
    broker_error(result, DATABASE_FAILURE)


def test_broker_errors_exit_1_with_their_number(world: World) -> None:
    broker_error(invoke(world, "end", UNKNOWN_HANDLE), 8426)
    broker_error(invoke(world, "timer", UNKNOWN_HANDLE, str(INT_MAX)), 8426)
    broker_error(invoke(world, "end", UNKNOWN_HANDLE, "--error", str(INT_MAX), "--description", "d"), 8426)
    world.intact()


def test_the_largest_values_of_each_type_are_taken(world: World) -> None:
    """The bounds themselves are no usage error: TOP is a bigint, readers a smallint."""
    assert well_behaved(invoke(world, "receive", SCRATCH_QUEUE, "--top", str(BIGINT_MAX), "--wait", "0")) is None
    readers = ("--activation-procedure", "m:f", "--max-queue-readers", str(SMALLINT_MAX))
    assert well_behaved(invoke(world, "create", "queue", "Busy", *readers)) is None
    assert well_behaved(invoke(world, "create", "queue", "q" * arguments.SYSNAME)) is None
    world.intact()


# -- failures nobody planned for ------------------------------------------------------------


def _fail_with(monkeypatch: pytest.MonkeyPatch, exc: Exception) -> None:
    def failing(*_args: object) -> None:
        raise exc

    monkeypatch.setattr(status_command, "_summary", failing)


@pytest.mark.parametrize(
    ("exc", "line"),
    [
        (RuntimeError("boom\nand more"), "error: unexpected RuntimeError: boom and more "
                                         "(run again with --debug to see the traceback)"),
        (OSError(28, "No space left on device"), "error: [Errno 28] No space left on device"),
        (OperationalError("SELECT 1", {}, Exception("disk I/O error")),
         f"error {DATABASE_FAILURE}: The database failed: disk I/O error"),
    ],
    ids=["a bug", "an OSError", "a database failure"],
)
def test_an_unexpected_failure_is_one_line_and_exit_1(
    world: World, monkeypatch: pytest.MonkeyPatch, exc: Exception, line: str
) -> None:
    _fail_with(monkeypatch, exc)
    result = invoke(world, "status")
    assert (result.exit_code, result.stderr) == (1, line + "\n")


def test_debug_shows_the_traceback_instead(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    debugged = invoke(world, "--debug", "end", UNKNOWN_HANDLE)
    assert debugged.exit_code == 1
    assert "Traceback (most recent call last)" in debugged.stderr and "8426" in debugged.stderr

    from_env = CliRunner().invoke(cli, ["--db", world.url, "end", UNKNOWN_HANDLE], env={"BROKER_DEBUG": "1"})
    assert from_env.exit_code == 1 and "Traceback" in from_env.stderr

    _fail_with(monkeypatch, RuntimeError("boom"))
    bug = CliRunner().invoke(cli, ["--debug", "--db", world.url, "status"])
    assert bug.exit_code == 1 and bug.stderr.splitlines()[-1] == "RuntimeError: boom"

    usage = CliRunner().invoke(cli, ["--debug", "--db", world.url, "receive", SCRATCH_QUEUE, "--wait", "nan"])
    usage_error(usage)  # a usage error has no traceback to show


# -- hypothesis: every option against extreme values ------------------------------------------

INTS = st.one_of(
    st.sampled_from([-1, 0, 1, INT_MAX, INT_MAX + 1, -INT_MAX - 2, BIGINT_MAX, BIGINT_MAX + 1, 10**20, -(10**20)]),
    st.integers(),
).map(str) | st.just("1" * 5000)
FLOATS = st.sampled_from(
    ["nan", "NaN", "inf", "-inf", "Infinity", "1e30", "1e308", "1e309", "-5", "-0.0", "1e-300", "0x10", "1_0"]
) | st.floats().map(repr)
TEXT = st.one_of(
    st.sampled_from(["", " ", "x" * 10_000, "\x00", "a\x00b", "\ud800", "\udcff", "\n", "-", "DEFAULT", "ANY"]),
    st.text(alphabet=st.characters(max_codepoint=0x1F), max_size=20),  # control characters
    st.text(max_size=300),
)
VALUES = st.one_of(INTS, FLOATS, TEXT)
# Relative names only: whatever a hostile value names is made in the test's folder.
FILE_NAMES = VALUES.filter(lambda name: not name.startswith("/") and ".." not in name)
URLS = st.one_of(
    VALUES,
    FILE_NAMES.map(lambda name: f"sqlite:///{name.replace('/', '_')}"),
    st.sampled_from(["postgresql+psycopg://u@127.0.0.1:1/db", "sqlite:///:memory:", "mysql://u@h/db"]),
)
JSON_VALUES = st.one_of(VALUES, st.none(), st.booleans(), st.floats(), st.lists(st.integers(), max_size=3))
IMPORT_LINES = st.one_of(
    st.binary(max_size=200),
    st.fixed_dictionaries(
        {},
        optional={
            key: JSON_VALUES
            for key in ("message_type_name", "message_body", "message_body_encoding", "conversation_handle",
                        "service_contract_name", "service_name")
        },
    ).map(lambda line: json.dumps(line).encode()),
)


def _parses(value: str, parse: Callable[[str], object]) -> object | None:
    try:
        return parse(value)
    except (ValueError, OverflowError, InvalidArgumentError, ArgumentTypeError):
        return None


def _waits(value: str) -> bool:
    """Would --wait make RECEIVE on an empty queue wait (forever or noticeably)?"""
    wait = _parses(value, lambda text: arguments.wait_time(float(text)))
    return wait is not None and (wait == arguments.FOREVER or float(wait) > 0.01)  # type: ignore[arg-type]


def _many(value: str) -> bool:
    """Would the value, taken as a count, make the command run long?"""
    number = _parses(value, int)
    return isinstance(number, int) and 3 < number <= INT_MAX


@dataclass(frozen=True)
class Slot:
    """One place a value goes: the command line with ``VALUE`` where it goes, and the
    values to try there."""

    name: str
    args: tuple[str, ...]
    values: st.SearchStrategy[str] = VALUES


VALUE = "\x00VALUE\x00"  # stands for the value drawn
INSTANCE = "\x00INSTANCE\x00"  # stands for the world's instance catalog URL

SLOTS = [
    Slot("--db", ("--db", VALUE, "status"), URLS),
    Slot("receive QUEUE", ("receive", VALUE)),
    Slot("receive --top", ("receive", SCRATCH_QUEUE, "--top", VALUE)),
    Slot("receive --wait", ("receive", SCRATCH_QUEUE, "--wait", VALUE), VALUES.filter(lambda v: not _waits(v))),
    Slot("receive --handle", ("receive", SCRATCH_QUEUE, "--handle", VALUE)),
    Slot("receive --group", ("receive", SCRATCH_QUEUE, "--group", VALUE)),
    Slot("peek QUEUE", ("peek", VALUE)),
    Slot("send --from", ("send", "--from", VALUE, "--to", SCRATCH)),
    Slot("send --to", ("send", "--from", INITIATOR, "--to", VALUE)),
    Slot("send --contract", (*SEND, "--contract", VALUE)),
    Slot("send --type", (*SEND, "--type", VALUE)),
    Slot("send --body", (*SEND, "--body", VALUE)),
    Slot("send --body-file", (*SEND, "--body-file", VALUE), FILE_NAMES),
    Slot("send --handle", ("send", "--handle", VALUE)),
    Slot("send --count", (*SEND, "--count", VALUE), VALUES.filter(lambda v: not _many(v))),
    Slot("send --batch", (*SEND, "--batch", VALUE)),
    Slot("end HANDLE", ("end", VALUE)),
    Slot("end --error", ("end", UNKNOWN_HANDLE, "--error", VALUE, "--description", "d")),
    Slot("end --description", ("end", UNKNOWN_HANDLE, "--error", "1", "--description", VALUE)),
    Slot("timer SECONDS", ("timer", UNKNOWN_HANDLE, VALUE)),
    Slot("create queue NAME", ("create", "queue", VALUE)),
    Slot("create queue --max-queue-readers",
         ("create", "queue", "Activated", "--activation-procedure", "m:f", "--max-queue-readers", VALUE)),
    Slot("create queue --activation-procedure", ("create", "queue", "Activated", "--activation-procedure", VALUE)),
    Slot("create queue --execute-as", ("create", "queue", "Activated", "--execute-as", VALUE)),
    Slot("create queue --status", ("create", "queue", "Off", "--status", VALUE)),
    Slot("alter queue --max-queue-readers", ("alter", "queue", SCRATCH_QUEUE, "--max-queue-readers", VALUE)),
    Slot("create message-type NAME", ("create", "message-type", VALUE)),
    Slot("create contract --message", ("create", "contract", "C", "--message", VALUE)),
    Slot("create service NAME", ("create", "service", VALUE, "--queue", SCRATCH_QUEUE)),
    Slot("create service --queue", ("create", "service", "//s", "--queue", VALUE)),
    Slot("create priority --level", ("create", "priority", "P", "--level", VALUE)),
    Slot("create priority --remote-service", ("create", "priority", "P", "--remote-service", VALUE)),
    Slot("drop queue NAME", ("drop", "queue", VALUE)),
    Slot("show LISTING", ("show", VALUE)),
    Slot("status --interval", ("status", "--watch", "--interval", VALUE, "--iterations", "1")),
    Slot("status --iterations", ("status", "--watch", "--interval", "0", "--iterations", VALUE),
         VALUES.filter(lambda v: not _many(v))),
    Slot("export FILE", ("export", BASELINE_QUEUE, VALUE), FILE_NAMES),
    Slot("export --page-size", ("export", BASELINE_QUEUE, "-", "--page-size", VALUE)),
    Slot("import --batch", ("import", SCRATCH, "-", "--from", INITIATOR, "--batch", VALUE)),
    Slot("upgrade REVISION", ("upgrade", VALUE)),
    Slot("--instance", ("--instance", VALUE, "status"), URLS),
    Slot("--database", ("--instance", INSTANCE, "--database", VALUE, "show", "queues")),
    Slot("database add NAME", ("--instance", INSTANCE, "database", "add", VALUE, "sqlite:///member.db")),
    Slot("database add URL", ("--instance", INSTANCE, "database", "add", "Member", VALUE), URLS),
    Slot("database remove NAME", ("--instance", INSTANCE, "database", "remove", VALUE)),
    Slot("create route NAME", ("create", "route", VALUE, "--address", "LOCAL")),
    Slot("create route --address", ("create", "route", "R", "--address", VALUE)),
    Slot("create route --service", ("create", "route", "R", "--address", "LOCAL", "--service", VALUE)),
    Slot("create route --broker-instance",
         ("create", "route", "R", "--address", "LOCAL", "--service", "//s", "--broker-instance", VALUE)),
    Slot("create route --lifetime", ("create", "route", "R", "--address", "LOCAL", "--lifetime", VALUE)),
    Slot("create route --mirror-address",
         ("create", "route", "R", "--address", "TCP://a:1", "--service", "//s", "--broker-instance", "G",
          "--mirror-address", VALUE)),
    Slot("alter route --address", ("alter", "route", "AutoCreatedLocal", "--address", VALUE)),
    Slot("alter route --lifetime", ("alter", "route", "AutoCreatedLocal", "--lifetime", VALUE)),
    Slot("drop route NAME", ("drop", "route", VALUE)),
    Slot("--instance create route NAME", ("--instance", INSTANCE, "create", "route", VALUE, "--address", "LOCAL")),
    Slot("--instance alter route --address", ("--instance", INSTANCE, "alter", "route", "AutoCreatedLocal",
                                              "--address", VALUE)),
    Slot("create remote-service-binding NAME",
         ("create", "remote-service-binding", VALUE, "--service", "//s", "--user", "U")),
    Slot("create remote-service-binding --service",
         ("create", "remote-service-binding", "B", "--service", VALUE, "--user", "U")),
    Slot("create remote-service-binding --user",
         ("create", "remote-service-binding", "B", "--service", "//s", "--user", VALUE)),
    Slot("create remote-service-binding --anonymous",
         ("create", "remote-service-binding", "B", "--service", "//s", "--user", "U", "--anonymous", VALUE)),
    Slot("alter remote-service-binding --user", ("alter", "remote-service-binding", "B", "--user", VALUE)),
    Slot("drop remote-service-binding NAME", ("drop", "remote-service-binding", VALUE)),
    Slot("demo --folder", ("demo", "--between-databases", "--folder", VALUE), FILE_NAMES),
]


@pytest.mark.parametrize("slot", SLOTS, ids=lambda slot: slot.name)
def test_any_value_in_any_option(world: World, slot: Slot) -> None:
    any_value_in(world, slot, EXAMPLES)


@pytest.mark.slow
@pytest.mark.timeout(3600)
@pytest.mark.parametrize("slot", SLOTS, ids=lambda slot: slot.name)
def test_any_value_in_any_option_long_run(world: World, slot: Slot) -> None:
    any_value_in(world, slot, LONG_EXAMPLES)


def any_value_in(world: World, slot: Slot, examples: int) -> None:
    @settings(max_examples=examples, deadline=None, database=None)
    @given(value=slot.values)
    def one_value(value: str) -> None:
        args = [value if arg == VALUE else world.instance_url if arg == INSTANCE else arg for arg in slot.args]
        given_target = args[0] in ("--db", "--instance")
        well_behaved(CliRunner().invoke(cli, args if given_target else ["--db", world.url, *args]))
        world.intact()

    one_value()


def test_any_line_to_import(world: World) -> None:
    @settings(max_examples=4 * EXAMPLES, deadline=None, database=None)
    @given(lines=st.lists(IMPORT_LINES, min_size=1, max_size=3))
    def some_lines(lines: list[bytes]) -> None:
        well_behaved(invoke(world, "import", SCRATCH, "-", "--from", INITIATOR, input=b"\n".join(lines)))
        world.intact()

    some_lines()


# -- real processes ------------------------------------------------------------------------


def run_broker(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BROKER_SCRIPT), *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=120,
        check=False,
    )


def test_real_processes_print_one_line_and_the_right_status(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("a file where a folder should be")
    blocked = run_broker("--db", f"sqlite:///{tmp_path / 'file' / 'x.db'}", "status")
    assert blocked.returncode == 1 and blocked.stderr.startswith("error 5120: ")
    assert len(blocked.stderr.splitlines()) == 1

    url = f"sqlite:///{tmp_path / 'real.db'}"
    assert run_broker("--db", url, "init").returncode == 0
    for args in (("receive", "Q", "--wait", "nan"), ("receive", "Q", "--top", "99999999999999999999"),
                 ("timer", UNKNOWN_HANDLE, "1e30"), ("--db", "mysql://u@h/db", "status")):
        usage = run_broker("--db", url, *args)
        assert usage.returncode == 2 and len(usage.stderr.splitlines()) == 1, (args, usage.stderr)
        assert "Traceback" not in usage.stderr

    missing = run_broker("--db", url, "end", UNKNOWN_HANDLE)
    assert (missing.returncode, missing.stderr.count("\n")) == (1, 1) and missing.stderr.startswith("error 8426: ")
    for debug in (run_broker("--debug", "--db", url, "end", UNKNOWN_HANDLE),
                  run_broker("--db", url, "end", UNKNOWN_HANDLE, env={"BROKER_DEBUG": "1"})):
        assert debug.returncode == 1 and "Traceback (most recent call last)" in debug.stderr


def test_a_missing_driver_in_a_real_process() -> None:
    script = "import sys; sys.modules['psycopg'] = None; from cli.main import main; main()"
    process = subprocess.run(
        [sys.executable, "-c", script, "--db", "postgresql+psycopg://u@127.0.0.1/db", "status"],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert process.returncode == 1
    assert process.stderr == ("error 59010: The database driver psycopg is not installed: "
                              "pip install 'servicebroker[postgres]'\n")


# -- opening a database from Python ---------------------------------------------------------


@pytest.mark.parametrize(
    "url", ["nonsense", "foo://x", "mysql://u@h/db", "postgresql+asyncpg://u@h/db", "sqlite:///:memory:",
            "sqlite://", "sqlite:///a\x00b.db"],
)
def test_connect_refuses_a_url_it_cannot_use_with_59011(url: str) -> None:
    with pytest.raises(ValueError) as raised:  # the except style of before still catches it
        broker.connect(url)
    assert isinstance(raised.value, InvalidArgumentError) and raised.value.number == BAD_URL


def test_connect_refuses_a_url_that_is_not_text_with_206() -> None:
    with pytest.raises(TypeError) as raised:
        broker.connect(make_url("sqlite:///x.db"))  # type: ignore[arg-type]
    assert isinstance(raised.value, ArgumentTypeError) and raised.value.number == 206


def test_an_engine_on_a_missing_folder_is_5120_and_makes_no_folder(tmp_path: Path) -> None:
    with pytest.raises(broker.BrokerError) as raised:
        create_broker_engine(f"sqlite:///{tmp_path / 'missing' / 'x.db'}")
    assert raised.value.number == 5120 and "mkdir -p" in raised.value.message
    assert not (tmp_path / "missing").exists()


def test_a_file_that_is_not_a_database_is_5120_from_python(tmp_path: Path) -> None:
    (tmp_path / "junk.db").write_text("this is not a SQLite database, it is text")
    with pytest.raises(broker.BrokerError) as raised:
        broker.connect(f"sqlite:///{tmp_path / 'junk.db'}")
    assert raised.value.number == 5120 and "not a SQLite database" in raised.value.message


def test_opening_leaves_the_locks_this_process_holds_on_the_file(tmp_path: Path) -> None:
    """Checking a file must not open it: closing any descriptor of a file drops every POSIX
    lock the process holds on it, SQLite's own included."""
    path = tmp_path / "locked.db"
    writer = sqlite3.connect(path, isolation_level=None)  # rollback journal: locks on the file
    writer.execute("CREATE TABLE t (x)")
    writer.execute("BEGIN IMMEDIATE")  # a RESERVED lock held by this process
    try_write = f"import sqlite3; sqlite3.connect({str(path)!r}, timeout=0).execute('BEGIN IMMEDIATE')"

    def another_process_can_write() -> bool:
        return subprocess.run([sys.executable, "-c", try_write], capture_output=True, timeout=60).returncode == 0

    assert not another_process_can_write()
    create_broker_engine(f"sqlite:///{path}").dispose()
    assert not another_process_can_write()
    writer.close()


def test_a_missing_driver_is_59010(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "psycopg", None)
    with pytest.raises(broker.BrokerError) as raised:
        broker.connect("postgresql+psycopg://u@127.0.0.1/db")
    assert raised.value.number == DRIVER_MISSING and "servicebroker[postgres]" in raised.value.message


# -- start-up: what loads, and the schema's fast path ------------------------------------------


def modules_after(code: str, cwd: Path | None = None) -> set[str]:
    """The modules a fresh interpreter has loaded after running ``code``."""
    process = subprocess.run(
        [sys.executable, "-c", f"{code}\nimport sys, json; print(json.dumps(sorted(sys.modules)))"],
        capture_output=True, text=True, timeout=120, check=True, cwd=cwd,
        env={k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE")},
    )
    return set(json.loads(process.stdout.splitlines()[-1]))


HEAVY = {"sqlalchemy", "alembic", "rich", "broker.database", "lxml"}


def test_the_command_loads_no_heavy_module_to_start_or_print_help() -> None:
    assert not HEAVY & modules_after("import cli.main")
    helped = "from cli.main import cli\ntry:\n    cli(['--help'])\nexcept SystemExit:\n    pass"
    assert not HEAVY & modules_after(helped)


def test_status_on_a_current_database_loads_neither_alembic_nor_rich(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'current.db'}"
    broker.connect(url).dispose()
    status = f"from cli.main import cli\ntry:\n    cli(['--db', {url!r}, 'status'])\nexcept SystemExit:\n    pass"
    loaded = modules_after(status, cwd=tmp_path)
    assert "broker.database" in loaded  # it did open the database
    assert not {"alembic", "rich"} & loaded


def test_the_schema_head_constant_is_alembics_head() -> None:
    assert schema.HEAD_REVISION == schema.head_revision()


def test_the_lazy_package_exposes_every_public_name() -> None:
    listed = "import broker\nnames = {n: getattr(broker, n) for n in broker.__all__}\nfrom broker import *"
    assert "broker.database" in modules_after(listed)
    assert not HEAVY & modules_after("import broker")
    assert sorted(broker.__all__) == sorted(broker._HOMES)  # type: ignore[attr-defined]
    for name in broker.__all__:
        assert getattr(broker, name) is getattr(sys.modules[broker._HOMES[name]], name)  # type: ignore[attr-defined]
    with pytest.raises(AttributeError):
        broker.no_such_name  # type: ignore[attr-defined]  # noqa: B018


# -- what a command must not lose or damage -------------------------------------------------


def _sqlite_world(tmp_path: Path) -> tuple[str, broker.Broker]:
    """A SQLite database at tmp_path/r.db with the baseline's services and its one message."""
    url = f"sqlite:///{tmp_path / 'r.db'}"
    db = broker.connect(url)
    db.create_queue("InitiatorQueue")
    db.create_queue(BASELINE_QUEUE)
    db.create_service(INITIATOR, "InitiatorQueue")
    db.create_service(TARGET, BASELINE_QUEUE, ["DEFAULT"])
    with db.transaction() as tx:
        tx.send(tx.begin_dialog(INITIATOR, TARGET), body=BASELINE_BODY)
    return url, db


def test_export_refuses_a_file_of_the_database_and_leaves_it_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Exporting into the database's own file (or its -wal, -shm, -lock, -journal, or a link
    to it) truncated the database: now a usage error, and nothing is touched."""
    monkeypatch.chdir(tmp_path)
    url, db = _sqlite_world(tmp_path)
    (tmp_path / "link.db").symlink_to(tmp_path / "r.db")
    try:
        baseline = rows_of(db)
        for target in ("r.db", str(tmp_path / "r.db"), "./r.db-wal", "r.db-shm", "r.db-lock", "r.db-journal",
                       "link.db"):
            sizes = {f.name: f.stat().st_size for f in tmp_path.iterdir() if f.is_file()}
            line = usage_error(CliRunner().invoke(cli, ["--db", url, "export", BASELINE_QUEUE, target]))
            assert "is a file of the database" in line, line
            assert {f.name: f.stat().st_size for f in tmp_path.iterdir() if f.is_file()} == sizes, target
        assert rows_of(db) == baseline
        with sqlite3.connect(tmp_path / "r.db") as conn:
            assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    finally:
        db.dispose()


def test_export_refuses_the_files_of_an_instances_catalog_and_members(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    instance = f"sqlite:///{tmp_path / 'instance.db'}"
    for name in ("A", "B"):
        assert CliRunner().invoke(cli, ["--instance", instance, "database", "add", name,
                                        f"sqlite:///{tmp_path / f'{name}.db'}"]).exit_code == 0
    member_a = ["--instance", instance, "--database", "A"]
    assert CliRunner().invoke(cli, [*member_a, "create", "queue", "Q"]).exit_code == 0
    for target in ("A.db", "B.db", "B.db-wal", "instance.db", "instance.db-lock"):
        size = (tmp_path / target).stat().st_size if (tmp_path / target).exists() else None
        usage_error(CliRunner().invoke(cli, [*member_a, "export", "Q", target]))
        assert ((tmp_path / target).stat().st_size if (tmp_path / target).exists() else None) == size
    listed = CliRunner().invoke(cli, ["--instance", instance, "database", "list"])
    assert listed.exit_code == 0 and "A\t" in listed.stdout and "B\t" in listed.stdout


def test_an_export_that_fails_leaves_the_file_it_would_replace(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The export is written to a new file renamed into place at the end: a failure on the
    way leaves the old file as it was, and no partial file behind."""
    Path("exports").mkdir()
    target = Path("exports", "out.jsonl")
    target.write_text("the export of yesterday\n")
    target.chmod(0o640)
    from cli import bulk

    def failing(_message: object) -> dict[str, object]:
        raise OSError(28, "No space left on device")

    with monkeypatch.context() as patched:
        patched.setattr(bulk, "message_line", failing)
        assert "No space left" in (well_behaved(invoke(world, "export", BASELINE_QUEUE, str(target))) or "")
    assert target.read_text() == "the export of yesterday\n"
    assert sorted(p.name for p in Path("exports").iterdir()) == ["out.jsonl"]
    assert well_behaved(invoke(world, "export", BASELINE_QUEUE, str(target))) is None
    [line] = target.read_text().splitlines()
    assert json.loads(line)["message_body"] == BASELINE_BODY.decode()
    assert target.stat().st_mode & 0o777 == 0o640  # the replaced file keeps its mode
    assert sorted(p.name for p in Path("exports").iterdir()) == ["out.jsonl"]
    world.intact()


def test_receive_whose_output_cannot_be_written_receives_nothing(world: World) -> None:
    """``broker receive Q > /dev/full`` (or into a closed pipe): the RECEIVE is rolled back
    with the output that failed, so the messages stay on the queue."""
    with open("/dev/full", "w") as full:
        process = subprocess.run(
            [str(BROKER_SCRIPT), "--db", world.url, "receive", BASELINE_QUEUE, "--end"],
            stdout=full, stderr=subprocess.PIPE, text=True, timeout=120, check=False,
        )
    assert process.returncode == 1 and "No space left on device" in process.stderr, process.stderr
    assert len(process.stderr.splitlines()) == 1 and "Traceback" not in process.stderr
    world.intact()
    received = invoke(world, "receive", BASELINE_QUEUE)
    assert received.exit_code == 0 and BASELINE_BODY.decode() in received.stdout


@pytest.mark.parametrize("script", [f"RECEIVE * FROM {BASELINE_QUEUE}",
                                    f"BEGIN TRAN; RECEIVE * FROM {BASELINE_QUEUE}; COMMIT"])
def test_sql_receive_whose_rows_cannot_be_written_receives_nothing(world: World, script: str) -> None:
    """``broker sql -c "RECEIVE ..." > /dev/full``: the rows go out inside the statement's
    transaction, so the failed write keeps the messages on the queue."""
    with open("/dev/full", "w") as full:
        process = subprocess.run([str(BROKER_SCRIPT), "--db", world.url, "sql", "-c", script],
                                 stdout=full, stderr=subprocess.PIPE, text=True, timeout=120, check=False)
    assert process.returncode == 1 and "No space left on device" in process.stderr, process.stderr
    assert "Traceback" not in process.stderr
    world.intact()
    received = invoke(world, "receive", BASELINE_QUEUE)
    assert received.exit_code == 0 and BASELINE_BODY.decode() in received.stdout


def test_adding_a_member_again_is_1801_and_changes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same database under another name (a relative path, a link) disabled the member's
    broker (9773's rule for a copy): now 1801. A copy is still attached, disabled."""
    monkeypatch.chdir(tmp_path)
    instance = ["--instance", f"sqlite:///{tmp_path / 'instance.db'}"]
    assert CliRunner().invoke(cli, [*instance, "database", "add", "A", f"sqlite:///{tmp_path / 'a.db'}"]).exit_code == 0
    (tmp_path / "link.db").symlink_to(tmp_path / "a.db")

    def listing() -> str:
        listed = CliRunner().invoke(cli, [*instance, "database", "list"])
        assert listed.exit_code == 0, listed.stderr
        return listed.stdout

    before = listing()
    for url in ("sqlite:///a.db", "sqlite:///./link.db", f"sqlite:///{tmp_path / 'a.db'}"):
        line = broker_error(CliRunner().invoke(cli, [*instance, "database", "add", "B", url]), 1801)
        assert "member 'A'" in line, line
        assert listing() == before
    inst = broker.instance(f"sqlite:///{tmp_path / 'instance.db'}")
    try:
        assert list(inst.databases) == ["A"]
        assert inst.catalog("sys.databases")[0]["is_broker_enabled"]
    finally:
        inst.dispose()


def test_a_file_option_reads_no_further_than_the_largest_value(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An endless stream (/dev/zero) read until the memory ran out: now a body past the
    largest is 8459, and an XSD or a script past it a usage error, read no further."""
    monkeypatch.setattr(arguments, "MAX_BODY_BYTES", 1000)  # instead of 2 GB of zeros
    Path("largest.bin").write_bytes(b"x" * 1000)
    Path("larger.bin").write_bytes(b"x" * 1001)
    broker_error(invoke(world, *SEND, "--body-file", "/dev/zero"), 8459)
    broker_error(invoke(world, *SEND, "--body-file", "larger.bin"), 8459)
    broker_error(invoke(world, *SEND, "--body-file", "-", input=b"x" * 1001), 8459)
    assert well_behaved(invoke(world, *SEND, "--body-file", "largest.bin")) is None
    assert [m.message_body for m in world.db.queue_rows(SCRATCH_QUEUE)] == [b"x" * 1000]
    assert "1000 bytes" in usage_error(invoke(world, "create", "xml-schema-collection", "X", "--file", "/dev/zero"))
    assert "1000 bytes" in usage_error(invoke(world, "sql", "-f", "/dev/zero"))
    assert "1000 bytes" in usage_error(invoke(world, "sql", input=b"-" * 1001))
    world.intact()


def test_import_stopped_by_a_bad_line_says_what_it_sent(world: World) -> None:
    good = [json.dumps({"message_body": f"line {n}"}) for n in range(1, 4)]
    lines = "\n".join([*good, "{not json"]) + "\n"
    line = well_behaved(invoke(world, "import", SCRATCH, "-", "--from", INITIATOR, "--batch", "2", input=lines))
    assert line is not None and line.startswith("error: stdin line 4: not JSON"), line
    assert line.endswith("(2 messages imported before its batch)"), line
    assert len(world.db.queue_rows(SCRATCH_QUEUE)) == 2  # line 3 went with line 4's batch
    world.intact()


@pytest.mark.parametrize("spelling", [f"dbo.{SCRATCH_QUEUE}", f"[{SCRATCH_QUEUE}]", f"dbo.[{SCRATCH_QUEUE.lower()}]"])
def test_listen_takes_a_queue_as_every_command_does(world: World, spelling: str) -> None:
    with world.db.transaction() as tx:
        tx.send(tx.begin_dialog(INITIATOR, SCRATCH), body=b"wake a reader")
    result = invoke(world, "listen", spelling, "--count", "1")
    assert well_behaved(result) is None
    assert f"QUEUE_ACTIVATION\t{SCRATCH_QUEUE}\t" in result.stdout, result.stdout


def test_a_certificate_name_longer_than_a_common_name_is_a_usage_error(tmp_path: Path) -> None:
    """CN=NAME holds at most 64 characters: a longer name escaped as an unexpected ValueError."""
    too_long = CliRunner().invoke(cli, ["certificate", "create", "c" * 65, "--directory", str(tmp_path)])
    assert "64" in usage_error(too_long)
    assert list(tmp_path.iterdir()) == []
    assert CliRunner().invoke(cli, ["certificate", "create", "c" * 64, "--directory", str(tmp_path)]).exit_code == 0
