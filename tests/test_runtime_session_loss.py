"""PostgreSQL: a runtime's session connection lost while the runtime runs.

A runtime's session is a number held as a session advisory lock on a connection it keeps
idle for its whole life (``PostgresBackend.session``); its readers' task rows carry it.
If that connection ends (here: ``pg_terminate_backend``), the lock goes with it while the
runtime and its readers still run. The runtime must find that out on its passes and take
its session again, and other runtimes must not take its readers for dead meanwhile:
never more readers than MAX_QUEUE_READERS, and ``sys.dm_broker_activated_tasks`` lists
every running reader.

Real processes (``broker run`` children) on a database of their own, PostgreSQL only
(skipped without ``BROKER_TEST_POSTGRES_URL``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from session_loss_procs import QUEUE
from sqlalchemy import text
from support import holds_within

import broker
from broker.storage import postgres_backend
from broker.storage.postgres_backend import RUNTIME_LOCKS

TESTS = str(Path(__file__).parent)
BROKER = str(Path(sys.executable).with_name("broker"))
SERVICE = "//session-loss/Service"
MESSAGES = 4  # on conversations of their own: a second reader would have work
# How long another runtime waits before it removes the rows of a session it finds ended
# (read this way so that the tests also run, and fail, on the code from before it).
GRACE_S = getattr(postgres_backend, "SESSION_GRACE_S", 5.0)


@pytest.fixture
def pg_url(postgres_databases) -> Iterator[str]:  # type: ignore[no-untyped-def]
    name = postgres_databases.create(empty=False)
    yield postgres_databases.url_of(name)
    postgres_databases.drop(name)


class Children:
    """``broker run`` children sharing one procedure log and release file."""

    def __init__(self, url: str, tmp_path: Path) -> None:
        self.url = url
        self.tmp_path = tmp_path
        self.log = tmp_path / "readers.log"
        self.release = tmp_path / "release"
        self.processes: list[subprocess.Popen[bytes]] = []

    def run(self, name: str) -> subprocess.Popen[bytes]:
        paths = [TESTS, str(Path(TESTS).parent), os.environ.get("PYTHONPATH", "")]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in paths if p),
                   SESSION_LOSS_LOG=str(self.log), SESSION_LOSS_RELEASE=str(self.release))
        with (self.tmp_path / f"{name}.log").open("wb") as stderr:
            process = subprocess.Popen([BROKER, "--db", self.url, "run", "--poll", "0.2"], env=env,
                                       stdout=subprocess.DEVNULL, stderr=stderr)
        self.processes.append(process)
        return process

    def stderr(self, name: str) -> str:
        return (self.tmp_path / f"{name}.log").read_text()

    def readers(self) -> tuple[int, int]:
        """Readers holding a message now, and the most that ever did at once (from the log)."""
        if not self.log.exists():
            return 0, 0
        events = sorted((float(time_), 1 if event == "start" else -1)
                        for _, time_, event in (line.split() for line in self.log.read_text().splitlines() if line))
        now = most = 0
        for _, change in events:
            now += change
            most = max(most, now)
        return now, most

    def stop(self) -> None:
        self.release.touch()
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@pytest.fixture
def children(pg_url: str, tmp_path: Path) -> Iterator[Children]:
    running = Children(pg_url, tmp_path)
    yield running
    running.stop()


def _setup(url: str) -> broker.Broker:
    db = broker.connect(url)
    db.create_queue(QUEUE, activation={"status": True, "procedure_name": "session_loss_procs:hold",
                                       "max_queue_readers": 1, "execute_as": "SELF"})
    db.create_service(SERVICE, QUEUE, ["DEFAULT"])
    with db.transaction() as tx:
        for number in range(MESSAGES):
            tx.send(tx.begin_dialog(SERVICE, SERVICE), body=f"m{number}")
    return db


def _spids(db: broker.Broker) -> list[int]:
    return [task["spid"] for task in db.catalog("sys.dm_broker_activated_tasks")]


def _session_holders(db: broker.Broker) -> dict[int, int]:
    """The runtime session numbers held in this database, and the backend pid holding each."""
    with db.engine.connect() as conn:
        rows = conn.execute(text(
            "SELECT objid::bigint, pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 2"
            " AND classid::bigint = :namespace"
            " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
        ), {"namespace": RUNTIME_LOCKS}).all()
    return {int(number): int(pid) for number, pid in rows}


def _terminate(db: broker.Broker, pid: int) -> None:
    with db.engine.connect() as conn:
        assert conn.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid}).scalar_one()
        conn.commit()


def _one_reader_running(db: broker.Broker, children: Children) -> int:
    """Wait for the first runtime's single reader; its spid."""
    assert holds_within(lambda: children.readers()[0] == 1 and len(_spids(db)) == 1, 30), children.stderr("A")
    (spid,) = _spids(db)
    assert spid in _session_holders(db)
    return spid


def test_lost_session_connection_is_taken_again_and_no_other_runtime_exceeds_the_limit(
        pg_url: str, children: Children) -> None:
    db = _setup(pg_url)
    try:
        children.run("A")
        spid = _one_reader_running(db, children)
        _terminate(db, _session_holders(db)[spid])
        children.run("B")  # may find the session's lock free at its first passes
        # B never counts A's running reader as gone: no second reader, and the view keeps
        # listing A's, however long B looks (past the time it waits before it removes the
        # rows of a session it finds ended).
        assert not holds_within(lambda: children.readers()[1] > 1 or _spids(db) != [spid], GRACE_S + 3), (
            children.readers(), _spids(db), children.stderr("A"), children.stderr("B"))
        assert children.readers() == (1, 1)
        # A took its session again: the same number, on a new connection.
        assert spid in _session_holders(db), children.stderr("A")
        assert "taking the session again" in children.stderr("A")
        assert "runtime started" in children.stderr("B")
    finally:
        children.stop()
        db.dispose()
    assert children.readers() == (0, 1)  # released: one reader at a time went through every message


def test_rows_removed_while_the_session_was_lost_are_restored(pg_url: str, children: Children) -> None:
    """Another runtime that found the session ended holds its number while it removes
    the rows (as ``claim_ended_sessions`` does): the runtime takes another number and
    inserts its running reader's row again."""
    db = _setup(pg_url)
    try:
        children.run("A")
        spid = _one_reader_running(db, children)
        with db.engine.connect() as conn:
            def claim() -> bool:
                return bool(conn.execute(text("SELECT pg_try_advisory_xact_lock(:namespace, :spid)"),
                                         {"namespace": RUNTIME_LOCKS, "spid": spid}).scalar_one())

            for _attempt in range(5):  # A may take its number again before this transaction does
                holder = _session_holders(db).get(spid)
                if holder is not None:
                    _terminate(db, holder)
                def settled(holder: int | None = holder) -> bool:  # claimed, or A locked it again
                    return claim() or _session_holders(db).get(spid, holder) != holder

                if holds_within(settled, 10, 0.005) and claim():
                    break
            else:
                pytest.fail("the lost session's number could never be claimed")
            conn.execute(text("DELETE FROM sb_activated_tasks WHERE process_id = :spid"), {"spid": spid})
            # A cannot take the same number again while this transaction holds it: it takes another.
            assert holds_within(lambda: set(_session_holders(db)) - {spid}, 10), children.stderr("A")
            conn.commit()
        # The view lists A's running reader again, under another session A holds.
        assert holds_within(lambda: len(_spids(db)) == 1 and _spids(db)[0] in _session_holders(db), 10), (
            _spids(db), children.stderr("A"))
        assert _spids(db) != [spid]
        assert "restored" in children.stderr("A")
        assert children.readers() == (1, 1)
        # No second reader is started: the restored row counts.
        assert not holds_within(lambda: children.readers()[1] > 1, 2)
    finally:
        children.stop()
        db.dispose()
    assert children.readers() == (0, 1)
