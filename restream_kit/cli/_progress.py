"""Progress for the command line: a live rich bar on a terminal, plain lines otherwise."""

from __future__ import annotations

import sys
from typing import Any, TextIO

from ..io.progress import (
    Observer,
    ProgressEvent,
    ProgressState,
    ReplayFinished,
    ReplayStarted,
    TextProgress,
)

__all__ = ["cli_observer"]


class _RichBar:
    """A rich progress bar over events, with the state's line as its description."""

    def __init__(self, stream: TextIO):
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn

        self.state = ProgressState()
        self.progress = Progress(
            TextColumn("[bold]replay"),
            BarColumn(bar_width=24),
            TaskProgressColumn(),
            TextColumn("{task.description}"),
            console=Console(file=stream),
            transient=False,
        )
        self.task: Any = None

    def __call__(self, event: ProgressEvent) -> None:
        self.state(event)
        if isinstance(event, ReplayStarted):
            self.progress.start()
            self.task = self.progress.add_task(self.state.short(), total=max(1, event.events_total))
        if self.task is None:
            return
        self.progress.update(
            self.task, completed=self.state.events_done, description=self.state.short()
        )
        if isinstance(event, ReplayFinished):
            self.progress.stop()


def cli_observer(stream: TextIO | None = None) -> Observer:
    """A live bar when ``stream`` (stderr by default) is a terminal, else a line a second."""
    stream = stream or sys.stderr
    if stream.isatty():
        return _RichBar(stream)
    return TextProgress(stream)
