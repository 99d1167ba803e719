"""The quarantine view: handler runs that raised and were rolled back (``on_error`` skip or
quarantine), one row each with the event, the handler, the user's line and the error.

Empty and hidden until a run has something to show.
"""

from __future__ import annotations

import html
from typing import Any

import ipywidgets as w

__all__ = ["QuarantineView", "quarantine_html", "quarantine_text"]

#: Rows shown; the rest are counted (all of them are in ``Result.quarantine``).
SHOWN = 50
_COLUMNS = ("lsn", "seq", "ts", "kind", "handler", "line", "error", "fields")


def quarantine_html(table: Any, limit: int = SHOWN) -> str:
    """An HTML table of the first ``limit`` rows of a quarantine table, with a title."""
    n = table.num_rows
    if not n:
        return ""
    rows = table.slice(0, limit).to_pylist()
    head = "".join(f"<th>{c}</th>" for c in _COLUMNS)
    body = "".join(
        "<tr>"
        + "".join(
            f"<td title='{html.escape(str(r['traceback']), quote=True)}'>"
            f"{html.escape('' if r[c] is None else str(r[c]))}</td>"
            for c in _COLUMNS
        )
        + "</tr>"
        for r in rows
    )
    more = (
        f"<p>… and {n - limit:,} more (see <code>result.quarantine</code>)</p>" if n > limit else ""
    )
    return (
        f"<b style='color:#b00'>{n:,} handler run(s) raised and were rolled back</b>"
        "<table class='restream-quarantine' style='font-size:90%'>"
        f"<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>{more}"
    )


def quarantine_text(table: Any, limit: int = 10) -> str:
    """The same as lines, for text mode."""
    n = table.num_rows
    if not n:
        return ""
    lines = [f"{n:,} handler run(s) raised and were rolled back:"]
    for r in table.slice(0, limit).to_pylist():
        event = f"lsn {r['lsn']}" + (f" (scheduled #{r['seq']})" if r["seq"] else "")
        lines.append(
            f"  {event} {r['kind']!r} at ts {r['ts']}: handler {r['handler']!r} line "
            f"{r['line']}: {r['error']} {r['fields']}"
        )
    if n > limit:
        lines.append(f"  ... and {n - limit:,} more (result.quarantine)")
    return "\n".join(lines)


class QuarantineView:
    """A section of the run view that lists the run's rolled-back handler runs."""

    def __init__(self) -> None:
        self.widget = w.HTML("", layout=w.Layout(display="none"))

    def finish(self, cell: Any) -> None:
        """Show the quarantine of a finished ``CellRun`` (nothing when it has none)."""
        result = getattr(cell, "result", None)
        table = getattr(result, "quarantine", None)
        if table is None or not table.num_rows:
            self.widget.layout.display = "none"
            return
        self.widget.value = quarantine_html(table)
        self.widget.layout.display = None
