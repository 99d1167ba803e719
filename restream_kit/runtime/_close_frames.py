"""The frames the closes of native windows write their ``on_close`` functions into
(``compiler.inline_closes``): per closed window, the work ``runtime._aligned`` and
``runtime._sessions`` do around the functions, as source, so that a close runs the functions'
statements in place of a call per function, per ``emit`` and per close.

A frame binds the names the functions' statements read (``inline_closes.PARAMS``: the
window's key, start, end and value, the close's ``lsn``, time and ``seq``) and sets the
runtime's event (a close event) and ``seq`` before them, as the close did before calling
them, or, where the statements cannot read them (``inline_closes.QUIET``), once after its
closes (the last one's) and before re-raising what a statement raised: a close event made
per run of closes, not per window. A session window's frame (:func:`session_loop`) is its
whole close loop, the queue of open sessions read in place. The globals a frame reads are
named ``_rsc_<window>_...``.
"""

from __future__ import annotations

from heapq import heappop, heappush
from typing import Any

from ..compiler.inline_closes import CALLBACKS, EAGER, QUIET
from ._window_parts import Close

__all__ = ["VALUE", "aligned_frame", "session_frame", "session_loop"]

#: Per aggregate, a closed window's value from its record ``{r}`` (``_aligned.value_getter``).
VALUE = {
    "count": "{r}[0]",
    "sum": "{r}[1]",
    "mean": "{r}[1] / {r}[0]",
    "min": "{r}[1]",
    "max": "{r}[1]",
    "distinct": "{g}len({r}[1])",
}


def _indent(text: str, spaces: int) -> str:
    """``text`` with every line indented by ``spaces``."""
    return "\n".join(" " * spaces + line for line in text.splitlines())


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
    close = f"{g}Close({kind!r}, _rsc_ts, _rsc_lsn, _rsc_seq, _rsc_key, _rsc_start)"
    event = f"_rs_rt.event = {close}\n            _rs_rt.seq = _rsc_seq"
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
                break
        _rsc_i += 1
        _rsc_value = {value}
        _rsc_lsn = _rsc_rec[2]
        _rsc_seq = _rsc_rec[3]
        if {EAGER}:
            {event}
        {_row(g, table, handler)}
        try:
            {CALLBACKS}
        except BaseException:
            {event}
            raise
        _rsc_rec[0] = 0
    if {QUIET} and _rsc_i > _rsc_index:  # the last close's event, as its own set it
        _rsc_key, _rsc_rec = _rsc_items[_rsc_i - 1]
        _rsc_seq = _rsc_rec[3]
        _rs_rt.event = {g}Close({kind!r}, _rsc_ts, _rsc_rec[2], _rsc_seq, _rsc_key, _rsc_start)
        _rs_rt.seq = _rsc_seq
    return _rsc_i if _rsc_i < _rsc_n else -1
"""
    return frame, _globals(g, rt, scheduled=rt.scheduled)


def session_frame(
    n: str, agg: str, table: str | None, handler: str, rt: Any, open_: dict
) -> tuple[str, dict[str, Any]]:
    """``emit(key, rec, end, lsn, seq)`` of session window ``n`` (``_sessions._queued``):
    close ``key``'s session ``rec`` at ``end``, its row and the ``on_close`` functions (the
    caller has set the runtime's event and ``seq``)."""
    g = f"_rsc_{n}_"
    frame = f"""
def emit(_rsc_key, _rsc_rec, _rsc_end, _rsc_lsn, _rsc_seq):
{_indent(_session_closed(g, agg, table, handler), 4)}
    {CALLBACKS}
"""
    return frame, _globals(g, rt, open=open_)


def session_loop(
    n: str, agg: str, table: str | None, handler: str, rt: Any, kind: str, parts: dict[str, Any]
) -> tuple[str, dict[str, Any]]:
    """``run(at)`` of session window ``n`` (``_sessions._queued``): its close run by its
    entry in the runtime's queue at ``at``, every session due closed one after the other, as
    ``_queued``'s ``close`` loop does, with its ``front`` and ``emit`` written out in it;
    ``parts``: the window's ``open``, ``fresh``, ``moved``, ``queued`` and ``clock``."""
    g = f"_rsc_{n}_"
    close = f"{g}Close({kind!r}, _rsc_end, _rsc_lsn, _rsc_seq, _rsc_key, None, _rsc_o)"
    again = f"{g}Close({kind!r}, _rsc_end, _rsc_rec[2], _rsc_rec[3], _rsc_key, None, _rsc_o)"
    # The close's event unless the runtime's is already this one's (its own entry's).
    set_event = f"""_rsc_ev = _rs_rt.event
if not (
    type(_rsc_ev) is {g}Close
    and _rsc_ev.key is _rsc_key
    and _rsc_ev.kind == {kind!r}
    and _rsc_ev.ts == _rsc_end
    and _rsc_ev.lsn == _rsc_lsn
    and _rsc_ev.seq == _rsc_seq
):
    _rs_rt.event = {close}
_rs_rt.seq = _rsc_seq"""
    frame = f"""
def run(_rsc_at):
    _rsc_last = None
    while True:
{_front(g)}
        _rsc_end, _rsc_o, _rsc_key, _rsc_rec = _rsc_entry
        if {g}scheduled:
            _rsc_top = {g}scheduled[0]
            if _rsc_top[0] < _rsc_end or (_rsc_top[0] == _rsc_end and _rsc_top[1] < _rsc_o):
                {g}push({g}scheduled, (_rsc_end, _rsc_o, {again}))
                break
        if _rsc_end != _rsc_at:
            if _rsc_end > {g}clock[0]:  # not due yet
                {g}push({g}scheduled, (_rsc_end, _rsc_o, {again}))
                break
            _rsc_at = _rsc_end
            if {g}future and {g}future[0][0] <= _rsc_at:
                _rs_rt.apply_due(_rsc_at)
        if {g}fresh and {g}fresh[0] is _rsc_entry:
            {g}fresh.popleft()
        else:
            {g}pop({g}moved)
        _rsc_lsn = _rsc_rec[2]
        _rsc_seq = _rsc_rec[3]
        if {EAGER}:
{_indent(set_event, 12)}
        else:
            _rsc_last = _rsc_entry
{_indent(_session_closed(g, agg, table, handler), 8)}
        try:
            {CALLBACKS}
        except BaseException:
{_indent(set_event, 12)}
            raise
    if {QUIET} and _rsc_last is not None:  # the last close's event, as before its functions
        _rsc_end, _rsc_o, _rsc_key, _rsc_rec = _rsc_last
        _rsc_lsn = _rsc_rec[2]
        _rsc_seq = _rsc_rec[3]
{_indent(set_event, 8)}
"""
    more = {"scheduled": rt.scheduled, "future": rt.future, "push": heappush, "pop": heappop}
    return frame, _globals(g, rt, **parts, **more)


def _session_closed(g: str, agg: str, table: str | None, handler: str) -> str:
    """The lines that close session ``_rsc_rec`` of key ``_rsc_key`` at ``_rsc_end``: out of
    the open sessions, its value, start and time bound for the ``on_close`` functions, and
    its row."""
    return f"""del {g}open[_rsc_key]
_rsc_rec[4] = None
_rsc_value = {VALUE[agg].format(r="_rsc_rec", g=g)}
_rsc_start = _rsc_rec[5]
_rsc_ts = _rsc_end
{_row(g, table, handler)}"""


def _front(g: str) -> str:
    """The lines of a session window's close loop (:func:`session_loop`) that find the entry
    of the session closing first (``_rsc_entry``), stale entries moved or dropped as
    ``_sessions``' ``front`` does; none left: the window's entry is out of the queue."""
    return _indent(
        f"""while {g}fresh:
    _rsc_entry = {g}fresh[0]
    _rsc_rec = _rsc_entry[3]
    if _rsc_rec[4] == _rsc_entry[1]:
        break
    {g}fresh.popleft()
    if _rsc_rec[4] is not None:
        {g}push({g}moved, (_rsc_rec[7], _rsc_rec[4], _rsc_entry[2], _rsc_rec))
while {g}moved:
    _rsc_entry = {g}moved[0]
    _rsc_rec = _rsc_entry[3]
    if _rsc_rec[4] == _rsc_entry[1]:
        break
    {g}pop({g}moved)
    if _rsc_rec[4] is not None:
        {g}push({g}moved, (_rsc_rec[7], _rsc_rec[4], _rsc_entry[2], _rsc_rec))
if {g}fresh:
    _rsc_entry = {g}fresh[0]
    if {g}moved and {g}moved[0][:2] < _rsc_entry[:2]:
        _rsc_entry = {g}moved[0]
elif {g}moved:
    _rsc_entry = {g}moved[0]
else:
    {g}queued[0] = False
    break""",
        8,
    )
