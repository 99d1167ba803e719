"""The sweep view of a ``%%restream NAME --sweep ...`` cell: rows per output table against the
swept parameters, a table of the variants, and the diff of the variant one clicks.

One varying parameter draws a line per output table (rows against the parameter's values);
two draw a heatmap of one table's rows (a menu picks the table); more draw a line per table
against the variants in grid order. A click on a point, a heatmap cell or a variant's button
shows that variant's diff against the cell's baseline in the ordinary diff view.
"""

from __future__ import annotations

import html
import re
from typing import Any

import ipywidgets as w
import plotly.graph_objects as go

from widgets._static import FG, line_chart_svg, svg_image
from widgets.diff_view import DiffView

__all__ = ["SweepView", "VIEWS", "sweep_figure", "sweep_text", "table_names"]

#: The sweep view each ``--sweep`` cell showed last, by the cell's name (so that code in the
#: notebook, and its tests, can reach the view a cell made).
VIEWS: dict[str, SweepView] = {}


def table_names(cell: Any) -> list[str]:
    """The output tables of a sweep (columns of ``cell.rows()`` that are not parameters)."""
    return [c for c in cell.rows().columns if c not in cell.values]


def _axis(values: list[Any]) -> list[str]:
    return [str(v) for v in values]


def sweep_figure(cell: Any, table: str | None = None) -> go.Figure:
    """Rows per output table against the swept parameters (see the module doc). Every point
    carries its variant's index as ``customdata``."""
    frame, varying = cell.rows(), cell.varying
    tables = table_names(cell)
    layout = dict(
        height=320,
        margin=dict(l=50, r=10, t=40, b=40),
        yaxis_title="rows",
        clickmode="event",
        hovermode="closest",
    )
    fig = go.Figure(layout=layout)
    index = list(range(frame.height))
    if len(varying) == 2:
        table = table if table in tables else (tables[0] if tables else None)
        xs, ys = (cell.values[p] for p in varying)
        z = [[None] * len(xs) for _ in ys]
        custom = [[None] * len(xs) for _ in ys]
        for i, v in enumerate(cell.variants):
            col, row = xs.index(v.params[varying[0]]), ys.index(v.params[varying[1]])
            z[row][col] = frame[table][i] if table else 0
            custom[row][col] = i
        fig.add_trace(
            go.Heatmap(
                x=_axis(xs), y=_axis(ys), z=z, customdata=custom, colorscale="Viridis",
                colorbar=dict(title="rows"), name=table or "",
                hovertemplate=f"{varying[0]}=%{{x}}<br>{varying[1]}=%{{y}}<br>"
                f"{html.escape(table or '')}: %{{z}} rows<extra></extra>",
            )
        )  # fmt: skip
        fig.update_layout(
            title=f"rows of {table} per variant", xaxis_title=varying[0], yaxis_title=varying[1]
        )
        fig.update_xaxes(type="category")
        fig.update_yaxes(type="category")
        return fig
    if len(varying) == 1:
        x, x_title = frame[varying[0]].to_list(), varying[0]
    else:
        x, x_title = [v.label for v in cell.variants], "variant"
    for table_name in tables:
        fig.add_trace(
            go.Scatter(
                x=x, y=frame[table_name].to_list(), customdata=index, name=table_name,
                mode="lines+markers", marker=dict(size=10),
            )
        )  # fmt: skip
    fig.update_layout(title="rows per output table", xaxis_title=x_title)
    if len(varying) != 1:
        fig.update_xaxes(type="category")
    return fig


def sweep_text(cell: Any) -> str:
    """What a text-mode cell prints: how the sweep ran, the rows per variant, and each
    variant's difference from the baseline in one line."""
    s = cell.sweep
    how = "in one scan" if s.single_scan else "as separate replays"
    lines = [
        f"swept {len(s)} variants of {cell.name} over {s.events:,} events {how} on {s.engine} "
        f"in {s.wall_s:.2f} s (shared: {', '.join(s.shared_handlers) or 'none'}; per variant: "
        f"{', '.join(s.variant_handlers) or 'none'})",
        *(f"warning: {note}" for note in s.warnings),
        str(cell.rows()),
        f"each variant against {cell.baseline.label}:",
    ]
    for i, v in enumerate(cell.variants):
        lines.append(f"  [{i}] {v.label}: {_diff_words(cell.diff(i))}")
    return "\n".join(lines)


def _diff_words(d: Any) -> str:
    if d.empty:
        return "identical"
    return "; ".join(
        f"{name} " + ", ".join(f"{n:,} {kind.replace('_', ' ')}" for kind, n in t.counts.items())
        for name, t in d.tables.items()
        if any(t.counts[k] for k in t.counts if k != "same")
    )


class SweepView:
    """The figure, the variants' table and the selected variant's diff."""

    def __init__(self) -> None:
        self.header = w.HTML("<b>sweep</b>: waiting for the replay")
        self.table_picker = w.Dropdown(description="table", layout=w.Layout(display="none"))
        self.table_picker.observe(lambda change: self._draw(change["new"]), "value")
        self.figure: go.FigureWidget | None = None
        self.figure_box = w.Box([])
        self.variant_table = w.GridBox([])
        self.buttons: list[w.Button] = []
        self.diff_view = DiffView()
        self.diff_view.header.value = "<i>click a variant to see its diff against the baseline</i>"
        self.widget = w.VBox(
            [
                self.header,
                self.table_picker,
                self.figure_box,
                self.variant_table,
                self.diff_view.widget,
            ],
            layout=w.Layout(max_width="1000px"),
        )
        self.cell: Any = None
        self.selected: int | None = None

    def finish(self, cell: Any) -> None:
        """Draw a finished sweep; nothing for a failed or cancelled one (the cell says why)."""
        if cell.error is not None:
            self.widget.layout.display = "none"
            return
        self.cell = cell
        s = cell.sweep
        how = "one scan" if s.single_scan else "separate replays"
        warnings = "".join(
            f"<div style='color:#a60;font-size:90%'>{html.escape(n)}</div>" for n in s.warnings
        )
        self.header.value = (
            f"<b>sweep of {html.escape(', '.join(cell.values))}</b>: {len(s)} variants over "
            f"{s.events:,} events in {s.wall_s:.2f} s ({how} on {html.escape(s.engine)}); "
            f"shared: {html.escape(', '.join(s.shared_handlers) or 'none')}, per variant: "
            f"{html.escape(', '.join(s.variant_handlers) or 'none')}{warnings}"
        )
        tables = table_names(cell)
        if len(cell.varying) == 2 and len(tables) > 1:
            self.table_picker.options = tables
            self.table_picker.value = tables[0]  # which draws it
            self.table_picker.layout.display = None
        if self.figure is None:
            self._draw(tables[0] if tables else None)
        self._fill_table(tables)

    def static_html(self) -> str:
        """The sweep as HTML without widgets: the header, rows per variant as an SVG chart and
        a table (see ``widgets._static``)."""
        cell = self.cell
        if cell is None:
            return f"<div style='color:{FG}'>{self.header.value}</div>"
        frame, tables, params = cell.rows(), table_names(cell), list(cell.values)
        if len(cell.varying) == 1:
            x, x_title = frame[cell.varying[0]].to_list(), cell.varying[0]
        else:
            x, x_title = [v.label for v in cell.variants], "variant"
        chart = line_chart_svg(
            x, {t: frame[t].to_list() for t in tables}, title="rows per output table",
            x_title=x_title,
        )  # fmt: skip
        head = "".join(f"<th>{html.escape(h)}</th>" for h in ["", *params, *tables])
        body = "".join(
            f"<tr><td>[{i}]</td>"
            + "".join(f"<td>{html.escape(str(frame[p][i]))}</td>" for p in params)
            + "".join(f"<td>{frame[t][i]:,}</td>" for t in tables)
            + f"<td>{html.escape(_diff_words(cell.diff(i)))}</td></tr>"
            for i in range(len(cell.variants))
        )
        return (
            f"<div class='restream-sweep' style='color:{FG}'>{self.header.value}<br>"
            f"{svg_image(chart, 'rows per output table')}"
            f"<table style='font-size:90%'><tr>{head}<th>against the baseline</th></tr>{body}"
            "</table></div>"
        )

    def static_text(self) -> str:
        return (
            html.unescape(re.sub(r"<[^>]+>", "", self.header.value))
            if self.cell is None
            else (sweep_text(self.cell))
        )

    def _draw(self, table: str | None) -> None:
        if self.cell is None:
            return
        fig = go.FigureWidget(sweep_figure(self.cell, table))
        fig.layout.width = None
        for trace in fig.data:
            trace.on_click(self.on_plot_click)
        self.figure = fig
        self.figure_box.children = (fig,)

    def _fill_table(self, tables: list[str]) -> None:
        cell = self.cell
        params = list(cell.values)
        head = ["", *params, *tables]
        cells: list[w.Widget] = [w.HTML(f"<b>{html.escape(h)}</b>") for h in head]
        frame = cell.rows()
        self.buttons = []
        for i, _v in enumerate(cell.variants):
            button = w.Button(
                description=f"diff [{i}]", tooltip="show this variant's diff against the baseline",
                layout=w.Layout(width="auto"),
            )  # fmt: skip
            button.on_click(lambda _b, i=i: self.select(i))
            self.buttons.append(button)
            cells.append(button)
            cells += [w.Label(str(frame[p][i])) for p in params]
            cells += [w.Label(f"{frame[t][i]:,}") for t in tables]
        self.variant_table.children = cells
        self.variant_table.layout = w.Layout(
            grid_template_columns=" ".join(["auto"] * len(head)), grid_gap="2px 12px"
        )

    def on_plot_click(self, trace: Any, points: Any, _state: Any = None) -> Any:
        """The figure's click handler: show the diff of the variant under the click."""
        if not points.point_inds:
            return None
        where = points.point_inds[0]
        custom = trace.customdata
        if trace.type == "heatmap":
            row, col = where if isinstance(where, (list, tuple)) else divmod(where, len(trace.x))
            index = custom[row][col]
        else:
            index = custom[where]
        return None if index is None else self.select(int(index))

    def select(self, index: int) -> Any:
        """Show variant ``index``'s diff against the baseline (its button highlighted)."""
        cell = self.cell
        variant = cell.variant(index)
        d = cell.diff(index)
        label = f"{cell.name}[{variant.label}]"
        self.diff_view.by = ",".join(cell.by) if isinstance(cell.by, list) else cell.by
        self.diff_view.show(
            d,
            f"{cell.baseline.label} (variant {label} compared with it)",
            results=(variant.result, cell.baseline.result, (label, cell.baseline.label)),
        )
        for i, button in enumerate(self.buttons):
            button.button_style = "info" if i == index else ""
        self.selected = index
        return d
