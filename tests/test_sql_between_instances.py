"""Microsoft's tutorial "Completing a Conversation Between Instances" (spec 12.3) as T-SQL
scripts (``sql_scripts/between_instances``), run through ``broker.sql`` on two instances,
each served by ``broker --instance URL run`` in a process of its own, over TCP on
loopback with mutual TLS, on SQLite and on PostgreSQL.

Each lesson runs on its side's instance, as in the tutorial, in one session per instance
(a query window each); the certificates go from one side to the other as files in a
temporary folder. What a reader of the tutorial replaces is replaced: the certificate
folder, the computers' names and the ports (free ones on 127.0.0.1). The test checks what
the tutorial says you will see, and what the security statements left in the catalogs.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import BACKENDS, PostgresDatabases
from instance_processes import InstanceProcesses
from sqlalchemy import text
from support import endpoint, wait_until
from two_instances import free_port

import broker
from broker.sql.outputs import Failed, ResultSet
from broker.sql.session import Session

SCRIPTS = Path(__file__).parent / "sql_scripts" / "between_instances"
CERTIFICATE_FOLDER = "C:\\storedcerts\\$ampleSSBCerts\\"
DEADLINE_S = 60.0  # two processes on a 2-core machine, each polling at 0.2 s
POLL_S = 0.05
REQUEST = "//BothDB/2InstSample/RequestMessage"
REPLY = "//BothDB/2InstSample/ReplyMessage"
REQUEST_BODY = "<RequestMsg>Message for Target service.</RequestMsg>"
REPLY_BODY = "<ReplyMsg>Message for Initiator service.</ReplyMsg>"
MEMBERS = ("InstTargetDB", "InstInitiatorDB")


@dataclass
class Side:
    """One instance of the tutorial: its catalog, its endpoint's port, its query window."""

    inst: broker.Instance
    port: int
    session: Session

    def db(self, name: str) -> broker.Broker:
        return self.inst.database(name)


@dataclass
class Tutorial:
    target: Side
    initiator: Side
    certificates: Path
    processes: InstanceProcesses

    def lesson(self, side: Side, script: str) -> list[ResultSet]:
        """Run one lesson's script on ``side``, as its reader would after replacing the
        folder, the computers and the ports; its result sets (no batch may fail)."""
        text_ = (SCRIPTS / script).read_text(encoding="utf-8")
        text_ = (text_.replace(CERTIFICATE_FOLDER, f"{self.certificates}{os.sep}")
                 .replace("MyTargetComputer:4022", f"127.0.0.1:{self.target.port}")
                 .replace("MyInitiatorComputer:4022", f"127.0.0.1:{self.initiator.port}")
                 .replace("LISTENER_PORT = 4022", f"LISTENER_PORT = {side.port}, LISTENER_IP = (127.0.0.1)"))
        outputs = side.session.run(text_)
        failures = [str(output.error) for output in outputs if isinstance(output, Failed)]
        assert not failures, failures
        return [output for output in outputs if isinstance(output, ResultSet)]


def _catalog_urls(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> list[str]:
    if backend == "sqlite":  # each catalog in a folder of its own: CREATE DATABASE puts members beside it
        folders = [tmp_path / "target", tmp_path / "initiator"]
        for folder in folders:
            folder.mkdir()
        return [f"sqlite:///{folder / 'instance.db'}" for folder in folders]
    databases: PostgresDatabases = request.getfixturevalue("postgres_databases")
    _drop_members(databases)  # a run that died may have left them
    return [databases.url_of(databases.create(empty=False)) for _ in range(2)]


def _drop_members(databases: PostgresDatabases) -> None:
    with databases.admin.connect() as conn:
        for name in MEMBERS:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@pytest.fixture(params=[backend for backend in ("sqlite", "postgresql") if backend in BACKENDS])
def tutorial(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Tutorial]:
    target_url, initiator_url = _catalog_urls(request.param, tmp_path, request)
    processes = InstanceProcesses(tmp_path)
    ports = [free_port()]
    while len(ports) < 2:
        port = free_port()
        if port not in ports:
            ports.append(port)
    sides = []
    for url, port in zip((target_url, initiator_url), ports, strict=True):
        inst = broker.instance(url)
        processes.own(inst)
        sides.append(Side(inst, port, Session(inst.msdb, instance=inst)))
    certificates = tmp_path / "storedcerts"
    certificates.mkdir()
    yield Tutorial(sides[0], sides[1], certificates, processes)
    for side in sides:
        side.session.close()
    statuses = processes.stop()
    if request.param == "postgresql":
        databases: PostgresDatabases = request.getfixturevalue("postgres_databases")
        _drop_members(databases)
        for url in (target_url, initiator_url):
            databases.drop(url.rsplit("/", 1)[-1])
    assert all(status == 0 for status in statuses.values()), statuses


def _single(result: ResultSet) -> object:
    assert len(result.rows) == 1 and len(result.columns) == 1
    return result.rows[0][0]


def _names(db: broker.Broker, view: str) -> set[str]:
    return {row["name"] for row in db.catalog(view)}


def test_completing_a_conversation_between_instances(tutorial: Tutorial) -> None:
    target, initiator = tutorial.target, tutorial.initiator
    tutorial.lesson(target, "1_target_database.sql")
    tutorial.lesson(initiator, "2_initiator_database.sql")
    tutorial.lesson(target, "3_target_conversation_objects.sql")

    # Transport security: each endpoint presents its own certificate of master and trusts
    # the other's, whose owner's login was granted CONNECT on it.
    target_endpoint, initiator_endpoint = target.inst.endpoint_config(), initiator.inst.endpoint_config()
    assert target_endpoint is not None and initiator_endpoint is not None
    assert (target_endpoint.principal, initiator_endpoint.principal) == (
        "Target instance endpoint", "Initiator instance endpoint")
    assert list(target_endpoint.trusted_principals().values()) == ["Initiator instance endpoint"]
    assert list(initiator_endpoint.trusted_principals().values()) == ["Target instance endpoint"]
    # Dialog security's objects: each database has its master key, both users and both
    # certificates, only its own with a private key.
    target_db, initiator_db = target.db("InstTargetDB"), initiator.db("InstInitiatorDB")
    for db, mine, theirs in ((target_db, "InstTargetCertificate", "InstInitiatorCertificate"),
                             (initiator_db, "InstInitiatorCertificate", "InstTargetCertificate")):
        assert [row["name"] for row in db.catalog("sys.symmetric_keys")] == ["##MS_DatabaseMasterKey##"]
        certificates = {row["name"]: row["pvt_key_encryption_type"] for row in db.catalog("sys.certificates")}
        assert certificates == {mine: "MK", theirs: "NA"}
        assert {"TargetUser", "InitiatorUser"} <= _names(db, "sys.database_principals")
    [send] = target_db.catalog("sys.database_permissions", permission_name="SEND")
    [initiator_user] = target_db.catalog("sys.database_principals", name="InitiatorUser")
    assert (send["class_desc"], send["grantee_principal_id"]) == ("SERVICE", initiator_user["principal_id"])
    [binding] = initiator_db.catalog("sys.remote_service_bindings")
    [target_user] = initiator_db.catalog("sys.database_principals", name="TargetUser")
    assert (binding["name"], binding["remote_service_name"], binding["remote_principal_id"]) == (
        "TargetBinding", "//TgtDB/2InstSample/TargetService", target_user["principal_id"])

    tutorial.processes.serve({"target": (target.inst, target.port), "initiator": (initiator.inst, initiator.port)})
    [sent] = tutorial.lesson(initiator, "4_begin_conversation.sql")
    assert _single(sent) == REQUEST_BODY
    [handle] = [row["conversation_handle"] for row in initiator_db.catalog("sys.conversation_endpoints")]
    wait_until(lambda: target_db.queue_rows("InstTargetQueue"), DEADLINE_S, POLL_S)
    [request] = target_db.queue_rows("InstTargetQueue")
    assert (request.message_type_name, request.message_body) == (REQUEST, REQUEST_BODY.encode())
    # The request leaves the initiator's transmission queue once the target acknowledges it.
    wait_until(lambda: not initiator_db.catalog("sys.transmission_queue"), DEADLINE_S, POLL_S)
    row = endpoint(initiator_db, handle)
    assert row is not None and row["far_broker_instance"] == str(target_db.service_broker_guid)

    received, replied = tutorial.lesson(target, "5_receive_request_send_reply.sql")
    assert (_single(received), _single(replied)) == (REQUEST_BODY, REPLY_BODY)
    wait_until(lambda: len(initiator_db.queue_rows("InstInitiatorQueue")) == 2, DEADLINE_S, POLL_S)
    assert [(message.message_type_name, message.message_body) for message in
            initiator_db.queue_rows("InstInitiatorQueue")] == [(REPLY, REPLY_BODY.encode()), (broker.END_DIALOG, None)]

    [ended] = tutorial.lesson(initiator, "6_receive_reply_end_conversation.sql")
    assert _single(ended) == REPLY_BODY
    wait_until(lambda: not initiator_db.catalog("sys.transmission_queue")
               and not target_db.catalog("sys.transmission_queue"), DEADLINE_S, POLL_S)
    wait_until(lambda: endpoint(initiator_db, handle) is None, DEADLINE_S, POLL_S)
    assert [row["state"] for row in target_db.catalog("sys.conversation_endpoints")] == ["CD"]
    # The messages went over the network, authenticated by the certificates of master
    # (the runtime writes what its connections did from time to time).
    wait_until(lambda: "Initiator instance endpoint" in {
        row["principal_name"] for row in target.inst.catalog("sys.dm_broker_connections")}, DEADLINE_S, POLL_S)

    tutorial.lesson(target, "7_target_cleanup.sql")
    tutorial.lesson(initiator, "8_initiator_cleanup.sql")
    for side, db in ((target, target_db), (initiator, initiator_db)):
        assert side.inst.endpoint_config() is None
        for catalog in (side.inst.msdb, db):
            assert catalog.catalog("sys.certificates") == catalog.catalog("sys.symmetric_keys") == []
            assert _names(catalog, "sys.database_principals") == {"public", "dbo", "guest", "INFORMATION_SCHEMA",
                                                                  "sys"}
        assert _names(side.inst.msdb, "sys.server_principals") == {"sa", "public"}
        assert not [name for name in _names(db, "sys.services") if name.startswith("//")]
        assert not [name for name in _names(db, "sys.service_message_types") if "2InstSample" in name]
        assert _names(db, "sys.routes") == _names(side.inst.msdb, "sys.routes") == {"AutoCreatedLocal"}
        assert db.catalog("sys.database_permissions") == []
