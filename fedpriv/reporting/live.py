"""A run's progress on a terminal: its console lines above a bar of rounds with an ETA.

Only for a terminal (the caller checks ``isatty``): a log file or a pipe gets the plain
lines alone, one per round. The bar is ``rich``'s (already in the stack through Flower's
command line); it starts as a pulsing "start-up" bar, becomes the rounds bar at the first
round line (round 0, the initial evaluation: its start-up time does not count in the
rate), and leaves the screen when the run ends (``transient``), so that what stays is the
lines themselves. The ETA is rich's: the rounds left at the rate of the last rounds.
"""

from __future__ import annotations

from types import TracebackType
from typing import Any, TextIO

from fedpriv.reporting.console import round_progress


class RoundBar:
    """``with RoundBar(stream) as bar: bar.line(text)`` for each console line of a run."""

    def __init__(self, stream: TextIO) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self.console = Console(file=stream, force_terminal=True, highlight=False)
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=self.console,
            transient=True,
        )
        self.task = self.progress.add_task("start-up", total=None)
        self.rounds = False

    def __enter__(self) -> RoundBar:
        self.progress.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.progress.stop()

    def line(self, text: str) -> None:
        """Print one console line above the bar; a round line moves the bar."""
        from rich.text import Text

        shown = Text.from_ansi(text.rstrip("\n"))
        self.progress.console.print(shown, soft_wrap=True)
        found = round_progress(shown.plain)
        if found is None:
            return
        done, total = found
        if not self.rounds:  # the first round line: the rate starts here
            self.progress.reset(self.task, total=total, completed=done, description="rounds")
            self.rounds = True
        else:
            self.progress.update(self.task, total=total, completed=done)

    def state(self) -> dict[str, Any]:
        """The bar's task (description, completed, total): what a test reads."""
        task = self.progress.tasks[0]
        return {"description": task.description, "completed": task.completed, "total": task.total}
