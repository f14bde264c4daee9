"""``broker demo --between-instances``: the tutorial "Completing a Conversation Between
Instances" (spec 12.3) through the real ``broker`` script, with its two ``broker run``
processes; they are stopped at the end, also when the demo fails, is interrupted or
gets SIGTERM. And the option's usage errors.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from cli import demo_instances
from cli.main import cli

BROKER_SCRIPT = Path(sys.executable).with_name("broker")
ENV = {name: value for name, value in os.environ.items()
       if name not in ("BROKER_URL", "BROKER_INSTANCE", "BROKER_DATABASE", "FORCE_COLOR", "TTY_COMPATIBLE")}
FILES = {
    "InstTargetCertificate.crt", "InstTargetCertificate.key", "InstInitiatorCertificate.crt",
    "InstInitiatorCertificate.key", "target-instance.db", "InstTargetDB.db", "initiator-instance.db",
    "InstInitiatorDB.db", "target-run.log", "initiator-run.log",
}


def broker_runs_in(folder: Path) -> list[str]:
    """The command lines of the live ``broker ... run`` processes whose arguments name a
    file in ``folder``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            args = [arg.decode(errors="replace") for arg in (entry / "cmdline").read_bytes().split(b"\0")]
        except OSError:  # gone meanwhile
            continue
        if "run" in args and any(str(folder) in arg for arg in args):
            found.append(" ".join(args))
    return found


def demo(folder: Path) -> str:
    process = subprocess.run([str(BROKER_SCRIPT), "demo", "--between-instances"], cwd=folder, env=ENV,
                             capture_output=True, text=True, timeout=240, check=False)
    assert process.returncode == 0, process.stderr
    assert process.stderr == ""
    return process.stdout


def assert_stopped_cleanly(folder: Path) -> None:
    assert broker_runs_in(folder) == []
    for log in ("target-run.log", "initiator-run.log"):
        text = (folder / log).read_text()
        assert "received SIGTERM, stopping" in text and "instance runtime stopped" in text, text
        assert "Traceback" not in text, text


def test_demo_between_instances_twice_in_an_empty_folder(tmp_path: Path) -> None:
    first = demo(tmp_path)
    assert {p.name for p in tmp_path.iterdir()} >= FILES
    assert first.startswith('Tutorial "Completing a Conversation Between Instances" in the current folder')
    for step in range(1, 10):
        assert f"\n{step}. " in first, step
    assert stat.S_IMODE((tmp_path / "InstTargetCertificate.key").stat().st_mode) == 0o600
    assert "trusting InstInitiatorCertificate.crt only." in first
    assert "route InstTargetRoute to //TgtDB/2InstSample/TargetService, ADDRESS = TCP://127.0.0.1:" in first
    assert "endpoint InstTargetEndpoint listening on 127.0.0.1:" in first
    # the request reached the target instance's queue, over an authenticated connection
    assert "InstTargetQueue holds 1 message:\n     //BothDB/2InstSample/RequestMessage (sequence 0" in first
    assert "InstTargetDB's service_broker_guid." in first
    assert "login ONLINE,\n   peer InstTargetCertificate, encryption AES." in first
    assert ("8. In InstTargetDB: received the request on the target's own handle" in first
            and "<RequestMsg>Message for Target service.</RequestMsg>" in first)
    # the reply and the EndDialog came back to the initiator's
    assert ("InstInitiatorQueue holds 2 messages:\n     //BothDB/2InstSample/ReplyMessage (sequence 0"
            in first)
    assert "http://schemas.microsoft.com/SQL/ServiceBroker/EndDialog (sequence 1" in first
    assert ("initiator DI (DISCONNECTED_INBOUND) in InstInitiatorDB, target CD (CLOSED) in InstTargetDB."
            in first)
    assert "9. In InstInitiatorDB: received the reply on handle" in first
    assert "<ReplyMsg>Message for Initiator service.</ReplyMsg>" in first
    # both sides closed
    assert "initiator endpoint gone in InstInitiatorDB, target CD (CLOSED) in InstTargetDB." in first
    assert "exit statuses: target 0, initiator 0." in first
    assert "Dropped the objects" not in first
    assert_stopped_cleanly(tmp_path)

    second = demo(tmp_path)
    assert "Dropped the objects an earlier run of the demo had left." in second
    assert "initiator endpoint gone in InstInitiatorDB, target CD (CLOSED) in InstTargetDB." in second
    assert_stopped_cleanly(tmp_path)

    # what the demo says to look at works; the second run cleaned up what the first left
    looked = subprocess.run([str(BROKER_SCRIPT), "--instance", "sqlite:///target-instance.db", "--database",
                             "InstTargetDB", "show", "endpoints", "--json"], cwd=tmp_path, env=ENV,
                            capture_output=True, text=True, timeout=120, check=True)
    assert [e["state"] for e in json.loads(looked.stdout)] == ["CD"]


def _boom() -> None:
    raise RuntimeError("boom")


def _interrupt() -> None:
    raise KeyboardInterrupt


def _sigterm() -> None:
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(10)  # the demo's handler raises SystemExit at once
    raise AssertionError("SIGTERM did not end the demo")


@pytest.mark.parametrize(("failure", "exit_code"), [(_boom, 1), (_interrupt, 1), (_sigterm, 128 + signal.SIGTERM)],
                         ids=["error", "ctrl-c", "sigterm"])
def test_the_processes_stop_whatever_ends_the_demo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   failure: Callable[[], None], exit_code: int) -> None:
    def running_then_fail(*_args: object) -> None:
        assert len(broker_runs_in(tmp_path)) == 2
        failure()

    monkeypatch.setattr(demo_instances, "_target_replies_and_ends", running_then_fail)
    handler = signal.getsignal(signal.SIGTERM)
    result = CliRunner().invoke(cli, ["demo", "--between-instances", "--folder", str(tmp_path)], env=ENV)
    assert result.exit_code == exit_code, (result.output, result.exception)
    assert "7. In InstInitiatorDB: began a dialog" in result.stdout
    assert "\n8. " not in result.stdout
    assert_stopped_cleanly(tmp_path)
    assert signal.getsignal(signal.SIGTERM) is handler


def test_demo_between_instances_usage_errors(tmp_path: Path) -> None:
    runner = CliRunner()
    both = runner.invoke(cli, ["demo", "--between-databases", "--between-instances", "--folder", str(tmp_path)])
    assert both.exit_code == 2
    assert "give --between-databases or --between-instances, not both" in both.stderr
    on_instance = runner.invoke(cli, ["--instance", f"sqlite:///{tmp_path / 'i.db'}", "demo", "--between-instances",
                                      "--folder", str(tmp_path)], env={"BROKER_URL": None})
    assert on_instance.exit_code == 2 and "leave out --instance" in on_instance.stderr
    alone = runner.invoke(cli, ["--db", f"sqlite:///{tmp_path / 'x.db'}", "demo", "--folder", str(tmp_path)])
    assert alone.exit_code == 2
    assert "--folder goes with --between-databases or --between-instances" in alone.stderr
    missing = runner.invoke(cli, ["demo", "--between-instances", "--folder", str(tmp_path / "missing")])
    assert missing.exit_code == 2 and "--folder" in missing.stderr
    assert list(tmp_path.iterdir()) == []
