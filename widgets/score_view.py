"""Scores against labels in a ``%%restream NAME --labels FILE --by FIELD`` cell.

A run's cell shows its scores beside its baseline's (one column per side and table), and the
keys that changed class from the baseline (newly caught, newly missed, new false alarms,
false alarms gone), each with a button that explains its first alert (``rk.explain``). A
``--sweep`` cell plots precision against recall for every variant, one trace per output
table, with the Pareto front drawn through the variants no other beats on both; a click on
a point opens that variant in the sweep view (its diff against the baseline).
"""

from __future__ import annotations

import html
from collections.abc import Callable
from typing import Any

import ipywidgets as w
import plotly.graph_objects as go
import polars as pl

from restream_kit.iterate.explain import explain
from restream_kit.iterate.score import (
    Scores,
    changed_keys,
    format_duration,
    score,
    score_sweep,
)
from restream_kit.model.program import Program

__all__ = [
    "ScoreView",
    "ParetoView",
    "VIEWS",
    "scores_html",
    "scores_text",
    "sweep_scores_text",
    "pareto_figure",
    "show_scores",
]

#: The score view each cell showed last, by the cell's name (for code and tests to reach).
VIEWS: dict[str, Any] = {}
#: Changed keys listed with an explain button (the rest are counted).
SHOWN_KEYS = 12

_ROWS = (
    ("precision", "precision"),
    ("recall", "recall"),
    ("f1", "F1"),
    ("tp", "true positives"),
    ("fp", "false positives"),
    ("fn", "false negatives"),
    ("alerts", "alerts"),
    ("alerts_per_day", "alerts per day"),
    ("delay_p50_ms", "time to detect, median"),
    ("delay_p90_ms", "time to detect, p90"),
    ("early", "alerted before the label"),
    ("timely", "timely"),
)


def _cell(key: str, value: Any) -> str:
    if value is None:
        return "–"
    if key.startswith("delay"):
        return format_duration(value)
    if isinstance(value, float):
        return f"{value:.3f}" if key in ("precision", "recall", "f1") else f"{value:,.1f}"
    return f"{value:,}"


def scores_html(sides: list[tuple[str, Scores]]) -> str:
    """An HTML table: a row per measure, a column per side and table (side by side)."""
    columns = [(label, name, s.tables[name].to_dict()) for label, s in sides for name in s.tables]
    head = "".join(
        f"<th style='padding:2px 10px'>{html.escape(label)}<br><i>{html.escape(name)}</i></th>"
        for label, name, _ in columns
    )
    body = "".join(
        f"<tr><td style='padding:2px 10px'>{title}</td>"
        + "".join(
            f"<td style='text-align:right;padding:2px 10px'>{_cell(key, d[key])}</td>"
            for _l, _n, d in columns
        )
        + "</tr>"
        for key, title in _ROWS
    )
    return f"<table><tr><th></th>{head}</tr>{body}</table>"


def scores_text(sides: list[tuple[str, Scores]], changes: pl.DataFrame | None = None) -> str:
    """The text form: each side's one line per table, then the changed keys counted."""
    lines = [f"{label}: {line}" for label, s in sides for line in s.summary().splitlines()]
    if changes is not None:
        counts = changes.group_by("change").len().sort("change").iter_rows()
        lines.append(
            "keys that changed class: " + (", ".join(f"{n:,} {c}" for c, n in counts) or "none")
        )
    return "\n".join(lines)


def sweep_scores_text(frame: pl.DataFrame) -> str:
    """The text form of a sweep's scores: a line per variant and table."""
    lines = ["scores against the labels, per variant:"]
    for r in frame.iter_rows(named=True):
        front = ", on the Pareto front" if r["pareto"] else ""
        lines.append(
            f"  {r['variant']}: {r['table']}: precision {_cell('precision', r['precision'])}, "
            f"recall {_cell('recall', r['recall'])}, F1 {_cell('f1', r['f1'])} "
            f"({r['tp']:,} TP, {r['fp']:,} FP, {r['fn']:,} FN){front}"
        )
    return "\n".join(lines)


class ScoreView:
    """A run's scores beside its baseline's, and the keys that changed class."""

    def __init__(self, explain: Callable[[str], Any] | None = None) -> None:
        self.header = w.HTML("<b>scores against the labels</b>")
        self.table = w.HTML()
        self.changes_box = w.GridBox([])
        self.explanation = w.Output()
        self.widget = w.VBox([self.header, self.table, self.changes_box, self.explanation])
        self.explain = explain
        self.changes: pl.DataFrame | None = None
        self.buttons: list[w.Button] = []

    def show(self, sides: list[tuple[str, Scores]]) -> None:
        """Draw ``sides`` (label, scores); with two, the keys that changed from the second."""
        labels = sides[0][1].labels
        self.header.value = (
            f"<b>scores against the labels</b> ({html.escape(labels.source)}: "
            f"{labels.positives:,} labelled keys, by {html.escape(', '.join(labels.by))})"
        )
        self.table.value = scores_html(sides)
        if len(sides) == 2:
            self.changes = changed_keys(sides[0][1], sides[1][1])
            self._fill_changes(sides[0][1].by, sides[0][0])

    def _fill_changes(self, by: tuple[str, ...], label: str) -> None:
        changes = self.changes
        assert changes is not None
        counts = ", ".join(
            f"{n:,} {c}" for c, n in changes.group_by("change").len().sort("change").iter_rows()
        )
        head = [
            w.HTML(f"<b>keys that changed class in {html.escape(label)}</b>: {counts or 'none'}")
        ]
        cells: list[w.Widget] = []
        self.buttons = []
        for row in changes.head(SHOWN_KEYS).iter_rows(named=True):
            key = ", ".join(f"{f}={row[f]!r}" for f in by)
            cells += [
                w.Label(row["table"]),
                w.Label(key),
                w.Label(row["change"]),
            ]
            button = w.Button(description="explain", layout=w.Layout(width="auto"))
            button.disabled = self.explain is None or row["first_row"] is None
            button.tooltip = f"explain {row['first_row']}"
            button.on_click(lambda _b, ref=row["first_row"]: self.explain_row(ref))
            self.buttons.append(button)
            cells.append(button)
        grid = w.GridBox(
            cells, layout=w.Layout(grid_template_columns="auto auto auto auto", grid_gap="2px 12px")
        )
        self.changes_box.children = (*head, grid) if cells else tuple(head)

    def explain_row(self, ref: str) -> Any:
        """Explain the row ``ref`` (``TABLE:LSN:SEQ:N``) below the list."""
        if self.explain is None:
            return None
        self.explanation.clear_output()
        with self.explanation:
            try:
                found = self.explain(ref)
                print(found.text())
            except Exception as exc:  # noqa: BLE001 - shown in the view, the cell is done
                print(f"cannot explain {ref}: {exc}")
                found = None
        return found


def pareto_figure(frame: pl.DataFrame) -> go.Figure:
    """Precision against recall, a trace per output table (``score_sweep``'s frame), with the
    Pareto front as a line; each point carries its variant's index as ``customdata``."""
    fig = go.Figure(
        layout=dict(
            height=360,
            margin=dict(l=50, r=10, t=40, b=40),
            title="precision against recall per variant (line: the Pareto front)",
            xaxis=dict(title="recall", range=[-0.02, 1.02]),
            yaxis=dict(title="precision", range=[-0.02, 1.02]),
            clickmode="event",
            hovermode="closest",
        )
    )
    frame = frame.with_row_index("_i")
    variants = frame["variant"].unique(maintain_order=True).to_list()
    for table in frame["table"].unique(maintain_order=True).to_list():
        part = frame.filter(pl.col("table") == table)
        index = [variants.index(v) for v in part["variant"]]
        fig.add_trace(
            go.Scatter(
                x=part["recall"].to_list(),
                y=part["precision"].to_list(),
                customdata=index,
                text=part["variant"].to_list(),
                mode="markers",
                name=table,
                marker=dict(
                    size=[12 if p else 8 for p in part["pareto"]],
                    symbol=["diamond" if p else "circle" for p in part["pareto"]],
                ),
                hovertemplate="%{text}<br>recall %{x:.3f}, precision %{y:.3f}<extra>"
                + html.escape(table)
                + "</extra>",
            )
        )
        front = part.filter(pl.col("pareto")).sort("recall")
        fig.add_trace(
            go.Scatter(
                x=front["recall"].to_list(),
                y=front["precision"].to_list(),
                mode="lines",
                line=dict(dash="dot"),
                name=f"{table}: Pareto front",
                hoverinfo="skip",
            )
        )
    return fig


class ParetoView:
    """The precision-recall figure of a sweep; a click on a variant calls ``on_select(i)``."""

    def __init__(self, frame: pl.DataFrame, on_select: Callable[[int], Any] | None = None):
        self.frame = frame
        self.on_select = on_select
        self.figure = go.FigureWidget(pareto_figure(frame))
        for trace in self.figure.data:
            if trace.mode == "markers":
                trace.on_click(self.on_plot_click)
        front = frame.filter(pl.col("pareto"))["variant"].unique(maintain_order=True).to_list()
        self.header = w.HTML(
            "<b>scores against the labels</b>: on the Pareto front: "
            + html.escape(", ".join(front) or "none")
            + " <i>(click a variant to open it)</i>"
        )
        self.widget = w.VBox([self.header, self.figure], layout=w.Layout(max_width="1000px"))
        self.selected: int | None = None

    def on_plot_click(self, trace: Any, points: Any, _state: Any = None) -> Any:
        if not points.point_inds:
            return None
        self.selected = int(trace.customdata[points.point_inds[0]])
        return self.on_select(self.selected) if self.on_select is not None else None


def show_scores(
    workbench: Any,
    cell: Any,
    labels: str,
    by: str,
    *,
    mode: str = "widgets",
    display: Callable[..., Any] | None = None,
) -> Any:
    """Score a finished cell against ``labels`` by ``by`` and show it: a run beside its
    baseline (:class:`ScoreView`), a sweep as a precision-recall plot (:class:`ParetoView`)."""
    from IPython.display import display as ipython_display

    show = display or ipython_display
    if getattr(cell, "sweep", None) is not None:
        frame = score_sweep(cell.sweep, labels, by)
        if mode == "text":
            print(sweep_scores_text(frame))
            return frame
        from widgets.sweep_view import VIEWS as SWEEPS

        sweep_view = SWEEPS.get(cell.name)
        view = ParetoView(frame, sweep_view.select if sweep_view is not None else None)
        VIEWS[cell.name] = view
        show(view.widget)
        return view
    sides = [(cell.name, score(cell.result, labels, by, name=cell.name))]
    if cell.baseline is not None:
        base = cell.baseline
        sides.append((base.label, score(base.result, sides[0][1].labels, by, name=base.label)))
    if mode == "text":
        changes = changed_keys(sides[0][1], sides[1][1]) if len(sides) == 2 else None
        print(scores_text(sides, changes))
        return sides
    view = ScoreView(_explainer(workbench, cell))
    view.show(sides)
    VIEWS[cell.name] = view
    show(view.widget)
    return view


def _explainer(workbench: Any, cell: Any) -> Callable[[str], Any] | None:
    """``explain`` of a row between the cell's program and its baseline's, on the cell's log."""
    base = cell.baseline
    if base is None or base.record is None:
        return None

    def run(ref: str) -> Any:
        theirs = Program.load(workbench.catalog.program_source(base.record.run_id))
        return explain(cell.program, theirs, ref, log=cell.log, labels=(cell.name, base.label))

    return run
