"""The SQLite column processors write exactly what SQLAlchemy's own would, and read it back.

``broker.storage.types`` replaces SQLAlchemy's generic processing on SQLite with its own fast
paths; stored text must not change with them (SQL comparisons on it, rows written by
older versions, the plain ``sqlite3`` shell).
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta, timezone

import pytest
from sqlalchemy import DateTime, String
from sqlalchemy.dialects import sqlite

from broker.storage.types import GUID, UTCDateTime

DIALECT = sqlite.dialect()
MOMENTS = [
    datetime(2026, 11, 23, 1, 2, 3, 456789, tzinfo=UTC),
    datetime(2026, 11, 23, 1, 2, 3, tzinfo=UTC),  # a whole second: no fraction in isoformat
    datetime(2026, 11, 23, 1, 2, 3, 7, tzinfo=UTC),
    datetime(2026, 11, 23, 3, 2, 3, 500, tzinfo=timezone(timedelta(hours=2))),  # another offset
    datetime(2026, 11, 23, 1, 2, 3, 250000),  # naive: taken as UTC
]


def _sqlalchemy_text(moment: datetime) -> str:
    as_utc = moment if moment.tzinfo is None else moment.astimezone(UTC).replace(tzinfo=None)
    process = DateTime().dialect_impl(DIALECT).bind_processor(DIALECT)
    assert process is not None
    return str(process(as_utc))


@pytest.mark.parametrize("moment", MOMENTS, ids=str)
def test_a_moment_is_stored_as_sqlalchemy_stores_it_and_reads_back_equal(moment: datetime) -> None:
    column = UTCDateTime()
    to_text = column.bind_processor(DIALECT)
    from_text = column.result_processor(DIALECT, None)
    assert to_text is not None and from_text is not None
    text = to_text(moment)
    assert text == _sqlalchemy_text(moment)
    back = from_text(text)
    assert back.tzinfo is UTC
    assert back == (moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC))


def test_a_uuid_is_stored_as_its_canonical_text_and_reads_back_the_same() -> None:
    column = GUID()
    to_text = column.bind_processor(DIALECT)
    from_text = column.result_processor(DIALECT, None)
    assert to_text is not None and from_text is not None
    value = uuid.uuid4()
    process = String(36).dialect_impl(DIALECT).bind_processor(DIALECT)
    expected = str(value) if process is None else process(str(value))
    assert to_text(value) == expected == to_text(str(value).upper())
    assert from_text(to_text(value)) == value
    assert to_text(None) is None and from_text(None) is None
