"""The plan view: the handler DAG beside the text plan, hot keys and predicted speedup folded.

Compact on purpose: it sits under the replay's monitor, and fits a 1,000 px notebook. The text
plan is the one ``restream plan`` prints (which handler reads and writes which state, by line).
The hot keys and speedup charts are drawn only when their section is opened.
"""

from __future__ import annotations

import html

import ipywidgets as w
import plotly.graph_objects as go

from restream_kit.planner import Plan
from restream_kit.planner.render import plan_text
from widgets.plan_figures import dag_svg, hot_keys_figure, speedup_figure

__all__ = ["PlanView", "stages_html", "WIDTH_PX"]

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
    """What the planner says about a program: DAG and text plan, charts folded."""

    def __init__(self, plan: Plan, name: str, layout: tuple[str, dict[str, str]] | None = None):
        self.plan = plan
        # A static SVG: a plotly widget would cost the first cell seconds in the browser.
        self.dag = w.HTML(
            f"<div style='font-size:12px;font-weight:bold'>Handler DAG of {html.escape(name)}</div>"
            + dag_svg(plan, width=540, height=DAG_HEIGHT_PX - 20)
        )
        text = w.HTML(
            f"<pre style='font-size:85%;line-height:1.25;margin:0'>"
            f"{html.escape(plan_text(plan))}</pre>",
            layout=w.Layout(
                max_height=f"{DAG_HEIGHT_PX}px",
                overflow="auto",
                width="45%",
                border="1px solid #ddd",
            ),
        )
        self.dag_box = w.Box([self.dag], layout=w.Layout(width="55%"))
        children: list[w.Widget] = [
            w.HTML(_summary(plan, name) + (_layout_html(*layout) if layout else "")),
            w.HBox([self.dag_box, text]),
            w.HTML(stages_html(plan)),
        ]
        if plan.warnings:
            children.append(
                w.HTML(
                    "<br>".join(
                        f"⚠ line {x.lineno}: {html.escape(x.message)}" for x in plan.warnings
                    )
                )
            )
        if plan.data is not None:
            self.charts = w.Accordion([w.VBox([]), w.VBox([])], selected_index=None)
            self.charts.set_title(0, "hot keys")
            self.charts.set_title(1, "predicted speedup")
            self.charts.observe(self._open, names="selected_index")
            children.append(self.charts)
        self.widget = w.VBox(children, layout=w.Layout(max_width=f"{WIDTH_PX}px"))

    def _open(self, change) -> None:
        """Draw a folded chart the first time its section is opened."""
        index = change["new"]
        if index is None or self.charts.children[index].children:
            return
        figure = (hot_keys_figure if index == 0 else speedup_figure)(self.plan)
        figure.update_layout(width=None, height=320, margin={"l": 50, "r": 10, "t": 40, "b": 40})
        self.charts.children[index].children = (go.FigureWidget(figure),)
