"""The replay monitor: progress bars per epoch and stage, rate, multiple of real time, ETA.

``ReplayMonitor`` is an ipywidgets view; ``TextMonitor`` prints the same information as lines,
for terminals and notebooks run without a frontend. Both are observers of a replay.
"""

from __future__ import annotations

import html
import re
import threading
import time
from typing import Any

import ipywidgets as w

from restream_kit.engines import Diagnostics, diagnostics
from restream_kit.io.progress import (
    EpochFinished,
    Phase,
    ProgressEvent,
    ProgressState,
    ReplayFinished,
    ReplayStarted,
    StageFinished,
    StageStarted,
    TextProgress,
)
from widgets._static import FG, MUTED

__all__ = ["ReplayMonitor", "TextMonitor"]

#: Redraw at most this often, except on epoch, stage and replay boundaries.
REDRAW_EVERY_S = 0.2


#: The state a monitor shows, as words and colours.
STATUS_COLOURS = {
    "waiting": "#777",
    "running": "#1f77b4",
    "done": "#2a7",
    "failed": "#b00",
    "cancelled": "#888",
}


class ReplayMonitor:
    """Live progress of one replay: events, epochs and each stage's share of the epochs done,
    with a Stop button while it runs. Green when done, red when failed, grey when cancelled."""

    def __init__(self, title: str, engine: str = "serial"):
        self.state = ProgressState()
        self.engine = engine
        self.title = w.HTML(f"<b>replay {html.escape(title)}</b>")
        self.status = w.HTML("")
        self.events_bar = w.FloatProgress(
            value=0.0, min=0.0, max=1.0, description="events", bar_style="info",
            layout=w.Layout(width="50%"),
        )  # fmt: skip
        self.events_label = w.Label("0%")
        self.epoch_bar = w.IntProgress(
            value=0, min=0, max=1, description="epochs", bar_style="info",
            layout=w.Layout(width="50%"),
        )  # fmt: skip
        self.epoch_label = w.Label("")
        self.stages = w.VBox([])
        self.stats = w.HTML("")
        self.stop_button = w.Button(
            description="Stop", button_style="danger", icon="stop", tooltip="cancel this replay",
            layout=w.Layout(width="auto"),
        )  # fmt: skip
        self.stop_button.on_click(lambda _b: self._cancel())
        self.log_note = w.HTML("")
        self.reuse_note = w.HTML("")
        # The serial baseline's progress, while it runs beside the replay.
        self.baseline_note = w.HTML("")
        self.widget = w.VBox(
            [
                w.HBox([self.title, self.status, self.stop_button]),
                w.HBox([self.events_bar, self.events_label]),
                w.HBox([self.epoch_bar, self.epoch_label]),
                self.stages,
                self.stats,
                self.baseline_note,
                self.reuse_note,
                self.log_note,
            ],
            layout=w.Layout(max_width="1000px"),
        )
        self._stage_bars: dict[str, w.IntProgress] = {}
        self._stage_done: dict[str, int] = {}
        self._last_draw = 0.0
        self._drawn_percent = -1
        self._lock = threading.Lock()
        self._run: Any = None
        # "done in X s" is the time from here (the cell's start) to the end of the cell.
        self._opened = time.monotonic()
        self._ended = False
        self._set_status("waiting", f"starting {engine}")
        self._show_engine_log(diagnostics(engine))

    def attach(self, run: Any) -> None:
        """Let the Stop button cancel ``run`` (anything with ``cancel()``)."""
        self._run = run

    def _cancel(self) -> None:
        if self._run is not None:
            self._run.cancel()
            self.stop_button.disabled = True
            self.stop_button.description = "Stopping"

    def _set_status(self, status: str, words: str | None = None) -> None:
        colour = STATUS_COLOURS[status]
        self.status.value = (
            f"&nbsp;<span class='restream-status' data-status='{status}' "
            f"style='color:{colour};font-weight:bold'>{html.escape(words or status)}</span>&nbsp;"
        )
        self.stop_button.layout.display = None if status in ("waiting", "running") else "none"

    def _show_engine_log(self, said: Diagnostics | None) -> None:
        """Where the engine's own log is, and its web UI (a link) once it has one."""
        if said is None:
            return
        name, url = html.escape(said.label), said.ui_url
        ui = (
            f"; {name} UI: <a href='{html.escape(url)}' target='_blank'>{html.escape(url)}</a>"
            if url
            else f"; {name} UI off (<code>{html.escape(said.ui_switch)}</code> in the kernel's "
            f"environment before its first {name} cell turns it on)"
        )
        self.log_note.value = (
            f"<span style='font-size:85%;color:{MUTED}'>{name}'s own log: "
            f"<code>{html.escape(str(said.log_path))}</code>{ui}</span>"
        )

    def finish(self, cell: Any) -> None:
        """A run ended: show how (also when it failed before the replay could say so)."""
        with self._lock:
            self._ended = True
            if cell.error is not None and self.state.finished is None:
                self.state(
                    ReplayFinished(
                        self.state.events_done, self.state.elapsed_s, ok=False,
                        error=str(cell.error).splitlines()[0] if str(cell.error) else "",
                    )
                )  # fmt: skip
            if self.log_note.value:
                self._show_engine_log(
                    diagnostics(self.engine)
                )  # its session, so its UI, exists now
            status = getattr(cell, "status", "failed" if cell.error is not None else "done")
            self.baseline_note.value = ""
            self._draw(status="done" if status == "ok" else status)
            if getattr(cell, "not_compared", None) and cell.error is None:
                self.baseline_note.value = (
                    f"<span class='restream-not-compared' style='color:#777'>"
                    f"{html.escape(cell.not_compared)}</span>"
                )
            line = cell.reuse_line() if hasattr(cell, "reuse_line") else None
            if line and cell.error is None:
                # What a --baseline cell reused of its baseline, or why it replayed in full.
                colour = "#777" if cell.reuse.get("reuse_reason") else "#2a7"
                self.reuse_note.value = (
                    f"<span class='restream-reuse' style='color:{colour}'>"
                    f"{html.escape(line)}</span>"
                )

    def static_html(self) -> str:
        """The monitor as it stands, as HTML without widgets (see ``widgets._static``)."""
        return (
            f"<div class='restream-monitor' style='color:{FG}'>{self.title.value}"
            f"{self.status.value}<br>{html.escape(self.events_label.value)}, epochs "
            f"{html.escape(self.epoch_label.value)}<br>{self.stats.value}"
            f"{'<br>' + self.reuse_note.value if self.reuse_note.value else ''}"
            f"{'<br>' + self.log_note.value if self.log_note.value else ''}</div>"
        )

    def static_text(self) -> str:
        """The same as two lines of text."""
        status = re.sub(r"<[^>]+>|&nbsp;", " ", self.status.value).strip()
        title = re.sub(r"<[^>]+>", "", self.title.value)
        return f"{title}: {status}\n{html.unescape(re.sub(r'<[^>]+>', '', self.stats.value))}"

    def __call__(self, event: ProgressEvent) -> None:
        with self._lock:
            if isinstance(event, Phase):
                self._phase(event)
                return
            self.state(event)
            if isinstance(event, ReplayStarted):
                self._set_status("running")
            elif isinstance(event, StageStarted):
                self._stage_bar(event.stage).bar_style = "info"
            elif isinstance(event, StageFinished):
                self._stage_done[event.stage] = self._stage_done.get(event.stage, 0) + event.epochs
            boundary = isinstance(
                event, (EpochFinished, ReplayFinished, StageStarted, StageFinished)
            )
            now = time.monotonic()
            # A new whole percent is drawn at once (at most a hundred times a replay), so the
            # bar moves with every step of a short replay too, not only every REDRAW_EVERY_S.
            percent = int(self.state.fraction * 100)
            if (
                boundary
                or percent != self._drawn_percent
                or now - self._last_draw >= REDRAW_EVERY_S
            ):
                self._draw()
                self._last_draw, self._drawn_percent = now, percent

    def _phase(self, event: Phase) -> None:
        """What the cell is doing: the serial baseline's progress on its own line, any other
        phase in the status (a finished monitor keeps its final words)."""
        if self._ended:
            return
        if event.name == "baseline":
            self.baseline_note.value = (
                f"<span class='restream-baseline' style='color:#777'>"
                f"{html.escape(event.words)}</span>"
            )
        else:
            self._set_status("waiting" if event.name == "starting" else "running", event.words)

    def _stage_bar(self, stage: str) -> w.IntProgress:
        if stage not in self._stage_bars:
            bar = w.IntProgress(
                value=0, min=0, max=max(1, self.state.epochs_total), description=stage[:24],
                bar_style="info", layout=w.Layout(width="50%"),
                style={"description_width": "initial"},
            )  # fmt: skip
            self._stage_bars[stage] = bar
            self.stages.children = (*self.stages.children, bar)
        return self._stage_bars[stage]

    def _draw(self, status: str | None = None) -> None:
        s = self.state
        total = max(1, s.epochs_total)
        for stage, bar in self._stage_bars.items():
            # A stage's bar is the share of the epochs in which it has finished.
            bar.max = total
            bar.value = min(self._stage_done.get(stage, 0), total)
        self.events_bar.value = s.fraction
        # The count as well as the share: on a long log the share stands still for minutes.
        self.events_label.value = (
            f"{s.fraction:.0%} of {s.events_total:,} events ({s.events_done:,} done)"
        )
        self.epoch_bar.max = total
        self.epoch_bar.value = min(s.epochs_done, total)
        self.epoch_label.value = f"{s.epochs_done}/{s.epochs_total}"
        if s.finished is None and status is None:
            self.stats.value = html.escape(s.line())
            return
        if status is None:
            status = "replayed" if s.finished.ok else "failed"
        error = (s.finished.error or "") if s.finished is not None else ""
        if status == "failed" and error == "replay cancelled":
            status = "cancelled"
        bars = [self.events_bar, self.epoch_bar, *self._stage_bars.values()]
        if status in ("done", "replayed"):
            for bar in bars:
                bar.bar_style = "success"
            if status == "done":
                self._set_status("done", f"done in {time.monotonic() - self._opened:.2f} s")
            else:  # the cell goes on (the diff, the catalog): it is done when finish() says so
                self._set_status("running", f"replayed in {s.elapsed_s:.2f} s")
            self.stats.value = html.escape(s.line())
        elif status == "cancelled":
            for bar in bars:
                bar.bar_style, bar.style.bar_color = "", STATUS_COLOURS["cancelled"]
            epoch = min(s.epochs_done + 1, total)
            self._set_status(
                "cancelled", f"cancelled at epoch {epoch} of {total}, {s.events_done:,} events"
            )
            self.stats.value = ""
        else:
            for bar in bars:
                bar.bar_style = "danger"
            self._set_status("failed")
            self.stats.value = (
                f"<span style='color:{STATUS_COLOURS['failed']}'>{html.escape(error)}</span>"
            )


#: Text mode prints the same lines as the command line.
TextMonitor = TextProgress
