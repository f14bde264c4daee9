"""The ``broker`` command line, run through click's CliRunner on a fresh SQLite file each."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner, Result

import broker
from broker.storage import schema
from cli.main import cli

REQUEST = "//test/Request"
REPLY = "//test/Reply"
CONTRACT = "//test/Contract"
INITIATOR = "//test/Initiator"
TARGET = "//test/Target"

Run = Callable[..., Result]


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'broker.db'}"


@pytest.fixture
def run(url: str) -> Run:
    """``run(*args, expect=0)``: invoke ``broker --db URL *args`` and check the exit code."""
    return cli_runner(url)


def cli_runner(url: str) -> Run:
    """The ``run`` of the fixture, for the database at ``url``."""
    runner = CliRunner()

    def invoke(*args: str, expect: int = 0, input: bytes | str | None = None) -> Result:
        result = runner.invoke(cli, ["--db", url, *args], input=input)
        assert result.exit_code == expect, (result.stdout, result.stderr, result.exception)
        return result

    return invoke


@pytest.fixture
def services(run: Run) -> None:
    """A request/reply contract between two services, each on its own queue; the
    target also accepts the DEFAULT contract."""
    create_services(run)


def create_services(run: Run) -> None:
    """The objects of the ``services`` fixture, in the database ``run`` works on."""
    run("create", "message-type", REQUEST, "--validation", "WELL_FORMED_XML")
    run("create", "message-type", REPLY)
    run(
        "create",
        "contract",
        CONTRACT,
        "--message",
        f"{REQUEST}:INITIATOR",
        "--message",
        f"{REPLY}:TARGET",
    )
    run("create", "queue", "InitiatorQueue")
    run("create", "queue", "TargetQueue")
    run("create", "service", INITIATOR, "--queue", "InitiatorQueue")
    run(
        "create",
        "service",
        TARGET,
        "--queue",
        "TargetQueue",
        "--contract",
        CONTRACT,
        "--contract",
        "DEFAULT",
    )


def as_json(result: Result) -> Any:
    return json.loads(result.stdout)


def one_error_line(result: Result, number: int) -> str:
    """The single stderr line of a failed command, checked to carry ``number``."""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"error {number}: "), lines[0]
    return lines[0]


def send_request(run: Run, body: str = "<request>1</request>") -> str:
    result = run(
        "send",
        "--from",
        INITIATOR,
        "--to",
        TARGET,
        "--contract",
        CONTRACT,
        "--type",
        REQUEST,
        "--body",
        body,
    )
    return result.stdout.strip()


def endpoint_state(run: Run, handle: str) -> str | None:
    """The state of the endpoint with this handle in sys.conversation_endpoints, or None."""
    rows = as_json(run("show", "endpoints", "--json"))
    return next(
        (r["state"] for r in rows if str(r["conversation_handle"]).lower() == handle.lower()), None
    )


# -- schema --------------------------------------------------------------------------


def test_init_current_history_downgrade_upgrade(run: Run) -> None:
    head = schema.head_revision()
    assert run("init").stdout.strip() == f"database at revision {head}"
    assert run("current").stdout.strip() == f"{head} (head)"
    history = as_json(run("history", "--json"))
    assert history[-1]["revision"] == head
    assert history[0]["down_revision"] is None

    assert run("downgrade", "base").stdout.strip() == "database at revision base"
    assert run("current").stdout.strip() == "base"
    assert run("upgrade", head).stdout.strip() == f"database at revision {head}"
    run("downgrade", "base")
    run("upgrade")
    assert run("current").stdout.strip() == f"{head} (head)"


def test_unknown_revision_is_one_error_line(run: Run) -> None:
    result = run("upgrade", "nosuchrevision", expect=1)
    assert result.stderr.startswith("error: ") and len(result.stderr.splitlines()) == 1


def test_db_url_from_environment_and_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runner = CliRunner()
    env_url = f"sqlite:///{tmp_path / 'from-env.db'}"
    assert runner.invoke(cli, ["init"], env={"BROKER_URL": env_url}).exit_code == 0
    assert (tmp_path / "from-env.db").exists()

    monkeypatch.delenv("BROKER_URL", raising=False)
    monkeypatch.chdir(tmp_path)
    assert runner.invoke(cli, ["init"]).exit_code == 0
    assert (tmp_path / "broker.db").exists()


def test_in_memory_database_is_a_usage_error() -> None:
    result = CliRunner().invoke(cli, ["--db", "sqlite:///:memory:", "status"])
    assert result.exit_code == 2
    assert "--db" in result.stderr


# -- objects -------------------------------------------------------------------------


def test_create_message_types_and_contract(run: Run, services: None) -> None:
    types = {r["name"]: r for r in as_json(run("show", "message-types", "--json"))}
    assert types[REQUEST]["validation"] == "X"
    assert types[REPLY]["validation"] == "N"
    assert types["DEFAULT"]["message_type_id"] == 14

    contracts = {r["name"] for r in as_json(run("show", "contracts", "--json"))}
    assert CONTRACT in contracts
    table = run("show", "contracts").stdout
    assert f"{REQUEST} SENT BY INITIATOR, {REPLY} SENT BY TARGET" in table


def test_contract_message_option_must_name_a_direction(run: Run) -> None:
    result = run("create", "contract", "C", "--message", "DEFAULT", expect=2)
    assert "TYPE:INITIATOR" in result.stderr
    run("create", "contract", "C", "--message", "DEFAULT:SIDEWAYS", expect=2)


def test_contract_needs_an_initiator_message(run: Run) -> None:
    result = run("create", "contract", "C", "--message", "DEFAULT:TARGET", expect=1)
    one_error_line(result, 8492)


def test_xml_schema_collection_for_valid_xml(run: Run, tmp_path: Path) -> None:
    xsd = tmp_path / "order.xsd"
    xsd.write_text(
        '<xs:schema xmlns:xs="http://www.w3.org/2001/XMLSchema">'
        '<xs:element name="order" type="xs:int"/></xs:schema>'
    )
    run("create", "xml-schema-collection", "Orders", "--file", str(xsd))
    run(
        "create",
        "message-type",
        "//test/Order",
        "--validation",
        "valid_xml",
        "--schema-collection",
        "Orders",
    )
    order = next(
        r for r in as_json(run("show", "message-types", "--json")) if r["name"] == "//test/Order"
    )
    assert order["validation"] == "X"
    assert order["xml_collection_id"] is not None


def test_create_and_alter_queue(run: Run) -> None:
    run("create", "queue", "Q", "--status", "off", "--retention", "ON")
    queue = next(r for r in as_json(run("show", "queues", "--json")) if r["name"] == "Q")
    assert (queue["is_receive_enabled"], queue["is_retention_enabled"]) == (0, 1)

    run("alter", "queue", "Q", "--status", "on")
    queue = next(r for r in as_json(run("show", "queues", "--json")) if r["name"] == "Q")
    assert (queue["is_receive_enabled"], queue["is_retention_enabled"]) == (1, 1)

    run("alter", "queue", "Q", expect=2)
    run("create", "queue", "Q2", "--status", "maybe", expect=2)


def test_services_show_their_queue_and_contracts(run: Run, services: None) -> None:
    rows = {r["name"]: r for r in as_json(run("show", "services", "--json"))}
    assert set(rows) >= {INITIATOR, TARGET}
    lines = run("show", "services").stdout.splitlines()
    assert lines[0].split("\t") == ["name", "service_id", "queue", "contracts"]
    assert f"{TARGET}\t{rows[TARGET]['service_id']}\tTargetQueue\t{CONTRACT}, DEFAULT" in lines


def test_drop_in_dependency_order(run: Run, services: None) -> None:
    one_error_line(run("drop", "queue", "TargetQueue", expect=1), 3729)
    one_error_line(run("drop", "message-type", REQUEST, expect=1), 3729)
    for kind, name in (
        ("service", TARGET),
        ("queue", "TargetQueue"),
        ("service", INITIATOR),
        ("queue", "InitiatorQueue"),
        ("contract", CONTRACT),
        ("message-type", REQUEST),
        ("message-type", REPLY),
    ):
        assert run("drop", kind, name).stdout.strip() == f"dropped {kind.replace('-', ' ')} {name}"
    assert not {r["name"] for r in as_json(run("show", "queues", "--json"))} & {
        "TargetQueue",
        "InitiatorQueue",
    }
    assert run("drop", "route", "AutoCreatedLocal").stdout == "dropped route AutoCreatedLocal\n"
    assert as_json(run("show", "routes", "--json")) == []
    one_error_line(run("drop", "route", "AutoCreatedLocal", expect=1), 3701)
    run("drop", "nothing", "X", expect=2)


# -- conversations -------------------------------------------------------------------


def test_send_then_receive_returns_the_body(run: Run, services: None) -> None:
    handle = send_request(run, "<request>hello</request>")
    assert endpoint_state(run, handle) == "CO"

    [message] = as_json(run("receive", "TargetQueue", "--json"))
    assert message["message_body"] == "<request>hello</request>"
    assert message["message_type_name"] == REQUEST
    assert message["service_name"] == TARGET
    assert message["message_sequence_number"] == 0
    assert as_json(run("receive", "TargetQueue", "--json")) == []


def test_receive_table_and_top(run: Run, services: None) -> None:
    send_request(run, "<request>1</request>")
    send_request(run, "<request>2</request>")
    lines = run("receive", "TargetQueue", "--top", "1").stdout.splitlines()
    assert lines[0].split("\t") == [
        "conversation_handle",
        "message_sequence_number",
        "service_name",
        "message_type_name",
        "message_body",
    ]
    assert len(lines) == 2 and lines[1].endswith("\t<request>1</request>")
    run("receive", "TargetQueue", "--top", "0", expect=2)


def test_receive_wait_returns_at_once_when_a_message_is_there(run: Run, services: None) -> None:
    assert as_json(run("receive", "TargetQueue", "--wait", "0", "--json")) == []
    send_request(run)
    assert len(as_json(run("receive", "TargetQueue", "--wait", "-1", "--json"))) == 1


def test_body_file_and_binary_body(run: Run, services: None, tmp_path: Path) -> None:
    body = tmp_path / "body.bin"
    body.write_bytes(b"\xff\x00\x01")
    run("send", "--from", INITIATOR, "--to", TARGET, "--body-file", str(body))
    [message] = as_json(run("receive", "TargetQueue", "--json"))
    assert message["message_body"] == "0xFF0001"

    run("send", "--from", INITIATOR, "--to", TARGET, "--body-file", "-", input=b"from stdin")
    assert as_json(run("receive", "TargetQueue", "--json"))[0]["message_body"] == "from stdin"


def test_send_without_body_sends_an_empty_message(run: Run, services: None) -> None:
    run("send", "--from", INITIATOR, "--to", TARGET)
    [message] = as_json(run("receive", "TargetQueue", "--json"))
    assert message["message_type_name"] == "DEFAULT"
    assert message["message_body"] in ("", None)


def test_reply_on_an_existing_handle_and_end_both_sides(run: Run, services: None) -> None:
    initiator = send_request(run)
    [request] = as_json(run("receive", "TargetQueue", "--json"))
    target = request["conversation_handle"]

    assert (
        run("send", "--handle", target, "--type", REPLY, "--body", "<reply/>").stdout.strip()
        == target.lower()
    )
    assert run("end", target).stdout.strip() == f"ended conversation {target.lower()}"

    result = run("receive", "InitiatorQueue", "--end", "--json")
    assert [m["message_type_name"] for m in as_json(result)] == [REPLY, broker.END_DIALOG]
    assert result.stderr.strip() == f"ended conversation {initiator}"
    assert endpoint_state(run, initiator) is None
    assert endpoint_state(run, target) == "CD"


def test_send_on_an_ended_conversation_is_error_8426(run: Run, services: None) -> None:
    handle = send_request(run)
    run("end", handle)
    line = one_error_line(
        run("send", "--handle", handle, "--type", REQUEST, "--body", "<x/>", expect=1), 8426
    )
    assert handle.upper() in line.upper()


def test_wrong_direction_is_error_8432(run: Run, services: None) -> None:
    handle = send_request(run)
    one_error_line(run("send", "--handle", handle, "--type", REPLY, expect=1), 8432)


def test_send_option_combinations(run: Run, services: None) -> None:
    handle = send_request(run)
    run("send", "--to", TARGET, expect=2)
    run("send", "--handle", handle, "--from", INITIATOR, expect=2)
    run("send", "--handle", handle, "--contract", CONTRACT, expect=2)
    run("send", "--from", INITIATOR, "--to", TARGET, "--body", "x", "--body-file", "-", expect=2)
    run("send", "--handle", "not-a-uuid", expect=2)


def test_end_with_error_sends_an_error_message(run: Run, services: None) -> None:
    send_request(run)
    target = as_json(run("receive", "TargetQueue", "--json"))[0]["conversation_handle"]
    run("end", target, "--error", "50001", "--description", "order rejected")

    [error] = as_json(run("receive", "InitiatorQueue", "--end", "--json"))
    assert error["message_type_name"] == broker.ERROR
    assert broker.parse_error(error["message_body"]) == (50001, "order rejected")


def test_end_with_cleanup_and_bad_combinations(run: Run, services: None) -> None:
    handle = send_request(run)
    run("end", handle, "--cleanup", "--error", "1", expect=2)
    one_error_line(run("end", handle, "--error", "5", expect=1), 8422)
    run("end", handle, "--cleanup")
    assert endpoint_state(run, handle) is None
    one_error_line(run("end", handle, expect=1), 8426)


def test_unknown_handle_is_one_error_line(run: Run) -> None:
    result = run("end", "00000000-0000-0000-0000-000000000001", expect=1)
    assert result.stdout == ""
    one_error_line(result, 8426)


def test_receive_from_disabled_queue_is_error_9617(run: Run, services: None) -> None:
    run("alter", "queue", "TargetQueue", "--status", "off")
    one_error_line(run("receive", "TargetQueue", expect=1), 9617)


def test_peek_does_not_receive(run: Run, services: None) -> None:
    send_request(run, "<request>peek</request>")
    for _ in range(2):
        [row] = as_json(run("peek", "TargetQueue", "--json"))
        assert (row["status"], row["message_body"]) == (1, "<request>peek</request>")
    assert run("peek", "TargetQueue").stdout.splitlines()[0].startswith("status\tqueuing_order\t")
    one_error_line(run("peek", "NoSuchQueue", expect=1), 208)


# -- listings and status -------------------------------------------------------------


def test_every_listing_prints_a_json_array(run: Run) -> None:
    for listing in (
        "queues",
        "services",
        "contracts",
        "message-types",
        "endpoints",
        "transmission",
        "routes",
    ):
        assert isinstance(as_json(run("show", listing, "--json")), list), listing
    routes = as_json(run("show", "routes", "--json"))
    assert [(r["name"], r["address"]) for r in routes] == [("AutoCreatedLocal", "LOCAL")]
    run("show", "nothing", expect=2)


def test_undeliverable_message_waits_in_the_transmission_queue(run: Run, services: None) -> None:
    handle = run(
        "send", "--from", INITIATOR, "--to", "//test/Nowhere", "--body", "lost"
    ).stdout.strip()
    [row] = as_json(run("show", "transmission", "--json"))
    assert str(row["conversation_handle"]).lower() == handle
    assert (row["to_service_name"], row["message_body"]) == ("//test/Nowhere", "lost")
    assert as_json(run("status", "--json"))["transmission_queue"] == 1


def test_status_counts_messages_and_endpoints(run: Run, services: None) -> None:
    send_request(run)
    send_request(run)
    summary = as_json(run("status", "--json"))
    queues = {q["queue"]: q for q in summary["queues"]}
    assert (queues["TargetQueue"]["ready"], queues["TargetQueue"]["total"]) == (2, 2)
    assert queues["InitiatorQueue"]["total"] == 0
    assert summary["endpoints"] == [{"state": "CO", "state_desc": "CONVERSING", "count": 4}]
    assert summary["database"]["is_broker_enabled"] is True
    assert summary["timers"] == {"count": 0, "due": 0, "next_due": None}

    text = run("status").stdout
    assert "TargetQueue\tTrue\t2\t0\t0\t0\t2" in text
    assert "Transmission queue: 0 messages awaiting delivery" in text


# -- demo, help, real process --------------------------------------------------------


def test_demo_runs_twice_on_the_same_file(run: Run) -> None:
    first = run("demo").stdout
    assert "TargetQueue1DB holds 1 message:\n     //AWDB/1DBSample/RequestMessage (seq" in first
    assert "initiator DI (DISCONNECTED_INBOUND), target CD (CLOSED)" in first
    assert "initiator endpoint gone, target CD (CLOSED)" in first
    assert "Dropped the objects" not in first

    second = run("demo").stdout
    assert "Dropped the objects an earlier run of the demo had left." in second
    assert "8. The initiator received the reply" in second
    services = {r["name"] for r in as_json(run("show", "services", "--json"))}
    assert {"//AWDB/1DBSample/InitiatorService", "//AWDB/1DBSample/TargetService"} <= services


def _command_paths(group: click.Group, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    paths: list[tuple[str, ...]] = []
    for name, command in group.commands.items():
        paths.append((*prefix, name))
        if isinstance(command, click.Group):
            paths.extend(_command_paths(command, (*prefix, name)))
    return paths


def test_every_command_has_help_with_an_example(run: Run) -> None:
    paths = _command_paths(cli)
    assert {
        ("demo",),
        ("status",),
        ("create", "contract"),
        ("create", "queue"),
        ("create", "xml-schema-collection"),
        ("alter", "queue"),
        ("timer",),
        ("export",),
        ("import",),
    } <= set(paths)
    for path in paths:
        assert "Example" in run(*path, "--help").stdout, path
    assert "--activation-procedure" in run("create", "queue", "--help").stdout
    assert "--drop-activation" in run("alter", "queue", "--help").stdout
    assert "--group" in run("receive", "--help").stdout
    assert "--count" in run("send", "--help").stdout
    assert "--watch" in run("status", "--help").stdout
    assert "groups" in run("show", "--help").stdout and "monitors" in run("show", "--help").stdout


def test_an_operators_session_in_real_processes(tmp_path: Path) -> None:
    """init, objects, send, status, peek, export and import, receive, end, then status:
    each a process of its own, the way an operator types them."""
    env = {**os.environ, "BROKER_URL": f"sqlite:///{tmp_path / 'real.db'}"}
    for forcing in ("FORCE_COLOR", "TTY_COMPATIBLE"):  # the real pipes decide
        env.pop(forcing, None)

    def broker_(*args: str, db: str | None = None) -> str:
        options = ["--db", db] if db else []
        process = subprocess.run(
            [sys.executable, "-m", "cli.main", *options, *args],
            capture_output=True,
            text=True,
            env=env,
            cwd=tmp_path,
            timeout=120,
            check=False,
        )
        assert process.returncode == 0, (args, process.stderr)
        assert "\x1b" not in process.stdout + process.stderr  # no colour down a pipe
        return process.stdout

    assert broker_("init").startswith("database at revision")
    broker_("create", "queue", "InitiatorQueue")
    broker_("create", "queue", "TargetQueue")
    broker_("create", "service", INITIATOR, "--queue", "InitiatorQueue")
    broker_("create", "service", TARGET, "--queue", "TargetQueue", "--contract", "DEFAULT")
    copy_url = f"sqlite:///{tmp_path / 'copy.db'}"
    copy = broker.connect(copy_url)  # the database the export goes to, made in-process
    copy.create_queue("InitiatorQueue")
    copy.create_queue("TargetQueue")
    copy.create_service(INITIATOR, "InitiatorQueue")
    copy.create_service(TARGET, "TargetQueue", ["DEFAULT"])
    copy.dispose()
    handles = broker_("send", "--from", INITIATOR, "--to", TARGET, "--body", "hello", "--count", "3").split()
    assert len(handles) == 3
    assert "TargetQueue\tTrue\t3\t0\t0\t0\t3\t" in broker_("status")
    assert broker_("peek", "TargetQueue").count("\thello") == 3
    broker_("export", "TargetQueue", "target.jsonl")
    broker_("import", "TargetQueue", "target.jsonl", "--from", INITIATOR, "--new-dialogs", db=copy_url)
    copy = broker.connect(copy_url)
    assert [m.message_body for m in copy.queue_rows("TargetQueue")] == [b"hello"] * 3
    copy.dispose()

    [received] = json.loads(broker_("receive", "TargetQueue", "--top", "1", "--json"))
    assert received["message_body"] == "hello"
    broker_("end", received["conversation_handle"])
    assert broker_("receive", "InitiatorQueue", "--end").count("EndDialog") == 1
    status = broker_("status", "--json")
    queues = {q["queue"]: q for q in json.loads(status)["queues"]}
    assert (queues["TargetQueue"]["ready"], queues["InitiatorQueue"]["total"]) == (2, 0)
