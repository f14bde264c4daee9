"""``Broker.dispose`` while other threads of the process work on the database: it closes
only connections no thread is using (an instance's runtime disposes of a database removed
from the instance while its threads still run). Run in a subprocess, so that a crash
fails the test instead of ending the run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

WORKER = str(Path(__file__).with_name("dispose_workers.py"))


def test_disposing_while_threads_send_and_receive_loses_nothing_and_breaks_no_one(db_url: str) -> None:
    done = subprocess.run([sys.executable, WORKER, db_url, "3000"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.splitlines()[-1])
    assert result["errors"] == []
    assert result["sent"] > 0
    assert result["sent"] == result["received"] + result["left"]
