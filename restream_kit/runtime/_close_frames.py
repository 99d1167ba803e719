"""The frames the closes of native windows write their ``on_close`` functions into
(``compiler.inline_closes``): per closed window, the work ``runtime._aligned`` and
``runtime._sessions`` do around the functions, as source, so that a close runs the functions'
statements in place of a call per function, per ``emit`` and per close.

A frame binds the names the functions' statements read (``inline_closes.PARAMS``: the
window's key, start, end and value, the close's ``lsn``, time and ``seq``) and sets the
runtime's event (a close event) and ``seq`` before them, as the close did before calling
them; the globals it reads are named ``_rsc_<window>_...``.
"""

from __future__ import annotations

from typing import Any

from ..compiler.inline_closes import CALLBACKS
from ._window_parts import Close

__all__ = ["VALUE", "aligned_frame", "session_frame"]

#: Per aggregate, a closed window's value from its record ``{r}`` (``_aligned.value_getter``).
VALUE = {
    "count": "{r}[0]",
    "sum": "{r}[1]",
    "mean": "{r}[1] / {r}[0]",
    "min": "{r}[1]",
    "max": "{r}[1]",
    "distinct": "{g}len({r}[1])",
}


def _row(g: str, table: str | None, handler: str) -> str:
    """The statement that appends a closed window's row to its table (none: no table)."""
    if table is None:
        return ""
    fields = "{'key': _rsc_key, 'start': _rsc_start, 'end': _rsc_end, 'value': _rsc_value}"
    row = f"(_rsc_lsn, _rsc_ts, {handler!r}, _rsc_seq, {fields})"
    return f"{g}rows[{table!r}].append({row})"


def _globals(g: str, rt: Any, **more: Any) -> dict[str, Any]:
    return {f"{g}{k}": v for k, v in {"Close": Close, "len": len, "rows": rt.rows, **more}.items()}


def aligned_frame(
    n: str, agg: str, width: int, kind: str, table: str | None, handler: str, rt: Any
) -> tuple[str, dict[str, Any]]:
    """``run(items, index, start, ts)`` of tumbling or hopping window ``n``: close the windows
    ``items`` (key, record) from ``index`` on, of start ``start``, at ``ts``, as
    ``_aligned``'s batch does; the index of the first window left when an event queued
    between two of them must run first (the batch puts the rest back), else -1."""
    g = f"_rsc_{n}_"
    value = VALUE[agg].format(r="_rsc_rec", g=g)
    frame = f"""
def run(_rsc_items, _rsc_index, _rsc_start, _rsc_ts):
    _rsc_end = _rsc_start + {width}
    _rsc_i = _rsc_index
    _rsc_n = {g}len(_rsc_items)
    while _rsc_i < _rsc_n:
        _rsc_key, _rsc_rec = _rsc_items[_rsc_i]
        if _rsc_i > _rsc_index and {g}scheduled:
            _rsc_top = {g}scheduled[0]
            if _rsc_top[0] == _rsc_ts and _rsc_top[1] < _rsc_rec[4]:
                return _rsc_i
        _rsc_i += 1
        _rsc_value = {value}
        _rsc_lsn = _rsc_rec[2]
        _rsc_seq = _rsc_rec[3]
        _rs_rt.event = {g}Close({kind!r}, _rsc_ts, _rsc_lsn, _rsc_seq, _rsc_key, _rsc_start)
        _rs_rt.seq = _rsc_seq
        {_row(g, table, handler)}
        {CALLBACKS}
        _rsc_rec[0] = 0
    return -1
"""
    return frame, _globals(g, rt, scheduled=rt.scheduled)


def session_frame(
    n: str, agg: str, table: str | None, handler: str, rt: Any, open_: dict
) -> tuple[str, dict[str, Any]]:
    """``emit(key, rec, end, lsn, seq)`` of session window ``n`` (``_sessions._queued``):
    close ``key``'s session ``rec`` at ``end``, its row and the ``on_close`` functions (the
    caller has set the runtime's event and ``seq``)."""
    g = f"_rsc_{n}_"
    value = VALUE[agg].format(r="_rsc_rec", g=g)
    frame = f"""
def emit(_rsc_key, _rsc_rec, _rsc_end, _rsc_lsn, _rsc_seq):
    del {g}open[_rsc_key]
    _rsc_rec[4] = None
    _rsc_value = {value}
    _rsc_start = _rsc_rec[5]
    _rsc_ts = _rsc_end
    {_row(g, table, handler)}
    {CALLBACKS}
"""
    return frame, _globals(g, rt, open=open_)
