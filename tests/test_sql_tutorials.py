"""Microsoft's Service Broker tutorials as T-SQL scripts, run unchanged through ``broker.sql``
on every backend, checking what the tutorials say you will see (spec 12.1)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import text

import broker
from broker.sql.outputs import Failed, ResultSet
from broker.sql.session import Session

SCRIPTS = Path(__file__).parent / "sql_scripts"
REQUEST = "//AWDB/1DBSample/RequestMessage"
REPLY = "//AWDB/1DBSample/ReplyMessage"


def _run(session: Session, path: Path) -> list[ResultSet]:
    outputs = session.run(path.read_text(encoding="utf-8"))
    failures = [output.error for output in outputs if isinstance(output, Failed)]
    assert not failures, [str(error) for error in failures]
    return [output for output in outputs if isinstance(output, ResultSet)]


def _single(result: ResultSet) -> object:
    assert len(result.rows) == 1 and len(result.columns) == 1
    return result.rows[0][0]


def test_completing_a_conversation_in_a_single_database(db: broker.Broker) -> None:
    steps = sorted((SCRIPTS / "single_database").glob("*.sql"))
    with Session(db, database_name="tutorial") as session:
        _run(session, steps[0])  # lesson 1: message types, contract, queues, services
        assert db.catalog("sys.databases")[0]["is_broker_enabled"]
        types = {row["name"]: row["validation"] for row in db.catalog("sys.service_message_types")}
        assert types[REQUEST] == types[REPLY] == "X"
        assert {row["name"] for row in db.catalog("sys.service_queues")} >= {"TargetQueue1DB", "InitiatorQueue1DB"}

        sent = _run(session, steps[1])  # lesson 2: BEGIN DIALOG + SEND, committed
        assert _single(sent[0]) == "<RequestMsg>Message for Target service.</RequestMsg>"
        [request] = db.queue_rows("TargetQueue1DB")
        assert (request.status, request.message_type_name, request.validation) == (1, REQUEST, "X")
        assert db.catalog("sys.transmission_queue") == []
        endpoints = db.catalog("sys.conversation_endpoints")
        assert len({row["conversation_id"] for row in endpoints}) == 1
        assert sorted(row["state"] for row in endpoints) == ["CO", "CO"]
        assert len({row["conversation_group_id"] for row in endpoints}) == 2

        replied = _run(session, steps[2])  # RECEIVE the request, SEND the reply, END
        assert _single(replied[0]) == "<RequestMsg>Message for Target service.</RequestMsg>"
        assert _single(replied[1]) == "<ReplyMsg>Message for Initiator service.</ReplyMsg>"
        assert db.queue_rows("TargetQueue1DB") == []
        assert [m.message_type_name for m in db.queue_rows("InitiatorQueue1DB")] == [REPLY, broker.END_DIALOG]
        states = {row["is_initiator"]: row["state"] for row in db.catalog("sys.conversation_endpoints")}
        assert states[True] == "DI" and states[False] in ("CD", "DO")

        ended = _run(session, steps[3])  # RECEIVE the reply, END
        assert _single(ended[0]) == "<ReplyMsg>Message for Initiator service.</ReplyMsg>"
        assert db.queue_rows("InitiatorQueue1DB") == []
        assert [row["is_initiator"] for row in db.catalog("sys.conversation_endpoints")] == [False]

        _run(session, steps[4])  # lesson 3: every object dropped, in dependency order
        assert not [row for row in db.catalog("sys.services") if row["name"].startswith("//AWDB")]
        assert not [row for row in db.catalog("sys.service_queues") if row["name"].endswith("1DB")]
        assert not [row for row in db.catalog("sys.service_message_types") if row["name"].startswith("//AWDB")]


def test_dropping_a_message_type_a_contract_still_uses_fails(db: broker.Broker) -> None:
    with Session(db, database_name="tutorial") as session:
        _run(session, sorted((SCRIPTS / "single_database").glob("*.sql"))[0])
        [failed] = session.run(f"DROP MESSAGE TYPE [{REQUEST}]")
        assert isinstance(failed, Failed) and failed.error.number != 0
        assert REQUEST in {row["name"] for row in db.catalog("sys.service_message_types")}


@pytest.mark.parametrize("name", ["tutorial", "TUTORIAL", "CURRENT"])
def test_alter_database_takes_this_databases_name_or_current(db: broker.Broker, name: str) -> None:
    with Session(db, database_name="tutorial") as session:
        assert session.run(f"ALTER DATABASE {name} SET DISABLE_BROKER") == []
        assert not db.catalog("sys.databases")[0]["is_broker_enabled"]


def test_alter_database_of_another_database_is_911(db: broker.Broker) -> None:
    with Session(db, database_name="tutorial") as session:
        [failed] = session.run("ALTER DATABASE AdventureWorks2008R2 SET ENABLE_BROKER")
        assert isinstance(failed, Failed) and failed.error.number == 911


def test_using_internal_activation_with_a_procedure_written_in_tsql(db: broker.Broker) -> None:
    """Spec 12.4: the activated TargetActivProc, stored by CREATE PROCEDURE, answers the
    request, ends the target side when the EndDialog arrives, and exits when idle."""
    from support import wait_until

    from broker import events

    steps = sorted((SCRIPTS / "internal_activation").glob("*.sql"))
    started: list[dict[str, object]] = []
    db.events.subscribe(events.READER_STARTED, lambda **payload: started.append(payload))
    with Session(db, database_name="tutorial") as session:
        _run(session, steps[0])
        assert [row["name"] for row in db.catalog("sys.procedures")] == ["TargetActivProc"]
        [queue] = [row for row in db.catalog("sys.service_queues") if row["name"] == "TargetQueueIntAct"]
        assert queue["activation_procedure"] == "TargetActivProc" and queue["max_readers"] == 10
        with db.runtime(poll_interval=0.2):
            _run(session, steps[1])
            wait_until(lambda: db.queue_rows("InitiatorQueueIntAct"), 30.0)
            assert started and started[0]["procedure"] == "TargetActivProc"
            assert db.queue_rows("TargetQueueIntAct") == []
            [reply] = _run(session, steps[2])
            assert _single(reply) == "<ReplyMsg>Message for Initiator service.</ReplyMsg>"
            # The EndDialog activates the procedure again, which ends the target side.
            wait_until(lambda: {row["state"] for row in db.catalog("sys.conversation_endpoints")} <= {"CD"}, 30.0)
            wait_until(lambda: not db.catalog("sys.dm_broker_activated_tasks"), 30.0)
        _run(session, steps[3])
        assert db.catalog("sys.procedures") == []
        assert not [row for row in db.catalog("sys.service_queues") if row["name"].endswith("IntAct")]


def test_a_procedure_survives_its_script_and_runs_by_exec_in_another_session(db: broker.Broker) -> None:
    with Session(db) as first:
        assert first.run("CREATE PROCEDURE dbo.Twice @n INT, @out INT OUTPUT AS SET @out = @n * 2; RETURN 7") == []
    with Session(db) as second:
        [result, _count] = second.run("DECLARE @r INT, @o INT; EXEC @r = Twice 21, @o OUTPUT; SELECT @r, @o")
        assert isinstance(result, ResultSet) and result.rows == ((7, 42),)
        [failed] = second.run("CREATE PROCEDURE Twice AS RETURN 1")
        assert isinstance(failed, Failed) and failed.error.number == 2714
        assert second.run("CREATE OR ALTER PROCEDURE Twice AS PRINT 'again'\nGO\nEXEC Twice")[0].text == "again"
        assert second.run("DROP PROCEDURE Twice") == []
        [missing] = second.run("EXEC Twice")
        assert isinstance(missing, Failed) and missing.error.number == 2812


@pytest.fixture
def instance(db_url: str) -> Iterator[broker.Instance]:
    """An instance whose catalog is a fresh database; the databases its scripts create are
    dropped again (on PostgreSQL they live on the catalog's server)."""
    inst = broker.instance(db_url)
    yield inst
    created = list(inst.databases)
    inst.dispose()
    if inst.msdb.engine.url.get_backend_name() == "postgresql":
        with inst.msdb.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            for name in created:
                conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        inst.msdb.engine.dispose()


def test_completing_a_conversation_between_databases(instance: broker.Instance) -> None:
    """Spec 12.2: CREATE DATABASE makes two databases of the instance, USE moves between
    them, and the instance's runtime carries the request and the reply."""
    from support import wait_until

    steps = sorted((SCRIPTS / "between_databases").glob("*.sql"))
    with Session(instance.msdb, instance=instance) as session:
        for step in steps[:3]:
            _run(session, step)
        assert set(instance.databases) == {"TargetDB", "InitiatorDB"}
        target, initiator = instance.database("TargetDB"), instance.database("InitiatorDB")
        assert target.service_broker_guid != initiator.service_broker_guid
        with instance.runtime():
            sent = _run(session, steps[3])
            assert _single(sent[0]) == "<RequestMsg>Message for Target service.</RequestMsg>"
            wait_until(lambda: target.queue_rows("TargetQueue2DB"), 30.0)
            guid = str(target.service_broker_guid).casefold()
            wait_until(lambda: [str(row["far_broker_instance"]).casefold()
                                for row in initiator.catalog("sys.conversation_endpoints")] == [guid], 30.0)
            replied = _run(session, steps[4])
            assert _single(replied[1]) == "<ReplyMsg>Message for Initiator service.</ReplyMsg>"
            wait_until(lambda: len(initiator.queue_rows("InitiatorQueue2DB")) == 2, 30.0)
            ended = _run(session, steps[5])
            assert _single(ended[0]) == "<ReplyMsg>Message for Initiator service.</ReplyMsg>"
        assert initiator.queue_rows("InitiatorQueue2DB") == []
        [failed] = session.run("CREATE DATABASE TargetDB")
        assert isinstance(failed, Failed) and failed.error.number == 1801
