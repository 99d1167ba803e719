"""Static forms of the views, so that a saved notebook shows its results without a kernel.

A view is displayed as one output whose bundle holds the live widget
(``application/vnd.jupyter.widget-view+json``) beside a ``text/html`` and a ``text/plain``
form of what it shows. JupyterLab draws the widget while its model exists (a live kernel, or
widget state saved in the notebook); a notebook opened without either (untrusted, converted by
``nbconvert``, rendered by a notebook viewer) shows the HTML. When the replay ends the view's
output is updated (``update_display``) with the HTML of its final state.

A ``--background`` cell's run ends after its cell: its update carries that finished cell's
request, which JupyterLab routes by display id but nbclient (and so ``nbconvert --execute``)
ignores. Such a late update is sent again, from the kernel's main thread, when the next cell
ends (an IPython ``post_run_cell`` hook), under that cell's request, which every frontend
applies to the output wherever it is; a notebook whose last cell is a ``--background`` one
keeps it only in a live frontend.

The HTML uses JupyterLab's theme variables (with light fallbacks elsewhere), no script and no
external resource: it reads the same offline, in a dark theme and in a converted page. Its
drawings are SVG images (``<img src="data:image/svg+xml;base64,...">``) on a light card of
their own: JupyterLab strips inline ``<svg>`` from an untrusted notebook's HTML, images stay.
"""

from __future__ import annotations

import base64
import html
import re
import threading
from collections.abc import Sequence
from typing import Any

from IPython import get_ipython
from IPython.display import DisplayHandle, display

__all__ = [
    "StaticOutput",
    "FG",
    "MUTED",
    "BORDER",
    "line_chart_svg",
    "stacked_bars_svg",
    "svg_image",
]

#: Theme-aware colours (JupyterLab's variables, a light theme's value elsewhere).
FG = "var(--jp-ui-font-color1, #222)"
MUTED = "var(--jp-ui-font-color2, #666)"
BORDER = "var(--jp-border-color2, #ddd)"


class _Cells:
    """Which cell of the kernel runs now, and the outputs updated after their own cell ended,
    to be sent again when the next cell ends (see the module doc)."""

    def __init__(self, shell: Any) -> None:
        self.started = 1  # the cell that made the first view is running
        self.running: int | None = 1
        self.late: dict[int, tuple[StaticOutput, dict[str, Any]]] = {}
        self.lock = threading.Lock()
        shell.events.register("pre_run_cell", self._started)
        shell.events.register("post_run_cell", self._ended)

    def _started(self, _info: Any) -> None:
        with self.lock:
            self.started += 1
            self.running = self.started

    def _ended(self, _result: Any) -> None:
        with self.lock:
            self.running = None
            late, self.late = list(self.late.values()), {}
        for out, bundle in late:  # on the main thread, under the cell that just ended
            if out.handle is not None:
                out.handle.update(bundle, raw=True)

    def updated(self, out: StaticOutput, bundle: dict[str, Any]) -> None:
        """``out`` was just updated: keep it for the next cell's end unless its cell runs."""
        with self.lock:
            if self.running != out.cell:
                self.late[id(out)] = (out, bundle)


_CELLS: _Cells | None = None


def _cells() -> _Cells | None:
    """The kernel's cell tracker, made with the first view (None outside IPython)."""
    global _CELLS
    shell = get_ipython()
    if _CELLS is None and shell is not None and hasattr(shell, "events"):
        _CELLS = _Cells(shell)
    return _CELLS


class StaticOutput:
    """One output holding a widget and the static form of its state (see the module doc)."""

    def __init__(self, widget: Any, html_form: str, text_form: str) -> None:
        self.widget = widget
        cells = _cells()
        self.cell = cells.running if cells is not None else None
        handle = display(self._bundle(html_form, text_form), raw=True, display_id=True)
        self.handle: DisplayHandle | None = handle

    def _bundle(self, html_form: str, text_form: str) -> dict[str, Any]:
        bundle = dict(self.widget._repr_mimebundle_())
        bundle["text/html"] = f"<div class='restream-static'>{html_form}</div>"
        bundle["text/plain"] = text_form
        return bundle

    def update(self, html_form: str, text_form: str) -> None:
        """Replace the static form (the widget stays as it is)."""
        if self.handle is not None:
            bundle = self._bundle(html_form, text_form)
            self.handle.update(bundle, raw=True)
            if _CELLS is not None:
                _CELLS.updated(self, bundle)


def svg_image(svg: str, alt: str) -> str:
    """``svg`` as an ``<img>`` with a data URI, drawn on a white card (inside an image the
    theme's variables do not apply, so their light fallbacks do)."""
    card = "<rect width='100%' height='100%' rx='4' fill='#fff'/>"
    standalone = re.sub(r"(<svg[^>]*>)", lambda m: m.group(1) + card, svg, count=1)
    data = base64.b64encode(standalone.encode()).decode()
    return (
        f"<img class='restream-image' alt='{html.escape(alt, quote=True)}' "
        f"src='data:image/svg+xml;base64,{data}'/>"
    )


def line_chart_svg(
    x: Sequence[Any],
    series: dict[str, Sequence[float]],
    *,
    title: str,
    x_title: str,
    width: int = 520,
    height: int = 200,
) -> str:
    """A small line chart as inline SVG: one polyline per series, x as categories."""
    colours = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b"]
    values = [v for ys in series.values() for v in ys if v is not None]
    top = max(values, default=0) or 1
    left, right, upper, lower = 56, 12, 24, 36
    step = (width - left - right) / max(1, len(x) - 1)

    def point(i: int, y: float) -> str:
        return f"{left + i * step:.1f},{upper + (1 - y / top) * (height - upper - lower):.1f}"

    parts = [
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' "
        f"class='restream-chart' font-family='sans-serif' font-size='11' style='fill:{FG}'>",
        f"<text x='{left}' y='14' font-weight='bold'>{html.escape(title)}</text>",
        f"<text x='4' y='{upper + 4}'>{top:,.0f}</text><text x='4' y='{height - lower}'>0</text>",
        f"<line x1='{left}' y1='{height - lower}' x2='{width - right}' y2='{height - lower}' "
        f"style='stroke:{MUTED}'/>",
    ]
    for i, label in enumerate(x):
        parts.append(
            f"<text x='{left + i * step:.1f}' y='{height - lower + 14}' text-anchor='middle'>"
            f"{html.escape(str(label))[:12]}</text>"
        )
    parts.append(
        f"<text x='{(left + width) / 2:.0f}' y='{height - 4}' text-anchor='middle' "
        f"style='fill:{MUTED}'>{html.escape(x_title)}</text>"
    )
    for n, (name, ys) in enumerate(series.items()):
        colour = colours[n % len(colours)]
        points = " ".join(point(i, y) for i, y in enumerate(ys) if y is not None)
        parts.append(
            f"<polyline points='{points}' fill='none' stroke='{colour}' stroke-width='2'/>"
            + "".join(
                f"<circle cx='{point(i, y).split(',')[0]}' cy='{point(i, y).split(',')[1]}' "
                f"r='3' fill='{colour}'><title>{html.escape(name)}: {y:,}</title></circle>"
                for i, y in enumerate(ys)
                if y is not None
            )
            + f"<text x='{width - right - 4}' y='{upper + 12 + 13 * n}' text-anchor='end' "
            f"fill='{colour}'>{html.escape(name)}</text>"
        )
    parts.append("</svg>")
    return "".join(parts)


def stacked_bars_svg(
    x: Sequence[str],
    series: dict[str, tuple[str, Sequence[int]]],
    *,
    title: str,
    width: int = 640,
    height: int = 180,
    every_label: bool = False,
) -> str:
    """A stacked bar chart as inline SVG: ``series`` maps a name to its colour and one value
    per ``x``; a bar's title gives its numbers on hover. A few x labels, evenly spaced (each
    bar's with ``every_label``)."""
    totals = [sum(ys[i] for _c, ys in series.values()) for i in range(len(x))]
    top = max(totals, default=0) or 1
    left, right, upper, lower = 48, 8, 24, 34
    slot = (width - left - right) / max(1, len(x))
    bar = max(1.0, slot * 0.8)
    scale = (height - upper - lower) / top
    parts = [
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' "
        f"class='restream-chart' font-family='sans-serif' font-size='11' style='fill:{FG}'>",
        f"<text x='{left}' y='14' font-weight='bold'>{html.escape(title)}</text>",
        f"<text x='4' y='{upper + 4}'>{top:,}</text><text x='4' y='{height - lower}'>0</text>",
    ]
    legend_x = width - right
    for name, (colour, _ys) in reversed(series.items()):
        legend_x -= 14 + 7 * len(name)
        parts.append(
            f"<rect x='{legend_x}' y='6' width='10' height='10' fill='{colour}'/>"
            f"<text x='{legend_x + 13}' y='15'>{html.escape(name)}</text>"
        )
    for i, label in enumerate(x):
        y = height - lower
        words = ", ".join(f"{n} {ys[i]:,}" for n, (_c, ys) in series.items() if ys[i])
        parts.append(f"<g><title>{html.escape(label)}: {html.escape(words)}</title>")
        for _name, (colour, ys) in series.items():
            h = ys[i] * scale
            if h:
                parts.append(
                    f"<rect x='{left + i * slot:.1f}' y='{y - h:.1f}' width='{bar:.1f}' "
                    f"height='{h:.1f}' fill='{colour}'/>"
                )
                y -= h
        parts.append("</g>")
    every = 1 if every_label else max(1, len(x) // 4)
    fits = max(3, int(slot * every / 6.5))  # characters of 11 px type in a label's room
    for i in range(0, len(x), every):
        parts.append(
            f"<text x='{left + i * slot:.1f}' y='{height - lower + 14}'>"
            f"{html.escape(x[i][:fits])}</text>"
        )
    parts.append(
        f"<line x1='{left}' y1='{height - lower}' x2='{width - right}' y2='{height - lower}' "
        f"style='stroke:{MUTED}'/></svg>"
    )
    return "".join(parts)
