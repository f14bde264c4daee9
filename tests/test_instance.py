"""``broker.instance(url)``: the databases served together, on every layout of backends."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

import broker
from cli.main import cli


@pytest.fixture
def inst(instance_urls: tuple[str, str, str]) -> Iterator[broker.Instance]:
    instance = broker.instance(instance_urls[0])
    yield instance
    instance.dispose()


def test_databases_are_added_listed_and_removed(inst: broker.Instance, instance_urls: tuple[str, str, str]) -> None:
    _, first_url, second_url = instance_urls
    first = inst.add_database("First", first_url)
    second = inst.add_database("Second", second_url)
    assert list(inst.databases) == ["First", "Second"]
    assert inst.database("First") is first and inst.databases["Second"] is second
    rows = inst.catalog("sys.databases")
    assert [(r["name"], r["database_id"]) for r in rows] == [("First", 5), ("Second", 6)]
    assert [r["service_broker_guid"] for r in rows] == [first.service_broker_guid, second.service_broker_guid]
    assert all(r["is_broker_enabled"] == 1 for r in rows)
    inst.remove_database("First")
    assert list(inst.databases) == ["Second"]
    detached = broker.connect(first_url)
    assert detached.catalog("sys.routes")[0]["name"] == "AutoCreatedLocal"  # its data stays where it was
    detached.dispose()


def test_the_instance_catalog_is_no_member_of_itself(inst: broker.Instance,
                                                      instance_urls: tuple[str, str, str]) -> None:
    # Attached, the member shared the catalog's broker id and showed msdb's routes as its own.
    with pytest.raises(broker.BrokerError) as itself:
        inst.add_database("Self", instance_urls[0])
    assert itself.value.number == 1801
    assert list(inst.databases) == []


def test_a_name_is_unique_and_an_unknown_one_is_911(inst: broker.Instance, instance_urls: tuple[str, str, str]) -> None:
    inst.add_database("A", instance_urls[1])
    with pytest.raises(broker.BrokerError) as twice:
        inst.add_database("A", instance_urls[2])
    assert twice.value.number == 1801
    with pytest.raises(broker.BrokerError) as unknown:
        inst.database("Nope")
    assert unknown.value.number == 911
    with pytest.raises(broker.BrokerError) as gone:
        inst.remove_database("Nope")
    assert gone.value.number == 15151


def test_a_copy_of_a_member_is_attached_with_its_broker_disabled(
    inst: broker.Instance, instance_urls: tuple[str, str, str], caplog: pytest.LogCaptureFixture
) -> None:
    original = inst.add_database("Original", instance_urls[1])
    copy = broker.connect(instance_urls[2])
    with copy.transaction() as tx:  # the copy has the original's broker id, as a restored backup does
        tx.query("UPDATE sb_database SET service_broker_guid = :guid", guid=_stored(original))
    copy.dispose()
    attached = inst.add_database("Copy", instance_urls[2])
    assert attached.service_broker_guid == original.service_broker_guid
    enabled = {row["name"]: row["is_broker_enabled"] for row in inst.catalog("sys.databases")}
    assert enabled == {"Original": 1, "Copy": 0}
    assert "9773" in caplog.text
    for enable in (lambda: attached.set_broker_enabled(True), attached.error_broker_conversations):
        with pytest.raises(broker.BrokerError) as refused:
            enable()
        assert refused.value.number == 9772 and "'Original'" in refused.value.message
    assert {row["name"]: row["is_broker_enabled"] for row in inst.catalog("sys.databases")}["Copy"] == 0
    attached.new_broker()  # a broker id of its own: it is enabled, and no twin of anyone
    assert attached.service_broker_guid != original.service_broker_guid
    assert all(row["is_broker_enabled"] == 1 for row in inst.catalog("sys.databases"))
    original.set_broker_enabled(True)


def test_the_instance_remembers_its_databases(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # undone after the test
    inst = broker.instance("sqlite:///instance.db")
    inst.add_database("Relative", "sqlite:///relative.db")
    inst.dispose()
    monkeypatch.chdir(tmp_path.parent)  # opened again from elsewhere: the path was stored absolute
    again = broker.instance(f"sqlite:///{tmp_path / 'instance.db'}")
    try:
        assert list(again.databases) == ["Relative"]
        assert again.database("Relative").catalog("sys.routes")[0]["name"] == "AutoCreatedLocal"
    finally:
        again.dispose()


def test_a_member_whose_file_is_gone_is_945_and_the_others_are_served(tmp_path: Path,
                                                                        caplog: pytest.LogCaptureFixture) -> None:
    inst = broker.instance(f"sqlite:///{tmp_path / 'instance.db'}")
    inst.add_database("Gone", f"sqlite:///{tmp_path / 'gone.db'}")
    inst.add_database("Kept", f"sqlite:///{tmp_path / 'kept.db'}")
    inst.dispose()
    (tmp_path / "gone.db").unlink()
    again = broker.instance(f"sqlite:///{tmp_path / 'instance.db'}")
    try:
        with pytest.raises(broker.BrokerError) as raised:
            again.database("Gone")
        assert raised.value.number == 945 and "gone.db" in str(raised.value)
        assert list(again.databases) == ["Kept"]  # not made again empty, and not in the others' way
        assert [row["name"] for row in again.catalog("sys.databases")] == ["Kept"]
        assert [r.getMessage() for r in caplog.records].count(f"error 945: {raised.value.message}") == 1
        with again.runtime() as runtime:
            assert [r.db for r in runtime.runtimes] == [again.database("Kept")]
    finally:
        again.dispose()
    result = CliRunner().invoke(cli, ["--instance", f"sqlite:///{tmp_path / 'instance.db'}", "status"])
    assert result.exit_code == 0, result.output
    assert not (tmp_path / "gone.db").exists()


def _stored(db: broker.Broker) -> str:
    """The broker id as the database stores it (text on SQLite, uuid on PostgreSQL)."""
    [row] = db.catalog("sys.databases")
    guid = row["service_broker_guid"]
    return str(guid) if db.engine.dialect.name == "sqlite" else guid


def test_broker_instance_stays_the_function_once_its_module_is_imported() -> None:
    import broker.instances  # noqa: F401 - what any import of the module does to the package

    assert callable(broker.instance) and broker.instance is broker.instances.instance


def test_a_running_runtime_serves_databases_added_and_lets_go_of_those_removed(
        inst: broker.Instance, instance_urls: tuple[str, str, str]) -> None:
    from support import wait_until

    _, first_url, second_url = instance_urls
    first = inst.add_database("First", first_url)
    with inst.runtime() as runtime:
        assert [r.db for r in runtime.runtimes] == [first]
        second = inst.add_database("Second", second_url)
        wait_until(lambda: [r.db for r in runtime.runtimes] == [first, second], 10.0)
        second.create_queue("Q")
        second.create_service("S", "Q")
        with second.transaction() as tx:  # the new database's scheduler fires its timers
            handle = tx.begin_dialog("S", "S")
            tx.begin_conversation_timer(handle, 1)
        wait_until(lambda: second.queue_rows("Q"), 15.0)
        inst.remove_database("First")
        wait_until(lambda: [r.db for r in runtime.runtimes] == [second], 10.0)
