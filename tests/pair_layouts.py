"""Where the target instance's database lives in the tests between two instances: on
SQLite, or on PostgreSQL (the "mixed" layout: every catalog and the initiator's database
stay on SQLite). The fixtures of the network tests are made from these."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from conftest import BACKENDS
from two_instances import Pair, two_instances

LAYOUTS = {"sqlite": "sqlite", "mixed": "postgresql"}  # the target instance's database


def layouts() -> list[str]:
    """The layouts the configured backends allow (a fixture's ``params``)."""
    return [layout for layout, backend in LAYOUTS.items() if backend in BACKENDS]


@contextmanager
def target_database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The URL of the target's database for the layout ``request.param``; a PostgreSQL
    database is dropped afterwards."""
    if LAYOUTS[request.param] == "sqlite":
        yield f"sqlite:///{tmp_path / 'target.db'}"
        return
    databases = request.getfixturevalue("postgres_databases")
    created = databases.create(empty=False)
    try:
        yield databases.url_of(created)
    finally:
        databases.drop(created)


@contextmanager
def pair_of_instances(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Pair]:
    """``two_instances`` for the layout ``request.param``, disposed of afterwards."""
    with target_database(request, tmp_path) as url:
        pair = two_instances(tmp_path, url)
        try:
            yield pair
        finally:
            for side in (pair.initiator, pair.target):
                side.inst.dispose()
