"""Routing through the ``broker`` command: routes and remote service bindings, the
instance (``--instance URL database add|remove|list``, ``--database NAME``, its routes,
``run`` and ``status``), the transmission backlog per destination in ``status``, and
``broker demo --between-databases``.

Database tests run on SQLite and PostgreSQL (conftest's ``db_url``); instance tests on
an instance of SQLite files, of PostgreSQL databases and on a mixed one (conftest's
``instance_urls``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from sqlalchemy.engine import make_url
from support import (
    BETWEEN_CONTRACT,
    BETWEEN_INITIATOR_QUEUE,
    BETWEEN_INITIATOR_SERVICE,
    BETWEEN_REPLY,
    BETWEEN_REQUEST,
    BETWEEN_TARGET_QUEUE,
    BETWEEN_TARGET_SERVICE,
    between_databases,
    wait_until,
)
from test_cli import Run, as_json, cli_runner, one_error_line

import broker
from broker.routing.matching import SERVICE_NOT_FOUND
from cli.main import cli

BROKER_SCRIPT = Path(sys.executable).with_name("broker")
REQUEST, REPLY, CONTRACT = BETWEEN_REQUEST, BETWEEN_REPLY, BETWEEN_CONTRACT
TARGET_SERVICE, INITIATOR_SERVICE = BETWEEN_TARGET_SERVICE, BETWEEN_INITIATOR_SERVICE
TARGET_QUEUE, INITIATOR_QUEUE = BETWEEN_TARGET_QUEUE, BETWEEN_INITIATOR_QUEUE

# Each SQLite database and its write lock's file (``broker.storage.write_lock``).
DEMO_FILES = {name + suffix for name in ("InitiatorDB.db", "TargetDB.db", "instance.db") for suffix in ("", "-lock")}


@pytest.fixture
def run(db_url: str) -> Run:
    """``run(*args, expect=0)``: ``broker --db URL *args`` on a fresh database of each backend."""
    return cli_runner(db_url)


def routes(run: Run) -> dict[str, dict[str, Any]]:
    return {r["name"]: r for r in as_json(run("show", "routes", "--json"))}


# -- routes in a database -------------------------------------------------------------------


def test_create_show_alter_drop_route(run: Run) -> None:
    assert set(routes(run)) == {"AutoCreatedLocal"}
    created = run("create", "route", "ToTarget", "--address", "TCP://target.example:4022",
                  "--service", TARGET_SERVICE, "--broker-instance", "A2B3C4", "--lifetime", "3600",
                  "--mirror-address", "TCP://mirror.example:4022")
    assert created.stdout == "created route ToTarget\n"
    row = routes(run)["ToTarget"]
    assert (row["address"], row["remote_service_name"], row["broker_instance"], row["mirror_address"]) == (
        "TCP://target.example:4022", TARGET_SERVICE, "A2B3C4", "TCP://mirror.example:4022")
    assert row["lifetime"] is not None

    altered = run("alter", "route", "ToTarget", "--address", "TCP://other.example:4022")
    assert altered.stdout == "altered route ToTarget\n"
    row = routes(run)["ToTarget"]
    assert (row["address"], row["remote_service_name"]) == ("TCP://other.example:4022", TARGET_SERVICE)

    run("create", "route", "Plain", "--address", "LOCAL")
    assert routes(run)["Plain"]["lifetime"] is None
    table = run("show", "routes").stdout.splitlines()
    assert table[0].split("\t") == ["name", "route_id", "remote_service_name", "broker_instance", "lifetime",
                                    "address", "mirror_address"]
    assert any(line.startswith("Plain\t") and line.endswith("\tLOCAL\t") for line in table)

    assert run("drop", "route", "ToTarget").stdout == "dropped route ToTarget\n"
    assert set(routes(run)) == {"AutoCreatedLocal", "Plain"}
    one_error_line(run("drop", "route", "ToTarget", expect=1), 3701)


def test_route_errors_are_sql_servers(run: Run) -> None:
    one_error_line(run("create", "route", "R", "--address", "LOCAL", "--broker-instance", "G", expect=1), 9662)
    one_error_line(run("create", "route", "R", "--address", "TRANSPORT", "--service", "//s", expect=1), 9745)
    one_error_line(run("create", "route", "R", "--address", "nowhere", expect=1), 9744)
    one_error_line(run("create", "route", "R", "--address", "", expect=1), 9659)
    one_error_line(run("create", "route", "R", "--address", "TCP://a:1", "--mirror-address", "TCP://b:1",
                       expect=1), 9661)
    one_error_line(run("create", "route", "R", "--address", "LOCAL", "--service", "//s", "--broker-instance",
                       "G", "--mirror-address", "TCP://b:1", expect=1), 9743)
    for lifetime in ("0", "-5", "2147483648", "soon"):
        result = run("create", "route", "R", "--address", "LOCAL", "--lifetime", lifetime, expect=2)
        assert "--lifetime" in result.stderr
    run("create", "route", "R", expect=2)  # --address is required
    run("create", "route", "R", "--address", "LOCAL")
    one_error_line(run("create", "route", "R", "--address", "LOCAL", expect=1), 2714)
    assert "nothing to change" in run("alter", "route", "R", expect=2).stderr
    one_error_line(run("alter", "route", "Nope", "--address", "LOCAL", expect=1), 15151)
    assert set(routes(run)) == {"AutoCreatedLocal", "R"}


def test_remote_service_bindings(run: Run) -> None:
    created = run("create", "remote-service-binding", "TargetBinding", "--service", TARGET_SERVICE,
                  "--user", "TargetUser")
    assert created.stdout == "created remote service binding TargetBinding\n"
    [row] = as_json(run("show", "remote-service-bindings", "--json"))
    assert (row["name"], row["remote_service_name"], row["remote_principal_name"], row["is_anonymous_on"]) == (
        "TargetBinding", TARGET_SERVICE, "TargetUser", 0)
    one_error_line(run("create", "remote-service-binding", "Second", "--service", TARGET_SERVICE,
                       "--user", "U", expect=1), 9619)

    run("alter", "remote-service-binding", "TargetBinding", "--user", "OtherUser", "--anonymous", "ON")
    [row] = as_json(run("show", "remote-service-bindings", "--json"))
    assert (row["remote_principal_name"], row["is_anonymous_on"]) == ("OtherUser", 1)
    lines = run("show", "remote-service-bindings").stdout.splitlines()
    assert lines == ["name\tremote_service_binding_id\tremote_service_name\tremote_principal_name\tis_anonymous_on",
                     f"TargetBinding\t{row['remote_service_binding_id']}\t{TARGET_SERVICE}\tOtherUser\t1"]

    assert "nothing to change" in run("alter", "remote-service-binding", "TargetBinding", expect=2).stderr
    run("create", "remote-service-binding", "B", "--service", "//s", expect=2)  # --user is required
    run("create", "remote-service-binding", "B", "--service", "//s", "--user", "U", "--anonymous", "maybe",
        expect=2)
    assert run("drop", "remote-service-binding", "TargetBinding").stdout == (
        "dropped remote service binding TargetBinding\n")
    assert as_json(run("show", "remote-service-bindings", "--json")) == []
    one_error_line(run("drop", "remote-service-binding", "TargetBinding", expect=1), 3701)
    one_error_line(run("alter", "remote-service-binding", "TargetBinding", "--user", "U", expect=1), 15151)


# -- the instance: databases, --database, routes ------------------------------------------------


def instance_runner(instance_url: str, database: str | None = None) -> Run:
    """``run(*args, expect=0)``: ``broker --instance URL [--database NAME] *args``."""
    runner = CliRunner()
    chosen = ["--database", database] if database else []

    def invoke(*args: str, expect: int = 0) -> Result:
        result = runner.invoke(cli, ["--instance", instance_url, *chosen, *args])
        assert result.exit_code == expect, (result.stdout, result.stderr, result.exception)
        return result

    return invoke


def shown(url: str) -> str:
    return make_url(url).render_as_string(hide_password=True)


def test_database_add_list_remove(
    instance_urls: tuple[str, str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    instance_url, initiator_url, target_url = instance_urls
    inst = instance_runner(instance_url)
    assert as_json(inst("database", "list", "--json")) == []
    added = inst("database", "add", "TargetDB", target_url).stdout
    assert added == f"added database TargetDB ({shown(target_url)})\n"
    inst("database", "add", "InitiatorDB", initiator_url)
    one_error_line(inst("database", "add", "TargetDB", initiator_url, expect=1), 1801)

    listed = as_json(inst("database", "list", "--json"))
    assert [(r["name"], r["database_id"], r["is_broker_enabled"]) for r in listed] == [
        ("TargetDB", 5, 1), ("InitiatorDB", 6, 1)]
    assert listed[0]["service_broker_guid"] != listed[1]["service_broker_guid"]
    assert [r["url"] for r in listed] == [shown(target_url), shown(initiator_url)]
    table = inst("database", "list").stdout.splitlines()
    assert table[0].split("\t") == ["name", "database_id", "is_broker_enabled", "service_broker_guid", "url"]
    assert table[1].startswith("TargetDB\t5\t1\t")

    assert inst("database", "remove", "InitiatorDB").stdout == "removed database InitiatorDB\n"
    assert [r["name"] for r in as_json(inst("database", "list", "--json"))] == ["TargetDB"]
    one_error_line(inst("database", "remove", "InitiatorDB", expect=1), 15151)
    assert "URL" in inst("database", "add", "Memory", "sqlite:///:memory:", expect=2).stderr
    inst("database", "add", "", target_url, expect=2)

    # a relative SQLite path is stored absolute: the instance opens it from anywhere
    monkeypatch.chdir(tmp_path)
    inst("database", "add", "Relative", "sqlite:///relative.db")
    monkeypatch.chdir("/")
    [relative] = [r for r in as_json(inst("database", "list", "--json")) if r["name"] == "Relative"]
    assert relative["url"] == f"sqlite:///{tmp_path / 'relative.db'}"


def test_database_picks_a_member_for_the_other_commands(instance_urls: tuple[str, str, str]) -> None:
    instance_url, initiator_url, target_url = instance_urls
    inst = instance_runner(instance_url)
    inst("database", "add", "TargetDB", target_url)
    inst("database", "add", "InitiatorDB", initiator_url)
    target = instance_runner(instance_url, "TargetDB")
    target("create", "queue", TARGET_QUEUE)
    target("create", "route", "OnlyInTarget", "--address", "LOCAL")
    assert TARGET_QUEUE in {q["name"] for q in as_json(target("show", "queues", "--json"))}
    initiator = instance_runner(instance_url, "InitiatorDB")
    assert TARGET_QUEUE not in {q["name"] for q in as_json(initiator("show", "queues", "--json"))}
    assert "OnlyInTarget" not in {r["name"] for r in as_json(initiator("show", "routes", "--json"))}
    assert "OnlyInTarget" not in {r["name"] for r in as_json(inst("show", "routes", "--json"))}
    database = broker.connect(target_url)
    try:
        assert TARGET_QUEUE in {q["name"] for q in database.catalog("sys.service_queues")}
        assert "OnlyInTarget" in {r["name"] for r in database.catalog("sys.routes")}
    finally:
        database.dispose()
    # a member's status is the database's own, as with --db
    summary = as_json(target("status", "--json"))
    assert [q["queue"] for q in summary["queues"]] == [TARGET_QUEUE]
    assert target("current").stdout.endswith("(head)\n")
    one_error_line(instance_runner(instance_url, "NoSuchDB")("show", "queues", expect=1), 911)


def test_instance_routes(instance_urls: tuple[str, str, str]) -> None:
    instance_url, _, target_url = instance_urls
    inst = instance_runner(instance_url)
    inst("database", "add", "TargetDB", target_url)
    assert [r["name"] for r in as_json(inst("show", "routes", "--json"))] == ["AutoCreatedLocal"]
    created = inst("create", "route", "Inbound", "--address", "LOCAL", "--service", TARGET_SERVICE)
    assert created.stdout == "created route Inbound of the instance\n"
    inst("alter", "route", "Inbound", "--lifetime", "600")
    rows = {r["name"]: r for r in as_json(inst("show", "routes", "--json"))}
    assert (rows["Inbound"]["remote_service_name"], rows["Inbound"]["address"]) == (TARGET_SERVICE, "LOCAL")
    assert rows["Inbound"]["lifetime"] is not None
    member = instance_runner(instance_url, "TargetDB")
    assert [r["name"] for r in as_json(member("show", "routes", "--json"))] == ["AutoCreatedLocal"]
    assert inst("drop", "route", "Inbound").stdout == "dropped route Inbound of the instance\n"
    one_error_line(inst("drop", "route", "Inbound", expect=1), 3701)
    one_error_line(inst("create", "route", "Bad", "--address", "TRANSPORT", "--service", "//s", expect=1), 9745)
    # the catalog's own schema, through the instance
    assert inst("current").stdout.endswith("(head)\n")


def test_db_and_instance_go_together_as_documented(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    db_url = f"sqlite:///{tmp_path / 'one.db'}"
    instance_url = f"sqlite:///{tmp_path / 'instance.db'}"
    runner = CliRunner()

    def invoke(args: list[str], env: dict[str, str | None] | None = None) -> Result:
        clean: dict[str, str | None] = {"BROKER_URL": None, "BROKER_INSTANCE": None, "BROKER_DATABASE": None}
        return runner.invoke(cli, args, env={**clean, **(env or {})})

    both = invoke(["--db", db_url, "--instance", instance_url, "status"])
    assert both.exit_code == 2 and "give --db or --instance, not both" in both.stderr
    from_env = invoke(["status"], {"BROKER_URL": db_url, "BROKER_INSTANCE": instance_url})
    assert from_env.exit_code == 2 and "BROKER_URL and BROKER_INSTANCE are both set" in from_env.stderr

    # one on the command line, the other in the environment: the command line wins
    over_env = invoke(["--db", db_url, "status", "--json"], {"BROKER_INSTANCE": instance_url})
    assert over_env.exit_code == 0 and "database" in json.loads(over_env.stdout)
    over_url = invoke(["--instance", instance_url, "status", "--json"], {"BROKER_URL": db_url})
    assert over_url.exit_code == 0 and "instance" in json.loads(over_url.stdout)
    from_instance_env = invoke(["database", "list", "--json"], {"BROKER_INSTANCE": instance_url})
    assert from_instance_env.exit_code == 0 and json.loads(from_instance_env.stdout) == []

    lone = invoke(["--database", "TargetDB", "status"])
    assert lone.exit_code == 2 and "--database picks a member of an instance" in lone.stderr
    ignored = invoke(["--db", db_url, "status", "--json"], {"BROKER_DATABASE": "TargetDB"})
    assert ignored.exit_code == 0  # BROKER_DATABASE goes with an instance only
    needs_member = invoke(["--instance", instance_url, "show", "queues"])
    assert needs_member.exit_code == 2 and "give --database NAME" in needs_member.stderr
    needs_instance = invoke(["--db", db_url, "database", "list"])
    assert needs_instance.exit_code == 2 and "give --instance URL" in needs_instance.stderr
    bad = invoke(["--instance", "sqlite:///:memory:", "status"])
    assert bad.exit_code == 2 and "'--instance'" in bad.stderr
    member_run = invoke(["--instance", instance_url, "--database", "TargetDB", "run"])
    assert member_run.exit_code == 2 and "leave out --database" in member_run.stderr
    assert not (tmp_path / "broker.db").exists()  # nothing fell back to the default --db


# -- status: the transmission backlog per destination ---------------------------------------------


def test_status_shows_the_backlog_by_destination_and_reason(run: Run) -> None:
    run("create", "queue", "InitiatorQueue")
    run("create", "service", "//test/Initiator", "--queue", "InitiatorQueue")
    run("send", "--from", "//test/Initiator", "--to", "//test/Nowhere", "--body", "a", "--count", "2")
    run("send", "--from", "//test/Initiator", "--to", "//test/Elsewhere", "--body", "b")
    summary = as_json(run("status", "--json"))
    assert summary["transmission_queue"] == 3
    assert summary["transmission_destinations"] == [
        {"to_service_name": "//test/Elsewhere", "to_broker_instance": None,
         "transmission_status": SERVICE_NOT_FOUND, "count": 1},
        {"to_service_name": "//test/Nowhere", "to_broker_instance": None,
         "transmission_status": SERVICE_NOT_FOUND, "count": 2},
    ]
    text = run("status").stdout
    assert ("# Waiting, by destination and reason\n"
            "count\tto_service_name\tto_broker_instance\ttransmission_status\n"
            f"1\t//test/Elsewhere\t\t{SERVICE_NOT_FOUND}\n"
            f"2\t//test/Nowhere\t\t{SERVICE_NOT_FOUND}\n") in text


@pytest.fixture
def tutorial(instance_urls: tuple[str, str, str]) -> Iterator[tuple[str, broker.Instance]]:
    """The instance of spec 12.2 (steps 1-3): its URL and the instance, opened in-process."""
    instance_url, initiator_url, target_url = instance_urls
    inst = broker.instance(instance_url)
    between_databases(inst, initiator_url, target_url)
    yield instance_url, inst
    inst.dispose()


def send_request(inst: broker.Instance, body: bytes = b"<RequestMsg/>") -> None:
    with inst.database("InitiatorDB").transaction() as tx:
        handle = tx.begin_dialog(INITIATOR_SERVICE, TARGET_SERVICE, CONTRACT, encryption=False)
        tx.send(handle, REQUEST, body)


def test_instance_status_shows_each_member(tutorial: tuple[str, broker.Instance]) -> None:
    instance_url, inst = tutorial
    send_request(inst)
    status = instance_runner(instance_url)
    summary = as_json(status("status", "--json"))
    assert summary["instance"]["databases"] == 2 and summary["instance"]["transmission_queue"] == 1
    members = {m["name"]: m for m in summary["databases"]}
    assert list(members) == ["TargetDB", "InitiatorDB"]
    assert [q["queue"] for q in members["TargetDB"]["queues"]] == [TARGET_QUEUE]
    assert members["InitiatorDB"]["transmission_destinations"] == [
        {"to_service_name": TARGET_SERVICE, "to_broker_instance": None,
         "transmission_status": SERVICE_NOT_FOUND, "count": 1}]
    assert members["TargetDB"]["transmission_destinations"] == []
    assert members["InitiatorDB"]["database"]["service_broker_guid"] == str(
        inst.database("InitiatorDB").service_broker_guid)

    text = status("status").stdout
    assert text.startswith(f"Instance {shown(instance_url)} (schema ")
    assert "2 databases, 1 message awaiting delivery" in text.splitlines()[0]
    assert "# TargetDB: Queues" in text and "# InitiatorDB: Queues" in text
    assert (f"# InitiatorDB: Waiting, by destination and reason\n"
            "count\tto_service_name\tto_broker_instance\ttransmission_status\n"
            f"1\t{TARGET_SERVICE}\t\t{SERVICE_NOT_FOUND}\n") in text

    watched = status("status", "--watch", "--json", "--iterations", "2", "--interval", "0").stdout.splitlines()
    assert [json.loads(line)["instance"]["databases"] for line in watched] == [2, 2]


# -- broker --instance URL run: a real process, stopped with SIGTERM ---------------------------------


def test_instance_run_moves_messages_and_stops_on_sigterm(tutorial: tuple[str, broker.Instance]) -> None:
    instance_url, inst = tutorial
    target, initiator = inst.database("TargetDB"), inst.database("InitiatorDB")
    send_request(inst, b"<RequestMsg>1</RequestMsg>")
    env = {k: v for k, v in os.environ.items() if k not in ("BROKER_URL", "BROKER_DATABASE")}
    process = subprocess.Popen(
        [str(BROKER_SCRIPT), "--instance", instance_url, "run", "--log-level", "INFO"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )
    try:
        # delivered and acknowledged while the process runs
        wait_until(lambda: len(target.queue_rows(TARGET_QUEUE)) == 1
                   and not initiator.catalog("sys.transmission_queue"), timeout=60)
        [request] = target.queue_rows(TARGET_QUEUE)
        assert request.message_body == b"<RequestMsg>1</RequestMsg>"
        # the reply travels back the same way
        with target.transaction() as tx:
            [received] = tx.receive(TARGET_QUEUE)
            tx.send(received.conversation_handle, REPLY, b"<ReplyMsg/>")
            tx.end_conversation(received.conversation_handle)
        wait_until(lambda: len(initiator.queue_rows(INITIATOR_QUEUE)) == 2, timeout=60)
        assert process.poll() is None
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0, stderr
    assert "instance runtime started on 2 database(s)" in stderr
    assert "received SIGTERM, stopping" in stderr and "instance runtime stopped" in stderr
    assert "Traceback" not in stderr


# -- broker demo --between-databases ----------------------------------------------------------------


def test_demo_between_databases_in_an_empty_directory(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items()
           if k not in ("BROKER_URL", "BROKER_INSTANCE", "BROKER_DATABASE", "FORCE_COLOR", "TTY_COMPATIBLE")}

    def demo() -> str:
        process = subprocess.run([str(BROKER_SCRIPT), "demo", "--between-databases"], cwd=tmp_path, env=env,
                                 capture_output=True, text=True, timeout=120, check=False)
        assert process.returncode == 0, process.stderr
        assert process.stderr == ""
        return process.stdout

    first = demo()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(DEMO_FILES)
    assert first.startswith('Tutorial "Completing a Conversation Between Databases" in the instance '
                            "sqlite:///instance.db\n")
    for step in range(1, 9):
        assert f"\n{step}. " in first, step
    assert "SQLite files in the current folder." in first
    assert f'"{SERVICE_NOT_FOUND}"' in first  # the request waits until the runtime runs
    assert "TargetQueue2DB holds 1 message:\n     //BothDB/2DBSample/RequestMessage (sequence 0" in first
    assert "TargetDB's service_broker_guid: the first acknowledgement named it." in first
    assert "InitiatorQueue2DB holds 2 messages:" in first
    assert ("sys.conversation_endpoints: initiator DI (DISCONNECTED_INBOUND) in InitiatorDB, "
            "target CD (CLOSED) in TargetDB.") in first
    assert "initiator endpoint gone in InitiatorDB, target CD (CLOSED) in TargetDB." in first
    assert "Dropped the objects" not in first
    assert "  broker --instance sqlite:///instance.db status\n" in first

    second = demo()
    assert "Dropped the objects an earlier run of the demo had left." in second
    assert "8. In InitiatorDB: received the reply" in second

    # what the demo says to look at works, from the same folder
    looked = subprocess.run([str(BROKER_SCRIPT), "--instance", "sqlite:///instance.db", "--database", "TargetDB",
                             "show", "endpoints", "--json"], cwd=tmp_path, env=env, capture_output=True,
                            text=True, timeout=120, check=True)
    # the second run cleaned up the endpoint the first had left before dropping its service
    assert [e["state"] for e in json.loads(looked.stdout)] == ["CD"]


def test_demo_between_databases_options(tmp_path: Path) -> None:
    runner = CliRunner()
    folder = tmp_path / "tutorial"
    folder.mkdir()
    played = runner.invoke(cli, ["--db", f"sqlite:///{tmp_path / 'unused.db'}", "demo", "--between-databases",
                                 "--folder", str(folder)])
    assert played.exit_code == 0, played.stderr
    assert f"sqlite:///{folder / 'instance.db'}" in played.stdout
    assert {p.name for p in folder.iterdir()} == DEMO_FILES
    assert not (tmp_path / "unused.db").exists()

    # without --folder: next to the --db file
    nextdoor = tmp_path / "nextdoor"
    nextdoor.mkdir()
    runner.invoke(cli, ["--db", f"sqlite:///{nextdoor / 'app.db'}", "demo", "--between-databases"])
    assert {p.name for p in nextdoor.iterdir()} == DEMO_FILES

    alone = runner.invoke(cli, ["--db", f"sqlite:///{tmp_path / 'x.db'}", "demo", "--folder", str(folder)])
    assert alone.exit_code == 2 and "--folder goes with --between-databases" in alone.stderr
    missing = runner.invoke(cli, ["demo", "--between-databases", "--folder", str(tmp_path / "missing")])
    assert missing.exit_code == 2 and "--folder" in missing.stderr
    on_instance = runner.invoke(cli, ["--instance", f"sqlite:///{tmp_path / 'i.db'}", "demo",
                                      "--between-databases"], env={"BROKER_URL": None})
    assert on_instance.exit_code == 2 and "leave out --instance" in on_instance.stderr
