"""The operator's commands, through CliRunner on fresh SQLite files: queue activation options,
timers, RECEIVE ... WHERE, bulk send, export/import, groups, monitors and status --watch.

The database fixtures (``url``, ``run``, ``services``) and helpers come from test_cli.
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import test_cli
from click.testing import CliRunner, Result
from sqlalchemy import insert
from test_cli import (
    CONTRACT,
    INITIATOR,
    REPLY,
    REQUEST,
    TARGET,
    Run,
    as_json,
    cli_runner,
    create_services,
    one_error_line,
    send_request,
)

import broker
from broker.routing.matching import SERVICE_NOT_FOUND
from broker.storage.models import ActivatedTask, QueueMonitor
from cli.main import cli

# test_cli's fixtures: a fresh database (url), the runner (run) and two services.
url = test_cli.url
run = test_cli.run
services = test_cli.services


def queue_row(run: Run, name: str) -> dict[str, Any]:
    return next(r for r in as_json(run("show", "queues", "--json")) if r["name"] == name)


def target_rows(run: Run) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = as_json(run("peek", "TargetQueue", "--json"))
    return rows


def jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture
def other(tmp_path: Path) -> Run:
    """A second database with the same services, for export from one and import into the other."""
    run_other = cli_runner(f"sqlite:///{tmp_path / 'other.db'}")
    create_services(run_other)
    return run_other


# -- queues: activation and poison-message handling ------------------------------------


def test_create_queue_with_activation(run: Run) -> None:
    run(
        "create", "queue", "Orders", "--activation-procedure", "myapp.handlers:take_orders",
        "--max-queue-readers", "4", "--execute-as", "owner", "--poison-message-handling", "off",
    )
    row = queue_row(run, "Orders")
    assert (row["activation_procedure"], row["max_readers"], row["is_activation_enabled"]) == (
        "myapp.handlers:take_orders", 4, 1,
    )
    assert row["execute_as_principal_id"] == -2  # OWNER
    assert row["is_poison_message_handling_enabled"] == 0

    run("create", "queue", "Plain")
    row = queue_row(run, "Plain")
    assert (row["activation_procedure"], row["is_activation_enabled"]) == (None, 0)
    assert row["is_poison_message_handling_enabled"] == 1

    run("create", "queue", "Off", "--activation-procedure", "m:f", "--max-queue-readers", "1",
        "--activation-status", "off", "--execute-as", "SELF")
    assert queue_row(run, "Off")["is_activation_enabled"] == 0


def test_create_queue_activation_errors(run: Run) -> None:
    result = run("create", "queue", "Q", "--activation-status", "on", expect=1)
    assert result.stderr == ("error 59004: CREATE QUEUE ... WITH ACTIVATION needs PROCEDURE_NAME "
                             "and MAX_QUEUE_READERS.\n")
    run("create", "queue", "Q", "--activation-procedure", "m:f", "--max-queue-readers", "-1", expect=2)
    run("create", "queue", "Q", "--poison-message-handling", "sometimes", expect=2)


def test_alter_queue_activation(run: Run) -> None:
    run("create", "queue", "Q")
    run("alter", "queue", "Q", "--activation-procedure", "m:f", "--max-queue-readers", "2")
    row = queue_row(run, "Q")  # ALTER leaves STATUS as it was: off, for a queue created without activation
    assert (row["activation_procedure"], row["max_readers"], row["is_activation_enabled"]) == ("m:f", 2, 0)
    run("alter", "queue", "Q", "--activation-status", "on")
    assert queue_row(run, "Q")["is_activation_enabled"] == 1

    run("alter", "queue", "Q", "--activation-status", "off", "--max-queue-readers", "5")
    row = queue_row(run, "Q")
    assert (row["activation_procedure"], row["max_readers"], row["is_activation_enabled"]) == ("m:f", 5, 0)

    run("alter", "queue", "Q", "--poison-message-handling", "off", "--execute-as", "app_user")
    row = queue_row(run, "Q")
    assert (row["is_poison_message_handling_enabled"], row["execute_as_principal_id"]) == (0, 1)

    assert run("alter", "queue", "Q", "--drop-activation").stdout == "altered queue Q\n"
    row = queue_row(run, "Q")
    assert (row["activation_procedure"], row["max_readers"], row["is_activation_enabled"]) == (None, 0, 0)

    result = run("alter", "queue", "Q", "--drop-activation", "--max-queue-readers", "1", expect=2)
    assert "--drop-activation" in result.stderr
    one_error_line(run("alter", "queue", "NoSuchQueue", "--status", "on", expect=1), 15151)


def test_valid_xml_checks_bodies_against_the_schema_collection(run: Run, tmp_path: Path) -> None:
    xsd = tmp_path / "order.xsd"
    xsd.write_text(
        '<xs:schema xmlns:xs="http://www.w3.org/2001/XMLSchema"><xs:element name="order" type="xs:int"/></xs:schema>'
    )
    run("create", "xml-schema-collection", "Orders", "--file", str(xsd))
    run("create", "message-type", "//test/Order", "--validation", "VALID_XML", "--schema-collection", "Orders")
    run("create", "contract", "//test/Ordering", "--message", "//test/Order:INITIATOR")
    run("create", "queue", "Shop")
    run("create", "queue", "Orders")
    run("create", "service", "//test/Shop", "--queue", "Shop")
    run("create", "service", "//test/Orders", "--queue", "Orders", "--contract", "//test/Ordering")
    ordering = ("--from", "//test/Shop", "--to", "//test/Orders", "--contract", "//test/Ordering",
                "--type", "//test/Order")

    run("send", *ordering, "--body", "<order>5</order>")
    assert [r["message_body"] for r in as_json(run("peek", "Orders", "--json"))] == ["<order>5</order>"]
    run("send", *ordering, "--body", "<order>five</order>")
    assert len(as_json(run("peek", "Orders", "--json"))) == 1  # discarded at delivery
    [error] = as_json(run("receive", "Shop", "--json"))
    assert error["message_type_name"] == broker.ERROR
    assert broker.parse_error(error["message_body"])[0] == -9615

    missing = run("create", "message-type", "//test/Other", "--validation", "VALID_XML",
                  "--schema-collection", "NoSuchCollection", expect=1)
    one_error_line(missing, 15151)
    bad_xsd = tmp_path / "bad.xsd"
    bad_xsd.write_text("<not-a-schema/>")
    run("create", "xml-schema-collection", "Broken", "--file", str(bad_xsd), expect=1)
    run("create", "xml-schema-collection", "Absent", "--file", str(tmp_path / "absent.xsd"), expect=2)


# -- conversations: timer, RECEIVE ... WHERE, send --count ---------------------------------


def test_timer_of_zero_seconds_delivers_a_dialog_timer(run: Run, services: None) -> None:
    handle = send_request(run)
    assert run("timer", handle, "0").stdout == f"timer set on conversation {handle}: due in 0 seconds\n"
    timers = as_json(run("status", "--json"))["timers"]
    assert (timers["count"], timers["due"]) == (1, 1)

    [message] = as_json(run("receive", "InitiatorQueue", "--json"))
    assert (message["message_type_name"], message["conversation_handle"]) == (broker.DIALOG_TIMER, handle)
    assert as_json(run("status", "--json"))["timers"] == {"count": 0, "due": 0, "next_due": None}


def test_timer_in_the_future_and_errors(run: Run, services: None) -> None:
    handle = send_request(run)
    run("timer", handle, "3600")
    timers = as_json(run("status", "--json"))["timers"]
    assert (timers["count"], timers["due"]) == (1, 0)
    assert "Conversation timers: 1 set, 0 due, next due " in run("status").stdout
    assert as_json(run("receive", "InitiatorQueue", "--json")) == []

    run("timer", handle, "-1", expect=2)
    run("timer", handle, "soon", expect=2)
    one_error_line(run("timer", str(uuid.uuid4()), "1", expect=1), 8426)


def test_receive_where_handle_or_group(run: Run, services: None) -> None:
    send_request(run, "<request>1</request>")
    send_request(run, "<request>2</request>")
    first, second = target_rows(run)

    [message] = as_json(run("receive", "TargetQueue", "--handle", second["conversation_handle"], "--json"))
    assert message["message_body"] == "<request>2</request>"
    [message] = as_json(run("receive", "TargetQueue", "--group", first["conversation_group_id"], "--json"))
    assert message["message_body"] == "<request>1</request>"

    both = run("receive", "TargetQueue", "--handle", first["conversation_handle"],
               "--group", first["conversation_group_id"], expect=2)
    assert "not both" in both.stderr
    # A conversation of another queue is not found in this one.
    one_error_line(run("receive", "InitiatorQueue", "--handle", first["conversation_handle"], expect=1), 8426)


def test_send_count_begins_a_dialog_per_message(run: Run, services: None) -> None:
    result = run("send", "--from", INITIATOR, "--to", TARGET, "--body", "load", "--count", "50", "--batch", "7")
    handles = result.stdout.split()
    assert len(set(handles)) == 50
    assert result.stderr == ""  # no progress bar when stderr is not a terminal
    rows = target_rows(run)
    assert [r["message_body"] for r in rows] == ["load"] * 50
    assert len({r["conversation_handle"] for r in rows}) == 50
    queues = {q["queue"]: q for q in as_json(run("status", "--json"))["queues"]}
    assert queues["TargetQueue"]["ready"] == 50


def test_send_count_on_a_handle(run: Run, services: None) -> None:
    handle = send_request(run, "<request>0</request>")
    result = run("send", "--handle", handle, "--type", REQUEST, "--body", "<request>more</request>",
                 "--count", "3", "--batch", "2")
    assert result.stdout == f"{handle}\n"
    rows = target_rows(run)
    assert [r["message_sequence_number"] for r in rows] == [0, 1, 2, 3]
    assert len({r["conversation_handle"] for r in rows}) == 1
    run("send", "--handle", handle, "--count", "0", expect=2)


def test_send_count_draws_a_bar_on_a_terminal(url: str, run: Run, services: None) -> None:
    result = CliRunner().invoke(
        cli, ["--db", url, "send", "--from", INITIATOR, "--to", TARGET, "--count", "3"],
        env={"TTY_COMPATIBLE": "1"},
    )
    assert result.exit_code == 0, result.stderr
    assert len(result.stdout.split()) == 3  # the handles stay on stdout
    assert "sending" in result.stderr and "3/3" in result.stderr
    single = CliRunner().invoke(
        cli, ["--db", url, "send", "--from", INITIATOR, "--to", TARGET], env={"TTY_COMPATIBLE": "1"}
    )
    assert (single.exit_code, single.stderr) == (0, "")  # no bar for one message


# -- listings: groups and monitors -------------------------------------------------------


def test_show_groups(run: Run, services: None) -> None:
    send_request(run)
    groups = as_json(run("show", "groups", "--json"))
    assert sorted((g["service"], g["queue"], g["conversations"]) for g in groups) == [
        (INITIATOR, "InitiatorQueue", 1),
        (TARGET, "TargetQueue", 1),
    ]
    assert {"conversation_group_id", "service_id", "is_system"} <= set(groups[0])
    lines = run("show", "groups").stdout.splitlines()
    assert lines[0].split("\t") == ["conversation_group_id", "service", "queue", "conversations", "is_system"]
    assert len(lines) == 3


def test_show_monitors_counts_activated_tasks(url: str, run: Run, services: None) -> None:
    queue_id = queue_row(run, "TargetQueue")["object_id"]
    db = broker.connect(url)
    now = datetime.now(UTC)
    with db.engine.begin() as conn:  # the rows a runtime keeps while it watches the queue
        conn.execute(insert(QueueMonitor).values(
            queue_id=queue_id, state="RECEIVES_OCCURRING", last_activated_time=now, tasks_waiting=0))
        conn.execute(insert(ActivatedTask), [
            {"task_id": uuid.uuid4(), "queue_id": queue_id, "procedure_name": "m:f", "process_id": 1,
             "start_time": now}
            for _ in range(2)
        ])
    db.dispose()
    [monitor] = as_json(run("show", "monitors", "--json"))
    assert (monitor["queue"], monitor["state"], monitor["activated_tasks"]) == (
        "TargetQueue", "RECEIVES_OCCURRING", 2,
    )
    lines = run("show", "monitors").stdout.splitlines()
    assert lines[1].startswith(f"TargetQueue\t{queue_id}\tRECEIVES_OCCURRING\t0\t2\t")


# -- status ------------------------------------------------------------------------------


def test_status_shows_ages_backlog_and_timers(run: Run, services: None) -> None:
    send_request(run)
    run("send", "--from", INITIATOR, "--to", "//test/Nowhere", "--body", "lost", "--count", "2")
    summary = as_json(run("status", "--json"))
    queues = {q["queue"]: q for q in summary["queues"]}
    assert queues["TargetQueue"]["oldest_ready_age_s"] >= 0
    assert queues["TargetQueue"]["oldest_ready_time"] is not None
    assert queues["InitiatorQueue"]["oldest_ready_age_s"] is None
    assert summary["transmission_queue"] == 2
    assert summary["transmission_backlog"] == [{"transmission_status": SERVICE_NOT_FOUND, "count": 2}]

    text = run("status").stdout
    assert "Transmission queue: 2 messages awaiting delivery" in text
    assert summary["transmission_destinations"] == [
        {"to_service_name": "//test/Nowhere", "to_broker_instance": None,
         "transmission_status": SERVICE_NOT_FOUND, "count": 2}
    ]
    assert ("# Waiting, by destination and reason\ncount\tto_service_name\tto_broker_instance\ttransmission_status\n"
            f"2\t//test/Nowhere\t\t{SERVICE_NOT_FOUND}\n") in text
    assert text.splitlines()[2].endswith("\toldest_ready")
    assert "Conversation timers: 0 set, 0 due" in text


def test_status_leaves_out_a_queue_dropped_while_it_reads(run: Run, services: None, url: str,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Another process drops a queue between status's list of queues and its counts."""
    run("create", "queue", "Doomed")
    counts = broker.Broker.queue_counts

    def dropped_first(self: broker.Broker, queue: str) -> dict[int, int]:
        if queue == "Doomed":
            other = broker.connect(url, upgrade=False)
            try:
                other.drop_queue("Doomed")
            finally:
                other.dispose()
        return counts(self, queue)

    monkeypatch.setattr(broker.Broker, "queue_counts", dropped_first)
    summary = as_json(run("status", "--json"))
    assert {q["queue"] for q in summary["queues"]} == {"TargetQueue", "InitiatorQueue"}


def test_status_watch_prints_a_snapshot_per_iteration(run: Run, services: None) -> None:
    text = run("status", "--watch", "--iterations", "2", "--interval", "0").stdout
    assert text.count("# Queues") == 2
    assert sum(line.startswith("Database ") for line in text.splitlines()) == 2

    snapshots = run("status", "--watch", "--json", "--iterations", "3", "--interval", "0").stdout.splitlines()
    assert [json.loads(s)["database"]["is_broker_enabled"] for s in snapshots] == [True] * 3

    assert "--watch" in run("status", "--iterations", "2", expect=2).stderr
    run("status", "--watch", "--iterations", "0", expect=2)


# -- export and import -------------------------------------------------------------------


def test_export_then_import_into_another_database(
    run: Run, other: Run, services: None, tmp_path: Path
) -> None:
    bodies = [f"<request>{n}</request>" for n in range(5)]
    for body in bodies:
        send_request(run, body)
    binary = tmp_path / "body.bin"
    binary.write_bytes(b"\xff\x00binary")
    run("send", "--from", INITIATOR, "--to", TARGET, "--body-file", str(binary))
    exported = tmp_path / "target.jsonl"
    result = run("export", "TargetQueue", str(exported), "--page-size", "2")
    assert result.stdout == f"exported 6 messages from TargetQueue to {exported}\n"
    assert len(target_rows(run)) == 6  # a peek: nothing was received

    imported = other("import", "TargetQueue", str(exported), "--from", INITIATOR, "--new-dialogs", "--batch", "4")
    assert imported.stdout == "imported 6 messages into TargetQueue\n"
    copies = jsonl(exported)
    rows = target_rows(other)
    assert [r["message_body"] for r in rows] == [*bodies, "0xFF0062696E617279"]
    assert [r["message_type_name"] for r in rows] == [REQUEST] * 5 + ["DEFAULT"]
    assert [r["message_type_name"] for r in rows] == [c["message_type_name"] for c in copies]


def test_export_lines_carry_the_receive_columns(run: Run, services: None, tmp_path: Path) -> None:
    send_request(run, "<request>é</request>")
    run("send", "--from", INITIATOR, "--to", TARGET, "--body-file", "-", input=b"\x80\x81")
    run("send", "--from", INITIATOR, "--to", TARGET)
    path = tmp_path / "out.jsonl"
    run("export", "TargetQueue", str(path))
    text_line, binary_line, empty_line = jsonl(path)
    assert list(text_line)[:3] == ["status", "priority", "queuing_order"]
    assert {f.name for f in dataclasses.fields(broker.Message)} <= set(text_line)
    assert (text_line["message_body"], text_line["message_body_encoding"]) == ("<request>é</request>", "utf-8")
    assert (binary_line["message_body"], binary_line["message_body_encoding"]) == ("gIE=", "base64")
    assert empty_line["message_body"] in ("", None)
    assert text_line["service_contract_name"] == CONTRACT
    assert text_line["conversation_handle"] == target_rows(run)[0]["conversation_handle"]

    dashed = run("export", "TargetQueue", "-")
    assert [json.loads(line) for line in dashed.stdout.splitlines()] == jsonl(path)
    assert dashed.stderr == "exported 3 messages from TargetQueue to -\n"


def test_export_of_an_unknown_queue_writes_nothing(run: Run, tmp_path: Path) -> None:
    path = tmp_path / "none.jsonl"
    one_error_line(run("export", "NoSuchQueue", str(path), expect=1), 208)
    assert not path.exists()
    run("create", "queue", "Empty")
    run("export", "Empty", str(path))
    assert path.read_text() == ""


def test_iter_queue_rows_reads_pages_without_receiving(url: str, run: Run, services: None) -> None:
    for number in range(5):
        send_request(run, f"<request>{number}</request>")
    db = broker.connect(url)
    try:
        paged = list(db.iter_queue_rows("TargetQueue", page_size=2))
        assert paged == db.queue_rows("TargetQueue")
        assert [m.message_body for m in paged] == [f"<request>{n}</request>".encode() for n in range(5)]
        assert list(db.iter_queue_rows("TargetQueue", page_size=5)) == paged
        with pytest.raises(ValueError):
            next(db.iter_queue_rows("TargetQueue", page_size=0))
        with pytest.raises(broker.BrokerError) as error:
            next(db.iter_queue_rows("NoSuchQueue"))
        assert error.value.number == 208
    finally:
        db.dispose()


def test_import_on_the_lines_conversation(run: Run, services: None, tmp_path: Path) -> None:
    handle = send_request(run)
    path = tmp_path / "more.jsonl"
    path.write_text(
        "".join(
            json.dumps({"conversation_handle": handle, "message_type_name": REQUEST, "message_body": body}) + "\n"
            for body in ("<more>1</more>", "<more>2</more>")
        )
        + "\n"  # blank lines are skipped
    )
    assert run("import", TARGET, str(path)).stdout == "imported 2 messages into //test/Target\n"
    rows = target_rows(run)
    assert [r["message_sequence_number"] for r in rows] == [0, 1, 2]
    assert rows[2]["message_body"] == "<more>2</more>"


def test_import_from_stdin_to_a_service(run: Run, services: None) -> None:
    lines = "".join(
        json.dumps({"message_type_name": "DEFAULT", "message_body": f"line {n}"}) + "\n" for n in range(3)
    )
    assert run("import", TARGET, "-", "--from", INITIATOR, "--batch", "2", input=lines).stdout == (
        "imported 3 messages into //test/Target\n"
    )
    assert [r["message_body"] for r in target_rows(run)] == ["line 0", "line 1", "line 2"]
    assert len({r["conversation_handle"] for r in target_rows(run)}) == 3


def test_import_picks_the_service_of_a_queue_by_service_name(run: Run, services: None) -> None:
    run("create", "service", "//test/Second", "--queue", "TargetQueue", "--contract", "DEFAULT")
    line = {"message_body": "for the second", "service_name": "//test/Second"}
    run("import", "TargetQueue", "-", "--from", INITIATOR, input=json.dumps(line))
    [row] = target_rows(run)
    assert row["service_name"] == "//test/Second"
    result = run("import", "TargetQueue", "-", "--from", INITIATOR, input='{"message_body": "?"}', expect=1)
    assert result.stderr.startswith("error: stdin line 1: service_name None is none of the services on queue")


def test_import_errors(run: Run, services: None, tmp_path: Path) -> None:
    good = json.dumps({"message_type_name": "DEFAULT", "message_body": "fine"})
    run("import", "NoSuchThing", "-", "--from", INITIATOR, input=good, expect=2)
    run("create", "queue", "Lonely")
    assert "no service" in run("import", "Lonely", "-", "--from", INITIATOR, input=good, expect=2).stderr
    assert "--from" in run("import", TARGET, "-", input=good, expect=2).stderr

    bad = tmp_path / "bad.jsonl"
    bad.write_text(f"{good}\n{{not json\n")
    result = run("import", TARGET, str(bad), "--from", INITIATOR, expect=1)
    assert result.stderr.startswith(f"error: {bad} line 2: not JSON")
    assert len(target_rows(run)) == 1  # line 1 was committed in its own batch

    wrong_type = json.dumps({"message_type_name": REPLY, "message_body": "x", "service_contract_name": CONTRACT})
    result = run("import", TARGET, "-", "--from", INITIATOR, input=f"{good}\n{wrong_type}\n", expect=1)
    line = one_error_line(result, 8432)  # the initiator of CONTRACT does not send REPLY
    assert line.endswith("(stdin line 2; 1 message imported before its batch)")
    assert len(target_rows(run)) == 2  # line 1 of this import too, in its own batch

    for body, why in (
        ({"message_body": 5}, "message_body is not a string"),
        ({"message_body": "!!", "message_body_encoding": "base64"}, "message_body is not base64"),
        ({"message_body": "x", "message_body_encoding": "rot13"}, "is not 'utf-8' or 'base64'"),
        ([1, 2], "not a JSON object"),
        ({"conversation_handle": "nope"}, "is not a uniqueidentifier"),
    ):
        result = run("import", TARGET, "-", "--from", INITIATOR, input=json.dumps(body), expect=1)
        assert result.stderr.startswith("error: stdin line 1: ") and why in result.stderr, result.stderr


def test_import_of_an_export_needs_new_dialogs(
    run: Run, other: Run, services: None, tmp_path: Path
) -> None:
    send_request(run)
    path = tmp_path / "target.jsonl"
    run("export", "TargetQueue", str(path))
    # Into the same database the lines' handles are the target's own side of the dialog.
    result = run("import", "TargetQueue", str(path), "--from", INITIATOR, expect=1)
    assert f"goes to {INITIATOR}, not to TargetQueue" in result.stderr and "--new-dialogs" in result.stderr
    # Into another database they do not exist.
    line = one_error_line(other("import", "TargetQueue", str(path), "--from", INITIATOR, expect=1), 8426)
    assert "--new-dialogs" in line
    other("import", "TargetQueue", str(path), "--from", INITIATOR, "--new-dialogs")
    assert len(target_rows(other)) == 1


def test_bulk_commands_draw_bars_only_on_a_terminal(url: str, run: Run, services: None, tmp_path: Path) -> None:
    send_request(run)
    path = tmp_path / "target.jsonl"
    runner = CliRunner()

    def bulk(args: list[str], env: dict[str, str]) -> Result:
        result = runner.invoke(cli, ["--db", url, *args], env=env)
        assert result.exit_code == 0, result.stderr
        return result

    plain = bulk(["export", "TargetQueue", str(path)], {})
    assert plain.stderr == "" and "\x1b" not in plain.stdout
    assert "exporting TargetQueue" in bulk(["export", "TargetQueue", str(path)], {"TTY_COMPATIBLE": "1"}).stderr
    imported = bulk(["import", TARGET, str(path), "--from", INITIATOR, "--new-dialogs"], {"TTY_COMPATIBLE": "1"})
    assert "imported 1" in imported.stderr

