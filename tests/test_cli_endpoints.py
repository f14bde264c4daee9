"""The endpoint through the ``broker`` command: ``certificate create``, ``--instance URL
create|alter|drop endpoint`` and ``show broker-endpoints|broker-connections``.

Endpoint commands run on an instance catalog of each backend (conftest's ``db_url``);
one test runs the commands as real processes.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from cryptography import x509
from test_cli_hostile import well_behaved

import broker
from broker.ddl import certificates
from broker.storage.connection_states import ConnectionState, LoginState
from broker.storage.models import BrokerConnection
from cli.main import cli

BROKER_SCRIPT = Path(sys.executable).with_name("broker")


def invoke(*args: str, expect: int = 0) -> Result:
    result = CliRunner().invoke(cli, list(args))
    assert result.exit_code == expect, (result.stdout, result.stderr, result.exception)
    well_behaved(result)
    return result


def error_line(result: Result) -> str:
    [line] = result.stderr.splitlines()
    return line


@pytest.fixture
def certs(tmp_path: Path) -> Path:
    """Certificates and keys of two endpoints, made by the command."""
    folder = tmp_path / "certs"
    folder.mkdir()
    for name in ("InstTargetEndpoint", "InstInitiatorEndpoint"):
        invoke("certificate", "create", name, "--directory", str(folder))
    return folder


@pytest.fixture
def on_instance(db_url: str) -> Any:
    """``on_instance(*args, expect=0)``: ``broker --instance URL *args``."""
    def run(*args: str, expect: int = 0) -> Result:
        return invoke("--instance", db_url, *args, expect=expect)
    return run


def endpoint_args(certs: Path, name: str = "InstTargetEndpoint", *more: str) -> list[str]:
    return ["create", "endpoint", name, "--port", "4022", "--certificate", str(certs / f"{name}.crt"),
            "--key", str(certs / f"{name}.key"), *more]


def shown(on_instance: Any) -> list[dict[str, Any]]:
    return json.loads(on_instance("show", "broker-endpoints", "--json").stdout)  # type: ignore[no-any-return]


# -- broker certificate create ------------------------------------------------------------------


def test_certificate_create_writes_the_pair_and_prints_the_thumbprint(tmp_path: Path) -> None:
    result = invoke("certificate", "create", "InstTargetEndpoint", "--days", "30", "--directory", str(tmp_path))
    certificate_file, key_file = tmp_path / "InstTargetEndpoint.crt", tmp_path / "InstTargetEndpoint.key"
    pem = certificate_file.read_bytes()
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    certificates.check_key_pair(pem, key_file.read_bytes())
    assert certificates.principal_of(pem) == "InstTargetEndpoint"
    lifetime = x509.load_pem_x509_certificate(pem).not_valid_after_utc - x509.load_pem_x509_certificate(
        pem).not_valid_before_utc
    assert 30 * 86400 <= lifetime.total_seconds() <= 30 * 86400 + 600
    assert str(certificate_file) in result.stdout and str(key_file) in result.stdout
    assert certificates.thumbprint(pem) in result.stdout


def test_certificate_create_never_overwrites(tmp_path: Path) -> None:
    invoke("certificate", "create", "E", "--directory", str(tmp_path))
    before = {path.name: path.read_bytes() for path in tmp_path.iterdir()}
    refused = invoke("certificate", "create", "E", "--directory", str(tmp_path), expect=1)
    assert "E.crt already exists" in error_line(refused)
    (tmp_path / "E.crt").unlink()  # the key alone is still there: still refused, nothing written
    refused = invoke("certificate", "create", "E", "--directory", str(tmp_path), expect=1)
    assert "E.key already exists" in error_line(refused)
    assert {path.name: path.read_bytes() for path in tmp_path.iterdir()} == {"E.key": before["E.key"]}


@pytest.mark.parametrize("args", [
    ["a/b"], [".."], ["E", "--days", "0"], ["E", "--days", "x"], ["E", "--directory", "no-such-folder"], [""],
    ["x" * 129],
])
def test_certificate_create_usage_errors(tmp_path: Path, args: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    invoke("certificate", "create", *args, expect=2)
    assert list(tmp_path.iterdir()) == []


# -- create / alter / drop endpoint ---------------------------------------------------------------


def test_create_endpoint_from_files_and_show_it(on_instance: Any, certs: Path, db_url: str) -> None:
    peer = str(certs / "InstInitiatorEndpoint.crt")
    result = on_instance(*endpoint_args(certs, "InstTargetEndpoint", "--trust", peer, "--listener-ip", "127.0.0.1",
                                        "--encryption", "supported", "--message-forwarding",
                                        "--message-forward-size", "20"))
    assert result.stdout == "created endpoint InstTargetEndpoint on port 4022\n"
    [row] = shown(on_instance)
    assert {k: row[k] for k in ("name", "state_desc", "port", "ip_address", "connection_auth_desc",
                                "encryption_algorithm_desc", "is_message_forwarding_enabled",
                                "message_forwarding_size")} == {
        "name": "InstTargetEndpoint", "state_desc": "STARTED", "port": 4022, "ip_address": "127.0.0.1",
        "connection_auth_desc": "CERTIFICATE", "encryption_algorithm_desc": "NONE, AES",
        "is_message_forwarding_enabled": 1, "message_forwarding_size": 20}
    table = on_instance("show", "broker-endpoints").stdout
    assert "InstTargetEndpoint" in table and "4022" in table
    inst = broker.instance(db_url)
    config = inst.endpoint_config()
    inst.dispose()
    assert config is not None and [certificates.principal_of(p) for p in config.trusted_peers] == [
        "InstInitiatorEndpoint"]


def test_alter_and_drop_endpoint(on_instance: Any, certs: Path) -> None:
    on_instance(*endpoint_args(certs))
    assert on_instance("alter", "endpoint", "InstTargetEndpoint", "--state", "stopped", "--port", "5022",
                       "--no-message-forwarding").stdout == "altered endpoint InstTargetEndpoint\n"
    [row] = shown(on_instance)
    assert (row["state_desc"], row["port"], row["ip_address"]) == ("STOPPED", 5022, None)
    on_instance("alter", "endpoint", "InstTargetEndpoint", "--certificate", str(certs / "InstInitiatorEndpoint.crt"),
                "--key", str(certs / "InstInitiatorEndpoint.key"))
    refused = on_instance("alter", "endpoint", "InstTargetEndpoint", "--key", str(certs / "InstTargetEndpoint.key"),
                          expect=1)
    assert error_line(refused).startswith("error 15297: ")
    assert on_instance("drop", "endpoint", "InstTargetEndpoint").stdout == "dropped endpoint InstTargetEndpoint\n"
    assert shown(on_instance) == []
    assert error_line(on_instance("drop", "endpoint", "InstTargetEndpoint", expect=1)).startswith("error 15151: ")


def test_trust_is_replaced_or_cleared(on_instance: Any, certs: Path, db_url: str) -> None:
    peer = str(certs / "InstInitiatorEndpoint.crt")
    on_instance(*endpoint_args(certs))

    def trusted() -> list[str]:
        inst = broker.instance(db_url)
        config = inst.endpoint_config()
        inst.dispose()
        assert config is not None
        return [certificates.principal_of(p) for p in config.trusted_peers]

    assert trusted() == []
    on_instance("alter", "endpoint", "InstTargetEndpoint", "--trust", peer)
    assert trusted() == ["InstInitiatorEndpoint"]
    on_instance("alter", "endpoint", "InstTargetEndpoint", "--no-trust")
    assert trusted() == []
    on_instance("alter", "endpoint", "InstTargetEndpoint", "--no-trust", "--trust", peer, expect=2)


@pytest.mark.parametrize(("change", "expect", "start"), [
    (["--port", "80"], 2, "error: Invalid value for '--port': The value '80' is not within range"),
    (["--port", "x"], 2, "error: Invalid value for '--port'"),
    (["--listener-ip", "nowhere"], 2, "error: Invalid value for '--listener-ip': LISTENER_IP must be ALL"),
    (["--message-forward-size", "0"], 2, "error: Invalid value for '--message-forward-size'"),
    (["--state", "running"], 2, "error: Invalid value for '--state'"),
    (["--encryption", "on"], 2, "error: Invalid value for '--encryption'"),
    (["--trust", "no-such.crt"], 1, "error 15208: "),
    (["--trust", "a\x00b"], 2, "error: Invalid value for '--trust'"),
])
def test_create_endpoint_refuses_bad_values_in_one_line(on_instance: Any, certs: Path, change: list[str],
                                                        expect: int, start: str) -> None:
    result = on_instance(*endpoint_args(certs), *change, expect=expect)
    assert error_line(result).startswith(start), error_line(result)
    assert shown(on_instance) == []


def test_create_endpoint_without_a_certificate_says_why(on_instance: Any, certs: Path) -> None:
    line = error_line(on_instance("create", "endpoint", "E", "--port", "4022", expect=1))
    assert line.startswith("error 59050: ") and "WINDOWS" in line and "broker certificate create" in line
    line = error_line(on_instance("create", "endpoint", "E", "--port", "4022", "--certificate",
                                  str(certs / "InstTargetEndpoint.crt"), "--key", str(certs / "nope.key"), expect=1))
    assert line.startswith("error 15208: ") and "nope.key" in line
    line = error_line(on_instance("create", "endpoint", "E", "--port", "4022", "--certificate",
                                  str(certs / "InstTargetEndpoint.crt"), "--key",
                                  str(certs / "InstInitiatorEndpoint.key"), expect=1))
    assert line.startswith("error 15297: ")


def test_one_endpoint_and_what_alter_needs(on_instance: Any, certs: Path) -> None:
    on_instance(*endpoint_args(certs))
    assert error_line(on_instance(*endpoint_args(certs, "InstInitiatorEndpoint"), expect=1)).startswith(
        "error 7862: ")
    assert "nothing to change" in error_line(on_instance("alter", "endpoint", "InstTargetEndpoint", expect=2))
    assert error_line(on_instance("alter", "endpoint", "Nope", "--port", "5000", expect=1)).startswith(
        "error 15151: ")


def test_endpoint_commands_need_an_instance(db_url: str, certs: Path) -> None:
    for args in (endpoint_args(certs), ["alter", "endpoint", "E", "--port", "5000"], ["drop", "endpoint", "E"],
                 ["show", "broker-endpoints"], ["show", "broker-connections"]):
        line = error_line(invoke("--db", db_url, *args, expect=2))
        assert "give --instance URL" in line


def test_show_broker_connections(on_instance: Any, db_url: str) -> None:
    inst = broker.instance(db_url)
    with inst.msdb.transaction() as tx:
        tx.run(lambda ctx: ctx.conn.execute(BrokerConnection.__table__.insert().values(  # type: ignore[attr-defined]
            connection_id=uuid.uuid4(), state=ConnectionState.CLOSED, login_state=LoginState.ERROR, is_accept=True,
            address="127.0.0.1:50000", refusal="certificate verify failed: self-signed certificate")))
    inst.dispose()
    [row] = json.loads(on_instance("show", "broker-connections", "--json").stdout)
    assert (row["state_desc"], row["login_state_desc"], row["is_accept"], row["address"]) == (
        "CLOSED", "ERROR", 1, "127.0.0.1:50000")
    table = on_instance("show", "broker-connections").stdout
    assert "self-signed certificate" in table and "127.0.0.1:50000" in table


@pytest.mark.parametrize("value", ["", "\x00", "-1", "1e3", "x" * 10_000, "\ud800", "65536", "::1", "ALL", "0"])
@pytest.mark.parametrize("option", ["NAME", "--port", "--listener-ip", "--message-forward-size", "--certificate"])
def test_any_value_in_any_endpoint_option_is_one_line(db_url: str, certs: Path, option: str, value: str,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(certs)
    args = endpoint_args(certs)
    if option == "NAME":
        args[2] = value
    elif option in args:
        args[args.index(option) + 1] = value
    else:
        args += [option, value]
    well_behaved(CliRunner().invoke(cli, ["--instance", db_url, *args]))


def test_certificate_and_endpoint_in_real_processes(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items()
           if k not in ("BROKER_URL", "BROKER_INSTANCE", "BROKER_DATABASE", "FORCE_COLOR", "TTY_COMPATIBLE")}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(BROKER_SCRIPT), *args], cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=120, check=False)

    made = run("certificate", "create", "InstTargetEndpoint")
    assert made.returncode == 0 and made.stderr == "", made.stderr
    created = run("--instance", "sqlite:///instance.db", "create", "endpoint", "InstTargetEndpoint", "--port", "4022",
                  "--certificate", "InstTargetEndpoint.crt", "--key", "InstTargetEndpoint.key")
    assert created.returncode == 0 and created.stderr == "", created.stderr
    again = run("--instance", "sqlite:///instance.db", "create", "endpoint", "Second", "--port", "4023",
                "--certificate", "InstTargetEndpoint.crt", "--key", "InstTargetEndpoint.key")
    assert again.returncode == 1 and again.stderr.startswith("error 7862: ") and len(again.stderr.splitlines()) == 1
    listed = run("--instance", "sqlite:///instance.db", "show", "broker-endpoints", "--json")
    assert [row["name"] for row in json.loads(listed.stdout)] == ["InstTargetEndpoint"]
