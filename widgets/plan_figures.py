"""Figures of a plan (plotly): the DAG of handlers and state, hot keys, predicted speedup.

Each function takes a :class:`restream_kit.planner.Plan` and returns a
``plotly.graph_objects.Figure``; ``save_image`` writes one as a static image (PNG or SVG)
for the README, which needs plotly's image export (kaleido).
"""

from __future__ import annotations

from html import escape
from pathlib import Path
from typing import Any

import networkx as nx
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from restream_kit.planner import Plan

__all__ = [
    "MODE_COLORS",
    "dag_figure",
    "dag_svg",
    "hot_keys_figure",
    "speedup_figure",
    "save_image",
]

MODE_COLORS = {
    "stateless": "#2ca02c",
    "per event": "#17becf",
    "partitioned": "#1f77b4",
    "broadcast-read": "#ff7f0e",
    "sequential": "#d62728",
}
CRITICAL = "#b8860b"
STATE_COLOR = "#f2f2f2"
EDGE_COLOR = "#9a9a9a"


def _graph(plan: Plan) -> nx.DiGraph:
    """Handlers and state as nodes; writes go handler -> state, reads state -> handler."""
    g = nx.DiGraph()
    index: dict[str, int] = {}  # a stage's depth: the longest chain of stages before it
    for stage in plan.stages:
        index[stage.name] = 1 + max((index[u] for u in stage.upstream), default=-1)
    stage_of = {h: s for s in plan.stages for h in s.handlers}
    for h in plan.handlers:
        g.add_node(("h", h.name), layer=2 * index[stage_of[h.name].name] + 1)
    for st in plan.states:
        writers = [h.name for h in plan.handlers if any(a.state == st.name for a in h.writes)]
        readers = [h.name for h in plan.handlers if any(a.state == st.name for a in h.reads)]
        if writers:
            layer = 2 * max(index[stage_of[w].name] for w in writers) + 2
        elif readers:
            layer = 2 * min(index[stage_of[r].name] for r in readers)
        else:
            layer = 0
        g.add_node(("s", st.name), layer=layer)
        for w in writers:
            g.add_edge(("h", w), ("s", st.name))
        for r in readers:
            g.add_edge(("s", st.name), ("h", r))
    for e in plan.edges:
        if e.state.startswith("schedule:"):
            g.add_edge(("h", e.src), ("h", e.dst), schedule=e.state.split(":", 1)[1])
    return g


def _critical_edges(plan: Plan, g: nx.DiGraph) -> set[tuple]:
    path = list(plan.critical_path)
    out = set()
    for a, b in zip(path, path[1:]):
        for e in plan.edges:
            if e.src == a and e.dst == b:
                if e.state.startswith("schedule:"):
                    out.add((("h", a), ("h", b)))
                else:
                    out.add((("h", a), ("s", e.state)))
                    out.add((("s", e.state), ("h", b)))
    return out


def dag_figure(plan: Plan) -> go.Figure:
    """The handlers (circles, coloured by their stage's mode) and state (squares) of a plan.

    Arrows go from a handler to the state it writes and from state to the handlers that read
    it; dotted arrows are scheduled events. The critical path is drawn in gold, and each stage
    is labelled with its mode and partition key.
    """
    g = _graph(plan)
    pos = nx.multipartite_layout(g, subset_key="layer", align="vertical", scale=1.0)
    critical = set(plan.critical_path)
    critical_edges = _critical_edges(plan, g)
    fig = go.Figure()
    _add_edges(fig, g, pos, critical_edges)
    _add_handlers(fig, plan, pos, critical)
    _add_states(fig, plan, pos)
    _add_stages(fig, plan, pos)
    fig.add_trace(go.Scatter(
        x=[None], y=[None], mode="lines", name="critical path",
        line={"color": CRITICAL, "width": 3},
    ))  # fmt: skip
    fig.update_layout(
        title=f"Plan of {plan.program}: critical path {' → '.join(plan.critical_path)}",
        xaxis={"visible": False},
        yaxis={"visible": False},
        plot_bgcolor="white",
        height=max(360, 110 * max(1, _widest_layer(g))),
        margin={"l": 20, "r": 20, "t": 60, "b": 20},
        legend={"orientation": "h", "y": -0.05},
    )
    return fig


def _add_edges(fig: go.Figure, g: Any, pos: dict, critical_edges: set) -> None:
    """An arrow per edge (gold on the critical path), a dotted line under scheduled events."""
    for u, v, attrs in g.edges(data=True):
        on_path = (u, v) in critical_edges
        (x0, y0), (x1, y1) = pos[u], pos[v]
        fig.add_annotation(
            x=x1, y=y1, ax=x0, ay=y0, xref="x", yref="y", axref="x", ayref="y",
            showarrow=True, arrowhead=3, arrowsize=1.2, standoff=14, startstandoff=14,
            arrowwidth=3 if on_path else 1.3,
            arrowcolor=CRITICAL if on_path else EDGE_COLOR,
            text="",
        )  # fmt: skip
        if "schedule" in attrs:
            fig.add_trace(go.Scatter(
                x=[x0, x1], y=[y0, y1], mode="lines", hoverinfo="skip", showlegend=False,
                line={"dash": "dot", "color": CRITICAL if on_path else EDGE_COLOR},
            ))  # fmt: skip


def _add_handlers(fig: go.Figure, plan: Plan, pos: dict, critical: set) -> None:
    """The handlers, one trace per stage mode, with what each reads and writes on hover."""
    stage_of = {h: s for s in plan.stages for h in s.handlers}
    for mode, color in MODE_COLORS.items():
        names = [h.name for h in plan.handlers if stage_of[h.name].label == mode]
        if not names:
            continue
        hover = []
        for name in names:
            h = plan.handler(name)
            s = stage_of[name]
            lines = [
                f"<b>{name}</b> on {', '.join(h.kinds)}",
                f"stage {s.name}: {s.label}"
                + (f" by {s.partition_key}" if s.partition_key else ""),
            ]
            lines += [
                f"{a.op} {a.state}[{a.key}] (line {a.lineno})"
                if a.key is not None
                else f"{a.op} {a.state} (line {a.lineno})"
                for a in h.accesses
            ]
            hover.append("<br>".join(lines))
        fig.add_trace(go.Scatter(
            x=[pos[("h", n)][0] for n in names],
            y=[pos[("h", n)][1] for n in names],
            mode="markers+text",
            name=mode,
            text=names,
            textposition="top center",
            hovertext=hover,
            hoverinfo="text",
            marker={
                "size": 26,
                "color": color,
                "line": {"width": [4 if n in critical else 1 for n in names],
                         "color": [CRITICAL if n in critical else "#333" for n in names]},
            },
        ))  # fmt: skip


def _add_states(fig: go.Figure, plan: Plan, pos: dict) -> None:
    """The state, as squares."""
    states = [s for s in plan.states if ("s", s.name) in pos]
    if states:
        fig.add_trace(go.Scatter(
            x=[pos[("s", s.name)][0] for s in states],
            y=[pos[("s", s.name)][1] for s in states],
            mode="markers+text",
            name="state",
            text=[s.name for s in states],
            textposition="bottom center",
            hovertext=[f"<b>{s.name}</b>: state.{s.kind} (default {s.default_repr})" for s in states],
            hoverinfo="text",
            marker={"symbol": "square", "size": 18, "color": STATE_COLOR,
                    "line": {"width": 1, "color": "#555"}},
        ))  # fmt: skip


def _add_stages(fig: go.Figure, plan: Plan, pos: dict) -> None:
    """Each stage's label (its mode and key) and, around several handlers, a dashed box."""
    for s in plan.stages:
        xs = [pos[("h", h)][0] for h in s.handlers]
        ys = [pos[("h", h)][1] for h in s.handlers]
        label = s.label + (f"<br>by {s.partition_key}" if s.partition_key else "")
        fig.add_annotation(
            x=sum(xs) / len(xs), y=max(ys), yshift=44, text=f"<i>{label}</i>", showarrow=False,
            font={"size": 10, "color": MODE_COLORS[s.label]},
        )  # fmt: skip
        if len(s.handlers) > 1:
            fig.add_shape(
                type="rect", x0=min(xs) - 0.08, x1=max(xs) + 0.08, y0=min(ys) - 0.1,
                y1=max(ys) + 0.2, line={"color": MODE_COLORS[s.label], "dash": "dash"},
                fillcolor="rgba(0,0,0,0)", layer="below",
            )  # fmt: skip


#: The DAG's SVG: pixels per character of a label, between layers and between rows.
_CHAR_PX, _LAYER_GAP_PX, _ROW_PX, _TOP_PX, _LEGEND_PX = 6.6, 36, 58, 30, 28
#: Text in the SVG follows JupyterLab's theme (dark on light, light on dark).
_TEXT = "fill:var(--jp-ui-font-color1, #222)"
_MUTED_TEXT = "fill:var(--jp-ui-font-color2, #555)"
#: A halo in the page's colour under each label, so that an edge crossing it leaves it legible.
_HALO = "paint-order:stroke;stroke:var(--jp-layout-color0, #fff);stroke-width:3px"


def _svg_layout(g: nx.DiGraph) -> tuple[dict[Any, tuple[float, float]], float, float]:
    """Node centres sized to the content: a column per layer as wide as its longest label, a
    row per node of the tallest layer; the width and height of the drawing."""
    layers: dict[int, list[Any]] = {}
    pos = nx.multipartite_layout(g, subset_key="layer", align="vertical", scale=1.0)
    for node, layer in g.nodes(data="layer"):
        layers.setdefault(layer, []).append(node)
    rows = max(len(nodes) for nodes in layers.values())
    height = _TOP_PX + rows * _ROW_PX
    centres: dict[Any, tuple[float, float]] = {}
    x = 12.0
    for layer in sorted(layers):
        nodes = sorted(layers[layer], key=lambda n: -pos[n][1])  # top to bottom as networkx
        width = max(40.0, max(len(n[1]) for n in nodes) * _CHAR_PX)
        # A layer with fewer nodes than the tallest is centred in the height.
        offset = _TOP_PX + (rows - len(nodes)) * _ROW_PX / 2
        for i, node in enumerate(nodes):
            centres[node] = (x + width / 2, offset + i * _ROW_PX + _ROW_PX / 2 - 6)
        x += width + _LAYER_GAP_PX
    return centres, x - _LAYER_GAP_PX + 12, height


def dag_svg(plan: Plan) -> str:
    """The DAG of :func:`dag_figure` as a static SVG, sized to its content (a one-handler plan
    is small): the same colours, hover text as SVG titles, text in the notebook theme's
    colour. It costs the browser nothing to draw, unlike a plotly figure widget."""
    g = _graph(plan)
    if not g.nodes:
        return "<svg width='0' height='0'></svg>"
    at, width, height = _svg_layout(g)
    stage_of = {h: s for s in plan.stages for h in s.handlers}
    used = dict.fromkeys(stage_of[h.name].label for h in plan.handlers)
    legend_width = sum(20 + _CHAR_PX * len(label) for label in used) + 110
    width = max(width, legend_width)
    height += _LEGEND_PX
    parts = [
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{width:.0f}' height='{height:.0f}' "
        f"class='restream-dag' font-family='sans-serif' font-size='11' style='{_TEXT}'>",
        "<defs>"
        + "".join(
            f"<marker id='arrow-{name}' viewBox='0 0 10 10' refX='10' refY='5' markerWidth='9' "
            "markerHeight='9' markerUnits='userSpaceOnUse' orient='auto-start-reverse'>"
            f"<path d='M0,0L10,5L0,10z' fill='{colour}'/></marker>"
            for name, colour in (("edge", EDGE_COLOR), ("critical", CRITICAL))
        )
        + "</defs>",
        *_svg_edges(plan, g, at),
        *_svg_nodes(plan, g, at, stage_of),
    ]
    legend_x, legend_y = 8.0, height - 12
    for label in used:
        parts.append(
            f"<circle cx='{legend_x + 5:.0f}' cy='{legend_y}' r='5' fill='{MODE_COLORS[label]}'/>"
            f"<text x='{legend_x + 13:.0f}' y='{legend_y + 4}'>{escape(label)}</text>"
        )
        legend_x += 20 + _CHAR_PX * len(label)
    parts.append(
        f"<line x1='{legend_x:.0f}' y1='{legend_y}' x2='{legend_x + 18:.0f}' y2='{legend_y}' "
        f"stroke='{CRITICAL}' stroke-width='3'/><text x='{legend_x + 22:.0f}' "
        f"y='{legend_y + 4}'>critical path</text></svg>"
    )
    return "".join(parts)


def _svg_edges(plan: Plan, g: nx.DiGraph, at: dict[Any, tuple[float, float]]) -> list[str]:
    critical_edges = _critical_edges(plan, g)
    parts = []
    for u, v, attrs in g.edges(data=True):
        (x0, y0), (x1, y1) = at[u], at[v]
        length = max(((x1 - x0) ** 2 + (y1 - y0) ** 2) ** 0.5, 1)
        # Stop short of the nodes so the arrowheads show.
        dx, dy = (x1 - x0) / length * 15, (y1 - y0) / length * 15
        kind = "critical" if (u, v) in critical_edges else "edge"
        colour = CRITICAL if kind == "critical" else EDGE_COLOR
        dash = " stroke-dasharray='4 3'" if "schedule" in attrs else ""
        parts.append(
            f"<line x1='{x0 + dx:.1f}' y1='{y0 + dy:.1f}' x2='{x1 - dx:.1f}' y2='{y1 - dy:.1f}' "
            f"stroke='{colour}' stroke-width='{3 if kind == 'critical' else 1.3}'{dash} "
            f"marker-end='url(#arrow-{kind})'/>"
        )
    return parts


def _svg_nodes(
    plan: Plan, g: nx.DiGraph, at: dict[Any, tuple[float, float]], stage_of: dict[str, Any]
) -> list[str]:
    """Handlers as circles with their name above, state as squares with its name below."""
    critical = set(plan.critical_path)
    parts = []
    for node in g.nodes:
        x, y = at[node]
        kind, name = node
        if kind == "h":
            stage = stage_of[name]
            h = plan.handler(name)
            hover = [f"{name} on {', '.join(h.kinds)}", f"stage {stage.name}: {stage.label}"]
            hover += [f"{a.op} {a.state} (line {a.lineno})" for a in h.accesses]
            ring = f"stroke='{CRITICAL}' stroke-width='4'" if name in critical else "stroke='#333'"
            parts.append(
                f"<g><title>{escape(chr(10).join(hover))}</title>"
                f"<circle cx='{x:.1f}' cy='{y:.1f}' r='12' fill='{MODE_COLORS[stage.label]}' "
                f"{ring}/><text x='{x:.1f}' y='{y - 17:.1f}' text-anchor='middle' "
                f"style='{_HALO}'>"
                f"{escape(name)}</text></g>"
            )
        else:
            state = next((st for st in plan.states if st.name == name), None)
            hover = f"{name}: state.{state.kind}" if state is not None else name
            parts.append(
                f"<g><title>{escape(hover)}</title><rect x='{x - 8:.1f}' y='{y - 8:.1f}' "
                f"width='16' height='16' fill='{STATE_COLOR}' stroke='#555'/>"
                f"<text x='{x:.1f}' y='{y + 21:.1f}' text-anchor='middle' "
                f"style='{_MUTED_TEXT};{_HALO}'>"
                f"{escape(name)}</text></g>"
            )
    return parts


def _widest_layer(g: nx.DiGraph) -> int:
    counts: dict[int, int] = {}
    for _, layer in g.nodes(data="layer"):
        counts[layer] = counts.get(layer, 0) + 1
    return max(counts.values(), default=1)


def _empty(title: str, message: str) -> go.Figure:
    fig = go.Figure()
    fig.add_annotation(text=message, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper")
    fig.update_layout(title=title, xaxis={"visible": False}, yaxis={"visible": False})
    return fig


def hot_keys_figure(plan: Plan) -> go.Figure:
    """A bar chart of the hottest partition keys of each partitioned stage (events per key)."""
    data = plan.data
    stages = [s for s in data.per_stage if s.hot_keys] if data else []
    title = f"Hot keys of {plan.program}"
    if not stages:
        why = "plan with a log to see hot keys" if data is None else "no partitioned stage"
        return _empty(title, why)
    fig = make_subplots(
        rows=len(stages), cols=1,
        subplot_titles=[
            f"{s.stage} (by {plan.stage(s.stage).partition_key}): heaviest key "
            f"{s.heaviest_share:.1%} of the stage's work"
            for s in stages
        ],
    )  # fmt: skip
    for i, s in enumerate(stages, 1):
        keys = [k for k, _ in s.hot_keys]
        fig.add_trace(
            go.Bar(x=keys, y=[n for _, n in s.hot_keys], name=s.stage,
                   marker_color=MODE_COLORS.get(s.mode, "#1f77b4"), showlegend=False),
            row=i, col=1,
        )  # fmt: skip
        fig.update_yaxes(title_text="events", row=i, col=1)
        fig.update_xaxes(type="category", row=i, col=1)
    fig.update_layout(title=title, height=280 * len(stages) + 60, plot_bgcolor="white")
    return fig


def speedup_figure(plan: Plan, measured: dict[int, float] | None = None) -> go.Figure:
    """The predicted speedup against the number of workers, with the ideal and measured runs."""
    data = plan.data
    title = f"Predicted speedup of {plan.program}"
    if data is None:
        return _empty(title, "plan with a log to predict the speedup")
    ps = [p for p, _ in data.predicted_speedup]
    fig = go.Figure()
    fig.add_trace(
        go.Scatter(
            x=ps, y=ps, mode="lines", name="ideal (P)", line={"dash": "dash", "color": "#999"}
        )
    )
    fig.add_trace(
        go.Scatter(
            x=ps,
            y=[s for _, s in data.predicted_speedup],
            mode="lines+markers",
            name="predicted: W / Σ max(W/P, heaviest chain)",
            line={"color": "#1f77b4", "width": 3},
        )
    )
    if measured:
        points = sorted(measured.items())
        fig.add_trace(
            go.Scatter(
                x=[p for p, _ in points],
                y=[s for _, s in points],
                mode="markers",
                name="measured",
                marker={"size": 11, "color": "#d62728", "symbol": "diamond"},
            )
        )
    fig.update_layout(
        title=title,
        xaxis={
            "title": "workers P",
            "type": "log",
            "tickvals": ps,
            "ticktext": [str(p) for p in ps],
        },
        yaxis={
            "title": "speedup over one worker",
            "type": "log",
            "tickvals": ps,
            "ticktext": [str(p) for p in ps],
        },
        plot_bgcolor="white",
        legend={"x": 0.02, "y": 0.98},
    )
    return fig


def save_image(
    fig: go.Figure, path: str | Path, *, width: int = 900, height: int | None = None
) -> Path:
    """Write ``fig`` as a static image (the format follows the suffix: .png, .svg, .pdf)."""
    path = Path(path)
    try:
        fig.write_image(str(path), width=width, height=height or fig.layout.height or 500)
    except (ValueError, ImportError, RuntimeError) as exc:
        raise RuntimeError(
            f"cannot write {path.name}: static export needs kaleido (pip install kaleido) and a "
            f"Chrome or Chromium it can find ({exc})"
        ) from exc
    return path


def main(argv: list[str] | None = None) -> None:
    """``python -m widgets.plan_figures OUT_DIR``: the README's figures, as PNG files.

    They show ``examples/plans/five_rules.py`` planned on a power-law log of 20,000 events.
    """
    import sys

    import numpy as np
    import pyarrow as pa

    from restream_kit import Log
    from restream_kit.planner import plan

    args = sys.argv[1:] if argv is None else argv
    out = Path(args[0] if args else "docs/images")
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(11)
    n, users = 20_000, 2_000
    weights = np.arange(1, users + 1, dtype=float) ** -1.5
    src = rng.choice(users, size=n, p=weights / weights.sum())
    kinds = rng.choice(["message", "friendship", "report"], size=n, p=[0.9, 0.08, 0.02])
    table = pa.table({
        "ts": np.cumsum(rng.integers(0, 2_000, n)),
        "kind": kinds,
        "src": src,
        "dst": rng.integers(0, users, n),
        "ip": src % 97,
        "has_email": rng.random(n) < 0.1,
    })  # fmt: skip
    root = Path(__file__).resolve().parent.parent
    planned = plan(root / "examples" / "plans" / "five_rules.py", Log(table, cache=False))
    for name, fig in (
        ("plan_dag.png", dag_figure(planned)),
        ("plan_hot_keys.png", hot_keys_figure(planned)),
        ("plan_speedup.png", speedup_figure(planned)),
    ):
        print(save_image(fig, out / name, width=1000))


if __name__ == "__main__":
    main()
