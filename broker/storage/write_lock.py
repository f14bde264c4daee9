"""The fair write lock of one SQLite database, across the threads and processes using it.

SQLite lets one transaction write at a time. A connection that finds the database
locked sleeps in SQLite's busy handler (1, 2, 5, 10 ... ms) and tries again, so a
process that has just committed takes the lock again long before the sleepers wake:
readers added to a queue slow it down, and a producer in a tight loop can keep a
consumer out for its whole burst. So a writer takes this lock before ``BEGIN
IMMEDIATE`` and lets it go once its transaction has ended:

* **Threads of one process** queue in arrival order: the lock is handed to the first
  waiting thread, never taken back by the thread that let it go.
* **Processes** queue on two POSIX record locks (``fcntl``) of a lock file beside the
  database (``DATABASE-lock``): the *door* (byte 0) and the *lock* (byte 1). A process
  takes the door, then the lock, then leaves the door. So at most one process waits at
  the lock, holding the door, and the process that lets the lock go cannot take it again
  before that one: it has to pass the door first. The kernel wakes a process blocked on a
  record lock as soon as it is let go; nobody sleeps on a timer.
* **A process that dies** holding or waiting loses nothing and blocks no one: the kernel
  drops its record locks with it, and SQLite's own lock (which still guards the data)
  rolls back its transaction.

A blocking ``fcntl`` cannot be given a timeout, and a transaction must get error 1222
rather than hang when it cannot begin within the busy timeout. So a process waits for
the file's locks on a thread of its own (one per database, started at the first
contention); the transaction's thread waits for that one with the timeout and, if it
gives up, the lock is let go as soon as it arrives.

SQLite's lock is not replaced: a connection that does not take this lock (another
program, an older broker) still meets SQLite's busy handler, as before.
"""

from __future__ import annotations

import atexit
import collections
import fcntl
import os
import threading
import time
from dataclasses import dataclass, field

_DOOR, _LOCK = 0, 1  # byte offsets in the lock file
# A process keeps the file's lock between its transactions for at most this long from
# when it took it ...
TENURE_S = 0.010
# ... and only while its next transaction begins within this long of the last one's end.
GRACE_S = 0.0005


@dataclass(eq=False, slots=True)
class _Waiter:
    """A thread waiting for its turn: released (``wake``) when it gets it."""

    wake: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.wake.acquire()


class Turn:
    """A lock that threads get in the order they asked: the one letting it go hands it
    to the first thread waiting (it cannot take it straight back)."""

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._held = False
        self._queue: collections.deque[_Waiter] = collections.deque()

    @property
    def waiting(self) -> int:
        return len(self._queue)

    def locked(self) -> bool:
        return self._held

    def acquire(self, timeout: float) -> bool:
        """Take it within ``timeout`` seconds; False when it could not be had."""
        with self._mutex:
            if not self._held:
                self._held = True
                return True
            waiter = _Waiter()
            self._queue.append(waiter)
        if waiter.wake.acquire(timeout=max(0.0, timeout)):
            return True
        with self._mutex:
            try:
                self._queue.remove(waiter)
            except ValueError:  # handed over just as the wait ran out: keep it
                return True
        return False

    def release(self) -> None:
        with self._mutex:
            if self._queue:
                self._queue.popleft().wake.release()  # still held: now by that thread
            else:
                self._held = False


class WriteLock:
    """One SQLite database's write lock in this process (see the module doc).

    ``acquire``/``release`` from any thread; one holder at a time. ``queued`` tells how
    many threads of this process wait for it (group commit hands its turn to them).
    """

    def __init__(self, lock_path: str | None) -> None:
        self._turn = Turn()  # among this process's threads
        self._file: _FileLock | None = None
        if lock_path is not None:
            try:
                self._file = _FileLock(lock_path)
            except OSError:
                pass  # no lock file (a read-only folder): processes meet at SQLite's lock

    @property
    def queued(self) -> int:
        return self._turn.waiting

    def locked(self) -> bool:
        return self._turn.locked()

    def acquire(self, timeout: float) -> bool:
        """Take the lock within ``timeout`` seconds; False when it could not be had."""
        deadline = time.monotonic() + timeout
        if not self._turn.acquire(timeout):
            return False
        if self._file is None or self._file.acquire(deadline - time.monotonic()):
            return True
        self._turn.release()
        return False

    def release(self, *, wrote: bool = False) -> None:
        """Let the lock go: the next thread here, or another process. After a transaction
        that ``wrote``, this process keeps the file's lock a little while (its *tenure*,
        see ``_FileLock.release``) for its next transaction."""
        if self._file is not None:
            self._file.release(keep=wrote)
        self._turn.release()

    def let_go_if_kept(self) -> None:
        """Let go of the file's lock if it is only kept for a next transaction."""
        if self._file is not None:
            self._file.let_go_if_kept()

    @property
    def file(self) -> _FileLock | None:
        return self._file


class _FileLock:
    """The door-and-lock pair of record locks on the lock file, for this process.

    Record locks belong to the process, not to a thread or a descriptor, and closing any
    descriptor of the file drops them all: there is one descriptor per lock file, closed
    only while this process neither holds nor waits for anything on it. A process opens
    many databases over its life (a test suite, thousands), so beyond
    ``MAX_OPEN_LOCK_FILES`` the least recently used idle ones are closed, and opened
    again when next needed. One thread of the process at a time asks for the lock (the
    holder of the threads' turn); the waiter thread may still be waiting for an earlier
    one that gave up, and then serves the new one.
    """

    def __init__(self, path: str) -> None:
        self._path = path
        self._fd: int | None = _open_lock_file(path)
        self._last_used = time.monotonic()
        self._in_use = False  # a transaction of this process asks for it or holds it
        self._changed = threading.Condition(threading.Lock())
        self._wanted = False  # a thread here waits for the lock
        self._granted = False  # the waiter thread took it for that thread
        self._busy = False  # the waiter thread is at the door or the lock
        self._waiter: threading.Thread | None = None
        self._since = 0.0  # when this process took the lock (time.monotonic())
        self._kept_until: float | None = None  # held between transactions: let go then
        self._timing = False  # the waiter thread sleeps until ``_kept_until``

    def acquire(self, timeout: float) -> bool:
        with self._changed:
            self._in_use, self._last_used = True, time.monotonic()
            if self._kept_until is not None:  # kept from this process's last transaction
                self._kept_until = None
                return True
            reopened = self._fd is None
            if reopened:
                self._fd = _open_lock_file(self._path)
            busy = self._busy
        if reopened:
            _close_idle_lock_files()
        # Not busy: nothing of this process holds the door or the lock (a process never
        # conflicts with its own record locks), so trying without blocking is sound.
        if not busy and self._try(_DOOR):
            got = self._try(_LOCK)
            self._unlock(_DOOR)
            if got:
                self._since = time.monotonic()
                return True
        with self._changed:
            self._wanted, self._granted = True, False
            self._start_waiter()
            self._changed.notify_all()
            granted = self._changed.wait_for(lambda: self._granted, max(0.0, timeout))
            self._wanted = self._granted = False
            self._in_use = granted
            self._changed.notify_all()
            return granted

    def release(self, *, keep: bool) -> None:
        """Let the lock go, or with ``keep``, while another process waits at the door,
        hold it for this process's next transaction: until that begins, for at most
        ``GRACE_S``, and no longer than ``TENURE_S`` since the lock was taken. A process
        that commits transaction after transaction then runs several of them per turn:
        no hand-over between processes, and what its connection keeps stays current,
        since no one else committed. Waiting processes wait at most a tenure each for
        it. With nobody waiting, letting go costs nothing, and it is let go at once."""
        now = time.monotonic()
        if keep and now - self._since < TENURE_S and self._someone_at_the_door():
            with self._changed:
                self._kept_until = min(self._since + TENURE_S, now + GRACE_S)
                self._in_use = False
                self._start_waiter()
                if not self._timing:  # else it wakes at the earlier moment, and waits on
                    self._changed.notify_all()
            return
        self._unlock(_LOCK)
        with self._changed:
            self._in_use = False

    def close_if_idle(self) -> bool:
        """Close the descriptor if nothing of this process holds or waits for the lock
        (its waiter thread then ends); whether it did."""
        with self._changed:
            if (self._fd is None or self._in_use or self._wanted or self._busy
                    or self._kept_until is not None):
                return False
            fd, self._fd = self._fd, None
            self._changed.notify_all()
        os.close(fd)
        return True

    @property
    def is_open(self) -> bool:
        return self._fd is not None

    @property
    def _descriptor(self) -> int:
        # Open whenever a lock is asked for, held or kept: only idle files are closed.
        assert self._fd is not None
        return self._fd

    def let_go_if_kept(self) -> None:
        with self._changed:
            if self._kept_until is not None:
                self._kept_until = None
                self._unlock(_LOCK)

    def _someone_at_the_door(self) -> bool:
        # This process is not: it holds the lock, and its waiter thread is idle.
        if self._try(_DOOR):
            self._unlock(_DOOR)
            return False
        return True

    def _start_waiter(self) -> None:
        if self._waiter is None or not self._waiter.is_alive():
            self._waiter = threading.Thread(target=self._wait_for_lock, name="broker-write-lock", daemon=True)
            self._waiter.start()

    def _wait_for_lock(self) -> None:
        """The waiter thread: takes the door, then the lock, each time a thread here
        wants it, and hands it over, or lets it go at once if that thread gave up
        meanwhile; lets a lock kept between transactions go when its time is up."""
        while True:
            with self._changed:
                while not self._wanted:
                    if self._fd is None:
                        return  # closed (``close_if_idle``): a new one starts when needed
                    if self._kept_until is None:
                        self._changed.wait()
                    elif (left := self._kept_until - time.monotonic()) > 0:
                        self._timing = True
                        self._changed.wait(left)
                        self._timing = False
                    else:
                        self._kept_until = None
                        self._unlock(_LOCK)
                self._busy = True
            fcntl.lockf(self._descriptor, fcntl.LOCK_EX, 1, _DOOR)
            try:
                fcntl.lockf(self._descriptor, fcntl.LOCK_EX, 1, _LOCK)
            finally:
                self._unlock(_DOOR)
            with self._changed:
                self._since = time.monotonic()
                if self._wanted:
                    self._granted = True
                    self._changed.notify_all()
                    self._changed.wait_for(lambda: not self._granted)  # taken by that thread
                else:
                    self._unlock(_LOCK)
                self._busy = False

    def _try(self, offset: int) -> bool:
        try:
            fcntl.lockf(self._descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, offset)
        except OSError:
            return False
        return True

    def _unlock(self, offset: int) -> None:
        fcntl.lockf(self._descriptor, fcntl.LOCK_UN, 1, offset)


# Lock files a process keeps open when idle (see ``_FileLock``).
MAX_OPEN_LOCK_FILES = 32


def _open_lock_file(path: str) -> int:
    return os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)


def _close_idle_lock_files() -> None:
    """Close the least recently used idle lock files beyond ``MAX_OPEN_LOCK_FILES``."""
    with _locks_mutex:
        files = [lock.file for lock in _locks.values() if lock.file is not None and lock.file.is_open]
    excess = len(files) - MAX_OPEN_LOCK_FILES
    for file in sorted(files, key=lambda f: f._last_used):
        if excess <= 0:
            return
        if file.close_if_idle():
            excess -= 1


_locks: dict[str, WriteLock] = {}
_locks_mutex = threading.Lock()


def write_lock(database_path: str) -> WriteLock:
    """The write lock of the SQLite database at ``database_path`` (absolute, resolved):
    one per database, shared by every engine of this process that opens it.

    Where the lock file cannot be made (a read-only folder) only the threads of this
    process queue; processes meet at SQLite's own lock.
    """
    with _locks_mutex:
        found = _locks.get(database_path)
        if found is not None:
            return found
        found = _locks[database_path] = WriteLock(database_path + "-lock")
    _close_idle_lock_files()
    return found


def _let_go_of_kept_locks() -> None:
    # At exit the waiter threads may no longer run: a lock kept for a next transaction
    # that will not come would stay held until the process is gone.
    with _locks_mutex:
        locks = list(_locks.values())
    for lock in locks:
        lock.let_go_if_kept()


def _forget_locks() -> None:
    # A forked child holds none of its parent's locks and has none of its threads.
    global _locks_mutex
    _locks.clear()
    _locks_mutex = threading.Lock()


os.register_at_fork(after_in_child=_forget_locks)
atexit.register(_let_go_of_kept_locks)
