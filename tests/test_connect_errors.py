"""Opening a database that cannot be used: every failure is a numbered BrokerError."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from conftest import POSTGRES_URL
from sqlalchemy.engine import make_url

import broker
from broker.errors import BAD_URL, DATABASE_FAILURE, InvalidArgumentError


@pytest.mark.parametrize("url", [
    "postgresql+psycopg://u@h:abc/db",  # a port that is not a number
    "postgresql+psycopg://u@[::1/db",  # an unclosed IPv6 bracket
    "sqlite:///{folder}/x.db?timeout=abc",  # a driver parameter it cannot take
    "sqlite:///{folder}/x.db?check_same_thread=maybe",
])
def test_a_url_whose_parts_the_driver_refuses_is_59011(tmp_path: Path, url: str) -> None:
    with pytest.raises(InvalidArgumentError) as raised:
        broker.connect(url.format(folder=tmp_path))
    assert raised.value.number == BAD_URL


def test_an_engine_option_of_the_wrong_kind_is_59011(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError) as raised:
        broker.connect(f"sqlite:///{tmp_path / 'x.db'}", connect_args=5)
    assert raised.value.number == BAD_URL


@pytest.mark.skipif(POSTGRES_URL is None, reason="BROKER_TEST_POSTGRES_URL is not set: no PostgreSQL server")
@pytest.mark.parametrize("change", [{"port": 1}, {"database": "no_such_database_for_the_broker"},
                                    {"username": "no_such_role_for_the_broker"}])
def test_a_postgresql_server_that_refuses_the_connection_is_a_numbered_error(change: dict[str, object]) -> None:
    url = make_url(POSTGRES_URL or "").set(**change).render_as_string(hide_password=False)
    with pytest.raises(broker.BrokerError) as raised:
        broker.connect(url)
    assert raised.value.number == DATABASE_FAILURE and "connection" in raised.value.message


def test_a_database_a_later_release_upgraded_is_948_and_left_as_it_is(tmp_path: Path) -> None:
    path = tmp_path / "newer.db"
    broker.connect(f"sqlite:///{path}").dispose()
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE alembic_version SET version_num = '9999_from_a_later_release'")
    with pytest.raises(broker.BrokerError) as raised:
        broker.connect(f"sqlite:///{path}")
    assert raised.value.number == 948 and "9999_from_a_later_release" in raised.value.message
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT version_num FROM alembic_version").fetchall() == [("9999_from_a_later_release",)]
