"""The plan view: the handler DAG beside the text plan, hot keys and predicted speedup folded.

Compact on purpose: it sits under the replay's monitor, and fits a 1,000 px notebook. The text
plan is the one ``restream plan`` prints (which handler reads and writes which state, by line).
The hot keys and speedup charts are drawn only when their section is opened.
"""

from __future__ import annotations

import html
import re

import ipywidgets as w
import plotly.graph_objects as go

from restream_kit.planner import Plan
from restream_kit.planner.render import plan_text
from widgets._static import FG, line_chart_svg, stacked_bars_svg, svg_image
from widgets.plan_figures import MODE_COLORS, dag_svg, hot_keys_figure, speedup_figure

__all__ = ["PlanView", "charts_html", "stages_html", "WIDTH_PX"]

#: The widest a view gets: a notebook at 1,000 px shows all of it.
WIDTH_PX = 1000
DAG_HEIGHT_PX = 320


def stages_html(plan: Plan) -> str:
    """The stages as an HTML table: handlers, mode, partition key, and why."""
    rows = []
    for stage in plan.stages:
        why = stage.reason or (
            "reads only what earlier stages wrote: events run in any split"
            if stage.label == "per event"
            else "writes no state"
            if stage.label == "stateless"
            else ""
        )
        key = html.escape(stage.partition_key or "")
        rows.append(
            f"<tr><td>{html.escape(stage.name)}</td><td>{html.escape(', '.join(stage.handlers))}</td>"
            f"<td>{html.escape(stage.label)}</td><td><code>{key}</code></td>"
            f"<td>{html.escape(why)}</td></tr>"
        )
    return (
        "<table style='font-size:90%'><tr><th>stage</th><th>handlers</th><th>mode</th>"
        f"<th>partition key</th><th>why</th></tr>{''.join(rows)}</table>"
    )


def charts_html(plan: Plan) -> str:
    """The hot keys and predicted speedup charts as folded sections of SVG images, for the
    static form of the view (the widget draws them with plotly when opened); empty without a
    log."""
    data = plan.data
    if data is None:
        return ""
    hot = []
    for s in (s for s in data.per_stage if s.hot_keys):
        title = (
            f"{s.stage} (by {plan.stage(s.stage).partition_key}): heaviest key "
            f"{s.heaviest_share:.1%} of the stage's work"
        )
        colour = MODE_COLORS.get(s.mode, "#1f77b4")
        svg = stacked_bars_svg(
            [str(k) for k, _n in s.hot_keys], {"events": (colour, [n for _k, n in s.hot_keys])},
            title=title, every_label=True,
        )  # fmt: skip
        hot.append(svg_image(svg, f"hot keys of {s.stage}"))
    workers = [p for p, _s in data.predicted_speedup]
    speedup = line_chart_svg(
        workers,
        {"ideal (P)": workers, "predicted": [s for _p, s in data.predicted_speedup]},
        title=f"Predicted speedup of {plan.program}",
        x_title="workers P",
    )
    return (
        "<details><summary>hot keys</summary>"
        f"{''.join(hot) or 'no partitioned stage'}</details>"
        "<details><summary>predicted speedup</summary>"
        f"{svg_image(speedup, f'predicted speedup of {plan.program}')}</details>"
    )


def _summary(plan: Plan, name: str) -> str:
    limited = [s for s in plan.stages if s.mode in ("partitioned", "sequential")]
    if plan.data is not None:
        speedups = dict(plan.data.predicted_speedup)
        best = max(speedups.items(), key=lambda kv: kv[0]) if speedups else None
        speed = f"; predicted speedup {best[1]:.1f}x on {best[0]} workers" if best else ""
    else:
        speed = ""
    limit = (
        f"; {len(limited)} stage(s) limited by a key"
        if limited
        else "; no stage is limited by a key"
    )
    return (
        f"<b>plan of {html.escape(name)}</b>: {len(plan.handlers)} handler(s), "
        f"{len(plan.stages)} stage(s), critical path "
        f"{html.escape(' → '.join(plan.critical_path) or '(empty)')}{limit}{speed}"
    )


def _layout_html(engine: str, stages: dict[str, str]) -> str:
    """How ``engine`` will run each stage, said before the replay (a one-task stage in red)."""
    items = []
    for stage, how in stages.items():
        colour = "#b00" if "one task" in how else "#333"
        items.append(
            f"<span style='color:{colour}'>{html.escape(stage)}: {html.escape(how)}</span>"
        )
    return f"<br><b>on {html.escape(engine)}</b>: " + "; ".join(items)


class PlanView:
    """What the planner says about a program, folded to its one-line summary unless ``open``
    (a button unfolds the DAG, the text plan, the stages and the charts)."""

    def __init__(
        self,
        plan: Plan,
        name: str,
        layout: tuple[str, dict[str, str]] | None = None,
        open: bool = False,  # noqa: A002 - the word a reader expects
    ):
        self.plan = plan
        self.name = name
        self.summary = _summary(plan, name) + (_layout_html(*layout) if layout else "")
        self.warnings = "<br>".join(
            f"⚠ line {x.lineno}: {html.escape(x.message)}" for x in plan.warnings
        )
        self.toggle = w.ToggleButton(
            value=open, description="plan", icon="sitemap", tooltip="show or fold the plan",
            layout=w.Layout(width="auto", flex="0 0 auto"),
        )  # fmt: skip
        self.toggle.observe(self._unfold, names="value")
        self.details = w.VBox([], layout=w.Layout(display="none"))
        head = w.HBox(
            [self.toggle, w.HTML(self.summary, layout=w.Layout(margin="0 0 0 8px"))],
            layout=w.Layout(align_items="center"),
        )
        children: list[w.Widget] = [head]
        if self.warnings:
            children.append(w.HTML(self.warnings))
        self.widget = w.VBox([*children, self.details], layout=w.Layout(max_width=f"{WIDTH_PX}px"))
        self.dag: w.HTML | None = None
        if open:
            self._unfold({"new": True})

    def _unfold(self, change) -> None:
        """Show (drawing it the first time) or fold the plan's details."""
        if change["new"] and not self.details.children:
            self.details.children = self._details()
        self.details.layout.display = None if change["new"] else "none"

    def _details(self) -> list[w.Widget]:
        plan = self.plan
        # A static SVG sized to its content: a plotly widget would cost the cell seconds.
        self.dag = w.HTML(
            f"<div style='font-size:12px;font-weight:bold'>Handler DAG of "
            f"{html.escape(self.name)}</div>{dag_svg(plan)}",
            layout=w.Layout(overflow="auto", flex="0 1 auto"),
        )
        text = w.HTML(
            f"<pre style='font-size:85%;line-height:1.25;margin:0'>"
            f"{html.escape(plan_text(plan))}</pre>",
            layout=w.Layout(
                max_height=f"{DAG_HEIGHT_PX}px", overflow="auto", flex="1 1 40%",
                border="1px solid var(--jp-border-color2, #ddd)", padding="2px 4px",
            ),
        )  # fmt: skip
        children: list[w.Widget] = [
            w.HBox([self.dag, text], layout=w.Layout(grid_gap="12px")),
            w.HTML(stages_html(plan)),
        ]
        if plan.data is not None:
            self.charts = w.Accordion([w.VBox([]), w.VBox([])], selected_index=None)
            self.charts.set_title(0, "hot keys")
            self.charts.set_title(1, "predicted speedup")
            self.charts.observe(self._open, names="selected_index")
            children.append(self.charts)
        return children

    def static_html(self) -> str:
        """The plan as HTML without widgets: the summary, then the DAG, the stages and the
        charts folded in a ``<details>`` (see ``widgets._static``)."""
        warnings = f"<div>{self.warnings}</div>" if self.warnings else ""
        return (
            f"<div class='restream-plan' style='color:{FG}'>{self.summary}{warnings}"
            f"<details><summary>plan</summary>"
            f"{svg_image(dag_svg(self.plan), f'handler DAG of {self.name}')}{stages_html(self.plan)}"
            f"{charts_html(self.plan)}</details></div>"
        )

    def static_text(self) -> str:
        return html.unescape(re.sub(r"<[^>]+>", "", self.summary.replace("<br>", "\n")))

    def _open(self, change) -> None:
        """Draw a folded chart the first time its section is opened."""
        index = change["new"]
        if index is None or self.charts.children[index].children:
            return
        figure = (hot_keys_figure if index == 0 else speedup_figure)(self.plan)
        figure.update_layout(width=None, height=320, margin={"l": 50, "r": 10, "t": 40, "b": 40})
        self.charts.children[index].children = (go.FigureWidget(figure),)
