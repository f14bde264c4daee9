"""Commits on SQLite made durable after the write lock goes (``broker.storage.durable_commits``):
each ``commit()`` returns only after a flush of the WAL that covers it, one flush serves
every commit made before it, a process killed while flushing blocks no one, and a
transaction that holds the write lock long lends its place without losing its commit."""

from __future__ import annotations

import os
import signal
import struct
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import another_process_about, lock_file_holder, lock_worker, until_seen_here, wait_until

import broker
from broker.errors import BrokerError
from broker.storage import durable_commits
from broker.storage import write_lock as write_lock_module


@pytest.fixture
def db(tmp_path: Path) -> Iterator[broker.Broker]:
    db = broker.connect(f"sqlite:///{tmp_path / 'durable.db'}")
    with db.transaction() as tx:
        tx.query("CREATE TABLE log (n INTEGER PRIMARY KEY AUTOINCREMENT, word TEXT NOT NULL)")
    yield db
    db.dispose()


@pytest.fixture
def flushes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every flush of a WAL, by path, in order (each still flushes)."""
    seen: list[str] = []
    flush = durable_commits._flush

    def recorded(fd: int) -> None:
        seen.append(os.readlink(f"/proc/self/fd/{fd}"))
        flush(fd)

    monkeypatch.setattr(durable_commits, "_flush", recorded)
    return seen


def _counts(db: broker.Broker) -> tuple[int, int]:
    """(commit count, synced count) in the database's lock file."""
    data = Path(f"{db.engine.url.database}-lock").read_bytes()[64:80]
    return struct.unpack("=2Q", data)


def _append(db: broker.Broker, word: str) -> None:
    with db.transaction() as tx:
        tx.query("INSERT INTO log (word) VALUES (:word)", word=word)


def _words(db: broker.Broker) -> list[str]:
    with db.snapshot() as tx:
        return [row["word"] for row in tx.query("SELECT word FROM log ORDER BY n")]


@pytest.fixture
def company(db: broker.Broker, tmp_path: Path) -> Iterator[None]:
    """Another process with the database open: commits are then flushed by the broker
    after the write lock goes."""
    with another_process_about(db.engine.url.database or "", tmp_path):
        yield


def _synchronous(db: broker.Broker) -> int:
    """``PRAGMA synchronous`` inside a transaction that writes: 2 (FULL) when SQLite
    flushes its commit, 1 (NORMAL) when the broker does."""
    with db.transaction() as tx:
        tx.query("INSERT INTO log (word) VALUES ('probe')")
        [row] = tx.query("PRAGMA synchronous")
    return int(row["synchronous"])


def test_a_process_alone_lets_sqlite_flush_each_commit(db: broker.Broker, flushes: list[str]) -> None:
    """Nobody to share a flush with: SQLite flushes the commit, as it would without the
    broker (no flush of its own, no wait, no count)."""
    assert _synchronous(db) == 2
    before = _counts(db)
    flushes.clear()
    _append(db, "one")
    assert flushes == []
    assert _counts(db) == before
    assert _words(db)[-1] == "one"


def test_with_another_process_about_the_broker_flushes_after_the_lock(
        db: broker.Broker, company: None, flushes: list[str]) -> None:
    db.create_queue("Empty")
    assert _synchronous(db) == 1
    wal = f"{db.engine.url.database}-wal"
    flushes.clear()
    _append(db, "one")
    assert flushes == [wal]
    commits, synced = _counts(db)
    assert synced >= commits > 0
    with db.transaction() as tx:  # verbs that wrote nothing
        assert tx.receive("Empty", 1) == []
    assert flushes == [wal]
    with db.transaction() as tx:  # DDL moves no row count, but it is a change to keep
        tx.query("CREATE TABLE other (x INTEGER)")
    assert flushes == [wal, wal]


def _another_process_finds_company(lock_file: str) -> bool:
    """Whether a new process opening ``lock_file`` finds another process has it open."""
    probe = ("import os, sys; from broker.storage import durable_commits; "
             "print(durable_commits.others_open(os.open(sys.argv[1], os.O_RDWR)))")
    out = subprocess.run([sys.executable, "-c", probe, lock_file], capture_output=True, text=True, timeout=60,
                         check=True).stdout
    return out.strip() == "True"


def test_a_disposed_broker_leaves_other_processes_alone(db: broker.Broker) -> None:
    """A process done with a database (its ``Broker`` disposed) lets go of the lock file,
    so another process left alone on the database runs solo; using the database again
    opens it again."""
    lock_file = f"{db.engine.url.database}-lock"
    assert _another_process_finds_company(lock_file)
    db.dispose()
    assert not _another_process_finds_company(lock_file)
    _append(db, "again")
    assert _another_process_finds_company(lock_file)
    assert _words(db) == ["again"]


def test_without_a_lock_file_sqlite_flushes_every_commit(tmp_path: Path) -> None:
    # Where the lock file cannot be opened (here a folder stands in its place; a read-only
    # folder does the same), processes meet at SQLite's lock and SQLite flushes each commit.
    Path(f"{tmp_path / 'nolock.db'}-lock").mkdir()
    without = broker.connect(f"sqlite:///{tmp_path / 'nolock.db'}")
    try:
        with without.transaction() as tx:
            tx.query("CREATE TABLE log (n INTEGER PRIMARY KEY AUTOINCREMENT, word TEXT NOT NULL)")
        assert _synchronous(without) == 2
        without.create_queue("StillWorks")
    finally:
        without.dispose()


def test_a_stale_synced_count_in_the_lock_file_vouches_for_nothing(tmp_path: Path, flushes: list[str]) -> None:
    """A lock file left by an earlier boot (or torn by a power loss) may hold any counts:
    the first process to open it starts them again at zero, so a commit made once
    another process is about is still flushed."""
    path = tmp_path / "stale.db"
    Path(f"{path}-lock").write_bytes(bytes(64) + struct.pack("=2Q", 0, 10**9))  # synced far ahead
    db = broker.connect(f"sqlite:///{path}")
    try:
        with another_process_about(str(path), tmp_path):
            flushes.clear()
            db.create_queue("AfterTheReset")
            assert flushes, "a commit returned without a flush"
            commits, synced = _counts(db)
            assert synced == commits < 10**9
    finally:
        db.dispose()


def test_a_failed_flush_fails_the_commit_with_823(db: broker.Broker, company: None,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    def failing(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(durable_commits, "_flush", failing)
    with pytest.raises(BrokerError) as raised:
        _append(db, "maybe")
    assert raised.value.number == 823
    monkeypatch.undo()
    _append(db, "later")  # the lock and the file still work
    assert _words(db)[-1] == "later"


def test_one_flush_serves_the_commits_of_many_threads(db: broker.Broker, flushes: list[str]) -> None:
    """Eight threads of a process alone commit 50 transactions each: a physical commit
    with threads waiting to join the next is flushed after the lock goes (while the next
    runs), every commit returns covered by a flush (the synced count reaches the commit
    count), and group commit needs fewer flushes than commits."""
    go = threading.Event()
    failures: list[BaseException] = []

    def work(number: int) -> None:
        go.wait()
        try:
            for sequence in range(50):
                _append(db, f"{number}-{sequence}")
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=work, args=(number,)) for number in range(8)]
    for thread in threads:
        thread.start()
    go.set()
    for thread in threads:
        thread.join(120)
    assert not failures
    assert len(_words(db)) == 400
    commits, synced = _counts(db)
    assert synced == commits
    assert 0 < len(flushes) < 400


def test_a_process_killed_while_leading_a_flush_blocks_no_one(db: broker.Broker, tmp_path: Path) -> None:
    ready = tmp_path / "flushing"
    flusher = lock_worker("flush", f"{db.engine.url.database}-lock", str(ready))
    wait_until(ready.exists, timeout=30)
    until_seen_here()  # else the commit may run solo, flushed by SQLite
    done = threading.Event()

    def commit() -> None:
        _append(db, "after the kill")
        done.set()

    committer = threading.Thread(target=commit)
    committer.start()
    try:
        assert not done.wait(0.5)  # its commit waits for the flush the other process leads
        os.kill(flusher.pid, signal.SIGKILL)
        flusher.communicate(timeout=60)
        assert done.wait(30)
    finally:
        committer.join(30)
    assert _words(db) == ["after the kill"]
    commits, synced = _counts(db)
    assert synced == commits


def test_a_long_transaction_lends_its_place_and_keeps_its_commit(db: broker.Broker,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A transaction that holds the write lock past ``LEND_AFTER_S`` lets the process
    waiting next take the file's lock: that one waits in SQLite's busy handler, not at
    the door, and writes once the long transaction has committed, which is counted and
    flushed as any other."""
    monkeypatch.setattr(write_lock_module, "LEND_AFTER_S", 0.05)
    path = db.engine.url.database or ""
    with db.transaction() as tx:
        tx.query("INSERT INTO log (word) VALUES ('long')")
        waiter = lock_worker("append", db.engine.url.render_as_string(), "next")
        # The waiter holds the file's lock (lent to it) while this transaction goes on.
        wait_until(lambda: lock_file_holder(path, 1) == waiter.pid, timeout=30)
        assert waiter.poll() is None
    _out, err = waiter.communicate(timeout=60)
    assert waiter.returncode == 0, err
    assert _words(db) == ["long", "next"]
