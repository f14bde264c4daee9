"""``broker sql``: T-SQL scripts from -c, -f files, standard input and the terminal prompt,
printed as sqlcmd prints them or as JSON Lines.

Every test runs on SQLite and PostgreSQL (conftest's ``db_url``); the prompt runs in a
real process on a pseudo-terminal.
"""

from __future__ import annotations

import json
import os
import pty
import re
import select
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from test_cli import Run, cli_runner

import broker
from cli.main import cli

BROKER_SCRIPT = Path(sys.executable).with_name("broker")
SELECT_ONE = "SELECT 1 AS n, N'x' AS s"
ONE_ROW = "n s\n- -\n1 x\n\n(1 row affected)\n"
# A SEND on a conversation that does not exist: Msg 8426.
FAILING_BATCH = "DECLARE @h UNIQUEIDENTIFIER = NEWID()\nSEND ON CONVERSATION @h (N'x')"
MSG_8426 = re.compile(r'Msg 8426, Level 16, State 1, Line \d+\n'
                      r'The conversation handle "[0-9A-F-]{36}" is not found\.\n')


@pytest.fixture
def run(db_url: str) -> Run:
    """``run(*args, expect=0, input=None)``: ``broker --db URL *args`` on a fresh database."""
    return cli_runner(db_url)


# -- where the script comes from ----------------------------------------------------------------


def test_command_prints_and_selects(run: Run) -> None:
    result = run("sql", "-c", f"PRINT N'hello'\n{SELECT_ONE}")
    assert result.stdout == f"hello\n{ONE_ROW}"
    assert result.stderr == ""


def test_files_run_in_order_in_one_session(run: Run, tmp_path: Path) -> None:
    first, second = tmp_path / "first.sql", tmp_path / "second.sql"
    first.write_text("PRINT N'first'\nBEGIN TRANSACTION\n")
    second.write_text("PRINT N'second'\nSELECT @@TRANCOUNT AS t\nROLLBACK\n")
    result = run("sql", "-f", str(first), "--file", str(second))
    assert result.stdout == "first\nsecond\nt\n-\n1\n\n(1 row affected)\n"


def test_files_in_utf16_with_a_bom_as_sql_server_tools_save_them(run: Run, tmp_path: Path) -> None:
    script = tmp_path / "unicode.sql"
    script.write_bytes("PRINT N'été'".encode("utf-16"))
    assert run("sql", "-f", str(script)).stdout == "été\n"


def test_standard_input(run: Run) -> None:
    result = run("sql", input=f"{SELECT_ONE}\nGO\nPRINT N'then'\n")
    assert result.stdout == f"{ONE_ROW}then\n"


def test_go_splits_batches_and_repeats_one(run: Run) -> None:
    result = run("sql", "-c", "DECLARE @v INT = 1\nPRINT @v\ngo 2\nPRINT N'last'")
    assert result.stdout == "1\n1\nlast\n"


def test_variables_end_with_their_batch(run: Run) -> None:
    result = run("sql", "-c", "DECLARE @v INT = 1\nGO\nPRINT @v", expect=1)
    assert result.stdout == ""
    assert re.fullmatch(r'Msg 137, Level \d+, State \d+, Line \d+\nMust declare the scalar variable "@v"\.\n',
                        result.stderr), result.stderr


def test_values_as_sqlcmd_shows_them(run: Run) -> None:
    result = run("sql", "-c", "SELECT NULL AS nothing, 0x0aff AS b, "
                              "CAST('6f9619ff-8b86-d011-b42d-00c04fc964ff' AS UNIQUEIDENTIFIER) AS g, 42, N'x'")
    assert result.stdout.splitlines()[:3] == [
        "nothing b      g",
        "------- ------ ------------------------------------ -- -",
        "NULL    0x0AFF 6F9619FF-8B86-D011-B42D-00C04FC964FF 42 x",
    ]


# -- failures ----------------------------------------------------------------------------------------


def test_a_failing_batch_exits_1_and_the_next_batch_runs(run: Run) -> None:
    result = run("sql", "-c", f"PRINT N'before'\nGO\n{FAILING_BATCH}\nPRINT N'not run'\nGO\nPRINT N'after'",
                 expect=1)
    assert result.stdout == "before\nafter\n"
    assert MSG_8426.fullmatch(result.stderr), result.stderr


def test_command_and_file_together_is_a_usage_error(run: Run, tmp_path: Path) -> None:
    script = tmp_path / "script.sql"
    script.write_text("PRINT 1")
    result = run("sql", "-c", "PRINT 1", "-f", str(script), expect=2)
    assert result.stdout == ""
    assert result.stderr == "error: give -c or -f, not both. See 'broker sql --help'.\n"


def test_a_script_that_is_not_text_is_a_usage_error(run: Run) -> None:
    result = run("sql", "-c", "PRINT 1\x00", expect=2)
    assert result.stderr.startswith("error: Invalid value for '-c' / '--command': The script may not contain the NUL")


def test_a_file_that_cannot_be_read_is_a_usage_error(run: Run, tmp_path: Path) -> None:
    result = run("sql", "-f", str(tmp_path / "missing.sql"), expect=2)
    assert len(result.stderr.splitlines()) == 1 and "missing.sql" in result.stderr, result.stderr
    binary = tmp_path / "binary.sql"
    binary.write_bytes(b"PRINT 1\n\xff\xfe\xfa")
    result = run("sql", "-f", str(binary), expect=2)
    assert result.stderr == f"error: {binary} is not UTF-8 text (byte 8). See 'broker sql --help'.\n"


def test_with_an_instance_and_no_database_a_session_starts_in_master(db_url: str) -> None:
    """As sqlcmd on a server: master is the instance catalog, where logins are made."""
    result = CliRunner().invoke(cli, ["--instance", db_url, "sql", "-c",
                                      "SELECT DB_NAME() AS db\nCREATE LOGIN Peer WITH PASSWORD = N'x'"])
    assert result.exit_code == 0, (result.stdout, result.stderr)
    assert result.stdout == "db\n------\nmaster\n\n(1 row affected)\n"
    inst = broker.instance(db_url)
    try:
        assert "Peer" in {row["name"] for row in inst.catalog("sys.server_principals")}
    finally:
        inst.dispose()


# -- JSON Lines ----------------------------------------------------------------------------------------


def test_jsonl_keeps_stdout_to_rows(run: Run) -> None:
    script = (f"PRINT N'hello'\n{SELECT_ONE}, NULL AS z, 1.5 AS d, 3, 4 AS n\n"
              "SELECT name AS s FROM sys.service_message_types WHERE name LIKE N'%/ServiceBroker/E%' ORDER BY name\n"
              f"GO\n{FAILING_BATCH}")
    result = run("sql", "--format", "jsonl", "-c", script, expect=1)
    assert [json.loads(line) for line in result.stdout.splitlines()] == [
        {"n": 1, "s": "x", "z": None, "d": 1.5, "column5": 3, "column6": 4},
        {"s": "http://schemas.microsoft.com/SQL/ServiceBroker/EndDialog"},
        {"s": "http://schemas.microsoft.com/SQL/ServiceBroker/Error"},
    ]
    stderr = result.stderr.splitlines(keepends=True)
    assert stderr[:3] == ["hello\n", "(1 row affected)\n", "(2 rows affected)\n"]
    assert MSG_8426.fullmatch("".join(stderr[3:])), result.stderr


# -- the prompt, on a terminal --------------------------------------------------------------------------


class Terminal:
    """A program on a pseudo-terminal: what it showed, typing into it, its exit status."""

    def __init__(self, fd: int, process: subprocess.Popen[bytes]) -> None:
        self.fd = fd
        self.process = process
        self.shown = ""
        self.cursor = 0

    def expect(self, text: str, timeout: float = 300.0) -> None:
        """Wait until ``text`` shows after what the last expect found."""
        deadline = time.monotonic() + timeout
        while (found := self.shown.find(text, self.cursor)) < 0:
            remaining = deadline - time.monotonic()
            assert remaining > 0, f"{text!r} not shown within {timeout}s; the screen: {self.shown!r}"
            ready, _, _ = select.select([self.fd], [], [], remaining)
            if ready:
                self._read()
        self.cursor = found + len(text)

    def _read(self) -> None:
        try:
            chunk = os.read(self.fd, 4096)
        except OSError:  # EIO: the program closed the terminal
            chunk = b""
        assert chunk, f"the program closed the terminal; the screen: {self.shown!r}"
        self.shown += chunk.decode("utf-8", "replace").replace("\r\n", "\n")

    def type(self, text: str) -> None:
        os.write(self.fd, text.encode())

    def exit_status(self) -> int:
        return self.process.wait(timeout=300)


@pytest.fixture
def prompt(db_url: str) -> Iterator[Terminal]:
    """``broker --db URL sql`` on a pseudo-terminal, killed at the end if still running."""
    master, slave = pty.openpty()
    env = {k: v for k, v in os.environ.items() if k not in ("BROKER_URL", "BROKER_INSTANCE", "BROKER_DATABASE")}
    env["TERM"] = "dumb"  # no escape sequences from readline
    process = subprocess.Popen([str(BROKER_SCRIPT), "--db", db_url, "sql"],
                               stdin=slave, stdout=slave, stderr=slave, env=env)
    os.close(slave)
    yield Terminal(master, process)
    if process.poll() is None:
        process.kill()
    process.wait(timeout=60)
    os.close(master)


def test_prompt_runs_a_batch_at_go(prompt: Terminal) -> None:
    prompt.expect("1> ")
    prompt.type(f"{SELECT_ONE}\n")
    prompt.expect("2> ")
    prompt.type("GO\n")
    for line in ("n s\n", "- -\n", "1 x\n", "(1 row affected)\n", "1> "):
        prompt.expect(line)
    prompt.type("exit\n")
    assert prompt.exit_status() == 0


def test_prompt_keeps_the_transaction_and_runs_what_is_left_at_the_end(prompt: Terminal) -> None:
    prompt.expect("1> ")
    prompt.type("BEGIN TRANSACTION\n")
    prompt.expect("2> ")
    prompt.type("GO\n")
    prompt.expect("1> ")
    prompt.type("SELECT @@TRANCOUNT AS t\n")
    prompt.expect("2> ")
    prompt.type("\x04")  # Ctrl-D: the end of input
    for line in ("t\n", "-\n", "1\n", "(1 row affected)\n"):
        prompt.expect(line)
    assert prompt.exit_status() == 0


def test_prompt_exit_status_says_a_batch_failed(prompt: Terminal) -> None:
    prompt.expect("1> ")
    for number, line in enumerate(FAILING_BATCH.splitlines(), start=1):
        prompt.type(f"{line}\n")
        prompt.expect(f"{number + 1}> ")
    prompt.type("go\n")
    prompt.expect("Msg 8426, Level 16, State 1")
    prompt.expect("1> ")
    prompt.type("QUIT\n")
    assert prompt.exit_status() == 1
