"""Instances served by ``broker --instance URL run`` in processes of their own, for the tests.

Each process writes its log to a file (no pipe to drain or to close); it is stopped with
SIGTERM, which ``broker run`` answers by stopping cleanly with exit status 0, and killed
if it has not exited by a deadline.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

from support import wait_until

import broker

BROKER = Path(sys.executable).with_name("broker")
POLL_S = 0.2  # the runtimes' longest sleep: a pass picks up what no commit woke it for
STOP_S = 30.0  # after SIGTERM, then SIGKILL
LISTEN_DEADLINE_S = 30.0


class InstanceProcess:
    """One instance's ``broker --instance URL run``, logging at INFO to ``log``."""

    def __init__(self, inst: broker.Instance, log: Path) -> None:
        self.log = log
        url = inst.msdb.engine.url.render_as_string(hide_password=False)
        with log.open("wb") as out:  # the child has its own descriptor: ours closes at once
            self.process = subprocess.Popen(
                [str(BROKER), "--instance", url, "run", "--poll", str(POLL_S), "--log-level", "INFO"],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=out)

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def logged(self) -> str:
        """What the process has logged so far."""
        return self.log.read_text(errors="replace")

    def wait_listening(self, port: int) -> None:
        """Wait until the process's endpoint accepts connections on ``port`` (failing at
        once, with its log, if the process exits first)."""
        def listening() -> bool:
            if not self.alive:
                raise AssertionError(f"broker run exited with {self.process.returncode}:\n{self.logged()}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1.0).close()
            except OSError:
                return False
            return True
        wait_until(listening, LISTEN_DEADLINE_S, interval=0.05)

    def terminate(self) -> None:
        """Send SIGTERM if it still runs."""
        if self.alive:
            self.process.terminate()

    def wait(self, timeout: float = STOP_S) -> int | None:
        """Its exit status once it has exited, or None if it had to be killed after ``timeout``."""
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            return None


class InstanceProcesses:
    """Starts instance processes, logging into ``directory``; :meth:`stop` ends them all
    and disposes of the instances it owns."""

    def __init__(self, directory: Path) -> None:
        self._directory = directory
        self._processes: list[InstanceProcess] = []
        self._owned: list[broker.Instance] = []

    def own(self, inst: broker.Instance) -> None:
        """Dispose of ``inst`` when the processes stop (whether or not one served it)."""
        self._owned.append(inst)

    def serve(self, instances: dict[str, tuple[broker.Instance, int]]) -> dict[str, InstanceProcess]:
        """Run each instance (by name, with the port of its endpoint) in a process of its
        own, all at once; the processes, once every endpoint listens."""
        started = {}
        for name, (inst, _) in instances.items():
            started[name] = InstanceProcess(inst, self._directory / f"{name}.log")
            self._processes.append(started[name])
        for name, (_, port) in instances.items():
            started[name].wait_listening(port)
        return started

    def stop(self) -> dict[str, int | None]:
        """SIGTERM to every process, then wait for each (killing the ones that outlive the
        deadline); their exit statuses by log name. The instances owned are disposed of."""
        for process in self._processes:
            process.terminate()
        statuses = {process.log.stem: process.wait() for process in self._processes}
        for inst in self._owned:
            inst.dispose()
        self._processes, self._owned = [], []
        return statuses
