"""Opening a database that cannot be used: every failure is a numbered BrokerError."""

from __future__ import annotations

import socket
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
@pytest.mark.parametrize(("change", "number"), [
    ({"port": 1}, DATABASE_FAILURE),  # nothing listens: the driver's words
    ({"database": "no_such_database_for_the_broker"}, 4060),  # SQL Server's "Cannot open database"
    ({"username": "no_such_role_for_the_broker"}, 18456),  # "Login failed for user"
])
def test_a_postgresql_server_that_refuses_the_connection_is_a_numbered_error(change: dict[str, object],
                                                                             number: int) -> None:
    url = make_url(POSTGRES_URL or "").set(**change).render_as_string(hide_password=False)
    with pytest.raises(broker.BrokerError) as raised:
        broker.connect(url)
    assert raised.value.number == number and "connection" in raised.value.message


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


@pytest.mark.parametrize("query", [
    "timeout=nan", "timeout=inf", "timeout=-1", "timeout=3000000",  # past PRAGMA busy_timeout's 32-bit milliseconds
    "mode=ro",  # SQLite's own parameter, read only in a file: URI: the driver ignored it (and wrote)
])
def test_sqlite_parameters_the_broker_cannot_honour_are_59011(tmp_path: Path, query: str) -> None:
    with pytest.raises(InvalidArgumentError) as raised:
        broker.connect(f"sqlite:///{tmp_path / 'x.db'}?{query}")
    assert raised.value.number == BAD_URL
    assert list(tmp_path.iterdir()) == []


def test_a_file_uri_is_opened_as_sqlite_reads_it_with_its_lock_beside_the_file(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError) as raised:  # uri=true without file: made a file named 'x.db?mode=ro'
        broker.connect(f"sqlite:///{tmp_path / 'x.db'}?mode=ro&uri=true")
    assert raised.value.number == BAD_URL
    broker.connect(f"sqlite:///{tmp_path / 'x.db'}").dispose()
    read_only = broker.connect(f"sqlite:///file:{tmp_path / 'x.db'}?mode=ro&uri=true")
    try:
        assert read_only.catalog("sys.service_queues") == []
        with pytest.raises(broker.BrokerError) as refused:
            read_only.create_queue("Q")
        assert refused.value.number == 3906
    finally:
        read_only.dispose()
    assert sorted(path.name for path in tmp_path.iterdir() if "x.db" not in path.name) == []


def test_a_postgresql_url_without_a_database_is_59011() -> None:
    # It connected to the server's default database (the user's name) and made the catalog there.
    with pytest.raises(InvalidArgumentError) as raised:
        broker.connect("postgresql+psycopg://root:p@ss@127.0.0.1:5432/")
    assert raised.value.number == BAD_URL
    assert "p@ss" not in raised.value.message and "ss@" not in raised.value.message  # the whole password hidden


@pytest.mark.skipif(POSTGRES_URL is None, reason="BROKER_TEST_POSTGRES_URL is not set: no PostgreSQL server")
def test_a_server_that_accepts_and_never_answers_is_10060_at_the_connect_timeout() -> None:
    with socket.socket() as listener:  # accepts (the kernel's backlog), never answers
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        port = listener.getsockname()[1]
        with pytest.raises(broker.BrokerError) as raised:
            broker.connect(f"postgresql+psycopg://root@127.0.0.1:{port}/x?connect_timeout=1")
    assert raised.value.number == 10060


@pytest.mark.skipif(POSTGRES_URL is None, reason="BROKER_TEST_POSTGRES_URL is not set: no PostgreSQL server")
def test_a_connection_broken_without_a_sqlstate_is_10054() -> None:
    import psycopg  # the error psycopg raises when the server closes an open connection

    from broker.storage.driver_errors import as_broker_error
    assert as_broker_error(psycopg.OperationalError("server closed the connection unexpectedly")).number == 10054


@pytest.mark.parametrize("query", ["check_same_thread=false", "cached_statements=10", "uri=false"])
def test_sqlite_parameters_that_change_nothing_the_broker_needs_are_taken(tmp_path: Path, query: str) -> None:
    broker.connect(f"sqlite:///{tmp_path / 'x.db'}?{query}").dispose()
    assert (tmp_path / "x.db").exists()
