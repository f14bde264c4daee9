"""Progress bars for bulk commands: rich on a terminal's stderr, nothing otherwise.

Output stays clean for pipes and files: when stderr is not a terminal no bar, colour or
control sequence is written at all.
"""

from __future__ import annotations

import sys
from types import TracebackType
from typing import TYPE_CHECKING

import click

from cli.render import terminal_console

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID


class Meter:
    """``with Meter("sending", total=50) as meter: meter.advance(10)``.

    ``total`` None draws an open-ended bar (a pulse) for input of unknown size.
    ``counted`` False hides the ``done/total`` column (e.g. when advancing by bytes);
    ``shown`` False draws nothing (e.g. for a single message).
    """

    def __init__(self, description: str, total: float | None, *, counted: bool = True, shown: bool = True) -> None:
        console = terminal_console(stderr=True) if shown else None
        self._progress: Progress | None = None
        self._task: TaskID | None = None
        if console is not None:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TaskProgressColumn,
                TextColumn,
                TimeElapsedColumn,
            )

            columns = (
                TextColumn("{task.description}"),
                BarColumn(),
                TaskProgressColumn(),
                *((MofNCompleteColumn(),) if counted else ()),
                TimeElapsedColumn(),
            )
            # rich must not capture stdout: output goes there itself (see echo()).
            self._progress = Progress(*columns, console=console, redirect_stdout=False, redirect_stderr=False)
            self._task = self._progress.add_task(description, total=total)

    def __enter__(self) -> Meter:
        if self._progress is not None:
            self._progress.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        if self._progress is not None:
            self._progress.stop()

    def echo(self, line: str) -> None:
        """Print a line of output on stdout; above the bar when they share a terminal."""
        # The real stdout decides, not FORCE_COLOR & co.: data must never leave a pipe.
        if self._progress is not None and sys.stdout.isatty():
            self._progress.console.print(line, markup=False, highlight=False, soft_wrap=True)
        else:
            click.echo(line)

    def advance(self, amount: float = 1, *, description: str | None = None) -> None:
        """Move the bar on by ``amount``; optionally change the text in front of it."""
        if self._progress is not None and self._task is not None:
            self._progress.update(self._task, advance=amount, description=description)
