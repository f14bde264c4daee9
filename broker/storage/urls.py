"""What a SQLite URL says about its file: for the engine's checks, the database's key and
the write lock beside it, and the commands that must not create a database."""

from __future__ import annotations

from urllib.parse import unquote, urlsplit

from sqlalchemy.engine import URL
from sqlalchemy.util import asbool


def file_uri(parsed: URL) -> bool:
    """Whether the URL says uri=true (read as SQLAlchemy reads it: ``uri=false`` is no)."""
    uri = parsed.query.get("uri")
    return uri is not None and asbool(uri if isinstance(uri, str) else uri[-1])


def sqlite_file(parsed: URL) -> str | None:
    """The path of the file a SQLite URL names, a ``file:`` URI's (``uri=true``) too; None
    for another backend or no file."""
    database = parsed.database or ""
    if parsed.get_backend_name() != "sqlite" or database in ("", ":memory:"):
        return None
    if file_uri(parsed) and database.startswith("file:"):
        database = unquote(urlsplit(database).path)  # file:PATH, file:///PATH, percent-encoded
    return database or None
