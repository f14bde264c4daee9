"""Names and helpers shared by the tests (the fixtures are in conftest.py)."""

from __future__ import annotations

import fcntl
import os
import struct
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

import broker
from broker.storage.write_lock import LOOK_FOR_OTHERS_S

# For the few tests about SQLite itself (its file read through plain sqlite3, local
# process ids): they run on SQLite only rather than skipping on other backends.
sqlite_only = pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
postgres_only = pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)

REQUEST = "//AWDB/1DBSample/RequestMessage"
REPLY = "//AWDB/1DBSample/ReplyMessage"
CONTRACT = "//AWDB/1DBSample/SampleContract"
TARGET_SERVICE = "//AWDB/1DBSample/TargetService"
INITIATOR_SERVICE = "//AWDB/1DBSample/InitiatorService"
TARGET_QUEUE = "TargetQueue1DB"
INITIATOR_QUEUE = "InitiatorQueue1DB"


def open_dialog(db: broker.Broker, body: bytes | str = b"<RequestMsg/>", **options: object):  # type: ignore[no-untyped-def]
    """Begin a tutorial dialog and send one request; return the initiator handle."""
    with db.transaction() as tx:
        handle = tx.begin_dialog(INITIATOR_SERVICE, TARGET_SERVICE, CONTRACT, **options)
        tx.send(handle, REQUEST, body)
    return handle


def endpoint(db: broker.Broker, handle: object) -> dict | None:  # type: ignore[type-arg]
    """The sys.conversation_endpoints row of ``handle`` (None once it is gone)."""
    rows = [r for r in db.catalog("sys.conversation_endpoints") if str(r["conversation_handle"]) == str(handle)]
    return rows[0] if rows else None


def holds_within(condition: Callable[[], object], timeout: float, interval: float = 0.1) -> bool:
    """Whether ``condition`` becomes truthy within ``timeout`` seconds (polled every
    ``interval``): ``assert not holds_within(bad, window)`` watches a window for what must
    never happen."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(interval)
    return bool(condition())


def wait_until(condition: Callable[[], object], timeout: float = 10.0, interval: float = 0.01) -> object:
    """Poll ``condition`` until it is truthy or fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        time.sleep(interval)


def target_handle(db: broker.Broker, initiator: object) -> uuid.UUID:
    """The handle of the target endpoint of the dialog ``initiator`` began."""
    mine = endpoint(db, initiator)
    assert mine is not None
    [row] = [r for r in db.catalog("sys.conversation_endpoints")
             if r["conversation_id"] == mine["conversation_id"] and not r["is_initiator"]]
    return row["conversation_handle"]


# The tutorial "Completing a Conversation Between Databases" (spec 12.2).
BETWEEN_REQUEST, BETWEEN_REPLY = "//BothDB/2DBSample/RequestMessage", "//BothDB/2DBSample/ReplyMessage"
BETWEEN_CONTRACT = "//BothDB/2DBSample/SimpleContract"
BETWEEN_TARGET_SERVICE = "//TgtDB/2DBSample/TargetService"
BETWEEN_INITIATOR_SERVICE = "//InitDB/2DBSample/InitiatorService"
BETWEEN_TARGET_QUEUE, BETWEEN_INITIATOR_QUEUE = "TargetQueue2DB", "InitiatorQueue2DB"


def between_databases(inst: broker.Instance, initiator_url: str,
                      target_url: str) -> tuple[broker.Broker, broker.Broker]:
    """Spec 12.2, steps 1-3: TargetDB and InitiatorDB in ``inst`` with the tutorial's
    objects; (initiator, target)."""
    target = inst.add_database("TargetDB", target_url)
    initiator = inst.add_database("InitiatorDB", initiator_url)
    for db in (target, initiator):
        db.create_message_type(BETWEEN_REQUEST, "WELL_FORMED_XML")
        db.create_message_type(BETWEEN_REPLY, "WELL_FORMED_XML")
        db.create_contract(BETWEEN_CONTRACT, {BETWEEN_REQUEST: "INITIATOR", BETWEEN_REPLY: "TARGET"})
    target.create_queue(BETWEEN_TARGET_QUEUE)
    target.create_service(BETWEEN_TARGET_SERVICE, BETWEEN_TARGET_QUEUE, [BETWEEN_CONTRACT])
    initiator.create_queue(BETWEEN_INITIATOR_QUEUE)
    initiator.create_service(BETWEEN_INITIATOR_SERVICE, BETWEEN_INITIATOR_QUEUE)
    return initiator, target


# struct flock on Linux: l_type, l_whence, l_start, l_len, l_pid (native alignment).
_FLOCK = "hhqqi4x"
_probes: dict[str, int] = {}


def lock_file_holder(db_path: str, offset: int) -> int | None:
    """The id of another process holding byte ``offset`` of a SQLite database's lock file
    (``broker.storage.write_lock``: 0 the door, 1 the lock, 2 a flush), if one does.

    F_GETLK takes no lock. The descriptor stays open for the test run: closing any
    descriptor of the file would drop this process's own record locks on it.
    """
    fd = _probes.get(db_path)
    if fd is None:
        fd = _probes[db_path] = os.open(db_path + "-lock", os.O_RDWR)
    query = struct.pack(_FLOCK, fcntl.F_WRLCK, os.SEEK_SET, offset, 1, 0)
    l_type, _whence, _start, _len, pid = struct.unpack(_FLOCK, fcntl.fcntl(fd, fcntl.F_GETLK, query))
    return None if l_type == fcntl.F_UNLCK else int(pid)


LOCK_WORKERS = str(Path(__file__).with_name("write_lock_workers.py"))


def lock_worker(*args: str) -> subprocess.Popen[str]:
    """A process running ``write_lock_workers.py`` with ``args`` (read its pipes to the end)."""
    return subprocess.Popen([sys.executable, LOCK_WORKERS, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})


def until_seen_here() -> None:
    """Wait until this process has looked again for other processes on its lock files:
    it looks at most ``LOOK_FOR_OTHERS_S`` after it last looked, and until then a
    transaction here may still run solo (SQLite flushing its commit) beside a process
    that has just opened the file."""
    opened = time.monotonic()
    wait_until(lambda: time.monotonic() >= opened + LOOK_FOR_OTHERS_S, timeout=30)


@contextmanager
def another_process_about(db_path: str, folder: Path) -> Iterator[None]:
    """While the block runs, another process has the SQLite database at ``db_path`` open,
    as every process using it has (it holds its share of the lock file): this process's
    transactions then queue at the record locks and leave the flush to the broker."""
    ready = folder / f"open-{uuid.uuid4().hex}"
    other = lock_worker("open", f"{db_path}-lock", str(ready))
    try:
        wait_until(ready.exists, timeout=30)
        until_seen_here()
        yield
    finally:
        other.kill()
        other.communicate(timeout=60)
