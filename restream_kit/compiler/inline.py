"""Generate a replay's hot loop: one function that dispatches a batch of log events by kind.

Handler bodies are inlined into the loop when that cannot change their meaning, and
``e.column`` becomes ``event[index]``, so the common handler costs neither a call nor an
attribute lookup per event. A handler is inlined only when its body has no ``return``, no
closures or generators (which could capture the loop's variables and outlive the event), no
``del`` of a local, and every read of a local comes where every path to it has assigned it
(so a value from the previous event can never leak in where the function would have raised
``UnboundLocalError``). Other handlers are called as functions. Scheduled events never take this
path; they are objects run through the handler functions.
"""

from __future__ import annotations

import ast
import copy
from collections.abc import Sequence
from dataclasses import dataclass

from .scopes import bound_by

__all__ = ["RUNNER_NAME", "SCHEDULED_RUNNER_NAME", "Dispatch", "build_runner", "key_source"]

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
    ``number`` (so it sees what the handlers declared before it did to the event), hooks of
    the same ``number`` in the order given, and a kind with hooks but no handler gets a
    branch of its own.
    """
    defs = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    index = {name: i for i, name in enumerate(columns)}
    bodies: dict[str, list[ast.stmt]] = {}
    needs_named = False
    inlined = []
    dispatched = set(kind_order)
    for name, kinds, number in handlers:
        fn = defs[name]
        if guarded:
            needs_named = True
            bodies[name] = [_guarded_call(name, fn.lineno)]
            continue
        if dispatched.isdisjoint(kinds):
            # No log event reaches it (a window's close handler, a timer's): it needs no
            # branch, nor named log events.
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
        # Hooks at the same place run in the order given (a stable sort by place).
        waiting = sorted(((n, src) for n, k, src in hooks if k == kind), key=lambda w: w[0])
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


# What a key expression may hold to be inlined: the event's columns, constants, tuples and
# arithmetic. Anything else (a helper's name, a call, a state) keeps the key a function.
_KEY_NODES = (
    ast.Expression, ast.Tuple, ast.Attribute, ast.Name, ast.Constant, ast.Load,
    ast.BinOp, ast.UnaryOp, ast.operator, ast.unaryop,
)  # fmt: skip


def key_source(expr: str, columns: Sequence[str], event_arg: str = "e") -> str | None:
    """Key expression ``expr`` over event ``event_arg`` as loop source reading the event's
    fields by position (``e.src`` -> ``_rs_ev[3]``), or None when it needs more than the
    event's ``columns``: then it stays a function of a named event."""
    try:
        tree = ast.parse(expr, mode="eval")
    except SyntaxError:
        return None
    for node in ast.walk(tree):
        if not isinstance(node, _KEY_NODES):
            return None
        if isinstance(node, ast.Name) and node.id != event_arg:
            return None
        if isinstance(node, ast.Attribute) and not (
            isinstance(node.value, ast.Name) and node.attr in columns
        ):
            return None
    renamer = _Renamer(event_arg, {}, {c: i for i, c in enumerate(columns)})
    body = renamer.visit(tree)
    if renamer.needs_named:  # the event itself, not one of its fields
        return None
    return ast.unparse(ast.fix_missing_locations(body))


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
    if not _always_assigned_before_read(fn.body, {n for n in local if not n.startswith("_rs_k")}):
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
        names.update(bound_by(node))
        for child in ast.iter_child_nodes(node):
            walk(child)

    for stmt in body:
        walk(stmt)
    return names


class _MaybeUnbound(Exception):
    """A local may be read before it is assigned (or is deleted): the handler stays a call."""


def _always_assigned_before_read(body: list[ast.stmt], local: set[str]) -> bool:
    """True when every read of a name in ``local`` comes where every path through ``body``
    has assigned it, and no local is deleted (a definite-assignment check)."""
    try:
        _Assigned(local).block(body, frozenset())
    except _MaybeUnbound:
        return False
    return True


class _Assigned:
    """Walks statements with the set of locals assigned on every path so far."""

    def __init__(self, local: set[str]):
        self.local = local

    def block(self, stmts: list[ast.stmt], done: frozenset) -> frozenset:
        for stmt in stmts:
            done = self.stmt(stmt, done)
        return done

    def reads(self, node: ast.AST | None, done: frozenset) -> None:
        """Every local ``node`` reads must be assigned (walrus targets never count as
        assigned: ``a and (b := 1)`` may not run)."""
        if node is None:
            return
        for n in ast.walk(node):
            if isinstance(n, _COMPREHENSIONS):
                # Its own variables shadow the handler's: refuse rather than tell them apart.
                if any(self.local & _bound(g.target) for g in n.generators):
                    raise _MaybeUnbound
                # A walrus there binds in the handler's scope, unseen by the renaming.
                if any(isinstance(m, ast.NamedExpr) for m in ast.walk(n)):
                    raise _MaybeUnbound
            elif isinstance(n, ast.Name) and n.id in self.local:
                if isinstance(n.ctx, ast.Del) or (isinstance(n.ctx, ast.Load) and n.id not in done):
                    raise _MaybeUnbound

    def stmt(self, stmt: ast.stmt, done: frozenset) -> frozenset:
        if isinstance(stmt, ast.Assign):
            self.reads(stmt.value, done)
            for target in stmt.targets:
                self.reads(target, done)
            return done | set().union(*(_bound(t) for t in stmt.targets))
        if isinstance(stmt, ast.AnnAssign):
            self.reads(stmt.value, done)
            self.reads(stmt.target, done)
            return done | _bound(stmt.target) if stmt.value is not None else done
        if isinstance(stmt, ast.AugAssign):
            if isinstance(stmt.target, ast.Name) and stmt.target.id in self.local:
                if stmt.target.id not in done:
                    raise _MaybeUnbound
            self.reads(stmt.target, done)
            self.reads(stmt.value, done)
            return done
        if isinstance(stmt, ast.Delete):
            for target in stmt.targets:
                if isinstance(target, ast.Name) and target.id in self.local:
                    raise _MaybeUnbound
                self.reads(target, done)
            return done
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            return done | {(a.asname or a.name).split(".")[0] for a in stmt.names}
        if isinstance(stmt, ast.If):
            self.reads(stmt.test, done)
            return self.block(stmt.body, done) & self.block(stmt.orelse, done)
        if isinstance(stmt, (ast.For, ast.AsyncFor)):
            self.reads(stmt.iter, done)
            self.block(stmt.body, done | _bound(stmt.target))
            return self.block(stmt.orelse, done)  # the body may not run at all
        if isinstance(stmt, ast.While):
            self.reads(stmt.test, done)
            self.block(stmt.body, done)
            return self.block(stmt.orelse, done)
        if isinstance(stmt, (ast.Try, getattr(ast, "TryStar", ast.Try))):
            after = [self.block(stmt.orelse, self.block(stmt.body, done))]
            for handler in stmt.handlers:
                self.reads(handler.type, done)
                bound = {handler.name} if handler.name else set()
                # Python unbinds the exception's name when the handler ends.
                after.append(self.block(handler.body, done | bound) - bound)
            return self.block(stmt.finalbody, frozenset.intersection(*after))
        if isinstance(stmt, (ast.With, ast.AsyncWith)):
            bound: set[str] = set()
            for item in stmt.items:
                self.reads(item.context_expr, done | bound)
                if item.optional_vars is not None:
                    bound |= _bound(item.optional_vars)
            return self.block(stmt.body, done | bound)
        if isinstance(stmt, ast.Match):
            self.reads(stmt.subject, done)
            for case in stmt.cases:
                bound = {
                    n.name
                    for n in ast.walk(case.pattern)
                    if isinstance(n, (ast.MatchAs, ast.MatchStar)) and n.name
                } | {
                    n.rest
                    for n in ast.walk(case.pattern)
                    if isinstance(n, ast.MatchMapping) and n.rest
                }
                self.reads(case.guard, done | bound)
                self.block(case.body, done | bound)
            return done  # no case may match
        # Expr, Assert, Raise, Pass, Break, Continue: reads only.
        self.reads(stmt, done)
        return done


def _bound(target: ast.AST) -> frozenset:
    """The plain names an assignment target binds (``a``, ``a, *b``; not ``d[k]``)."""
    if isinstance(target, ast.Name):
        return frozenset({target.id})
    if isinstance(target, (ast.Tuple, ast.List)):
        return frozenset().union(*(_bound(t) for t in target.elts))
    if isinstance(target, ast.Starred):
        return _bound(target.value)
    return frozenset()


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

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> ast.AST:
        if node.name in self.renames:
            node.name = self.renames[node.name]
        return self.generic_visit(node)

    def visit_MatchAs(self, node: ast.AST) -> ast.AST:
        if node.name in self.renames:
            node.name = self.renames[node.name]
        return self.generic_visit(node)

    visit_MatchStar = visit_MatchAs

    def visit_MatchMapping(self, node: ast.MatchMapping) -> ast.AST:
        if node.rest in self.renames:
            node.rest = self.renames[node.rest]
        return self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id == self.event_arg:
            self.needs_named = True
            return ast.copy_location(ast.Name(EVENT, node.ctx), node)
        if node.id in self.renames:
            return ast.copy_location(ast.Name(self.renames[node.id], node.ctx), node)
        return node
