"""Which runtimes of a SQLite database still run, whatever machine state they left.

A runtime's activated tasks carry its session number (their ``spid``). While the runtime
runs, it holds a POSIX record lock on byte ``number`` of the file ``DATABASE-runtimes``
beside the database. The kernel lets the lock go when the process ends, however it ends
(kill -9 included), so a number whose byte nobody holds belongs to a runtime that is gone.

The number is drawn at random, never a process id: a process id names a *process*, and
a later one may have it (a container's ``broker run`` restarted as PID 1 again), which
made a dead runtime's task rows look alive for good, and its queue never activated again.

The file is separate from the write lock's ``DATABASE-lock``: closing any descriptor of a
file drops every record lock the process holds on it, so this module keeps one
descriptor per database while any of its runtimes runs and opens no other. A process
does not see its own record locks, so its own runtimes are known from memory.
"""

from __future__ import annotations

import errno
import fcntl
import os
import secrets
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from broker.errors import BrokerError

LARGEST_NUMBER = 2**31 - 1  # an activated task's spid is a 32-bit integer
_CANNOT_OPEN = 5120


@dataclass
class _Marks:
    """This process's descriptor of one database's marks file, and its runtimes' numbers."""

    path: str
    descriptor: int
    numbers: set[int] = field(default_factory=set)


_guard = threading.Lock()
_open: dict[str, _Marks] = {}


def marks_path(database_path: str) -> str:
    return database_path + "-runtimes"


@contextmanager
def held(database_path: str) -> Iterator[int]:
    """A new runtime session number of ``database_path``, marked as running until the
    block ends (or the process does)."""
    path = marks_path(database_path)
    with _guard:
        marks = _open.get(path)
        if marks is None:
            marks = _open[path] = _Marks(path, _open_marks(path))
        number = _take_free_number(marks)
    try:
        yield number
    finally:
        with _guard:
            fcntl.lockf(marks.descriptor, fcntl.LOCK_UN, 1, number)
            marks.numbers.discard(number)
            if not marks.numbers:
                del _open[path]
                os.close(marks.descriptor)


def ended(database_path: str, numbers: list[int]) -> list[int]:
    """Those of ``numbers`` that no running runtime holds: ended (a number from before
    this scheme, a process id, is one too)."""
    path = marks_path(database_path)
    with _guard:
        marks = _open.get(path)
        if marks is not None:
            return [number for number in numbers if number not in marks.numbers
                    and not _held_elsewhere(marks.descriptor, number, path)]
        try:
            descriptor = os.open(path, os.O_RDWR)
        except FileNotFoundError:
            return list(numbers)  # no runtime has run since the file was made
        except OSError as exc:
            raise _unusable(path, exc) from None
        try:  # this process holds no mark of this database: closing drops nothing
            return [number for number in numbers if not _held_elsewhere(descriptor, number, path)]
        finally:
            os.close(descriptor)


def _open_marks(path: str) -> int:
    try:
        return os.open(path, os.O_RDWR | os.O_CREAT, 0o666)  # as the lock file: every user of the database
    except OSError as exc:
        raise _unusable(path, exc) from None


def _take_free_number(marks: _Marks) -> int:
    while True:
        number = secrets.randbelow(LARGEST_NUMBER) + 1
        if number in marks.numbers:
            continue
        try:
            fcntl.lockf(marks.descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, number)
        except OSError as exc:
            if exc.errno in (errno.EAGAIN, errno.EACCES):
                continue  # another process's runtime drew it: draw again
            raise _unusable(marks.path, exc) from None  # no record locks here (ENOLCK ...)
        marks.numbers.add(number)
        return number


def _held_elsewhere(descriptor: int, number: int, path: str) -> bool:
    """Whether another process holds byte ``number``: a lock that cannot be had says so
    (and one that can is let go at once)."""
    if not 1 <= number <= LARGEST_NUMBER:
        return False
    try:
        fcntl.lockf(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, number)
    except OSError as exc:
        if exc.errno in (errno.EAGAIN, errno.EACCES):
            return True
        raise _unusable(path, exc) from None
    fcntl.lockf(descriptor, fcntl.LOCK_UN, 1, number)
    return False


def _unusable(path: str, exc: OSError) -> BrokerError:
    return BrokerError(_CANNOT_OPEN, f"Unable to open the file '{path}' that marks the database's running "
                                     f"runtimes: {exc.strerror or exc}.")


def _forget_marks() -> None:
    # A forked child holds none of its parent's record locks, and may have inherited the
    # guard locked by a thread it does not have: its parent's runtimes are not its own.
    global _guard
    _open.clear()
    _guard = threading.Lock()


os.register_at_fork(after_in_child=_forget_marks)
