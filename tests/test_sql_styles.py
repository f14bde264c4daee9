"""T-SQL conversions and typing as SQL Server documents them: CONVERT's styles ("CAST and
CONVERT (Transact-SQL)"), the result type of CASE, COALESCE, ISNULL and IIF ("Data type
precedence"), grouping errors of ORDER BY and HAVING, and the order of uniqueidentifier.

Expressions need no backend of their own: one SQLite database serves the module.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import date, datetime
from typing import Any

import pytest

import broker
from broker.sql.errors import SqlError
from broker.sql.outputs import Failed, Printed, ResultSet
from broker.sql.session import Session


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Session]:
    database = broker.connect(f"sqlite:///{tmp_path_factory.mktemp('styles') / 'broker.db'}")
    with Session(database) as opened:
        yield opened
    database.dispose()


def run(session: Session, script: str) -> list[Any]:
    outputs = session.run(script)
    failed = [output.error for output in outputs if isinstance(output, Failed)]
    if failed:
        raise failed[0]
    return [output for output in outputs if isinstance(output, (ResultSet, Printed))]


def value(session: Session, expression: str) -> Any:
    [result] = run(session, f"SELECT {expression}")
    [(found,)] = result.rows
    return found


def error(session: Session, script: str) -> tuple[int, str]:
    with pytest.raises(SqlError) as raised:
        run(session, script)
    return raised.value.number, raised.value.message


MOMENT = "CAST('2020-01-02 09:05:06.787' AS DATETIME)"


# -- datetime to text ----------------------------------------------------------------------------


@pytest.mark.parametrize(("style", "text"), [
    (0, "Jan  2 2020  9:05AM"), (100, "Jan  2 2020  9:05AM"),
    (1, "01/02/20"), (101, "01/02/2020"),
    (2, "20.01.02"), (102, "2020.01.02"),
    (3, "02/01/20"), (103, "02/01/2020"),
    (4, "02.01.20"), (104, "02.01.2020"),
    (5, "02-01-20"), (105, "02-01-2020"),
    (6, "02 Jan 20"), (106, "02 Jan 2020"),
    (7, "Jan 02, 20"), (107, "Jan 02, 2020"),
    (8, "09:05:06"), (24, "09:05:06"), (108, "09:05:06"),
    (9, "Jan  2 2020  9:05:06:787AM"), (109, "Jan  2 2020  9:05:06:787AM"),
    (10, "01-02-20"), (110, "01-02-2020"),
    (11, "20/01/02"), (111, "2020/01/02"),
    (12, "200102"), (112, "20200102"),
    (13, "02 Jan 2020 09:05:06:787"), (113, "02 Jan 2020 09:05:06:787"),
    (14, "09:05:06:787"), (114, "09:05:06:787"),
    (20, "2020-01-02 09:05:06"), (120, "2020-01-02 09:05:06"),
    (21, "2020-01-02 09:05:06.787"), (25, "2020-01-02 09:05:06.787"), (121, "2020-01-02 09:05:06.787"),
    (22, "01/02/20  9:05:06 AM"),
    (23, "2020-01-02"),
    (126, "2020-01-02T09:05:06.787"), (127, "2020-01-02T09:05:06.787"),
])
def test_a_datetime_is_written_in_each_documented_style(session: Session, style: int, text: str) -> None:
    assert value(session, f"CONVERT(VARCHAR(40), {MOMENT}, {style})") == text


@pytest.mark.parametrize(("given", "kept"), [
    ("10:00:00.000", "10:00:00.000"), ("10:00:00.001", "10:00:00.000"), ("10:00:00.002", "10:00:00.003"),
    ("10:00:00.004", "10:00:00.003"), ("10:00:00.005", "10:00:00.007"), ("10:00:00.990", "10:00:00.990"),
    ("10:00:00.991", "10:00:00.990"), ("10:00:00.994", "10:00:00.993"), ("10:00:00.995", "10:00:00.997"),
    ("10:00:00.998", "10:00:00.997"), ("23:59:59.999", "00:00:00.000"),
])
def test_a_datetime_keeps_three_hundredths_of_a_second(session: Session, given: str, kept: str) -> None:
    """DATETIME's accuracy: "rounded to increments of .000, .003, or .007 seconds"."""
    day = "2020-01-02" if given.startswith("23") else "2020-01-01"
    assert value(session, f"CONVERT(VARCHAR(30), CAST('2020-01-01 {given}' AS DATETIME), 121)") == f"{day} {kept}"


def test_datetimes_that_keep_the_same_tick_are_equal_and_smalldatetime_keeps_minutes(session: Session) -> None:
    assert value(session, "IIF(CAST('2020-01-01 10:00:00.996' AS DATETIME) = '2020-01-01 10:00:00.997', 1, 0)") == 1
    assert value(session, "CONVERT(VARCHAR(16), CAST('2020-01-01 10:00:29.998' AS SMALLDATETIME), 120)") == \
        "2020-01-01 10:00"
    assert value(session, "CONVERT(VARCHAR(16), CAST('2020-01-01 10:00:29.999' AS SMALLDATETIME), 120)") == \
        "2020-01-01 10:01"
    assert value(session, "GETDATE()").microsecond % 1000 == 0
    precise = "CAST('2020-01-01 10:00:00.000001' AS DATETIME2)"  # DATEADD and DATEDIFF keep a DATETIME2's
    assert value(session, f"DATEDIFF(microsecond, {precise}, DATEADD(microsecond, 4, {precise}))") == 4


@pytest.mark.parametrize(("expression", "expected"), [
    ("DATEDIFF(millisecond, '2020-01-01 00:00:00.000', '2020-01-01 00:00:00.001')", 1),  # text is a datetime2
    ("DATEDIFF(second, '2020-01-01 00:00:00.999', '2020-01-01 00:00:01')", 1),
    ("DATEDIFF(day, 0, '2020-01-02')", 43830),  # a number of days is a datetime
    ("DATEADD(millisecond, -1, '2020-01-02')", datetime(2020, 1, 2)),  # text is a datetime, and so the result
    ("DATEADD(millisecond, -2, '2020-01-02')", datetime(2020, 1, 1, 23, 59, 59, 997000)),
])
def test_dateadd_and_datediff_read_text_as_sql_server_types_it(session: Session, expression: str,
                                                                expected: Any) -> None:
    assert value(session, expression) == expected


@pytest.mark.parametrize("expression", ["CAST(-53691 AS DATETIME)", "CAST(-1 AS SMALLDATETIME)",
                                        "CAST(65536 AS SMALLDATETIME)"])
def test_a_number_of_days_outside_the_range_is_8115(session: Session, expression: str) -> None:
    with pytest.raises(SqlError) as refused:
        value(session, expression)
    assert refused.value.number == 8115
    with pytest.raises(SqlError) as refused:
        value(session, "CAST('9999-12-31 23:59:59.999' AS DATETIME)")  # rounds past the last day
    assert refused.value.number == 242


def test_iso_8601_leaves_out_zero_milliseconds_and_the_afternoon_is_pm(session: Session) -> None:
    assert value(session, "CONVERT(VARCHAR(40), CAST('2012-11-07 18:26:20' AS DATETIME), 126)") == "2012-11-07T18:26:20"
    assert value(session, "CONVERT(VARCHAR(40), CAST('2012-11-07 18:26:20' AS DATETIME), 100)") == "Nov  7 2012  6:26PM"
    assert value(session, "CONVERT(VARCHAR(40), CAST('2012-11-07 00:26:20' AS DATETIME), 22)") == "11/07/12 12:26:20 AM"


def test_script_idioms_format_dates(session: Session) -> None:
    [printed] = run(session, "DECLARE @d DATETIME = '2021-03-04 05:06:07'; PRINT CONVERT(CHAR(8), @d, 112)")
    assert printed.text == "20210304"
    assert len(value(session, "CONVERT(VARCHAR(30), GETDATE(), 120)")) == 19
    assert value(session, f"CONVERT(NVARCHAR(10), {MOMENT}, 120)") == "2020-01-02"  # the length cuts the time


def test_a_datetime_as_text_without_a_style_is_style_0(session: Session) -> None:
    assert value(session, f"CAST({MOMENT} AS VARCHAR(30))") == "Jan  2 2020  9:05AM"
    assert value(session, f"CONCAT('at ', {MOMENT})") == "at Jan  2 2020  9:05AM"
    assert value(session, f"CASE WHEN {MOMENT} LIKE 'Jan%2020%' THEN 1 ELSE 0 END") == 1


@pytest.mark.parametrize("style", [15, 99, 105 + 100, 200])
def test_a_number_that_is_no_datetime_style_is_281(session: Session, style: int) -> None:
    assert error(session, f"SELECT CONVERT(VARCHAR(30), {MOMENT}, {style})") == (
        281, f"{style} is not a valid style number when converting from datetime to a character string.")


def test_a_style_is_ignored_where_the_type_has_none_and_a_null_style_is_null(session: Session) -> None:
    assert value(session, "CONVERT(VARCHAR(10), 12345, 120)") == "12345"
    assert value(session, "CONVERT(INT, '42', 1)") == 42
    assert value(session, f"CONVERT(VARCHAR(30), {MOMENT}, NULL)") is None
    assert value(session, f"TRY_CONVERT(VARCHAR(30), {MOMENT}, 99)") is None


def test_a_style_that_is_text_is_8116(session: Session) -> None:
    assert error(session, f"SELECT CONVERT(VARCHAR(30), {MOMENT}, '120')") == (
        8116, "Argument data type nvarchar is invalid for argument 3 of convert function.")


# -- text to datetime ----------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "style", "moment"), [
    ("25/12/2020", 103, "2020-12-25 00:00:00.000"),
    ("25/12/20", 3, "2020-12-25 00:00:00.000"),
    ("25.12.2020 10:30", 104, "2020-12-25 10:30:00.000"),
    ("25-12-49", 5, "2049-12-25 00:00:00.000"),
    ("25-12-50", 5, "1950-12-25 00:00:00.000"),
    ("12/25/2020", 101, "2020-12-25 00:00:00.000"),
    ("12-25-20", 10, "2020-12-25 00:00:00.000"),
    ("2020/12/25", 111, "2020-12-25 00:00:00.000"),
    ("20.12.25", 2, "2020-12-25 00:00:00.000"),
    ("201225", 12, "2020-12-25 00:00:00.000"),
    ("20201225", 112, "2020-12-25 00:00:00.000"),
    ("2020-12-25", 103, "2020-12-25 00:00:00.000"),  # four digits first: year, month, day
    ("25 Dec 2020 10:30:00:123", 113, "2020-12-25 10:30:00.123"),
    ("Dec 25, 2020", 107, "2020-12-25 00:00:00.000"),
    ("Dec 25 2020 10:30:00:123PM", 109, "2020-12-25 22:30:00.123"),
    ("12/25/20 10:30:00 PM", 22, "2020-12-25 22:30:00.000"),
    ("2020-12-25T10:30:00.5Z", 127, "2020-12-25 10:30:00.500"),
    ("10:30:00:123", 114, "1900-01-01 10:30:00.123"),
])
def test_text_is_read_as_a_datetime_in_its_style(session: Session, text: str, style: int, moment: str) -> None:
    assert value(session, f"CONVERT(VARCHAR(30), CONVERT(DATETIME, '{text}', {style}), 121)") == moment


def test_a_day_first_date_without_its_style_is_no_date(session: Session) -> None:
    assert error(session, "SELECT CONVERT(DATETIME, '25/12/2020')") == (
        241, "Conversion failed when converting date and/or time from character string.")
    assert value(session, "TRY_CONVERT(DATETIME, '25/12/2020')") is None


def test_text_read_in_a_number_that_is_no_datetime_style_is_9809_but_112_for_datetime(session: Session) -> None:
    assert error(session, "SELECT CONVERT(DATETIME2, '25/12/2020', 99)") == (
        9809, "The style 99 is not supported for conversions from nvarchar to datetime2.")
    assert value(session, "CONVERT(VARCHAR(30), CONVERT(DATETIME, '20201225', 99), 23)") == "2020-12-25"


@pytest.mark.parametrize("style", [6, 100, 106, 109, 112, 113, 114])
def test_a_style_of_names_or_digits_reads_no_separated_numeric_date(session: Session, style: int) -> None:
    assert error(session, f"SELECT CONVERT(DATETIME, '12/25/2020', {style})") == (
        241, "Conversion failed when converting date and/or time from character string.")
    assert error(session, f"SELECT CONVERT(DATE, '12/25/2020', {style})") == (
        9807, f"The input character string does not follow style {style}, either change the input character "
              "string or use a different style.")


# -- binary --------------------------------------------------------------------------------------


def test_binary_is_written_as_characters_or_hexadecimal(session: Session) -> None:
    assert value(session, "CONVERT(VARCHAR(MAX), 0x4142)") == "AB"
    assert value(session, "CONVERT(VARCHAR(MAX), 0x4142, 0)") == "AB"
    assert value(session, "CONVERT(VARCHAR(MAX), 0x4142, 1)") == "0x4142"
    assert value(session, "CONVERT(VARCHAR(MAX), 0x4a6b, 2)") == "4A6B"
    assert value(session, "CONVERT(CHAR(8), 0x4142, 1)") == "0x4142  "
    assert value(session, "CONVERT(VARCHAR(4), 0x414243, 1)") == "0x41"
    assert value(session, "CONVERT(VARCHAR(3), 0x0A0B, 1)") == "0x"  # whole bytes only
    assert value(session, "CONVERT(VARCHAR(3), 0x0A0B, 2)") == "0A"
    assert value(session, "CONVERT(CHAR(5), 0x0A0B, 1)") == "0x0A "


def test_hexadecimal_text_is_read_as_binary(session: Session) -> None:
    assert value(session, "CONVERT(VARBINARY(MAX), '0x4142', 1)") == b"AB"
    assert value(session, "CONVERT(VARBINARY(MAX), '4a6B', 2)") == b"Jk"
    assert value(session, "CONVERT(VARBINARY(MAX), '0x4142', 0)") == b"0x4142"
    assert value(session, "CONVERT(BINARY(3), '0x41', 1)") == b"A\0\0"
    assert value(session, "CONVERT(VARBINARY(1), '4142', 2)") == b"A"


@pytest.mark.parametrize(("text", "style"), [
    ("4142", 1), ("0x4142", 2), ("0x414", 1), ("41zz", 2), ("0x", 2)])
def test_text_that_is_no_hexadecimal_of_its_style_is_8114(session: Session, text: str, style: int) -> None:
    assert error(session, f"SELECT CONVERT(VARBINARY(MAX), '{text}', {style})") == (
        8114, "Error converting data type nvarchar to varbinary.")
    assert value(session, f"TRY_CONVERT(VARBINARY(MAX), '{text}', {style})") is None


def test_a_binary_style_other_than_0_1_2_is_9809(session: Session) -> None:
    assert error(session, "SELECT CONVERT(VARCHAR(MAX), 0x41, 3)") == (
        9809, "The style 3 is not supported for conversions from varbinary to varchar.")
    assert error(session, "SELECT CONVERT(VARBINARY(MAX), '41', 120)") == (
        9809, "The style 120 is not supported for conversions from nvarchar to varbinary.")


def test_a_received_body_converts_to_text(session: Session, tmp_path: Any) -> None:
    database = broker.connect(f"sqlite:///{tmp_path / 'q.db'}")
    try:
        database.create_queue("q")
        database.create_service("s", "q", ["DEFAULT"])
        with database.transaction() as tx:
            tx.send(tx.begin_dialog("s", "s"), "DEFAULT", b"<hello/>")
        with Session(database) as own:
            [result, *_] = run(own, "RECEIVE CONVERT(NVARCHAR(MAX), message_body) AS body, "
                                    "CONVERT(VARCHAR(40), message_body, 1) AS hex FROM q")
        assert result.rows == (("<hello/>", "0x3C68656C6C6F2F3E"),)
    finally:
        database.dispose()


# -- float ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("number", "style", "text"), [
    ("123456789.0E0", 0, "1.23457e+008"),
    ("123456789.0E0", 1, "1.2345679e+008"),
    ("123456789.0E0", 2, "1.234567890000000e+008"),
    ("123456789.0E0", 3, "123456789"),
    ("0.1E0", 3, "0.10000000000000001"),
    ("1.5E0", 1, "1.5000000e+000"),
    ("1.5E0", 99, "1.5"),  # another number is style 0
    ("123456789.0E0", 126, "1.234567890000000e+008"),  # an older name of 2
])
def test_a_float_is_written_in_its_styles(session: Session, number: str, style: int, text: str) -> None:
    assert value(session, f"CONVERT(VARCHAR(40), {number}, {style})") == text


# -- the result type of CASE, IIF, COALESCE and ISNULL -----------------------------------------


def test_case_converts_only_the_result_it_returns_to_the_highest_type(session: Session) -> None:
    assert value(session, "CASE WHEN 1 = 1 THEN 1 ELSE 'a' END") == 1  # 'a' is never reached
    assert error(session, "SELECT CASE WHEN 1 = 1 THEN 'x' ELSE 1 END") == (
        245, "Conversion failed when converting the nvarchar value 'x' to data type int.")
    assert error(session, "SELECT CASE WHEN 1 = 0 THEN 1 ELSE 'a' END")[0] == 245
    assert value(session, "CASE WHEN 1 = 1 THEN '7' ELSE 1 END") == 7
    assert value(session, "CASE 2 WHEN 1 THEN 'one' WHEN 2 THEN 2.50 END") == 2.5
    assert str(value(session, "CASE WHEN 1 = 1 THEN 1 ELSE 2.5 END")) == "1.0"
    assert value(session, "CASE WHEN 1 = 1 THEN 'abc' ELSE NULL END") == "abc"


def test_case_of_a_date_and_text_is_a_date(session: Session) -> None:
    assert error(session, "SELECT CASE WHEN 1 = 1 THEN 'soon' ELSE GETDATE() END")[0] == 241
    moment = value(session, "CASE WHEN 1 = 1 THEN '2020-01-02' ELSE GETDATE() END")
    assert (moment.year, moment.month, moment.day) == (2020, 1, 2)


def test_empty_text_as_a_date_is_day_0_so_isnull_of_a_datetime_and_blank_works(session: Session) -> None:
    """``ISNULL(@d, '')`` is a common idiom: SQL Server reads '' as 1900-01-01 (241 here before)."""
    for script in ("DECLARE @d DATETIME; SELECT ISNULL(@d, '')", "DECLARE @d DATETIME; SELECT COALESCE(@d, '')",
                   "SELECT CAST('' AS DATETIME)", "SELECT CAST('   ' AS DATE)"):
        [result] = run(session, script)
        [[moment]] = result.rows
        assert moment == (date(1900, 1, 1) if "DATE)" in script else datetime(1900, 1, 1)), script


def test_dateadd_in_a_case_keeps_the_type_it_adds_to(session: Session) -> None:
    assert value(session, "CAST(CASE WHEN 1 = 1 THEN DATEADD(DAY, 1, CAST('2024-01-05' AS DATE)) "
                          "ELSE CAST('2024-01-05' AS DATE) END AS VARCHAR(30))") == "2024-01-06"


def test_iif_takes_the_type_of_highest_precedence(session: Session) -> None:
    assert error(session, "SELECT IIF(1 = 1, 'x', 1)")[0] == 245
    assert str(value(session, "IIF(1 = 1, 2, 3.25)")) == "2.00"


def test_coalesce_takes_the_type_of_highest_precedence(session: Session) -> None:
    assert value(session, "COALESCE(NULL, '5', 1)") == 5
    assert error(session, "SELECT COALESCE('a', 1)") == (
        245, "Conversion failed when converting the nvarchar value 'a' to data type int.")
    assert value(session, "COALESCE(NULL, N'abc')") == "abc"


def test_isnull_takes_its_first_arguments_type_and_length(session: Session) -> None:
    [result] = run(session, "DECLARE @v VARCHAR(3), @i INT, @w VARCHAR;\n"
                            "SELECT ISNULL(@v, 'abcdef'), ISNULL(@i, '7'), ISNULL(@w, 'xyz'), ISNULL(NULL, 'abc'), "
                            "ISNULL(CAST(NULL AS VARCHAR(2)), 'abc'), ISNULL(@v, 'a') + '|'")
    assert result.rows == (("abc", 7, "x", "abc", "ab", "a|"),)
    assert error(session, "DECLARE @i INT; SELECT ISNULL(@i, 'x')")[0] == 245
    assert error(session, "DECLARE @m DECIMAL(10, 2); SELECT ISNULL(@m, '')")[0] == 8114  # text to numeric


# -- grouping: HAVING and ORDER BY -------------------------------------------------------------


def test_a_column_outside_aggregates_and_group_by_in_having_is_8121(session: Session) -> None:
    assert error(session, "SELECT COUNT(*) FROM sys.services s GROUP BY s.service_id HAVING s.name = 'x'") == (
        8121, "Column 's.name' is invalid in the HAVING clause because it is not contained in either an aggregate "
              "function or the GROUP BY clause.")
    assert error(session, "SELECT COUNT(*) FROM sys.services HAVING name = 'x'")[0] == 8121
    run(session, "SELECT name FROM sys.services GROUP BY name HAVING name = 'x' OR MAX(service_id) > 0")


def test_a_column_outside_aggregates_and_group_by_in_order_by_is_8127(session: Session) -> None:
    assert error(session, "SELECT s.service_id, COUNT(*) FROM sys.services s GROUP BY s.service_id "
                          "ORDER BY s.name") == (
        8127, 'Column "s.name" is invalid in the ORDER BY clause because it is not contained in either an '
              "aggregate function or the GROUP BY clause.")
    assert error(session, "SELECT COUNT(*) FROM sys.services ORDER BY name")[0] == 8127
    run(session, "SELECT name AS n, COUNT(*) AS c FROM sys.services GROUP BY name ORDER BY n, c, 2, MAX(service_id)")


# -- uniqueidentifier order ----------------------------------------------------------------------

# Ascending as SQL Server sorts them: the last six bytes first, then the fourth group, the
# third, the second and the first (each of the first three in its stored, little-endian,
# order: its last written byte first).
SORTED_GUIDS = [
    "01000000-0000-0000-0000-000000000000",
    "00010000-0000-0000-0000-000000000000",
    "00000001-0000-0000-0000-000000000000",
    "00000000-0100-0000-0000-000000000000",
    "00000000-0001-0000-0000-000000000000",
    "00000000-0000-0100-0000-000000000000",
    "00000000-0000-0001-0000-000000000000",
    "00000000-0000-0000-0001-000000000000",
    "00000000-0000-0000-0100-000000000000",
    "00000000-0000-0000-0000-000000000001",
    "00000000-0000-0000-0000-010000000000",
]


def test_uniqueidentifiers_sort_and_compare_in_sql_servers_byte_order(session: Session) -> None:
    inserts = "\n".join(f"SELECT CAST('{guid}' AS UNIQUEIDENTIFIER) INTO @t" for guid in reversed(SORTED_GUIDS))
    [ordered, low, high] = run(session, f"DECLARE @t TABLE (g UNIQUEIDENTIFIER);\n{inserts}\n"
                                        "SELECT g FROM @t ORDER BY g\nSELECT MIN(g) FROM @t\nSELECT MAX(g) FROM @t")
    assert [str(guid).upper() for (guid,) in ordered.rows] == SORTED_GUIDS
    assert str(low.rows[0][0]) == SORTED_GUIDS[0] and str(high.rows[0][0]) == SORTED_GUIDS[-1]
    assert value(session, f"CASE WHEN CAST('{SORTED_GUIDS[1]}' AS UNIQUEIDENTIFIER) > '{SORTED_GUIDS[2]}' "
                          "THEN 1 ELSE 0 END") == 0


# -- a number as text too long for its type --------------------------------------------------------


def test_an_integer_too_long_for_char_or_varchar_is_a_star(session: Session) -> None:
    assert value(session, "CAST(12345 AS VARCHAR(3))") == "*"
    assert value(session, "CAST(12345 AS CHAR(3)) + '|'") == "*  |"
    assert value(session, "CAST(-12 AS CHAR(4)) + '|'") == "-12 |"
    [result] = run(session, "DECLARE @v VARCHAR; SET @v = 12; SELECT @v")
    assert result.rows == (("*",),)


@pytest.mark.parametrize(("expression", "type_name"), [
    ("CAST(12345 AS NVARCHAR(3))", "nvarchar"),
    ("CAST(123.45 AS VARCHAR(3))", "varchar"),
    ("CAST(1234.5E0 AS NCHAR(3))", "nchar"),
])
def test_any_other_number_too_long_for_its_text_is_8115(session: Session, expression: str, type_name: str) -> None:
    assert error(session, f"SELECT {expression}") == (
        8115, f"Arithmetic overflow error converting expression to data type {type_name}.")


def test_case_cuts_no_string_whose_type_it_cannot_read(session: Session) -> None:
    [result] = run(session, "DECLARE @t TABLE (name VARCHAR(20)); SELECT 'a long name' INTO @t\n"
                            "SELECT CASE WHEN 1 = 1 THEN name ELSE 'x' END, COALESCE(name, 'y'), IIF(1 = 1, name, 'z') "
                            "FROM @t")
    assert result.rows == (("a long name",) * 3,)


# -- DATE ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("style", "text"), [
    ("", "2020-01-02"), (", 0", "Jan  2 2020"), (", 101", "01/02/2020"), (", 103", "02/01/2020"),
    (", 109", "Jan  2 2020"), (", 113", "02 Jan 2020"), (", 120", "2020-01-02"), (", 121", "2020-01-02"),
    (", 126", "2020-01-02"), (", 22", "01/02/20"), (", 12", "200102"), (", 23", "2020-01-02"),
])
def test_a_date_is_written_without_a_time(session: Session, style: str, text: str) -> None:
    assert value(session, f"CONVERT(VARCHAR(30), CAST('2020-01-02 10:00' AS DATE){style})") == text


def test_a_date_as_text_without_a_style_is_iso(session: Session) -> None:
    [result] = run(session, "DECLARE @d DATE = '2020-01-02 10:00';\n"
                            "SELECT CAST(@d AS VARCHAR(30)), CONCAT(@d, '|'), DATALENGTH(@d), "
                            "CONVERT(VARCHAR(30), DATEADD(month, 1, @d)), LEN(CONVERT(VARCHAR(30), CONVERT(DATE, "
                            "GETDATE())))")
    assert result.rows == (("2020-01-02", "2020-01-02|", 3, "2020-02-02", 10),)


def test_a_date_refuses_the_styles_of_a_time_and_arithmetic(session: Session) -> None:
    day = "CAST('2020-01-02' AS DATE)"
    assert error(session, f"SELECT CONVERT(VARCHAR(30), {day}, 108)") == (
        8114, "Error converting data type date to varchar.")
    assert error(session, f"SELECT CONVERT(VARCHAR(30), {day}, 114)") == (
        281, "114 is not a valid style number when converting from date to a character string.")
    assert error(session, f"SELECT {day} + 1") == (206, "Operand type clash: date is incompatible with int")
    assert error(session, f"SELECT {day} - {day}") == (
        8117, "Operand data type date is invalid for subtract operator.")
    assert error(session, f"SELECT DATEADD(hour, 1, {day})") == (
        9810, "The datepart hour is not supported by date function dateadd for data type date.")


def test_a_style_that_is_no_integer_is_8116(session: Session) -> None:
    assert error(session, f"SELECT CONVERT(VARCHAR(30), {MOMENT}, 1.5)") == (
        8116, "Argument data type numeric is invalid for argument 3 of convert function.")
    [result] = run(session, f"DECLARE @s BIGINT = 112; SELECT CONVERT(VARCHAR(30), {MOMENT}, @s)")
    assert result.rows == (("20200102",),)
