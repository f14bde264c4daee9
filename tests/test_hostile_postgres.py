"""Hostile values on PostgreSQL, compared with SQLite: the same call must give the same
numbered ``BrokerError`` on both backends, never a raw driver or Python exception, and
the database must work afterwards.

Each test here failed when it was written (a PostgreSQL hunt after the SQLite one).
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url
from support import INITIATOR_SERVICE, REQUEST, TARGET_QUEUE, open_dialog, target_handle

import broker

postgres_only = pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)


def number_of(call) -> int:  # type: ignore[no-untyped-def]
    try:
        call()
    except broker.BrokerError as error:
        return error.number
    raise AssertionError("no BrokerError was raised")


def still_works(db: broker.Broker) -> None:
    """A normal SEND and RECEIVE succeed after the refused call."""
    handle = open_dialog(db, b"<RequestMsg>after</RequestMsg>")
    with db.transaction() as tx:
        messages = tx.receive(TARGET_QUEUE, conversation_handle=target_handle(db, handle))
    assert [m.message_body for m in messages] == [b"<RequestMsg>after</RequestMsg>"]


# -- values longer than a catalog column ---------------------------------------------------


def test_an_activation_procedure_name_longer_than_its_column_is_refused_alike(tutorial: broker.Broker) -> None:
    """sys.service_queues.activation_procedure is nvarchar(776): PostgreSQL refused a longer
    PROCEDURE_NAME with 59020 ("value too long for type character varying(776)") while
    SQLite stored it. The gate must refuse it on both, as SQL Server does (103)."""
    long_name = "pkg.mod:" + "f" * 800
    activation = {"procedure_name": long_name, "max_queue_readers": 1, "status": False}
    assert number_of(lambda: tutorial.create_queue("LongProcQueue", activation=activation)) == 103
    assert number_of(lambda: tutorial.alter_queue(TARGET_QUEUE, activation=activation)) == 103
    assert tutorial.catalog("sys.service_queues", name="LongProcQueue") == []
    still_works(tutorial)


# -- catalog filters -------------------------------------------------------------------------


def test_a_catalog_filter_on_a_column_the_view_lacks_is_207(tutorial: broker.Broker) -> None:
    """SQLite read the unknown double-quoted column as a string literal and returned [];
    PostgreSQL gave 59020 ("column does not exist"). SQL Server: 207 Invalid column name."""
    assert number_of(lambda: tutorial.catalog("sys.services", bogus=1)) == 207
    assert number_of(lambda: tutorial.catalog("sys.routes", no_such_column="x")) == 207
    assert number_of(lambda: tutorial.catalog("sys.conversation_endpoints", bogus=None)) == 207
    still_works(tutorial)


def test_a_catalog_filter_of_the_wrong_kind_is_206_on_every_backend(tutorial: broker.Broker) -> None:
    """PostgreSQL said 206 (no operator integer = character varying); SQLite returned []."""
    assert number_of(lambda: tutorial.catalog("sys.services", service_id="abc")) == 206
    assert number_of(lambda: tutorial.catalog("sys.services", name=5)) == 206
    assert number_of(lambda: tutorial.catalog("sys.services", name=1.5)) == 206
    assert number_of(lambda: tutorial.catalog("sys.service_queues", is_receive_enabled="yes")) == 206
    still_works(tutorial)


def test_a_catalog_filter_on_a_column_a_backend_computes_is_checked_by_its_documented_kind(
        tutorial: broker.Broker) -> None:
    """SQLite declares no type for a computed view column, so a text filter on an int
    column returned []; PostgreSQL types a bare NULL as text, so an int filter on
    sys.procedures' object_id was 206. Both now follow SQL Server's documented types."""
    assert number_of(lambda: tutorial.catalog("sys.service_queues", principal_id="dbo")) == 206
    assert number_of(lambda: tutorial.catalog("sys.service_queues", type_desc=5)) == 206
    assert number_of(lambda: tutorial.catalog("sys.database_principals", name=5)) == 206
    assert number_of(lambda: tutorial.catalog("sys.transmission_queue", message_body="x")) == 206
    assert number_of(lambda: tutorial.catalog("sys.services", name=b"x")) == 206
    assert tutorial.catalog("sys.procedures", object_id=5) == []
    assert tutorial.catalog("sys.dm_broker_activated_tasks", execute_as=1) == []
    assert tutorial.catalog("sys.symmetric_keys", key_thumbprint=b"\x01") == []
    queues = tutorial.catalog("sys.service_queues", type="SQ", principal_id=None)
    assert queues == []  # = NULL matches nothing, as in SQL Server
    assert {q["type_desc"] for q in tutorial.catalog("sys.service_queues", type="SQ")} == {"SERVICE_QUEUE"}
    dbo = tutorial.catalog("sys.database_principals", name="dbo")
    assert [row["name"] for row in dbo] == ["dbo"]
    if dbo[0]["sid"] is not None:
        assert [row["name"] for row in tutorial.catalog("sys.database_principals", sid=dbo[0]["sid"])] == ["dbo"]
    still_works(tutorial)


# -- tx.query's parameters ---------------------------------------------------------------


def test_query_parameters_that_no_backend_can_take_are_numbered(tutorial: broker.Broker) -> None:
    """A lone surrogate escaped as a raw UnicodeEncodeError on both backends; a NUL was
    59020 on PostgreSQL and accepted by SQLite. Text that is stored or compared takes
    neither (docs/errors.md: 102)."""
    for value in ("\ud800", "a\x00b"):
        with pytest.raises(broker.BrokerError) as caught:
            with tutorial.transaction() as tx:
                tx.query("SELECT :v AS v", v=value)
        assert caught.value.number == 102, (value, caught.value)
    still_works(tutorial)


def test_a_query_integer_past_bigint_is_never_a_raw_overflow(tutorial: broker.Broker) -> None:
    """SQLite raised a raw OverflowError for 2**64 (PostgreSQL took it as numeric)."""
    try:
        with tutorial.transaction() as tx:
            tx.query("SELECT :v AS v", v=2**64)
    except broker.BrokerError as error:
        assert error.number == 8115, error
    still_works(tutorial)


# -- the database or its connection refusing ---------------------------------------------


@postgres_only
def test_a_read_only_postgresql_database_is_3906_as_on_sqlite(tutorial: broker.Broker, db_url: str) -> None:
    """SQLite's read-only database gives 3906; PostgreSQL's (a hot standby, or
    default_transaction_read_only) gave 59020 (SQLSTATE 25006 was not mapped)."""
    read_only = broker.connect(db_url + "?options=-c%20default_transaction_read_only%3Don", upgrade=False)
    try:
        assert number_of(lambda: read_only.create_queue("ReadOnlyQueue")) == 3906
        assert number_of(lambda: open_dialog(read_only)) == 3906
    finally:
        read_only.dispose()
    still_works(tutorial)


def _ends_itself(tx: broker.Transaction, _watcher: broker.Broker, _handle: uuid.UUID) -> None:
    tx.query("SELECT pg_terminate_backend(pg_backend_pid())")


def _ended_by_another_session(tx: broker.Transaction, watcher: broker.Broker, handle: uuid.UUID) -> None:
    [row] = tx.query("SELECT pg_backend_pid() AS pid")
    with watcher.transaction() as other:
        other.query("SELECT pg_terminate_backend(:pid)", pid=row["pid"])
    tx.send(handle, REQUEST, b"<RequestMsg>after</RequestMsg>")  # the next verb finds it gone


@postgres_only
@pytest.mark.parametrize("lose", [_ends_itself, _ended_by_another_session])
def test_a_connection_lost_inside_a_transaction_is_10054(tutorial: broker.Broker, db_url: str, lose) -> None:  # type: ignore[no-untyped-def]
    """The server shutting the connection mid-transaction must give 10054 out of the
    ``with`` block. Ended by the transaction itself, the rollback touched the invalidated
    connection and raised SQLAlchemy's raw PendingRollbackError; ended by another session
    (an administrator, a failover), SQLAlchemy does not invalidate it, and the failed
    rollback's raw OperationalError took the place of the verb's 10054."""
    handle = open_dialog(tutorial)
    watcher = broker.connect(db_url)

    def lose_the_connection() -> None:
        with tutorial.transaction() as tx:
            tx.send(handle, REQUEST, b"<RequestMsg>lost</RequestMsg>")
            lose(tx, watcher, handle)

    try:
        assert number_of(lose_the_connection) == 10054
    finally:
        watcher.dispose()
    [row] = tutorial.catalog("sys.conversation_endpoints", conversation_handle=handle)
    assert row["send_sequence"] == 1  # the lost transaction's SENDs did not stay
    still_works(tutorial)


@postgres_only
def test_a_client_encoding_that_cannot_carry_the_text_is_never_a_raw_error(tutorial: broker.Broker,
                                                                             db_url: str) -> None:
    """``?client_encoding=latin1`` made psycopg raise a raw UnicodeEncodeError for any
    name outside Latin-1. The broker should speak UTF-8 to the server whatever the URL
    says (or refuse the URL with a number)."""
    try:
        latin = broker.connect(db_url + "?client_encoding=latin1", upgrade=False)
    except broker.BrokerError:
        return  # refusing the URL is fine too
    try:
        try:
            latin.create_queue("\u4e2dQueue")
        except broker.BrokerError:
            pass
        try:
            with latin.transaction() as tx:
                tx.begin_dialog(INITIATOR_SERVICE, "//\u4e2d/Target")
        except broker.BrokerError:
            pass
    finally:
        latin.dispose()
    still_works(tutorial)


@postgres_only
def test_a_sql_ascii_database_is_refused_with_a_number(postgres_databases, db_url: str) -> None:  # type: ignore[no-untyped-def]
    """connect() to a SQL_ASCII database raised a raw TypeError (SQLAlchemy reads the
    server version as bytes)."""
    name = f"broker_test_ascii_{uuid.uuid4().hex[:8]}"
    postgres_databases._execute(f"CREATE DATABASE \"{name}\" ENCODING 'SQL_ASCII' LC_COLLATE 'C' LC_CTYPE 'C' "
                                "TEMPLATE template0")
    try:
        try:
            database = broker.connect(postgres_databases.url_of(name))
        except broker.BrokerError as error:
            assert error.number > 0
        else:
            database.dispose()
    finally:
        postgres_databases.drop(name)


@postgres_only
def test_a_database_or_role_the_server_does_not_have_is_4060_or_18456(db_url: str) -> None:
    """A refused connect carries no SQLSTATE: both were 59020 with the driver's words."""
    missing = make_url(db_url).set(database=f"broker_missing_{uuid.uuid4().hex[:8]}")
    stranger = make_url(db_url).set(username=f"broker_nobody_{uuid.uuid4().hex[:8]}")
    for url, number, words in ((missing, 4060, f'Cannot open database "{missing.database}" requested by the login.'),
                               (stranger, 18456, f"Login failed for user '{stranger.username}'.")):
        with pytest.raises(broker.BrokerError) as refused:
            broker.connect(url.render_as_string(hide_password=False))
        assert refused.value.number == number and words in refused.value.message, refused.value.message


# -- connect: SQLite file names (met while comparing) --------------------------------------


def test_a_sqlite_file_name_too_long_for_the_file_system_is_5120(tmp_path: Path) -> None:
    """Path.exists() raised a raw OSError (ENAMETOOLONG) out of broker.connect."""
    url = f"sqlite:///{tmp_path / ('x' * 300)}.db"
    assert make_url(url).database
    assert number_of(lambda: broker.connect(url)) == 5120
