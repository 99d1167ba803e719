"""The diff view: added, removed and changed rows per output table against a baseline.

It fills in epoch by epoch while a replay runs (comparing only rows that are final, those
earlier than the epoch's settled time), then shows the whole diff when the replay ends.
"""

from __future__ import annotations

import html
import threading
from typing import Any

import ipywidgets as w
import plotly.graph_objects as go
import polars as pl

from restream_kit.compare import Diff, diff
from restream_kit.progress import EpochFinished, ProgressEvent

__all__ = ["DiffView", "timeline_figure"]

COLOURS = {"added": "#2ca02c", "removed": "#d62728", "changed": "#ff7f0e"}


def timeline_figure(d: Diff | None = None) -> go.Figure:
    """Differences over time: rows added, removed and changed per time bucket."""
    fig = go.Figure(
        layout=dict(
            title="Differences over time",
            barmode="stack",
            height=260,
            margin=dict(l=40, r=10, t=40, b=30),
            xaxis_title="event time",
            yaxis_title="rows",
        )
    )
    if d is not None:
        _fill_timeline(fig, d)
    return fig


def _fill_timeline(fig: go.Figure, d: Diff) -> None:
    timeline = d.timeline()
    traces = []
    for kind, colour in COLOURS.items():
        part = (
            timeline.filter(pl.col("kind") == kind)
            .group_by("ts")
            .agg(pl.col("rows").sum())
            .sort("ts")
        )
        x = pl.from_epoch(part["ts"], time_unit="ms").to_list() if part.height else []
        traces.append(go.Bar(name=kind, x=x, y=part["rows"].to_list(), marker_color=colour))
    fig.data = []
    fig.add_traces(traces)


class DiffView:
    """Per-table counts, a timeline of differences and sample rows of each kind."""

    def __init__(self, samples: int = 5):
        self.samples = samples
        self.header = w.HTML("<b>diff against the baseline</b>: waiting for the baseline")
        self.counts = w.HTML("")
        self.figure = go.FigureWidget(timeline_figure())
        self.figure_box = w.Box([self.figure])
        self.sample_rows = w.HTML("")
        self.widget = w.VBox([self.header, self.counts, self.figure_box, self.sample_rows])
        self.baseline_label = "the baseline"
        self._baseline: dict[str, pl.DataFrame] = {}
        self._rows: dict[str, list[Any]] = {}
        self._lock = threading.Lock()

    # -- fed by the workbench and the replay --------------------------------------------

    def set_baseline(self, cell: Any) -> None:
        """Called once the baseline is ready (``Workbench.run(before_replay=...)``)."""
        base = cell.baseline
        self.baseline_label = base.label + (" (reused from the catalog)" if base.reused else "")
        self._baseline = {name: pl.from_arrow(t) for name, t in base.result.tables.items()}
        self.header.value = (
            f"<b>diff against {html.escape(self.baseline_label)}</b>: replay running"
        )

    def __call__(self, event: ProgressEvent) -> None:
        if not isinstance(event, EpochFinished) or not self._baseline and not event.outputs:
            return
        with self._lock:
            for name, table in event.outputs.items():
                self._rows.setdefault(name, []).append(pl.from_arrow(table))
            if event.settled_ts is None:
                return  # the final diff comes with finish()
            settled = event.settled_ts
            ours = {
                n: pl.concat(parts, how="diagonal_relaxed").filter(pl.col("ts") < settled)
                for n, parts in self._rows.items()
            }
            theirs = {n: t.filter(pl.col("ts") < settled) for n, t in self._baseline.items()}
            self._render(diff(ours, theirs), partial=f"through epoch {event.epoch + 1}")

    def finish(self, cell: Any) -> None:
        """Show the complete diff of a finished run (or its error)."""
        if cell.error is not None:
            self.header.value = (
                f"<b>diff against {html.escape(self.baseline_label)}</b>: "
                f"<span style='color:#b00'>no diff, the run failed</span>"
            )
            return
        self._render(cell.diff, partial=None, serial_check=cell.unexpected_difference)

    def show(self, d: Diff, label: str) -> None:
        """Show a diff computed elsewhere (``%restream diff A B``)."""
        self.baseline_label = label
        self._render(d, partial=None)

    # -- drawing --------------------------------------------------------------------------

    def _render(self, d: Diff, partial: str | None, serial_check: bool = False) -> None:
        label = html.escape(self.baseline_label)
        if partial:
            verdict = f"so far ({partial}): {'no differences' if d.empty else 'differences found'}"
        elif d.empty:
            verdict = "<span style='color:#2a7'>identical</span>"
        else:
            verdict = "<span style='color:#b00'>differs</span>"
        warning = ""
        if serial_check:
            warning = (
                "<div style='color:#b00'><b>The parallel result differs from the serial replay of "
                "the same program: the engine is wrong. Please report this.</b></div>"
            )
        self.header.value = f"<b>diff against {label}</b>: {verdict}{warning}"
        rows = "".join(
            f"<tr><td>{html.escape(n)}</td><td>{t.rows:,}</td><td>{t.baseline_rows:,}</td>"
            f"<td style='color:{COLOURS['added']}'>{t.counts['added']:,}</td>"
            f"<td style='color:{COLOURS['removed']}'>{t.counts['removed']:,}</td>"
            f"<td style='color:{COLOURS['changed']}'>{t.counts['changed']:,}</td></tr>"
            for n, t in d.tables.items()
        )
        self.counts.value = (
            "<table><tr><th>table</th><th>rows</th><th>baseline rows</th><th>added</th>"
            f"<th>removed</th><th>changed</th></tr>{rows}</table>"
        )
        with self.figure.batch_update():
            _fill_timeline(self.figure, d)
        # An empty timeline is just axes: show it only when there is something to plot.
        self.figure.layout.height = 260 if not d.empty else 10
        self.figure_box.layout.display = None if not d.empty else "none"
        parts = []
        for name, t in d.tables.items():
            for kind in ("added", "removed", "changed"):
                frame = getattr(t, kind)
                if frame.height:
                    parts.append(
                        f"<p><b>{html.escape(name)}</b>, {kind} ({frame.height:,}), first rows:</p>"
                        + frame.head(self.samples)._repr_html_()
                    )
        self.sample_rows.value = "".join(parts)
