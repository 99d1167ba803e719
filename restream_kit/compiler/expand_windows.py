"""Expand window declarations (``restream_kit.windows``) into plain program code.

``Program`` calls :func:`expand` after running the user's module once. It finds every window
bound to a module-level name, and returns the module's AST with, after each declaration, the
code that implements it, and with every ``w.add(...)``, ``w.value(...)`` and ``w.update(...)``
inside a function replaced by a call of a generated helper that also receives the event's time
(the handler's ``e.ts``, or the ``ts=`` given). The program then runs that module instead; the
engines, the compiler and the planner see only state, timed writes, ``schedule`` and handlers.

Generated names start with the window's name and a double underscore (``clicks__add``,
``clicks__close``); the close events of window ``clicks`` have the kind ``"clicks:close"``.
Generated statements carry the line of the declaration, so an error in them points there.
The user's source text is untouched (``Program.source`` and its hash stay the user's).

What each declaration becomes, for a window ``w`` (``W`` its width, ``H`` its hop, ``G`` its gap):

- tumbling and hopping: ``w__add(key, value, ts)`` calls ``w__into(key, value, start)`` for
  every window ``(key, start)`` with ``start`` a multiple of ``H`` (``W`` when tumbling) and
  ``start <= ts < start + W`` (the calls are written out, latest window first, up to
  ``UNROLL`` windows per event; a loop beyond). ``w__into`` merges the value into the
  window's state (``w__n`` counts the values; ``w__sum``, ``w__best`` or ``w__values`` keep
  the aggregate) and schedules ``w:close`` at ``start + W`` with the fields ``key`` and
  ``start``. The first close of a window (scheduled by its first event, so the row carries
  that event's ``lsn``) emits the row and deletes the window's state; the others find
  ``w__n`` empty and do nothing.
- session: ``w__add`` merges the value into the key's state, records the key's first time
  (a merge that keeps the old value) and last time, and schedules ``w:close`` at ``ts + G``.
  A close finds the session still idle when the last time plus ``G`` has come (it is the close
  of the last event) and emits; the closes of the session's earlier events find a later last
  time and do nothing.
- so adding to a tumbling, hopping or session window only merges, overwrites and schedules:
  it reads nothing, whatever its key (also a key read from state, as after a join), and the
  planner puts the handler that adds and the close handler, which alone reads and deletes the
  window's state, in two stages, the latter partitioned by the window.
- ``distinct`` keeps the values seen as a frozenset, copied when a new value arrives.
- sliding: count and sum are an increment now and a decrement at ``ts + W`` (a timed write),
  so a read at ``t`` sees the values with ``ts`` in ``(t - W, t]``; mean is their quotient.
  min and max keep per key a tuple of (ts, value) pairs that can still be the minimum
  (maximum), oldest first; distinct keeps per key each value's latest time, oldest first.
  Both drop what has left the window on every add and skip it on every read. These are read
  and written by the key in the handler that adds, so they partition it by that key.
- ewma: one ``state.Map`` of averages per key, read and written by ``w__update``.
"""

from __future__ import annotations

import ast
import copy
from typing import Any

from ..model.errors import ProgramError
from ..model.handlers import HANDLER_KINDS_ATTR
from ..model.windows import Ewma, Window
from ._window_code import UNROLL, close_kind, source

__all__ = ["expand", "close_kind", "IMPORTS", "UNROLL"]

#: The names generated code uses for restream_kit's functions (and the builtins, which the
#: program may shadow).
IMPORTS = (
    "import builtins as _rsw_b\n"
    "from restream_kit import emit as _rsw_emit, on as _rsw_on, "
    "schedule as _rsw_schedule, state as _rsw_state"
)


def expand(tree: ast.Module, namespace: dict[str, Any], filename: str) -> ast.Module | None:
    """The expanded module of ``tree`` whose run gave ``namespace``; None if it has no window."""
    windows = _declarations(tree, namespace, filename)
    if not windows:
        return None
    handler_args = _handler_args(tree, namespace)
    out = copy.deepcopy(tree)
    _CallRewriter(windows, handler_args, filename).rewrite(out)
    generated: dict[int, list[ast.stmt]] = {}
    first = min(index for _, index in windows.values())
    for name, (window, index) in windows.items():
        lineno = tree.body[index].lineno
        code = source(name, window, namespace, tree, filename, lineno)
        if index == first and not generated.get(index):
            code = IMPORTS + "\n" + code
        stmts = ast.parse(code, filename=filename).body
        names = _defined(stmts) - {"_rsw_b", "_rsw_emit", "_rsw_on", "_rsw_schedule", "_rsw_state"}
        clash = sorted(n for n in names if n in namespace)
        if clash:
            raise ProgramError(
                f"{clash[0]!r} is a name of window {name!r}'s generated code: rename it",
                filename=filename,
                lineno=lineno,
            )
        for stmt in stmts:
            for node in ast.walk(stmt):
                if hasattr(node, "lineno"):
                    node.lineno = node.end_lineno = lineno
                    node.col_offset, node.end_col_offset = 0, 0
        generated.setdefault(index, []).extend(stmts)
    body: list[ast.stmt] = []
    for index, stmt in enumerate(out.body):
        body.append(stmt)
        body.extend(generated.get(index, []))
    out.body = body
    return ast.fix_missing_locations(out)


# -- finding the declarations ---------------------------------------------------------------


def _declarations(
    tree: ast.Module, namespace: dict[str, Any], filename: str
) -> dict[str, tuple[Window, int]]:
    """Window name -> (declaration, index of its assignment in the module body)."""
    found: dict[str, tuple[Window, int]] = {}
    names_of: dict[int, str] = {}
    for var, value in namespace.items():
        if not isinstance(value, Window):
            continue
        assignments = [i for i, stmt in enumerate(tree.body) if var in _assigned_names(stmt)]
        lineno = tree.body[assignments[-1]].lineno if assignments else None
        if id(value) in names_of:
            raise ProgramError(
                f"window {names_of[id(value)]!r} is also bound to {var!r}: give each window "
                "one name",
                filename=filename,
                lineno=lineno,
            )
        simple = [
            i
            for i in assignments
            if isinstance(tree.body[i], ast.Assign)
            and len(tree.body[i].targets) == 1
            and isinstance(tree.body[i].targets[0], ast.Name)
        ]
        if len(assignments) != 1 or len(simple) != 1:
            raise ProgramError(
                f"declare window {var!r} once, at module level, as `{var} = tumbling(...)` "
                "(or hopping, session, sliding, ewma)",
                filename=filename,
                lineno=lineno,
            )
        names_of[id(value)] = var
        value.name = var
        found[var] = (value, simple[0])
    return found


def _assigned_names(stmt: ast.stmt) -> set[str]:
    """Module-level names a top-level statement binds (assignments, defs, imports, loops...)."""
    names = set()
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {stmt.name}
    if isinstance(stmt, (ast.Import, ast.ImportFrom)):
        return {(a.asname or a.name).split(".")[0] for a in stmt.names}
    for node in ast.walk(stmt):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
    return names


def _handler_args(tree: ast.Module, namespace: dict[str, Any]) -> dict[str, str]:
    """Handler name -> the name of its event argument, for module-level handlers."""
    out = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.FunctionDef) and stmt.args.args:
            value = namespace.get(stmt.name)
            if getattr(value, HANDLER_KINDS_ATTR, None) is not None:
                out[stmt.name] = stmt.args.args[0].arg
    return out


def _defined(stmts: list[ast.stmt]) -> set[str]:
    return {name for stmt in stmts for name in _assigned_names(stmt)}


def _bound_in(fn: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> set[str]:
    """Names local to a function (parameters and anything it binds), not counting ``global``."""
    args = fn.args
    names = {a.arg for a in args.posonlyargs + args.args + args.kwonlyargs}
    names |= {a.arg for a in (args.vararg, args.kwarg) if a is not None}
    body = [fn.body] if isinstance(fn, ast.Lambda) else fn.body
    declared: set[str] = set()
    stack: list[ast.AST] = list(body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
            continue
        if isinstance(node, ast.Lambda):
            continue
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            declared |= set(node.names)
        stack.extend(ast.iter_child_nodes(node))
    return names - declared


# -- rewriting the uses -----------------------------------------------------------------------


class _CallRewriter(ast.NodeTransformer):
    """Replaces ``w.add(...)`` and friends inside functions with calls of the generated helpers."""

    def __init__(
        self, windows: dict[str, tuple[Window, int]], handler_args: dict[str, str], filename: str
    ):
        self.windows = {name: w for name, (w, _) in windows.items()}
        self.handler_args = handler_args
        self.filename = filename
        # Per enclosing function: (names bound there, the event name visible there or None).
        self.scopes: list[tuple[set[str], str | None]] = []

    def rewrite(self, tree: ast.Module) -> None:
        for i, stmt in enumerate(tree.body):
            tree.body[i] = self.visit(stmt)

    def _error(self, node: ast.AST, message: str) -> ProgramError:
        return ProgramError(message, filename=self.filename, lineno=getattr(node, "lineno", None))

    def _function(self, node: ast.AST) -> ast.AST:
        if not isinstance(node, ast.Lambda):
            # Decorators and defaults run in the enclosing scope.
            node.decorator_list = [self.visit(d) for d in node.decorator_list]
        node.args = self.visit(node.args)
        bound = _bound_in(node)
        if not self.scopes:
            event = self.handler_args.get(getattr(node, "name", ""))
        else:
            event = self.scopes[-1][1]
        if event is not None and event in bound and self.scopes:
            event = None  # a nested function that rebinds the event's name
        self.scopes.append((bound, event))
        try:
            body = node.body
            if isinstance(node, ast.Lambda):
                node.body = self.visit(body)
            else:
                node.body = [self.visit(stmt) for stmt in body]
        finally:
            self.scopes.pop()
        return node

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = _function

    def _window(self, name: str) -> Window | None:
        """The window ``name`` refers to in the current function (None at module level)."""
        if not self.scopes or name not in self.windows:
            return None
        if any(name in bound for bound, _ in self.scopes):
            return None
        return self.windows[name]

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if isinstance(node.ctx, ast.Load) and self._window(node.id) is not None:
            window = self.windows[node.id]
            uses = ", ".join(f"{node.id}.{m}(...)" for m in type(window).methods)
            raise self._error(
                node, f"window {node.id!r} can only be used as {uses} inside a function"
            )
        return node

    def visit_Call(self, node: ast.Call) -> ast.AST:
        func = node.func
        if not (
            isinstance(func, ast.Attribute)
            and isinstance(func.value, ast.Name)
            and self._window(func.value.id) is not None
        ):
            return self.generic_visit(node)
        name, method = func.value.id, func.attr
        window = self.windows[name]
        allowed = type(window).methods
        if method not in allowed:
            raise self._error(
                node,
                f"{name}.{method}(...) is not an operation of a {window.kind} window "
                f"(use {', '.join(allowed)})",
            )
        if any(isinstance(a, ast.Starred) for a in node.args) or any(
            k.arg is None for k in node.keywords
        ):
            raise self._error(node, f"pass the arguments of {name}.{method} one by one")
        args = [self.visit(a) for a in node.args]
        keywords = {k.arg: self.visit(k.value) for k in node.keywords}
        takes_ts = not isinstance(window, Ewma)
        unknown = set(keywords) - ({"ts"} if takes_ts else set())
        shape = _shape(window, method)
        if unknown or len(args) not in allowed[method]:
            raise self._error(node, f"{name}.{method} takes ({shape})")
        if method == "add" and len(args) == 1:
            if window.agg != "count":
                raise self._error(
                    node, f"{name}.add needs (key, value): the window computes {window.agg}"
                )
            args.append(ast.Constant(value=None))
        if takes_ts:
            ts = keywords.get("ts")
            if ts is None:
                event = self.scopes[-1][1]
                if event is None:
                    raise self._error(
                        node,
                        f"{name}.{method}(...) outside a handler needs the event's time: "
                        f"pass ts=, as in {name}.{method}(..., ts=e.ts)",
                    )
                ts = ast.Attribute(
                    value=ast.Name(id=event, ctx=ast.Load()), attr="ts", ctx=ast.Load()
                )
            args.append(ts)
        call = ast.Call(
            func=ast.Name(id=f"{name}__{method}", ctx=ast.Load()), args=args, keywords=[]
        )
        return ast.fix_missing_locations(ast.copy_location(call, node))


def _shape(window: Window, method: str) -> str:
    if method == "add":
        value = "key[, value]" if window.agg == "count" else "key, value"
        return f"{value}[, ts=]"
    if method == "update":
        return "key, x"
    return "key" if isinstance(window, Ewma) else "key[, ts=]"
