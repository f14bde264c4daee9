"""The schema Alembic builds is exactly the models' schema, and migrations round-trip."""

from __future__ import annotations

import subprocess
import sys
import uuid
import zipfile
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect, select, text
from support import postgres_only

import broker
from broker.storage import schema
from broker.storage.engine import create_broker_engine
from broker.storage.models import Base, TransmissionQueueEntry
from broker.storage.queue_tables import is_internal_queue_object

REPO = Path(__file__).resolve().parent.parent


def _drift(engine) -> list:  # type: ignore[no-untyped-def,type-arg]
    with engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={
            "compare_type": True,
            "include_object": lambda obj, name, type_, reflected, other: not is_internal_queue_object(name, type_),
        })
        return compare_metadata(context, Base.metadata)


@pytest.mark.empty_database
def test_upgrade_head_matches_the_models(db_url: str) -> None:
    engine = create_broker_engine(db_url)
    try:
        schema.upgrade(engine)
        assert _drift(engine) == []
        assert schema.current_revision(engine) == schema.head_revision()
    finally:
        engine.dispose()


def test_upgrade_downgrade_upgrade_round_trips(db_url: str) -> None:
    db = broker.connect(db_url)
    db.create_queue("Q")  # a queue's own storage must go with the catalog on downgrade
    schema.downgrade(db.engine, "base")
    leftovers = set(inspect(db.engine).get_table_names()) | set(inspect(db.engine).get_view_names())
    assert leftovers == {"alembic_version"}
    schema.upgrade(db.engine)
    assert _drift(db.engine) == []
    assert db.catalog("sys.service_queues") == []
    assert {r["name"] for r in db.catalog("sys.service_message_types")} >= {broker.ERROR, broker.END_DIALOG}
    db.dispose()


@pytest.mark.empty_database
def test_connect_upgrades_an_empty_file_and_is_idempotent(db_url: str) -> None:
    first = broker.connect(db_url)
    first.create_queue("Q")
    first.dispose()
    second = broker.connect(db_url)  # already at head: nothing to do, nothing lost
    assert [q["name"] for q in second.catalog("sys.service_queues")] == ["Q"]
    second.dispose()


def test_wheel_ships_the_migrations_and_creates_a_database(tmp_path: Path) -> None:
    """A non-editable install (the wheel) can create and upgrade a database on its own."""
    wheel_dir = tmp_path / "wheel"
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-v",
         "-w", str(wheel_dir), str(REPO)],
        check=True, capture_output=True, text=True,
    )
    # The build is clean: no deprecated metadata, no importable folder left out of the packages.
    assert "Deprecat" not in build.stdout + build.stderr
    assert "absent from the `packages`" not in build.stdout + build.stderr
    [wheel] = wheel_dir.glob("servicebroker-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "broker/_alembic/env.py" in names
    assert "broker/_migrations/0001_catalog.py" in names
    assert "broker/spark/conf/log4j2.properties" in names
    packages = {str(p.parent.relative_to(REPO)) for p in (REPO / "broker").rglob("__init__.py")}
    assert packages <= {name.rsplit("/", 1)[0] for name in names}  # every package is in the wheel
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    script = (
        "import broker, sys\n"
        "assert broker.__file__.startswith(sys.argv[1]), broker.__file__\n"
        "db = broker.connect('sqlite:///' + sys.argv[2])\n"
        "db.create_queue('Q')\n"
        "print(sorted(r['name'] for r in db.catalog('sys.service_queues')))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script, str(site), str(tmp_path / "fresh.db")],
        cwd=tmp_path, env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"},
        capture_output=True, text=True,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "['Q']"


def test_a_queue_cannot_take_the_name_of_a_catalog_table(db: broker.Broker) -> None:
    with pytest.raises(broker.BrokerError) as failure:
        db.create_queue("SB_QUEUES")  # names compare case-insensitively, as in SQL Server
    assert failure.value.number == 2714
    assert db.catalog("sys.service_queues") == []


_CONNECT = """
import sys
import broker
try:
    broker.connect(sys.argv[1])
except broker.BrokerError as error:
    print(error.number, error)
    sys.exit(3)
"""


@pytest.mark.empty_database
def test_processes_opening_a_new_database_at_once_all_succeed(db_url: str) -> None:
    # Each revision committed on its own (SQLite): a second process read the halfway
    # revision and applied the rest again over the first ("table already exists", 59020).
    processes = [subprocess.Popen([sys.executable, "-c", _CONNECT, db_url], stdout=subprocess.PIPE, text=True)
                 for _ in range(4)]
    outcomes = [process.communicate(timeout=120)[0] for process in processes]
    assert [(process.returncode, out) for process, out in zip(processes, outcomes, strict=True)] == [(0, "")] * 4
    engine = create_broker_engine(db_url)
    try:
        assert schema.current_revision(engine) == schema.head_revision()
    finally:
        engine.dispose()


def _outbound_ids(db: broker.Broker) -> list[int]:
    with db.engine.connect() as conn:
        return sorted(conn.execute(select(TransmissionQueueEntry.message_id)).scalars())


def _send_nowhere(db: broker.Broker, count: int) -> uuid.UUID:
    """``count`` messages to a service no route reaches: they stay in the transmission queue."""
    with db.transaction() as tx:
        handle = tx.begin_dialog("//here", "//nowhere", encryption=False)
        for number in range(count):
            tx.send(handle, body=f"m{number}".encode())
    return handle


def test_a_transmission_queue_id_is_never_used_twice(db: broker.Broker) -> None:
    """A transmitter settles by id in a later transaction than the one that read the
    message. SQLite gave a drained queue's ids again (largest plus one), and two runtimes
    then settled a new message in place of one the other had sent: messages were lost."""
    db.create_queue("HereQueue")
    db.create_service("//here", "HereQueue")
    first = _send_nowhere(db, 3)
    before = _outbound_ids(db)
    assert len(before) == 3
    with db.transaction() as tx:
        tx.end_conversation(first, cleanup=True)  # the queue drains
    assert _outbound_ids(db) == []
    _send_nowhere(db, 1)
    [after] = _outbound_ids(db)
    assert after > max(before)


def test_0014_keeps_the_waiting_messages_and_their_ids(db: broker.Broker) -> None:
    db.create_queue("HereQueue")
    db.create_service("//here", "HereQueue")
    _send_nowhere(db, 3)
    waiting = _outbound_ids(db)
    schema.downgrade(db.engine, "0013")
    with db.engine.connect() as conn:
        assert sorted(conn.execute(text("SELECT message_id FROM sb_transmission_queue")).scalars()) == waiting
    schema.upgrade(db.engine)
    assert _drift(db.engine) == []
    assert _outbound_ids(db) == waiting
    assert [row["message_body"] for row in db.catalog("sys.transmission_queue")] == [b"m0", b"m1", b"m2"]
    _send_nowhere(db, 1)
    assert max(_outbound_ids(db)) > max(waiting)


@postgres_only
def test_0014_keeps_the_grants_on_the_views_it_makes_again(db: broker.Broker) -> None:
    """PostgreSQL retypes no column a view reads: 0014 drops the views on the id columns
    and makes them again, with what was granted on them."""
    schema.downgrade(db.engine, "0013")
    with db.engine.begin() as conn:
        conn.exec_driver_sql("GRANT SELECT ON sys.transmission_queue TO PUBLIC")
    schema.upgrade(db.engine)
    with db.engine.connect() as conn:
        granted = conn.exec_driver_sql(
            "SELECT privilege_type FROM aclexplode((SELECT relacl FROM pg_class WHERE oid = "
            "'sys.transmission_queue'::regclass)) WHERE grantee = 0").scalars().all()
    assert granted == ["SELECT"]
