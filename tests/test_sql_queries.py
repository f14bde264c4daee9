"""T-SQL queries as SQL Server runs them: table variables that refuse what does not fit,
names that stay in their database, joins, aggregates and datetimes read from columns.

Each test pins a fix of ``broker.sql.queries`` or ``broker.sql.broker_statements``;
every one runs on SQLite and on PostgreSQL (conftest's ``db`` fixture).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from test_sql_hostile import failure, ok, printed

import broker
from broker.sql.outputs import Output, ResultSet
from broker.sql.session import Session

QUEUE, SERVICE, DATABASE = "q", "s", "mine"


@pytest.fixture
def session(db: broker.Broker) -> Iterator[Session]:
    with Session(db, database_name=DATABASE) as opened:
        yield opened


def send(db: broker.Broker, *bodies: bytes) -> None:
    """A queue ``q`` (of service ``s``) holding one DEFAULT message per body."""
    db.create_queue(QUEUE)
    db.create_service(SERVICE, QUEUE, ["DEFAULT"])
    with db.transaction() as tx:
        handle = tx.begin_dialog(SERVICE, SERVICE)
        for body in bodies:
            tx.send(handle, "DEFAULT", body)


def left(db: broker.Broker) -> int:
    return sum(1 for message in db.queue_rows(QUEUE) if message.message_type_name == "DEFAULT")


def result(outputs: list[Output]) -> ResultSet:
    [found] = [output for output in outputs if isinstance(output, ResultSet)]
    return found


# -- RECEIVE ... INTO a table variable ---------------------------------------------------------------


@pytest.mark.parametrize(("column", "expression", "kept"), [
    ("body VARBINARY(2)", "message_body", "0x6865"),
    ("body NVARCHAR(3)", "CAST(message_body AS VARCHAR(10))", "hel"),
])
def test_receive_into_a_column_too_short_is_2628_and_takes_nothing(db: broker.Broker, session: Session, column: str,
                                                                   expression: str, kept: str) -> None:
    send(db, b"hello")
    outputs = ok(session, f"DECLARE @t TABLE ({column});\n"
                          f"BEGIN TRY RECEIVE {expression} FROM q INTO @t END TRY\n"
                          "BEGIN CATCH PRINT CONCAT(ERROR_NUMBER(), ': ', ERROR_MESSAGE()) END CATCH\n"
                          "SELECT COUNT(*) AS n FROM @t")
    assert printed(outputs) == [f"2628: String or binary data would be truncated in table '@t', column 'body'. "
                                f"Truncated value: '{kept}'."]
    assert result(outputs).rows == ((0,),)
    assert left(db) == 1


def test_a_string_loses_only_trailing_blanks_into_a_short_column(db: broker.Broker, session: Session) -> None:
    send(db, b"ab   ", b"abc")
    error = failure(session, "DECLARE @t TABLE (s VARCHAR(2));\n"
                             "RECEIVE CAST(message_body AS VARCHAR(10)) FROM q INTO @t")
    assert error.number == 2628 and "Truncated value: 'ab'" in error.message
    assert left(db) == 2
    outputs = ok(session, "DECLARE @t TABLE (s VARCHAR(2)); RECEIVE TOP (1) CAST(message_body AS VARCHAR(10)) "
                          "FROM q INTO @t; SELECT s + '|' FROM @t")
    assert result(outputs).rows == (("ab|",),)


def test_select_into_a_table_variable_refuses_what_does_not_fit(session: Session) -> None:
    error = failure(session, "DECLARE @t TABLE (a VARCHAR(2)); SELECT 'abc' INTO @t")
    assert (error.number, error.message) == (2628, "String or binary data would be truncated in table '@t', "
                                                   "column 'a'. Truncated value: 'ab'.")


def test_receive_into_adds_every_row_or_none(db: broker.Broker, session: Session) -> None:
    send(db, b"1", b"x")
    outputs = ok(session, "DECLARE @t TABLE (n INT);\n"
                          "BEGIN TRY RECEIVE CAST(message_body AS VARCHAR(10)) FROM q INTO @t END TRY\n"
                          "BEGIN CATCH PRINT ERROR_NUMBER() END CATCH\n"
                          "SELECT COUNT(*) FROM @t")
    assert printed(outputs) == ["245"]
    assert result(outputs).rows == ((0,),)  # not the first message's row: the statement failed whole
    assert left(db) == 2


# -- names of another database -----------------------------------------------------------------------


@pytest.mark.parametrize("script", [
    "SELECT COUNT(*) FROM other.dbo.q",
    "SELECT COUNT(*) FROM other.sys.services",
    "SELECT COUNT(*) FROM other..q",  # the default schema, written as nothing
    "SELECT COUNT(*) FROM server.mine.dbo.q",
    "RECEIVE message_body FROM other.dbo.q",
    "RECEIVE message_body FROM server.mine.dbo.q",
    "DECLARE @g UNIQUEIDENTIFIER; GET CONVERSATION GROUP @g FROM other.dbo.q",
])
def test_a_name_in_another_database_is_40515(db: broker.Broker, session: Session, script: str) -> None:
    send(db, b"hello")
    error = failure(session, script)
    name = script.split("FROM ")[1]
    assert (error.number, error.message) == (40515, f"Reference to database and/or server name in '{name}' is "
                                                    "not supported in this version of SQL Server.")
    assert left(db) == 1
    assert result(ok(session, "SELECT COUNT(*) FROM MINE.dbo.q")).rows == ((1,),)  # its own name, any case


def test_a_name_in_another_database_of_an_instance_reads_nothing_of_it(
        instance_urls: tuple[str, str, str]) -> None:
    catalog, first_url, second_url = instance_urls
    inst = broker.instance(catalog)
    try:
        first, second = inst.add_database("A", first_url), inst.add_database("B", second_url)
        send(first, b"in A")
        second.create_queue(QUEUE)
        with Session(second, instance=inst, database_name="B") as session:
            assert failure(session, "SELECT COUNT(*) FROM A.dbo.q").number == 40515
            assert failure(session, "RECEIVE message_body FROM a.dbo.q").number == 40515
            assert result(ok(session, "SELECT COUNT(*) FROM b.dbo.q")).rows == ((0,),)
        assert left(first) == 1
    finally:
        inst.dispose()


# -- joins -------------------------------------------------------------------------------------------


def test_a_column_both_sides_of_a_join_have_is_ambiguous(db: broker.Broker, session: Session) -> None:
    send(db, b"hello")
    join = "FROM sys.services s JOIN sys.service_queues q ON s.service_queue_id = q.object_id"
    for script in (f"SELECT name {join}", f"SELECT s.name {join} WHERE name = 's'",
                   f"SELECT s.name AS n {join} ORDER BY name"):
        error = failure(session, script)
        assert (error.number, error.message) == (209, "Ambiguous column name 'name'.")
    assert result(ok(session, f"SELECT s.name, q.name {join} ORDER BY s.name")).rows == (("s", "q"),)
    assert result(ok(session, f"SELECT s.name AS name {join} ORDER BY name")).rows == (("s",),)


def test_select_star_over_a_join_returns_every_column_of_both_sides(session: Session) -> None:
    found = result(ok(session, "SELECT * FROM (SELECT 1 AS a, 3 AS b) x CROSS JOIN (SELECT 2 AS a) y"))
    assert (found.columns, found.rows) == (("a", "b", "a"), ((1, 3, 2),))
    found = result(ok(session, "SELECT y.* FROM (SELECT 1 AS a) x CROSS JOIN (SELECT 2 AS a) y"))
    assert (found.columns, found.rows) == (("a",), ((2,),))


def test_a_left_join_with_no_matching_row_gives_the_right_side_null(db: broker.Broker, session: Session) -> None:
    send(db, b"hello")
    found = result(ok(session, "DECLARE @t TABLE (a INT);\n"
                               "SELECT q.name, t.a FROM sys.service_queues q LEFT JOIN @t t ON t.a = 1"))
    assert found.rows == (("q", None),)


# -- aggregates --------------------------------------------------------------------------------------


@pytest.mark.parametrize(("numbers", "average"), [((0, -1), 0), ((-3, -4), -3)])
def test_avg_of_integers_truncates_toward_zero(session: Session, numbers: tuple[int, ...], average: int) -> None:
    fill = "".join(f"SELECT {number} INTO @t; " for number in numbers)
    found = result(ok(session, f"DECLARE @t TABLE (a INT); {fill}SELECT AVG(a) FROM @t"))
    assert found.rows == ((average,),)


def test_a_column_outside_aggregates_and_group_by_is_8120(db: broker.Broker, session: Session) -> None:
    send(db, b"hello")
    error = failure(session, "SELECT name, COUNT(*) AS c FROM sys.services")
    assert (error.number, error.message) == (8120, "Column 'sys.services.name' is invalid in the select list "
                                                   "because it is not contained in either an aggregate function "
                                                   "or the GROUP BY clause.")
    error = failure(session, "SELECT v.name, COUNT(*) FROM sys.services v GROUP BY v.service_id")
    assert error.number == 8120 and "'v.name'" in error.message
    assert failure(session, "SELECT *, COUNT(*) FROM q").number == 8120
    found = result(ok(session, "SELECT UPPER(s.name), COUNT(*) FROM sys.services s GROUP BY name"))
    assert found.rows == (("S", 1),)


# -- datetimes read from columns -----------------------------------------------------------------------


def test_column_datetimes_compare_with_getutcdate_and_literals(db: broker.Broker, session: Session) -> None:
    send(db, b"hello")
    assert result(ok(session, "SELECT COUNT(*) FROM q WHERE message_enqueue_time < GETUTCDATE()")).rows == ((1,),)
    found = result(ok(session, "SELECT name FROM sys.service_queues WHERE create_date > DATEADD(year, -1, "
                               "GETUTCDATE())"))
    assert found.rows == (("q",),)
    [[moment]] = result(ok(session, "RECEIVE message_enqueue_time FROM q")).rows
    assert isinstance(moment, datetime) and moment.tzinfo is None
    assert abs((datetime.now(UTC).replace(tzinfo=None) - moment).total_seconds()) < 600


# -- correlated subqueries ---------------------------------------------------------------------------


def test_a_subquery_reads_the_columns_of_the_row_around_it(db: broker.Broker, session: Session) -> None:
    # It looked for q.object_id in its own row only: 207.
    ok(session, "CREATE QUEUE q1; CREATE QUEUE q2; CREATE SERVICE s1 ON QUEUE q1")
    queues = "FROM sys.service_queues q WHERE q.name LIKE 'q_'"
    exists = result(ok(session, f"SELECT q.name {queues} AND EXISTS "
                                "(SELECT 1 FROM sys.services s WHERE s.service_queue_id = q.object_id)"))
    assert exists.rows == (("q1",),)
    counted = result(ok(session, "SELECT q.name, (SELECT COUNT(*) FROM sys.services s "
                                 f"WHERE s.service_queue_id = q.object_id) {queues} ORDER BY q.name"))
    assert counted.rows == (("q1", 1), ("q2", 0))
    unqualified = result(ok(session, f"SELECT name {queues} AND NOT EXISTS "
                                     "(SELECT 1 FROM sys.services s WHERE s.service_queue_id = object_id)"))
    assert unqualified.rows == (("q2",),)
