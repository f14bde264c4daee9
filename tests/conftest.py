"""Shared fixtures: every conformance test runs once per backend.

Each test gets a fresh database: a new SQLite file under ``tmp_path`` (never
``:memory:``: locking needs several connections to one file). The PostgreSQL backend
joins this parametrization in its own issue. Helpers live in ``support.py``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from support import (  # noqa: F401 - re-exported for tests that import them from here
    CONTRACT,
    INITIATOR_QUEUE,
    INITIATOR_SERVICE,
    REPLY,
    REQUEST,
    TARGET_QUEUE,
    TARGET_SERVICE,
    endpoint,
    open_dialog,
    wait_until,
)

import broker

BACKENDS = ["sqlite"]


@pytest.fixture(params=BACKENDS)
def db_url(request: pytest.FixtureRequest, tmp_path) -> str:  # type: ignore[no-untyped-def]
    return f"sqlite:///{tmp_path / 'broker.db'}"


@pytest.fixture
def db(db_url: str) -> Iterator[broker.Broker]:
    database = broker.connect(db_url)
    yield database
    database.dispose()


@pytest.fixture
def tutorial(db: broker.Broker) -> broker.Broker:
    """The objects of the single-database tutorial (spec 12.1, steps 1-5)."""
    db.set_broker_enabled(True)
    db.create_message_type(REQUEST, "WELL_FORMED_XML")
    db.create_message_type(REPLY, "WELL_FORMED_XML")
    db.create_contract(CONTRACT, {REQUEST: "INITIATOR", REPLY: "TARGET"})
    db.create_queue(TARGET_QUEUE)
    db.create_service(TARGET_SERVICE, TARGET_QUEUE, [CONTRACT])
    db.create_queue(INITIATOR_QUEUE)
    db.create_service(INITIATOR_SERVICE, INITIATOR_QUEUE)
    return db
