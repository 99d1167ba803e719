"""The code a window declaration expands into (``compiler.expand_windows``), as source text.

:func:`source` gives, for one window, the statements that go after its declaration: its
states, the helpers its uses call (``w__add``, ``w__value``...) and its close handler. The
module docstring of ``expand_windows`` says what each kind of window becomes.
"""

from __future__ import annotations

import ast
import textwrap
from string import Template
from typing import Any

from ..model.errors import ProgramError
from ..model.windows import Ewma, Hopping, Session, Sliding, Tumbling, Window, _Closing

__all__ = ["source", "close_kind", "UNROLL"]

#: A hopping window's calls for the windows of one event are written out up to this many.
UNROLL = 64


def close_kind(name: str) -> str:
    """The kind of the scheduled events that close the windows of window ``name``."""
    return f"{name}:close"


# Templates use ``$n`` for the window's name and ``$`` placeholders for its parameters.


def source(
    name: str,
    window: Window,
    namespace: dict[str, Any],
    tree: ast.Module,
    filename: str,
    lineno: int,
) -> str:
    """The source text of window ``name``'s generated code (``$`` placeholders filled)."""
    if isinstance(window, _Closing):
        callbacks = _callbacks(name, window, namespace, tree, filename, lineno)
        if window.table is None and not callbacks:
            raise ProgramError(
                f"window {name!r} emits nothing: give it table=..., or decorate a function "
                f"with @{name}.on_close",
                filename=filename,
                lineno=lineno,
            )
        if isinstance(window, Session):
            code = _session(window, callbacks)
        else:
            code = _aligned(window, callbacks)
    elif isinstance(window, Sliding):
        code = _sliding(window)
    elif isinstance(window, Ewma):
        code = _ewma(window)
    else:  # pragma: no cover - every Window subclass is handled above
        raise TypeError(type(window).__name__)
    params = {
        "n": name,
        "close": repr(close_kind(name)),
        "width": getattr(window, "width", 0),
        "hop": getattr(window, "hop", 0),
        "gap": getattr(window, "gap", 0),
        "alpha": repr(getattr(window, "alpha", 1.0)),
        "beta": repr(1.0 - getattr(window, "alpha", 1.0)),
        "worse": "<=" if getattr(window, "agg", None) == "max" else ">=",
    }
    return Template(code).substitute(params)


def _callbacks(
    name: str,
    window: _Closing,
    namespace: dict[str, Any],
    tree: ast.Module,
    filename: str,
    lineno: int,
) -> list[str]:
    defs = {s.name: s for s in tree.body if isinstance(s, ast.FunctionDef)}
    out = []
    for fn in window.callbacks:
        fn_name = getattr(fn, "__name__", None)
        node = defs.get(fn_name)
        if node is None or namespace.get(fn_name) is not fn:
            raise ProgramError(
                f"@{name}.on_close must decorate a module-level function defined with def",
                filename=filename,
                lineno=lineno,
            )
        args = node.args
        positional = len(args.posonlyargs + args.args)
        if positional - len(args.defaults) > 4 or (positional < 4 and args.vararg is None):
            raise ProgramError(
                f"{fn_name} is called as {fn_name}(key, start, end, value) when a window of "
                f"{name!r} closes: give it those four parameters",
                filename=filename,
                lineno=node.lineno,
            )
        out.append(fn_name)
    return out


def _outputs(window: _Closing, callbacks: list[str], start: str, end: str) -> list[str]:
    """Lines that emit the closed window's row and call the ``on_close`` functions."""
    lines = []
    table = repr(window.table).replace("$", "$$")  # the code goes through Template
    if window.table is not None:
        lines.append(f"_rsw_emit({table}, key=e.key, start={start}, end={end}, value=value)")
    lines += [f"{cb}(e.key, {start}, {end}, value)" for cb in callbacks]
    return lines


def _block(lines: list[str] | str, spaces: int) -> str:
    text = "\n".join(lines) if isinstance(lines, list) else lines
    return textwrap.indent(textwrap.dedent(text).strip("\n"), " " * spaces)


#: Per aggregate of a closing window: its state declarations, the code that adds ``value`` to
#: window ``w`` (by merges only), the aggregate's expression, and the states to delete when
#: the window closes. Every closing window also counts its values in ``$n__n``.
_STATES = {
    "count": [],
    "sum": ["${n}__sum = _rsw_state.Counter()"],
    "mean": ["${n}__sum = _rsw_state.Counter()"],
    "min": ["${n}__best = _rsw_state.Map(default=None)"],
    "max": ["${n}__best = _rsw_state.Map(default=None)"],
    "distinct": ["${n}__values = _rsw_state.Map(default=_rsw_b.frozenset())"],
}
_ADD = {
    "count": [],
    "sum": ["${n}__sum.add(w, value)"],
    "mean": ["${n}__sum.add(w, value)"],
    "min": ["${n}__best.merge(w, lambda old: value if old is None or value < old else old)"],
    "max": ["${n}__best.merge(w, lambda old: value if old is None or value > old else old)"],
    "distinct": ["${n}__values.merge(w, lambda old: old if value in old else old | {value})"],
}
_VALUE = {
    "count": "${n}__n[w]",
    "sum": "${n}__sum[w]",
    "mean": "${n}__sum[w] / ${n}__n[w]",
    "min": "${n}__best[w]",
    "max": "${n}__best[w]",
    "distinct": "_rsw_b.len(${n}__values[w])",
}
_DELETE = {
    "count": [],
    "sum": ["${n}__sum"],
    "mean": ["${n}__sum"],
    "min": ["${n}__best"],
    "max": ["${n}__best"],
    "distinct": ["${n}__values"],
}


def _aligned(window: Tumbling | Hopping, callbacks: list[str]) -> str:
    agg = window.agg
    hop = window.hop if isinstance(window, Hopping) else window.width
    into = [
        "w = (key, start)",
        "${n}__n.add(w, 1)",
        *_ADD[agg],
        "_rsw_schedule($close, at=start + $width, key=key, start=start)",
    ]
    closer = [
        f"value = {_VALUE[agg]}",
        *_outputs(window, callbacks, "e.start", "e.start + $width"),
        *(f"del {d}[w]" for d in ["${n}__n", *_DELETE[agg]]),
    ]
    return "\n".join(
        [
            "${n}__n = _rsw_state.Counter()",
            *_STATES[agg],
            "",
            "def ${n}__into(key, value, start):",
            _block(into, 4),
            "",
            "def ${n}__add(key, value, ts):",
            _block(_starts(window.width, hop), 4),
            "",
            "@_rsw_on($close)",
            "def ${n}__close(e):",
            "    w = (e.key, e.start)",
            "    if ${n}__n[w]:",
            _block(closer, 8),
            "",
        ]
    )


def _starts(width: int, hop: int) -> list[str]:
    """The body of ``add``: ``into`` every window that contains ``ts``, latest start first.

    Up to ``UNROLL`` windows the calls are written out, so that the planner sees each window's
    start as a function of the event; beyond that, a loop.
    """
    into = "${n}__into(key, value, "
    if hop == width:
        return [into + "ts - ts % $width)"]
    count = -(-width // hop)
    if count > UNROLL:
        return [
            "start = ts - ts % $hop",
            "while start > ts - $width:",
            "    " + into + "start)",
            "    start -= $hop",
        ]
    lines = ["start = ts - ts % $hop"]
    for i in range(count):
        start = f"start - {i * hop}" if i else "start"
        if i == count - 1 and width % hop:
            lines += [f"if {start} > ts - $width:", "    " + into + start + ")"]
        else:
            lines.append(into + start + ")")
    return lines


def _session(window: Session, callbacks: list[str]) -> str:
    agg = window.agg
    closer = [
        "start = ${n}__first[w]",
        f"value = {_VALUE[agg]}",
        *_outputs(window, callbacks, "start", "e.ts"),
        *(f"del {d}[w]" for d in ["${n}__first", "${n}__last", "${n}__n", *_DELETE[agg]]),
    ]
    return "\n".join(
        [
            "${n}__n = _rsw_state.Counter()",
            *_STATES[agg],
            "${n}__first = _rsw_state.Map(default=None)",
            "${n}__last = _rsw_state.Map(default=None)",
            "",
            "def ${n}__add(key, value, ts):",
            "    w = key",
            "    ${n}__first.merge(w, lambda old: ts if old is None else old)",
            "    ${n}__last[w] = ts",
            "    ${n}__n.add(w, 1)",
            _block(_ADD[agg], 4) if _ADD[agg] else "",
            "    _rsw_schedule($close, at=ts + $gap, key=key)",
            "",
            "@_rsw_on($close)",
            "def ${n}__close(e):",
            "    w = e.key",
            "    last = ${n}__last[w]",
            "    if last is not None and last + $gap <= e.ts:",
            _block(closer, 8),
            "",
        ]
    )


def _sliding(window: Sliding) -> str:
    agg = window.agg
    if agg in ("count", "sum", "mean"):
        states, adds = [], []
        if agg in ("count", "mean"):
            states.append("${n}__n = _rsw_state.Counter()")
            adds += ["${n}__n.add(key, 1)", "${n}__n.add(key, -1, at=ts + $width)"]
        if agg in ("sum", "mean"):
            states.append("${n}__sum = _rsw_state.Counter()")
            adds += ["${n}__sum.add(key, value)", "${n}__sum.add(key, -value, at=ts + $width)"]
        reader = {
            "count": ["return ${n}__n[key]"],
            "sum": ["return ${n}__sum[key]"],
            "mean": ["n = ${n}__n[key]", "return ${n}__sum[key] / n if n else None"],
        }[agg]
        return "\n".join(
            [
                *states,
                "",
                "def ${n}__add(key, value, ts):",
                _block(adds, 4),
                "",
                "def ${n}__value(key, ts):",
                _block(reader, 4),
                "",
            ]
        )
    if agg in ("min", "max"):
        # Pairs (ts, value), oldest first, that can still be the extreme: a later pair is
        # better or equal, so an earlier one it beats can never be the answer again.
        return """\
${n}__queue = _rsw_state.Map(default=())

def ${n}__add(key, value, ts):
    queue = ${n}__queue[key]
    first = 0
    while first < _rsw_b.len(queue) and queue[first][0] <= ts - $width:
        first += 1
    last = _rsw_b.len(queue)
    while last > first and queue[last - 1][1] $worse value:
        last -= 1
    ${n}__queue[key] = queue[first:last] + ((ts, value),)

def ${n}__value(key, ts):
    for t, v in ${n}__queue[key]:
        if t > ts - $width:
            return v
    return None
"""
    # distinct: each value once, with the latest time it was added, oldest first.
    return """\
${n}__recent = _rsw_state.Map(default=())

def ${n}__add(key, value, ts):
    kept = _rsw_b.tuple(p for p in ${n}__recent[key] if p[0] > ts - $width and p[1] != value)
    ${n}__recent[key] = kept + ((ts, value),)

def ${n}__value(key, ts):
    return _rsw_b.sum(1 for p in ${n}__recent[key] if p[0] > ts - $width)
"""


def _ewma(window: Ewma) -> str:
    return """\
${n}__avg = _rsw_state.Map(default=None)

def ${n}__update(key, x):
    old = ${n}__avg[key]
    new = _rsw_b.float(x) if old is None else $alpha * x + $beta * old
    ${n}__avg[key] = new
    return new

def ${n}__value(key):
    return ${n}__avg[key]
"""
