"""Group commit across processes on SQLite: commits made durable by a shared ``fsync``.

With ``synchronous = FULL`` every SQLite commit pays its own ``fsync`` of the WAL while it
still holds the write lock, and a disk does only so many flushes a second: two processes
that each commit one message per transaction (a producer and its consumer) halve each
other, and no number of processes can commit faster than one. So the broker commits
with ``synchronous = NORMAL`` (the commit writes the WAL but does not flush it; WAL mode
stays safe from corruption) and makes the commit durable itself, after the write lock
is let go, before ``commit()`` returns:

* Under the write lock, right after ``COMMIT``, the transaction takes a number from the
  *commit count* (:func:`count_commit`).
* Then, without the lock, it waits until the *synced count* reaches its number
  (:func:`wait_durable`). One waiter at a time (a record lock on the lock file, a mutex
  among this process's threads) leads: it reads the commit count, ``fdatasync``\\ s the
  WAL and sets the synced count to what it read. Everyone who committed before it read
  the count is durable with that one flush; those who come later lead the next one.
* Meanwhile the next writers already write: the flush overlaps their transactions
  instead of holding everyone up.

The WAL is written in commit order and a flush covers every byte written before it, so
a commit another transaction read from is durable no later than that transaction's own.
A crash loses only commits whose ``commit()`` had not returned; a process killed while
leading a flush drops its record lock, and the next waiter leads. Other processes see a
commit as soon as it is made, before it is durable, as under early lock release; what
they do with it can itself be durable only after it.

Both counts live in the lock file (8 bytes each, aligned), mapped into each process's
memory: reading and writing them costs no system call, and each is read and written as
one machine word. A process holds a shared record lock on the file while it has it open;
the first to open it while nobody else has (after a reboot, say) sets both counts to
zero, so counts left in the file, or torn by a power loss, never vouch for a commit.
"""

from __future__ import annotations

import errno
import fcntl
import mmap
import os
import struct
import threading
import time

from broker.errors import BrokerError

# Byte offsets in the lock file (the write lock uses bytes 0 and 1).
SYNC = 2  # held by the process leading a flush
_OPEN = 3  # shared by every process that has the file open
_COMMITS, _SYNCED = 64, 72  # the two counts: native unsigned 64-bit words, aligned
_COUNT = struct.Struct("@Q")  # native: one 8-byte load or store, not byte by byte
_MAPPED = mmap.PAGESIZE
_flush = getattr(os, "fdatasync", os.fsync)  # what SQLite itself calls, where it exists


class Counts:
    """The commit and synced counts of one lock file, mapped into this process.

    Opening joins the processes that have the file open (a shared lock on ``_OPEN``); if
    none has, both counts start at zero. Python's map keeps a duplicate of the file's
    descriptor, and closing any descriptor of the file drops the process's record locks
    on it: close this only with the descriptor, when nothing is held.
    """

    def __init__(self, fd: int) -> None:
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, _OPEN)
            alone = True
        except OSError:
            fcntl.lockf(fd, fcntl.LOCK_SH, 1, _OPEN)
            alone = False
        if os.fstat(fd).st_size < _MAPPED:
            os.ftruncate(fd, _MAPPED)  # only ever grows it: another process may map it already
        self._map = mmap.mmap(fd, _MAPPED)
        if alone:
            _COUNT.pack_into(self._map, _COMMITS, 0)
            _COUNT.pack_into(self._map, _SYNCED, 0)
            fcntl.lockf(fd, fcntl.LOCK_SH, 1, _OPEN)  # an atomic downgrade

    def count_commit(self) -> int:
        """The number of the commit just made: call while holding the database's write
        lock, which orders every caller."""
        number = self._read(_COMMITS) + 1
        _COUNT.pack_into(self._map, _COMMITS, number)
        return number

    def synced(self) -> int:
        return self._read(_SYNCED)

    def committed(self) -> int:
        return self._read(_COMMITS)

    def set_synced(self, number: int) -> None:
        """Call while leading a flush (holding ``SYNC``): commits up to ``number`` are on
        disk. The count never goes down."""
        if self._read(_SYNCED) < number:
            _COUNT.pack_into(self._map, _SYNCED, number)

    def close(self) -> None:
        self._map.close()

    def _read(self, offset: int) -> int:
        value: int = _COUNT.unpack_from(self._map, offset)[0]
        return value


class Flusher:
    """Makes commits of one database durable for the threads of this process."""

    def __init__(self, wal_path: str) -> None:
        self._wal_path = wal_path
        self._leading = threading.Lock()  # record locks do not exclude threads of a process

    def wait_durable(self, fd: int, counts: Counts, number: int) -> None:
        """Return once commit ``number`` (from :meth:`Counts.count_commit`) is on disk: at
        once if a flush since covered it, else after leading (or waiting for) the next
        one. ``fd`` is the lock file's descriptor."""
        if counts.synced() >= number:
            return
        with self._leading:
            blocking_lock(fd, SYNC)
            try:
                if counts.synced() >= number:
                    return
                covered = counts.committed()
                self._flush_wal()
                counts.set_synced(covered)
            finally:
                fcntl.lockf(fd, fcntl.LOCK_UN, 1, SYNC)

    def _flush_wal(self) -> None:
        # Opened for each flush: a process may have many databases open, and keeping a
        # descriptor would need a check that the WAL is still the same file.
        try:
            wal = os.open(self._wal_path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            # The last connection closed the database: its checkpoint flushed every commit
            # into the database file, then removed the WAL.
            return
        try:
            _flush(wal)
        except OSError as exc:
            raise BrokerError(823, f"The operating system returned an error on a write of the database file: "
                                   f"the commit may not be durable. ({exc})") from exc
        finally:
            os.close(wal)


def blocking_lock(fd: int, offset: int) -> None:
    """Wait for an exclusive record lock of a lock file. The kernel's deadlock detection
    sees processes, not threads, so it may report one where threads of two processes
    hold and wait for different locks of the file (a thread of each holds the write lock
    or leads a flush while another waits for the other's); it is never real here: try
    again."""
    while True:
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX, 1, offset)
            return
        except OSError as exc:
            if exc.errno != errno.EDEADLK:
                raise
            time.sleep(0.0001)


def others_open(fd: int) -> bool:
    """Whether another process has the lock file open (holds its share of ``_OPEN``)."""
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, _OPEN)
    except OSError:
        return True
    fcntl.lockf(fd, fcntl.LOCK_SH, 1, _OPEN)  # an atomic downgrade
    return False
