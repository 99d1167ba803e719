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

from restream_kit.io.compare import Diff, KeyDiff, diff
from restream_kit.io.progress import EpochFinished, ProgressEvent

__all__ = ["DiffView", "timeline_figure"]

COLOURS = {"added": "#2ca02c", "removed": "#d62728", "changed": "#ff7f0e"}
#: Columns every output row has, which a diff by key does not offer as fields.
_ROW_COLUMNS = ("lsn", "ts", "time", "handler", "seq")
#: What the columns of the sample rows mean (a row diff).
LEGEND = (
    "<p style='font-size:90%;color:#555'>A row is identified by the event that emitted it: "
    "<code>lsn</code> its position in the log, <code>seq</code> 0 for the log's own event or k "
    "for the k-th event it scheduled, <code>n</code> the row's rank among that event's rows in "
    "the table; <code>time</code> is <code>ts</code> as a UTC datetime; a "
    "<code>FIELD_baseline</code> column holds the baseline's value of a changed field.</p>"
)


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

    def __init__(self, samples: int = 5, by: str | None = None):
        self.samples = samples
        self.by = by
        self.header = w.HTML("<b>diff against the baseline</b>: waiting for the baseline")
        self.counts = w.HTML("")
        # The timeline is made when there is a difference to draw: plotly costs the browser
        # time, and an empty chart says nothing.
        self.figure: go.FigureWidget | None = None
        self.figure_box = w.Box([], layout=w.Layout(display="none"))
        self.sample_rows = w.HTML("")
        self.picker = w.HBox([], layout=w.Layout(display="none"))
        self.widget = w.VBox(
            [self.header, self.counts, self.figure_box, self.sample_rows, self.picker]
        )
        self.baseline_label = "the baseline"
        self._baseline: dict[str, pl.DataFrame] = {}
        # Set once the baseline is ready, which may be after the replay (got beside it).
        self._ready = False
        self._rows: dict[str, list[Any]] = {}
        self._lock = threading.Lock()
        self._sides: tuple[Any, Any, tuple[str, str]] | None = None

    # -- fed by the workbench and the replay --------------------------------------------

    def set_baseline(self, cell: Any) -> None:
        """Called once the baseline is ready (``Workbench.run(before_replay=...)``)."""
        base = cell.baseline
        self.baseline_label = base.label + (" (reused from the catalog)" if base.reused else "")
        self._baseline = {name: pl.from_arrow(t) for name, t in base.result.tables.items()}
        self._ready = True
        self.header.value = (
            f"<b>diff against {html.escape(self.baseline_label)}</b>: replay running"
        )

    def __call__(self, event: ProgressEvent) -> None:
        if not isinstance(event, EpochFinished) or not self._baseline and not event.outputs:
            return
        if self.by:
            return  # a diff by key is shown once the replay has ended
        with self._lock:
            for name, table in event.outputs.items():
                self._rows.setdefault(name, []).append(pl.from_arrow(table))
            if event.settled_ts is None or not self._ready:
                return  # the final diff comes with finish(); a partial one needs the baseline
            settled = event.settled_ts
            ours = {
                n: pl.concat(parts, how="diagonal_relaxed").filter(pl.col("ts") < settled)
                for n, parts in self._rows.items()
            }
            theirs = {n: t.filter(pl.col("ts") < settled) for n, t in self._baseline.items()}
            self._render(diff(ours, theirs), partial=f"through epoch {event.epoch + 1}")

    def finish(self, cell: Any) -> None:
        """Show the complete diff of a finished run; nothing for a failed or cancelled one (the
        cell says why)."""
        if cell.error is not None:
            self.widget.layout.display = "none"
            return
        if cell.diff is None:  # not compared with serial (a log above the compare limit)
            self.header.value = f"<b>diff</b>: {html.escape(cell.not_compared or 'none')}"
            return
        self._sides = (cell.result, cell.baseline.result, (cell.name, cell.baseline.label))
        self._render(cell.diff, partial=None, serial_check=cell.unexpected_difference)

    def show(self, d: Diff | KeyDiff, label: str, sides: Any = None, results: Any = None) -> None:
        """Show a diff computed elsewhere (``%restream diff A B``, a sweep's variant);
        ``sides`` is ``(workbench, a, b)``, or ``results`` is ``(ours, theirs, (a, b))``, for
        the field picker."""
        self.baseline_label = label
        if sides is not None:
            workbench, a, b = sides
            self._sides = (workbench._latest_result(a), workbench._latest_result(b), (a, b))
        elif results is not None:
            if self._sides is not None and self._sides[0] is not results[0]:
                self.picker.children = ()  # another variant: its own fields
            self._sides = results
        self._render(d, partial=None)

    # -- drawing --------------------------------------------------------------------------

    def _render(self, d: Diff | KeyDiff, partial: str | None, serial_check: bool = False) -> None:
        label = html.escape(self.baseline_label)
        if partial:
            verdict = f"so far ({partial}): {'no differences' if d.empty else 'differences found'}"
        elif d.empty:
            verdict = "<span style='color:#2a7'>identical</span>"
        else:
            verdict = "<span style='color:#b00'>differs</span>"
        if isinstance(d, KeyDiff):
            verdict += f", by {html.escape(', '.join(d.by))}"
        warning = ""
        if serial_check:
            warning = (
                "<div style='color:#b00'><b>The parallel result differs from the serial replay of "
                "the same program: the engine is wrong. Please report this.</b></div>"
            )
        self.header.value = f"<b>diff against {label}</b>: {verdict}{warning}"
        if isinstance(d, KeyDiff):
            self._render_keys(d)
        else:
            self._render_rows(d)
        if partial is None:
            self._show_picker()

    def _render_keys(self, d: KeyDiff) -> None:
        rows = "".join(
            f"<tr><td>{html.escape(n)}</td><td>{t.counts['only_a']:,}</td>"
            f"<td>{t.counts['only_b']:,}</td><td>{t.counts['changed']:,}</td>"
            f"<td>{t.counts['same']:,}</td></tr>"
            for n, t in d.tables.items()
        )
        a, b = html.escape(d.a), html.escape(d.b)
        self.counts.value = (
            f"<table><tr><th>table</th><th>keys only in {a}</th><th>keys only in {b}</th>"
            f"<th>keys in both, rows differ</th><th>keys identical</th></tr>{rows}</table>"
        )
        self.figure_box.layout.display = "none"
        self.sample_rows.value = (
            f"<pre style='font-size:90%'>{html.escape(d.summary(self.samples))}</pre>"
        )

    def _render_rows(self, d: Diff) -> None:
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
        # An empty timeline is just axes: show it only when there is something to plot.
        if not d.empty:
            if self.figure is None:
                self.figure = go.FigureWidget(timeline_figure())
                self.figure.layout.width = None
                self.figure_box.children = (self.figure,)
            with self.figure.batch_update():
                _fill_timeline(self.figure, d)
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
        self.sample_rows.value = "".join(parts) + (LEGEND if parts else "")

    # -- choosing the fields to compare by --------------------------------------------------

    def _show_picker(self) -> None:
        """Fields of the output tables to compare by (rows of both sides), and a button."""
        if self._sides is None or self.picker.children:
            return
        ours, theirs, _labels = self._sides
        fields: list[str] = []
        for result in (ours, theirs):
            for table in result.tables.values():
                fields += [c for c in table.column_names if c not in _ROW_COLUMNS]
        fields = list(dict.fromkeys(fields))
        if not fields:
            return
        chosen = [f for f in (self.by or "").split(",") if f in fields]
        self.fields = w.TagsInput(value=chosen, allowed_tags=fields, allow_duplicates=False)
        button = w.Button(description="compare", tooltip="diff by these fields (none: by row)")
        button.on_click(lambda _b: self.compare_by(list(self.fields.value)))
        self.picker.children = (w.HTML("compare by&nbsp;"), self.fields, button)
        self.picker.layout.display = None

    def compare_by(self, fields: list[str]) -> Diff | KeyDiff:
        """Recompute the diff by ``fields`` (row by row when empty) and show it."""
        assert self._sides is not None
        ours, theirs, labels = self._sides
        self.by = ",".join(fields) or None
        d = diff(ours, theirs, by=self.by, labels=labels) if self.by else diff(ours, theirs)
        self._render(d, partial=None)
        return d
