"""A database failure met inside a verb, told as a numbered :class:`BrokerError`.

The verbs check their arguments before any SQL runs (``broker.arguments``), so what
reaches here is the database itself failing: a lock wait that ran out, a deadlock, a
full disk, a lost connection. Each gets SQL Server's number for the same situation where
there is one (1205 deadlock victim, 1222 lock timeout, 1105 no space, ...), else the
project's own ``DATABASE_FAILURE``. The driver's exception stays the ``__cause__``.
"""

from __future__ import annotations

import re

from broker.errors import DATABASE_FAILURE, BrokerError

# SQLite's primary result codes (sqlite3 errors carry ``sqlite_errorcode``; the low byte
# is the primary code).
_SQLITE_NUMBERS = {
    5: (1222, "Lock request time out period exceeded."),  # SQLITE_BUSY
    6: (1222, "Lock request time out period exceeded."),  # SQLITE_LOCKED
    8: (3906, "Failed to update database because the database is read-only."),  # SQLITE_READONLY
    10: (823, "The operating system returned an error on a read or write of the database file."),  # IOERR
    11: (824, "The database file is corrupt."),  # SQLITE_CORRUPT
    18: (8459, "The message is larger than the database stores (SQLite: 1,000,000,000 bytes)."),  # TOOBIG
    13: (1105, "Could not allocate space in the database: the disk is full."),  # SQLITE_FULL
    26: (5120, "The file is not a database."),  # SQLITE_NOTADB
}
# The server did not answer in time (Windows sockets' "did not properly respond after a
# period of time", as SQL Server's clients report it).
CONNECT_TIMED_OUT = 10060
# PostgreSQL's SQLSTATE classes and codes (psycopg errors carry ``sqlstate``).
_POSTGRES_NUMBERS = {
    "40P01": (1205, "The transaction was deadlocked on lock resources with another process and has been "
                    "chosen as the deadlock victim. Rerun the transaction."),
    "40001": (1205, "The transaction could not be serialized with a concurrent one. Rerun the transaction."),
    "55P03": (1222, "Lock request time out period exceeded."),
    "57014": (1222, "The statement was canceled (a statement or lock timeout ran out)."),
    "25006": (3906, "Failed to update database because the database is read-only."),  # read-only, hot standby
    "53100": (1105, "Could not allocate space in the database: the disk is full."),
    "42883": (206, "Operand type clash."),
    "42804": (206, "Operand type clash."),
    "08": (10054, "The connection to the database server was lost."),
    "57P": (10054, "The database server shut the connection."),
}


def as_broker_error(exc: BaseException) -> BrokerError:
    """The numbered error for a database failure, SQLAlchemy's or the driver's own
    (raise it ``from exc``)."""
    driver = getattr(exc, "orig", None) or exc
    detail = (str(driver).strip().splitlines() or [type(driver).__name__])[0]
    code = getattr(driver, "sqlite_errorcode", None)
    if isinstance(code, int) and (code & 0xFF) in _SQLITE_NUMBERS:
        number, text = _SQLITE_NUMBERS[code & 0xFF]
        return BrokerError(number, f"{text} ({detail})")
    state = getattr(driver, "sqlstate", None)
    if state is None and type(driver).__name__ == "ConnectionTimeout":  # psycopg's connect_timeout ran out
        return BrokerError(CONNECT_TIMED_OUT, f"The database server did not answer within the connect timeout. "
                                              f"({detail})")
    refused = _login_refusal(detail) if state is None and _from_psycopg(driver) else None
    if refused is not None:
        return refused
    if getattr(exc, "connection_invalidated", False) or (state is None and _psycopg_connection_failure(driver)):
        number, text = _POSTGRES_NUMBERS["08"]  # the connection broke: the server sent no SQLSTATE
        return BrokerError(number, f"{text} ({detail})")
    if isinstance(state, str):
        for prefix in (state, state[:3], state[:2]):
            if prefix in _POSTGRES_NUMBERS:
                number, text = _POSTGRES_NUMBERS[prefix]
                return BrokerError(number, f"{text} ({detail})")
    return BrokerError(DATABASE_FAILURE, reason=detail)


# A connection the server refused carries no SQLSTATE (libpq has no result to give one):
# the server's words say which. SQL Server's numbers for the same refusals; a server that
# speaks another language keeps 59020 and its own words.
_LOGIN_REFUSALS = (
    (re.compile(r'FATAL:\s+database "(?P<name>.*)" does not exist'),
     4060, 'Cannot open database "{name}" requested by the login. The login failed.'),
    (re.compile(r'FATAL:\s+role "(?P<name>.*)" does not exist'), 18456, "Login failed for user '{name}'."),
    (re.compile(r'FATAL:\s+password authentication failed for user "(?P<name>.*)"'),
     18456, "Login failed for user '{name}'."),
)


def _login_refusal(detail: str) -> BrokerError | None:
    """4060 or 18456 for a PostgreSQL server that refused to open a connection, else None."""
    for pattern, number, text in _LOGIN_REFUSALS:
        found = pattern.search(detail)
        if found is not None:
            return BrokerError(number, f"{text.format(name=found['name'])} ({detail})")
    return None


def _from_psycopg(driver: BaseException) -> bool:
    """psycopg's OperationalError, or a kind of it."""
    return any(kind.__module__.startswith("psycopg") and kind.__name__ == "OperationalError"
               for kind in type(driver).__mro__)


def _psycopg_connection_failure(driver: BaseException) -> bool:
    """psycopg's OperationalError (or a kind of it) without a SQLSTATE on a connection
    that was open: it broke (the server closed it, the network dropped it). Connecting
    that fails ("connection failed: ...": refused, no such database or role) is not a
    lost connection (4060, 18456, else the driver's words under 59020)."""
    return _from_psycopg(driver) and not str(driver).startswith("connection failed")
