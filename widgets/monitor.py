"""The replay monitor: progress bars per epoch and stage, rate, multiple of real time, ETA.

``ReplayMonitor`` is an ipywidgets view; ``TextMonitor`` prints the same information as lines,
for terminals and notebooks run without a frontend. Both are observers of a replay.
"""

from __future__ import annotations

import html
import threading
import time
from typing import Any

import ipywidgets as w

from restream_kit.progress import (
    EpochFinished,
    ProgressEvent,
    ProgressState,
    ReplayFinished,
    StageFinished,
    StageStarted,
    TextProgress,
)

__all__ = ["ReplayMonitor", "TextMonitor"]

#: Redraw at most this often, except on epoch, stage and replay boundaries.
REDRAW_EVERY_S = 0.2


class ReplayMonitor:
    """Live progress of one replay, with a cancel button."""

    def __init__(self, title: str):
        self.state = ProgressState()
        self.title = w.HTML(f"<b>replay {html.escape(title)}</b>")
        self.events_bar = w.FloatProgress(
            value=0.0,
            min=0.0,
            max=1.0,
            description="events",
            bar_style="info",
            layout=w.Layout(width="60%"),
        )
        self.events_label = w.Label("0%")
        self.epoch_bar = w.IntProgress(
            value=0, min=0, max=1, description="epochs", layout=w.Layout(width="60%")
        )
        self.epoch_label = w.Label("")
        self.stages = w.VBox([])
        self.stats = w.HTML("")
        self.cancel_button = w.Button(description="Cancel", button_style="warning", icon="stop")
        self.cancel_button.on_click(lambda _b: self._cancel())
        self.widget = w.VBox(
            [
                self.title,
                w.HBox([self.events_bar, self.events_label]),
                w.HBox([self.epoch_bar, self.epoch_label]),
                self.stages,
                w.HBox([self.stats, self.cancel_button]),
            ]
        )
        self._stage_bars: dict[str, w.IntProgress] = {}
        self._last_draw = 0.0
        self._lock = threading.Lock()
        self._run: Any = None

    def attach(self, run: Any) -> None:
        """Let the cancel button stop ``run`` (anything with ``cancel()``)."""
        self._run = run

    def _cancel(self) -> None:
        if self._run is not None:
            self._run.cancel()
            self.cancel_button.disabled = True
            self.cancel_button.description = "Cancelling"

    def finish(self, cell: Any) -> None:
        """A run ended; show its error when it failed before the replay could say so."""
        if cell.error is not None and self.state.finished is None:
            self.state(
                ReplayFinished(
                    self.state.events_done, self.state.elapsed_s, ok=False, error=str(cell.error)
                )
            )
            with self._lock:
                self._draw()

    def __call__(self, event: ProgressEvent) -> None:
        with self._lock:
            self.state(event)
            if isinstance(event, StageStarted):
                self._stage_bar(event.stage).bar_style = "info"
            elif isinstance(event, StageFinished):
                bar = self._stage_bar(event.stage)
                bar.value, bar.bar_style = 1, "success"
            boundary = isinstance(
                event, (EpochFinished, ReplayFinished, StageStarted, StageFinished)
            )
            now = time.monotonic()
            if boundary or now - self._last_draw >= REDRAW_EVERY_S:
                self._draw()
                self._last_draw = now

    def _stage_bar(self, stage: str) -> w.IntProgress:
        if stage not in self._stage_bars:
            bar = w.IntProgress(
                value=0,
                min=0,
                max=1,
                description=stage[:18],
                layout=w.Layout(width="45%"),
                style={"description_width": "initial"},
            )
            self._stage_bars[stage] = bar
            self.stages.children = (*self.stages.children, bar)
        return self._stage_bars[stage]

    def _draw(self) -> None:
        s = self.state
        if isinstance(self.state.finished, ReplayFinished) or s.epochs_done == 0:
            for bar in self._stage_bars.values():
                if s.finished is not None and s.finished.ok:
                    bar.value, bar.bar_style = 1, "success"
        self.events_bar.value = s.fraction
        self.events_label.value = f"{s.fraction:.0%} of {s.events_total:,}"
        self.epoch_bar.max = max(1, s.epochs_total)
        self.epoch_bar.value = s.epochs_done
        self.epoch_label.value = f"{s.epochs_done}/{s.epochs_total}"
        self.stats.value = html.escape(s.line())
        if s.finished is not None:
            self.cancel_button.disabled = True
            self.cancel_button.description = "Finished" if s.finished.ok else "Stopped"
            style = "success" if s.finished.ok else "danger"
            self.events_bar.bar_style = self.epoch_bar.bar_style = style
            if not s.finished.ok:
                self.stats.value = f"<span style='color:#b00'>{html.escape(s.line())}</span>"
        if s.epochs_done and not s.finished:
            # A new epoch starts its stages afresh.
            for bar in self._stage_bars.values():
                if bar.bar_style == "success":
                    bar.value = 1


#: Text mode prints the same lines as the command line.
TextMonitor = TextProgress
