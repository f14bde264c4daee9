"""CREATE / ALTER / DROP ENDPOINT ... FOR SERVICE_BROKER on an instance (spec 1.9, 4.15):
the checks and their numbers, ``sys.service_broker_endpoints``, ``sys.tcp_endpoints``,
``sys.dm_broker_connections`` and ``inst.endpoint_config()``, on SQLite and PostgreSQL
(conftest's ``db_url`` holds the instance catalog)."""

from __future__ import annotations

import ssl
import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

import broker
from broker.ddl.certificates import create_certificate, thumbprint
from broker.storage.connection_states import ConnectionEncryption, ConnectionState, LoginState
from broker.storage.models import BrokerConnection

CERTIFICATE, KEY = create_certificate("InstTargetEndpoint")
PEER, PEER_KEY = create_certificate("InstInitiatorEndpoint")
OTHER_PEER, _ = create_certificate("Forwarder")
NEW_CERTIFICATE, NEW_KEY = create_certificate("InstTargetEndpoint2")

ENDPOINT_COLUMNS = ["name", "endpoint_id", "principal_id", "protocol", "protocol_desc", "type", "type_desc", "state",
                    "state_desc", "is_admin_endpoint"]


@pytest.fixture
def inst(db_url: str) -> Iterator[broker.Instance]:
    instance = broker.instance(db_url)
    yield instance
    instance.dispose()


def create(inst: broker.Instance, name: str = "InstTargetEndpoint", port: int = 4022, **options: Any) -> None:
    inst.create_endpoint(name, port, **{"certificate": CERTIFICATE, "private_key": KEY, **options})


def endpoint_rows(inst: broker.Instance) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    return inst.catalog("sys.service_broker_endpoints"), inst.catalog("sys.tcp_endpoints")


# -- CREATE and the views ---------------------------------------------------------------------


def test_an_endpoint_shows_with_sql_servers_columns(inst: broker.Instance) -> None:
    create(inst, trusted_peers=[PEER])
    [service_broker], [tcp] = endpoint_rows(inst)
    assert service_broker == {
        "name": "InstTargetEndpoint", "endpoint_id": 65536, "principal_id": 1, "protocol": 2, "protocol_desc": "TCP",
        "type": 3, "type_desc": "SERVICE_BROKER", "state": 0, "state_desc": "STARTED", "is_admin_endpoint": 0,
        "is_message_forwarding_enabled": 0, "message_forwarding_size": 10, "connection_auth": 4,
        "connection_auth_desc": "CERTIFICATE", "certificate_id": 65536, "encryption_algorithm": 2,
        "encryption_algorithm_desc": "AES",
    }
    assert list(service_broker)[:10] == ENDPOINT_COLUMNS
    assert tcp == {**{column: service_broker[column] for column in ENDPOINT_COLUMNS},
                   "port": 4022, "is_dynamic_port": 0, "ip_address": None}
    assert list(tcp) == [*ENDPOINT_COLUMNS, "port", "is_dynamic_port", "ip_address"]


@pytest.mark.parametrize(("options", "shown"), [
    ({"state": "stopped"}, {"state": 1, "state_desc": "STOPPED"}),
    ({"state": "DISABLED"}, {"state": 2, "state_desc": "DISABLED"}),
    ({"encryption": "supported"}, {"encryption_algorithm": 4, "encryption_algorithm_desc": "NONE, AES"}),
    ({"encryption": "DISABLED"}, {"encryption_algorithm": 0, "encryption_algorithm_desc": "NONE"}),
    ({"message_forwarding": True, "message_forward_size": 50},
     {"is_message_forwarding_enabled": 1, "message_forwarding_size": 50}),
])
def test_each_option_shows_in_sys_service_broker_endpoints(inst: broker.Instance, options: dict[str, Any],
                                                           shown: dict[str, Any]) -> None:
    create(inst, **options)
    [row], _ = endpoint_rows(inst)
    assert {column: row[column] for column in shown} == shown


@pytest.mark.parametrize(("given", "shown"), [
    ("ALL", None), ("all", None), ("127.0.0.1", "127.0.0.1"), ("::1", "::1"),
    ("2001:DB8:0:0:0:0:0:1", "2001:db8::1"),
])
def test_listener_ip_shows_in_sys_tcp_endpoints(inst: broker.Instance, given: str, shown: str | None) -> None:
    create(inst, listener_ip=given)
    assert inst.catalog("sys.tcp_endpoints")[0]["ip_address"] == shown
    config = inst.endpoint_config()
    assert config is not None and config.listener_ip == shown


def test_endpoint_config_gives_the_runtime_what_it_serves(inst: broker.Instance, tmp_path: Path) -> None:
    assert inst.endpoint_config() is None
    (tmp_path / "target.crt").write_bytes(CERTIFICATE)
    (tmp_path / "target.key").write_bytes(KEY)
    (tmp_path / "peers.pem").write_bytes(PEER + OTHER_PEER)  # one file, two certificates
    inst.create_endpoint("InstTargetEndpoint", 4022, listener_ip="127.0.0.1", state="STOPPED",
                         certificate=tmp_path / "target.crt", private_key=str(tmp_path / "target.key"),
                         trusted_peers=[str(tmp_path / "peers.pem"), PEER.decode()],  # PEER twice: kept once
                         encryption="SUPPORTED", message_forwarding=True, message_forward_size=3)
    config = inst.endpoint_config()
    assert config is not None
    assert (config.endpoint_id, config.name, config.port, config.listener_ip, config.state) == (
        65536, "InstTargetEndpoint", 4022, "127.0.0.1", "STOPPED")
    assert (config.encryption, config.algorithm, config.message_forwarding, config.message_forward_size) == (
        "SUPPORTED", "AES", True, 3)
    assert thumbprint(config.certificate) == thumbprint(CERTIFICATE)
    assert [thumbprint(peer) for peer in config.trusted_peers] == [thumbprint(PEER), thumbprint(OTHER_PEER)]
    assert config.principal == "InstTargetEndpoint"
    assert config.trusted_principals() == {thumbprint(PEER): "InstInitiatorEndpoint",
                                           thumbprint(OTHER_PEER): "Forwarder"}
    assert "PRIVATE KEY" not in repr(config) and b"PRIVATE KEY" in config.private_key
    server, client = config.tls_contexts()
    assert server.verify_mode == client.verify_mode == ssl.CERT_REQUIRED


def test_one_endpoint_per_instance(inst: broker.Instance) -> None:
    create(inst)
    with pytest.raises(broker.BrokerError) as same_name:
        create(inst, port=4023)
    assert same_name.value.number == 2714
    with pytest.raises(broker.BrokerError) as second:
        create(inst, "Another", port=4023)
    assert second.value.number == 7862 and "Only one endpoint of this type" in second.value.message
    assert [row["name"] for row in inst.catalog("sys.tcp_endpoints")] == ["InstTargetEndpoint"]


def test_two_creates_at_once_make_one_endpoint(db_url: str) -> None:
    instances = [broker.instance(db_url) for _ in range(2)]
    start = threading.Barrier(2)
    numbers: list[int | None] = []

    def race(instance: broker.Instance, name: str) -> None:
        start.wait()
        try:
            create(instance, name)
            numbers.append(None)
        except broker.BrokerError as error:
            numbers.append(error.number)

    threads = [threading.Thread(target=race, args=(instance, f"E{n}")) for n, instance in enumerate(instances)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert sorted(numbers, key=str) == [7862, None]
    assert len(instances[0].catalog("sys.service_broker_endpoints")) == 1
    for instance in instances:
        instance.dispose()


BAD_CREATES = [
    ({"port": 1023}, 7810), ({"port": 32768}, 7810), ({"port": -1}, 7810), ({"port": 2**40}, 8115),
    ({"port": "4022"}, 206), ({"port": True}, 206), ({"port": 4022.0}, 206),
    ({"listener_ip": "banana"}, 102), ({"listener_ip": "300.1.1.1"}, 102), ({"listener_ip": ""}, 102),
    ({"listener_ip": 127}, 206), ({"listener_ip": "1.2.3.4\x00"}, 102),
    ({"state": "RUNNING"}, 102), ({"state": 1}, 206), ({"encryption": "ON"}, 102), ({"encryption": True}, 206),
    ({"message_forwarding": "yes"}, 206), ({"message_forward_size": 0}, 7810), ({"message_forward_size": -5}, 7810),
    ({"message_forward_size": 1.5}, 206),
    ({"certificate": None}, 59050), ({"private_key": None}, 59050), ({"certificate": None, "private_key": None}, 59050),
    ({"private_key": PEER_KEY}, 15297), ({"certificate": PEER}, 15297),
    ({"certificate": b"not a certificate"}, 15208), ({"private_key": b"-----BEGIN PRIVATE KEY-----\n"}, 15208),
    ({"certificate": KEY}, 15208), ({"private_key": CERTIFICATE}, 15208), ({"certificate": CERTIFICATE + PEER}, 15208),
    ({"certificate": "no/such/file.crt"}, 15208), ({"certificate": 5}, 206),
    ({"trusted_peers": [b"garbage"]}, 15208), ({"trusted_peers": ["no/such/peer.crt"]}, 15208),
    ({"trusted_peers": [KEY]}, 15208), ({"trusted_peers": 5}, 206), ({"trusted_peers": [5]}, 206),
    ({"trusted_peers": {"a": 1}}, 206),
]


@pytest.mark.parametrize(("options", "number"), BAD_CREATES)
def test_create_endpoint_checks_every_option(inst: broker.Instance, options: dict[str, Any], number: int) -> None:
    with pytest.raises(broker.BrokerError) as error:
        create(inst, **{"port": 4022, **options})
    assert error.value.number == number, error.value
    assert endpoint_rows(inst) == ([], [])


def test_without_a_certificate_the_error_says_there_is_no_windows_authentication(inst: broker.Instance) -> None:
    with pytest.raises(broker.BrokerError) as error:
        inst.create_endpoint("E", 4022)
    assert error.value.number == 59050
    assert "WINDOWS" in error.value.message and "broker certificate create" in error.value.message


@pytest.mark.parametrize(("name", "number"), [("", 1038), ("x" * 129, 103), (5, 206)])
def test_an_endpoint_name_is_a_sysname(inst: broker.Instance, name: Any, number: int) -> None:
    with pytest.raises(broker.BrokerError) as error:
        create(inst, name)
    assert error.value.number == number


def test_an_unknown_option_is_59003(inst: broker.Instance) -> None:
    with pytest.raises(TypeError):
        inst.create_endpoint("E", 4022, authentication="WINDOWS")  # type: ignore[call-arg]
    create(inst)
    with pytest.raises(broker.BrokerError) as error:
        inst.alter_endpoint("InstTargetEndpoint", authentication="WINDOWS")
    assert error.value.number == 59003


# -- ALTER and DROP ------------------------------------------------------------------------------


def test_alter_changes_only_what_it_is_given(inst: broker.Instance) -> None:
    create(inst, trusted_peers=[PEER], message_forwarding=True)
    inst.alter_endpoint("InstTargetEndpoint", port=5022, state="STOPPED")
    [row], [tcp] = endpoint_rows(inst)
    assert (tcp["port"], row["state_desc"], row["is_message_forwarding_enabled"]) == (5022, "STOPPED", 1)
    config = inst.endpoint_config()
    assert config is not None and [thumbprint(p) for p in config.trusted_peers] == [thumbprint(PEER)]
    inst.alter_endpoint("InstTargetEndpoint", trusted_peers=[OTHER_PEER])  # replaces the trusted peers
    config = inst.endpoint_config()
    assert config is not None and [thumbprint(p) for p in config.trusted_peers] == [thumbprint(OTHER_PEER)]
    inst.alter_endpoint("InstTargetEndpoint", trusted_peers=())
    config = inst.endpoint_config()
    assert config is not None and config.trusted_peers == ()


def test_alter_checks_the_certificate_with_the_key_it_ends_up_with(inst: broker.Instance) -> None:
    create(inst)
    with pytest.raises(broker.BrokerError) as alone:
        inst.alter_endpoint("InstTargetEndpoint", certificate=NEW_CERTIFICATE)  # the old key is not its key
    assert alone.value.number == 15297
    config = inst.endpoint_config()
    assert config is not None and thumbprint(config.certificate) == thumbprint(CERTIFICATE)
    inst.alter_endpoint("InstTargetEndpoint", certificate=NEW_CERTIFICATE, private_key=NEW_KEY)
    config = inst.endpoint_config()
    assert config is not None and config.principal == "InstTargetEndpoint2"


@pytest.mark.parametrize(("options", "number"), [
    ({}, 7863), ({"port": 80}, 7810), ({"listener_ip": "nowhere"}, 102), ({"certificate": None}, 59050),
    ({"private_key": PEER_KEY}, 15297), ({"trusted_peers": [b"x"]}, 15208),
])
def test_a_refused_alter_changes_nothing(inst: broker.Instance, options: dict[str, Any], number: int) -> None:
    create(inst)
    before = endpoint_rows(inst), inst.endpoint_config()
    with pytest.raises(broker.BrokerError) as error:
        inst.alter_endpoint("InstTargetEndpoint", **options)
    assert error.value.number == number
    assert (endpoint_rows(inst), inst.endpoint_config()) == before


def test_alter_and_drop_of_a_missing_endpoint_are_15151(inst: broker.Instance) -> None:
    with pytest.raises(broker.BrokerError) as altered:
        inst.alter_endpoint("Nope", port=5022)
    assert altered.value.number == 15151 and "Cannot find the endpoint 'Nope'" in altered.value.message
    with pytest.raises(broker.BrokerError) as dropped:
        inst.drop_endpoint("Nope")
    assert dropped.value.number == 15151 and "Cannot drop the endpoint 'Nope'" in dropped.value.message


def test_drop_removes_the_endpoint_and_a_new_one_may_follow(inst: broker.Instance) -> None:
    create(inst)
    inst.drop_endpoint("InstTargetEndpoint")
    assert endpoint_rows(inst) == ([], []) and inst.endpoint_config() is None
    create(inst, "Again", port=4030)
    assert [row["name"] for row in inst.catalog("sys.tcp_endpoints")] == ["Again"]


# -- sys.dm_broker_connections ---------------------------------------------------------------------

CONNECTION_COLUMNS = [
    "connection_id", "transport_stream_id", "state", "state_desc", "connect_time", "login_time",
    "authentication_method", "principal_name", "remote_user_name", "last_activity_time", "is_accept", "login_state",
    "login_state_desc", "peer_certificate_id", "encryption_algorithm", "encryption_algorithm_desc", "receives_posted",
    "is_receive_flow_controlled", "sends_posted", "is_send_flow_controlled", "total_bytes_sent",
    "total_bytes_received", "total_fragments_sent", "total_fragments_received", "total_sends", "total_receives",
    "peer_arbitration_id", "address", "refusal", "runtime_session",
]


def record(inst: broker.Instance, **values: Any) -> uuid.UUID:
    """A row as the runtime writes one, in a transaction of the instance catalog."""
    connection_id = uuid.uuid4()
    row = {"connection_id": connection_id, "state": ConnectionState.NEW, "is_accept": False, **values}
    with inst.msdb.transaction() as tx:
        tx.run(lambda ctx: ctx.conn.execute(BrokerConnection.__table__.insert().values(**row)))  # type: ignore[attr-defined]
    return connection_id


def test_sys_dm_broker_connections_describes_what_the_runtime_writes(inst: broker.Instance) -> None:
    assert inst.catalog("sys.dm_broker_connections") == []
    now = datetime.now(UTC).replace(microsecond=0)
    online = record(inst, state=ConnectionState.LOGGED_IN, login_state=LoginState.ONLINE, is_accept=True,
                    connect_time=now, login_time=now, last_activity_time=now, principal_name="InstInitiatorEndpoint",
                    authentication_method="CERTIFICATE", encryption_algorithm=ConnectionEncryption.AES,
                    total_bytes_sent=10, total_fragments_received=2, address="127.0.0.1:50123",
                    runtime_session="host:1:abc")
    refused = record(inst, state=ConnectionState.CLOSED, login_state=LoginState.ERROR,
                     refusal="certificate verify failed: self-signed certificate", address="127.0.0.1:50124")
    rows = {row["connection_id"]: row for row in inst.catalog("sys.dm_broker_connections")}
    assert list(rows[online]) == CONNECTION_COLUMNS
    assert {key: rows[online][key] for key in (
        "state", "state_desc", "login_state", "login_state_desc", "is_accept", "encryption_algorithm",
        "encryption_algorithm_desc", "connect_time", "principal_name", "total_bytes_sent",
        "total_fragments_received", "total_sends", "is_send_flow_controlled", "address", "refusal",
        "runtime_session")} == {
        "state": 4, "state_desc": "LOGGED_IN", "login_state": 12, "login_state_desc": "ONLINE", "is_accept": 1,
        "encryption_algorithm": 3, "encryption_algorithm_desc": "AES", "connect_time": now,
        "principal_name": "InstInitiatorEndpoint", "total_bytes_sent": 10, "total_fragments_received": 2,
        "total_sends": 0, "is_send_flow_controlled": 0, "address": "127.0.0.1:50123", "refusal": None,
        "runtime_session": "host:1:abc"}
    assert (rows[refused]["state_desc"], rows[refused]["login_state_desc"], rows[refused]["is_accept"]) == (
        "CLOSED", "ERROR", 0)
    assert rows[refused]["encryption_algorithm_desc"] == "NONE" and "self-signed" in rows[refused]["refusal"]


@pytest.mark.parametrize("state", list(LoginState))
def test_every_login_state_has_sql_servers_description(inst: broker.Instance, state: LoginState) -> None:
    record(inst, login_state=state)
    [row] = inst.catalog("sys.dm_broker_connections")
    expected = {"WAIT_ISC_CONFIRM": "WAIT ISC Confirm", "WAIT_ASC_CONFIRM": "WAIT ASC Confirm",
                "WAIT_PRE_MASTER_SECRET": "WAIT PRE-MASTER SECRET"}.get(state.name, state.name.replace("_", " "))
    assert row["login_state_desc"] == expected


def test_the_endpoint_views_filter_like_any_catalog_view(inst: broker.Instance) -> None:
    first, second = record(inst), record(inst, state=ConnectionState.CLOSED)
    assert [r["connection_id"] for r in inst.catalog("sys.dm_broker_connections", connection_id=str(first))] == [first]
    assert [r["connection_id"] for r in inst.catalog("dm_broker_connections", state_desc="CLOSED")] == [second]
    create(inst)
    assert inst.catalog("SYS.TCP_ENDPOINTS", port=4022)[0]["name"] == "InstTargetEndpoint"
    assert inst.catalog("sys.tcp_endpoints", port=4023) == []
    for where, number in (({"no_such_column": 1}, 207), ({"connection_id": "not a guid"}, 8169),
                          ({"connect_time": "yesterday"}, 206)):
        with pytest.raises(broker.BrokerError) as error:
            inst.catalog("sys.dm_broker_connections", **where)
        assert error.value.number == number
