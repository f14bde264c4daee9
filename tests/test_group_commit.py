"""Group commit on SQLite (``broker.storage.group_commit``): threads of one process whose
small transactions wait for their turn share one physical commit, and each keeps its
own atomicity: a member's rollback undoes only its work, a member's ``commit()`` returns
once its work is durable (another connection sees it), and a failed physical commit
fails every member in it."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event
from support import wait_until

import broker
from broker.storage import group_commit

URL_NAME = "group.db"


@pytest.fixture
def db(tmp_path: Path) -> broker.Broker:
    database = broker.connect(f"sqlite:///{tmp_path / URL_NAME}")
    database.create_queue("Target")
    database.create_queue("Initiator")
    database.create_service("//Target", "Target", ["DEFAULT"])
    database.create_service("//Initiator", "Initiator")
    return database


def _dialog(db: broker.Broker) -> object:
    with db.transaction() as tx:
        return tx.begin_dialog("//Initiator", "//Target")


def _bodies_seen_elsewhere(db: broker.Broker) -> list[bytes | None]:
    """The bodies in Target, read on an engine of their own (what another process sees)."""
    other = broker.connect(db.engine.url.render_as_string(hide_password=False), upgrade=False)
    try:
        return sorted(m.message_body for m in other.queue_rows("Target"))  # type: ignore[type-var]
    finally:
        other.dispose()


class Members:
    """Threads each running one broker transaction that SENDs ``body`` on one dialog."""

    def __init__(self, db: broker.Broker) -> None:
        self.db, self.handle = db, _dialog(db)
        assert db.state.group is not None
        self.group = db.state.group
        self.returned: list[str] = []  # bodies whose commit() returned, in order
        self.failures: dict[str, BaseException] = {}
        self.seen_at_return: dict[str, list[bytes | None]] = {}
        self.threads: list[threading.Thread] = []

    def start(self, body: str, *, inside: Callable[[], None] = lambda: None, fail: bool = False) -> None:
        def run() -> None:
            try:
                with self.db.transaction() as tx:
                    tx.send(self.handle, body=body.encode())
                    inside()
                    if fail:
                        raise RuntimeError("the application rolls this one back")
                self.seen_at_return[body] = _bodies_seen_elsewhere(self.db)
                self.returned.append(body)
            except BaseException as exc:
                self.failures[body] = exc

        thread = threading.Thread(target=run)
        thread.start()
        self.threads.append(thread)

    def start_holding(self) -> threading.Event:
        """Start "first", which keeps the physical transaction open (the next members
        queue behind it) until the event returned is set."""
        release = threading.Event()
        self.start("first", inside=lambda: release.wait(30))
        wait_until(lambda: self.group._physical is not None, timeout=30)
        return release

    def join(self) -> None:
        for thread in self.threads:
            thread.join(60)
        assert not any(thread.is_alive() for thread in self.threads)


@pytest.fixture
def unhurried(monkeypatch: pytest.MonkeyPatch) -> None:
    """No time bound on a physical transaction: the tests hold one open on purpose."""
    monkeypatch.setattr(group_commit, "MAX_OPEN_S", 600.0)


def test_members_share_one_commit_and_a_rollback_among_them_undoes_only_its_own_work(
        db: broker.Broker, unhurried: None) -> None:
    members = Members(db)
    group = members.group
    release = members.start_holding()
    for queued, (body, fail) in enumerate((("second", False), ("rolled back", True), ("third", False)), 1):
        members.start(body, fail=fail)
        wait_until(lambda queued=queued: group.waiting == queued, timeout=30)
    commits = []
    original = group._commit_physical

    def counted(physical: object) -> None:
        commits.append(physical)
        original(physical)  # type: ignore[arg-type]

    group._commit_physical = counted  # type: ignore[method-assign]
    release.set()
    members.join()
    assert len(commits) == 1, "the four members did not share one commit"
    assert list(members.failures) == ["rolled back"]
    assert isinstance(members.failures["rolled back"], RuntimeError)
    assert sorted(members.returned) == ["first", "second", "third"]
    # commit() returned only once the shared commit was durable: seen from elsewhere.
    for body in members.returned:
        assert body.encode() in members.seen_at_return[body]
    assert _bodies_seen_elsewhere(db) == [b"first", b"second", b"third"]
    [initiator] = [e for e in db.catalog("sys.conversation_endpoints") if e["is_initiator"]]
    assert initiator["send_sequence"] == 3  # the rolled-back SEND took no sequence number


def test_a_failed_physical_commit_fails_every_member_in_it(db: broker.Broker, unhurried: None) -> None:
    """A deferred constraint is checked at COMMIT only: the member that breaks it makes
    the shared commit fail, and every member of it is told (nothing is half-kept)."""
    with db.transaction() as tx:
        tx.query("CREATE TABLE parent (id INTEGER PRIMARY KEY)")
        tx.query("CREATE TABLE child (parent_id INTEGER REFERENCES parent (id) DEFERRABLE INITIALLY DEFERRED)")
    members = Members(db)
    release = members.start_holding()
    members.start("breaks the constraint", inside=lambda: _orphan(db))
    wait_until(lambda: members.group.waiting == 1, timeout=30)
    release.set()
    members.join()
    assert members.returned == []
    assert {body: error.number for body, error in members.failures.items()  # type: ignore[attr-defined]
            } == {"first": broker.errors.DATABASE_FAILURE, "breaks the constraint": broker.errors.DATABASE_FAILURE}
    assert _bodies_seen_elsewhere(db) == []
    with db.transaction() as tx:  # the connection goes on working
        tx.send(members.handle, body=b"after")
    assert _bodies_seen_elsewhere(db) == [b"after"]


def _orphan(db: broker.Broker) -> None:
    # Runs inside the member's transaction, on the group's connection.
    assert db.state.group is not None
    conn = db.state.group._connection()
    conn.connection.dbapi_connection.execute("INSERT INTO child (parent_id) VALUES (42)")  # type: ignore[union-attr]


def test_a_single_thread_commits_each_transaction_by_itself(db: broker.Broker) -> None:
    handle = _dialog(db)
    group = db.state.group
    assert group is not None
    sizes: list[int] = []
    original = group._commit_physical

    def counted(physical: group_commit._Physical) -> None:
        sizes.append(physical.members)
        original(physical)

    group._commit_physical = counted  # type: ignore[method-assign]
    for number in range(5):
        with db.transaction() as tx:
            tx.send(handle, body=str(number).encode())
        assert str(number).encode() in _bodies_seen_elsewhere(db)
    assert sizes == [1] * 5


def test_many_threads_sending_and_receiving_lose_and_repeat_nothing(db: broker.Broker) -> None:
    handles = [_dialog(db) for _ in range(8)]
    received: list[bytes | None] = []
    lock = threading.Lock()
    failures: list[BaseException] = []

    def sender(handle: object, number: int) -> None:
        try:
            for sequence in range(50):
                with db.transaction() as tx:
                    tx.send(handle, body=f"{number}:{sequence}".encode())
                    if sequence % 10 == 9:
                        raise RuntimeError("rolled back on purpose")
        except RuntimeError:
            pass
        except BaseException as exc:
            failures.append(exc)

    def receiver() -> None:
        try:
            while True:
                with db.transaction() as tx:
                    got = tx.receive("Target", 1, timeout=2)
                if not got:
                    return
                with lock:
                    received.extend(m.message_body for m in got)
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=sender, args=(h, n)) for n, h in enumerate(handles)]
    threads += [threading.Thread(target=receiver) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not failures, failures
    # Each sender stops at its first rollback (sequence 9): 9 messages each, in order.
    by_sender: dict[str, list[int]] = {}
    for body in received:
        assert body is not None
        number, sequence = body.decode().split(":")
        by_sender.setdefault(number, []).append(int(sequence))
    assert {n: sorted(s) for n, s in by_sender.items()} == {str(n): list(range(9)) for n in range(8)}
    assert db.queue_counts("Target") == {}


def test_a_full_database_fails_only_the_transactions_that_did_not_fit(db: broker.Broker) -> None:
    """Threads fill the database to a page limit (``PRAGMA max_page_count``, the way a full
    disk fails a write): a SEND that does not fit gets 1105 and leaves nothing, every
    commit that returned is kept, and the group's turn is never lost (a leaked turn failed
    every later writer of the process with 1222 after the busy timeout)."""
    handle = _dialog(db)
    db.dispose()
    limit: dict[str, int] = {}

    @event.listens_for(db.engine, "connect")
    def _cap(dbapi_connection: Any, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        pages = limit.setdefault("pages", cursor.execute("PRAGMA page_count").fetchone()[0] + 40)
        cursor.execute(f"PRAGMA max_page_count = {pages}")
        cursor.close()

    committed: list[bytes] = []
    errors: list[int] = []
    lock = threading.Lock()

    def sender(number: int) -> None:
        for sequence in range(40):
            body = f"{number}:{sequence}:".encode().ljust(20_000, b".")
            try:
                with db.transaction() as tx:
                    tx.send(handle, body=body)
            except broker.BrokerError as error:
                with lock:
                    errors.append(error.number)
            else:
                with lock:
                    committed.append(body)

    threads = [threading.Thread(target=sender, args=(n,), daemon=True) for n in range(3)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(db.state.backend.busy_timeout_s)
    assert not any(thread.is_alive() for thread in threads)
    assert time.monotonic() - started < db.state.backend.busy_timeout_s  # no one waited out a lost turn
    # SQLite rolls the whole physical transaction back on a full database: the members
    # that had committed into it and wait for its commit get 3930.
    assert 1105 in errors and set(errors) <= {1105, 3930}, errors
    assert committed
    assert _bodies_seen_elsewhere(db) == sorted(committed)
    event.remove(db.engine, "connect", _cap)
    db.dispose()
    with db.transaction() as tx:  # room again: the process writes as before
        tx.send(handle, body=b"after")
    assert len(db.queue_rows("Target")) == len(committed) + 1
    with db.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA integrity_check").scalar() == "ok"


def test_a_process_killed_amid_group_commits_keeps_every_commit_that_returned(tmp_path: Path) -> None:
    """kill -9 a process whose 8 threads share commits, at random moments, 5 times over:
    every SEND whose ``commit()`` had returned is there, each dialog holds its messages
    in order without a gap or a repeat, and the file is sound."""
    url = f"sqlite:///{tmp_path / 'crash.db'}"
    db = broker.connect(url)
    db.create_queue("Target")
    db.create_queue("Initiator")
    db.create_service("//Target", "Target", ["DEFAULT"])
    db.create_service("//Initiator", "Initiator")
    returned = tmp_path / "returned.txt"
    returned.touch()
    rng = random.Random()
    seed = rng.randrange(1 << 30)
    rng.seed(seed)
    for _round in range(5):
        worker = subprocess.Popen([sys.executable, str(Path(__file__).with_name("group_crash_workers.py")), "send",
                                   url, str(returned), "8"],
                                  env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
        lines_before = len(returned.read_text().splitlines())
        wait_until(lambda before=lines_before: len(returned.read_text().splitlines()) > before + 200, timeout=60)
        time.sleep(rng.uniform(0, 0.05))  # a random moment among the commits (not a wait for a result)
        worker.kill()
        worker.wait(30)
    bodies = [m.message_body.decode() for m in db.queue_rows("Target") if m.message_body is not None]
    assert len(bodies) == len(set(bodies)), f"a message was stored twice (seed {seed})"
    by_dialog: dict[str, list[int]] = {}
    for body in bodies:  # queuing order
        handle, number = body.split(":")
        by_dialog.setdefault(handle, []).append(int(number))
    for handle, numbers in by_dialog.items():
        assert numbers == list(range(len(numbers))), f"dialog {handle}: a gap or a reordering (seed {seed})"
    stored = set(bodies)
    lost = [line for line in returned.read_text().splitlines() if line not in stored]
    assert not lost, f"{len(lost)} SENDs whose commit() had returned are missing (seed {seed})"
    with db.transaction() as tx:
        assert tx.query("PRAGMA integrity_check") == [{"integrity_check": "ok"}]
    db.dispose()
