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
  record lock as soon as it is let go; nobody sleeps on a timer, and the thread that
  wants to write blocks on the record lock itself (handing the lock from a thread of the
  process to another costs more than the hand-over between processes: about 100 us
  against 5 on a 2-core machine).
* **A process that dies** holding or waiting loses nothing and blocks no one: the kernel
  drops its record locks with it, and SQLite's own lock (which still guards the data)
  rolls back its transaction.
* **A long transaction lends its place.** A blocking ``fcntl`` cannot be given a
  timeout, yet a transaction must get error 1222 rather than hang when it cannot begin
  within the busy timeout. So no process keeps the file's lock longer than
  ``LEND_AFTER_S``: past that, a thread of the holding process (the *lender*) lets the
  record lock go while the transaction goes on under SQLite's lock. The process waiting
  next then takes the record lock and meets SQLite's lock in ``BEGIN IMMEDIATE``, whose
  busy handler waits for what is left of its timeout. Short transactions, nearly all of
  them, keep the fair order; those behind a long one wait as SQLite makes them, as they
  would without this lock. A writer waits at most ``LEND_AFTER_S`` for each process
  ahead of it at the file's lock before its own timeout counts down in SQLite.

Commits under this lock are made durable after it is let go, with one flush shared by
the processes that committed meanwhile (:mod:`broker.storage.durable_commits`).

SQLite's lock is not replaced: a connection that does not take this lock (another
program, an older broker) still meets SQLite's busy handler, as before.
"""

from __future__ import annotations

import collections
import fcntl
import os
import threading
import time
from dataclasses import dataclass, field

from broker.storage import durable_commits

_DOOR, _LOCK = 0, 1  # byte offsets in the lock file


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
        # The thread that took it last (``threading.get_ident``), while it is held.
        self.holder: int | None = None

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
                self.holder = threading.get_ident()
                return True
            waiter = _Waiter()
            self._queue.append(waiter)
        if not waiter.wake.acquire(timeout=max(0.0, timeout)):
            with self._mutex:
                try:
                    self._queue.remove(waiter)
                    return False
                except ValueError:  # handed over just as the wait ran out: keep it
                    pass
        self.holder = threading.get_ident()
        return True

    def release(self) -> None:
        with self._mutex:
            self.holder = None
            if self._queue:
                self._queue.popleft().wake.release()  # still held: now by that thread
            else:
                self._held = False


class WriteLock:
    """One SQLite database's write lock in this process (see the module doc).

    ``acquire``/``release`` from any thread; one holder at a time. ``queued`` tells how
    many threads of this process wait for it (group commit hands its turn to them).
    """

    def __init__(self, database_path: str) -> None:
        self._turn = Turn()  # among this process's threads
        self._file: _FileLock | None = None
        try:
            self._file = _FileLock(database_path)
        except OSError:
            pass  # no lock file (a read-only folder): processes meet at SQLite's lock

    @property
    def queued(self) -> int:
        return self._turn.waiting

    def locked(self) -> bool:
        return self._turn.locked()

    def acquire(self, timeout: float, *, company: bool = False) -> float | None:
        """Take the lock: the seconds left of ``timeout`` once taken, for SQLite's own
        wait (the holder may have lent its place: see the module doc); None when the
        threads of this process ahead kept it for all of ``timeout``. ``company``: other
        threads of this process are at work on the database (see :attr:`sqlite_flushes`)."""
        deadline = time.monotonic() + timeout
        if not self._turn.acquire(timeout):
            return None
        if self._file is not None:
            try:
                self._file.acquire(company)
            except BaseException:
                self._turn.release()
                raise
        return deadline - time.monotonic()

    @property
    def sqlite_flushes(self) -> bool:
        """Holding the lock: whether SQLite should flush this transaction's commit itself
        (``synchronous = FULL``) rather than leave it to :meth:`wait_durable`.

        Flushing after the lock goes lets other writers work during the flush and share
        it; that is worth its cost (a flush call of its own, its count, the record locks)
        only with other writers about. So when no other process has the database open and
        no other thread of this process is at work on it, the transaction runs *solo*: it
        takes no record lock (there is no one to queue with), SQLite flushes its commit,
        and :meth:`release` needs no wait. Without a lock file SQLite always flushes."""
        return self._file is None or self._file.solo

    def release(self, *, committed: bool = False) -> int | None:
        """Let the lock go: the next thread here, or another process. For a transaction
        that ``committed`` a change, the number to give :meth:`wait_durable`."""
        try:
            return self._file.release(committed=committed) if self._file is not None else None
        finally:
            self._turn.release()

    def wait_durable(self, number: int) -> None:
        """Return once commit ``number`` (from :meth:`release`) is on disk."""
        assert self._file is not None  # release gives a number only with a lock file
        self._file.wait_durable(number)

    @property
    def file(self) -> _FileLock | None:
        return self._file


class _FileLock:
    """The door-and-lock pair of record locks on the lock file, for this process, and the
    counts that make its commits durable (``durable_commits``).

    Record locks belong to the process, not to a thread or a descriptor, and closing any
    descriptor of the file drops them all: a lock file's descriptors (its own, and the
    one the mapping of its counts keeps) are closed only while this process neither
    holds, waits for nor flushes under anything of it. A process opens
    many databases over its life (a test suite, thousands), so beyond
    ``MAX_OPEN_LOCK_FILES`` the least recently used idle ones are closed, and opened
    again when next needed. One thread of the process at a time asks for the lock (the
    holder of the threads' turn).
    """

    def __init__(self, database_path: str) -> None:
        self._path = database_path + "-lock"
        self._mutex = threading.Lock()
        self._fd: int | None = None
        self._counts: durable_commits.Counts | None = None
        self._open()
        self._flusher = durable_commits.Flusher(database_path + "-wal")
        self._last_used = time.monotonic()
        self._users = 0  # transactions of this process asking for, holding or flushing under it
        self.held_since: float | None = None  # when the lock was taken, while this process holds it
        self._lent = False  # the lender let it go while the transaction goes on
        self.solo = False  # the holder took no record lock, and SQLite flushes its commit
        self._others = True  # other processes had the file open when last looked (``choose_flush``)
        self._others_known_until = 0.0

    def acquire(self, company: bool) -> None:
        """Queue at the door, then at the lock (blocking: a holder lends its place within
        ``LEND_AFTER_S``); or, with no other process about and no ``company``, go solo.

        Whether other processes have the file open is looked at again at most every
        ``LOOK_FOR_OTHERS_S``. A wrong guess costs fairness for that long, never data or
        durability: a process that comes meanwhile finds the record locks free and meets
        SQLite's lock instead, and a solo commit is flushed by SQLite as it is made."""
        with self._mutex:
            reopened = self._fd is None
            if reopened:
                self._open()
            self._users += 1
            self._last_used = now = time.monotonic()
        if reopened:
            _close_idle_lock_files()
        try:
            if now >= self._others_known_until:
                self._others = durable_commits.others_open(self._descriptor)
                self._others_known_until = now + LOOK_FOR_OTHERS_S
            if not company and not self._others:
                self.solo = True
                return
            self._take()
        except BaseException:
            self._done()
            raise
        with self._mutex:
            self._lent = False
            self.held_since = time.monotonic()
        _lender.watch(self)

    def release(self, *, committed: bool) -> int | None:
        """Let the lock go; for a transaction that ``committed`` a change, first take the
        number of its commit: the number to wait for (the file stays open until
        :meth:`wait_durable`), or None if SQLite flushed it already. Counting needs the
        lock: a transaction whose place was lent takes it again to count."""
        if self.solo:  # nothing taken, nothing to count: SQLite flushed the commit
            self.solo = False
            self._done()
            return None
        number = None
        with self._mutex:
            lent, self._lent, self.held_since = self._lent, False, None
            try:
                if committed and not lent:
                    number = self._shared_counts.count_commit()
            finally:
                if not lent:
                    self._unlock(_LOCK)
        try:
            if committed and lent:
                self._take()
                try:
                    number = self._shared_counts.count_commit()
                finally:
                    self._unlock(_LOCK)
        finally:
            if number is None:
                self._done()
        return number

    def lend(self, held_since: float) -> None:
        """Let the record lock go if it is still held since ``held_since`` (the lender's
        call: the transaction goes on under SQLite's lock)."""
        with self._mutex:
            if self.held_since == held_since and not self._lent:
                self._lent = True
                self._unlock(_LOCK)

    def wait_durable(self, number: int) -> None:
        try:
            self._flusher.wait_durable(self._descriptor, self._shared_counts, number)
        finally:
            self._done()

    def close_if_idle(self) -> bool:
        """Close the descriptor if nothing of this process holds, waits for or flushes
        under the lock; whether it did."""
        with self._mutex:
            if self._fd is None or self._users:
                return False
            fd, self._fd = self._fd, None
            counts, self._counts = self._counts, None
        if counts is not None:
            counts.close()
        os.close(fd)
        return True

    @property
    def is_open(self) -> bool:
        return self._fd is not None

    def _open(self) -> None:
        fd = os.open(self._path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
        try:
            self._counts = durable_commits.Counts(fd)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd

    @property
    def _shared_counts(self) -> durable_commits.Counts:
        assert self._counts is not None  # open whenever a lock is held or flushed under
        return self._counts

    @property
    def _descriptor(self) -> int:
        # Open whenever a lock is asked for, held or flushed under: only idle files close.
        assert self._fd is not None
        return self._fd

    def _done(self) -> None:
        with self._mutex:
            self._users -= 1

    def _take(self) -> None:
        durable_commits.blocking_lock(self._descriptor, _DOOR)
        try:
            durable_commits.blocking_lock(self._descriptor, _LOCK)
        finally:
            self._unlock(_DOOR)

    def _unlock(self, offset: int) -> None:
        fcntl.lockf(self._descriptor, fcntl.LOCK_UN, 1, offset)


# How long a look at whether other processes have a lock file open holds good.
LOOK_FOR_OTHERS_S = 0.05
# A process keeps the file's record lock at most this long (see the module doc):
# transactions are far shorter, bar a WAITFOR that holds its locks and long application
# work.
LEND_AFTER_S = 0.05


class _Lender:
    """The thread of this process that lends the place of transactions holding a file's
    lock longer than ``LEND_AFTER_S``. It looks every ``LEND_AFTER_S / 2`` while locks are
    taken, and sleeps once it finds none held.

    ``watch`` costs a transaction nothing while the lender is awake and knows the lock:
    the lender, before it sleeps, looks once more after saying so, and a lock is marked
    held before it is watched, so either the lender sees it held or ``watch`` sees the
    lender asleep and wakes it."""

    def __init__(self) -> None:
        self._changed = threading.Condition(threading.Lock())
        self._held: dict[_FileLock, None] = {}  # every lock held since it last looked
        self._thread: threading.Thread | None = None
        self._sleeping = True

    def watch(self, lock: _FileLock) -> None:
        if not self._sleeping and lock in self._held:
            return
        with self._changed:
            self._held[lock] = None
            if self._sleeping:
                self._sleeping = False
                if self._thread is None or not self._thread.is_alive():
                    self._thread = threading.Thread(target=self._run, name="broker-write-lock-lender", daemon=True)
                    self._thread.start()
                self._changed.notify()

    def _run(self) -> None:
        while True:
            with self._changed:
                while self._sleeping:
                    self._changed.wait()
            time.sleep(LEND_AFTER_S / 2)
            with self._changed:  # a lock taken meanwhile is in ``_held``, or wakes it again
                now = time.monotonic()
                for lock in self._held:
                    since = lock.held_since
                    if since is not None and now - since >= LEND_AFTER_S:
                        lock.lend(since)
                if not self._any_held():
                    self._sleeping = True
                    if self._any_held():  # taken while it decided (see the class doc)
                        self._sleeping = False
                    else:
                        self._held.clear()

    def _any_held(self) -> bool:
        return any(lock.held_since is not None for lock in self._held)


_lender = _Lender()


# Lock files a process keeps open when idle (see ``_FileLock``), each with two descriptors.
MAX_OPEN_LOCK_FILES = 16
DESCRIPTORS_PER_LOCK_FILE = 2


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
        found = _locks[database_path] = WriteLock(database_path)
    _close_idle_lock_files()
    return found


def close_if_idle(database_path: str) -> None:
    """Close this process's lock file of the database at ``database_path`` if it has it
    open and nothing of the process holds, waits for or flushes under its lock: another
    process left alone on the database then runs solo. Opened again when next needed."""
    with _locks_mutex:
        found = _locks.get(database_path)
    if found is not None and found.file is not None:
        found.file.close_if_idle()


# Databases a thread of the parent was writing to when this process was forked (see
# ``forked_while_writing``).
_forked_while_writing: set[str] = set()


def forked_while_writing(database_path: str) -> bool:
    """Whether this process was forked while a thread of its parent held the write lock
    of the database at ``database_path``. SQLite keeps the locks of a process's
    connections in memory that a fork copies: the child would then wait for ever on a
    lock only the parent's transaction could give back."""
    return database_path in _forked_while_writing


def _forget_locks() -> None:
    # A forked child holds none of its parent's locks and has none of its threads.
    global _locks_mutex, _lender
    _forked_while_writing.update(path for path, lock in _locks.items() if lock.locked())
    _locks.clear()
    _locks_mutex = threading.Lock()
    _lender = _Lender()


os.register_at_fork(after_in_child=_forget_locks)
