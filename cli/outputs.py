"""Files a command writes: never one of the broker's own database files, and never half written.

``broker export TQ r.db`` with ``--db sqlite:///r.db`` used to open the database file for
writing (truncating it) while the engine had it open. :func:`refuse_database_files`
refuses such a target, and :func:`replaced` writes a new file beside the target and
renames it into place only once it is complete, so a failure leaves the target as it was
(and a signal, or a later export after a SIGKILL, leaves no temporary file behind).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import signal
import stat
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

import click

from cli.signals import ending_on
from cli.state import CliState, sqlite_path

# What SQLite (WAL, rollback journal) and the broker's write lock keep beside a database file.
COMPANIONS = ("", "-wal", "-shm", "-journal", "-lock", "-runtimes")


def database_urls(state: CliState) -> list[str]:
    """Every database the command line opens or names: ``--db``'s, or the instance catalog
    and all its members (any of them may be open by the command)."""
    if state.instance_url is None:
        return [state.url]
    from sqlalchemy import select

    from broker.storage.models import InstanceDatabase

    with state.instance().msdb.engine.connect() as conn:
        members = list(conn.execute(select(InstanceDatabase.url)).scalars())
    return [state.instance_url, *members]


def database_files(urls: Iterable[str]) -> list[tuple[Path, Path]]:
    """(file, database file) for the SQLite files of ``urls`` and every companion file
    SQLite or the broker keeps beside them."""
    files: list[tuple[Path, Path]] = []
    for url in urls:
        path = sqlite_path(url)
        if path is not None:
            files.extend((Path(f"{path}{suffix}"), path) for suffix in COMPANIONS)
    return files


def _same_file(one: Path, other: Path) -> bool:
    """Whether two names are one file: by inode when both exist (hard and symbolic links),
    else by resolved path (a companion SQLite has not made yet). Only ``stat``: opening a
    database file and closing it again would drop this process's locks on it."""
    try:
        return os.path.samefile(one, other)
    except OSError:
        pass
    try:
        return one.resolve() == other.resolve()
    except (OSError, RuntimeError):  # a loop of symbolic links: no database file either
        return False


def refuse_database_files(target: str, state: CliState) -> None:
    """A usage error when ``target`` is a file of a database the command line names."""
    if target == "-":
        return
    path = Path(target)
    for database_file, database in database_files(database_urls(state)):
        if _same_file(path, database_file):
            raise click.BadParameter(
                f"{click.format_filename(target)!r} is a file of the database {click.format_filename(str(database))}: "
                "writing it would destroy the database; give another file",
                param_hint="'FILE'",
            )


@contextmanager
def replaced(target: str) -> Iterator[IO[str]]:
    """Text to write to ``target`` ("-" is stdout): into a new file in the same folder,
    renamed over ``target`` when the block ends without an exception (removed otherwise,
    on SIGTERM and SIGHUP too: :func:`cli.signals.ending_on`). The temporary files of
    writers that were killed outright are removed first (:func:`_remove_stale_temporaries`).

    A target that exists and is no regular file (a FIFO, ``/dev/stdout``) is written in
    place: renaming over it would replace the device, not feed it.
    """
    if target == "-":
        with click.open_file("-", "w", encoding="utf-8") as stdout:
            yield stdout
            stdout.flush()
        return
    path = Path(os.path.realpath(target))  # through a symbolic link, as open() writes
    try:
        existing: os.stat_result | None = path.stat()
    except FileNotFoundError:
        existing = None
    if existing is not None and not stat.S_ISREG(existing.st_mode):
        with click.open_file(target, "w", encoding="utf-8") as out:
            yield out
        return
    _remove_stale_temporaries(path.parent)
    with ending_on(signal.SIGTERM, signal.SIGHUP):
        try:
            descriptor, temporary = _new_temporary(path.parent)
        except OSError as exc:  # name the file asked for, not the temporary one
            raise click.FileError(target, hint=exc.strerror) from None
        try:
            with open(descriptor, "w", encoding="utf-8") as out:
                if existing is not None:
                    os.chmod(out.fileno(), stat.S_IMODE(existing.st_mode))
                yield out
                out.flush()
                os.fsync(out.fileno())
                os.replace(temporary, path)  # still open, so still locked: no sweep takes it
        except BaseException:
            temporary.unlink(missing_ok=True)
            raise


# A writer's temporary file: made as .new, renamed to .tmp once locked (flock, held while
# its descriptor is open). So an unlocked .tmp file is one whose writer is gone.
_MADE, _LOCKED = ".broker-{}.new", ".broker-{}.tmp"


def _new_temporary(folder: Path) -> tuple[int, Path]:
    """A new file in ``folder`` open for writing (0o666 less the umask, like any new file),
    locked for as long as it stays open, and its name."""
    token = secrets.token_hex(6)
    made, locked = folder / _MADE.format(token), folder / _LOCKED.format(token)
    descriptor = os.open(made, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with contextlib.suppress(OSError):  # a file system without flock: no sweep can take it either
            fcntl.flock(descriptor, fcntl.LOCK_EX)
        os.rename(made, locked)
    except BaseException:
        os.close(descriptor)
        made.unlink(missing_ok=True)
        raise
    return descriptor, locked


def _remove_stale_temporaries(folder: Path) -> None:
    """Remove the temporary files in ``folder`` of writers killed outright (SIGKILL, a
    crash): those no open descriptor holds locked. One that cannot be checked or removed
    stays, and is harmless: every writer's file has a new random name."""
    for temporary in folder.glob(_LOCKED.format("*")):
        with contextlib.suppress(OSError):
            _remove_if_unlocked(temporary)


def _remove_if_unlocked(temporary: Path) -> None:
    """Remove ``temporary`` if no one holds its lock (OSError when someone does)."""
    descriptor = os.open(temporary, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)  # BlockingIOError while its writer lives
        if os.path.samestat(os.fstat(descriptor), os.lstat(temporary)):  # not renamed away meanwhile
            temporary.unlink()
    finally:
        os.close(descriptor)
