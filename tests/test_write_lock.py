"""The fair write lock of a SQLite file (``broker.storage.write_lock``), across real
processes: waiting writers get the lock in turn, a process killed while holding it or
waiting for it blocks no one, and a writer that cannot get it within the busy timeout
gets error 1222 instead of hanging."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import another_process_about, lock_file_holder, lock_worker, wait_until

import broker
from broker.errors import BrokerError
from broker.storage import write_lock as write_lock_module
from broker.storage.write_lock import DESCRIPTORS_PER_LOCK_FILE, MAX_OPEN_LOCK_FILES, write_lock


@pytest.fixture
def url(tmp_path: Path) -> Iterator[str]:
    url = f"sqlite:///{tmp_path / 'lock.db'}"
    db = broker.connect(url)
    with db.transaction() as tx:
        tx.query("CREATE TABLE log (n INTEGER PRIMARY KEY AUTOINCREMENT, word TEXT NOT NULL)")
    db.dispose()
    yield url


@pytest.fixture
def about(url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Another process has the database open, and this one looks for it at every
    transaction: its transactions take the record locks (alone, a process takes none)."""
    monkeypatch.setattr(write_lock_module, "LOOK_FOR_OTHERS_S", 0.0)
    with another_process_about(url.removeprefix("sqlite:///"), tmp_path):
        yield


def _finish(process: subprocess.Popen[str]) -> int:
    """Wait for ``process`` (reading its pipes, so none is left open); its exit code."""
    _out, err = process.communicate(timeout=60)
    assert process.returncode in (0, -signal.SIGKILL), err
    return process.returncode


def _words(db: broker.Broker) -> list[str]:
    with db.transaction() as tx:
        return [row["word"] for row in tx.query("SELECT word FROM log ORDER BY n")]


def _someone_at_the_door(db_path: str) -> bool:
    """Whether another process holds the lock file's door: it waits for the lock."""
    return lock_file_holder(db_path, 0) is not None


def _waits(db_path: str, process: subprocess.Popen[str]) -> bool:
    """Whether ``process`` waits for the write lock: at the door, or holding the file's
    lock a long transaction lent it while SQLite's lock is still held."""
    return process.pid in (lock_file_holder(db_path, 0), lock_file_holder(db_path, 1))


def test_a_process_waiting_at_the_door_writes_before_the_holder_writes_again(
        url: str, about: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """The holder lets the lock go and asks again at once: the waiting process goes first
    (SQLite's busy handler would let the holder take it straight back). The holder keeps
    its place while the other process starts (it lends it only after ``LEND_AFTER_S``,
    longer here than the test)."""
    monkeypatch.setattr(write_lock_module, "LEND_AFTER_S", 120.0)
    db = broker.connect(url)
    path = db.engine.url.database or ""
    try:
        tx_cm = db.transaction()
        tx = tx_cm.__enter__()
        tx.query("INSERT INTO log (word) VALUES ('first')")
        waiter = lock_worker("append", url, "waiter")
        wait_until(lambda: _someone_at_the_door(path), timeout=30)
        tx_cm.__exit__(None, None, None)  # commit: the lock goes to the waiter
        with db.transaction() as again:  # straight back: must queue behind the waiter
            again.query("INSERT INTO log (word) VALUES ('holder again')")
        assert _finish(waiter) == 0
        assert _words(db) == ["first", "waiter", "holder again"]
    finally:
        db.dispose()


def test_a_process_killed_holding_the_lock_loses_its_transaction_and_blocks_no_one(url: str,
                                                                                   tmp_path: Path) -> None:
    db = broker.connect(url)
    ready = tmp_path / "holding"
    holder = lock_worker("hold", url, str(ready))
    wait_until(ready.exists, timeout=30)
    try:
        appender = lock_worker("append", url, "after the kill")
        wait_until(lambda: _waits(db.engine.url.database or "", appender), timeout=30)
        os.kill(holder.pid, signal.SIGKILL)
        _finish(holder)
        assert _finish(appender) == 0
        assert _words(db) == ["after the kill"]  # 'held' was never committed
        with db.transaction() as tx:
            assert tx.query("PRAGMA integrity_check") == [{"integrity_check": "ok"}]
    finally:
        db.dispose()


def test_a_process_killed_while_waiting_at_the_door_blocks_no_one(url: str, about: None,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(write_lock_module, "LEND_AFTER_S", 120.0)  # the holder keeps its place
    db = broker.connect(url)
    path = db.engine.url.database or ""
    try:
        with db.transaction() as tx:
            tx.query("INSERT INTO log (word) VALUES ('holder')")
            doomed = lock_worker("append", url, "killed")
            wait_until(lambda: _someone_at_the_door(path), timeout=30)
            os.kill(doomed.pid, signal.SIGKILL)
            _finish(doomed)
            wait_until(lambda: not _someone_at_the_door(path), timeout=30)
            survivor = lock_worker("append", url, "survivor")
            wait_until(lambda: _someone_at_the_door(path), timeout=30)
        assert _finish(survivor) == 0
        assert _words(db) == ["holder", "survivor"]
    finally:
        db.dispose()


def test_a_writer_that_cannot_get_the_lock_within_the_busy_timeout_gets_1222(url: str, tmp_path: Path) -> None:
    ready = tmp_path / "holding"
    holder = lock_worker("hold", url, str(ready))
    impatient = broker.connect(url + "?timeout=0.5", upgrade=False)
    try:
        wait_until(ready.exists, timeout=30)
        with pytest.raises(BrokerError) as raised, impatient.transaction() as tx:
            tx.query("INSERT INTO log (word) VALUES ('too late')")
        assert raised.value.number == 1222
        assert "0.5 s" in str(raised.value)
    finally:
        holder.kill()
        _finish(holder)
        impatient.dispose()
    db = broker.connect(url)
    try:
        assert _words(db) == []
        db.create_queue("AfterTheTimeout")  # the file and the lock still work
    finally:
        db.dispose()


def test_threads_of_one_process_get_the_lock_in_the_order_they_asked(tmp_path: Path) -> None:
    lock = write_lock(str(tmp_path / "threads.db"))
    assert lock.acquire(5)
    order: list[int] = []
    asked: list[int] = []

    def take(number: int) -> None:
        asked.append(number)
        assert lock.acquire(30)
        order.append(number)
        lock.release()

    threads = []
    for number in range(5):
        thread = threading.Thread(target=take, args=(number,))
        thread.start()
        threads.append(thread)
        wait_until(lambda waiting=number + 1: lock.queued == waiting, timeout=30)
    lock.release()
    for thread in threads:
        thread.join(30)
    assert order == asked == [0, 1, 2, 3, 4]
    assert not lock.locked()


def test_a_process_keeps_few_lock_files_open_however_many_databases_it_opens(tmp_path: Path) -> None:
    """A lock file's descriptor stays open only while it may be needed: beyond
    ``MAX_OPEN_LOCK_FILES`` idle ones are closed (a process with thousands of
    descriptors breaks ``select()``), and one closed opens again when next used."""
    descriptors = Path("/proc/self/fd")
    before = len(list(descriptors.iterdir()))
    urls = [f"sqlite:///{tmp_path / f'many{number}.db'}" for number in range(MAX_OPEN_LOCK_FILES + 20)]
    for url in urls:
        db = broker.connect(url)
        db.create_queue("Q")
        db.dispose()
    assert len(list(descriptors.iterdir())) - before <= MAX_OPEN_LOCK_FILES * DESCRIPTORS_PER_LOCK_FILE
    first = broker.connect(urls[0])  # its lock file was closed: it opens again
    try:
        with first.transaction() as tx:
            tx.query("CREATE TABLE log (n INTEGER PRIMARY KEY AUTOINCREMENT, word TEXT NOT NULL)")
        appender = lock_worker("append", urls[0], "from another process")
        assert _finish(appender) == 0
        assert _words(first) == ["from another process"]
    finally:
        first.dispose()


def test_a_process_alone_takes_no_record_lock_and_one_that_comes_meets_sqlites_lock(url: str) -> None:
    """With no other process about, a transaction runs solo (no record lock: there is no
    one to queue with). A process that comes meanwhile finds the record locks free, waits
    at SQLite's own lock, and writes once the solo transaction has committed."""
    db = broker.connect(url)
    path = db.engine.url.database or ""
    try:
        with db.transaction() as tx:
            tx.query("INSERT INTO log (word) VALUES ('solo')")
            comer = lock_worker("append", url, "after")
            wait_until(lambda: lock_file_holder(path, 1) == comer.pid, timeout=30)
            assert comer.poll() is None  # it waits for SQLite's lock, which this transaction holds
        assert _finish(comer) == 0
        assert _words(db) == ["solo", "after"]
    finally:
        db.dispose()
