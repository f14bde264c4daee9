"""Several processes on one PostgreSQL database: DDL racing the runtime, runtimes killed
with SIGKILL, WAITFOR's LISTEN connection lost, a pool with no connection to spare.

Every test runs real processes (``python -c`` children and ``broker run``) on a database
of its own, PostgreSQL only (skipped without ``BROKER_TEST_POSTGRES_URL``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from support import holds_within

import broker

TESTS = str(Path(__file__).parent)
BROKER = str(Path(sys.executable).with_name("broker"))
TARGET_QUEUE, INITIATOR_QUEUE = "PgTargetQueue", "PgInitiatorQueue"
TARGET, INITIATOR = "//pg/Target", "//pg/Initiator"


@pytest.fixture
def pg_url(postgres_databases) -> Iterator[str]:  # type: ignore[no-untyped-def]
    name = postgres_databases.create(empty=False)
    yield postgres_databases.url_of(name)
    postgres_databases.drop(name)


def _env() -> dict[str, str]:
    paths = [TESTS, str(Path(TESTS).parent), os.environ.get("PYTHONPATH", "")]
    return dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in paths if p))


def _child(code: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", code, *args], env=_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _broker_run(url: str, log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as stderr:  # the child keeps its own descriptor
        return subprocess.Popen([BROKER, "--db", url, "run"], env=_env(), stdout=subprocess.DEVNULL,
                                stderr=stderr)


def _stop(process: subprocess.Popen, timeout: float = 60) -> None:  # type: ignore[type-arg]
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _objects(url: str) -> broker.Broker:
    db = broker.connect(url)
    db.create_queue(TARGET_QUEUE)
    db.create_queue(INITIATOR_QUEUE)
    db.create_service(TARGET, TARGET_QUEUE, ["DEFAULT"])
    db.create_service(INITIATOR, INITIATOR_QUEUE)
    return db


# -- ALTER QUEUE ... STATUS = ON racing the runtime's transmitter -------------------------

_PRODUCER = """
import sys, broker
db = broker.connect(sys.argv[1])
with db.transaction() as tx:
    handles = [tx.begin_dialog(sys.argv[2], sys.argv[3]) for _ in range(10)]
for n in range(int(sys.argv[4])):
    with db.transaction() as tx:
        tx.send(handles[n % 10], body=str(n))
"""
_TOGGLER = """
import sys, time, broker
db = broker.connect(sys.argv[1])
while True:
    db.alter_queue(sys.argv[2], status=False)
    time.sleep(0.02)
    db.alter_queue(sys.argv[2], status=True)
    time.sleep(0.02)
"""


def test_alter_queue_on_racing_the_runtime_delivers_each_held_message_once(pg_url: str, tmp_path: Path) -> None:
    """A producer SENDs while another process turns the target queue OFF and ON, and a
    ``broker run`` retries the held messages. ALTER QUEUE ... STATUS = ON and the
    transmitter both read the held rows before locking the dialog's endpoints: the one
    that waited for the lock delivered the rows the other had just delivered again
    (each message twice in the queue, ``held_messages`` going negative)."""
    db = _objects(pg_url)
    runtime = _broker_run(pg_url, tmp_path / "run.log")
    toggler = _child(_TOGGLER, pg_url, TARGET_QUEUE)
    producers = [_child(_PRODUCER, pg_url, INITIATOR, TARGET, "1500") for _ in range(2)]
    try:
        for producer in producers:
            _out, err = producer.communicate(timeout=900)
            assert producer.returncode == 0, err
    finally:
        toggler.kill()
        toggler.communicate()
    db.alter_queue(TARGET_QUEUE, status=True)

    def nothing_held() -> bool:
        with db.transaction() as tx:
            return tx.query("SELECT count(*) AS n FROM sb_transmission_queue")[0]["n"] == 0

    try:
        assert holds_within(nothing_held, 120), "held messages were never delivered"
    finally:
        _stop(runtime)
    with db.transaction() as tx:
        twice = tx.query(f'SELECT conversation_handle, message_sequence_number, count(*) AS n FROM "{TARGET_QUEUE}" '
                         "GROUP BY conversation_handle, message_sequence_number HAVING count(*) > 1")
        count = tx.query(f'SELECT count(*) AS n FROM "{TARGET_QUEUE}"')[0]["n"]
        held = tx.query("SELECT held_messages FROM sb_conversation_endpoints WHERE held_messages <> 0")
    db.dispose()
    assert twice == [], f"{len(twice)} messages were enqueued twice"
    assert count == 3000
    assert held == []


# -- a runtime killed while its activated reader works -------------------------------------

def slow_reader(db: broker.Broker) -> None:
    """The activation procedure: one message per transaction, recorded in pg_done."""
    while True:
        with db.transaction() as tx:
            got = tx.receive(TARGET_QUEUE, 1, timeout=0.5)
            if not got:
                return
            for message in got:
                tx.query("INSERT INTO pg_done (body, pid) VALUES (:body, :pid)",
                         body=message.message_body.decode(), pid=os.getpid())
            time.sleep(0.05)


def test_a_runtime_killed_while_its_reader_works_is_taken_over(pg_url: str, tmp_path: Path) -> None:
    """Two ``broker run`` on one database, MAX_QUEUE_READERS = 2; the one whose reader
    works is killed with SIGKILL. The other must start a reader and finish the queue,
    and the dead runtime's ``sys.dm_broker_activated_tasks`` row must go. It stayed for
    good: the survivor counted it as a running reader (dead rows were looked for only at
    the limit), and waited for its own readers, which it never started, to fall behind."""
    db = _objects(pg_url)
    with db.transaction() as tx:
        tx.query("CREATE TABLE pg_done (body TEXT PRIMARY KEY, pid INTEGER NOT NULL)")
    db.alter_queue(TARGET_QUEUE, activation={"status": True, "max_queue_readers": 2,
                                             "procedure_name": "test_postgres_processes:slow_reader"})
    runtimes = [_broker_run(pg_url, tmp_path / f"run{i}.log") for i in range(2)]
    try:
        total = 200
        with db.transaction() as tx:
            handles = [tx.begin_dialog(INITIATOR, TARGET) for _ in range(20)]
            for n in range(total):
                tx.send(handles[n % 20], body=str(n))

        def readers_pids() -> set[int]:
            with db.transaction() as tx:
                return {row["pid"] for row in tx.query("SELECT DISTINCT pid FROM pg_done")}

        assert holds_within(lambda: bool(readers_pids()), 60), "no reader started"
        pids = readers_pids()
        victim = next(r for r in runtimes if r.pid in pids)
        victim.kill()
        victim.wait()

        def finished() -> bool:
            with db.transaction() as tx:
                return tx.query("SELECT count(*) AS n FROM pg_done")[0]["n"] == total

        assert holds_within(finished, 120), "the surviving runtime never took over the queue"

        def no_dead_rows() -> bool:
            with db.transaction() as tx:
                return tx.query("SELECT count(*) AS n FROM sb_activated_tasks")[0]["n"] == 0

        assert holds_within(no_dead_rows, 30), "the killed runtime's activated task row stayed"
    finally:
        for process in runtimes:
            _stop(process)
        db.dispose()


# -- WAITFOR and its LISTEN connection ------------------------------------------------------

_SENDER = """
import sys, broker
db = broker.connect(sys.argv[1])
with db.transaction() as tx:
    tx.send(tx.begin_dialog(sys.argv[2], sys.argv[3]), body=b"wake up")
"""
_WAITING = """
import sys, time, broker
db = broker.connect(sys.argv[1])
started = time.monotonic()
with db.transaction() as tx:
    got = tx.receive(sys.argv[2], timeout=float(sys.argv[3]))
print(len(got), time.monotonic() - started, flush=True)
"""


def _on_listeners(url: str, what: str) -> int:
    """How many rows ``SELECT {what} FROM`` the LISTEN connections on ``url`` gives."""
    engine = create_engine(url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            return len(conn.execute(text(
                f"SELECT {what} FROM pg_stat_activity "
                "WHERE datname = current_database() AND query LIKE 'LISTEN %'")).all())
    finally:
        engine.dispose()


def _listeners(url: str) -> int:
    return _on_listeners(url, "pid")


def _terminate_listeners(url: str) -> int:
    return _on_listeners(url, "pg_terminate_backend(pid)")


def test_a_waitfor_under_way_when_the_listen_connection_dies_still_wakes(pg_url: str) -> None:
    """A RECEIVE ... WAITFOR is waiting when its process's LISTEN connection is lost (the
    server ended it, a network blip): the listener wakes the waiter as it fails, but the
    waiter went back to waiting without starting another, so a message another process
    then sent woke it only at its timeout (with TIMEOUT -1, never)."""
    db = _objects(pg_url)
    db.dispose()
    waiter = _child(_WAITING, pg_url, TARGET_QUEUE, "-1")  # waits for ever: only a wake-up ends it
    try:
        assert holds_within(lambda: _terminate_listeners(pg_url) > 0, 60, interval=0.2), "no LISTEN connection seen"
        # Woken by its listener's failure, the waiter opens another before it waits again.
        assert holds_within(lambda: _listeners(pg_url) > 0, 60, interval=0.2), "no LISTEN connection again"
        sender = _child(_SENDER, pg_url, INITIATOR, TARGET)
        _out, err = sender.communicate(timeout=120)
        assert sender.returncode == 0, err
        out, err = waiter.communicate(timeout=120)
    finally:
        if waiter.poll() is None:
            waiter.kill()
            waiter.communicate()
    assert waiter.returncode == 0, err
    assert out.split()[0] == "1", out


_POOL_EXHAUSTED = """
import sys, threading, broker
db = broker.connect(sys.argv[1], pool_size=1, max_overflow=0, pool_timeout=1)
begun, done = threading.Event(), threading.Event()
def hold():
    with db.transaction() as tx:            # the pool's only connection
        tx.receive(sys.argv[2])
        begun.set()
        done.wait(60)
holder = threading.Thread(target=hold)
holder.start()
begun.wait(60)
try:
    with db.transaction() as tx:
        tx.receive(sys.argv[2], timeout=1)
    print("no error")
except broker.BrokerError as error:
    print("BrokerError", error.number)
except Exception as error:
    print("raw", type(error).__module__, type(error).__name__)
done.set()
holder.join()
"""


def test_a_waitfor_that_cannot_open_its_listen_connection_raises_a_broker_error(pg_url: str) -> None:
    """WAITFOR opens the process's LISTEN connection before its first look, outside the
    verb's error handling: a pool with no connection to spare (or a server that refuses
    one) reached the caller as SQLAlchemy's own TimeoutError / OperationalError."""
    _objects(pg_url).dispose()
    child = _child(_POOL_EXHAUSTED, pg_url, TARGET_QUEUE)
    out, err = child.communicate(timeout=120)
    assert child.returncode == 0, err
    assert out.startswith("BrokerError"), out


def test_a_runtime_opens_its_listen_connection_again_when_it_is_lost(pg_url: str) -> None:
    """The runtime opened the LISTEN connection that wakes its scheduler once, when it
    started: once lost, it fell back to polling for good (and had it failed to open at
    the start, the scheduler's thread died). It is opened again before the next pass."""
    db = _objects(pg_url)
    try:
        with db.runtime(poll_interval=0.5):
            assert holds_within(lambda: _listeners(pg_url) > 0, 60, interval=0.2), "no LISTEN connection seen"
            assert _terminate_listeners(pg_url) > 0
            assert holds_within(lambda: _listeners(pg_url) > 0, 60, interval=0.2), "no LISTEN connection again"
    finally:
        db.dispose()
