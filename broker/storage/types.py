"""Column types that read the same on SQLite and PostgreSQL.

SQLite has no uuid or timezone-aware timestamp type: identifiers are stored there as
the canonical 36-character text (readable from the plain ``sqlite3`` shell) and
timestamps as naive UTC. Both come back to Python as ``uuid.UUID`` and aware UTC
``datetime``.

On SQLite the conversions run for every uuid and time column of every hot-path row, so
they have their own processors: the same text SQLAlchemy would write, produced and
parsed without its generic layers, and uuids memoized (a conversation's handle and
group come back on every message).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

from sqlalchemy import DateTime, String, Uuid
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator, TypeEngine

K = TypeVar("K")
V = TypeVar("V")
T = TypeVar("T")

# Entries per uuid memo before it starts over (both memos full: about 7 MB).
_MEMO_LIMIT = 1 << 14
_uuid_by_text: dict[str, uuid.UUID] = {}
# By ``UUID.int``: a UUID object's own hash runs Python code.
_text_by_uuid: dict[int, str] = {}


def _uuid_text(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, uuid.UUID):
        value = uuid.UUID(str(value))
    text = _text_by_uuid.get(value.int)
    return _remember(_text_by_uuid, value.int, str(value)) if text is None else text


def _text_uuid(value: Any) -> uuid.UUID | None:
    if value is None or isinstance(value, uuid.UUID):
        return value
    found = _uuid_by_text.get(value)
    return _remember(_uuid_by_text, value, uuid.UUID(value)) if found is None else found


def _remember(memo: dict[K, V], key: K, value: V) -> V:
    if len(memo) >= _MEMO_LIMIT:
        memo.clear()
    memo[key] = value
    return value


def _as_utc(value: datetime) -> datetime:
    """Naive values are taken to be UTC already."""
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value if value.tzinfo is UTC else value.astimezone(UTC)


# The last moment written and its text: a batch of arrivals shares one enqueue time.
_last_utc: tuple[datetime | None, str | None] = (None, None)


def _utc_text(value: datetime | None) -> str | None:
    global _last_utc
    last, text = _last_utc
    if value is last:
        return text
    text = _utc_text_of(value)
    _last_utc = (value, text)
    return text


def _utc_text_of(value: datetime | None) -> str | None:
    if value is None:
        return None
    # SQLAlchemy's SQLite DATETIME storage format ("2026-11-22 23:59:59.000123"), so
    # stored text and SQL comparisons on it are unchanged: ISO text without the offset.
    if value.tzinfo is UTC:  # what the broker itself writes, once per message
        # isoformat's timespec argument costs more than the formatting itself; without
        # it a whole second has no fraction, which the storage format still spells out.
        text = value.isoformat(" ")[:-6]
        return text if value.microsecond else text + ".000000"
    return _as_utc(value).replace(tzinfo=None).isoformat(" ", "microseconds")


def _text_utc(value: str | None) -> datetime | None:
    if value is None:
        return None
    try:
        return datetime.fromisoformat(value + "+00:00")  # stored as naive UTC
    except ValueError:  # text written by something else (a date, an offset)
        moment = datetime.fromisoformat(value)
        return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


class _DirectOnSQLite(TypeDecorator[T]):
    """On SQLite, ``to_sqlite`` and ``from_sqlite`` are the whole bind and result
    processing; PostgreSQL keeps SQLAlchemy's."""

    to_sqlite: Callable[[Any], Any]
    from_sqlite: Callable[[Any], Any]

    def bind_processor(self, dialect: Dialect) -> Callable[[Any], Any] | None:
        if dialect.name == "postgresql":
            return super().bind_processor(dialect)
        return self.to_sqlite

    def result_processor(self, dialect: Dialect, coltype: object) -> Callable[[Any], Any] | None:
        if dialect.name == "postgresql":
            return super().result_processor(dialect, coltype)
        return self.from_sqlite


class GUID(_DirectOnSQLite[uuid.UUID]):
    """A uniqueidentifier: native ``uuid`` on PostgreSQL, canonical text elsewhere."""

    impl = String(36)
    cache_ok = True
    to_sqlite = staticmethod(_uuid_text)
    from_sqlite = staticmethod(_text_uuid)

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        if dialect.name == "postgresql":
            return dialect.type_descriptor(Uuid(as_uuid=True))
        return dialect.type_descriptor(String(36))

    def process_bind_param(self, value: Any, dialect: Dialect) -> Any:
        if value is None or dialect.name == "postgresql":
            return value
        return _uuid_text(value)

    def process_result_value(self, value: Any, dialect: Dialect) -> uuid.UUID | None:
        return _text_uuid(value)


class UTCDateTime(_DirectOnSQLite[datetime]):
    """A point in time stored as UTC and returned as an aware UTC ``datetime``."""

    impl = DateTime(timezone=True)
    cache_ok = True
    to_sqlite = staticmethod(_utc_text)
    from_sqlite = staticmethod(_text_utc)

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        if dialect.name == "postgresql":
            return dialect.type_descriptor(DateTime(timezone=True))
        return dialect.type_descriptor(DateTime(timezone=False))

    def process_bind_param(self, value: Any, dialect: Dialect) -> Any:
        if value is None:
            return None
        if dialect.name != "postgresql":
            return _utc_text(value)
        return _as_utc(value)

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if isinstance(value, str):
            return _text_utc(value)
        moment: datetime = value
        if moment.tzinfo is None:
            return moment.replace(tzinfo=UTC)
        return moment.astimezone(UTC)
