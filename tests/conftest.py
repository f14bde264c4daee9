"""Shared fixtures: every conformance test runs once per backend.

Each test gets a fresh database:

* SQLite: a new file under ``tmp_path`` (never ``:memory:``: locking needs several
  connections to one file).
* PostgreSQL (only when ``BROKER_TEST_POSTGRES_URL`` names a server; skipped otherwise):
  a new database per test, ``CREATE DATABASE ... TEMPLATE`` of a template that the
  session migrated to head once, dropped ``WITH (FORCE)`` afterwards (a test's
  subprocesses may still hold connections). A database per test, not a schema, because
  the catalog views live in their own schema ``sys``. Tests marked ``empty_database``
  get a database without the catalog (to test the migrations themselves).

Helpers live in ``support.py``.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import URL, make_url
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

# Every test runs on both backends; BROKER_TEST_BACKENDS=sqlite (or postgresql) narrows it.
BACKENDS = os.environ.get("BROKER_TEST_BACKENDS", "sqlite,postgresql").split(",")
POSTGRES_URL = os.environ.get("BROKER_TEST_POSTGRES_URL")


class PostgresDatabases:
    """Makes and drops the per-test databases on the test server."""

    def __init__(self, url: str) -> None:
        self.url: URL = make_url(url)
        self.admin: Engine = create_engine(self.url, isolation_level="AUTOCOMMIT")
        self.template = f"broker_template_{uuid.uuid4().hex[:12]}"
        self._execute(f'CREATE DATABASE "{self.template}" TEMPLATE template0')
        migrated = broker.connect(self.url_of(self.template))
        migrated.dispose()

    def url_of(self, name: str) -> str:
        return self.url.set(database=name).render_as_string(hide_password=False)

    def create(self, *, empty: bool) -> str:
        name = f"broker_test_{uuid.uuid4().hex[:12]}"
        self._execute(f'CREATE DATABASE "{name}" TEMPLATE "{"template0" if empty else self.template}"')
        if not empty:  # a clone of the template: a database of its own gets a broker id of its own
            engine = create_engine(self.url_of(name))
            with engine.begin() as conn:
                conn.execute(text("UPDATE sb_database SET service_broker_guid = :guid"), {"guid": uuid.uuid4()})
            engine.dispose()
        return name

    def drop(self, name: str) -> None:
        self._execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def close(self) -> None:
        self.drop(self.template)
        self.admin.dispose()

    def _execute(self, sql: str) -> None:
        with self.admin.connect() as conn:
            conn.execute(text(sql))


@pytest.fixture(scope="session")
def postgres_databases() -> Iterator[PostgresDatabases]:
    if POSTGRES_URL is None:
        pytest.skip("BROKER_TEST_POSTGRES_URL is not set: no PostgreSQL server to test on")
    databases = PostgresDatabases(POSTGRES_URL)
    yield databases
    databases.close()


@pytest.fixture(params=BACKENDS)
def db_url(request: pytest.FixtureRequest, tmp_path) -> Iterator[str]:  # type: ignore[no-untyped-def]
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'broker.db'}"
        return
    databases: PostgresDatabases = request.getfixturevalue("postgres_databases")
    name = databases.create(empty=request.node.get_closest_marker("empty_database") is not None)
    yield databases.url_of(name)
    databases.drop(name)


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


# Instances: the catalog and two member databases on one backend, or mixed (the catalog
# and the initiator's database on SQLite, the target's on PostgreSQL).
INSTANCE_LAYOUTS = {
    "sqlite": ("sqlite", "sqlite", "sqlite"),
    "postgresql": ("postgresql", "postgresql", "postgresql"),
    "mixed": ("sqlite", "sqlite", "postgresql"),
}


@pytest.fixture(params=[layout for layout, backends in INSTANCE_LAYOUTS.items()
                        if set(backends) <= set(BACKENDS)])
def instance_urls(request: pytest.FixtureRequest, tmp_path) -> Iterator[tuple[str, str, str]]:  # type: ignore[no-untyped-def]
    """URLs of an instance catalog, an initiator database and a target database."""
    created: list[str] = []
    urls = []
    for role, backend in zip(("instance", "initiator", "target"), INSTANCE_LAYOUTS[request.param], strict=True):
        if backend == "sqlite":
            urls.append(f"sqlite:///{tmp_path / f'{role}.db'}")
            continue
        databases: PostgresDatabases = request.getfixturevalue("postgres_databases")
        created.append(databases.create(empty=False))
        urls.append(databases.url_of(created[-1]))
    yield urls[0], urls[1], urls[2]
    for name in created:
        request.getfixturevalue("postgres_databases").drop(name)
