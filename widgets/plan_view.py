"""The plan view: the handler DAG with its critical path, stages, hot keys, predicted speedup."""

from __future__ import annotations

import html

import ipywidgets as w
import plotly.graph_objects as go

from restream_kit.planner.plan import Plan
from widgets.plan_figures import dag_figure, hot_keys_figure, speedup_figure

__all__ = ["PlanView", "stages_html"]


def stages_html(plan: Plan) -> str:
    """The stages as an HTML table: handlers, mode, partition key, and why when sequential."""
    rows = []
    for stage in plan.stages:
        why = html.escape(stage.reason or "")
        key = html.escape(stage.partition_key or "")
        rows.append(
            f"<tr><td>{html.escape(stage.name)}</td><td>{html.escape(', '.join(stage.handlers))}</td>"
            f"<td>{html.escape(stage.mode)}</td><td><code>{key}</code></td><td>{why}</td></tr>"
        )
    return (
        "<table><tr><th>stage</th><th>handlers</th><th>mode</th><th>partition key</th>"
        f"<th>why</th></tr>{''.join(rows)}</table>"
    )


class PlanView:
    """What the planner says about a program, drawn with plotly FigureWidgets."""

    def __init__(self, plan: Plan, name: str):
        dag = dag_figure(plan)
        dag.update_layout(title=f"Handler DAG of {name}: critical path highlighted")
        children: list[w.Widget] = [
            w.HTML(
                f"<b>plan of {html.escape(name)}</b>: critical path "
                f"{html.escape(' → '.join(plan.critical_path))}"
            ),
            go.FigureWidget(dag),
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
            figures = [go.FigureWidget(speedup_figure(plan))]
            if any(load.hot_keys for load in plan.data.per_stage):
                figures.insert(0, go.FigureWidget(hot_keys_figure(plan)))
            else:
                children.append(
                    w.HTML("no partitioned or sequential stage: no key limits parallelism")
                )
            children.append(w.HBox(figures))
        self.widget = w.VBox(children)
