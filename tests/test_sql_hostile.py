"""Hostile T-SQL: scripts that fail part-way, wrong-typed variables and odd arguments.

Each test pins a fix: a failing RECEIVE leaves its messages in the queue, a statement
that fails does not leave half its work committed, odd arguments give SQL Server's error
rather than a Python message (or a hang). Effects are checked through the Python API.
Every test runs on SQLite and on PostgreSQL (conftest's ``db`` fixture).
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

import broker
from broker.sql.errors import SqlError
from broker.sql.outputs import Failed, Output, Printed
from broker.sql.session import Session

QUEUE, SERVICE = "q", "s"


@pytest.fixture
def session(db: broker.Broker) -> Iterator[Session]:
    with Session(db) as opened:
        yield opened


@pytest.fixture
def queued(db: broker.Broker) -> broker.Broker:
    """A queue holding one DEFAULT message whose body is not XML."""
    db.create_queue(QUEUE)
    db.create_service(SERVICE, QUEUE, ["DEFAULT"])
    with db.transaction() as tx:
        handle = tx.begin_dialog(SERVICE, SERVICE)
        tx.send(handle, "DEFAULT", b"hello")
    return db


def errors(outputs: list[Output]) -> list[SqlError]:
    return [output.error for output in outputs if isinstance(output, Failed)]


def failure(session: Session, script: str) -> SqlError:
    """Run ``script``, which must fail exactly once; the error."""
    outputs = session.run(script)
    found = errors(outputs)
    assert len(found) == 1, outputs
    return found[0]


def printed(outputs: list[Output]) -> list[str]:
    return [output.text for output in outputs if isinstance(output, Printed)]


def ok(session: Session, script: str) -> list[Output]:
    outputs = session.run(script)
    assert not errors(outputs), outputs
    return outputs


def left(db: broker.Broker) -> int:
    return sum(1 for message in db.queue_rows(QUEUE) if message.message_type_name == "DEFAULT")


def endpoint_count(db: broker.Broker) -> int:
    return len(db.catalog("sys.conversation_endpoints"))


# -- a RECEIVE that fails takes nothing ------------------------------------------------------------


@pytest.mark.parametrize(("script", "number"), [
    ("RECEIVE @nowhere = message_body FROM q", 137),
    ("RECEIVE TOP (1) message_body, @nowhere FROM q", 137),
    ("RECEIVE TOP (1) * FROM q INTO @missing", 1087),
    ("RECEIVE TOP (1) no_such_column FROM q", 207),
    ("DECLARE @t TABLE (a INT); RECEIVE TOP (1) message_body, status FROM q INTO @t", 213),
    ("RECEIVE TOP (1) CAST(message_body AS XML) AS body FROM q", 9400),
    ("RECEIVE TOP (1) 1 / 0 AS x FROM q", 8134),
    ("DECLARE @i INT; RECEIVE TOP (1) @i = message_body FROM q", 8115),
    ("DECLARE @x XML; RECEIVE TOP (1) @x = message_body FROM q", 9400),
    ("DECLARE @t TABLE (a XML); RECEIVE TOP (1) message_body FROM q INTO @t", 9400),
    ("WAITFOR (RECEIVE TOP (1) CAST(message_body AS XML) FROM q), TIMEOUT 1000", 9400),
])
def test_a_failed_receive_leaves_its_messages(queued: broker.Broker, session: Session, script: str,
                                              number: int) -> None:
    assert failure(session, script).number == number
    assert left(queued) == 1


def test_a_failed_receive_dooms_the_open_transaction(queued: broker.Broker, session: Session) -> None:
    # No savepoint undoes the statement alone: the transaction is doomed, never committed.
    outputs = session.run("BEGIN TRAN\n"
                          "BEGIN TRY RECEIVE TOP (1) 1 / 0 AS x FROM q END TRY\n"
                          "BEGIN CATCH PRINT XACT_STATE() END CATCH\n"
                          "COMMIT")
    assert printed(outputs) == ["-1"]
    assert [error.number for error in errors(outputs)] == [3930, 3998]
    assert session.transaction.trancount == 0
    assert left(queued) == 1


def test_a_receive_that_succeeds_still_takes_its_message(queued: broker.Broker, session: Session) -> None:
    outputs = ok(session, "DECLARE @b VARBINARY(MAX); RECEIVE TOP (1) @b = message_body FROM q; PRINT @@ROWCOUNT")
    assert printed(outputs) == ["1"]
    assert left(queued) == 0


# -- a handle variable of the wrong type: nothing begun -------------------------------------------


@pytest.mark.parametrize("type_name", ["INT", "VARCHAR(10)", "NVARCHAR(36)"])
def test_begin_dialog_into_a_variable_not_uniqueidentifier(queued: broker.Broker, session: Session,
                                                          type_name: str) -> None:
    before = endpoint_count(queued)
    error = failure(session, f"DECLARE @h {type_name}\nBEGIN DIALOG @h FROM SERVICE s TO SERVICE 's'")
    assert error.number == 206
    assert "uniqueidentifier is incompatible with" in error.message
    assert endpoint_count(queued) == before


def test_get_conversation_group_into_an_int(queued: broker.Broker, session: Session) -> None:
    assert failure(session, "DECLARE @g INT\nGET CONVERSATION GROUP @g FROM q").number == 206
    assert left(queued) == 1


# -- WAITFOR DELAY / TIME ---------------------------------------------------------------------------


@pytest.mark.parametrize(("script", "number"), [
    ("WAITFOR TIME NULL", 102),
    ("WAITFOR DELAY NULL", 102),
    ("WAITFOR DELAY 1", 102),
    ("WAITFOR DELAY '1900-01-03'", 148),
    ("WAITFOR DELAY 'soon'", 148),
    ("WAITFOR DELAY '25:00'", 148),
    ("DECLARE @n INT = 1\nWAITFOR DELAY @n", 148),
    ("DECLARE @n NVARCHAR(10)\nWAITFOR DELAY @n", 148),
    ("DECLARE @d DATETIME = '1900-01-02'\nWAITFOR DELAY @d", 148),
])
def test_waitfor_refuses_what_is_not_a_time_of_day(session: Session, script: str, number: int) -> None:
    started = time.monotonic()
    assert failure(session, script).number == number
    assert time.monotonic() - started < 5


@pytest.mark.parametrize("script", [
    "WAITFOR DELAY '00:00:00.300'",
    "WAITFOR DELAY '00:00:00.3'",
    "DECLARE @d DATETIME = '1900-01-01 00:00:00.300'\nWAITFOR DELAY @d",
])
def test_waitfor_delay_waits_its_time(session: Session, script: str) -> None:
    started = time.monotonic()
    ok(session, script)
    assert 0.29 <= time.monotonic() - started < 5


# -- a length, precision or scale is a whole number --------------------------------------------------


@pytest.mark.parametrize(("script", "near"), [
    ("DECLARE @s NVARCHAR(1.5) = N'abc'", "1.5"),
    ("SELECT CAST(1 AS VARCHAR(1e3))", "1e3"),
    ("SELECT CAST(1 AS DECIMAL(10, 2.5))", "2.5"),
])
def test_a_type_size_that_is_not_whole_is_a_syntax_error(session: Session, script: str, near: str) -> None:
    error = failure(session, script)
    assert (error.number, error.message) == (102, f"Incorrect syntax near '{near}'.")
    assert printed(ok(session, "PRINT 'after'")) == ["after"]


# -- @@ERROR ---------------------------------------------------------------------------------------


def test_error_is_reset_by_a_statement_that_succeeds(session: Session) -> None:
    outputs = ok(session, "BEGIN TRY SELECT 1 / 0 AS x END TRY BEGIN CATCH PRINT @@ERROR END CATCH\n"
                          "PRINT 'ok'\n"
                          "PRINT @@ERROR")
    assert printed(outputs) == ["8134", "ok", "0"]


def test_error_after_if_is_the_if_statements(session: Session) -> None:
    outputs = ok(session, "BEGIN TRY SELECT 1 / 0 AS x END TRY BEGIN CATCH END CATCH\n"
                          "IF @@ERROR <> 0 PRINT @@ERROR")
    assert printed(outputs) == ["0"]


# -- an assigning SELECT assigns row by row ---------------------------------------------------------


def test_an_assigning_select_accumulates_row_by_row(db: broker.Broker, session: Session) -> None:
    for name in ("qa", "qc", "qb"):
        db.create_queue(name)
    outputs = ok(session, "DECLARE @s NVARCHAR(100) = N'', @n INT = 0\n"
                          "SELECT @s = @s + name FROM sys.service_queues WHERE name LIKE 'q_' ORDER BY name\n"
                          "PRINT @s\n"
                          "SELECT @n = @n + 1 FROM sys.service_queues WHERE name LIKE 'q_'\n"
                          "PRINT @n; PRINT @@ROWCOUNT")
    assert printed(outputs) == ["qaqbqc", "3", "0"]


def test_an_assigning_select_keeps_the_last_row_and_top(db: broker.Broker, session: Session) -> None:
    for name in ("qa", "qc", "qb"):
        db.create_queue(name)
    outputs = ok(session, "DECLARE @s NVARCHAR(100)\n"
                          "SELECT TOP (2) @s = name FROM sys.service_queues WHERE name LIKE 'q_' ORDER BY name DESC\n"
                          "PRINT @@ROWCOUNT; PRINT @s")
    assert printed(outputs) == ["2", "qb"]


# -- SQL Server's errors, not Python's words ---------------------------------------------------------


@pytest.mark.parametrize(("script", "number", "message"), [
    ("CREATE QUEUE q WITH STATUS = 1", 102, "Incorrect syntax near '1'."),
    ("SET LOCK_TIMEOUT NULL", 102, "Incorrect syntax near 'NULL'."),
    ("SELECT TOP (1.5) name FROM sys.service_queues", 1060, "The number of rows in the TOP clause must be"),
    ("RECEIVE TOP (1.5) * FROM q", 1060, "The number of rows in the TOP clause must be"),
    ("SELECT CAST('Infinity' AS DECIMAL(10, 2))", 8114, "Error converting data type nvarchar to numeric."),
    ("SELECT 'x' + 1", 245, "Conversion failed when converting the nvarchar value 'x' to data type int."),
    ("SELECT CAST(1e10 AS DATETIME)", 8115, "Arithmetic overflow error converting expression to data type datetime."),
    ("SELECT SUM(name) FROM sys.service_queues", 8117, "Operand data type nvarchar is invalid for sum operator."),
    ("RAISERROR('%d', 10, 1, 'abc')", 2786, "The data type of substitution parameter 1 does not match"),
    ("DECLARE @h UNIQUEIDENTIFIER\nBEGIN DIALOG @h FROM SERVICE s TO SERVICE 's' WITH LIFETIME = 'abc'", 245,
     "Conversion failed when converting the nvarchar value 'abc' to data type int."),
])
def test_errors_in_sql_servers_words(queued: broker.Broker, session: Session, script: str, number: int,
                                     message: str) -> None:
    error = failure(session, script)
    assert (error.number, error.message[:len(message)]) == (number, message)
    assert "Python" not in error.message and "<class" not in error.message and "Literal(" not in error.message
    assert left(queued) == 1


# -- GO, quotes, comments and line breaks as sqlcmd and SQL Server read them ---------------------------


@pytest.mark.parametrize("first", [
    "SELECT 1 AS [it's]",
    'SELECT 1 AS "it\'s"',
    "SELECT 1 AS [a]]'b]",
    'SELECT 1 AS "a""\'b"',
    "SELECT 'it''s' AS [x]",
    "SELECT 1 -- it's",
    "SELECT 1 /* it's */",
    "SELECT 1 /* /* nested */ it's */",
])
def test_an_apostrophe_in_a_name_or_comment_leaves_go_a_separator(session: Session, first: str) -> None:
    outputs = ok(session, f"{first}\nGO\nPRINT 'two'\r\nGO\r\nPRINT 'three'")
    assert printed(outputs) == ["two", "three"]


def test_a_go_inside_a_nested_comment_is_text(session: Session) -> None:
    outputs = ok(session, "PRINT 'one' /* outer /* inner */\nGO\nstill the comment */\nPRINT 'two'")
    assert printed(outputs) == ["one", "two"]


def test_line_breaks_in_literals_are_kept_as_written(session: Session) -> None:
    outputs = ok(session, "PRINT DATALENGTH('a\r\nb')\r\nGO\rPRINT DATALENGTH('a\rb')\n"
                          "PRINT CHARINDEX('\n', N'a\u2028b\x85c\x0cd'); PRINT LEN(N'a\u2028b\x85c\x0cd')")
    assert printed(outputs) == ["4", "3", "0", "7"]


def test_a_sent_body_keeps_its_crlf(queued: broker.Broker, session: Session) -> None:
    ok(session, "DECLARE @h UNIQUEIDENTIFIER\r\nBEGIN DIALOG @h FROM SERVICE s TO SERVICE 's'\r\n"
                "SEND ON CONVERSATION @h MESSAGE TYPE [DEFAULT] (CAST('a\r\nb' AS VARBINARY(MAX)))")
    bodies = [message.message_body for message in queued.queue_rows(QUEUE)]
    assert b"a\r\nb" in bodies


@pytest.mark.parametrize(("script", "number", "message", "line"), [
    ("PRINT 1\nSELECT 'abc\n\nx", 105, "Unclosed quotation mark after the character string 'abc\n\nx'.", 2),
    ("SELECT [abc", 105, "Unclosed quotation mark after the character string 'abc'.", 1),
    ("PRINT 1\r\n/* never /* */\nends", 113, "Missing end comment mark '*/'.", 2),
])
def test_an_unclosed_string_or_comment_is_a_lexer_error(session: Session, script: str, number: int, message: str,
                                                        line: int) -> None:
    error = failure(session, script)
    assert (error.number, error.message, error.line) == (number, message, line)
    assert printed(session.run(script)) == []  # nothing of the batch ran


def test_dateadd_and_datediff_take_a_datepart_keyword_and_count_as_sql_server_does(session: Session) -> None:
    outputs = ok(session, """
        PRINT CONVERT(NVARCHAR(30), DATEADD(day, 1, '2020-01-01'), 120)
        PRINT CONVERT(NVARCHAR(30), DATEADD(month, 1, '2020-01-31'), 120)  -- the month's last day
        PRINT CONVERT(NVARCHAR(30), DATEADD(dd, 1.9, '2020-01-01'), 120)  -- the fraction is truncated
        PRINT CONVERT(NVARCHAR(30), DATEADD(yy, -1, '2020-02-29'), 120)
        PRINT CONVERT(NVARCHAR(30), DATEADD(qq, 1, '2020-11-30'), 120)
        PRINT DATEDIFF(day, '2020-01-01 23:59', '2020-01-02 00:01')  -- one midnight crossed
        PRINT DATEDIFF(week, '2020-01-04', '2020-01-05')  -- Saturday to Sunday
        PRINT DATEDIFF(year, '2019-12-31', '2020-01-01')
        PRINT DATEDIFF(hh, '2020-01-01 11:00', '2020-01-01 10:59')""")
    assert [line[:19] for line in printed(outputs)] == [
        "2020-01-02 00:00:00", "2020-02-29 00:00:00", "2020-01-02 00:00:00", "2019-02-28 00:00:00",
        "2021-02-28 00:00:00", "1", "1", "1", "-1"]


def test_decimals_round_half_away_from_zero_and_overflow_their_precision(session: Session) -> None:
    outputs = ok(session, "PRINT CAST(1.25 AS DECIMAL(5,1)); PRINT CAST(-1.25 AS DECIMAL(5,1)); "
                          "PRINT CAST(1.5 AS DECIMAL); PRINT CAST(12.34567 AS MONEY); "
                          "DECLARE @d DECIMAL(10,2) = 3.145; PRINT @d; "
                          "IF '1.5' = 1.5 PRINT 'exact'")  # a comparison keeps every digit
    assert printed(outputs) == ["1.3", "-1.3", "2", "12.3457", "3.15", "exact"]
    assert failure(session, "SELECT CAST(123.456 AS DECIMAL(3,1))").number == 8115
    assert failure(session, "SELECT CAST(1000000 AS SMALLMONEY)").number == 8115


def test_numeric_text_in_arithmetic_keeps_its_fraction(session: Session) -> None:
    outputs = ok(session, "PRINT ABS('1.5'); PRINT '2.5' * 2; PRINT -'1.5'; PRINT '1.25' + 0.5")
    assert printed(outputs) == ["1.5", "5.0", "-1.5", "1.75"]


def test_integer_arithmetic_overflows_int_unless_a_side_is_bigint(session: Session) -> None:
    outputs = ok(session, "DECLARE @b BIGINT = 2147483647; PRINT @b + 1; "
                          "PRINT CAST(2147483647 AS BIGINT) * 2; "
                          "PRINT 2147483648 + 1; "  # a literal past INT's range is DECIMAL
                          "PRINT -2147483647 - 1; PRINT -7 / 2; PRINT -7 % 3; PRINT 9223372036854775806 % 7")
    assert printed(outputs) == ["2147483648", "4294967294", "2147483649", "-2147483648", "-3", "-1", "6"]
    for script in ("SELECT 2147483647 + 1", "DECLARE @i INT = 2147483647; SELECT @i + 1",
                   "SELECT 1000000 * 1000000", "DECLARE @i INT = -2147483648; SELECT -@i",
                   "DECLARE @i INT = -2147483648; SELECT @i / -1",
                   "DECLARE @b BIGINT = 9223372036854775807; SELECT @b + 1"):
        error = failure(session, script)
        assert error.number == 8115, script
        assert error.message.startswith("Arithmetic overflow error converting expression to data type"), script


def test_a_bigint_column_keeps_bigint_arithmetic(queued: broker.Broker, session: Session) -> None:
    # The column list of a RECEIVE takes expressions, a binary minus among them (it was
    # read as a sign: 102).
    outputs = ok(session, "DECLARE @n BIGINT, @m BIGINT; RECEIVE TOP (1) @n = message_sequence_number + 2147483647 "
                          "+ 1, @m = message_sequence_number - 1 FROM q; PRINT @n; PRINT @m")
    assert printed(outputs) == ["2147483648", "-1"]


def test_regular_identifiers_are_unicode(db: broker.Broker, session: Session) -> None:
    outputs = ok(session, "CREATE QUEUE Очередь; DECLARE @größe INT = 2, @1 INT = 3; "
                          "SELECT name FROM sys.service_queues WHERE name = N'Очередь'; PRINT @größe + @1")
    assert printed(outputs) == ["5"]
    assert [row["name"] for row in db.catalog("sys.service_queues")] == ["Очередь"]


# -- values as SQL Server converts, compares and prints them ---------------------------------------


@pytest.mark.parametrize(("expression", "expected"), [
    ("CASE WHEN 'b' LIKE '[a-c]' THEN 1 ELSE 0 END", "1"),  # a range, not the characters a, - and c
    ("CASE WHEN 'abc' LIKE '[]' THEN 1 ELSE 0 END", "0"),  # an empty set: Python's re refused it
    ("CASE WHEN 'x' LIKE '[^]' THEN 1 ELSE 0 END", "1"),
    ("CASE WHEN 'abc  ' LIKE 'a_C' THEN 1 ELSE 0 END", "1"),  # the value's trailing blanks do not count
    ("CASE WHEN 'abc' LIKE 'abc ' THEN 1 ELSE 0 END", "0"),  # the pattern's do
    ("CASE WHEN REPLICATE('a', 3000) LIKE '%a%a%a%a%a%b' THEN 1 ELSE 0 END", "0"),  # no backtracking
    ("CASE WHEN 'a' + CHAR(10) = 'a' THEN 1 ELSE 0 END", "0"),  # a line break is no trailing blank
    ("LEN('a' + CHAR(9))", "2"),
    ("1234567890123456789012345678901 + 1", "1234567890123456789012345678902"),  # 31 digits, none rounded
    ("CAST(0.1 AS DECIMAL(38,37))", "0.1000000000000000000000000000000000000"),
    ("1.0 / 3", "0.333333"),
    ("CAST(0.0000001 AS VARCHAR(30))", "0.0000001"),
    ("CAST(123456789.0E0 AS VARCHAR(30))", "1.23457e+008"),
    ("CAST(1.0E0 AS VARCHAR(30))", "1"),
    ("CAST('' AS INT)", "0"),
    ("CAST('true' AS BIT)", "1"),
    ("CAST('ab' AS CHAR(4)) + '|'", "ab  |"),
    ("CONVERT(VARCHAR(30), 1 + CAST('2020-01-02' AS DATETIME), 121)", "2020-01-03 00:00:00.000"),
    ("CONVERT(VARCHAR(30), CAST('2020-01-02 10:00' AS DATE), 121)", "2020-01-02"),  # a DATE has no time
    ("CONVERT(VARCHAR(30), CAST('2020-01-02T03:04:05.1234567' AS DATETIME2), 121)", "2020-01-02 03:04:05.123"),
    ("CONVERT(VARCHAR(30), CAST('2020-01-02T03:04:05Z' AS DATETIME2), 121)", "2020-01-02 03:04:05.000"),
    ("CONVERT(VARCHAR(30), CAST('20200102 03:04' AS DATETIME), 121)", "2020-01-02 03:04:00.000"),
    ("CONVERT(VARCHAR(30), CAST('Jan  2 2020 10:00AM' AS DATETIME), 121)", "2020-01-02 10:00:00.000"),
    ("CONVERT(VARCHAR(30), CAST('OCT 2 2020' AS DATETIME), 121)", "2020-10-02 00:00:00.000"),
    ("DATALENGTH(CAST(1 AS BIGINT))", "8"),
    ("ABS(CAST(-2000000000 AS BIGINT)) * 2", "4000000000"),  # ABS keeps BIGINT
    ("DATALENGTH(GETDATE())", "8"),
    ("REPLACE('ABC', 'b', 'x')", "AxC"),
    ("REPLACE('abc', '', 'x')", "abc"),
    ("CHARINDEX('', 'abc')", "0"),
    ("CHARINDEX('x', N'ßx')", "2"),
    ("UPPER(N'ßa')", "ßA"),
    ("ISNULL(REPLICATE('a', -1), 'NULL')", "NULL"),
    ("CAST('<a><b/><b/></a>' AS XML).value('count(/a/b)', 'int')", "2"),
    ("CAST('<Error xmlns=\"http://schemas.microsoft.com/SQL/ServiceBroker/Error\"><Code>-8489</Code></Error>' AS XML)"
     ".value('declare namespace b=\"http://schemas.microsoft.com/SQL/ServiceBroker/Error\"; (/b:Error/b:Code)[1]',"
     " 'int')", "-8489"),
    ("CAST('<Error xmlns=\"urn:x\"><Code>5</Code></Error>' AS XML).value('(/*:Error/*:Code)[1]', 'int')", "5"),
    ("CAST(N'<?xml version=\"1.0\" encoding=\"utf-16\"?><a>1</a>' AS XML).value('(/a)[1]', 'int')", "1"),
])
def test_values_follow_sql_server(session: Session, expression: str, expected: str) -> None:
    assert printed(ok(session, f"PRINT {expression}")) == [expected]


@pytest.mark.parametrize(("script", "number"), [
    ("SELECT DATEADD('day', 1, '2020-01-01')", 1023),  # a datepart is a word, not a string
    ("DECLARE @p NVARCHAR(10) = N'day'; SELECT DATEDIFF(@p, '2020-01-01', '2020-01-02')", 1023),
    ("SELECT DATEADD(fortnight, 1, '2020-01-01')", 155),
    ("SELECT DATEADD(year, 100000, '2020-01-01')", 517),
    ("SELECT DATEADD(day, 9999999999, '2020-01-01')", 8115),
    ("SELECT DATEDIFF(ms, '1900-01-01', '2020-01-01')", 535),
    ("SELECT 99999999999999999999999999999999999999 + 1", 8115),  # past DECIMAL(38)
    ("SELECT 1" + "1" * 4400, 1007),  # Python's int() refused it with a raw error
    ("SELECT 1e400", 1007),
    ("SELECT CAST(1 AS XYZ)", 243),
    ("SELECT CAST('0001-01-01' AS DATETIME)", 242),  # DATETIME begins in 1753
    ("SELECT TRY_CAST(1 AS XYZ)", 243),
    ("SELECT CAST('inf' AS FLOAT)", 8114),
    ("SELECT CAST('1_000' AS INT)", 245),
    ("SELECT CAST(1 AS DECIMAL(39, 0))", 2750),
    ("DECLARE @v VARCHAR(0)", 1001),
    ("SELECT CAST('x' AS NVARCHAR(5000))", 2717),
    ("SELECT LEFT('abc', -1)", 536),
    ("SELECT SUBSTRING('abc', 1, -1)", 537),
    ("SELECT (SELECT name, service_id FROM sys.services)", 116),
    ("SELECT 'abc' LIKE", 102),
    ("SELECT1", 102),  # a keyword is a whole word: this ran as SELECT 1
    ("DECLARE @i INT = -2147483648; SELECT ABS(@i)", 8115),
    ("SELECT CAST('10:00' AS TIME)", 243),
    ("ENDCONVERSATION '00000000-0000-0000-0000-000000000000'", 102),
])
def test_values_sql_server_refuses_are_numbered(session: Session, script: str, number: int) -> None:
    assert failure(session, script).number == number


def test_a_string_cannot_grow_past_a_max_type(session: Session) -> None:
    # Refused before it is made: 64 MB times 8,000 would exhaust the process's memory.
    error = failure(session, "DECLARE @s NVARCHAR(MAX) = REPLACE(REPLICATE('a', 8000), 'a', REPLICATE('b', 8000)); "
                             "SELECT REPLACE(@s, 'b', REPLICATE('c', 8000))")
    assert error.number == 7119


def test_times_read_from_the_catalog_compare_with_getdate(queued: broker.Broker, session: Session) -> None:
    outputs = ok(session, "SELECT COUNT(*) FROM q WHERE message_enqueue_time <= GETUTCDATE(); "
                          "DECLARE @t DATETIME; SELECT TOP (1) @t = message_enqueue_time FROM q; "
                          "IF @t > '2020-01-01' PRINT 'after'")
    assert printed(outputs) == ["after"]


def test_a_keyword_may_touch_a_variable(session: Session) -> None:
    # The whole-word check took @ for part of a word: SELECT@@ROWCOUNT was 102.
    outputs = ok(session, "DECLARE@x INT = 5; PRINT@x; SELECT@@ROWCOUNT AS n")
    assert printed(outputs) == ["5"]
