"""Which windows the serial engine runs natively (``runtime.windows``), and why the others
keep their expansion: in a few words, for the plan and ``metrics.path``."""

from __future__ import annotations

import ast
from typing import Any

from ..compiler.expand_windows import close_kind
from ..model.windows import Ewma, Session, Sliding, _Closing

__all__ = [
    "native_plan",
    "adds_at_event_time",
    "sole_writer",
    "only_log_events_add",
    "lazy_session",
    "LAZY",
]

#: How a lazy session window runs (:func:`lazy_session`), for the plan and ``metrics.path``.
LAZY = (
    "fused, lazy: a session closes at the next add past its close time, nothing queued; "
    "its rows are made in close order at the end (and at each epoch's end for a view)"
)


def native_plan(
    program: Any, namespace: dict | None = None, lazy: bool = True
) -> dict[str, tuple[bool, str]]:
    """Per window of ``program``: whether the serial engine runs it natively, and how (or why
    it keeps its expansion), in a few words for the plan and ``metrics.path``. With
    ``lazy`` (the serial engine's own replay), a session window is lazy when
    :func:`lazy_session` says so (with the compiled ``namespace`` if given, else from the
    program's own imports)."""
    listeners: dict[str, list[str]] = {}
    for h in program.handlers:
        for kind in h.kinds:
            listeners.setdefault(kind, []).append(h.name)
    out = {}
    for name, window in program.windows.items():
        kind = close_kind(name)
        others = [h for h in listeners.get(kind, []) if h != f"{name}__close"]
        at_event = adds_at_event_time(program, name)
        if isinstance(window, Ewma):
            out[name] = (False, "its expansion: one average per key, already a plain state")
        elif others and not isinstance(window, Sliding):
            out[name] = (
                False,
                f"off: a handler listens on the close kind {kind!r} ({', '.join(others)}), "
                "so every add's close runs",
            )
        elif isinstance(window, Sliding) and window.agg == "distinct" and not at_event:
            out[name] = (False, "off: added at times other than its events' (ts=...)")
        elif isinstance(window, Sliding):
            if window.agg in ("min", "max"):
                how = "a queue per key, changed in place"
            elif window.agg == "distinct":
                how = "a dict per key of its values' latest times, changed in place"
            elif at_event:
                how = "its decrements in one queue, applied as they fall due"
            else:
                how = "its timed decrements written straight to the runtime"
            out[name] = (True, f"fused: {how}")
        elif isinstance(window, Session) and lazy and lazy_session(program, name, namespace):
            out[name] = (True, LAZY)
        elif isinstance(window, Session):
            how = (
                "one queue of open sessions, one queued close at a time"
                if at_event
                else "one queued close per add (added at times other than its events')"
            )
            out[name] = (True, f"fused: {how}")
        else:
            out[name] = (True, "fused: one close per window, windows ending together batched")
    return out


def lazy_session(program: Any, name: str, namespace: dict | None = None) -> bool:
    """Whether session window ``name`` closes lazily in the serial engine's replay
    (``runtime._sessions._lazy``): it has no ``on_close`` function, only log events add to
    it, at their times, and it alone emits to its table, so nothing reads a session but its
    adds and its rows' order is its closes'. ``namespace``: the compiled program's (what
    its names are bound to); without it, the names the program imports ``emit`` and
    ``schedule`` as."""
    window = program.windows[name]
    if not isinstance(window, Session) or window.callbacks:
        return False
    if namespace is None:
        namespace = _imported(program)
    return (
        adds_at_event_time(program, name)
        and sole_writer(program, namespace, name)
        and only_log_events_add(program, namespace, name)
    )


def _imported(program: Any) -> dict[str, Any]:
    """Names bound to ``emit`` and ``schedule`` by the program's imports, as a namespace
    that :func:`_bound_to` reads (each name to something called so)."""
    out = {}
    for node in ast.walk(program.module_ast):
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if alias.name in ("emit", "schedule"):
                    out[alias.asname or alias.name] = _Named(alias.name)
    return out


class _Named:
    """Stands for a function called ``__name__`` (:func:`_imported`)."""

    def __init__(self, name: str):
        self.__name__ = name


def adds_at_event_time(program: Any, name: str) -> bool:
    """Whether every ``add`` to window ``name`` is at the time of the event being handled:
    each call of the generated ``name__add`` is in a handler's own body (not in a nested
    function) with the handler's event's ``ts`` (``e.ts``, which the expansion passes when
    no ``ts=`` is given), and the handler never rebinds its event. Adds then come in time
    order, per key too, which a session's one entry in the queue relies on."""
    add = f"{name}__add"
    handlers = {h.node for h in program.handlers}
    for node in program.module_ast.body:
        calls = [
            c
            for c in ast.walk(node)
            if isinstance(c, ast.Call) and isinstance(c.func, ast.Name) and c.func.id == add
        ]
        if not calls:
            continue
        if node not in handlers or not node.args.args:
            return False
        event = node.args.args[0].arg
        nested = [
            n
            for stmt in node.body
            for n in ast.walk(stmt)
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef))
        ]
        if any(c in ast.walk(n) for n in nested for c in calls):
            return False
        rebound = any(
            isinstance(n, ast.Name) and n.id == event and not isinstance(n.ctx, ast.Load)
            for n in ast.walk(node)
        )
        at_event = all(
            len(c.args) == 3
            and isinstance(c.args[2], ast.Attribute)
            and c.args[2].attr == "ts"
            and isinstance(c.args[2].value, ast.Name)
            and c.args[2].value.id == event
            for c in calls
        )
        if rebound or not at_event:
            return False
    return True


def sole_writer(program: Any, namespace: dict, name: str) -> bool:
    """Whether the rows of closing window ``name``'s table come from its closes alone: it
    has a table, no other window has that table, and every other ``emit`` of the program
    (any name bound to it in the compiled ``namespace``, any ``x.emit``) is a call whose
    table is a string other than it. Its rows' order is then its closes' order alone."""
    table = program.windows[name].table
    if table is None:
        return False
    for other, window in program.windows.items():
        if other != name and isinstance(window, _Closing) and window.table == table:
            return False
    emits = _bound_to(namespace, "emit")
    own = f"{name}__close"  # (the generated close the native window replaces)
    for node in program.module_ast.body:
        if isinstance(node, ast.FunctionDef) and node.name == own:
            continue
        called = {id(c.func): c for c in ast.walk(node) if isinstance(c, ast.Call)}
        for n in ast.walk(node):
            if _is(n, emits, "emit") and _first_literal(called.get(id(n))) in (None, table):
                return False
    return True


def only_log_events_add(program: Any, namespace: dict, name: str) -> bool:
    """Whether only log events add to window ``name``: the handlers that call its
    ``name__add`` take no kind the program may schedule (a kind of a ``schedule`` call,
    every kind when one's kind is not a string, and every window's close kind)."""
    scheduled = {close_kind(w) for w in program.windows}
    schedules = _bound_to(namespace, "schedule")
    for node in ast.walk(program.module_ast):
        if isinstance(node, ast.Call) and _is(node.func, schedules, "schedule"):
            kind = _first_literal(node)
            if kind is None:
                return False
            scheduled.add(kind)
    add = f"{name}__add"
    for h in program.handlers:
        calls = any(isinstance(n, ast.Name) and n.id == add for n in ast.walk(h.node))
        if calls and scheduled.intersection(h.kinds):
            return False
    return True


def _bound_to(namespace: dict, what: str) -> set[str]:
    """The names of ``namespace`` bound to a function called ``what`` (``emit`` bound to
    the replay's runtime is still called so)."""
    return {var for var, value in namespace.items() if getattr(value, "__name__", None) == what}


def _is(node: ast.AST, names: set[str], attr: str) -> bool:
    """Whether ``node`` is one of ``names`` or any ``x.attr``."""
    if isinstance(node, ast.Name):
        return node.id in names
    return isinstance(node, ast.Attribute) and node.attr == attr


def _first_literal(call: ast.Call | None) -> str | None:
    """A call's first argument when it is a string literal, else None."""
    first = call.args[0] if call is not None and call.args else None
    if isinstance(first, ast.Constant) and isinstance(first.value, str):
        return first.value
    return None
