"""Engines configured for the broker's transaction discipline.

The dialect's settings (SQLite: WAL, ``synchronous=FULL``, a long ``busy_timeout`` and
``BEGIN IMMEDIATE`` for every transaction; PostgreSQL: READ COMMITTED) come from
``broker.storage.backends``.

A URL the broker cannot use is refused before any connection, with a numbered error:
59011 (``BAD_URL``) for a URL that does not parse or names a backend, driver or
in-memory database the broker does not run on, 59010 (``DRIVER_MISSING``) for a driver
that is not installed, and 5120 for a SQLite file that cannot be opened. Like SQLite and
SQL Server, the broker creates the database file but never its folder: a missing folder
is 5120, naming the folder to create. A file that is not a database is 5120 when SQLite
first reads it: the broker never opens the file itself, since closing any descriptor of
a file drops every POSIX lock this process holds on it, SQLite's included.
"""

from __future__ import annotations

import math
import os
import re
import sqlite3
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import URL, ExceptionContext, make_url
from sqlalchemy.exc import ArgumentError

from broker.errors import BAD_URL, DRIVER_MISSING, ArgumentTypeError, BrokerError, InvalidArgumentError
from broker.storage import pending
from broker.storage.backends import backend_for
from broker.storage.urls import file_uri, sqlite_file

# backend -> the one driver the broker runs it on (the listener speaks psycopg 3)
DRIVERS = {"sqlite": "pysqlite", "postgresql": "psycopg"}
# driver module -> what to install for it
INSTALL = {"psycopg": "pip install 'servicebroker[postgres]'"}
SUPPORTED = "SQLite (sqlite:///FILE) or PostgreSQL (postgresql+psycopg://USER@HOST/DATABASE)"
# SQLite's result codes for a file it cannot use, and what to say about them
_UNUSABLE = {sqlite3.SQLITE_NOTADB: "It is not a SQLite database.", sqlite3.SQLITE_CANTOPEN: "SQLite cannot open it."}
_PASSWORD = re.compile(r"(://[^:/@]*:)[^/?#]*@")  # to the last @ before the host: a password may hold @
# SQLite's query parameters the broker takes: the busy timeout, and file: URIs (whose own
# parameters, mode=ro ..., SQLite reads). Others the driver would ignore, or would change
# the transaction discipline (isolation_level).
_SQLITE_PARAMETERS = {"timeout", "uri", "check_same_thread", "cached_statements"}
LONGEST_BUSY_TIMEOUT_S = 2_147_483.647  # PRAGMA busy_timeout takes milliseconds in 32 bits
# PostgreSQL: how long connecting may take unless the URL says (connect_timeout=): a
# server that accepts and never answers would hang every command for good.
POSTGRES_CONNECT_TIMEOUT_S = 15  # as SQL Server clients (ADO.NET, ODBC) default to
NO_DATABASE = 911  # SQL Server's "Database '%.*ls' does not exist"


def create_broker_engine(url: str, **kwargs: Any) -> Engine:
    """Create an engine for ``url`` with the broker's connection settings applied."""
    parsed = checked_url(url)
    if parsed.get_backend_name() != "sqlite":
        # Text travels as UTF-8 whatever the URL or the server's default says: another
        # client encoding fails on names it cannot carry, outside any numbered error.
        timeout = {} if "connect_timeout" in parsed.query else {"connect_timeout": POSTGRES_CONNECT_TIMEOUT_S}
        kwargs["connect_args"] = {**timeout, **kwargs.get("connect_args", {}), "client_encoding": "utf8"}
    try:
        engine = create_engine(parsed, **kwargs)
    except ImportError as exc:  # the dialect imports its driver here
        module = exc.name or parsed.get_driver_name()
        hint = INSTALL.get(module, f"pip install {module}")
        raise BrokerError(DRIVER_MISSING, driver=module, hint=hint) from exc
    except (ArgumentError, ValueError, TypeError) as exc:  # a query parameter or engine option it cannot take
        raise _bad_url(url, f"{exc} (a parameter of the URL or an engine option)") from None
    if parsed.get_backend_name() == "sqlite":
        _report_unusable_file(engine, parsed.database or "")
    pending.install(engine)  # first: held-back writes are flushed before the backend's commit
    backend_for(engine).configure(engine)
    return engine


def checked_url(url: str) -> URL:
    """``url`` parsed and checked (:func:`parse_url`, :func:`check_sqlite_file`), or the
    numbered error for what the broker cannot use."""
    parsed = parse_url(url)
    if parsed.get_backend_name() == "sqlite":
        check_sqlite_file(url, parsed)
    elif not parsed.database and not {"dbname", "service"} & set(parsed.query) and not os.environ.get("PGDATABASE"):
        raise _bad_url(url, "it names no database (postgresql+psycopg://USER@HOST/DATABASE); the server's "
                            "default one is not taken for it")
    return parsed


def existing_database(url: str, creator: str) -> URL:
    """:func:`checked_url`, and 911 for a SQLite file that is not there: for what reads
    a database, or changes one that must exist, and must not create an empty file (SQLite
    creates the file it is asked to open). ``creator`` is what the message tells to run
    instead. A PostgreSQL database is never created."""
    parsed = checked_url(url)
    path = missing_file(parsed)
    if path is not None:
        raise BrokerError(NO_DATABASE, f"Database '{path}' does not exist. Make sure that the name is entered "
                                       f"correctly ({creator} creates a database).")
    return parsed


def missing_file(parsed: URL) -> str | None:
    """The path of the SQLite file ``parsed`` names when that file is not there, else None."""
    path = sqlite_file(parsed)
    return path if path is not None and not os.path.exists(path) else None


def parse_url(url: object) -> URL:
    """``url`` parsed, or 59011 (206 for a URL that is not text) saying what is wrong."""
    if not isinstance(url, str):
        raise ArgumentTypeError(206, what="the database URL", given=type(url).__name__, expected="str")
    if "\x00" in url:
        raise _bad_url(url, "it holds the NUL character")
    try:
        url.encode("utf-8")  # what the drivers pass on (SQLite's file names too)
    except UnicodeEncodeError:
        raise _bad_url(url, "it is not valid text (a byte that is not UTF-8?)") from None
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise _bad_url(url, f"it is not of the form BACKEND://... ; give {SUPPORTED}") from None
    except ValueError as exc:  # a port that is not a number, an unclosed IPv6 bracket
        raise _bad_url(url, str(exc)) from None
    backend = parsed.get_backend_name()
    if backend not in DRIVERS:
        raise _bad_url(url, f"the broker runs on {SUPPORTED}, not on {backend}")
    driver = parsed.get_driver_name()  # the dialect's default when the URL names none
    if driver != DRIVERS[backend]:
        raise _bad_url(url, f"the broker drives {backend} through {DRIVERS[backend]}, not {driver}; "
                            f"give {backend}+{DRIVERS[backend]}://...")
    return parsed


def check_sqlite_file(url: str, parsed: URL) -> None:
    """Refuse an in-memory database (59011) and a file SQLite could not open (5120)."""
    database = parsed.database or ""
    if database in ("", ":memory:") or database.startswith("file::memory:") or parsed.query.get("mode") == "memory":
        raise _bad_url(url, "the broker needs a SQLite file (several connections share its locks)")
    _check_sqlite_parameters(url, parsed)
    if file_uri(parsed):
        if not database.startswith("file:"):
            raise _bad_url(url, "with uri=true the database is a file: URI (sqlite:///file:PATH?mode=ro&uri=true)")
        return  # a file: URI names its file in SQLite's own syntax: SQLite checks it
    try:
        reason = _why_sqlite_cannot_open(Path(database))
    except OSError as exc:  # a name too long for the file system, a loop of links
        reason = exc.strerror or str(exc)
    if reason is not None:
        raise InvalidArgumentError(5120, path=database, reason=reason)


def _check_sqlite_parameters(url: str, parsed: URL) -> None:
    """59011 for a query parameter the broker does not take (the driver would ignore it,
    with a warning) and for a busy timeout that is not seconds from 0 to 2147483.647."""
    unknown = sorted(set(parsed.query) - _SQLITE_PARAMETERS) if not file_uri(parsed) else []
    if unknown:
        raise _bad_url(url, f"the broker takes no {', '.join(unknown)} parameter for SQLite (it takes timeout=SECONDS, "
                            "and SQLite's own parameters in a file: URI with uri=true)")
    timeout = parsed.query.get("timeout")
    if timeout is None:
        return
    try:
        seconds = float(timeout if isinstance(timeout, str) else timeout[-1])
    except ValueError:
        seconds = math.nan
    if not 0 <= seconds <= LONGEST_BUSY_TIMEOUT_S:  # NaN too
        raise _bad_url(url, f"timeout={timeout} is not seconds from 0 to {LONGEST_BUSY_TIMEOUT_S}")


def _why_sqlite_cannot_open(path: Path) -> str | None:
    """Why SQLite could not open or create ``path``, or None when it can."""
    folder = path.parent
    if not path.exists():
        if not folder.exists():
            return f"The folder {folder} does not exist: create it first (mkdir -p {folder})."
        if not folder.is_dir():
            return f"{folder} is a file, not a folder."
        if not os.access(folder, os.W_OK | os.X_OK):
            return f"The folder {folder} does not allow creating a file in it."
        return None
    if path.is_dir():
        return "It is a folder, not a file."
    return None


def _report_unusable_file(engine: Engine, path: str) -> None:
    """Make SQLite's "not a database" and "cannot open" 5120, on whichever statement meets them."""

    def numbered(context: ExceptionContext) -> None:
        code = getattr(context.original_exception, "sqlite_errorcode", None)
        if code in _UNUSABLE:
            raise InvalidArgumentError(5120, path=path, reason=_UNUSABLE[code]) from context.original_exception

    event.listen(engine, "handle_error", numbered)


def _bad_url(url: str, reason: str) -> InvalidArgumentError:
    shown = _PASSWORD.sub(r"\1***@", url)
    return InvalidArgumentError(BAD_URL, url=repr(shown if len(shown) <= 200 else shown[:197] + "..."),
                                reason=reason)
