"""WAITFOR without busy polling.

In one process a commit that enqueues messages wakes the readers waiting on those
queues at once (a condition variable shared by every connection to the same database).
Another process's commits reach it through the backend (``broker.storage.backends``): on
SQLite ``PRAGMA data_version``, which changes on a connection when any *other*
connection commits, checked here with a short exponential back-off, with a cheap
read-only probe deciding whether a RECEIVE is worth taking the write lock for; on
PostgreSQL a LISTEN connection that calls ``notify`` itself.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

# The key every commit bumps, whatever queues it touched (the runtime waits on it).
ANY_QUEUE = -1
# The key of the transmission queue: a commit that holds messages there for another
# database wakes the transmitter (queue ids start at 65536).
TRANSMISSION_QUEUE = 0
# Back-off between data_version checks while nothing happens in this process.
FIRST_CHECK_S = 0.001
LONGEST_CHECK_S = 0.004  # a commit by another process is seen within this, while nothing happens


# The longest one wait on the notifier lasts; a wait without end repeats it.
_LONGEST_WAIT_S = 86_400.0


class QueueNotifier:
    """Per-queue commit counters with one condition variable, shared in a process."""

    def __init__(self) -> None:
        self._condition = threading.Condition()
        self._counters: dict[int, int] = {}
        self._all = 0  # bumped by changes that concern every queue (the catalog)

    def counter(self, queue_id: int) -> int:
        with self._condition:
            return self._counters.get(queue_id, 0) + self._all

    def notify(self, queue_ids: set[int]) -> None:
        with self._condition:
            for queue_id in (*queue_ids, ANY_QUEUE):
                self._counters[queue_id] = self._counters.get(queue_id, 0) + 1
            self._condition.notify_all()

    def notify_all(self) -> None:
        """Wake every waiter (the catalog changed: a queue may be disabled or dropped)."""
        with self._condition:
            self._all += 1
            self._condition.notify_all()

    def wait(self, queue_id: int, seen: int, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for a commit to ``queue_id``; True if one came.

        A wait without end (``inf``: WAITFOR with no TIMEOUT) waits a day at a time: the
        platform's lock takes no longer timeout (OverflowError)."""
        with self._condition:
            return self._condition.wait_for(lambda: self._counters.get(queue_id, 0) + self._all != seen,
                                            min(timeout, _LONGEST_WAIT_S))


def wait_for_queue(
    notifier: QueueNotifier,
    queue_id: int,
    seen: int,
    deadline: float,
    dbapi_connection: Any | None,
    probe: Callable[[], bool],
    since: int | None = None,
) -> None:
    """Return when ``probe()`` may be true or at ``deadline`` (a ``time.monotonic()``).

    ``seen`` is ``notifier.counter(queue_id)`` read before the caller last looked at the
    queue, so a commit in between wakes it at once.

    ``dbapi_connection`` is an idle SQLite connection (no open transaction) used to
    watch ``PRAGMA data_version`` (from ``since``, read with ``seen``, or else from now);
    None where commits by other processes are signalled to the notifier by the backend
    itself.
    """
    version = _data_version(dbapi_connection) if since is None else since
    pause = FIRST_CHECK_S
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return
        if notifier.wait(queue_id, seen, min(pause, remaining)):
            return
        if dbapi_connection is None:
            pause = remaining
            continue
        current = _data_version(dbapi_connection)
        if current != version:
            version = current
            if probe():
                return
            pause = FIRST_CHECK_S
        else:
            pause = min(pause * 2, LONGEST_CHECK_S)


def _data_version(dbapi_connection: Any | None) -> int | None:
    if dbapi_connection is None:
        return None
    return int(dbapi_connection.execute("PRAGMA data_version").fetchone()[0])


class CommitWatch:
    """Waits for any commit to a database, by this process or another (the runtime's).

    ``mark()`` before looking at the database, ``wait(mark, deadline)`` after: a commit
    made in between ends the wait at once. ``listen``, where the backend signals other
    processes' commits itself, (re)opens what signals them; each ``mark()`` calls it.
    """

    def __init__(self, notifier: QueueNotifier, dbapi_connection: Any | None,
                 listen: Callable[[], None] | None = None) -> None:
        self._notifier = notifier
        self._dbapi = dbapi_connection
        self._listen = listen

    def mark(self) -> tuple[int, int | None]:
        seen = self._notifier.counter(ANY_QUEUE)
        if self._listen is not None:
            self._listen()  # after ``seen``: a listener that failed before it is replaced now
        return seen, _data_version(self._dbapi)

    def wait(self, mark: tuple[int, int | None], deadline: float) -> None:
        seen, version = mark
        wait_for_queue(self._notifier, ANY_QUEUE, seen, deadline, self._dbapi, lambda: True, since=version)
