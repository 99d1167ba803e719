"""Generate a replay's hot loop: one function that dispatches a batch of log events by kind.

Handler bodies are inlined into the loop when that cannot change their meaning, and
``e.column`` becomes ``event[index]``, so the common handler costs neither a call nor an
attribute lookup per event. A handler is inlined only when its body has no ``return``, no
closures or generators (which could capture the loop's variables and outlive the event) and
every local is assigned at the top level before it is read (so a value from the previous event
can never leak in). Other handlers are called as functions. Scheduled events never take this
path; they are objects run through the handler functions.
"""

from __future__ import annotations

import ast
import copy
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["RUNNER_NAME", "SCHEDULED_RUNNER_NAME", "Dispatch", "build_runner"]

RUNNER_NAME = "_rs_run_batch"
SCHEDULED_RUNNER_NAME = "_rs_run_scheduled"
EVENT = "_rs_ev"
_NOT_INLINABLE = (
    ast.Return,
    ast.Yield,
    ast.YieldFrom,
    ast.Await,
    ast.Global,
    ast.Nonlocal,
    ast.Lambda,
    ast.FunctionDef,
    ast.AsyncFunctionDef,
    ast.ClassDef,
    ast.GeneratorExp,
)
_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


@dataclass(frozen=True)
class Dispatch:
    """The generated runner and what it needs: named tuples, or plain tuples suffice."""

    function: ast.FunctionDef
    inlined: tuple[str, ...]
    needs_named_events: bool


def build_runner(
    tree: ast.Module,
    handlers: Sequence[tuple[str, tuple[str, ...]]],
    columns: Sequence[str],
    kind_order: Sequence[str],
    *,
    guarded: bool = False,
    hooks: Sequence[tuple[int, str, str]] = (),
) -> Dispatch:
    """Build ``_rs_run_batch(batch)`` for ``handlers`` [(name, kinds, number)] over a log of
    ``columns``; ``number`` is the handler's place in declaration order.

    ``guarded`` (``on_error`` skip or quarantine) builds another loop: every handler is
    called, never inlined, inside ``try``, after clearing the runtime's journal of changes;
    when it raises, ``_rs_rt.rollback(exc)`` undoes the run. The default loop has none of it.

    ``hooks`` are statements ``(number, kind, source)`` that a Spark pass adds to the loop:
    in the branch of ``kind``, ``source`` runs just before the handlers declared at or after
    ``number`` (so it sees what the handlers declared before it did to the event), and a kind
    with hooks but no handler gets a branch of its own.
    """
    defs = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    index = {name: i for i, name in enumerate(columns)}
    bodies: dict[str, list[ast.stmt]] = {}
    needs_named = False
    inlined = []
    for name, _kinds, number in handlers:
        fn = defs[name]
        if guarded:
            needs_named = True
            bodies[name] = [_guarded_call(name, fn.lineno)]
            continue
        body, named = _inline(fn, number, index)
        needs_named |= named
        if body is None:
            needs_named |= True  # called as a function, it reads e.column by name
            call = ast.Call(
                func=ast.Name(name, ast.Load()), args=[ast.Name(EVENT, ast.Load())], keywords=[]
            )
            body = [ast.copy_location(ast.Expr(call), fn)]
        else:
            inlined.append(name)
        set_handler = _parse_stmt(f"_rs_rt.handler = {name!r}", fn.lineno)
        bodies[name] = [set_handler, *body]
    branches: list[tuple[str, list[ast.stmt]]] = []
    for kind in kind_order:
        waiting = sorted((n, src) for n, k, src in hooks if k == kind)
        stmts = []
        for name, kinds, number in handlers:
            if kind not in kinds:
                continue
            while waiting and waiting[0][0] <= number:
                stmts.append(_parse_stmt(waiting.pop(0)[1], 1))
            stmts += copy.deepcopy(bodies[name])
        stmts += [_parse_stmt(src, 1) for _n, src in waiting]
        if stmts:
            branches.append((kind, stmts))
    runner = _parse_stmt(
        f"""
def {RUNNER_NAME}(_rs_batch):
    _rs_scheduled = _rs_rt.scheduled
    _rs_future = _rs_rt.future
    for {EVENT} in _rs_batch:
        _rs_t = {EVENT}[1]
        if _rs_scheduled and _rs_scheduled[0][0] <= _rs_t:
            {SCHEDULED_RUNNER_NAME}(_rs_t)
        if _rs_future and _rs_future[0][0] <= _rs_t:
            _rs_rt.apply_due(_rs_t)
        _rs_rt.event = {EVENT}
        _rs_kind = {EVENT}[2]
""",
        1,
    )
    if guarded:
        runner.body.insert(0, _parse_stmt("_rs_journal = _rs_rt.journal", 1))
    loop = runner.body[-1]
    chain: list[ast.stmt] = loop.body
    for kind, stmts in branches:
        test = ast.Compare(ast.Name("_rs_kind", ast.Load()), [ast.Eq()], [ast.Constant(kind)])
        branch = ast.If(test=test, body=stmts, orelse=[])
        chain.append(branch)
        chain = branch.orelse
    return Dispatch(ast.fix_missing_locations(runner), tuple(inlined), needs_named)


def _guarded_call(name: str, lineno: int) -> ast.stmt:
    """The guarded loop's run of handler ``name``: see :func:`build_runner`."""
    return _parse_stmt(
        f"""
try:
    _rs_rt.handler = {name!r}
    _rs_journal.clear()
    {name}({EVENT})
except Exception as _rs_exc:
    _rs_rt.rollback(_rs_exc)
""",
        lineno,
    )


def _parse_stmt(source: str, lineno: int) -> ast.stmt:
    import textwrap

    stmt = ast.parse(textwrap.dedent(source)).body[0]
    for node in ast.walk(stmt):
        if hasattr(node, "lineno"):
            node.lineno = node.end_lineno = lineno
            node.col_offset = node.end_col_offset = 0
    return stmt


def _inline(
    fn: ast.FunctionDef, position: int, columns: dict[str, int]
) -> tuple[list | None, bool]:
    """The handler's body rewritten to run inside the loop, or None when it must stay a call."""
    if any(isinstance(n, _NOT_INLINABLE) for stmt in fn.body for n in ast.walk(stmt)):
        return None, False
    event_arg = fn.args.args[0].arg
    local = _function_locals(fn.body) - {event_arg}
    if not all(name.startswith("_rs_k") or _assigned_before_read(fn.body, name) for name in local):
        return None, False
    renamer = _Renamer(event_arg, {name: f"_h{position}_{name}" for name in local}, columns)
    body = [renamer.visit(copy.deepcopy(stmt)) for stmt in fn.body]
    return body, renamer.needs_named


def _function_locals(body: list[ast.stmt]) -> set[str]:
    """Names bound in the function's own scope (comprehension variables excluded)."""
    names: set[str] = set()

    def walk(node: ast.AST) -> None:
        if isinstance(node, _COMPREHENSIONS):
            return
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        for child in ast.iter_child_nodes(node):
            walk(child)

    for stmt in body:
        walk(stmt)
    return names


def _assigned_before_read(body: list[ast.stmt], name: str) -> bool:
    """True when a top-level ``name = ...`` comes before any other mention of ``name``."""
    for stmt in body:
        simple = isinstance(stmt, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == name for t in stmt.targets
        )
        if simple:
            return not _mentions(stmt.value, name)
        if _mentions(stmt, name):
            return False
    return False


def _mentions(node: ast.AST, name: str) -> bool:
    return any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(node))


class _Renamer(ast.NodeTransformer):
    def __init__(self, event_arg: str, renames: dict[str, str], columns: dict[str, int]):
        self.event_arg = event_arg
        self.renames = renames
        self.columns = columns
        self.needs_named = False

    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        value = node.value
        if (
            isinstance(value, ast.Name)
            and value.id == self.event_arg
            and isinstance(node.ctx, ast.Load)
            and node.attr in self.columns
        ):
            item = ast.Subscript(
                value=ast.Name(EVENT, ast.Load()),
                slice=ast.Constant(self.columns[node.attr]),
                ctx=ast.Load(),
            )
            return ast.copy_location(item, node)
        return self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id == self.event_arg:
            self.needs_named = True
            return ast.copy_location(ast.Name(EVENT, node.ctx), node)
        if node.id in self.renames:
            return ast.copy_location(ast.Name(self.renames[node.id], node.ctx), node)
        return node
