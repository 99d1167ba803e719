"""The diff view: added, removed and changed rows per output table against a baseline.

It fills in epoch by epoch while a replay runs (comparing only rows that are final, those
earlier than the epoch's settled time), then shows the whole diff when the replay ends.
"""

from __future__ import annotations

import html
import re
import threading
from typing import Any

import ipywidgets as w
import plotly.graph_objects as go
import polars as pl

from restream_kit.io.compare import Diff, KeyDiff, diff
from restream_kit.io.progress import EpochFinished, ProgressEvent
from widgets._static import FG, MUTED, stacked_bars_svg, svg_image

__all__ = ["DiffView", "shown_rows", "timeline_figure", "timeline_svg"]

COLOURS = {"added": "#2ca02c", "removed": "#d62728", "changed": "#ff7f0e"}
#: Columns every output row has, which a diff by key does not offer as fields.
_ROW_COLUMNS = ("lsn", "ts", "time", "handler", "seq")
#: What the columns of the sample rows mean (a row diff).
LEGEND = (
    f"<p style='font-size:90%;color:{MUTED}'>A row is identified by the event that emitted it: "
    "<code>lsn</code> its position in the log, <code>seq</code> 0 for the log's own event or k "
    "for the k-th event it scheduled; <code>time</code> is the event's time (UTC); a "
    "<code>FIELD_baseline</code> column holds the baseline's value of a changed field.</p>"
)


def shown_rows(frame: pl.DataFrame, rank: str = "n") -> pl.DataFrame:
    """Sample rows as a reader wants them: ``time`` as a datetime instead of the raw ``ts``
    (milliseconds), and without the rank column that only serves to match rows."""
    drop = [c for c in (rank, f"{rank}_baseline") if c in frame.columns]
    if "ts" in frame.columns:
        if "time" not in frame.columns:
            time = pl.from_epoch(pl.col("ts"), time_unit="ms").alias("time")
            frame = frame.with_columns(time)
        drop += [c for c in ("ts", "ts_baseline") if c in frame.columns]
    frame = frame.drop(drop)
    first = [c for c in ("time", "lsn", "seq", "handler") if c in frame.columns]
    return frame.select(first + [c for c in frame.columns if c not in first])


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


def timeline_svg(d: Diff, buckets: int = 60) -> str:
    """Differences over time as an inline SVG: rows added, removed and changed per bucket of
    event time (at most ``buckets`` bars)."""
    timeline = d.timeline()
    if not timeline.height:
        return ""
    low, high = timeline["ts"].min(), timeline["ts"].max()
    width = max(1, (high - low) // buckets + 1)
    binned = timeline.with_columns(((pl.col("ts") - low) // width).alias("bin"))
    bins = list(range(int((high - low) // width) + 1))
    series = {}
    for kind, colour in COLOURS.items():
        per_bin = dict(
            binned.filter(pl.col("kind") == kind).group_by("bin").agg(pl.col("rows").sum()).rows()
        )
        series[kind] = (colour, [int(per_bin.get(b, 0)) for b in bins])
    starts = pl.from_epoch(pl.Series([low + b * width for b in bins]), time_unit="ms")
    labels = [t.strftime("%Y-%m-%d %H:%M") for t in starts.to_list()]
    return stacked_bars_svg(labels, series, title="Differences over event time (UTC)")


class DiffView:
    """Per-table counts, a timeline of differences and sample rows of each kind."""

    def __init__(self, samples: int = 5, by: str | None = None):
        self.samples = samples
        self.by = by
        self.header = w.HTML("<b>diff against the baseline</b>: waiting for the baseline")
        self.counts = w.HTML("")
        # The timeline is an inline SVG, drawn when there is a difference: it costs the browser
        # nothing, and a saved notebook nothing (a plotly widget's saved state is ~5 MB).
        self.timeline = w.HTML("", layout=w.Layout(display="none"))
        self.sample_rows = w.HTML("")
        self.picker = w.HBox([], layout=w.Layout(display="none"))
        self.widget = w.VBox(
            [self.header, self.counts, self.timeline, self.sample_rows, self.picker]
        )
        self.baseline_label = "the baseline"
        self._baseline: dict[str, pl.DataFrame] = {}
        # Set once the baseline is ready, which may be after the replay (got beside it).
        self._ready = False
        self._rows: dict[str, list[Any]] = {}
        self._lock = threading.Lock()
        self._sides: tuple[Any, Any, tuple[str, str]] | None = None
        self.last: Diff | KeyDiff | None = None
        self.allowed: list[str] = []

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
        base = cell.baseline  # a serial cell is its own baseline: no set_baseline() came
        self.baseline_label = base.label + (" (reused from the catalog)" if base.reused else "")
        self._sides = (cell.result, base.result, (cell.name, base.label))
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

    def static_html(self) -> str:
        """The view as it stands, as HTML without widgets (see ``widgets._static``)."""
        if self.widget.layout.display == "none":
            return ""
        shown = self.timeline.value and self.timeline.layout.display != "none"
        timeline = svg_image(self.timeline.value, "differences over time") if shown else ""
        return (
            f"<div class='restream-diff' style='color:{FG}'>{self.header.value}"
            f"{self.counts.value}{timeline}{self.sample_rows.value}</div>"
        )

    def static_text(self) -> str:
        """The header, then the diff as text (what a terminal shows)."""
        if self.widget.layout.display == "none":
            return ""
        header = html.unescape(re.sub(r"<[^>]+>", "", self.header.value))
        if self.last is None:
            return header
        body = self.last.summary() if isinstance(self.last, KeyDiff) else self.last.text()
        return f"{header}\n{body}"

    def _render(self, d: Diff | KeyDiff, partial: str | None, serial_check: bool = False) -> None:
        self.last = d
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
        self.timeline.layout.display = "none"
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
        self.timeline.value = "" if d.empty else timeline_svg(d)
        self.timeline.layout.display = None if not d.empty else "none"
        parts = []
        for name, t in d.tables.items():
            for kind in ("added", "removed", "changed"):
                frame = getattr(t, kind)
                if frame.height:
                    parts.append(
                        f"<p><b>{html.escape(name)}</b>, {kind} ({frame.height:,}), first rows:</p>"
                        + shown_rows(frame.head(self.samples), t.rank)._repr_html_()
                    )
        self.sample_rows.value = "".join(parts) + (LEGEND if parts else "")

    # -- choosing the fields to compare by --------------------------------------------------

    def _show_picker(self) -> None:
        """Fields of the output tables to compare by (rows of both sides): a text box that
        compares when one presses Enter or leaves it, and a button."""
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
        self.allowed = fields
        chosen = [f for f in (self.by or "").split(",") if f in fields]
        # A plain text box: it takes typing in every frontend (a tags box did not, in
        # JupyterLab 4); its value reaches the kernel on Enter or when it loses focus.
        self.fields = w.Text(
            value=", ".join(chosen), placeholder="field, field (empty: row by row)",
            continuous_update=False, layout=w.Layout(width="260px"),
        )  # fmt: skip
        self.fields.observe(lambda change: self._typed(change["new"]), names="value")
        button = w.Button(description="compare", tooltip="diff by these fields (none: by row)")
        button.on_click(lambda _b: self._typed(self.fields.value))
        self.picker_note = w.HTML(
            f"<span style='font-size:90%;color:{MUTED}'>fields: {html.escape(', '.join(fields))}"
            "</span>"
        )
        self.picker.children = (w.HTML("compare by&nbsp;"), self.fields, button, self.picker_note)
        self.picker.layout.display = None

    def _typed(self, text: str) -> None:
        """Compare by the fields typed (commas or spaces between them); name unknown ones."""
        fields = [f for f in text.replace(",", " ").split() if f]
        unknown = [f for f in fields if f not in self.allowed]
        if unknown:
            self.picker_note.value = (
                f"<span style='color:#b00'>no field {html.escape(', '.join(unknown))}; "
                f"fields: {html.escape(', '.join(self.allowed))}</span>"
            )
            return
        self.picker_note.value = (
            f"<span style='font-size:90%;color:{MUTED}'>fields: "
            f"{html.escape(', '.join(self.allowed))}</span>"
        )
        self.compare_by(fields)

    def compare_by(self, fields: list[str]) -> Diff | KeyDiff:
        """Recompute the diff by ``fields`` (row by row when empty) and show it."""
        assert self._sides is not None
        ours, theirs, labels = self._sides
        self.by = ",".join(fields) or None
        d = diff(ours, theirs, by=self.by, labels=labels) if self.by else diff(ours, theirs)
        self._render(d, partial=None)
        return d
