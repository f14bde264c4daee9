"""README.md's "An operator's day": every command it shows, run as shown, in this order,
by bash in an empty directory (the `broker` of this environment on PATH)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def operators_day() -> str:
    """The ```sh blocks of the section "An operator's day", as one script."""
    text = README.read_text()
    start = text.index("## An operator's day")
    end = text.index("\n## ", start + 1)
    blocks = re.findall(r"```sh\n(.*?)```", text[start:end], flags=re.DOTALL)
    assert len(blocks) >= 8, blocks
    return "".join(blocks)


def test_the_operators_day_runs_as_shown(tmp_path: Path) -> None:
    script = operators_day()
    assert "broker --instance sqlite:///instance.db run & RUN=$!" in script
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("BROKER_") and k not in ("FORCE_COLOR", "TTY_COMPATIBLE")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    process = subprocess.run(["bash", "-eu", "-c", script], cwd=tmp_path, env=env, capture_output=True,
                             text=True, timeout=600, check=False)
    assert process.returncode == 0, (process.stdout[-3000:], process.stderr[-3000:])
    assert "pick order 2" in process.stdout  # the message went from one database to the other
    assert "# Shop: Waiting, by destination and reason" in process.stdout
    assert "Traceback" not in process.stderr
